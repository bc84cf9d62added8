"""Bad input: every one is refused with ValueError / TypeError / MemoryError carrying flashgrad's message, or
(layouts the kernels cannot read) copied, never a crash; exceptions from Python callbacks propagate."""
import os
import subprocess
import sys

import numpy as np
import pytest

import flashgrad


def qkv(rng, dtype=np.float64, B=1, H=2, N=5, d=4, Hkv=None, Nk=None):
    Hkv = H if Hkv is None else Hkv
    Nk = N if Nk is None else Nk
    return (rng.standard_normal((B, H, N, d)).astype(dtype), rng.standard_normal((B, Hkv, Nk, d)).astype(dtype),
            rng.standard_normal((B, Hkv, Nk, d)).astype(dtype))


# ---- arrays ----

@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float16, np.complex128, np.bool_, object])
def test_unsupported_dtypes_are_type_errors(dtype, rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError, match="float32 or float64"):
        flashgrad.attention(q.astype(dtype), k, v)


def test_mixed_dtypes_are_type_errors(rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError, match="k is float32 but q is float64"):
        flashgrad.attention(q, k.astype(np.float32), v)


def test_not_an_array_is_a_type_error(rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError):
        flashgrad.attention("abc", k, v)
    with pytest.raises(TypeError):
        flashgrad.attention([[1, 2], [3]], k, v)


def test_lists_of_floats_are_arrays(rng):
    q, k, v = qkv(rng)
    np.testing.assert_array_equal(flashgrad.attention(q.tolist(), k.tolist(), v.tolist()),
                                  flashgrad.attention(q, k, v))


@pytest.mark.parametrize("shape", [(2, 5, 4), (5,), (), (1, 1, 2, 5, 4)])
def test_wrong_rank_is_a_value_error(shape, rng):
    _, k, v = qkv(rng)
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, d\), got rank %d" % len(shape)):
        flashgrad.attention(np.zeros(shape), k, v)


@pytest.mark.parametrize("kshape,vshape", [((1, 2, 5, 3), (1, 2, 5, 3)), ((2, 2, 5, 4), (2, 2, 5, 4)),
                                           ((1, 2, 5, 4), (1, 2, 6, 4)), ((1, 3, 5, 4), (1, 3, 5, 4)),
                                           ((1, 1, 5, 4), (1, 2, 5, 4)), ((1, 0, 5, 4), (1, 0, 5, 4))])
def test_shapes_that_do_not_fit_are_value_errors(kshape, vshape, rng):
    q = rng.standard_normal((1, 2, 5, 4))
    with pytest.raises(ValueError, match="do not fit"):
        flashgrad.attention(q, np.zeros(kshape), np.zeros(vshape))


def test_empty_batch_and_sequences_give_empty_results(rng):
    for B, N, Nk in ((0, 3, 3), (1, 0, 3), (1, 3, 0)):
        q, k, v = qkv(rng, B=B, N=N, Nk=Nk)
        o, lse = flashgrad.attention(q, k, v, return_lse=True)
        assert o.shape == q.shape and lse.shape == q.shape[:3]
        if Nk == 0:
            assert np.all(o == 0) and np.all(lse == -np.inf)
        g = flashgrad.attention_backward(q, k, v, o, lse, np.ones_like(o))
        assert [x.shape for x in g] == [q.shape, k.shape, v.shape]


@pytest.mark.parametrize("layout", ["transposed", "strided", "fortran", "big-endian", "unaligned", "read-only"])
def test_layouts_the_kernels_cannot_read_are_copied_and_give_the_same_result(layout, rng):
    q, k, v = qkv(rng, N=6)
    want = flashgrad.attention(q, k, v, causal=True)
    if layout == "transposed":
        q2 = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    elif layout == "strided":
        q2 = np.repeat(q, 2, axis=3)[..., ::2]
    elif layout == "fortran":
        q2 = np.asfortranarray(q)
    elif layout == "big-endian":
        q2 = q.astype(">f8")
    elif layout == "unaligned":
        buf = np.zeros(q.nbytes + 1, np.uint8)
        q2 = buf[1:].view(np.float64).reshape(q.shape)
        q2[...] = q
        assert not q2.flags.aligned
    else:
        q2 = q.copy()
        q2.flags.writeable = False
    before = q2.copy()
    np.testing.assert_array_equal(flashgrad.attention(q2, k, v, causal=True), want)
    np.testing.assert_array_equal(q2, before)


# ---- options ----

BAD_OPTIONS = [
    ({"dropout": 1.0}, ValueError, r"dropout p must be in \[0, 1\)"),
    ({"dropout": -0.1}, ValueError, "dropout"),
    ({"dropout": float("nan")}, ValueError, "dropout"),
    ({"dropout": "0.1"}, TypeError, "dropout"),
    ({"scale": float("nan")}, ValueError, "scale"),
    ({"scale": float("inf")}, ValueError, "scale"),
    ({"scale": 0}, ValueError, "scale"),
    ({"scale": 1j}, TypeError, "scale"),
    ({"impl": "fast"}, ValueError, "impl"),
    ({"block_q": 0}, ValueError, "block_q"),
    ({"block_k": 70000}, ValueError, "block_k"),
    ({"block_q": 2.5}, TypeError, "block_q"),
    ({"window": (1,)}, TypeError, "window"),
    ({"window": "3,1"}, TypeError, "window"),
    ({"window": (-2, 1)}, ValueError, "window left"),
    ({"window": (1, 0.5)}, TypeError, "window right"),
    ({"softcap": -1.0}, ValueError, "softcap"),
    ({"softcap": float("nan")}, ValueError, "softcap"),
    ({"alibi": [0.5, 0.25, 0.1]}, ValueError, "alibi has 3 slopes but there are 2 query heads"),
    ({"alibi": [0.5, float("nan")]}, ValueError, "ALiBi slope of head 1 is nan"),
    ({"alibi": "yes"}, TypeError, "alibi"),
    ({"seed": -1}, ValueError, "seed"),
    ({"seed": 2 ** 64}, ValueError, "seed"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"kv_heads": 1}, ValueError, "opts ask for 1 K/V heads but k and v have 2"),
    ({"kv_heads": 0}, ValueError, "kv_heads"),
    ({"score_mod": lambda s, b, h, i, j: s}, ValueError, "score_mod_grad"),
    ({"score_mod_grad": lambda s, b, h, i, j: 1.0}, ValueError, "score_mod"),
    ({"score_mod": 3, "score_mod_grad": 4}, TypeError, "callable"),
    ({"mask": "all"}, TypeError, "callable"),
    ({"variant": "no-such-variant"}, ValueError, "no registered variant named 'no-such-variant'"),
    ({"variant": 7}, TypeError, "variant"),
    ({"variant": "doc-mask", "mask": lambda b, h, i, j: True}, ValueError, "cannot be combined"),
]


@pytest.mark.parametrize("opts,exc,msg", BAD_OPTIONS, ids=[str(o[0])[:40] for o in BAD_OPTIONS])
def test_bad_options_are_refused_with_a_message(opts, exc, msg, rng):
    q, k, v = qkv(rng)
    with pytest.raises(exc, match=msg):
        flashgrad.attention(q, k, v, **opts)
    o, lse = flashgrad.attention(q, k, v, return_lse=True)
    with pytest.raises(exc, match=msg):
        flashgrad.attention_backward(q, k, v, o, lse, np.ones_like(o), **opts)


def test_options_float32_cannot_hold_are_the_librarys_errors(rng):
    q, k, v = qkv(rng, np.float32)
    with pytest.raises(ValueError, match="softcap 1e.39 does not fit float32"):
        flashgrad.attention(q, k, v, softcap=1e39)
    with pytest.raises(ValueError, match="scale 1e.40 does not fit float32"):
        flashgrad.attention(q, k, v, scale=1e40)


def test_scores_that_overflow_float32_are_a_value_error(rng):
    q, k, v = qkv(rng, np.float32)
    with pytest.raises(ValueError, match="overflow float32 although q, k and v are finite"):
        flashgrad.attention(q * np.float32(1e20), k * np.float32(1e20), v)


def test_nan_inputs_make_nan_rows_not_errors(rng):
    q, k, v = qkv(rng)
    q[0, 1, 2, 0] = np.nan
    o = flashgrad.attention(q, k, v)
    assert np.all(np.isnan(o[0, 1, 2])) and np.isfinite(np.delete(o.reshape(-1, 4), 1 * 5 + 2, axis=0)).all()


def test_backward_refuses_outputs_that_do_not_fit(rng):
    q, k, v = qkv(rng)
    o, lse = flashgrad.attention(q, k, v, return_lse=True)
    do = np.ones_like(o)
    with pytest.raises(ValueError, match="o must be shaped like q"):
        flashgrad.attention_backward(q, k, v, o[:, :, :3], lse, do)
    with pytest.raises(ValueError, match="do must be shaped like q"):
        flashgrad.attention_backward(q, k, v, o, lse, do[..., :2])
    with pytest.raises(ValueError, match="lse must be"):
        flashgrad.attention_backward(q, k, v, o, lse[..., None], do)
    with pytest.raises(TypeError, match="lse is int64"):
        flashgrad.attention_backward(q, k, v, o, lse.astype(np.int64), do)
    with pytest.raises(TypeError, match="do is float32 but q is float64"):
        flashgrad.attention_backward(q, k, v, o, lse, do.astype(np.float32))


def test_gradcheck_refuses_bad_shapes():
    with pytest.raises(TypeError, match="shape"):
        flashgrad.gradcheck_attention(shape=(1, 2, 3))
    with pytest.raises(ValueError, match="shape"):
        flashgrad.gradcheck_attention(shape=(1, -2, 3, 3, 2))
    with pytest.raises(ValueError, match="multiple of the 2 K/V heads"):
        flashgrad.gradcheck_attention(shape=(1, 3, 3, 3, 2), kv_heads=2)


def test_threads_setting_is_checked():
    n = flashgrad.threads()
    assert n >= 1
    with pytest.raises(ValueError):
        flashgrad.set_threads(65)
    flashgrad.set_threads(1)
    assert flashgrad.threads() == 1
    flashgrad.set_threads(0)
    assert flashgrad.threads() == n


# ---- memory ----

def _overcommit_refuses_huge():
    try:
        return open("/proc/sys/vm/overcommit_memory").read().strip() in ("0", "2")
    except OSError:
        return False


@pytest.mark.skipif(not _overcommit_refuses_huge(), reason="the kernel may promise any amount of memory")
def test_a_problem_too_big_for_memory_is_a_memory_error():
    # naive materializes Nq x Nk scores: 300000^2 float32 is 360 GB
    z = np.zeros((1, 1, 300000, 1), np.float32)
    with pytest.raises(MemoryError, match="flashgrad|alloc|memory"):
        flashgrad.attention(z, z, z, impl="naive")
    with pytest.raises(MemoryError):
        flashgrad.attention_backward(z, z, z, z, np.zeros((1, 1, 300000)), z, impl="naive")
    flashgrad.attention(z[:, :, :10], z[:, :, :10], z[:, :, :10], impl="naive")  # and it goes on working


# ---- callbacks ----

class Boom(Exception):
    pass


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("where", ["score_mod", "score_mod_grad", "mask"])
def test_an_exception_in_a_callback_propagates(where, impl, rng):
    q, k, v = qkv(rng, N=9)
    err = Boom("from " + where)
    calls = []

    def sm(s, b, h, i, j):
        if where == "score_mod" and i == 4:
            raise err
        return s

    def smg(s, b, h, i, j):
        calls.append(1)
        if where == "score_mod_grad" and j == 2:
            raise err
        return 1.0

    def mk(b, h, i, j):
        if where == "mask" and (i, j) == (3, 3):
            raise err
        return True

    opts = dict(score_mod=sm, score_mod_grad=smg, mask=mk, impl=impl)
    if where == "score_mod_grad":  # called by the backward only
        o, lse = flashgrad.attention(q, k, v, return_lse=True, **opts)
        with pytest.raises(Boom) as ei:
            flashgrad.attention_backward(q, k, v, o, lse, np.ones_like(o), **opts)
    else:
        with pytest.raises(Boom) as ei:
            flashgrad.attention(q, k, v, **opts)
    assert ei.value is err
    # the next call is unaffected
    np.testing.assert_allclose(flashgrad.attention(q, k, v, score_mod=lambda s, *a: s,
                                                   score_mod_grad=lambda s, *a: 1.0, impl=impl),
                               flashgrad.attention(q, k, v, impl=impl), rtol=0, atol=1e-15)


def test_a_callback_returning_a_non_number_is_a_type_error(rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError):
        flashgrad.attention(q, k, v, score_mod=lambda s, *a: "x", score_mod_grad=lambda s, *a: 1.0)
    with pytest.raises(ValueError):  # numpy's "truth value of an array is ambiguous"
        flashgrad.attention(q, k, v, mask=lambda b, h, i, j: np.ones(2))


def test_keyboard_interrupt_in_a_callback_propagates(rng):
    q, k, v = qkv(rng)

    def mk(b, h, i, j):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        flashgrad.attention(q, k, v, mask=mk)


def test_a_battery_of_bad_calls_never_crashes_the_interpreter():
    # in a child, so that a crash would show as its exit status instead of taking pytest down
    code = r'''
import itertools, numpy as np, flashgrad
vals = [None, 0, -1, 1.5, float("nan"), float("inf"), "x", (1, 2), [1.0] * 3, np.zeros(2), 2 ** 70, True]
shapes = [(1, 1, 2, 2), (0, 1, 2, 2), (1, 1, 0, 2), (1, 2, 3, 1), (2, 3), (1, 1, 1, 1, 1)]
dts = [np.float32, np.float64, np.int8]
n = 0
for s, dt in itertools.product(shapes, dts):
    a = np.ones(s, dt)
    for key in ["causal", "scale", "dropout", "seed", "impl", "kv_heads", "window", "alibi", "softcap",
                "block_q", "block_k", "score_mod", "mask", "variant"]:
        for v in vals:
            try:
                flashgrad.attention(a, a, a, **{key: v})
            except (ValueError, TypeError, MemoryError):
                pass
            n += 1
print("ok", n)
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.startswith("ok"), (r.returncode, r.stdout[-500:], r.stderr[-2000:])
