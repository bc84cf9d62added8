#!/usr/bin/env python3
"""recompute_torch_cpu.py — PyTorch's torch.compile activation_memory_budget on the CPU, beside
`flashgrad bench recompute --memory-budget` (docs/recomputation.md).

torch.compile's min-cut partitioner picks what the backward recomputes; with
torch._functorch.config.activation_memory_budget = b in (0, 1] it keeps at most about b of the
activation memory that saving everything would (1.0: its default plan), choosing the recomputation
of least estimated runtime. This script trains a GPT of the given shape (pre-LN blocks, fused qkv,
4C tanh-GELU MLP, tied head, biases, dropout 0; F.scaled_dot_product_attention, causal) with AdamW,
compiled once per budget, each in its own process, and reports per budget:

  step_ms     the fastest timed step (forward, backward, AdamW), as flashgrad bench recompute does;
  step_rss    the process's resident high-water mark during the timed steps above its resident size
              just before them (VmHWM reset through /proc/self/clear_refs): what a step holds above
              what lives between steps, PyTorch having no allocator counter on the CPU. The worker
              runs with MALLOC_MMAP_THRESHOLD_=65536, so glibc maps every block of 64 KiB and more on
              its own and unmaps it when freed, and the resident size follows the live tensors;
  compile_s   the first step's wall time (compilation included).

Usage: recompute_torch_cpu.py --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 4
       --vocab 65 --budgets 1.0,0.5,0.1 [--steps 2] [--threads 2] [--csv FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return -1


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(a, budget):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch._functorch.config as fconfig

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    fconfig.activation_memory_budget = budget
    L, H, C, T, V, B = a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab, a.batch_size

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.m_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            heads = lambda t: t.view(x.shape[0], x.shape[1], H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(x.shape))
            return x + self.m_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, tgt):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

    model = GPT()
    with torch.no_grad():  # GPT-2's initialization, so that the loss starts near log V
        for n, w in model.named_parameters():
            if w.dim() == 2:
                w.normal_(0.0, 0.02 / (2 * L) ** 0.5 if n.endswith(("c_proj.weight", "m_proj.weight")) else 0.02)
            elif "ln" in n:
                w.fill_(1.0 if n.endswith("weight") else 0.0)
            else:
                w.zero_()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    loss_fn = torch.compile(model)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item()

    t0 = time.time()
    first = step()  # compiles
    compile_s = time.time() - t0
    step()  # warm
    ok = reset_hwm()
    rss0 = status_bytes("VmRSS")
    times = []
    for _ in range(a.steps):
        t0 = time.time()
        step()
        times.append(time.time() - t0)
    hwm = status_bytes("VmHWM")
    return {"budget": budget, "step_ms": min(times) * 1e3, "step_rss": (hwm - rss0) if ok else -1,
            "compile_s": compile_s, "first_loss": first, "torch": torch.__version__}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--budgets", default="1.0,0.5,0.1")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--csv", default="")
    p.add_argument("--worker", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        print(json.dumps(worker(a, a.worker)))
        return 0
    rows = []
    for b in [float(x) for x in a.budgets.split(",")]:
        args = [sys.executable, __file__, "--worker", str(b)] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items() if k not in ("worker", "budgets", "csv")]
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MALLOC_MMAP_THRESHOLD_="65536")
        r = subprocess.run(args, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print(f"budget {b}: the worker failed:\n{r.stderr[-2000:]}", file=sys.stderr)
            return 1
        row = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"torch {row['torch']} activation_memory_budget {b:g}: step {row['step_ms']:.1f} ms, "
              f"step RSS growth {row['step_rss'] / 2**20:.2f} MiB, first step (compile) {row['compile_s']:.0f} s, "
              f"first loss {row['first_loss']:.6f}", flush=True)
    if a.csv:
        with open(a.csv + ".tmp", "w") as f:
            f.write("budget,step_ms,step_rss_bytes,compile_s,first_loss\n")
            for r in rows:
                f.write(f"{r['budget']},{r['step_ms']:.3f},{r['step_rss']},{r['compile_s']:.1f},{r['first_loss']}\n")
        os.replace(a.csv + ".tmp", a.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
