#!/usr/bin/python3
"""attention_torch_check.py: `flashgrad attention` against PyTorch autograd of the textbook formula.

For a table of cases (naive and flash, float32 and float64, Nq != Nk, causal or not, block sizes that
do and do not divide N, head dims 1..256, scale given or default) it writes Q, K, V and dO as .npy,
runs `$FG_BIN attention ... --do dO.npy --out DIR`, and compares O, lse, dQ, dK and dV with

    S = scale * Q @ K^T, masked with -inf where j > i + Nk - Nq (causal, bottom-right)
    P = softmax(S) (rows with no visible key: 0), O = P @ V, lse = logsumexp(S)

evaluated by torch in float64, gradients by torch.autograd. Errors are max|a - b| / max|b|; the limit is
1e-10 for float64 outputs and 2e-5 for float32 ones. The dropout cases rebuild the keep mask in numpy from
the Philox4x32-10 definition (counter (j/4, i, h, b), key = seed, word j%4, keep iff word >= p * 2^32),
checked first against Random123's known-answer vectors, so they test the mask's definition too.

Run by `make test` (tests/test_attention.c) with FG_BIN set. Exits 0 on success, 1 on a mismatch,
77 (with the reason on stdout) when it cannot run: no numpy or torch, no FG_BIN. --quick runs fewer cases.
"""
import os
import subprocess
import sys
import tempfile

SKIP = 77

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skipped: numpy is not importable by {sys.executable} ({e})")
    sys.exit(SKIP)
try:
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: torch is not importable by {sys.executable} ({e}); install Debian's python3-torch")
    sys.exit(SKIP)

FG_BIN = os.environ.get("FG_BIN", "")
if not FG_BIN or not os.access(FG_BIN, os.X_OK):
    print(f"skipped: FG_BIN does not name the flashgrad binary (FG_BIN='{FG_BIN}')")
    sys.exit(SKIP)

# ---- Philox4x32-10 in numpy (vectorized over counters) --------------------------------------------
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(ctr, key):
    """ctr: (4, n) uint32, key: (2,) uint32 -> (4, n) uint32."""
    c = [ctr[i].astype(np.uint32) for i in range(4)]
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    with np.errstate(over="ignore"):
        for r in range(10):
            p0 = M0 * c[0].astype(np.uint64)
            p1 = M1 * c[2].astype(np.uint64)
            hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & MASK32).astype(np.uint32)
            hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & MASK32).astype(np.uint32)
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
            if r < 9:
                k0 = np.uint32(k0 + W0)
                k1 = np.uint32(k1 + W1)
    return np.stack(c)


def check_philox_kat():
    kat = [
        ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
         [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    ]
    for ctr, key, want in kat:
        got = philox4x32_10(np.array(ctr, dtype=np.uint32).reshape(4, 1), np.array(key, dtype=np.uint32))[:, 0]
        if [int(x) for x in got] != want:
            print(f"FAIL: the numpy Philox does not reproduce the known answer for ctr {ctr}: {got}")
            sys.exit(1)


def dropout_threshold(p):
    t = p * 4294967296.0
    return 0xFFFFFFFF if t >= 4294967295.0 else int(t)


def keep_mask(B, H, Nq, Nk, p, seed):
    """(B, H, Nq, Nk) bool: fg_attn_keep(seed, threshold, b, h, i, j)."""
    thr = dropout_threshold(p)
    b, h, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(Nq), np.arange(Nk), indexing="ij")
    ctr = np.stack([(j >> 2).ravel(), i.ravel(), h.ravel(), b.ravel()]).astype(np.uint32)
    key = np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], dtype=np.uint32)
    out = philox4x32_10(ctr, key)
    word = out[(j & 3).ravel(), np.arange(ctr.shape[1])]
    return (word >= np.uint32(thr)).reshape(B, H, Nq, Nk)


# ---- the textbook formula in torch -----------------------------------------------------------------
def reference(q, k, v, do, causal, scale, p, seed):
    Q, K, V = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    s = (Q @ K.transpose(-1, -2)) * (scale if scale is not None else 1.0 / np.sqrt(d))
    if causal:
        visible = torch.ones(Nq, Nk, dtype=torch.bool).tril(diagonal=Nk - Nq)
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    P = torch.softmax(s, dim=-1)
    P = torch.where(torch.isnan(P), torch.zeros_like(P), P)  # rows with no visible key
    if p > 0:
        Z = torch.tensor(keep_mask(B, H, Nq, Nk, p, seed), dtype=torch.float64) / (1.0 - p)
        P = P * Z
    O = P @ V
    O.backward(torch.tensor(do, dtype=torch.float64))
    return {"o": O.detach().numpy(), "lse": lse.detach().numpy(), "dq": Q.grad.numpy(), "dk": K.grad.numpy(),
            "dv": V.grad.numpy()}


def rel_err(a, b):
    a = a.astype(np.float64)
    fin = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), fin) or not np.array_equal(a[~fin], b[~fin]):
        return float("inf")
    if not fin.any():
        return 0.0
    scale = np.abs(b[fin]).max()
    return float(np.abs(a[fin] - b[fin]).max() / (scale if scale > 0 else 1.0))


# (B, H, Nq, Nk, d, causal, scale, p, block_q, block_k)
CASES = [
    (1, 1, 1, 1, 8, False, None, 0.0, 0, 0),
    (2, 3, 17, 17, 16, True, None, 0.0, 4, 4),
    (2, 2, 13, 29, 8, True, None, 0.0, 5, 7),      # Nq < Nk, bottom-right causal
    (1, 2, 29, 13, 8, True, 0.3, 0.0, 8, 3),       # Nq > Nk: rows with no key
    (1, 2, 129, 70, 64, False, None, 0.0, 64, 64),
    (1, 1, 200, 200, 1, True, 2.0, 0.0, 33, 16),   # d = 1
    (1, 1, 40, 50, 256, False, None, 0.0, 16, 32),  # d = 256
    (2, 2, 31, 23, 8, True, None, 0.25, 8, 5),     # dropout
    (1, 3, 20, 40, 4, False, None, 0.5, 0, 0),
]
QUICK = [0, 2, 3, 7]


def main():
    quick = "--quick" in sys.argv[1:]
    check_philox_kat()
    rng = np.random.default_rng(1234)
    failures = 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fg_torch_check_") as tmp:
        for ci, (B, H, Nq, Nk, d, causal, scale, p, bq, bk) in enumerate(CASES):
            if quick and ci not in QUICK:
                continue
            for dtype in (np.float64, np.float32):
                q = rng.standard_normal((B, H, Nq, d)).astype(dtype)
                k = rng.standard_normal((B, H, Nk, d)).astype(dtype)
                v = rng.standard_normal((B, H, Nk, d)).astype(dtype)
                do = rng.standard_normal((B, H, Nq, d)).astype(dtype)
                seed = 1000 + ci
                ref = reference(q, k, v, do, causal, scale, p, seed)
                for x, name in ((q, "q"), (k, "k"), (v, "v"), (do, "do")):
                    np.save(os.path.join(tmp, name + ".npy"), x)
                for impl in ("naive", "flash"):
                    out = os.path.join(tmp, f"out_{ci}_{impl}_{np.dtype(dtype).name}")
                    cmd = [FG_BIN, "attention", "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v.npy",
                           "--do", f"{tmp}/do.npy", "--impl", impl, "--out", out]
                    if causal:
                        cmd.append("--causal")
                    if scale is not None:
                        cmd += ["--scale", repr(scale)]
                    if p > 0:
                        cmd += ["--dropout", repr(p), "--seed", str(seed)]
                    if bq:
                        cmd += ["--block-q", str(bq), "--block-k", str(bk)]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    label = (f"case {ci} {impl:5s} {np.dtype(dtype).name} B{B} H{H} Nq{Nq} Nk{Nk} d{d} "
                             f"causal={int(causal)} p={p}")
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
                        errs[name] = rel_err(got, want)
                    worst = max(errs.values())
                    ok = worst <= tol
                    failures += not ok
                    rows.append((label, errs, tol, ok))
    print(f"{'case':70s} {'O':>9s} {'lse':>9s} {'dQ':>9s} {'dK':>9s} {'dV':>9s}  limit")
    for label, errs, tol, ok in rows:
        print(f"{label:70s} " + " ".join(f"{errs[n]:9.2e}" for n in ("o", "lse", "dq", "dk", "dv")) +
              f"  {tol:.0e} {'ok' if ok else 'FAIL'}")
    print(f"torch cross-check: {len(rows)} runs, {failures} failures (torch {torch.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
