#!/usr/bin/env python3
"""train_torch_cpu.py — flashgrad's training against the same GPT in PyTorch (nanoGPT's model), side by side.

One invocation trains the Tiny Shakespeare configuration (cli/train_defaults.h, fg_defaults_text:
4 layers, 4 heads, 128 wide, block 64, batch 12, char-level) for --steps optimizer steps, once per
seed in each framework, alternating (round r: flashgrad then PyTorch, or the other way on odd
rounds so slow drift of a shared machine hits both):

  flashgrad: `flashgrad bench train --data FILE ... --eval-iters E --print-step-times` (its warm-up
             steps are the first --untimed steps; they train too);
  PyTorch:   a GPT written here from the architecture nanoGPT uses (pre-LN blocks
             x + attn(ln_1(x)), x + mlp(ln_2(x)); one c_attn linear of width 3C and c_proj; MLP 4C
             with tanh GELU; final LayerNorm; LM head tied to the token embedding; biases; dropout 0),
             in a child process started with OMP_NUM_THREADS=N OPENBLAS_NUM_THREADS=1 and
             torch.set_num_threads(N), N = --threads (the setting under which nanoGPT runs fastest
             on this machine). Attention is F.scaled_dot_product_attention where the installed torch
             has it, else softmax(QK^T / sqrt(d) + causal mask) V written out, as nanoGPT does.

What is the same in both, so that the losses can be compared:
  - the data: the file's bytes, vocabulary = the distinct bytes in increasing order (datasets/
    tokenizer.c), the first 90% train and the last 10% validation (datasets/text.c);
  - the batches: this script reimplements flashgrad's Philox4x32-10 draws (tensor/philox.h,
    datasets/text.c), so step s of seed S sees exactly flashgrad's batch, and the validation loss is
    measured on flashgrad's fixed evaluation batches (fg_trainer_eval_seed);
  - the initial weights (--torch-init flashgrad, the default): flashgrad's GPT-2 initialization
    (normal 0.02, residual projections 0.02 / sqrt(2 L), biases 0, LayerNorm 1) drawn from the same
    Philox streams (train/gpt.c, tensor/tensor.c), so both start from the same float32 weights and
    their first losses agree to rounding. --torch-init own draws nanoGPT's scheme from torch's RNG;
  - the optimizer: AdamW with train's text defaults read from cli/train_defaults.h (lr, min lr,
    warm-up, betas, weight decay on the 2-d weights only, grad-norm clipping), eps 1e-8, linear
    warm-up then cosine to min lr at the last step (train/adamw.c's fg_lr_at).

Figures:
  tokens/s    B*T / median step time over the timed steps (all but the first --untimed), per run;
              ratio   = flashgrad tokens/s / PyTorch tokens/s within each round; reported: median
              over rounds.
  val loss    mean cross-entropy over --eval-iters fixed validation batches after the last step.
  noise       the seed-to-seed standard deviation of the final val loss within each framework
              (pooled over both; needs >= 2 seeds), so the standard error of the difference of the two
              frameworks' means over k seeds is sd * sqrt(2 / k). The losses "agree within noise" when
              |difference| <= 2 standard errors. With one seed only the evaluation-batch noise (the
              standard error of the mean per-batch difference) is available; it is smaller than the
              seed noise, so the verdict is then marked as such.

Run with Debian's python3 (the one with torch):
    /usr/bin/python3 bench/train_torch_cpu.py --flashgrad build/flashgrad
        [--data datasets/tinyshakespeare.txt] [--steps 800] [--untimed 10] [--seeds 1337,1338]
        [--threads 2] [--eval-iters 20] [--torch-init flashgrad|own] [--md FILE]
OPENBLAS_CORETYPE is left to the caller's environment (it applies to both: torch links OpenBLAS).
The last lines are machine-readable (`train_bench: key=value ...`). Exits 0 whether or not the
targets are met (it is a measurement); 1 when a run fails or when the two models disagree on the
first step's loss although they start from the same weights (then they are not the same model);
2 on usage errors. Without torch it says so and runs flashgrad alone.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET_TOKS = 25000.0  # the speed target of the training benchmark
TARGET_RATIO = 1.5


# ---------------------------------------------------------------------------------------------
# settings: train's text defaults, read from the C header so the two never drift apart
# ---------------------------------------------------------------------------------------------
def read_text_defaults(path):
    """The fields of `fg_defaults_text = { .name = value, ... };` as numbers."""
    with open(path) as f:
        src = f.read()
    m = re.search(r"fg_defaults_text\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        raise RuntimeError("%s: no fg_defaults_text initializer" % path)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    out = {}
    for name, val in re.findall(r"\.(\w+)\s*=\s*([-+0-9.eE]+)", body):
        out[name] = float(val) if any(c in val for c in ".eE") else int(val)
    need = ["n_layer", "n_head", "n_embd", "block_size", "batch_size", "grad_accum", "lr", "min_lr", "warmup",
            "weight_decay", "beta1", "beta2", "grad_clip", "dropout", "eval_iters"]
    missing = [k for k in need if k not in out]
    if missing:
        raise RuntimeError("%s: fg_defaults_text lacks %s" % (path, ", ".join(missing)))
    return out


def lr_at(c, s):
    """train/adamw.c fg_lr_at: linear warm-up, then cosine from lr to min_lr at decay_steps."""
    if s < c["warmup"]:
        return c["lr"] * (s + 1) / (c["warmup"] + 1)
    if s >= c["decay_steps"]:
        return c["min_lr"]
    ratio = (s - c["warmup"]) / (c["decay_steps"] - c["warmup"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c["lr"] - c["min_lr"])


# ---------------------------------------------------------------------------------------------
# flashgrad's random numbers (tensor/philox.h), vectorized with numpy
# ---------------------------------------------------------------------------------------------
def philox_blocks(np, seed, stream, blocks):
    """Philox4x32-10 of counter (block lo, block hi, stream lo, stream hi) under key (seed lo, seed hi)
    for an array of block numbers; returns the four 32-bit words as uint64 arrays."""
    u = np.uint64
    m32 = u(0xFFFFFFFF)
    blocks = np.asarray(blocks, dtype=np.uint64)
    c0, c1 = blocks & m32, blocks >> u(32)
    c2 = np.full_like(blocks, stream & 0xFFFFFFFF)
    c3 = np.full_like(blocks, stream >> 32)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for r in range(10):
        p0 = c0 * u(0xD2511F53)  # 32 x 32 -> 64 bits: never overflows uint64
        p1 = c2 * u(0xCD9E8D57)
        c0, c1, c2, c3 = (p1 >> u(32)) ^ c1 ^ u(k0), p1 & m32, (p0 >> u(32)) ^ c3 ^ u(k1), p0 & m32
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1, c2, c3


def philox_normal(np, seed, stream, n):
    """fg_rand_normal's numbers 0..n-1 of (seed, stream), standard normal, float64: element k is
    Box-Muller's first output (r sin t) of 32-bit numbers 2k and 2k+1 of the stream."""
    nb = (n + 1) // 2
    w0, w1, w2, w3 = philox_blocks(np, seed, stream, np.arange(nb, dtype=np.uint64))
    a = np.empty(2 * nb, dtype=np.uint64)
    b = np.empty(2 * nb, dtype=np.uint64)
    a[0::2], b[0::2], a[1::2], b[1::2] = w0, w1, w2, w3
    uu = a.astype(np.float64) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    vv = b.astype(np.float64) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    return (np.sqrt(-2.0 * np.log(uu)) * np.sin(6.283185307179586 * vv))[:n]


INIT_STREAM = 0x494E4954000000  # "INIT" (train/gpt.h FG_GPT_INIT_STREAM)
TEXT_STREAM = 0x54455854 << 32  # "TEXT" | split (datasets/text.h FG_TEXT_STREAM)
EVAL_STREAM = 0x4556414C << 32  # "EVAL" (train/trainer.c fg_trainer_eval_seed)


def param_table(L, C, V, T):
    """train/gpt.h FG_GPT_PARAMS in table order: (name, shape, init) with init in normal / resid /
    zeros / ones."""
    t = [("transformer.wte.weight", (V, C), "normal"), ("transformer.wpe.weight", (T, C), "normal")]
    for l in range(L):
        p = "transformer.h.%d." % l
        t += [(p + "ln_1.weight", (C,), "ones"), (p + "ln_1.bias", (C,), "zeros"),
              (p + "attn.c_attn.weight", (3 * C, C), "normal"), (p + "attn.c_attn.bias", (3 * C,), "zeros"),
              (p + "attn.c_proj.weight", (C, C), "resid"), (p + "attn.c_proj.bias", (C,), "zeros"),
              (p + "ln_2.weight", (C,), "ones"), (p + "ln_2.bias", (C,), "zeros"),
              (p + "mlp.c_fc.weight", (4 * C, C), "normal"), (p + "mlp.c_fc.bias", (4 * C,), "zeros"),
              (p + "mlp.c_proj.weight", (C, 4 * C), "resid"), (p + "mlp.c_proj.bias", (C,), "zeros")]
    t += [("transformer.ln_f.weight", (C,), "ones"), ("transformer.ln_f.bias", (C,), "zeros")]
    return t


def flashgrad_init(np, L, C, V, T, seed):
    """The float32 weights fg_gpt_create(cfg, seed) starts from (train/gpt.c), by name."""
    std, resid = 0.02, 0.02 / math.sqrt(2.0 * L)
    out = {}
    for j, (name, shape, kind) in enumerate(param_table(L, C, V, T)):
        n = int(np.prod(shape))
        if kind == "ones":
            a = np.ones(n)
        elif kind == "zeros":
            a = np.zeros(n)
        else:
            a = (resid if kind == "resid" else std) * philox_normal(np, seed, INIT_STREAM + j, n)
        out[name] = a.astype(np.float32).reshape(shape)
    return out


def load_text(np, path, val_fraction=0.1):
    """datasets/text.c + tokenizer.c: the bytes' distinct values in increasing order are the
    vocabulary; the first n - floor(n * val_fraction) tokens train, the rest validate."""
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise RuntimeError("%s is empty" % path)
    raw = np.frombuffer(data, dtype=np.uint8)
    present = np.zeros(256, dtype=bool)
    present[raw] = True
    vocab = np.nonzero(present)[0]
    ids = np.full(256, -1, dtype=np.int64)
    ids[vocab] = np.arange(len(vocab))
    tokens = ids[raw]
    n = len(tokens)
    n_val = int(float(n) * val_fraction)
    return tokens[: n - n_val], tokens[n - n_val:], len(vocab), n


def text_batches(np, split_tokens, split, B, T, seed, first, count):
    """Batches first .. first+count-1 of a split as (count, B, T) x and y (datasets/text.c
    fg_text_batch): row r of batch i is the window at offset o uniform in [0, len - T), drawn from
    Philox block i*B + r of stream TEXT|split, words 0-1 as one 64-bit number, rejecting the top
    2^64 mod range values (then words 2-3, then blocks + k * 2^48)."""
    rng = len(split_tokens) - T
    stream = TEXT_STREAM | split
    max_ok = (1 << 64) - 1 - ((1 << 64) % rng)
    rows = np.arange(first * B, (first + count) * B, dtype=np.uint64)
    w0, w1, w2, w3 = philox_blocks(np, seed, stream, rows)
    x0 = (w0 << np.uint64(32)) | w1
    x1 = (w2 << np.uint64(32)) | w3
    off = np.where(x0 <= np.uint64(max_ok), x0, x1) % np.uint64(rng)
    bad = np.nonzero((x0 > np.uint64(max_ok)) & (x1 > np.uint64(max_ok)))[0]
    for i in bad:  # probability < range / 2^64 per row: in practice never
        k = 1
        while True:
            blk = int(rows[i]) + (k << 48)
            v = [int(w[0]) for w in philox_blocks(np, seed, stream, [blk])]
            a, b = (v[0] << 32) | v[1], (v[2] << 32) | v[3]
            if a <= max_ok or b <= max_ok:
                off[i] = (a if a <= max_ok else b) % rng
                break
            k += 1
    off = off.astype(np.int64)
    idx = off[:, None] + np.arange(T)[None, :]
    return split_tokens[idx].reshape(count, B, T), split_tokens[idx + 1].reshape(count, B, T)


def eval_seed(np, run_seed):
    w0, w1, _, _ = philox_blocks(np, run_seed, EVAL_STREAM, [0])
    return (int(w1[0]) << 32) | int(w0[0])


# ---------------------------------------------------------------------------------------------
# the PyTorch side (runs in a child process whose environment sets the threads)
# ---------------------------------------------------------------------------------------------
def torch_blas_core():
    """OpenBLAS's kernel name in this process (torch links OpenBLAS on Debian), or '?'."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({l.split()[-1] for l in f if "openblas" in l and ".so" in l})
        for lib in libs:
            h = ctypes.CDLL(lib)
            if hasattr(h, "openblas_get_corename"):
                h.openblas_get_corename.restype = ctypes.c_char_p
                nt = h.openblas_get_num_threads()
                return "%s (%s, %d thread%s)" % (h.openblas_get_corename().decode(), os.path.basename(lib), nt,
                                                 "" if nt == 1 else "s")
    except OSError:
        pass
    return "?"


def peak_rss_kib():
    """This process's peak resident memory in KiB: VmHWM (its own address space's high-water mark;
    ru_maxrss would include the parent's size before execve on Linux), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    import resource
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def torch_worker(cfg_path, out_path):
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    with open(cfg_path) as f:
        c = json.load(f)
    torch.set_num_threads(c["threads"])
    L, H, C, T, B, V = c["n_layer"], c["n_head"], c["n_embd"], c["block_size"], c["batch_size"], c["vocab"]
    hd = C // H
    sdpa = hasattr(F, "scaled_dot_product_attention")

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            if not sdpa:
                self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)  # heads: q = [0, C), k = [C, 2C), v = [2C, 3C)
            q = q.view(b, t, H, hd).transpose(1, 2)  # (b, H, t, hd)
            k = k.view(b, t, H, hd).transpose(1, 2)
            v = v.view(b, t, H, hd).transpose(1, 2)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                att = att.masked_fill(~self.causal[:, :, :t, :t], float("-inf"))
                y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)  # eps 1e-5, as flashgrad's
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                h=nn.ModuleList([Block() for _ in range(L)]), ln_f=nn.LayerNorm(C)))
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.transformer.wte.weight  # tied

        def forward(self, idx, targets):
            b, t = idx.shape
            x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, dtype=torch.long))
            for blk in self.transformer.h:
                x = blk(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = GPT()
    params = dict(model.named_parameters())
    if c["init"] == "flashgrad":
        init = flashgrad_init(np, L, C, V, T, c["seed"])
        if set(init) != set(params):
            raise RuntimeError("parameter names differ: %s" % sorted(set(init) ^ set(params)))
        with torch.no_grad():
            for name, a in init.items():
                params[name].copy_(torch.from_numpy(a))
    else:  # nanoGPT's scheme from torch's generator
        torch.manual_seed(c["seed"])
        with torch.no_grad():
            for name, p in params.items():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
                elif p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()
    n_params = sum(p.numel() for p in model.parameters())

    # the data: every batch of the run and the evaluation batches, drawn before the clock starts
    train_tok, val_tok = np.load(c["train_npy"]), np.load(c["val_npy"])
    S = c["steps"]
    xs, ys = text_batches(np, train_tok, 0, B, T, c["seed"], 0, S)
    ex, ey = text_batches(np, val_tok, 1, B, T, eval_seed(np, c["seed"]), 0, c["eval_iters"])
    xs, ys, ex, ey = (torch.from_numpy(a) for a in (xs, ys, ex, ey))

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=1e-8)
    model.train()
    losses, times = [], []
    for s in range(S):
        t0 = time.perf_counter()
        lr = lr_at(c, s)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = model(xs[s], ys[s])
        loss.backward()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    model.eval()
    val = []
    with torch.no_grad():
        for i in range(c["eval_iters"]):
            val.append(model(ex[i], ey[i]).item())
    res = {"losses": losses, "times": times, "val": val, "n_params": n_params, "torch": torch.__version__,
           "peak_rss_kb": peak_rss_kib(),
           "attention": "F.scaled_dot_product_attention" if sdpa else "explicit softmax(QK^T/sqrt(d) + mask) V",
           "threads": torch.get_num_threads(), "blas": torch_blas_core(),
           "env": "OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s" % (os.environ.get("OMP_NUM_THREADS", "unset"),
                                                                   os.environ.get("OPENBLAS_NUM_THREADS", "unset"))}
    with open(out_path, "w") as f:
        json.dump(res, f)


def run_torch(cfg, tmp):
    """One PyTorch run in a child process (the thread variables must be set before torch loads)."""
    cpath = os.path.join(tmp, "torch_cfg_%d.json" % cfg["seed"])
    opath = os.path.join(tmp, "torch_out_%d.json" % cfg["seed"])
    with open(cpath, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(cfg["threads"])
    env["OPENBLAS_NUM_THREADS"] = str(cfg["torch_blas_threads"])
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", cpath, opath]
    print("$ OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s %s (PyTorch, seed %d)"
          % (env["OMP_NUM_THREADS"], env["OPENBLAS_NUM_THREADS"], " ".join(cmd[:3]), cfg["seed"]), flush=True)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout)
        raise RuntimeError("the PyTorch run exited with %d" % p.returncode)
    for line in p.stdout.splitlines():
        if line.strip():
            print("  | " + line)
    with open(opath) as f:
        r = json.load(f)
    W = cfg["untimed"]
    r["median_s"] = statistics.median(r["times"][W:])
    r["tok_s"] = cfg["batch_size"] * cfg["block_size"] / r["median_s"]
    r["val_loss"] = statistics.fmean(r["val"]) if r["val"] else float("nan")
    return r


# ---------------------------------------------------------------------------------------------
# the flashgrad side
# ---------------------------------------------------------------------------------------------
def run_flashgrad(binary, data, cfg):
    W, S = cfg["untimed"], cfg["steps"]
    cmd = [binary, "bench", "train", "--data", data, "--n-layer", cfg["n_layer"], "--n-head", cfg["n_head"],
           "--n-embd", cfg["n_embd"], "--block-size", cfg["block_size"], "--batch-size", cfg["batch_size"],
           "--grad-accum", 1, "--dropout", 0, "--attn", "flash", "--warmup-steps", W, "--steps", S - W,
           "--threads", cfg["threads"], "--seed", cfg["seed"], "--lr", repr(cfg["lr"]), "--min-lr", repr(cfg["min_lr"]),
           "--warmup", cfg["warmup"], "--lr-decay-steps", cfg["decay_steps"], "--weight-decay", repr(cfg["weight_decay"]),
           "--beta1", repr(cfg["beta1"]), "--beta2", repr(cfg["beta2"]), "--grad-clip", repr(cfg["grad_clip"]),
           "--eval-iters", cfg["eval_iters"], "--print-step-times"]
    cmd = [str(a) for a in cmd]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.splitlines()
    for line in out:
        if line.startswith(("losses:", "step times ms:", "val losses:")):
            continue
        print("  | " + line)
    if p.returncode != 0:
        raise RuntimeError("flashgrad bench train exited with %d" % p.returncode)

    def field(prefix):
        for line in out:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise RuntimeError("flashgrad bench train printed no '%s' line" % prefix)

    r = {"losses": [float.fromhex(x) for x in field("losses:").split()],
         "times": [float(x) / 1e3 for x in field("step times ms:").split()],
         "val": [float(x) for x in field("val losses:").split()],
         "machine": field("machine:")}
    m = re.search(r"([0-9.]+)M parameters", field("bench train:"))
    r["n_params_m"] = float(m.group(1)) if m else float("nan")
    m = re.search(r"OpenBLAS kernel (\S+) with (\d+) threads", r["machine"])
    r["blas"] = "%s (%s threads)" % (m.group(1), m.group(2)) if m else "?"
    if len(r["losses"]) != S or len(r["times"]) != S - W or len(r["val"]) != cfg["eval_iters"]:
        raise RuntimeError("flashgrad bench train printed %d losses, %d step times, %d val losses; expected %d, %d, %d"
                           % (len(r["losses"]), len(r["times"]), len(r["val"]), S, S - W, cfg["eval_iters"]))
    r["median_s"] = statistics.median(r["times"])
    r["tok_s"] = cfg["batch_size"] * cfg["block_size"] / r["median_s"]
    r["val_loss"] = statistics.fmean(r["val"])
    return r


def coretype():
    """OPENBLAS_CORETYPE as the environment has it (OpenBLAS treats empty differently from unset)."""
    v = os.environ.get("OPENBLAS_CORETYPE")
    return "unset" if v is None else (v or "(empty)")


def cpu_line():
    model, cpus, tpc = "?", str(os.cpu_count()), "?"
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "Model name":
                model = v
            elif k == "CPU(s)":
                cpus = v
            elif k == "Thread(s) per core":
                tpc = v
    except OSError:
        pass
    return model, cpus, tpc


def parse_seeds(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("want a comma-separated list of integers, got %r" % s)
    if not v or min(v) < 0 or len(set(v)) != len(v):
        raise argparse.ArgumentTypeError("want distinct non-negative integers, got %r" % s)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashgrad", default=os.path.join(ROOT, "build", "flashgrad"), help="the flashgrad binary")
    ap.add_argument("--data", default=os.path.join(ROOT, "datasets", "tinyshakespeare.txt"))
    ap.add_argument("--steps", type=int, default=800, help="optimizer steps per run (the cosine ends here)")
    ap.add_argument("--untimed", type=int, default=10, help="first steps left out of the timing (they train)")
    ap.add_argument("--seeds", type=parse_seeds, default=[1337, 1338], help="one round per seed")
    ap.add_argument("--threads", type=int, default=2, help="flashgrad --threads; PyTorch OMP_NUM_THREADS and set_num_threads")
    ap.add_argument("--torch-blas-threads", type=int, default=1, help="OPENBLAS_NUM_THREADS of the PyTorch process")
    ap.add_argument("--eval-iters", type=int, default=0, help="validation batches (0: train's default)")
    ap.add_argument("--torch-init", choices=["flashgrad", "own"], default="flashgrad",
                    help="PyTorch's initial weights: flashgrad's (same numbers) or its own draw of the same scheme")
    ap.add_argument("--md", help="also write the summary as a Markdown table to this file")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(*a.worker)
        return 0
    if a.steps < 2 or not (0 <= a.untimed < a.steps - 1) or min(a.threads, a.torch_blas_threads) < 1 or a.eval_iters < 0:
        ap.error("need --steps >= 2, 0 <= --untimed < --steps - 1, positive thread counts, --eval-iters >= 0")
    if not os.access(a.flashgrad, os.X_OK):
        ap.error("no flashgrad binary at %s (run make first)" % a.flashgrad)
    if not os.path.isfile(a.data):
        ap.error("no data file %s (sh datasets/get_tinyshakespeare.sh)" % a.data)
    try:
        import numpy as np
        import torch  # the child process runs it; here only to know it is there
        have_torch = True
        print("train_torch_cpu: PyTorch %s, numpy %s (%s)" % (torch.__version__, np.__version__, sys.executable))
    except ImportError:
        have_torch = False
        print("train_torch_cpu: this python (%s) has no torch or numpy; flashgrad only" % sys.executable)

    d = read_text_defaults(os.path.join(ROOT, "cli", "train_defaults.h"))
    if d["grad_accum"] != 1 or d["dropout"] != 0:
        raise RuntimeError("train's text defaults have grad_accum %s, dropout %s; this script assumes 1 and 0"
                           % (d["grad_accum"], d["dropout"]))
    cfg = {k: d[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "lr", "min_lr", "warmup",
                             "weight_decay", "beta1", "beta2", "grad_clip")}
    cfg.update(steps=a.steps, untimed=a.untimed, decay_steps=a.steps, threads=a.threads,
               torch_blas_threads=a.torch_blas_threads, eval_iters=a.eval_iters or d["eval_iters"], init=a.torch_init)
    tokens_per_step = cfg["batch_size"] * cfg["block_size"]
    model, cpus, tpc = cpu_line()
    print("train_torch_cpu: %s, %d steps per run (first %d untimed), seeds %s, %d threads"
          % (os.path.relpath(a.data), a.steps, a.untimed, ",".join(map(str, a.seeds)), a.threads))
    print("cpu: %s, %s CPUs, %s thread(s) per core; OPENBLAS_CORETYPE=%s"
          % (model, cpus, tpc, coretype()))
    print("model: %d layers, %d heads, %d wide, block %d, batch %d (%d tokens a step); AdamW lr %g -> %g, warm-up %d, "
          "cosine to step %d, betas (%g, %g), weight decay %g (2-d weights), clip %g; val: %d batches"
          % (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"], cfg["batch_size"], tokens_per_step,
             cfg["lr"], cfg["min_lr"], cfg["warmup"], cfg["decay_steps"], cfg["beta1"], cfg["beta2"],
             cfg["weight_decay"], cfg["grad_clip"], cfg["eval_iters"]), flush=True)

    bin_stamp = os.stat(a.flashgrad).st_mtime_ns
    tmp = tempfile.mkdtemp(prefix="fg_train_bench_")
    rounds = []
    t_start = time.time()
    try:
        if have_torch:
            train_tok, val_tok, V, n = load_text(np, a.data)
            np.save(os.path.join(tmp, "train.npy"), train_tok)
            np.save(os.path.join(tmp, "val.npy"), val_tok)
            cfg.update(vocab=V, train_npy=os.path.join(tmp, "train.npy"), val_npy=os.path.join(tmp, "val.npy"))
            print("data: %d tokens, vocabulary %d, train %d, val %d" % (n, V, len(train_tok), len(val_tok)))
        for i, seed in enumerate(a.seeds):
            c = dict(cfg, seed=seed)
            print("\n-- round %d of %d: seed %d --" % (i + 1, len(a.seeds), seed), flush=True)
            order = ["fg", "torch"] if i % 2 == 0 else ["torch", "fg"]
            r = {"seed": seed}
            for who in order:
                if who == "fg":
                    r["fg"] = run_flashgrad(a.flashgrad, a.data, c)
                    r["fg"]["rebuilt"] = os.stat(a.flashgrad).st_mtime_ns != bin_stamp
                elif have_torch:
                    r["torch"] = run_torch(c, tmp)
            fg = r["fg"]
            line = "round %d: flashgrad %.0f tokens/s (median step %.1f ms), val loss %.4f" % (
                i + 1, fg["tok_s"], fg["median_s"] * 1e3, fg["val_loss"])
            if "torch" in r:
                th = r["torch"]
                r["ratio"] = fg["tok_s"] / th["tok_s"]
                line += "; PyTorch %.0f tokens/s (median step %.1f ms), val loss %.4f; ratio %.2fx" % (
                    th["tok_s"], th["median_s"] * 1e3, th["val_loss"], r["ratio"])
            print(line, flush=True)
            rounds.append(r)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return report(a, cfg, rounds, have_torch, (model, cpus, tpc), time.time() - t_start)


def report(a, cfg, rounds, have_torch, cpu, elapsed):
    k = len(rounds)
    fg_tok = statistics.median(r["fg"]["tok_s"] for r in rounds)
    fg_val = [r["fg"]["val_loss"] for r in rounds]
    lines = ["", "== flashgrad vs PyTorch: training, %s, %d steps, %d seed(s), %.0f s in all ==" % (
        os.path.basename(a.data), a.steps, k, elapsed)]
    lines.append("cpu: %s, %s CPUs, %s thread(s) per core; OPENBLAS_CORETYPE=%s"
                 % (cpu[0], cpu[1], cpu[2], coretype()))
    lines.append("flashgrad: OpenBLAS kernel %s, %d threads (--threads)" % (rounds[0]["fg"]["blas"], a.threads))
    if any(r["fg"].get("rebuilt") for r in rounds):
        lines.append("WARNING: %s was rebuilt during this run: its rounds timed different binaries" % a.flashgrad)
    kv = {"steps": a.steps, "seeds": k, "threads": a.threads, "fg_tok_s": "%.0f" % fg_tok,
          "fg_val": "%.5f" % statistics.fmean(fg_val), "fg_blas": rounds[0]["fg"]["blas"].split()[0],
          "coretype": coretype()}
    code = 0
    if have_torch:
        th0 = rounds[0]["torch"]
        th_tok = statistics.median(r["torch"]["tok_s"] for r in rounds)
        th_val = [r["torch"]["val_loss"] for r in rounds]
        ratio = statistics.median(r["ratio"] for r in rounds)
        lines.append("PyTorch %s: %s, torch threads %d, OpenBLAS %s; attention: %s; init: %s"
                     % (th0["torch"], th0["env"], th0["threads"], th0["blas"], th0["attention"], a.torch_init))
        fg_np, th_np = rounds[0]["fg"]["n_params_m"], th0["n_params"] / 1e6
        lines.append("parameters: flashgrad %.3fM, PyTorch %.3fM%s" % (
            fg_np, th_np, "" if abs(fg_np - th_np) < 0.0015 else "  <-- DIFFERENT MODELS"))
        if abs(fg_np - th_np) >= 0.0015:
            code = 1
        lines.append("")
        lines.append("| round | seed | flashgrad tok/s | PyTorch tok/s | ratio | flashgrad val loss | PyTorch val loss | "
                     "step-1 loss fg / torch |")
        lines.append("|---:|---:|---:|---:|---:|---:|---:|---|")
        for i, r in enumerate(rounds):
            lines.append("| %d | %d | %.0f | %.0f | %.2fx | %.5f | %.5f | %.6f / %.6f |" % (
                i + 1, r["seed"], r["fg"]["tok_s"], r["torch"]["tok_s"], r["ratio"], r["fg"]["val_loss"],
                r["torch"]["val_loss"], r["fg"]["losses"][0], r["torch"]["losses"][0]))
        lines.append("")
        lines.append("tokens/s (median over rounds of B*T / median step time): flashgrad %.0f, PyTorch %.0f; "
                     "flashgrad / PyTorch = %.2fx" % (fg_tok, th_tok, ratio))
        lines.append("targets: >= %.0f tokens/s: %s; >= %.1fx PyTorch: %s" % (
            TARGET_TOKS, "met" if fg_tok >= TARGET_TOKS else "NOT met", TARGET_RATIO,
            "met" if ratio >= TARGET_RATIO else "NOT met"))

        # the same start: the first losses must agree to rounding when the weights are the same
        early = min(10, a.steps)
        d1 = max(abs(r["fg"]["losses"][0] - r["torch"]["losses"][0]) for r in rounds)
        d10 = max(abs(x - y) for r in rounds for x, y in zip(r["fg"]["losses"][:early], r["torch"]["losses"][:early]))
        if a.torch_init == "flashgrad":
            same = d1 <= 1e-4
            lines.append("same start: step-1 loss differs by at most %.2e (same weights and batch: rounding only) %s; "
                         "steps 1-%d by at most %.2e" % (d1, "ok" if same else "<-- MISMATCH", early, d10))
            dall = max(abs(x - y) for r in rounds for x, y in zip(r["fg"]["losses"], r["torch"]["losses"]))
            lines.append("same batches: the training losses of a round differ by at most %.2e over all %d steps "
                         "(how far rounding moved the two apart)" % (dall, a.steps))
            if not same:
                code = 1

        # final validation loss: difference against the seed-to-seed noise
        diff = statistics.fmean(fg_val) - statistics.fmean(th_val)
        paired = []
        for r in rounds:
            dd = [x - y for x, y in zip(r["fg"]["val"], r["torch"]["val"])]
            paired.append(statistics.stdev(dd) / math.sqrt(len(dd)) if len(dd) > 1 else float("nan"))
        eval_se = math.sqrt(sum(p * p for p in paired)) / k
        if k >= 2:
            sd = math.sqrt((statistics.variance(fg_val) + statistics.variance(th_val)) / 2)
            se = sd * math.sqrt(2.0 / k)
            agree = abs(diff) <= 2 * se
            noise = ("seed-to-seed sd %.4f (flashgrad %.4f, PyTorch %.4f), so the difference of two %d-seed means has "
                     "standard error %.4f" % (sd, statistics.stdev(fg_val), statistics.stdev(th_val), k, se))
            verdict = "agree within noise (|diff| <= 2 se)" if agree else "DIFFER by more than 2 standard errors"
        else:
            sd, se = float("nan"), eval_se
            agree = abs(diff) <= 2 * se
            noise = ("one seed: only the evaluation-batch noise is known (standard error of the mean per-batch "
                     "difference %.4f), which understates the seed-to-seed noise; use 2+ seeds" % se)
            verdict = ("agree within evaluation noise" if agree else "differ by more than 2 evaluation standard errors"
                       " (not conclusive with one seed)")
        lines.append("final val loss (%d batches of %d tokens): flashgrad %.5f, PyTorch %.5f (means over %d seed(s)); "
                     "difference %+.2e" % (a.eval_iters or cfg["eval_iters"], cfg["batch_size"] * cfg["block_size"],
                                          statistics.fmean(fg_val), statistics.fmean(th_val), k, diff))
        lines.append("noise: %s; evaluation-batch standard error of the difference %.5f" % (noise, eval_se))
        lines.append("verdict: the final validation losses %s" % verdict)
        kv.update(torch_tok_s="%.0f" % th_tok, ratio="%.2f" % ratio, torch_val="%.5f" % statistics.fmean(th_val),
                  val_diff="%+.2e" % diff, seed_sd="%.4f" % sd, diff_se="%.4f" % se, eval_se="%.5f" % eval_se,
                  agree="yes" if agree else "no", step1_diff="%.2e" % d1, torch=th0["torch"],
                  torch_blas=th0["blas"].split()[0], torch_attention="sdpa" if "scaled" in th0["attention"] else "explicit")
    else:
        lines.append("flashgrad: %.0f tokens/s (median over rounds), val loss %.4f; PyTorch: not installed for %s"
                     % (fg_tok, statistics.fmean(fg_val), sys.executable))
    lines.append("")
    lines.append("train_bench: " + " ".join("%s=%s" % (key, val) for key, val in kv.items()))
    print("\n".join(lines))
    if a.md:
        with open(a.md + ".tmp", "w") as f:
            f.write("\n".join(lines[1:]) + "\n")
        os.replace(a.md + ".tmp", a.md)
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print("train_torch_cpu: %s" % e, file=sys.stderr)
        sys.exit(1)
