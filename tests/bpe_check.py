"""Cross-checks flashgrad's byte-level BPE (`flashgrad tokenizer encode`) against the reference
implementations, id for id, on corpora made here:

  - Hugging Face `tokenizers`: a GPT-2-style ByteLevel BPE and a Llama-3-style one (regex Split +
    ByteLevel, ignore_merges, added special tokens), both trained here and saved as tokenizer.json;
    the first also as vocab.json + merges.txt; `transformers`' fast tokenizer on the same folder;
  - `bpe-openai` (tiktoken's API, its own rank files): cl100k_base and o200k_base, with special
    tokens allowed and as ordinary text;
  - tokenizers that `flashgrad tokenizer train` wrote (GPT-2's and cl100k's patterns), loaded by
    `tokenizers`.

Usage: bpe_check.py FLASHGRAD WORKDIR [--speed]. Exit 0 when every id matches, 1 on a mismatch
(the first differing position printed), 77 when a reference package is missing (the reason on
stdout). --speed prints MB/s of flashgrad and of both references on one thread instead.
"""
import gzip
import os
import random
import shutil
import subprocess
import sys
import time

CANNOT_RUN = 77


def need(mod):
    try:
        return __import__(mod)
    except Exception as e:  # noqa: BLE001 - any import failure means this check cannot run
        print(f"cannot import {mod} ({type(e).__name__}: {e}); set FG_TORCH_PYTHON to a venv with tokenizers, transformers and bpe-openai")
        sys.exit(CANNOT_RUN)


def corpus(seed):
    """Documents that reach every branch of the pre-tokenizer patterns."""
    frags = [
        "Hello world", " hello", "HELLO", "I'll", "don't", "WE'RE", "they've", "it's", "I'M", "you'd", "'s", "''",
        "naïve café", "Straße", "Ωμέγα", "Привет мир", "مرحبا", "नमस्ते", "e\u0301", "A\u030a", "ǅungla",
        "12345678", "3.14159", "1,000,000", "٣٤٥", "１２３", "Ⅻ", "½",
        "😀", "👩\u200d💻", "🇫🇷", "🏳️\u200d🌈", "中文字符", "日本語のテキスト", "한국어",
        " ", "  ", "   ", "          ", "\n", "\n\n", "\n\n\n", "\t", "\t\t", "\r\n", " \n", "  \n  ",
        "\u0085", "\u00a0", "\u180e", "\u2028", "\u3000", "\u200b", "\u2009",
        "!!!", "?!", "...", "--", "/*", "*/", "#include <stdio.h>", "x+=1;", "a_b", "(){}", "<|endoftext|>", "<|fim_prefix|>",
        "http://example.com/a/b", "foo@bar.baz", "$100", "€5", "100%", "'tis", "o'clock", "deadbeef", "cafe\nbabe\n",
        "ab\ncd", "1234567\n", "12\n345",
    ]
    r = random.Random(seed)
    docs = ["".join(frags)]
    for _ in range(60):
        docs.append("".join(r.choice(frags) for _ in range(r.randint(1, 40))))
    docs += ["", " ", "\n", "a", "   trailing   ", "ends with newline\n", "ends with spaces  ", "x\n\n", "\n\nx"]
    return docs


def shakespeare():
    p = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "datasets", "tinyshakespeare", "input.txt")
    return open(p, encoding="utf-8").read() if os.path.exists(p) else "To be, or not to be, that is the question:\n" * 2000


def fg_encode_all(fg, tok, texts, workdir, special, extra=()):
    """flashgrad's ids of every text, from one run over one file per text."""
    paths = []
    for i, text in enumerate(texts):
        paths.append(os.path.join(workdir, f"in{i}.txt"))
        with open(paths[-1], "wb") as f:
            f.write(text.encode("utf-8", "surrogatepass"))
    cmd = [fg, "tokenizer", "encode", "--tokenizer", tok, *paths, *extra] + (["--allow-special"] if special else [])
    out = subprocess.run(cmd, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {out.returncode}: {out.stderr.decode(errors='replace')}")
    lines = out.stdout.split(b"\n")
    assert len(lines) == len(texts) + 1 and lines[-1] == b"", f"{len(lines)} lines for {len(texts)} files"
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def compare(name, got, want, text):
    if got == want:
        return True
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    print(f"MISMATCH {name}: {len(got)} ids vs {len(want)}; first difference at id {i}: flashgrad {got[i:i+8]} reference {want[i:i+8]}; text {text[:200]!r}")
    return False


def train_hf(workdir, docs):
    tk = need("tokenizers")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    made = {}
    # GPT-2 style: ByteLevel with its own regex
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=["<|endoftext|>"], show_progress=False)
    t.train_from_iterator(docs, tr)
    d = os.path.join(workdir, "hf_gpt2")
    os.makedirs(d, exist_ok=True)
    t.save(os.path.join(d, "tokenizer.json"))
    made["hf_gpt2"] = (d, t)
    d2 = os.path.join(workdir, "hf_gpt2_files")
    os.makedirs(d2, exist_ok=True)
    t.model.save(d2)  # vocab.json + merges.txt
    made["hf_gpt2_vocab_merges"] = (d2, t)
    # Llama-3 style: regex Split, ByteLevel without its regex, ignore_merges, special tokens
    pat = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    t3 = Tokenizer(models.BPE(ignore_merges=True))
    t3.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t3.decoder = decoders.ByteLevel()
    tr3 = trainers.BpeTrainer(vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], show_progress=False)
    t3.train_from_iterator(docs, tr3)
    d3 = os.path.join(workdir, "hf_llama3")
    os.makedirs(d3, exist_ok=True)
    t3.save(os.path.join(d3, "tokenizer.json"))
    made["hf_llama3"] = (d3, t3)
    # what Oniguruma's Ruby syntax reads its own way: X{n,m}+ is (?:X{n,m})+, \h a hex digit, ^ and $
    # at line starts and ends
    pat4 = r"\p{N}{2,3}+|\p{L}{1,2}+$|^\p{L}+|\h+|\s+(?!\S)|\s+|\p{N}{1,3}+|[^\s\p{L}\p{N}]++"
    t4 = Tokenizer(models.BPE())
    t4.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat4), behavior="isolated", invert=False),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t4.decoder = decoders.ByteLevel()
    t4.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                     show_progress=False))
    d4 = os.path.join(workdir, "hf_onig")
    os.makedirs(d4, exist_ok=True)
    t4.save(os.path.join(d4, "tokenizer.json"))
    made["hf_onig"] = (d4, t4)
    return made


def tiktoken_files(workdir):
    bo = need("bpe_openai")
    data = os.path.join(os.path.dirname(bo.__file__), "data")
    out = {}
    for name in ("cl100k_base", "o200k_base"):
        src = os.path.join(data, f"{name}.tiktoken.gz")
        if not os.path.exists(src):
            print(f"bpe-openai has no {src}")
            sys.exit(CANNOT_RUN)
        dst = os.path.join(workdir, f"{name}.tiktoken")
        with gzip.open(src, "rb") as f, open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
        out[name] = (dst, bo.get_encoding(name))
    return out


def main():
    fg, workdir = sys.argv[1], sys.argv[2]
    speed = "--speed" in sys.argv
    if speed:  # the references' thread pools take their size when first used
        os.environ["RAYON_NUM_THREADS"] = "1"
    os.makedirs(workdir, exist_ok=True)
    docs = corpus(1234)
    train_docs = docs + [shakespeare()[:200000]]
    hf = train_hf(workdir, train_docs)
    with open(os.path.join(workdir, "train_corpus.txt"), "w", encoding="utf-8") as f:
        f.write("".join(train_docs))
    tt = tiktoken_files(workdir)
    if speed:
        return run_speed(fg, workdir, hf, tt)
    transformers = need("transformers")
    # one document holding all of them, and each on its own (a piece never spans documents)
    texts = docs + ["".join(docs), shakespeare()[:100000]]
    ok = True
    n = 0

    def check(name, tok, want, special, subset=texts):
        nonlocal ok, n
        got = fg_encode_all(fg, tok, subset, workdir, special)
        for i, text in enumerate(subset):
            ok &= compare(f"{name} doc {i}", got[i], want(text), text)
            n += 1

    for name, (path, t) in hf.items():
        check(name, path, lambda x, t=t: t.encode(x, add_special_tokens=False).ids, True)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(hf["hf_llama3"][0], "tokenizer.json"))
    check("transformers fast", hf["hf_llama3"][0], lambda x: fast(x, add_special_tokens=False)["input_ids"], True, texts[:20])
    tk = need("tokenizers")
    for pat in ("gpt2", "cl100k_base"):
        d = os.path.join(workdir, f"fg_trained_{pat}")
        subprocess.run([fg, "tokenizer", "train", "--vocab-size", "700", "--pattern", pat, "--out", d, "--overwrite",
                        os.path.join(workdir, "train_corpus.txt")], check=True, capture_output=True)
        t = tk.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        check(f"flashgrad-trained {pat}", d, lambda x, t=t: t.encode(x, add_special_tokens=False).ids, True)
    for name, (path, enc) in tt.items():
        check(f"{name} allowed_special", path, lambda x, e=enc: e.encode(x, allowed_special="all"), True)
        check(f"{name} ordinary", path, lambda x, e=enc: e.encode_ordinary(x), False)
    print(f"{n} encodings compared: {'all equal' if ok else 'MISMATCHES above'}")
    return 0 if ok else 1


def run_speed(fg, workdir, hf, tt):
    """MB/s on one thread over the same documents: Tiny Shakespeare repeated to about 8 MB, cut at
    blank lines into documents (each reference is given the documents; flashgrad the whole file,
    which its pre-tokenizer cuts at the same places)."""
    text = shakespeare()
    text = text * max(1, (8 << 20) // len(text))
    docs = [d + "\n\n" for d in text.split("\n\n")]
    text = "".join(docs)
    path = os.path.join(workdir, "speed.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    mb = len(text.encode()) / 1e6
    print(f"corpus: Tiny Shakespeare repeated, {mb:.1f} MB in {len(docs)} documents; one thread each")
    for name, (tok, ref) in [("hf_gpt2", hf["hf_gpt2"]), ("hf_llama3", hf["hf_llama3"]), ("cl100k_base", tt["cl100k_base"]),
                             ("o200k_base", tt["o200k_base"])]:
        out = subprocess.run([fg, "tokenizer", "encode", "--tokenizer", tok, path, "--bench", "--repeat", "3"],
                             capture_output=True, text=True, check=True).stdout.strip()
        fg_mbs = float(out.split()[-5])
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            if name.startswith("hf"):
                ref.encode_batch(docs, add_special_tokens=False)
            else:
                for d in docs:
                    ref.encode_ordinary(d)
            best = min(best, time.perf_counter() - t0)
        ref_name = "tokenizers" if name.startswith("hf") else "bpe-openai"
        print(f"{name:12s} flashgrad {fg_mbs:7.2f} MB/s   {ref_name:10s} {mb / best:7.2f} MB/s   flashgrad / reference {fg_mbs / (mb / best):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
