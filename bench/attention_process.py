#!/usr/bin/env python3
"""attention_process.py — `flashgrad attention` as a whole process against the same work in-process.

Writes random Q, K, V, dO (.npy, float32 or float64, B H N d) to a temporary folder, then in
alternating rounds times
  process:    `flashgrad attention --q --k --v --do --out DIR` (wall time, and user + system CPU
              time), which maps the inputs, runs forward + backward and writes o, lse, dq, dk, dv
              (fsync'ed);
  in-process: `flashgrad bench attention --impl flash` on the same shape (forward + backward
              through autograd, wall and CPU time of the median repeat);
and prints the minima over the rounds (on a shared machine the least disturbed figures) and their
ratio; the target is process <= 1.5x in-process at N = 2048.

    python3 bench/attention_process.py [--flashgrad build/flashgrad] [--n 2048] [--b 4] [--h 4]
        [--d 64] [--dtype float32|float64] [--threads 2] [--rounds 5] [--causal]
Needs numpy. Exits 0 (a measurement), 2 on usage errors, 1 when a run fails.
"""
import argparse
import csv
import os
import resource
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashgrad", default="build/flashgrad")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    if min(a.n, a.b, a.h, a.d, a.threads, a.rounds) < 1:
        ap.error("sizes, --threads and --rounds must be positive")
    import numpy as np
    tmp = tempfile.mkdtemp(prefix="fg_attn_proc_")
    rng = np.random.default_rng(0)
    paths = {}
    for name in ("q", "k", "v", "do"):
        paths[name] = os.path.join(tmp, name + ".npy")
        np.save(paths[name], rng.standard_normal((a.b, a.h, a.n, a.d)).astype(a.dtype))
    out = os.path.join(tmp, "out")
    env = dict(os.environ, FG_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS="1")
    proc = [a.flashgrad, "attention", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--do", paths["do"],
            "--out", out] + (["--causal"] if a.causal else [])
    csvp = os.path.join(tmp, "bench.csv")
    inproc = [a.flashgrad, "bench", "attention", "--impl", "flash", "--no-sgemm", "--n", str(a.n), "--b", str(a.b),
              "--h", str(a.h), "--d", str(a.d), "--dtype", a.dtype, "--threads", str(a.threads), "--repeat", "1",
              "--peak", "1", "--csv", csvp] + (["--causal"] if a.causal else [])
    pw, pc, iw, ic = [], [], [], []
    try:
        for rnd in range(a.rounds):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run(proc, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            t1 = time.perf_counter()
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode != 0:
                raise RuntimeError("flashgrad attention exited with %d: %s" % (p.returncode, p.stdout.strip()))
            pw.append((t1 - t0) * 1e3)
            pc.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3)
            p = subprocess.run(inproc, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                raise RuntimeError("flashgrad bench attention exited with %d: %s" % (p.returncode, p.stdout))
            with open(csvp) as f:
                row = next(r for r in csv.DictReader(f) if r["impl"] == "flash")
            iw.append(float(row["fwd_ms"]) + float(row["bwd_ms"]))
            flops = 3.5 * 4.0 * a.n * a.n * a.d * a.b * a.h / (2 if a.causal else 1)
            ic.append(flops / float(row["fwdbwd_gflops_per_cpu_s"]) / 1e6 if float(row["fwdbwd_gflops_per_cpu_s"]) else 0)
            print("round %d: process %.0f ms wall (%.0f ms CPU), in-process %.0f ms wall (%.0f ms CPU)"
                  % (rnd + 1, pw[-1], pc[-1], iw[-1], ic[-1]), flush=True)
    finally:
        for name in list(paths.values()) + [csvp]:
            if os.path.exists(name):
                os.unlink(name)
        if os.path.isdir(out):
            for f in os.listdir(out):
                os.unlink(os.path.join(out, f))
            os.rmdir(out)
        os.rmdir(tmp)
    print("flashgrad attention, %s B=%d H=%d N=%d d=%d%s, %d threads, fwd+bwd with the five outputs written:"
          % (a.dtype, a.b, a.h, a.n, a.d, " causal" if a.causal else "", a.threads))
    print("  minima over %d rounds: process %.0f ms wall / %.0f ms CPU; in-process %.0f ms wall / %.0f ms CPU; "
          "process / in-process = %.2fx wall, %.2fx CPU (target <= 1.5x)"
          % (a.rounds, min(pw), min(pc), min(iw), min(ic), min(pw) / min(iw), min(pc) / min(ic) if min(ic) else 0))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print("attention_process: %s" % e, file=sys.stderr)
        sys.exit(1)
