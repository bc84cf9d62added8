#!/usr/bin/env python3
"""bench_scale.py — training speed from a toy GPT to GPT-2 small, flashgrad and PyTorch in the same run.

For each configuration (default: the three below) it trains the same GPT in both frameworks for a
few steps and reports the steady-state step: median step time, tokens/s, MFU and the process's
peak resident memory (ru_maxrss), as a table and as CSV rows (--csv):

  L4  H4  C128 T64   B12   nanoGPT's CPU quick start (the Tiny Shakespeare config), vocabulary 65
  L6  H6  C384 T256  B8    nanoGPT's shakespeare-char model, vocabulary 65
  L12 H12 C768 T1024 B1    GPT-2 small, vocabulary 50304 (GPT-2's 50257 padded, as nanoGPT does)
  nanochat-L6-C384         `--arch nanochat` (rotary, QK-norm, parameter-free RMSNorm, ReLU², untied head,
                           softcap 15) at L6-C384's shape
  nanochat-gpt2-small      `--arch nanochat` at GPT-2 small's shape
  llama-smollm2-135m       `--arch llama` at SmolLM2-135M's shape: L30 H9, 3 K/V heads, C576, SwiGLU 1536,
                           theta 100000, tied head, vocabulary 49152, T1024 B1

The last three train, in PyTorch, transformers' NanoChatForCausalLM / LlamaForCausalLM with SDPA
(bench/train_torch_arch.py), the same AdamW and clipping.

  flashgrad: `flashgrad bench train --data FILE ... --warmup-steps W --steps N` (its MFU line,
             its peak RSS line, its FMA peak);
  PyTorch:   bench/train_torch_cpu.py's model (nanoGPT's architecture, F.scaled_dot_product_attention
             with is_causal=True where the installed torch has it, else the explicit masked softmax),
             in a child process with OMP_NUM_THREADS=N and torch.set_num_threads(N), the same AdamW
             and clipping, W + N steps of which the first W are untimed.

MFU = tokens/s × (6 · params + 12 · L · C · T) / the float32 FMA peak that flashgrad measured on the
same threads in the same run (ops/cpu/peak.h; `flashgrad bench peak` prints the long form), for both
frameworks alike. Every flashgrad run measures the peak again; a neighbour or a clock dip can only
make a measurement low, never high, so every row divides by the highest peak of the whole run (the
line after each configuration, by the highest so far). params counts every parameter once (a tied LM
head is the token embedding; an untied model's input embedding is a lookup and is left out of the 6 N).

Data. Vocabulary 65: a synthetic file of 2^20 characters drawn uniformly from 65 symbols (the size of
Tiny Shakespeare's), written to a temporary folder; both read it and see the same batches (the
script reimplements flashgrad's batch draws). Any other vocabulary V: synthetic tokens uniform in
[0, V), flashgrad's `bench train --synthetic-vocab V` and, for PyTorch, 2^21 uniform tokens from
numpy (speed only: the two see different batches, which costs the same). The losses are not the
point here: the model shapes are. --vocab V gives every configuration vocabulary V instead of its
own.

Timings on a shared machine are noisy: the configurations run one after the other, flashgrad then
PyTorch (--repeat R alternates the order and reports the best of R per framework).
Without torch (or numpy) in this python it says so in one line and measures flashgrad alone.
Exit status: 0 when every run finished, 1 when one failed, 2 on usage errors.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_torch_cpu as ttc  # noqa: E402  (the PyTorch model, the batch draws, the worker)

CONFIGS = {
    "L4-C128": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, vocab=65),
    "L6-C384": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=8, vocab=65),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch_size=1, vocab=50304),
    # today's architectures (train/gpt.h presets), against transformers' own model in PyTorch
    "nanochat-L6-C384": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=8, vocab=65,
                             arch="nanochat"),
    "nanochat-gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch_size=1, vocab=50304,
                                arch="nanochat"),
    "llama-smollm2-135m": dict(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, mlp_hidden=1536, block_size=1024,
                               batch_size=1, vocab=49152, arch="llama", rope_theta=100000, untied=0),
    # the GPT-2 path at the Llama row's size (the same layers, width, heads, context and vocabulary; its
    # 4C GELU MLP has SwiGLU-1536's FLOPs): the MFU the Llama row is compared with
    "gpt2-smollm2-shape": dict(n_layer=30, n_head=9, n_embd=576, block_size=1024, batch_size=1, vocab=49152),
}
# the presets' settings (train/gpt.h fg_gpt_arch_preset) where a configuration leaves them out
ARCH_DEFAULTS = {"llama": dict(rope_theta=10000, untied=1, softcap=0),
                 "nanochat": dict(rope_theta=10000, untied=1, softcap=15)}
OPT = dict(lr=1e-3, min_lr=1e-4, warmup=0, weight_decay=0.1, beta1=0.9, beta2=0.99, grad_clip=1.0)
CSV_FIELDS = ["config", "framework", "version", "n_layer", "n_head", "n_embd", "block_size", "batch_size", "vocab",
              "params", "flops_per_token", "step_ms", "tokens_per_s", "mfu", "peak_rss_mib", "fma_peak_gflops",
              "threads", "simd", "warmup_steps", "timed_steps", "machine"]


def arch_of(c):
    """c with its architecture's settings filled in (GPT-2: nothing to fill)."""
    arch = c.get("arch", "gpt2")
    if arch == "gpt2":
        return dict(c, arch="gpt2")
    out = dict(ARCH_DEFAULTS[arch], **c)
    out.setdefault("n_kv_head", out["n_head"])
    out.setdefault("mlp_hidden", 4 * out["n_embd"])
    return out


def flops_per_token(n_params, c, counted=False):
    """6 per parameter a token's products touch, plus attention's 12 L C T. An untied model's input
    embedding is a lookup, not a product: it is left out (a tied one is the LM head's matrix).
    counted: n_params is already the N of flashgrad's MFU line, which leaves that embedding out."""
    c = arch_of(c)
    matmul_params = n_params - (c["vocab"] * c["n_embd"] if c.get("untied") and not counted else 0)
    return 6.0 * matmul_params + 12.0 * c["n_layer"] * c["n_embd"] * c["block_size"]


def write_text(path, n=1 << 20, seed=1):
    import random
    r = random.Random(seed)
    alphabet = [chr(c) for c in range(32, 97)]  # 65 symbols
    with open(path, "w") as f:
        f.write("".join(r.choice(alphabet) for _ in range(n)))


def run_flashgrad(a, name, c, data_args):
    cmd = [a.flashgrad, "bench", "train"] + data_args + [
        "--n-layer", c["n_layer"], "--n-head", c["n_head"], "--n-embd", c["n_embd"], "--block-size", c["block_size"],
        "--batch-size", c["batch_size"], "--dropout", 0, "--attn", "flash", "--warmup-steps", c["warmup_steps"],
        "--steps", c["steps"], "--threads", a.threads, "--seed", a.seed, "--lr", OPT["lr"], "--min-lr", OPT["min_lr"],
        "--warmup", 0, "--weight-decay", OPT["weight_decay"], "--beta1", OPT["beta1"], "--beta2", OPT["beta2"],
        "--grad-clip", OPT["grad_clip"]]
    c = arch_of(c)
    if c["arch"] != "gpt2":
        cmd += ["--arch", c["arch"], "--n-kv-head", c["n_kv_head"], "--mlp-hidden", c["mlp_hidden"],
                "--rope-theta", c["rope_theta"], "--tie-head", 0 if c["untied"] else 1,
                "--logit-softcap", c["softcap"]]
    cmd = [str(x) for x in cmd]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout)
        raise RuntimeError("%s: flashgrad bench train exited with %d" % (name, p.returncode))
    out = p.stdout

    def grab(pattern):
        m = re.search(pattern, out, re.M)
        if not m:
            raise RuntimeError("%s: flashgrad bench train printed no line matching %r:\n%s" % (name, pattern, out))
        return m

    med = float(grab(r"^step time: median ([0-9.]+) ms").group(1))
    m = grab(r"^mfu: ([0-9.]+)% .*N = (\d+); fma peak ([0-9.]+) GFLOP/s, (\w+), (\d+) threads")
    for line in out.splitlines():
        if line.startswith(("step time", "throughput", "mfu", "peak RSS")):
            print("  | " + line)
    return {"step_ms": med, "tokens_per_s": c["batch_size"] * c["block_size"] / (med / 1e3),
            "mfu": float(m.group(1)) / 100, "params": int(m.group(2)), "peak": float(m.group(3)), "simd": m.group(4),
            "threads": int(m.group(5)),
            "rss_mib": float(grab(r"^peak RSS: ([0-9.]+) MiB").group(1)),
            "machine": grab(r"^machine: (.*)$").group(1).strip()}


def run_torch(a, name, c, tmp):
    if arch_of(c)["arch"] != "gpt2":
        import train_torch_arch as tta
        W = c["warmup_steps"]
        cfg = dict(arch_of(c), **OPT)
        cfg.update(steps=W + c["steps"], untimed=W, threads=a.threads, seed=a.seed)
        r = tta.run_torch(cfg, tmp)
        return {"step_ms": r["median_s"] * 1e3, "tokens_per_s": r["tok_s"], "n_params": r["n_params"],
                "rss_mib": r["peak_rss_kb"] / 1024.0, "version": r["torch"], "attention": r["attention"]}
    cfg = dict(c, **OPT)
    W = c["warmup_steps"]
    cfg.update(steps=W + c["steps"], untimed=W, decay_steps=W + c["steps"],
               threads=a.threads, torch_blas_threads=1, eval_iters=0, init="own", seed=a.seed)
    cfg.update(vocab=c["vocab"], train_npy=c["train_npy"], val_npy=c["val_npy"])
    r = ttc.run_torch(cfg, tmp)
    return {"step_ms": r["median_s"] * 1e3, "tokens_per_s": r["tok_s"], "n_params": r["n_params"],
            "rss_mib": r["peak_rss_kb"] / 1024.0, "version": r["torch"], "attention": r["attention"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashgrad", default=os.path.join(ROOT, "build", "flashgrad"))
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated, of: " + ", ".join(CONFIGS))
    ap.add_argument("--steps", default="20,5,2,5,2,2,2",
                    help="timed steps per configuration (one number for all, or a list; the median counts, so "
                         "more steps ride out a neighbour's burst)")
    ap.add_argument("--warmup-steps", default="3,2,1,2,1,1,1",
                    help="untimed steps first, per configuration as --steps (both frameworks; PyTorch's first "
                         "steps are slow)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--repeat", type=int, default=1, help="rounds per configuration; the best of each is kept")
    ap.add_argument("--vocab", type=int, default=0,
                    help="every configuration's vocabulary (0: each its own; 65: a synthetic text; any other: "
                         "synthetic tokens)")
    ap.add_argument("--no-torch", action="store_true", help="flashgrad only")
    ap.add_argument("--csv", help="write the rows to this file")
    a = ap.parse_args()
    names = [x for x in a.configs.split(",") if x]
    try:
        steps = [int(x) for x in a.steps.split(",")]
        warm = [int(x) for x in a.warmup_steps.split(",")]
    except ValueError:
        ap.error("--steps and --warmup-steps take integers separated by commas")
    if any(n not in CONFIGS for n in names) or not names:
        ap.error("--configs: one or more of %s" % ", ".join(CONFIGS))
    if len(steps) == 1:
        steps = steps * len(names)
    if len(warm) == 1:
        warm = warm * len(names)
    if len(steps) < len(names) or len(warm) < len(names) or min(steps) < 1 or min(warm) < 1 or a.threads < 1 \
            or a.repeat < 1:
        ap.error("need a positive --steps per configuration, --warmup-steps >= 1, --threads >= 1, --repeat >= 1")
    if a.vocab != 0 and not 2 <= a.vocab <= 1 << 24:
        ap.error("--vocab is 0 or in [2, 2^24] (65: a synthetic text; else synthetic tokens)")
    if not os.access(a.flashgrad, os.X_OK):
        ap.error("no flashgrad binary at %s (run make first)" % a.flashgrad)
    have_torch = False
    if not a.no_torch:
        try:
            import numpy  # noqa: F401
            import torch
            have_torch = True
            print("bench_scale: PyTorch %s (%s)" % (torch.__version__, sys.executable))
        except ImportError:
            print("bench_scale: %s has no torch (or numpy): PyTorch skipped, flashgrad only" % sys.executable)

    tmp = tempfile.mkdtemp(prefix="fg_bench_scale_")
    rows, failed = [], False
    peaks = []  # every FMA peak flashgrad measured in this run; the highest is the one used
    try:
        prepared = {}

        def prepare(V):
            """flashgrad's data flags and PyTorch's token files for vocabulary V, made once per V"""
            if V in prepared:
                return prepared[V]
            tr, va = os.path.join(tmp, "train_%d.npy" % V), os.path.join(tmp, "val_%d.npy" % V)
            if V == 65:
                data = os.path.join(tmp, "text.txt")
                write_text(data)
                data_args = ["--data", data]
            else:
                data_args = ["--synthetic-vocab", str(V)]
            if have_torch:
                import numpy as np
                if V == 65:
                    tr_tok, va_tok, _, _ = ttc.load_text(np, data)
                else:
                    g = np.random.default_rng(1)
                    tr_tok, va_tok = g.integers(0, V, 1 << 21), g.integers(0, V, 1 << 18)
                np.save(tr, tr_tok)
                np.save(va, va_tok)
            prepared[V] = (data_args, tr, va)
            return prepared[V]

        for name, n, w in zip(names, steps, warm):
            V = a.vocab or CONFIGS[name]["vocab"]
            data_args, tr, va = prepare(V)
            c = dict(CONFIGS[name], steps=n, warmup_steps=w, vocab=V, train_npy=tr, val_npy=va)
            print("\n-- %s: L%d H%d C%d T%d B%d, vocabulary %d, %d + %d steps --" % (
                name, c["n_layer"], c["n_head"], c["n_embd"], c["block_size"], c["batch_size"], V,
                w, n), flush=True)
            fg = th = None
            try:
                for r in range(a.repeat):
                    order = ["fg", "torch"] if r % 2 == 0 else ["torch", "fg"]
                    for who in order:
                        if who == "fg":
                            x = run_flashgrad(a, name, c, data_args)
                            peaks.append(x["peak"])
                            fg = x if fg is None or x["step_ms"] < fg["step_ms"] else fg
                        elif have_torch:
                            x = run_torch(a, name, c, tmp)
                            th = x if th is None or x["step_ms"] < th["step_ms"] else th
            except RuntimeError as e:
                print("bench_scale: %s" % e, file=sys.stderr)
                failed = True
                continue
            fpt = flops_per_token(fg["params"], c, counted=True)
            peak = max(peaks)
            fg["mfu"] = fg["tokens_per_s"] * fpt / (peak * 1e9)
            rows.append(dict(config=name, framework="flashgrad", version="", n_layer=c["n_layer"], n_head=c["n_head"],
                             n_embd=c["n_embd"], block_size=c["block_size"], batch_size=c["batch_size"], vocab=V,
                             params=fg["params"], flops_per_token="%.6g" % fpt, step_ms="%.2f" % fg["step_ms"],
                             tokens_per_s="%.1f" % fg["tokens_per_s"], mfu="%.4f" % fg["mfu"],
                             peak_rss_mib="%.1f" % fg["rss_mib"], fma_peak_gflops="%.1f" % peak,
                             threads=fg["threads"], simd=fg["simd"], warmup_steps=w, timed_steps=n, machine=fg["machine"]))
            line = "%s: flashgrad %.1f ms/step, %.0f tok/s, MFU %.1f%%, %.0f MiB" % (
                name, fg["step_ms"], fg["tokens_per_s"], 100 * fg["mfu"], fg["rss_mib"])
            if th:
                tf = flops_per_token(th["n_params"], c)
                th_mfu = th["tokens_per_s"] * tf / (peak * 1e9)
                rows.append(dict(rows[-1], framework="pytorch", version=th["version"], params=th["n_params"],
                                 flops_per_token="%.6g" % tf, step_ms="%.2f" % th["step_ms"],
                                 tokens_per_s="%.1f" % th["tokens_per_s"], mfu="%.4f" % th_mfu,
                                 peak_rss_mib="%.1f" % th["rss_mib"], simd=""))
                line += "; PyTorch %s %.1f ms/step, %.0f tok/s, MFU %.1f%%, %.0f MiB (%s); speed-up %.2fx" % (
                    th["version"], th["step_ms"], th["tokens_per_s"], 100 * th_mfu, th["rss_mib"],
                    "sdpa" if "scaled" in th["attention"] else "explicit attention",
                    th["step_ms"] / fg["step_ms"])
            print(line, flush=True)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)

    if rows:  # every row against the run's highest peak, which later configurations may have raised
        peak = max(peaks)
        for r in rows:
            r["mfu"] = "%.4f" % (float(r["tokens_per_s"]) * float(r["flops_per_token"]) / (peak * 1e9))
            r["fma_peak_gflops"] = "%.1f" % peak
    print("\n| config | framework | params | step ms | tokens/s | MFU | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s %s | %.2fM | %s | %s | %.1f%% | %s |" % (
            r["config"], r["framework"], r["version"], r["params"] / 1e6, r["step_ms"], r["tokens_per_s"],
            100 * float(r["mfu"]), r["peak_rss_mib"]))
    if rows:
        print("fma peak: %s GFLOP/s float32 (%s, %s threads; the highest of the %d flashgrad measured in this "
              "run, lowest %.1f)" % (rows[-1]["fma_peak_gflops"], rows[0]["simd"], rows[-1]["threads"], len(peaks),
                                     min(peaks)))
    if a.csv and rows:
        os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            w.writeheader()
            w.writerows(rows)
        print("bench_scale: %d rows written to %s" % (len(rows), a.csv))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
