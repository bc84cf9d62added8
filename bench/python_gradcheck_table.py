#!/usr/bin/env python3
"""python_gradcheck_table.py — one row per attention variant: flashgrad.gradcheck_attention's three checks and
torch.autograd.gradcheck of flashgrad.torch.attention in float64 (when torch is installed).

Columns: check 1, the largest relative error of naive float64 against central finite differences over dQ,
dK, dV (each element held to 1e-7 + 1e-5 |numeric|); check 2, the largest max|flash - naive| / max|naive|
in float64 over O, dQ, dK, dV (held to 1e-12); check 3, the largest ratio of flash float32's error to
naive float32's (both against float64; held to 2x plus a floor); torch.autograd.gradcheck (float64,
eps 1e-6, atol 1e-7, rtol 1e-5) on (B, H, Nq, Nk, d) = (1, 2, 6, 7, 3).

    PYTHONPATH=python /work/torch2/bin/python bench/python_gradcheck_table.py [--shape 2,4,16,19,8] [--md FILE]
"""
import argparse
import math
import sys


def mod(s, b, h, i, j):
    return 2.0 * math.tanh(s / 2.0) - 0.05 * abs(i - j)


def mod_grad(s, b, h, i, j):
    t = math.tanh(s / 2.0)
    return 1 - t * t


def prefix_mask(b, h, i, j):
    return j < 3 or j <= i


VARIANTS = [
    ("none", {}),
    ("causal", {"causal": True}),
    ("dropout 0.2", {"dropout": 0.2, "seed": 5}),
    ("causal + dropout 0.1", {"causal": True, "dropout": 0.1, "seed": 3}),
    ("GQA (H_kv = H/2)", {"kv_heads": "half"}),
    ("MQA (H_kv = 1) + causal", {"kv_heads": 1, "causal": True}),
    ("window (3, 1)", {"window": (3, 1)}),
    ("window (4, -1) + causal", {"window": (4, None), "causal": True}),
    ("ALiBi", {"alibi": True}),
    ("ALiBi + causal", {"alibi": True, "causal": True}),
    ("softcap 5", {"softcap": 5.0}),
    ("softcap 2 + causal + dropout 0.1", {"softcap": 2.0, "causal": True, "dropout": 0.1, "seed": 9}),
    ("all built-ins together", {"kv_heads": "half", "window": (5, 2), "alibi": True, "softcap": 3.0, "causal": True,
                                "dropout": 0.1, "seed": 2}),
    ("score_mod (Python)", {"score_mod": mod, "score_mod_grad": mod_grad}),
    ("mask (Python, prefix LM)", {"mask": prefix_mask}),
    ("registered doc-mask + causal", {"variant": "doc-mask", "causal": True}),
    ("registered softcap-cb", {"variant": "softcap-cb"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="2,4,16,19,8")
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    import flashgrad
    try:
        import torch
        import flashgrad.torch as fgt
    except ImportError:
        torch = None
    B, H, Nq, Nk, d = (int(x) for x in a.shape.split(","))
    lines = ["flashgrad.gradcheck_attention, (B, H, Nq, Nk, d) = (%d, %d, %d, %d, %d), seed 0, blocks 4 x 3; "
             "torch.autograd.gradcheck of flashgrad.torch.attention in float64 on (1, 2, 6, 7, 3)" % (B, H, Nq, Nk, d),
             "",
             "| variant | 1. naive f64 vs finite diff: max rel | 2. flash f64 vs naive f64: max rel | "
             "3. flash f32 err / naive f32 err (max) | gradcheck_attention | torch.autograd.gradcheck f64 |",
             "|---|---:|---:|---:|:---:|:---:|"]
    ok = True
    for name, opts in VARIANTS:
        o = dict(opts)
        if o.get("kv_heads") == "half":
            o["kv_heads"] = H // 2
        rep = flashgrad.gradcheck_attention(shape=(B, H, Nq, Nk, d), **o)
        c1 = max(r.max_rel for r in rep.rows if r.check.startswith("naive f64 vs finite"))
        c2 = max(r.max_rel for r in rep.rows if r.check.startswith("flash f64"))
        f32 = {r.tensor: r.max_abs for r in rep.rows if r.check.startswith("flash f32")}
        n32 = {r.tensor: r.max_abs for r in rep.rows if r.check.startswith("naive f32")}
        c3 = max(f32[t] / n32[t] if n32[t] > 0 else 0.0 for t in f32)
        tg = "-"
        if torch is not None:
            g = torch.Generator().manual_seed(0)
            hk = 1 if o.get("kv_heads") else 2
            oo = dict(o)
            if "kv_heads" in oo:
                oo["kv_heads"] = hk
            q = torch.randn(1, 2, 6, 3, generator=g, dtype=torch.float64, requires_grad=True)
            k = torch.randn(1, hk, 7, 3, generator=g, dtype=torch.float64, requires_grad=True)
            v = torch.randn(1, hk, 7, 3, generator=g, dtype=torch.float64, requires_grad=True)
            passed = torch.autograd.gradcheck(lambda q, k, v: fgt.attention(q, k, v, **oo), (q, k, v), eps=1e-6,
                                              atol=1e-7, rtol=1e-5, raise_exception=False)
            tg = "PASS" if passed else "FAIL"
            ok &= passed
        ok &= rep.passed
        lines.append("| %s | %.1e | %.1e | %.2f | %s | %s |" % (name, c1, c2, c3, "PASS" if rep.passed else "FAIL",
                                                                 tg))
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
