#!/usr/bin/env python3
"""nanogpt_flashgrad_torch.py — nanoGPT's model trained with SDPA and with flashgrad's drop-in, side by side.

The model is nanoGPT's (model.py: GPT-2 blocks, pre-LayerNorm, CausalSelfAttention with one c_attn of
width 3C, MLP 4C with GELU, tied LM head, GPT-2 init), char-level Tiny Shakespeare. The two runs differ in
one line of CausalSelfAttention.forward:

    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)   # SDPA
    y = flashgrad.torch.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)
                                                             # flashgrad (--api attention: fgt.attention)
--compile runs both models under torch.compile(model, fullgraph=True) (a graph break is an error).

Both start from the same weights (torch.manual_seed) and see the same batches; AdamW (lr --lr, betas
0.9/0.99, weight decay 0.1 on 2-d weights), --steps steps, on --threads threads (torch and flashgrad).
The runs alternate (--rounds), and per run the script reports tokens/s (batch*block / median step
time, first --untimed steps left out) and the final train and validation losses (mean over --eval-iters
fixed batches). With dropout 0 the two runs compute the same model to float32 rounding, so their losses
agree closely; the speed is the attention's difference.

    PYTHONPATH=python /work/torch2/bin/python bench/nanogpt_flashgrad_torch.py [--data FILE]
        [--block 256] [--batch 12] [--layers 4] [--heads 4] [--embd 128] [--steps 200] [--threads 2]
        [--dropout 0] [--rounds 1] [--pool] [--compile] [--api sdpa|attention] [--md FILE]
"""
import argparse
import math
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "..", "datasets", "tinyshakespeare.txt"))
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pool", action="store_true",
                    help="flashgrad on its own pool (flashgrad.torch.share_threads(False)), not torch's threads")
    ap.add_argument("--untimed", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--md", default=None)
    ap.add_argument("--compile", action="store_true", help="torch.compile(model, fullgraph=True) both models")
    ap.add_argument("--api", choices=("sdpa", "attention"), default="sdpa",
                    help="flashgrad's entry point: the SDPA drop-in (default) or flashgrad.torch.attention")
    a = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import flashgrad
    import flashgrad.torch as fgt

    torch.set_num_threads(a.threads)
    flashgrad.set_threads(a.threads)
    sharing = fgt.share_threads(not a.pool)
    if not os.path.exists(a.data):
        sys.exit("nanogpt bench: no %s (sh datasets/get_tinyshakespeare.sh %s)" % (a.data, a.data))
    raw = np.frombuffer(open(a.data, "rb").read(), np.uint8)
    vocab = np.unique(raw)
    lut = np.zeros(256, np.int64)
    lut[vocab] = np.arange(len(vocab))
    data = lut[raw]
    n_train = int(0.9 * len(data))
    train, val = data[:n_train], data[n_train:]
    V, T, Bsz = len(vocab), a.block, a.batch

    def batch(split, rng):
        d = train if split == "train" else val
        ix = rng.integers(0, len(d) - T - 1, Bsz)
        x = np.stack([d[i:i + T] for i in ix])
        y = np.stack([d[i + 1:i + T + 1] for i in ix])
        return torch.from_numpy(x), torch.from_numpy(y)

    class CausalSelfAttention(nn.Module):
        def __init__(self, use_fg):
            super().__init__()
            C = a.embd
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.resid_dropout = nn.Dropout(a.dropout)
            self.n_head, self.n_embd, self.dropout, self.use_fg = a.heads, C, a.dropout, use_fg

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if self.use_fg and a.api == "attention":
                y = fgt.attention(q, k, v, causal=True, dropout=self.dropout if self.training else 0)
            elif self.use_fg:
                y = fgt.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                                     dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                                   dropout_p=self.dropout if self.training else 0, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(a.embd, 4 * a.embd)
            self.c_proj = nn.Linear(4 * a.embd, a.embd)
            self.dropout = nn.Dropout(a.dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, use_fg):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(a.embd), CausalSelfAttention(use_fg)
            self.ln_2, self.mlp = nn.LayerNorm(a.embd), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, use_fg):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, a.embd), nn.Embedding(T, a.embd)
            self.drop = nn.Dropout(a.dropout)
            self.h = nn.ModuleList([Block(use_fg) for _ in range(a.layers)])
            self.ln_f = nn.LayerNorm(a.embd)
            self.lm_head = nn.Linear(a.embd, V, bias=False)
            self.lm_head.weight = self.wte.weight
            self.apply(self._init)
            for n, p in self.named_parameters():
                if n.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers))

        def _init(self, m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
            for blk in self.h:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    def run(use_fg):
        torch.manual_seed(a.seed)
        model = GPT(use_fg)
        fwd = torch.compile(model, fullgraph=True) if a.compile else model
        decay = [p for p in model.parameters() if p.dim() >= 2]
        nodecay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.99))
        rng = np.random.default_rng(a.seed)
        times, losses = [], []
        for step in range(a.steps):
            x, y = batch("train", rng)
            t0 = time.perf_counter()
            loss = fwd(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
        model.eval()
        ev = {}
        with torch.no_grad():
            for split in ("train", "val"):
                erng = np.random.default_rng(a.seed + 1)
                ev[split] = statistics.mean(float(fwd(*batch(split, erng))) for _ in range(a.eval_iters))
        return Bsz * T / statistics.median(times[a.untimed:]), losses, ev

    res = {False: [], True: []}
    for r in range(a.rounds):
        for use_fg in ((False, True) if r % 2 == 0 else (True, False)):
            tps, losses, ev = run(use_fg)
            res[use_fg].append((tps, losses, ev))
            print("%s: %.0f tokens/s, final loss %.4f, val %.4f" % ("flashgrad" if use_fg else "SDPA", tps,
                                                                    losses[-1], ev["val"]), flush=True)
    sd, fg = res[False], res[True]
    ratio = statistics.median(f[0] / s[0] for f, s in zip(fg, sd))
    dl = max(abs(x - y) for f, s in zip(fg, sd) for x, y in zip(f[1], s[1]))
    lines = ["nanoGPT (n_layer %d, n_head %d, n_embd %d, block %d, batch %d, dropout %g), Tiny Shakespeare chars, "
             "%d AdamW steps, %d threads (flashgrad on %s), torch %s, OMP_WAIT_POLICY %s%s"
             % (a.layers, a.heads, a.embd, T, Bsz, a.dropout, a.steps, a.threads,
                "torch's OpenMP threads" if sharing else "its own pool", torch.__version__,
                os.environ.get("OMP_WAIT_POLICY") or "unset",
                ", torch.compile(fullgraph=True)" if a.compile else ""), "",
             "| attention | tokens/s | final train loss | final val loss |", "|---|---:|---:|---:|"]
    fg_name = "flashgrad.torch.attention" if a.api == "attention" else "flashgrad.torch.scaled_dot_product_attention"
    for name, rr in (("F.scaled_dot_product_attention", sd), (fg_name, fg)):
        lines.append("| %s | %.0f | %.4f | %.4f |" % (name, statistics.median(x[0] for x in rr),
                                                      statistics.mean(x[2]["train"] for x in rr),
                                                      statistics.mean(x[2]["val"] for x in rr)))
    lines += ["", "flashgrad / SDPA tokens/s: %.2fx; largest difference of the two runs' training losses over the "
              "%d steps: %.2e" % (ratio, a.steps, dl)]
    text = "\n".join(lines)
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
