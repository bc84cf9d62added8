#!/usr/bin/env python3
"""flex_speed.py — flashgrad.torch.flex_attention's speed on CPU float32 tensors, in one process:

  1. a causal BlockMask (no score_mod: flashgrad's C kernels with the block mask as a tensor mask)
     against flashgrad's built-in causal attention (flashgrad.torch.attention(causal=True)),
     forward and forward + backward;
  2. a score_mod variant (ALiBi on a causal BlockMask: query-block rows in torch) against
     torch.compile'd torch.nn.attention.flex_attention's CPU forward (PyTorch has no CPU backward),
     and flashgrad's forward + backward;
  3. flash_attn_func's per-call cost with a large batch (B = 60, N = 239: the authors' race test).
Each figure is the median of --reps timed runs after one untimed run (torch.compile's compilation
is in that untimed run).

    PYTHONPATH=python ../torch2/bin/python bench/flex_speed.py [--N 2048] [--B 1] [--H 8] [--d 64]
        [--reps 3] [--threads 2] [--md FILE]
"""
import argparse
import statistics
import time


def median_ms(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--N", type=int, default=2048)
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", default=None)
    a = ap.parse_args()

    import torch
    import torch.nn.attention.flex_attention as tfa
    import flashgrad.torch as fgt

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, H, N, d = a.B, a.H, a.N, a.d
    q, k, v = (torch.randn(B, H, N, d, requires_grad=True) for _ in range(3))
    bm = tfa.create_block_mask(lambda b, h, i, j: i >= j, None, None, N, N, device="cpu")
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)])

    def alibi(s, b, h, i, j):
        return s - slopes[h] * (i - j)

    def fb(f):
        def run():
            out = f()
            out.sum().backward()
            q.grad = k.grad = v.grad = None
        return run

    def fwd(f):
        def run():
            with torch.no_grad():
                f()
        return run

    rows = []
    builtin = lambda: fgt.attention(q, k, v, causal=True)  # noqa: E731
    flex_c = lambda: fgt.flex_attention(q, k, v, block_mask=bm)  # noqa: E731
    rows.append(("causal BlockMask, fg.flex_attention", "forward", median_ms(fwd(flex_c), a.reps)))
    rows.append(("built-in causal, fg.attention", "forward", median_ms(fwd(builtin), a.reps)))
    rows.append(("causal BlockMask, fg.flex_attention", "fwd+bwd", median_ms(fb(flex_c), a.reps)))
    rows.append(("built-in causal, fg.attention", "fwd+bwd", median_ms(fb(builtin), a.reps)))
    flex_sm = lambda: fgt.flex_attention(q, k, v, score_mod=alibi, block_mask=bm)  # noqa: E731
    compiled = torch.compile(tfa.flex_attention)
    torch_sm = lambda: compiled(q.detach(), k.detach(), v.detach(), score_mod=alibi, block_mask=bm)  # noqa: E731
    rows.append(("ALiBi score_mod + causal BlockMask, fg.flex_attention", "forward", median_ms(fwd(flex_sm), a.reps)))
    rows.append(("ALiBi score_mod + causal BlockMask, torch.compile(flex_attention)", "forward",
                 median_ms(fwd(torch_sm), a.reps)))
    rows.append(("ALiBi score_mod + causal BlockMask, fg.flex_attention", "fwd+bwd", median_ms(fb(flex_sm), a.reps)))
    with torch.no_grad():
        o1 = fgt.flex_attention(q, k, v, score_mod=alibi, block_mask=bm)
        o2 = torch_sm()
    err = (o1 - o2).abs().max().item()

    qf = torch.randn(60, 239, 4, 64, requires_grad=True)
    fa = lambda: fgt.flash_attn_func(qf, qf, qf, causal=True)  # noqa: E731

    def fa_fb():
        fa().sum().backward()
        qf.grad = None
    rows.append(("flash_attn_func B=60 N=239 H=4 d=64 causal", "forward", median_ms(fwd(fa), a.reps)))
    rows.append(("flash_attn_func B=60 N=239 H=4 d=64 causal", "fwd+bwd", median_ms(fa_fb, a.reps)))

    head = "flex_attention speed, B %d H %d N %d d %d float32, %d threads, torch %s (median of %d)" % (
        B, H, N, d, a.threads, torch.__version__, a.reps)
    lines = [head, "", "| what | pass | ms |", "|---|---|---:|"]
    lines += ["| %s | %s | %.1f |" % r for r in rows]
    ratio = rows[0][2] / rows[1][2], rows[2][2] / rows[3][2]
    lines += ["", "causal BlockMask / built-in causal: forward %.2fx, fwd+bwd %.2fx" % ratio,
              "ALiBi: fg.flex_attention forward / torch.compile forward: %.2fx (max |difference| %.2g)"
              % (rows[4][2] / rows[5][2], err)]
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
