"""flashgrad.torch on CUDA tensors.

Two kinds of tests:
  - refusals that need no GPU (run everywhere with torch >= 2.1): CUDA tensors made under torch's
    FakeTensorMode (metadata only, no memory) reach flashgrad's checks, which refuse them before any
    memory is read: a library built without CUDA (or, built with it, a machine without a device),
    float16, tensors on two devices, the CPU-only drop-ins (the flat C interface's refusals, which
    need no torch, are in test_cuda_flat.py);
  - the CUDA path itself (needs a GPU and a libflashgrad.so built with CUDA, e.g.
    FLASHGRAD_LIB=build-cuda/libflashgrad.so; bench/gpu_check.sh runs them): forward and backward
    against flashgrad's CPU kernels and a float64 reference (tests/python/reference.py), float32 at
    float32 tolerance, bfloat16 at bf16 tolerance (relative L2 error 1e-2, as tests/cuda/test_bf16.c),
    causal, GQA, windows, dropout (the same keep bits as the CPU for a seed), the SDPA drop-in, streams.
    Without a GPU they are skipped with one line.
"""
import os

import numpy as np
import pytest

if os.environ.get("FG_TORCH") == "1":
    import torch  # must be there: its absence fails the run
else:
    torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashgrad._lib as L  # noqa: E402
import flashgrad.torch as fgt  # noqa: E402
import reference as ref  # noqa: E402

pytestmark = pytest.mark.torch

BUILT = bool(L.lib.fgpy_cuda_built())
HAVE_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not (HAVE_GPU and BUILT),
                               reason="no CUDA device" if not HAVE_GPU else
                               "libflashgrad.so built without CUDA (FLASHGRAD_LIB=build-cuda/libflashgrad.so)")
needs_sdpa_api = pytest.mark.skipif(not hasattr(torch.library, "custom_op"),
                                    reason="the drop-ins need torch >= 2.4")


def _fake_cuda(*shape, dtype=torch.float32):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(*shape, dtype=dtype, device="cuda")


# ---- refusals, no GPU needed --------------------------------------------------------------------

@pytest.mark.skipif(HAVE_GPU, reason="a GPU is here: the CUDA tests run instead")
@pytest.mark.parametrize("api", ["attention", "sdpa"])
def test_cuda_tensor_without_cuda_is_refused(api):
    q = _fake_cuda(1, 2, 8, 16)
    if api == "sdpa" and not hasattr(torch.library, "custom_op"):
        pytest.skip("the drop-ins need torch >= 2.4")
    f = fgt.attention if api == "attention" else fgt.scaled_dot_product_attention
    if BUILT:  # a CUDA library on a machine without a device: CUDA's own reason
        with pytest.raises((ValueError, RuntimeError), match="CUDA"):
            f(q, q, q)
    else:
        with pytest.raises(RuntimeError, match=r"built without CUDA.*make shared.*FLASHGRAD_LIB"):
            f(q, q, q)


def test_float16_on_cuda_is_refused():
    h = _fake_cuda(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(TypeError, match="float16 on CUDA; flashgrad has no float16 kernels"):
        fgt.attention(h, h, h)


@needs_sdpa_api
def test_float16_on_cuda_is_refused_by_sdpa():
    h = _fake_cuda(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(TypeError, match="float16 on CUDA"):
        fgt.scaled_dot_product_attention(h, h, h)


def test_mixed_devices_are_refused():
    g = _fake_cuda(1, 2, 8, 16)
    c = torch.zeros(1, 2, 8, 16)
    with pytest.raises(ValueError, match="q is on cpu but k is on cuda:0; flashgrad needs every tensor"):
        fgt.attention(c, g, c)
    with pytest.raises(ValueError, match="q is on cuda:0 but v is on cpu"):
        fgt.attention(g, g, c)


@needs_sdpa_api
def test_mixed_devices_and_cpu_only_dropins():
    g = _fake_cuda(1, 8, 2, 16)
    c = torch.zeros(1, 8, 2, 16)
    with pytest.raises(ValueError, match="query is on cuda:0 but key is on cpu"):
        fgt.scaled_dot_product_attention(g, c, c)
    with pytest.raises(ValueError, match="flash_attn_func on CPU tensors only"):
        fgt.flash_attn_func(g, g, g)
    with pytest.raises(ValueError, match="flash_attn_varlen_func on CPU tensors only"):
        fgt.flash_attn_varlen_func(g[0], g[0], g[0], torch.tensor([0, 8]), torch.tensor([0, 8]), 8, 8)


# ---- the CUDA path (GPU) -------------------------------------------------------------------------

def _inputs(B, H, Hkv, Nq, Nk, d, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((B, H, Nq, d)), r.standard_normal((B, Hkv, Nk, d)), r.standard_normal((B, Hkv, Nk, d)),
            r.standard_normal((B, H, Nq, d)))


def _rel_l2(got, want):
    got = got.detach().double().cpu().numpy() if isinstance(got, torch.Tensor) else got
    num = np.sqrt(((got - want) ** 2).sum())
    den = np.sqrt((want ** 2).sum())
    return num / den if den > 0 else num


def _max_rel(got, want):
    got = got.detach().double().cpu().numpy() if isinstance(got, torch.Tensor) else got
    return np.abs(got - want).max() / max(1.0, np.abs(want).max())


def _run(dev, dtype, arrays, **opts):
    """flashgrad.torch.attention forward and backward on `dev` in `dtype`: (O, dq, dk, dv) as tensors."""
    q, k, v, do = (torch.tensor(a, dtype=dtype, device=dev) for a in arrays)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    o = fgt.attention(q, k, v, **opts)
    assert o.device == q.device and o.dtype == dtype
    o.backward(do)
    for t in (q.grad, k.grad, v.grad):
        assert t.device == q.device and t.dtype == dtype
    return o, q.grad, k.grad, v.grad


CASES = [  # B, H, Hkv, Nq, Nk, d, options
    (2, 2, 2, 33, 33, 32, {}),
    (1, 4, 4, 70, 70, 64, {"causal": True}),
    (1, 2, 2, 40, 90, 64, {"causal": True}),          # bottom-right, Nq < Nk
    (2, 4, 2, 65, 47, 64, {}),                       # GQA
    (1, 8, 1, 31, 31, 128, {"causal": True}),         # MQA
    (1, 2, 2, 50, 50, 32, {"window": (8, 3)}),
]


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B%d-H%d-Hkv%d-%dx%d-d%d-%s" % (c[:6] + ("-".join(c[6]) or
                                                                                                 "plain",)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu_and_float64(case, dtype):
    B, H, Hkv, Nq, Nk, d, opts = case
    arrays = _inputs(B, H, Hkv, Nq, Nk, d)
    got = _run("cuda", dtype, arrays, **opts)
    cpu = _run("cpu", dtype, arrays, **opts)
    want_o = ref.attention(*arrays[:3], **opts)[0]
    want_g = ref.attention_backward(*arrays, **opts)
    tol_cpu, tol_ref = (1e-5, 2e-5) if dtype == torch.float32 else (1e-11, 1e-11)
    for name, g, c, w in zip(("O", "dq", "dk", "dv"), got, cpu, (want_o,) + tuple(want_g)):
        assert _max_rel(g, c.detach().double().numpy()) <= tol_cpu, name + " vs flashgrad's CPU"
        assert _max_rel(g, w) <= tol_ref, name + " vs float64"


@needs_gpu
@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: "B%d-H%d-Hkv%d-%dx%d-d%d" % c[:6])
def test_cuda_bf16_matches_float64(case):
    B, H, Hkv, Nq, Nk, d, opts = case
    # the reference sees the bf16-rounded inputs
    arrays = tuple(torch.tensor(a).bfloat16().double().numpy() for a in _inputs(B, H, Hkv, Nq, Nk, d))
    got = _run("cuda", torch.bfloat16, arrays, **opts)
    want = (ref.attention(*arrays[:3], **opts)[0],) + tuple(ref.attention_backward(*arrays, **opts))
    for name, g, w in zip(("O", "dq", "dk", "dv"), got, want):
        assert _rel_l2(g, w) <= 1e-2, name


@needs_gpu
def test_cuda_lse_and_naive():
    arrays = _inputs(1, 2, 2, 37, 53, 64)
    q, k, v = (torch.tensor(a, dtype=torch.float32, device="cuda") for a in arrays[:3])
    o, lse = fgt.attention(q, k, v, causal=True, return_lse=True)
    want_o, want_lse = ref.attention(*arrays[:3], causal=True)[:2]
    assert lse.device == q.device and lse.dtype == torch.float64
    assert _max_rel(lse, want_lse) <= 2e-5 and _max_rel(o, want_o) <= 2e-5
    got = _run("cuda", torch.float32, arrays, causal=True, impl="naive")
    want = (want_o,) + tuple(ref.attention_backward(*arrays, causal=True))
    for name, g, w in zip(("O", "dq", "dk", "dv"), got, want):
        assert _max_rel(g, w) <= 2e-5, name + " (naive)"


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_dropout_is_the_cpus_and_repeats(dtype):
    arrays = _inputs(1, 2, 2, 48, 48, 64)
    if dtype == torch.bfloat16:
        arrays = tuple(torch.tensor(a).bfloat16().double().numpy() for a in arrays)
    a1 = _run("cuda", dtype, arrays, dropout=0.25, seed=1234)
    a2 = _run("cuda", dtype, arrays, dropout=0.25, seed=1234)
    for x, y in zip(a1, a2):
        assert torch.equal(x, y), "two runs with one seed differ"
    b = _run("cuda", dtype, arrays, dropout=0.25, seed=99)
    assert not torch.equal(a1[0], b[0]), "another seed gave the same output"
    # the keep bits are the CPU's (Philox of (seed, b, h, i, j)): the float64 reference with them
    want = (ref.attention(*arrays[:3], dropout=0.25, seed=1234)[0],) + \
        tuple(ref.attention_backward(*arrays, dropout=0.25, seed=1234))
    for name, g, w in zip(("O", "dq", "dk", "dv"), a1, want):
        if dtype == torch.float32:
            assert _max_rel(g, w) <= 2e-5, name
        else:
            assert _rel_l2(g, w) <= 1e-2, name


@needs_gpu
def test_cuda_unsupported_options_are_refused():
    q = torch.zeros(1, 2, 16, 64, device="cuda")
    with pytest.raises(ValueError, match="CPU only"):
        fgt.attention(q, q, q, mask=lambda b, h, i, j: j <= i)
    qb = q.bfloat16()
    with pytest.raises(ValueError, match="softcapping"):
        fgt.attention(qb, qb, qb, softcap=5.0)
    if torch.cuda.device_count() > 1:
        q1 = torch.zeros(1, 2, 16, 64, device="cuda:1")
        with pytest.raises(ValueError, match="flashgrad runs on cuda:"):
            fgt.attention(q1, q1, q1)


@needs_gpu
def test_cuda_inputs_from_another_stream():
    """Inputs written on a side stream that is current at the call: the call waits for it."""
    arrays = _inputs(1, 4, 4, 256, 256, 64)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        src = [torch.tensor(a, dtype=torch.float32).pin_memory() for a in arrays[:3]]
        q, k, v = (t.to("cuda", non_blocking=True) * 1.0 for t in src)
        o = fgt.attention(q, k, v, causal=True)
        o2 = o * 2.0  # read on the same stream right after
    torch.cuda.synchronize()
    assert _max_rel(o2 / 2.0, ref.attention(*arrays[:3], causal=True)[0]) <= 2e-5


@needs_gpu
@needs_sdpa_api
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal,gqa", [(False, False), (True, False), (True, True)])
def test_cuda_sdpa_dropin(dtype, causal, gqa):
    B, H, Hkv, N, d = 2, 4, 2 if gqa else 4, 77, 64
    arrays = _inputs(B, H, Hkv, N, N, d)
    if dtype == torch.bfloat16:
        arrays = tuple(torch.tensor(a).bfloat16().double().numpy() for a in arrays)
    q, k, v, do = (torch.tensor(a, dtype=dtype, device="cuda") for a in arrays)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    o = fgt.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    assert o.device == q.device and o.dtype == dtype
    o.backward(do)
    # torch's own SDPA in float64 on the CPU (is_causal: top-left, as the drop-in)
    q64, k64, v64 = (torch.tensor(a, requires_grad=True) for a in arrays[:3])
    rk, rv = (t.repeat_interleave(H // Hkv, 1) for t in (k64, v64))
    w = F.scaled_dot_product_attention(q64, rk, rv, is_causal=causal)
    w.backward(torch.tensor(arrays[3]))
    for name, g, r in zip(("O", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), (w, q64.grad, k64.grad, v64.grad)):
        r = r.detach().numpy()
        if dtype == torch.float32:
            assert _max_rel(g, r) <= 2e-5, name
        else:
            assert _rel_l2(g, r) <= 1e-2, name


@needs_gpu
@needs_sdpa_api
def test_cuda_sdpa_refusals():
    q = torch.zeros(1, 2, 16, 64, device="cuda")
    with pytest.raises(ValueError, match="attn_mask with CUDA tensors is not supported"):
        fgt.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(16, 16, dtype=torch.bool, device="cuda"))
    with pytest.raises(TypeError, match="float16 on CUDA"):
        fgt.scaled_dot_product_attention(q.half(), q.half(), q.half())
