#!/usr/bin/python3
"""attention_variants_torch_check.py: `flashgrad attention` with --gqa, --window, --alibi and --softcap
against PyTorch autograd of the definition in ops/attention.h:

    K, V repeated per group (torch.repeat_interleave, as torch's scaled_dot_product_attention with
    enable_gqa=True), s = scale * Q @ K^T, s = c * tanh(s / c), s -= slope_h * |i' - j| with the ALiBi
    paper's slopes, masked with -inf outside causal (j <= i') and the window (i' - L <= j <= i' + R),
    i' = i + Nk - Nq; P = softmax(s) (rows with no visible key: 0), dropout, O = P @ V.

Errors are max|a - b| / max|b|; the limit is 1e-10 for float64 outputs and 2e-5 for float32 ones.
Dropout reuses the numpy Philox of tests/attention_torch_check.py (checked against the Random123 known
answers there). Run by `make test` (tests/test_attention_variants.c) with FG_BIN set. Exits 0 on success,
1 on a mismatch, 77 (with the reason on stdout) when it cannot run. --quick runs fewer cases.
"""
import importlib.util
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("attention_torch_check", os.path.join(HERE, "attention_torch_check.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)  # exits 77 itself when numpy, torch or FG_BIN is missing
np, torch, FG_BIN = base.np, base.torch, base.FG_BIN


def alibi_slopes(n):
    """The ALiBi paper's slopes: a geometric sequence from 2^(-8/n) for n a power of two, else the
    closest smaller power of two's slopes followed by every other slope of twice that many heads."""
    if math.log2(n).is_integer():
        first = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [first ** (i + 1) for i in range(n)]
    c = 2 ** math.floor(math.log2(n))
    return alibi_slopes(c) + alibi_slopes(2 * c)[0::2][: n - c]


def reference(q, k, v, do, causal, p, seed, window, alibi, softcap):
    Q, K, V = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    Kr, Vr = K.repeat_interleave(H // Hkv, dim=1), V.repeat_interleave(H // Hkv, dim=1)
    s = (Q @ Kr.transpose(-1, -2)) / math.sqrt(d)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    ip = torch.arange(Nq).view(Nq, 1) + (Nk - Nq)
    j = torch.arange(Nk).view(1, Nk)
    if alibi:
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float64).view(H, 1, 1)
        s = s - slopes * (ip - j).abs().to(torch.float64)
    visible = torch.ones(Nq, Nk, dtype=torch.bool)
    if causal:
        visible &= j <= ip
    if window is not None:
        L, R = window
        if L >= 0:
            visible &= j >= ip - L
        if R >= 0:
            visible &= j <= ip + R
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    P = torch.softmax(s, dim=-1)
    P = torch.where(torch.isnan(P), torch.zeros_like(P), P)  # rows with no visible key
    if p > 0:
        Z = torch.tensor(base.keep_mask(B, H, Nq, Nk, p, seed), dtype=torch.float64) / (1.0 - p)
        P = P * Z
    O = P @ Vr
    O.backward(torch.tensor(do, dtype=torch.float64))
    return {"o": O.detach().numpy(), "lse": lse.detach().numpy(), "dq": Q.grad.numpy(), "dk": K.grad.numpy(),
            "dv": V.grad.numpy()}


# (B, H, Hkv, Nq, Nk, d, causal, p, window, alibi, softcap, block_q, block_k)
CASES = [
    (2, 4, 2, 13, 17, 8, False, 0.0, None, False, 0.0, 4, 5),          # GQA
    (1, 6, 1, 20, 20, 8, True, 0.0, None, False, 0.0, 8, 8),           # MQA
    (1, 2, 2, 40, 40, 8, False, 0.0, (5, 2), False, 0.0, 8, 8),        # window
    (1, 2, 2, 19, 31, 8, True, 0.0, (6, -1), False, 0.0, 4, 8),        # window + causal, Nq < Nk
    (1, 3, 3, 29, 13, 8, False, 0.0, (0, 3), False, 0.0, 8, 4),        # Nq > Nk: rows with no key
    (2, 8, 8, 16, 24, 8, True, 0.0, None, True, 0.0, 8, 8),            # ALiBi, H = 8
    (1, 6, 3, 16, 16, 8, False, 0.0, None, True, 0.0, 5, 5),           # ALiBi, H = 6 (not a power of 2)
    (1, 2, 2, 24, 24, 16, True, 0.0, None, False, 2.0, 8, 8),          # softcap
    (2, 4, 2, 21, 27, 8, True, 0.3, (4, 1), True, 3.0, 8, 5),          # everything, with dropout
]
QUICK = [0, 2, 5, 8]


def main():
    quick = "--quick" in sys.argv[1:]
    base.check_philox_kat()
    rng = np.random.default_rng(4321)
    failures = 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fg_torch_variants_") as tmp:
        for ci, (B, H, Hkv, Nq, Nk, d, causal, p, window, alibi, softcap, bq, bk) in enumerate(CASES):
            if quick and ci not in QUICK:
                continue
            for dtype in (np.float64, np.float32):
                q = rng.standard_normal((B, H, Nq, d)).astype(dtype)
                k = rng.standard_normal((B, Hkv, Nk, d)).astype(dtype)
                v = rng.standard_normal((B, Hkv, Nk, d)).astype(dtype)
                do = rng.standard_normal((B, H, Nq, d)).astype(dtype)
                seed = 77 + ci
                ref = reference(q, k, v, do, causal, p, seed, window, alibi, softcap)
                for x, name in ((q, "q"), (k, "k"), (v, "v"), (do, "do")):
                    np.save(os.path.join(tmp, name + ".npy"), x)
                for impl in ("naive", "flash"):
                    out = os.path.join(tmp, f"out_{ci}_{impl}_{np.dtype(dtype).name}")
                    cmd = [FG_BIN, "attention", "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v.npy",
                           "--do", f"{tmp}/do.npy", "--impl", impl, "--out", out, "--block-q", str(bq),
                           "--block-k", str(bk)]
                    flags = []
                    if Hkv != H:
                        flags += ["--gqa", str(Hkv)]
                    if causal:
                        flags.append("--causal")
                    if p > 0:
                        flags += ["--dropout", repr(p), "--seed", str(seed)]
                    if window is not None:
                        flags += ["--window", f"{window[0]},{window[1]}"]
                    if alibi:
                        flags.append("--alibi")
                    if softcap:
                        flags += ["--softcap", repr(softcap)]
                    r = subprocess.run(cmd + flags, capture_output=True, text=True)
                    label = f"case {ci} {impl:5s} {np.dtype(dtype).name} {' '.join(flags)}"
                    if r.returncode != 0:
                        print(f"FAIL {label}: flashgrad exited {r.returncode}: {r.stderr.strip()}")
                        failures += 1
                        continue
                    tol = 1e-10 if dtype == np.float64 else 2e-5
                    errs = {}
                    for name in ("o", "lse", "dq", "dk", "dv"):
                        got = np.load(os.path.join(out, name + ".npy"))
                        want = ref[name]
                        if got.dtype != dtype or got.shape != want.shape:
                            errs[name] = float("inf")
                            print(f"FAIL {label}: {name}.npy is {got.dtype} {got.shape}, want {np.dtype(dtype)} "
                                  f"{want.shape}")
                            continue
                        errs[name] = base.rel_err(got, want)
                    worst = max(errs.values())
                    ok = worst <= tol
                    failures += not ok
                    rows.append((label, errs, tol, ok))
    print(f"{'case':78s} {'O':>9s} {'lse':>9s} {'dQ':>9s} {'dK':>9s} {'dV':>9s}  limit")
    for label, errs, tol, ok in rows:
        print(f"{label:78s} " + " ".join(f"{errs[n]:9.2e}" for n in ("o", "lse", "dq", "dk", "dv")) +
              f"  {tol:.0e} {'ok' if ok else 'FAIL'}")
    print(f"torch variants cross-check: {len(rows)} runs, {failures} failures (torch {torch.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
