"""Empty inputs through every torch entry point: flashgrad.torch.attention (with and without lse),
scaled_dot_product_attention, flash_attn_func and flash_attn_varlen_func, each size zero in turn
(B, H, Nq, Nk, d), forward and backward, against torch's own scaled_dot_product_attention: the same
output (shape, dtype, values) and the same gradients. The numpy API has the same table in
test_empty.py. Needs torch >= 2.4 for the drop-ins; an older torch skips the module with one line."""
import os

import numpy as np
import pytest

if os.environ.get("FG_TORCH") == "1":
    import torch  # must be there: its absence fails the run
else:
    torch = pytest.importorskip("torch")

_V = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if _V < (2, 4):
    pytest.skip("flashgrad.torch drop-ins need torch >= 2.4 (torch.library.custom_op); this is torch %s"
                % torch.__version__, allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import flashgrad.torch as fgt  # noqa: E402
import reference  # noqa: E402

pytestmark = pytest.mark.torch
FULL = dict(B=2, H=2, Nq=3, Nk=4, d=5)
ZERO = ["B", "H", "Nq", "Nk", "d"]
SCALE = 0.5  # given to every call: with d = 0, 1/sqrt(d) is no number, and every score is 0 anyway


def _packed(x):
    """(B, H, N, d) -> flash_attn's packed (B * N, H, d) and its offsets."""
    B, H, N, d = x.shape
    return x.transpose(1, 2).reshape(B * N, H, d), torch.arange(B + 1, dtype=torch.int32) * N


def _varlen(q, k, v):
    B, H, Nq, d = q.shape
    (pq, cq), (pk, ck), (pv, _) = _packed(q), _packed(k), _packed(v)
    o = fgt.flash_attn_varlen_func(pq, pk, pv, cq, ck, Nq, k.shape[2], softmax_scale=SCALE)
    return o.reshape(B, Nq, H, d).transpose(1, 2)


ENTRIES = {
    "attention": lambda q, k, v: fgt.attention(q, k, v, scale=SCALE),
    "attention-lse": lambda q, k, v: fgt.attention(q, k, v, scale=SCALE, return_lse=True)[0],
    "attention-naive": lambda q, k, v: fgt.attention(q, k, v, scale=SCALE, impl="naive"),
    "scaled_dot_product_attention": lambda q, k, v: fgt.scaled_dot_product_attention(q, k, v, scale=SCALE),
    "flash_attn_func": lambda q, k, v: fgt.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           softmax_scale=SCALE).transpose(1, 2),
    "flash_attn_varlen_func": _varlen,
}


def inputs(zero, dtype):
    s = dict(FULL)
    s[zero] = 0
    g = torch.Generator().manual_seed(11)
    q = torch.randn(s["B"], s["H"], s["Nq"], s["d"], generator=g, dtype=dtype)
    k = torch.randn(s["B"], s["H"], s["Nk"], s["d"], generator=g, dtype=dtype)
    v = torch.randn(s["B"], s["H"], s["Nk"], s["d"], generator=g, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v)]


def run(fn, q, k, v):
    out = fn(q, k, v)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    gs = torch.autograd.grad((out * w).sum(), (q, k, v), allow_unused=True)
    return out.detach(), [torch.zeros_like(x) if g is None else g for g, x in zip(gs, (q, k, v))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("zero", ZERO)
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_every_entry_point_on_a_zero_size_is_torchs_sdpa(entry, zero, dtype):
    q, k, v = inputs(zero, dtype)
    out, gs = run(ENTRIES[entry], q, k, v)
    want, wgs = run(lambda *a: F.scaled_dot_product_attention(*a, scale=SCALE), q, k, v)
    assert out.shape == want.shape and out.dtype == want.dtype, (out.shape, out.dtype, want.shape)
    assert torch.equal(out, want), "output differs from torch's"
    for name, g, w, x in zip("qkv", gs, wgs, (q, k, v)):
        assert g.shape == x.shape and g.dtype == x.dtype, (name, g.shape, g.dtype)
        assert torch.equal(g, w), "d%s differs from torch's" % name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("zero", ZERO)
def test_lse_on_a_zero_size_is_the_references(zero, dtype):
    q, k, v = inputs(zero, dtype)
    for kw in (dict(), dict(causal=True, alibi=True)):
        o, lse = fgt.attention(q, k, v, scale=SCALE, return_lse=True, **kw)
        assert lse.shape == q.shape[:3] and lse.dtype == torch.float64
        _, want, _, _ = reference.attention(*(x.detach().numpy() for x in (q, k, v)), scale=SCALE, **kw)
        np.testing.assert_allclose(lse.numpy(), want, rtol=1e-6, atol=0, err_msg="%s %s" % (zero, kw))
    o, lse, _ = fgt.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=SCALE,
                                    return_attn_probs=True)
    _, want, _, _ = reference.attention(*(x.detach().numpy() for x in (q, k, v)), scale=SCALE)
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    np.testing.assert_allclose(lse.numpy(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("zero", ZERO)
def test_custom_ops_pass_opcheck_on_a_zero_size(zero):
    """The registered ops (what torch.compile traces) on empty inputs: fake and real agree, autograd
    registration holds."""
    q, k, v = inputs(zero, torch.float64)
    torch.library.opcheck(torch.ops.flashgrad.attn_fwd, (q, k, v, None, None, None, SCALE, 0, 0.0, -1, -1, 0.0))
    B, H, Nq, d = q.shape
    (pq, cq), (pk, ck), (pv, _) = _packed(q), _packed(k), _packed(v)
    torch.library.opcheck(torch.ops.flashgrad.varlen_fwd, (pq, pk, pv, cq.long(), ck.long(), None, None, Nq,
                                                           k.shape[2], SCALE, 0, 0.0, -1, -1, 0.0))


@pytest.mark.parametrize("shape", [(6, 0, 4), (6, 2, 0)])
def test_varlen_offsets_are_checked_with_no_head_or_no_head_dim(shape):
    q = torch.randn(*shape, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[0\] must be 0"):
        fgt.flash_attn_varlen_func(q, q, q, torch.tensor([1, 3, 6]), torch.tensor([0, 3, 6]), 3, 3)
    with pytest.raises(ValueError, match="ends at 5 but there are 6 tokens"):
        fgt.flash_attn_varlen_func(q, q, q, torch.tensor([0, 3, 6]), torch.tensor([0, 3, 5]), 3, 3)
