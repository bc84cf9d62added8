#!/usr/bin/python3
"""muon_torch_check.py: flashgrad's --optimizer muon against torch.optim.Muon + torch.optim.AdamW.

Run by tests/test_muon.c as `muon_torch_check.py DIR K`. DIR holds what the C side wrote:
  s0/{model,optimizer}.safetensors     the run before its first step
  s1 .. sK/{model,optimizer}.safetensors   the run after each of K steps
  x{k}_{m}.npy, y{k}_{m}.npy           step k's micro-batch m (m = 0, 1): tokens, targets
  lr.txt                               one line per step: AdamW's lr, Muon's lr, flashgrad's loss

The model is written again from its definition (GPT-2 blocks, as tests/gpt_torch_check.py does) in
float64 torch, and each step is torch.autograd + clip_grad_norm_ + torch.optim.Muon on the 2-d
matrices inside the blocks + torch.optim.AdamW on the rest (weight decay on the 2-d ones), each at
its group's learning rate, continuing from torch's own state step after step. torch.optim.Muon runs
its Newton-Schulz iteration in bfloat16, a GPU speed choice; its module's bfloat16 is pointed at
float64 here, so the comparison measures the algorithm and not bf16 rounding (flashgrad iterates
in the model's dtype).

Exits 0 when every step's loss, update and momentum buffer agree, 1 on a mismatch, 77 when numpy
or torch is missing or torch has no torch.optim.Muon.
"""
import math
import os
import sys

SKIP = 77
try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: numpy/torch not importable by {sys.executable} ({e})")
    sys.exit(SKIP)
if not hasattr(torch.optim, "Muon"):
    print(f"skipped: torch {torch.__version__} has no torch.optim.Muon (PyTorch >= 2.9)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch_check import forward, load_st, table_order  # noqa: E402


class _Float64ForBf16:
    """torch, except that torch.bfloat16 reads as torch.float64 (for torch.optim._muon only)."""

    def __getattr__(self, name):
        return torch.float64 if name == "bfloat16" else getattr(torch, name)


def main():
    d, K = sys.argv[1], int(sys.argv[2])
    import torch.optim._muon as muon_mod
    muon_mod.torch = _Float64ForBf16()

    W, meta = load_st(os.path.join(d, "s0", "model.safetensors"))
    _, ometa = load_st(os.path.join(d, "s0", "optimizer.safetensors"))
    assert ometa.get("optimizer") == "muon", "the run did not train with Muon"
    L, H, C = int(meta["n_layer"]), int(meta["n_head"]), int(meta["n_embd"])
    names = table_order(L)
    P = {k: torch.tensor(W[k], dtype=torch.float64, requires_grad=True) for k in names}
    hidden = [k for k in names if k.startswith("transformer.h.") and P[k].dim() == 2]
    rest = [k for k in names if k not in hidden]
    adjust = ometa["muon_adjust_lr"]
    muon = torch.optim.Muon([P[k] for k in hidden], lr=1.0, weight_decay=float(ometa["muon_weight_decay"]),
                            momentum=float(ometa["muon_momentum"]), nesterov=ometa["muon_nesterov"] == "1",
                            ns_steps=int(ometa["muon_ns_steps"]), adjust_lr_fn=adjust)
    adamw = torch.optim.AdamW([{"params": [P[k] for k in rest if P[k].dim() >= 2],
                                "weight_decay": float(ometa["weight_decay"])},
                               {"params": [P[k] for k in rest if P[k].dim() < 2], "weight_decay": 0.0}],
                              lr=1.0, betas=(float(ometa["beta1"]), float(ometa["beta2"])), eps=float(ometa["eps"]))
    clip = float(ometa["grad_clip"])
    lrs = [tuple(float(v) for v in line.split()) for line in open(os.path.join(d, "lr.txt"))]
    ok = True
    for k in range(1, K + 1):
        lr, mlr, fg_loss = lrs[k - 1]
        before = {n: P[n].detach().clone() for n in names}
        losses = []
        for m in (0, 1):
            x = torch.from_numpy(np.load(os.path.join(d, f"x{k}_{m}.npy"))).long()
            y = torch.from_numpy(np.load(os.path.join(d, f"y{k}_{m}.npy"))).long()
            lg = forward(P, x, L, H, C)
            losses.append(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)))
        loss = (losses[0] + losses[1]) / 2
        for p in P.values():
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_([P[n] for n in names], clip)
        for g in muon.param_groups:
            g["lr"] = mlr
        for g in adamw.param_groups:
            g["lr"] = lr
        muon.step()
        adamw.step()
        el = abs(loss.item() - fg_loss) / abs(loss.item())
        W1, _ = load_st(os.path.join(d, f"s{k}", "model.safetensors"))
        O1, _ = load_st(os.path.join(d, f"s{k}", "optimizer.safetensors"))
        # each tensor's update, relative to the largest update of its group
        worst = {"muon": (0.0, ""), "adamw": (0.0, "")}
        for group, keys in (("muon", hidden), ("adamw", rest)):
            big = max(float((P[n].detach() - before[n]).abs().max()) for n in keys)
            for n in keys:
                ours = W1[n].astype(np.float64) - before[n].numpy()
                ref = (P[n].detach() - before[n]).numpy()
                e = float(np.abs(ours - ref).max()) / big
                if e > worst[group][0]:
                    worst[group] = (e, n)
        # the momentum buffers, back to back in table order
        buf = O1["muon_momentum_buffer"]
        off, eb = 0, 0.0
        for n in hidden:
            cnt = P[n].numel()
            ref = muon.state[P[n]]["momentum_buffer"].numpy().reshape(-1)
            eb = max(eb, float(np.abs(buf[off:off + cnt] - ref).max() / max(np.abs(ref).max(), 1e-30)))
            off += cnt
        assert off == buf.size, "the momentum buffer does not cover the Muon matrices"
        print(f"step {k}: loss rel err {el:.2e}; Muon update err {worst['muon'][0]:.2e} ({worst['muon'][1]}), "
              f"AdamW update err {worst['adamw'][0]:.2e} ({worst['adamw'][1]}), momentum buffer err {eb:.2e}")
        ok &= el < 1e-5 and worst["muon"][0] < 1e-3 and worst["adamw"][0] < 2e-3 and eb < 1e-4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
