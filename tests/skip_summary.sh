#!/bin/sh
# skip_summary.sh LOG... — the block `make test` ends with: every group of tests that did not run,
# how many, and the one thing that enables them. The logs hold one line per skip, written by the
# Criterion runner's hook (tests/skip_log.c: "c<TAB>suite/test<TAB>message") and by the Python
# runner (tests/python/run_pytest.sh and conftest.py: "py<TAB>test or files<TAB>message"). Missing
# logs count as empty. Prints nothing when nothing was skipped; always exits 0 (the runners' own
# status decides the run).
cat "$@" 2>/dev/null | awk -F '\t' '
function group(kind, name, msg,    m) {
    m = tolower(msg)
    if (name ~ /fine_tune/) return "ft"
    if (name ~ /^bpe\//) return "bpe"
    if (m ~ /transformers/ || name ~ /^gpt2_files\//) return "hf"
    if (m ~ /cuda|gpu/ || name ~ /cuda/) return "cuda"
    if (m ~ /torch/) return "torch"
    if (m ~ /mpirun|open ?mpi/) return "mpi"
    if (m ~ /onednn/) return "dnnl"
    if (m ~ /as root/) return "root"
    if (m ~ /numpy|pytest/) return "numpy"
    return "other"
}
BEGIN {
    title["torch"] = "PyTorch cross-checks"
    how["torch"] = "set FG_TORCH_PYTHON=/path/to/python with torch >= 2.4 and numpy (or apt-get install python3-torch)"
    title["hf"] = "transformers (Hugging Face GPT-2, Llama, NanoChat) cross-checks"
    how["hf"] = "set FG_TORCH_PYTHON to a python with torch >= 2.1, numpy and transformers (pip install transformers)"
    title["ft"] = "GPT-2 fine-tune test (transformers; the Llama and NanoChat ones too)"
    how["ft"] = "set FG_TORCH_PYTHON to a python with torch >= 2.1, numpy and transformers (pip install transformers)"
    title["bpe"] = "BPE tokenizer cross-checks (tokenizers, transformers, bpe-openai)"
    how["bpe"] = "set FG_TORCH_PYTHON to a python with tokenizers, transformers and bpe-openai (pip install tokenizers transformers bpe-openai)"
    title["cuda"] = "CUDA tests"
    how["cuda"] = "a machine with an NVIDIA GPU and nvcc (make shared builds build-cuda/libflashgrad.so)"
    title["mpi"] = "MPI tests"
    how["mpi"] = "apt-get install openmpi-bin libopenmpi-dev, then make again"
    title["dnnl"] = "oneDNN tests"
    how["dnnl"] = "apt-get install libdnnl-dev, then make again"
    title["root"] = "permission tests"
    how["root"] = "run make test as a user other than root"
    title["numpy"] = "Python package tests"
    how["numpy"] = "apt-get install python3-numpy python3-pytest (or set FG_PYTHON)"
    title["other"] = "other tests"
    how["other"] = "each says why:"
    n_order = split("torch hf ft bpe cuda mpi dnnl root numpy other", order, " ")
}
NF >= 2 {
    g = group($1, $2, $3)
    if ($1 == "py" && $2 ~ /\*/) files[g] = files[g] (files[g] ? ", " : "") $2
    else n[g]++
    if (g == "other") why[g] = why[g] "\n      " $2 ": " $3
    any = 1
}
END {
    if (!any) exit 0
    print ""
    print "== skipped, so NOT checked by this run (group, size, what enables it):"
    for (i = 1; i <= n_order; i++) {
        g = order[i]
        if (!(g in n) && !(g in files)) continue
        size = (g in n) ? n[g] " test" (n[g] == 1 ? "" : "s") : ""
        if (g in files) size = size (size ? " and " : "") "every test in " files[g]
        printf "  skipped: %s (%s) -- %s%s\n", title[g], size, how[g], why[g]
    }
}'
exit 0
