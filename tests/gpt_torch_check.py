#!/usr/bin/python3
"""gpt_torch_check.py: flashgrad's GPT and its training step against PyTorch.

Run by tests/test_gpt.c as `gpt_torch_check.py DIR LR LOSS`. DIR holds what the C side wrote:
  before/{model,optimizer}.safetensors  the run after one step (AdamW's moments are nonzero)
  after/model.safetensors               the weights after the next step
  x0.npy, y0.npy, x1.npy, y1.npy        that next step's two micro-batches (tokens, targets)
  logits.npy                            flashgrad's logits for x0 with the `before` weights
LR is the learning rate of the step and LOSS the mean loss flashgrad reported for it.

Here the model is written again from its definition (GPT-2: pre-LayerNorm blocks, causal softmax
attention, tanh GELU, tied LM head) in float64 torch, and the step is torch.autograd + torch's
clip_grad_norm_ + torch.optim.AdamW with nanoGPT's parameter groups (weight decay on the 2-d tensors
only), started from flashgrad's saved moments. The safetensors files are parsed here with the
standard library (8-byte header length, JSON header, raw little-endian data), so the check does not
depend on flashgrad's reader either.

Exits 0 when logits, loss and updated weights agree, 1 on a mismatch, 77 when numpy or torch is
missing.
"""
import json
import math
import os
import struct
import sys

SKIP = 77
try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: numpy/torch not importable by {sys.executable} ({e})")
    sys.exit(SKIP)


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    data = b[8 + n:]
    meta = hdr.pop("__metadata__", {})
    dts = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U64": np.uint64}
    out = {}
    for k, v in hdr.items():
        a, z = v["data_offsets"]
        out[k] = np.frombuffer(data[a:z], dtype=dts[v["dtype"]]).reshape(v["shape"]).copy()
    return out, meta


def table_order(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for l in range(L):
        for s in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"]:
            names.append(f"transformer.h.{l}.{s}")
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def forward(P, x, L, H, C):
    B, T = x.shape
    F = torch.nn.functional

    def ln(h, p):
        return F.layer_norm(h, (C,), P[p + ".weight"], P[p + ".bias"], 1e-5)

    def lin(h, p):
        return h @ P[p + ".weight"].T + P[p + ".bias"]

    h = P["transformer.wte.weight"][x] + P["transformer.wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(L):
        p = f"transformer.h.{l}."
        q, k, v = lin(ln(h, p + "ln_1"), p + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        y = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
        h = h + lin(y.transpose(1, 2).reshape(B, T, C), p + "attn.c_proj")
        h = h + lin(F.gelu(lin(ln(h, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    return ln(h, "transformer.ln_f") @ P["transformer.wte.weight"].T


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    d, lr, fg_loss = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    W, meta = load_st(os.path.join(d, "before", "model.safetensors"))
    O, ometa = load_st(os.path.join(d, "before", "optimizer.safetensors"))
    W1, _ = load_st(os.path.join(d, "after", "model.safetensors"))
    L, H, C = int(meta["n_layer"]), int(meta["n_head"]), int(meta["n_embd"])
    names = table_order(L)
    assert sorted(names) == sorted(W.keys()), f"tensor names differ: {sorted(W.keys())}"
    P = {k: torch.tensor(W[k], dtype=torch.float64, requires_grad=True) for k in names}
    xs = [torch.from_numpy(np.load(os.path.join(d, f"x{m}.npy"))).long() for m in (0, 1)]
    ys = [torch.from_numpy(np.load(os.path.join(d, f"y{m}.npy"))).long() for m in (0, 1)]
    ok = True

    with torch.no_grad():
        lg = forward(P, xs[0], L, H, C)
    e = rel_err(np.load(os.path.join(d, "logits.npy")), lg.numpy())
    print(f"logits: rel err {e:.2e}")
    ok &= e < 1e-5

    losses = [torch.nn.functional.cross_entropy(forward(P, x, L, H, C).reshape(-1, lg.shape[-1]), y.reshape(-1))
              for x, y in zip(xs, ys)]
    loss = (losses[0] + losses[1]) / 2
    e = abs(loss.item() - fg_loss) / abs(loss.item())
    print(f"loss: torch {loss.item():.8f} flashgrad {fg_loss:.8f} rel err {e:.2e}")
    ok &= e < 1e-5
    loss.backward()

    params = [P[k] for k in names]
    clip = float(ometa["grad_clip"])
    torch.nn.utils.clip_grad_norm_(params, clip)
    decay = [P[k] for k in names if P[k].dim() >= 2]
    nodecay = [P[k] for k in names if P[k].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(ometa["weight_decay"])},
                             {"params": nodecay, "weight_decay": 0.0}], lr=lr,
                            betas=(float(ometa["beta1"]), float(ometa["beta2"])), eps=float(ometa["eps"]))
    off = 0
    t = int(ometa["adamw_t"])
    for k in names:
        n = P[k].numel()
        opt.state[P[k]] = {"step": torch.tensor(float(t)),
                           "exp_avg": torch.tensor(O["exp_avg"][off:off + n].reshape(P[k].shape), dtype=torch.float64),
                           "exp_avg_sq": torch.tensor(O["exp_avg_sq"][off:off + n].reshape(P[k].shape), dtype=torch.float64)}
        off += n
    assert off == O["exp_avg"].size, "moments do not cover the parameters"
    opt.step()

    # compare the update (after - before) of every tensor, relative to the largest update
    worst, where = 0.0, ""
    max_upd = max(np.abs(W1[k].astype(np.float64) - W[k]).max() for k in names)
    for k in names:
        ours = W1[k].astype(np.float64) - W[k]
        ref = P[k].detach().numpy() - W[k]
        err = float(np.abs(ours - ref).max()) / max_upd
        if err > worst:
            worst, where = err, k
    print(f"AdamW step: largest update {max_upd:.3e}, worst error {worst:.2e} of it (in {where})")
    ok &= worst < 2e-3 and max_upd > 1e-4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
