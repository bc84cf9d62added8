#!/usr/bin/env python3
"""generate_torch_cpu.py — greedy generation speed: flashgrad's KV cache, flashgrad recomputing the
context per token, and nanoGPT's generate() in PyTorch, in the same run on the same weights.

The model has GPT-2 small's shape (L12 H12 C768, block 1024, vocabulary 50304) with random weights:
one training step on synthetic token files (`flashgrad train --data-bin`) writes a checkpoint, and
PyTorch loads the same model.safetensors into nanoGPT's GPT (tests/gpt_generate_torch_check.py's,
which is nanoGPT's model.py with flashgrad's tanh GELU). For each case "prompt P, N new tokens" the
three generate N greedy tokens after the same P-token prompt:
  flashgrad KV cache:    flashgrad sample --ckpt RUN --prompt-ids ... --tokens N --temperature 0 --speed
  flashgrad recompute:   the same with --no-kv-cache
  nanoGPT generate():    model.generate(idx, N, temperature=1.0, top_k=1) (greedy by its own top-k mask)
Time: the generation alone (flashgrad's speed line; torch around generate()), prompt processing
included; tokens/s = N / time. The three token lists are compared too (they should be identical).
nanoGPT has no KV cache: its generate() recomputes the whole context for every token.

Threads: --threads N for both (FG_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads).
Usage: generate_torch_cpu.py --flashgrad build/flashgrad [--cases 1:64,960:16] [--threads 2]
Exit: 0 done, 1 a run failed, 2 usage.
"""
import argparse
import importlib.util
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--flashgrad", required=True)
ap.add_argument("--cases", default="1:64,960:16", help="P:N pairs: prompt tokens, new tokens")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--skip-recompute", action="store_true", help="leave out flashgrad's --no-kv-cache runs")
args = ap.parse_args()
try:
    cases = [tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")]
    assert all(p >= 1 and n >= 1 and p + n - 1 <= 1024 for p, n in cases)
except (ValueError, AssertionError):
    print(f"generate_torch_cpu.py: --cases '{args.cases}' is not a list of P:N with 1 <= P, N and P + N - 1 <= 1024")
    sys.exit(2)

env = dict(os.environ, FG_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads),
           OMP_NUM_THREADS=str(args.threads))
try:
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("nanogpt", os.path.join(here, "..", "tests", "gpt_generate_torch_check.py"))
    nano = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nano)
except (ImportError, SystemExit) as e:
    torch = None
    print(f"generate_torch_cpu.py: no usable torch/numpy in {sys.executable} ({e}): flashgrad only")

L, H, C, T, V = 12, 12, 768, 1024, 50304
tmp = tempfile.mkdtemp(prefix="fg_gen_bench_")
rng = np.random.default_rng(1) if torch else None
ids = (rng.integers(0, 50257, 1 << 16) if rng is not None else
       [((i * 2654435761) >> 7) % 50257 for i in range(1 << 16)])
data = os.path.join(tmp, "data")
os.makedirs(data)
for split in ("train", "val"):
    with open(os.path.join(data, split + ".bin"), "wb") as f:
        f.write(bytes(np.asarray(ids, dtype=np.uint16)) if torch else
                b"".join(int(x).to_bytes(2, "little") for x in ids))
run = os.path.join(tmp, "run")
cmd = [args.flashgrad, "train", "--data-bin", data, "--vocab-size", str(V), "--n-layer", str(L), "--n-head", str(H),
       "--n-embd", str(C), "--block-size", str(T), "--batch-size", "1", "--steps", "1", "--warmup", "0",
       "--eval-every", "0", "--eval-iters", "1", "--samples", "0", "--out", run]
r = subprocess.run(cmd, env=env, capture_output=True, text=True)
if r.returncode:
    print("flashgrad train failed:", r.stderr.strip())
    sys.exit(1)

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"machine: {cpu}, {os.cpu_count()} cpus, {args.threads} threads; torch {torch.__version__ if torch else '-'}; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
print(f"model: GPT-2 small shape L{L} H{H} C{C}, block {T}, vocabulary {V}, random weights, float32, greedy")

model = None
if torch:
    model = nano.GPT(L, H, C, T, V)
    sd = nano.load_st(os.path.join(run, "model.safetensors"))
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd, strict=False)
    model.eval()
    with torch.no_grad():  # warm-up, untimed: torch's first calls set up its kernels
        model.generate(torch.tensor([[0]]), 2, temperature=1.0, top_k=1)


def flashgrad(prompt, n, extra):
    c = [args.flashgrad, "sample", "--ckpt", run, "--prompt-ids", ",".join(map(str, prompt)), "--tokens", str(n),
         "--temperature", "0", "--speed"] + extra
    r = subprocess.run(c, env=env, capture_output=True, text=True)
    if r.returncode:
        print("flashgrad sample failed:", r.stderr.strip())
        sys.exit(1)
    m = re.search(r"tokens in ([0-9.]+) s", r.stderr)
    return float(m.group(1)), [int(x) for x in r.stdout.split()]


rows = []
status = 0
for p, n in cases:
    prompt = [int(x) for x in ids[:p]]
    t_kv, tok_kv = flashgrad(prompt, n, [])
    t_re, tok_re = flashgrad(prompt, n, ["--no-kv-cache"]) if not args.skip_recompute else (None, None)
    t_pt, tok_pt = None, None
    if model is not None:
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model.generate(torch.tensor([prompt]), n, temperature=1.0, top_k=1)
            t_pt = time.perf_counter() - t0
        tok_pt = out[0].tolist()
    same = all(t is None or t == tok_kv for t in (tok_re, tok_pt))
    status |= 0 if same else 1
    rows.append((p, n, t_kv, t_re, t_pt, same))

fmt = lambda t, n: f"{n / t:10.2f}" if t else f"{'-':>10}"
print(f"\n{'prompt':>6} {'new':>4} | tokens/s: {'fg KV cache':>11} {'fg recompute':>12} {'nanoGPT gen':>11} | "
      f"{'KV speed-up':>11} {'same tokens':>11}")
for p, n, a, b, c, same in rows:
    ratio = f"{c / a:10.1f}x" if c else f"{'-':>11}"
    print(f"{p:6d} {n:4d} | {'':9} {fmt(a, n):>11} {fmt(b, n):>12} {fmt(c, n):>11} | {ratio} {'yes' if same else 'NO':>11}")
subprocess.run(["rm", "-rf", tmp])
sys.exit(status)
