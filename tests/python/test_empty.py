"""Empty inputs through the numpy API: every entry point (attention, attention_backward,
gradcheck_attention) with each size zero in turn gives the empty result of the right shape and dtype,
and the non-empty parts of it (lse with no key or no head dim, dk and dv with no query) equal
reference.py's. The torch entry points have the same table in test_torch_empty.py."""
import numpy as np
import pytest

import flashgrad
import reference

FULL = dict(B=2, H=2, Nq=3, Nk=4, d=5)
ZERO = ["B", "H", "Nq", "Nk", "d"]


def sizes(zero):
    s = dict(FULL)
    s[zero] = 0
    return s["B"], s["H"], s["Nq"], s["Nk"], s["d"]


def inputs(zero, dtype, seed=3):
    B, H, Nq, Nk, d = sizes(zero)
    r = np.random.default_rng(seed)
    q = r.standard_normal((B, H, Nq, d)).astype(dtype)
    k = r.standard_normal((B, H, Nk, d)).astype(dtype)
    v = r.standard_normal((B, H, Nk, d)).astype(dtype)
    return q, k, v


# options whose lse depends on more than the count of keys (the d = 0 case computes it through the kernels)
OPTS = [dict(), dict(causal=True), dict(causal=True, alibi=True), dict(window=(1, 0), softcap=2.0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("zero", ZERO)
def test_attention_and_backward_on_a_zero_size(zero, impl, dtype):
    q, k, v = inputs(zero, dtype)
    for kw in OPTS:
        o, lse = flashgrad.attention(q, k, v, impl=impl, return_lse=True, **kw)
        assert o.shape == q.shape and o.dtype == q.dtype, (zero, kw)
        assert lse.shape == q.shape[:3], (zero, kw)
        # scale 1: with d = 0 every score is 0 whatever the scale (reference.py's default 1/sqrt(0) is not)
        _, want_lse, _, _ = reference.attention(q, k, v, scale=1.0, **kw)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=0, err_msg="%s %s" % (zero, kw))
        if o.size:
            assert np.all(o == 0), (zero, kw)  # no key: every row is 0
        do = np.random.default_rng(5).standard_normal(o.shape).astype(dtype)
        dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, impl=impl, **kw)
        for g, x in ((dq, q), (dk, k), (dv, v)):
            assert g.shape == x.shape and g.dtype == x.dtype, (zero, kw)
        want = reference.attention_backward(q, k, v, do, scale=1.0, **kw)
        for g, w in zip((dq, dk, dv), want):
            assert np.array_equal(g, w.astype(dtype)), (zero, kw)  # all zeros, or empty


@pytest.mark.parametrize("zero", ZERO)
def test_gradcheck_on_a_zero_size_passes_with_nothing_to_compare(zero):
    shape = sizes(zero)
    rep = flashgrad.gradcheck_attention(shape=shape, causal=True)
    assert rep.passed and rep.shape == shape
    assert rep.rows and all(r.max_abs == 0 for r in rep.rows)


@pytest.mark.parametrize("zero", ZERO)
def test_options_are_still_checked_on_a_zero_size(zero):
    q, k, v = inputs(zero, np.float64)
    with pytest.raises(ValueError, match="block sizes|block_q"):
        flashgrad.attention(q, k, v, block_q=10 ** 6)
    H = q.shape[1]
    with pytest.raises(ValueError, match="slopes"):
        flashgrad.attention(q, k, v, alibi=[0.5] * (H + 1))
