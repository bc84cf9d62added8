"""flashgrad's numpy API against a plain numpy reference (reference.py) and against the CLI, for every option."""
import math
import os
import subprocess

import numpy as np
import pytest

import flashgrad
import reference as ref

B, H, NQ, NK, D = 2, 4, 13, 17, 8


def doc_mask(b, h, i, j):
    return i // 5 == j // 5


def tanh_mod(s, b, h, i, j):
    return 3.0 * math.tanh(s / 3.0) + 0.01 * (h - i % 3)


def tanh_mod_grad(s, b, h, i, j):
    t = math.tanh(s / 3.0)
    return 1 - t * t


def stripe_mask(b, h, i, j):
    return (i + j + b + h) % 3 != 0


# (id, flashgrad options, the same for reference.py, K/V heads)
CASES = [
    ("plain", {}, {}, H),
    ("causal", {"causal": True}, {"causal": True}, H),
    ("scale", {"scale": 0.3}, {"scale": 0.3}, H),
    ("dropout", {"dropout": 0.25, "seed": 7}, {"dropout": 0.25, "seed": 7}, H),
    ("causal-dropout-seed", {"causal": True, "dropout": 0.1, "seed": 2 ** 40 + 3},
     {"causal": True, "dropout": 0.1, "seed": 2 ** 40 + 3}, H),
    ("gqa", {"kv_heads": 2}, {}, 2),
    ("mqa-causal", {"causal": True}, {"causal": True}, 1),
    ("window", {"window": (3, 1)}, {"window": (3, 1)}, H),
    ("window-left-causal", {"window": (2, None), "causal": True}, {"window": (2, -1), "causal": True}, H),
    ("window-right", {"window": (-1, 2)}, {"window": (-1, 2)}, H),
    ("alibi", {"alibi": True}, {"alibi": True}, H),
    ("alibi-slopes-causal", {"alibi": [0.5, 0.25, -0.1, 1.0], "causal": True},
     {"alibi": [0.5, 0.25, -0.1, 1.0], "causal": True}, H),
    ("softcap", {"softcap": 2.0}, {"softcap": 2.0}, H),
    ("softcap-gqa-dropout", {"softcap": 1.5, "causal": True, "dropout": 0.2, "seed": 1, "kv_heads": 2},
     {"softcap": 1.5, "causal": True, "dropout": 0.2, "seed": 1}, 2),
    ("blocks", {"block_q": 5, "block_k": 3, "causal": True}, {"causal": True}, H),
    ("score_mod", {"score_mod": tanh_mod, "score_mod_grad": tanh_mod_grad},
     {"score_mod": tanh_mod, "score_mod_grad": tanh_mod_grad}, H),
    ("mask", {"mask": stripe_mask, "causal": True}, {"mask": stripe_mask, "causal": True}, H),
    ("all", {"mask": stripe_mask, "score_mod": tanh_mod, "score_mod_grad": tanh_mod_grad, "alibi": True,
             "window": (6, 2), "dropout": 0.15, "seed": 9, "kv_heads": 2, "block_q": 4, "block_k": 5},
     {"mask": stripe_mask, "score_mod": tanh_mod, "score_mod_grad": tanh_mod_grad, "alibi": True,
      "window": (6, 2), "dropout": 0.15, "seed": 9}, 2),
    ("variant-doc-mask", {"variant": "doc-mask", "causal": True}, {"mask": doc_mask, "causal": True}, H),
    ("variant-softcap-cb", {"variant": "softcap-cb"}, {"softcap": 5.0}, H),
]


def inputs(rng, dtype, hkv, nq=NQ, nk=NK):
    q = rng.standard_normal((B, H, nq, D)).astype(dtype)
    k = rng.standard_normal((B, hkv, nk, D)).astype(dtype)
    v = rng.standard_normal((B, hkv, nk, D)).astype(dtype)
    do = rng.standard_normal((B, H, nq, D)).astype(dtype)
    return q, k, v, do


def close(got, want, dtype, what):
    tol = (1e-12 if dtype == np.float64 else 3e-6) * max(1.0, float(np.max(np.abs(want[np.isfinite(want)]),
                                                                          initial=0)))
    fin = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), fin), what + ": non-finite elements differ"
    assert np.array_equal(got[~fin], want[~fin]), what + ": infinities differ"
    err = np.max(np.abs(got[fin] - want[fin]), initial=0)
    assert err <= tol, "%s: max abs error %.3e > %.3e at %s" % (what, err, tol,
                                                                  np.unravel_index(np.argmax(np.abs(
                                                                      np.where(fin, got - want, 0))), got.shape))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_numpy_reference(case, impl, dtype, rng):
    _, fo, ro, hkv = case
    q, k, v, do = inputs(rng, dtype, hkv)
    o, lse = flashgrad.attention(q, k, v, impl=impl, return_lse=True, **fo)
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == np.float64 and lse.shape == (B, H, NQ)
    O, L, _, _ = ref.attention(q, k, v, **ro)
    close(o, O, dtype, "O")
    close(lse, L, dtype, "lse")
    dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, impl=impl, **fo)
    rq, rk, rv = ref.attention_backward(q, k, v, do, **ro)
    for name, g, r, x in (("dq", dq, rq, q), ("dk", dk, rk, k), ("dv", dv, rv, v)):
        assert g.dtype == dtype and g.shape == x.shape
        close(g, r, dtype, name)


def test_rows_without_keys_are_zero_with_lse_minus_inf(rng):
    q, k, v, do = inputs(rng, np.float64, H, nq=6, nk=3)
    # causal with Nq > Nk: queries 0..2 see no key (bottom-right alignment)
    o, lse = flashgrad.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(o[:, :, :3] == 0) and np.all(lse[:, :, :3] == -np.inf) and np.all(np.isfinite(lse[:, :, 3:]))
    dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, causal=True)
    assert np.all(dq[:, :, :3] == 0)


def test_philox_reimplementation_matches_known_answers():
    kat = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "reference", "philox4x32_10_kat.txt")
    if not os.path.exists(kat):
        pytest.skip("no ../shared/reference/philox4x32_10_kat.txt")
    n = 0
    for line in open(kat):
        if line.startswith("philox4x32 10"):
            w = [int(x, 16) for x in line.split()[2:]]
            out = ref.philox4x32_10(*w[:6])
            assert [int(x) for x in out] == w[6:10]
            n += 1
    assert n >= 3


def test_dropout_same_seed_same_result_other_seed_differs(rng):
    q, k, v, _ = inputs(rng, np.float32, H)
    a = flashgrad.attention(q, k, v, dropout=0.3, seed=11)
    b = flashgrad.attention(q, k, v, dropout=0.3, seed=11)
    c = flashgrad.attention(q, k, v, dropout=0.3, seed=12)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_float32_lse_carries_the_rounding_remainder(rng):
    # large scores: L far from 0, where the float32 L alone loses bits that the backward needs
    q, k, v, do = inputs(rng, np.float32, H)
    q *= 6
    o, lse = flashgrad.attention(q, k, v, return_lse=True)
    lse32 = lse.astype(np.float32)
    assert not np.array_equal(lse, lse32.astype(np.float64))  # it does hold more than float32
    g_full = flashgrad.attention_backward(q, k, v, o, lse, do)
    g_f32 = flashgrad.attention_backward(q, k, v, o, lse32, do)  # a float32 lse is accepted too
    for a, b in zip(g_full, g_f32):
        assert np.max(np.abs(a - b)) < 1e-3 * np.max(np.abs(a))


# ---- the CLI: the same numbers, bit for bit ----

CLI_CASES = [
    ("plain", {}, [], H),
    ("causal-dropout", {"causal": True, "dropout": 0.2, "seed": 5}, ["--causal", "--dropout", "0.2", "--seed", "5"], H),
    ("scale-blocks", {"scale": 0.7, "block_q": 5, "block_k": 7}, ["--scale", "0.7", "--block-q", "5", "--block-k", "7"],
     H),
    ("gqa-window", {"kv_heads": 2, "window": (4, 1)}, ["--gqa", "2", "--window", "4,1"], 2),
    ("alibi-softcap", {"alibi": True, "softcap": 3.0, "causal": True}, ["--alibi", "--softcap", "3", "--causal"], H),
    ("custom", {"variant": "doc-mask"}, ["--custom", "doc-mask"], H),
]


def _npy_save(path, a):
    np.save(path, a)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_attention_equals_the_cli_bit_for_bit(case, impl, dtype, rng, tmp_path, fg_bin):
    _, fo, flags, hkv = case
    q, k, v, do = inputs(rng, dtype, hkv)
    for n, a in (("q", q), ("k", k), ("v", v), ("do", do)):
        _npy_save(str(tmp_path / (n + ".npy")), a)
    out = tmp_path / "out"
    cmd = [fg_bin, "attention", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--v",
           str(tmp_path / "v.npy"), "--do", str(tmp_path / "do.npy"), "--impl", impl, "--out", str(out)] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    o, lse = flashgrad.attention(q, k, v, impl=impl, return_lse=True, **fo)
    dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, impl=impl, **fo)
    assert np.array_equal(o, np.load(out / "o.npy"))
    assert np.array_equal(lse.astype(dtype), np.load(out / "lse.npy"))
    for n, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert np.array_equal(g, np.load(out / (n + ".npy"))), n


# ---- gradient checks ----

GC_CASES = [
    ("plain", {}),
    ("causal", {"causal": True}),
    ("dropout", {"dropout": 0.2}),
    ("gqa-window", {"kv_heads": 1, "window": (3, 2)}),
    ("alibi-softcap", {"alibi": True, "softcap": 4.0, "causal": True}),
    ("score_mod-mask", {"score_mod": tanh_mod, "score_mod_grad": tanh_mod_grad, "mask": stripe_mask}),
    ("custom", {"variant": "softcap-cb", "causal": True}),
]


@pytest.mark.parametrize("case", GC_CASES, ids=[c[0] for c in GC_CASES])
def test_gradcheck_passes_and_its_worst_elements_are_the_maxima(case):
    rep = flashgrad.gradcheck_attention(shape=(1, 2, 6, 7, 3), seed=3, **case[1])
    assert rep.passed, str(rep)
    checks = [r.check for r in rep.rows]
    assert checks.count("naive f64 vs finite diff") == 3
    assert checks.count("flash f64 vs naive f64") == 4
    assert checks.count("flash f32 vs naive f64") == 4 and checks.count("naive f32 vs naive f64") == 4
    assert rep.fd_worst is None and rep.f32_skipped == ""
    for r in rep.rows:
        if r.check == "naive f64 vs finite diff":
            assert r.worst is None and r.passed
            continue
        # the element reported is where the C check found its maximum: the same computation, redone
        assert r.worst is not None and abs(r.worst.got - r.worst.want) == r.max_abs, (r, str(rep))
    assert "gradcheck attention: PASS" in str(rep)


def test_gradcheck_agrees_with_the_cli(fg_bin):
    r = subprocess.run([fg_bin, "gradcheck", "attention", "--causal", "--alibi", "--gqa", "1", "--seed", "4"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = flashgrad.gradcheck_attention(causal=True, alibi=True, kv_heads=1, seed=4)  # the CLI's default sizes
    cli = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) > 7 and parts[2] == "vs" and parts[1] in ("f64", "f32") and parts[6] != "-":
            cli[(" ".join(parts[:5]), parts[5])] = (parts[6], parts[7])
    assert len(cli) == len(rep.rows) == 15
    for row in rep.rows:
        assert cli[(row.check, row.tensor)] == ("%.3e" % row.max_abs, "%.3e" % row.max_rel), row


def test_gradcheck_reports_a_wrong_derivative_with_its_worst_element():
    rep = flashgrad.gradcheck_attention(shape=(1, 1, 4, 5, 2), score_mod=lambda s, b, h, i, j: 2 * s,
                                        score_mod_grad=lambda s, b, h, i, j: 1.0)
    assert not rep.passed and not bool(rep)
    fd = [r for r in rep.rows if r.check == "naive f64 vs finite diff"]
    assert not all(r.passed for r in fd)
    assert rep.fd_worst is not None and rep.fd_worst.input in ("dQ", "dK")
    assert len(rep.fd_worst.index) == 4 and rep.fd_worst.got != pytest.approx(rep.fd_worst.want)
    assert "FAIL" in str(rep)


def test_gradcheck_skips_float32_when_an_option_does_not_fit():
    rep = flashgrad.gradcheck_attention(shape=(1, 1, 3, 3, 2), softcap=1e300)
    assert rep.passed and "softcap" in rep.f32_skipped
    assert all(r.check.endswith("f64") or r.check.endswith("diff") for r in rep.rows)


def test_variants_lists_the_registered_ones():
    v = flashgrad.variants()
    assert "doc-mask" in v and "softcap-cb" in v and all(isinstance(h, str) and h for h in v.values())
