#!/usr/bin/env python3
"""attention_python_sdpa.py — flashgrad.torch.attention against torch's scaled_dot_product_attention on the CPU.

Forward + backward, float32, B=4 H=4 d=64 (defaults), N = --n, with and without the causal mask, in one
process, both on --threads threads (torch.set_num_threads and flashgrad.set_threads), alternating the two
sides --rounds times; each figure is the minimum (--stat median: the median) of the --repeat timed calls
of all rounds, each side after a warm-up call (the minimum is the least disturbed on a shared machine):

    flashgrad:  y = flashgrad.torch.attention(q, k, v, causal=c); y.backward(do)
    SDPA:       y = F.scaled_dot_product_attention(q, k, v, is_causal=c); y.backward(do)

The "C calls alone" column times the library's two calls (python/csrc/fgpy.h) made directly through
ctypes on prepared buffers, in the same rounds: the difference is the Python layer's cost. flashgrad
runs on torch's OpenMP threads (what importing flashgrad.torch sets up; --pool: on its own pool).

Then the wrapper's own cost per call at N = --overhead-n (tiny problems, where it shows), in three
loops (forward only under no_grad; forward + backward with the gradients set to None after each
call; forward + backward accumulating into the leaves, where torch's own ops run between flashgrad's
calls), each with flashgrad on torch's threads and on its own pool: flashgrad.torch against the
library's C calls made directly through ctypes with prepared arguments and buffers, and SDPA in the
same loop. Those rows come once with this process's environment and once from a child process with
OMP_WAIT_POLICY=PASSIVE (torch's OpenMP threads then sleep at once instead of spinning; --no-passive
skips it).

    PYTHONPATH=python FLASHGRAD_LIB=build/libflashgrad.so /work/torch2/bin/python bench/attention_python_sdpa.py
        [--n 1024,2048,4096] [--b 4] [--h 4] [--d 64] [--threads 2] [--repeat 5] [--rounds 1] [--pool]
        [--overhead-n 64] [--overhead-calls 50] [--overhead-loops 10] [--no-passive] [--stat min|median]
        [--md FILE]
Prints Markdown tables (also to --md FILE). A measurement: exits 0 whatever the figures.
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


OVERHEAD_KEYS = ("policy", "threads", "loop", "fg", "c", "sdpa")


def overhead_rows(a, fgt, F, lib, _lib, inputs, c_step, pick):
    """The per-call figures at N = --overhead-n, causal, as dicts (OVERHEAD_KEYS; times in s): for
    each threading of flashgrad (torch's OpenMP threads, share_threads(True), what importing
    flashgrad.torch does; or flashgrad's own pool) and each loop (forward only under no_grad;
    forward + backward with the gradients set to None after each call; forward + backward
    accumulating into the leaves), flashgrad.torch against the library's C calls alone and SDPA,
    all in alternating rounds."""
    import torch
    n, calls = a.overhead_n, a.overhead_calls
    q, k, v, do = inputs(n)
    cstep, keep = c_step(q, k, v, do, True)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    args = _lib.Args(dtype=_lib.F32, impl=_lib.FLASH, B=q.shape[0], H=q.shape[1], H_kv=q.shape[1], Nq=n, Nk=n,
                     d=q.shape[3], causal=1)
    o, lse = torch.empty_like(qd), torch.empty(2, q.shape[0], q.shape[1], n)
    P = (o.data_ptr(), lse.data_ptr(), lse[1].data_ptr(), qd.data_ptr(), kd.data_ptr(), vd.data_ptr())

    def c_fwd():
        for _ in range(calls):
            lib.fgpy_attn_forward(args, *P)

    def c_both():
        for _ in range(calls):
            cstep()

    def fg_fwd():
        with torch.no_grad():
            for _ in range(calls):
                fgt.attention(q, k, v, causal=True)

    def sd_fwd():
        with torch.no_grad():
            for _ in range(calls):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def both(f, accumulate):
        def loop():
            for _ in range(calls):
                f(q, k, v).backward(do)
                if not accumulate:
                    q.grad = k.grad = v.grad = None
        return loop

    fg = lambda q, k, v: fgt.attention(q, k, v, causal=True)  # noqa: E731
    sd = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    loops = [("forward (no_grad)", fg_fwd, c_fwd, sd_fwd),
             ("fwd+bwd, grads None", both(fg, False), c_both, both(sd, False)),
             ("fwd+bwd, accumulated", both(fg, True), c_both, both(sd, True))]
    modes = [("torch's OpenMP", True), ("flashgrad's pool", False)]
    times = {}
    for r in range(a.overhead_loops):
        for mname, share in (modes if r % 2 == 0 else modes[::-1]):
            if fgt.share_threads(share) != share:
                continue  # torch's backend is not OpenMP: only the pool
            for lname, f_fg, f_c, f_sd in loops:
                for side, f in (("fg", f_fg), ("c", f_c), ("sdpa", f_sd)):
                    if r == 0:
                        f()  # warm-up
                    t0 = time.perf_counter()
                    f()
                    times.setdefault((mname, lname, side), []).append((time.perf_counter() - t0) / calls)
    fgt.share_threads(True)
    for t in (q, k, v):
        t.grad = None
    del keep
    policy = os.environ.get("OMP_WAIT_POLICY") or "(torch's default)"
    rows = []
    for mname, _ in modes:
        for lname, *_ in loops:
            if (mname, lname, "fg") in times:
                rows.append(dict(policy=policy, threads=mname, loop=lname,
                                 **{side: pick(times[(mname, lname, side)]) for side in ("fg", "c", "sdpa")}))
    return rows


def overhead_subprocess(a, policy):
    """overhead_rows in a child process whose environment has OMP_WAIT_POLICY=policy (torch's
    OpenMP runtime reads it when it loads, so this process cannot switch)."""
    import json
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), "--overhead-only", "--threads", str(a.threads),
           "--b", str(a.b), "--h", str(a.h), "--d", str(a.d), "--overhead-n", str(a.overhead_n),
           "--overhead-calls", str(a.overhead_calls), "--overhead-loops", str(a.overhead_loops), "--stat", a.stat]
    r = subprocess.run(cmd, env=dict(os.environ, OMP_WAIT_POLICY=policy), capture_output=True, text=True)
    if r.returncode != 0:
        print("overhead with OMP_WAIT_POLICY=%s failed: %s" % (policy, r.stderr.strip()[-400:]), file=sys.stderr)
        return []
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def overhead_table(a, rows):
    out = ["Per call at N=%d (causal, B=%d H=%d d=%d, %d threads, %s of %d rounds of %d calls): flashgrad.torch "
           "against the library's C calls alone (prepared buffers, same threads) and SDPA in the same loop; "
           "overhead = flashgrad.torch - C calls." % (a.overhead_n, a.b, a.h, a.d, a.threads, a.stat,
                                                       a.overhead_loops, a.overhead_calls), "",
           "| OMP_WAIT_POLICY | flashgrad runs on | loop | flashgrad.torch us | C calls us | overhead us | SDPA us |",
           "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append("| %s | %s | %s | %.0f | %.0f | %+.0f | %.0f |" % (r["policy"], r["threads"], r["loop"], r["fg"] * 1e6,
                                                                     r["c"] * 1e6, (r["fg"] - r["c"]) * 1e6,
                                                                     r["sdpa"] * 1e6))
    return out


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
    ap.add_argument("--overhead-calls", type=int, default=50)
    ap.add_argument("--overhead-loops", type=int, default=10)
    ap.add_argument("--stat", choices=["min", "median"], default="min",
                    help="how the timed calls become one figure (min: the least disturbed, on a shared machine)")
    ap.add_argument("--md", default=None)
    ap.add_argument("--no-passive", dest="passive", action="store_false",
                    help="skip the overhead figures with OMP_WAIT_POLICY=PASSIVE (a child process)")
    ap.add_argument("--pool", action="store_true",
                    help="the N table with flashgrad's own pool (share_threads(False)) instead of torch's threads")
    ap.add_argument("--overhead-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    pick = min if a.stat == "min" else statistics.median

    import torch
    import torch.nn.functional as F
    import flashgrad
    import flashgrad.torch as fgt
    from flashgrad import _lib

    torch.set_num_threads(a.threads)
    flashgrad.set_threads(a.threads)
    sharing = fgt.share_threads(not a.pool)
    B, H, d = a.b, a.h, a.d
    Ns = [] if a.overhead_only else [int(x) for x in a.n.split(",") if x]

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
    over = overhead_rows(a, fgt, F, lib, _lib, inputs, c_step, pick)
    if a.overhead_only:
        import json
        for r in over:
            print(json.dumps(r))
        return 0
    if a.passive and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        over += overhead_subprocess(a, "PASSIVE")
    lines = []
    lines.append("flashgrad.torch.attention vs torch.nn.functional.scaled_dot_product_attention, float32 forward + "
                 "backward, B=%d H=%d d=%d, %d threads (flashgrad on %s), %s of %d calls x %d rounds (torch %s, "
                 "%s, Python %s, OMP_WAIT_POLICY %s)"
                 % (B, H, d, a.threads, "torch's OpenMP threads" if sharing else "its own pool", a.stat, a.repeat,
                    a.rounds, torch.__version__, cpu_name(), platform.python_version(),
                    os.environ.get("OMP_WAIT_POLICY") or "unset"))
    lines.append("")
    lines.append("| N | causal | flashgrad.torch ms | SDPA ms | speed-up vs SDPA | flashgrad GFLOP/s | "
                 "C calls alone ms | wrapper share | max abs O diff |")
    lines.append("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
    for N, c, f, s, sp, gf, err, cc in rows:
        lines.append("| %d | %s | %.1f | %.1f | %.2fx | %.0f | %.1f | %+.1f%% | %.1e |"
                     % (N, "yes" if c else "no", f * 1e3, s * 1e3, sp, gf, cc * 1e3, (f - cc) / cc * 100, err))
    lines.append("")
    lines += overhead_table(a, over)
    text = "\n".join(lines)
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
