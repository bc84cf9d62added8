#!/usr/bin/env python3
"""attention_python_sdpa.py — flashgrad.torch.attention against torch's scaled_dot_product_attention on the CPU.

Forward + backward, float32, B=4 H=4 d=64 (defaults), N = --n, with and without the causal mask, in one
process, both on --threads threads (torch.set_num_threads and flashgrad.set_threads), alternating the two
sides --rounds times; each figure is the minimum (--stat median: the median) of the --repeat timed calls
of all rounds, each side after a warm-up call (the minimum is the least disturbed on a shared machine):

    flashgrad:  y = flashgrad.torch.attention(q, k, v, causal=c); y.backward(do)
    SDPA:       y = F.scaled_dot_product_attention(q, k, v, is_causal=c); y.backward(do)

The "C calls alone" column times the library's two calls (python/csrc/fgpy.h) made directly through
ctypes on prepared buffers, in the same rounds: the difference is the Python layer's cost. Then the
wrapper's own cost per call at N = --overhead-n (tiny problems, where it shows): the same
flashgrad.torch forward + backward against the library's two C calls made directly through ctypes
with prepared arguments and buffers (python/csrc/fgpy.h); the difference is what the Python layer
(options, checks, tensor allocation, autograd.Function) adds.

    PYTHONPATH=python FLASHGRAD_LIB=build/libflashgrad.so /work/torch2/bin/python bench/attention_python_sdpa.py
        [--n 1024,2048,4096] [--b 4] [--h 4] [--d 64] [--threads 2] [--repeat 5] [--rounds 1]
        [--overhead-n 64] [--overhead-calls 100] [--overhead-loops 20] [--stat min|median] [--md FILE]
Prints a Markdown table (also to --md FILE). A measurement: exits 0 whatever the figures.
"""
import argparse
import ctypes
import os
import platform
import statistics
import sys
import time


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1024,2048,4096")
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--overhead-n", type=int, default=64)
    ap.add_argument("--overhead-calls", type=int, default=100)
    ap.add_argument("--overhead-loops", type=int, default=20)
    ap.add_argument("--stat", choices=["min", "median"], default="min",
                    help="how the timed calls become one figure (min: the least disturbed, on a shared machine)")
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    pick = min if a.stat == "min" else statistics.median

    import torch
    import torch.nn.functional as F
    import flashgrad
    import flashgrad.torch as fgt
    from flashgrad import _lib

    torch.set_num_threads(a.threads)
    flashgrad.set_threads(a.threads)
    B, H, d = a.b, a.h, a.d
    Ns = [int(x) for x in a.n.split(",") if x]

    def inputs(N, dtype=torch.float32):
        g = torch.Generator().manual_seed(N)
        q, k, v = (torch.randn(B, H, N, d, generator=g, dtype=dtype).requires_grad_() for _ in range(3))
        do = torch.randn(B, H, N, d, generator=g, dtype=dtype)
        return q, k, v, do

    def step_fg(q, k, v, do, causal):
        y = fgt.attention(q, k, v, causal=causal)
        y.backward(do)

    lib = _lib.lib

    def c_step(q, k, v, do, causal):
        """The library's forward and backward calls alone, on prepared buffers (no Python layer)."""
        qd, kd, vd = q.detach(), k.detach(), v.detach()
        N = q.shape[2]
        o, lse, lo = torch.empty_like(qd), torch.empty(B, H, N), torch.empty(B, H, N)
        dq, dk, dv = torch.empty_like(qd), torch.empty_like(kd), torch.empty_like(vd)
        args = _lib.Args(dtype=_lib.F32, impl=_lib.FLASH, B=B, H=H, H_kv=H, Nq=N, Nk=N, d=d, causal=int(causal))
        pa = ctypes.byref(args)
        P = [t.data_ptr() for t in (o, lse, lo, qd, kd, vd, dq, dk, dv, do)]

        def step():
            if lib.fgpy_attn_forward(pa, P[0], P[1], P[2], P[3], P[4], P[5]) or \
                    lib.fgpy_attn_backward(pa, 1, P[6], P[7], P[8], P[9], P[3], P[4], P[5], P[0], P[1], P[2]):
                raise RuntimeError(lib.fgpy_last_error().decode())
        return step, (o, lse, lo, dq, dk, dv)

    def step_sdpa(q, k, v, do, causal):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        y.backward(do)

    def timed(fn, args, repeat):
        fn(*args)  # warm-up
        ts = []
        for _ in range(repeat):
            for t in args[:3]:
                t.grad = None
            t0 = time.perf_counter()
            fn(*args)
            ts.append(time.perf_counter() - t0)
        return ts

    rows = []
    for N in Ns:
        for causal in (False, True):
            args = inputs(N)
            # agreement first: the two must compute the same thing
            y1 = fgt.attention(*args[:3], causal=causal)
            y2 = F.scaled_dot_product_attention(*args[:3], is_causal=causal)
            err = float((y1 - y2).detach().abs().max())
            cstep, keep = c_step(*args, causal)
            tf, ts, tc = [], [], []
            for r in range(a.rounds):
                order = (0, 1, 2) if r % 2 == 0 else (2, 1, 0)
                for side in order:
                    if side == 0:
                        tf += timed(step_fg, args + (causal,), a.repeat)
                    elif side == 1:
                        ts += timed(step_sdpa, args + (causal,), a.repeat)
                    else:
                        tc += timed(lambda *_: cstep(), args, a.repeat)
            f, s, c = pick(tf), pick(ts), pick(tc)
            del keep
            flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0) * 3.5  # fwd 2 products, bwd 5: 3.5x the fwd's 2
            rows.append((N, causal, f, s, s / f, flops / f / 1e9, err, c))
            print("N=%d causal=%d flashgrad %.1f ms  SDPA %.1f ms  speed-up %.2fx  C calls alone %.1f ms  "
                  "max|O diff| %.1e" % (N, causal, f * 1e3, s * 1e3, s / f, c * 1e3, err), flush=True)

    # ---- the wrapper's own cost at a tiny size ----
    n = a.overhead_n
    q, k, v, do = inputs(n)
    calls = a.overhead_calls

    def loop_fg():
        for _ in range(calls):
            y = fgt.attention(q, k, v, causal=True)
            y.backward(do)

    cstep, keep = c_step(q, k, v, do, True)

    def loop_c():
        for _ in range(calls):
            cstep()

    def loop_sdpa():
        for _ in range(calls):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y.backward(do)

    def per_call(fn):
        fn()
        ts = []
        for _ in range(a.overhead_loops):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) / calls)
        return pick(ts)

    t_fg, t_c, t_sd = per_call(loop_fg), per_call(loop_c), per_call(loop_sdpa)

    lines = []
    lines.append("flashgrad.torch.attention vs torch.nn.functional.scaled_dot_product_attention, float32 forward + "
                 "backward, B=%d H=%d d=%d, %d threads, %s of %d calls x %d rounds (torch %s, %s, Python %s)"
                 % (B, H, d, a.threads, a.stat, a.repeat, a.rounds, torch.__version__, cpu_name(),
                    platform.python_version()))
    lines.append("")
    lines.append("| N | causal | flashgrad.torch ms | SDPA ms | speed-up vs SDPA | flashgrad GFLOP/s | "
                 "C calls alone ms | wrapper share | max abs O diff |")
    lines.append("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
    for N, c, f, s, sp, gf, err, cc in rows:
        lines.append("| %d | %s | %.1f | %.1f | %.2fx | %.0f | %.1f | %+.1f%% | %.1e |"
                     % (N, "yes" if c else "no", f * 1e3, s * 1e3, sp, gf, cc * 1e3, (f - cc) / cc * 100, err))
    lines.append("")
    lines.append("Per call at N=%d (causal, forward + backward, B=%d H=%d d=%d, %s of %d loops of %d calls): "
                 "flashgrad.torch %.1f us, the two C calls alone %.1f us -> wrapper overhead %.1f us per call; "
                 "SDPA %.1f us." % (n, B, H, d, a.stat, a.overhead_loops, calls, t_fg * 1e6, t_c * 1e6, (t_fg - t_c) * 1e6, t_sd * 1e6))
    text = "\n".join(lines)
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
