#!/usr/bin/env python3
"""attention_torch_cpu.py — flashgrad's flash attention against PyTorch's CPU attention, side by side.

For each N and with and without the causal mask, in alternating rounds in one run:
  flashgrad: `flashgrad bench attention --impl flash ...` (forward + backward through
             autograd, median of --repeat; it also times OpenBLAS sgemm on the same-shaped products
             and reports flash's GFLOP/s against it);
  PyTorch:   the textbook formula with autograd, as nanoGPT writes it on the CPU
                 att = (q @ k^T) * scale;  att = att.masked_fill(causal_mask, -inf)
                 y = softmax(att) @ v;     y.backward(dout)
             and, where the installed torch has it, F.scaled_dot_product_attention; the faster of
             the two is the one compared. Each configuration runs in a forked child process, so its
             peak RSS is its own (PyTorch's is quadratic in N, flashgrad's linear).
The speed-up is PyTorch's (forward + backward) median time over flashgrad's, per round, then the
median over rounds; "best" is PyTorch's fastest round over flashgrad's fastest (on a shared machine
the minima are the figures least disturbed by others); "per CPU-s" is the same ratio of CPU time
(user + system of all threads, spinning included), which other processes on the machine disturb less
than wall time. --dtype float64 runs both in float64.
Bars: flash forward + backward at >= 80% of the FMA peak, and ahead of PyTorch (speed-up > 1).

Run with Debian's python3 (the one with torch):
    /usr/bin/python3 bench/attention_torch_cpu.py --flashgrad build/flashgrad
        [--n 1024,2048,4096] [--b 4] [--h 4] [--d 64] [--threads 2] [--repeat 3] [--torch-repeat R]
        [--rounds 1]
        [--causal both|0|1] [--dtype float32|float64] [--peak GFLOPS] [--md FILE]
Exits 0 whether or not the targets are met (it is a measurement); 2 on usage errors, 1 when a run
fails. Without torch it says so and exits 0 after the flashgrad runs.
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("want a comma-separated list of integers, got %r" % s)
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError("want positive integers, got %r" % s)
    return v


def run_flashgrad(binary, b, h, n, d, causal, threads, repeat, dtype="float32", peak=0):
    """One `flashgrad bench attention` run; returns the flash row of its CSV as a dict."""
    fd, path = tempfile.mkstemp(suffix=".csv", prefix="fg_attn_")
    os.close(fd)
    cmd = [binary, "bench", "attention", "--impl", "flash", "--b", str(b), "--h", str(h), "--n", str(n),
           "--d", str(d), "--threads", str(threads), "--repeat", str(repeat), "--csv", path, "--dtype", dtype]
    if peak > 0:
        cmd += ["--peak", str(peak)]
    if causal:
        cmd.append("--causal")
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout.splitlines():
            print("  | " + line)
        if p.returncode != 0:
            raise RuntimeError("flashgrad bench attention exited with %d" % p.returncode)
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if r["impl"] == "flash"]
        if not rows:
            raise RuntimeError("flashgrad bench attention wrote no flash row")
        machine = next((l for l in p.stdout.splitlines() if l.startswith("machine:")), "")
        return rows[0], machine
    finally:
        os.unlink(path)


def torch_child(b, h, n, d, causal, threads, repeat, wfd, dtype="float32"):
    """In a forked child: time the PyTorch forms, write 'form fwd_ms bwd_ms rss_kib' lines to wfd."""
    import resource
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dt = torch.float64 if dtype == "float64" else torch.float32
    q = torch.randn(b, h, n, d, dtype=dt, requires_grad=True)
    k = torch.randn(b, h, n, d, dtype=dt, requires_grad=True)
    v = torch.randn(b, h, n, d, dtype=dt, requires_grad=True)
    dout = torch.randn(b, h, n, d, dtype=dt)
    scale = 1.0 / math.sqrt(d)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None

    def textbook():
        att = (q @ k.transpose(-2, -1)) * scale
        if causal:
            att = att.masked_fill(mask, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    forms = [("textbook", textbook)]
    if hasattr(F, "scaled_dot_product_attention"):
        forms.append(("sdpa", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))))
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    out = []
    for name, fn in forms:
        tf, tb, tc = [], [], []
        for it in range(repeat + 1):  # it = 0: warm-up
            q.grad = k.grad = v.grad = None
            c0 = cpu()
            t0 = time.perf_counter()
            y = fn()
            t1 = time.perf_counter()
            y.backward(dout)
            t2 = time.perf_counter()
            c1 = cpu()
            del y
            if it > 0:
                tf.append((t1 - t0) * 1e3)
                tb.append((t2 - t1) * 1e3)
                tc.append((c1 - c0) * 1e3)
        out.append("%s %.4f %.4f %.4f" % (name, statistics.median(tf), statistics.median(tb), statistics.median(tc)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    os.write(wfd, ("\n".join(l + " %d" % rss for l in out) + "\n").encode())


def run_torch(b, h, n, d, causal, threads, repeat, dtype="float32"):
    """Fork a child for one configuration; returns {form: (fwd_ms, bwd_ms, rss_kib)}."""
    r, w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            torch_child(b, h, n, d, causal, threads, repeat, w, dtype)
        except BaseException as e:  # report and leave without running the parent's cleanup
            os.write(w, ("error %r\n" % (e,)).encode())
            code = 1
        os._exit(code)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    res = {}
    for line in data.decode().splitlines():
        parts = line.split()
        if parts and parts[0] == "error":
            raise RuntimeError("PyTorch run failed: " + line)
        res[parts[0]] = (float(parts[1]), float(parts[2]), int(parts[4]), float(parts[3]))
    if not res:
        raise RuntimeError("PyTorch child died (status %d; out of memory?)" % status)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashgrad", default="build/flashgrad", help="the flashgrad binary")
    ap.add_argument("--n", type=parse_list, default=[1024, 2048, 4096])
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="flashgrad's repeats per run")
    ap.add_argument("--torch-repeat", type=int, default=0, help="PyTorch's repeats per run (0: as --repeat, at most 3)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating flashgrad/PyTorch rounds per configuration")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--peak", type=float, default=0,
                    help="the float32 FMA peak in GFLOP/s (from a quiet `flashgrad bench peak`); default: measured")
    ap.add_argument("--md", help="also write the summary as a Markdown table to this file")
    ap.add_argument("--csv", help="also write per-N median times of flash and of each PyTorch form to this CSV "
                                  "(replaced atomically; bench/plots.gp draws the SDPA line from it)")
    a = ap.parse_args()
    if min(a.b, a.h, a.d, a.threads, a.repeat, a.rounds) < 1 or a.torch_repeat < 0:
        ap.error("--b, --h, --d, --threads, --repeat and --rounds must be positive")
    torch_repeat = a.torch_repeat or min(a.repeat, 3)
    if not os.access(a.flashgrad, os.X_OK):
        ap.error("no flashgrad binary at %s (run make first)" % a.flashgrad)
    try:
        import torch  # noqa: F401
        have_torch = True
        torch_version = torch.__version__
    except ImportError:
        have_torch = False
        torch_version = None
        print("attention_torch_cpu: this python (%s) has no torch; flashgrad only" % sys.executable)
    causals = [0, 1] if a.causal == "both" else [int(a.causal)]
    rows = []
    machine = ""
    for n in a.n:
        for causal in causals:
            speedups, fg_runs, th_runs, cpu_speedups, th_all = [], [], [], [], []
            for rnd in range(a.rounds):
                fg, machine = run_flashgrad(a.flashgrad, a.b, a.h, n, a.d, causal, a.threads, a.repeat, a.dtype, a.peak)
                fg_ms = float(fg["fwd_ms"]) + float(fg["bwd_ms"])
                flops = 3.5 * 4.0 * n * n * a.d * a.b * a.h / (2 if causal else 1)
                cgf = float(fg["fwdbwd_gflops_per_cpu_s"])
                fg_cpu_ms = flops / cgf / 1e6 if cgf > 0 else 0
                fg_runs.append(fg)
                if not have_torch:
                    continue
                th = run_torch(a.b, a.h, n, a.d, causal, a.threads, torch_repeat, a.dtype)
                th_all.append(th)
                form = min(th, key=lambda f: th[f][0] + th[f][1])
                th_ms = th[form][0] + th[form][1]
                th_runs.append((form, th[form]))
                speedups.append(th_ms / fg_ms)
                if fg_cpu_ms > 0:
                    cpu_speedups.append(th[form][3] / fg_cpu_ms)
                print("  round %d: flashgrad %.1f ms, PyTorch %s %.1f ms (fwd %.1f + bwd %.1f, peak RSS %.0f MiB): %.2fx"
                      % (rnd + 1, fg_ms, form, th_ms, th[form][0], th[form][1], th[form][2] / 1024, th_ms / fg_ms),
                      flush=True)
            fg = fg_runs[len(fg_runs) // 2]
            row = {
                "n": n, "causal": causal,
                "fg_ms": statistics.median(float(r["fwd_ms"]) + float(r["bwd_ms"]) for r in fg_runs),
                "fg_gf": statistics.median(float(r["fwdbwd_gflops"]) for r in fg_runs),
                "sgemm_gf": statistics.median(float(r["sgemm_gflops"]) for r in fg_runs),
                "fg_rss": max(float(r["peak_rss_kb"]) for r in fg_runs) / 1024,
                "fg_cgf": statistics.median(float(r["fwdbwd_gflops_per_cpu_s"]) for r in fg_runs),
                "sgemm_cgf": statistics.median(float(r["sgemm_gflops_per_cpu_s"]) for r in fg_runs),
                "fg_best_ms": min(float(r["fwd_ms"]) + float(r["bwd_ms"]) for r in fg_runs),
                "fg_gf_best": max(float(r["fwdbwd_gflops"]) for r in fg_runs),
                "peak_gf": max(float(r.get("peak_gflops") or 0) for r in fg_runs),
                "flops": 3.5 * 4.0 * n * n * a.d * a.b * a.h / (2 if causal else 1),
                "fg_fwd": statistics.median(float(r["fwd_ms"]) for r in fg_runs),
                "fg_bwd": statistics.median(float(r["bwd_ms"]) for r in fg_runs),
            }
            for form in ("sdpa", "textbook"):
                got = [t[form] for t in th_all if form in t]
                if got:
                    row[form + "_fwd"] = statistics.median(g[0] for g in got)
                    row[form + "_bwd"] = statistics.median(g[1] for g in got)
            if speedups:
                row["speedup"] = statistics.median(speedups)
                row["th_ms"] = statistics.median(t[1][0] + t[1][1] for t in th_runs)
                row["th_form"] = th_runs[0][0]
                row["th_rss"] = max(t[1][2] for t in th_runs) / 1024
                row["best"] = min(t[1][0] + t[1][1] for t in th_runs) / row["fg_best_ms"]
                if cpu_speedups:
                    row["cpu_speedup"] = statistics.median(cpu_speedups)
            rows.append(row)

    lines = []
    lines.append(machine)
    lines.append("flashgrad %s flash attention, forward + backward, B=%d H=%d d=%d, %d threads; PyTorch %s, %d threads"
                 % (a.dtype, a.b, a.h, a.d, a.threads, torch_version or "(absent)", a.threads))
    lines.append("")
    # Every flashgrad run measures the peak again; a neighbour or a clock dip can only make a
    # measurement low, never high, so every fraction divides by the highest peak of the whole run
    # (as bench_scale.py does): a row's own low peak would read a slow spell as a fast kernel.
    peaks = [r["peak_gf"] for r in rows if r["peak_gf"] > 0]
    peak = a.peak if a.peak > 0 else max(peaks, default=0.0)
    if a.peak > 0:
        lines.append("FMA peak used for every fraction: %.1f GFLOP/s %s (given with --peak)" % (peak, a.dtype))
    else:
        lines.append("FMA peak used for every fraction: %s GFLOP/s %s (measured by flashgrad: the highest of the "
                     "%d rows' peaks in this run, lowest %s)" % ("%.1f" % peak if peak > 0 else "-", a.dtype, len(peaks),
                                                              "%.1f" % min(peaks) if peaks else "-"))
    lines.append("")
    lines.append("| N | causal | flash f+b ms | flash GFLOP/s | sgemm GFLOP/s | flash/sgemm (>= 50%) | per CPU-s: flash, "
                 "sgemm | flash of FMA peak (>= 80%) | PyTorch f+b ms | PyTorch of FMA peak | speed-up vs PyTorch | "
                 "best | per CPU-s | flash peak RSS | PyTorch peak RSS |")
    lines.append("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pct = 100.0 * r["fg_gf"] / r["sgemm_gf"] if r["sgemm_gf"] > 0 else float("nan")
        if "speedup" in r:
            sp = "%.2fx (%s)" % (r["speedup"], "ahead" if r["speedup"] > 1 else "NOT ahead")
            th = "%.0f (%s)" % (r["th_ms"], r["th_form"])
            th_rss = "%.0f MiB" % r["th_rss"]
            th_pk = "%.0f%%" % (100.0 * r["flops"] / (r["th_ms"] * 1e6) / peak) if peak > 0 else "-"
        else:
            sp, th, th_rss, th_pk = "-", "-", "-", "-"
        frac = r["fg_gf_best"] / peak if peak > 0 else 0.0  # the fastest round's flashgrad against the peak
        fpk = "%.0f%% %s" % (100 * frac, "met" if frac >= 0.8 else "NOT met") if peak > 0 else "-"
        best = "%.2fx" % r["best"] if "best" in r else "-"
        cpus = "%.2fx" % r["cpu_speedup"] if "cpu_speedup" in r else "-"
        cpct = 100.0 * r["fg_cgf"] / r["sgemm_cgf"] if r["sgemm_cgf"] > 0 else float("nan")
        lines.append("| %d | %s | %.0f | %.1f | %.1f | %.0f%% %s | %.0f, %.0f (%.0f%%) | %s | %s | %s | %s | %s | %s | %.0f MiB | %s |"
                     % (r["n"], "yes" if r["causal"] else "no", r["fg_ms"], r["fg_gf"], r["sgemm_gf"], pct,
                        "met" if pct >= 50 else "NOT met", r["fg_cgf"], r["sgemm_cgf"], cpct, fpk, th, th_pk, sp,
                        best, cpus, r["fg_rss"], th_rss))
    print()
    print("\n".join(lines))
    if a.csv:
        cols = ["n", "causal", "b", "h", "d", "threads", "dtype", "flash_fwd_ms", "flash_bwd_ms", "sdpa_fwd_ms",
                "sdpa_bwd_ms", "textbook_fwd_ms", "textbook_bwd_ms", "torch", "machine", "date"]
        with open(a.csv + ".tmp", "w") as f:
            f.write(",".join(cols) + "\n")
            for r in rows:
                v = lambda k: "%.4f" % r[k] if k in r else ""
                f.write("%d,%d,%d,%d,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,\"%s\",%s\n" % (
                    r["n"], r["causal"], a.b, a.h, a.d, a.threads, a.dtype, v("fg_fwd"), v("fg_bwd"), v("sdpa_fwd"),
                    v("sdpa_bwd"), v("textbook_fwd"), v("textbook_bwd"), torch_version or "",
                    machine.replace("machine: ", "").replace('"', "'"), time.strftime("%Y-%m-%d", time.gmtime())))
        os.replace(a.csv + ".tmp", a.csv)
    if a.md:
        with open(a.md + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(a.md + ".tmp", a.md)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print("attention_torch_cpu: %s" % e, file=sys.stderr)
        sys.exit(1)
