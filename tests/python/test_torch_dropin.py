"""flashgrad.torch's drop-ins: scaled_dot_product_attention against torch's own SDPA for every argument
combination, flash_attn_func / flash_attn_varlen_func against a plain-torch reference of flash_attn's
documented semantics, torch.library.opcheck, torch.compile(fullgraph=True), gradcheck in float64,
half-precision inputs, autograd edges and error paths. Needs torch >= 2.4 (torch.library.custom_op);
an older torch skips the module with one line."""
import itertools
import math
import os

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
from flashgrad import _torch_ops as ops  # noqa: E402

pytestmark = pytest.mark.torch
D64 = torch.float64


def rnd(*shape, dtype=D64, grad=True, seed=None):
    t = torch.randn(*shape, dtype=dtype)
    return t.requires_grad_(grad)


def grads(fn, inputs, seed=7):
    out = fn(*inputs)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out.shape, generator=g, dtype=D64).to(out.dtype)
    gs = torch.autograd.grad((out * w).sum(), inputs, allow_unused=True)
    return out.detach(), [x if x is not None else torch.zeros_like(i) for x, i in zip(gs, inputs)]


def close(a, b, tol, what):
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol, "%s: max error %.3g > %.3g" % (what, err, tol)


def compare(f1, f2, inputs, tol, what):
    o1, g1 = grads(f1, inputs)
    o2, g2 = grads(f2, inputs)
    close(o1, o2, tol, what + " out")
    for n, a, b in zip("qkv", g1, g2):
        close(a, b, tol, what + " d" + n)


# ---- SDPA: every argument against torch's SDPA ---------------------------------------------------

SIZES = [(5, 5), (2, 5), (7, 3), (1, 1), (13, 29)]


@pytest.mark.parametrize("Nq,Nk", SIZES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_matches_torch(Nq, Nk, causal, gqa, scale):
    torch.manual_seed(Nq * 31 + Nk)
    Hk = 2 if gqa else 4
    q, k, v = rnd(2, 4, Nq, 8), rnd(2, Hk, Nk, 8), rnd(2, Hk, Nk, 8)
    kw = dict(is_causal=causal, scale=scale, enable_gqa=gqa)
    compare(lambda *a: fgt.scaled_dot_product_attention(*a, **kw),
            lambda *a: F.scaled_dot_product_attention(*a, **kw), (q, k, v), 1e-12, "sdpa %s" % kw)


MASK_SHAPES = [(7, 9), (1, 9), (7, 1), (1, 1, 7, 9), (2, 1, 7, 9), (1, 3, 7, 9), (2, 3, 7, 9), (3, 1, 9),
               (2, 3, 1, 1)]


@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks_of_every_broadcast_shape(shape, kind):
    torch.manual_seed(len(shape))
    q, k, v = rnd(2, 3, 7, 4), rnd(2, 3, 9, 4), rnd(2, 3, 9, 4)
    if kind == "bool":
        m = torch.rand(shape) > 0.4
    else:
        m = torch.randn(shape, dtype=D64)
        m[torch.rand(shape) < 0.2] = -math.inf
    compare(lambda *a: fgt.scaled_dot_product_attention(*a, attn_mask=m),
            lambda *a: F.scaled_dot_product_attention(*a, attn_mask=m), (q, k, v), 1e-12, "mask %s %s" % (kind, shape))


def test_sdpa_masks_with_non_contiguous_and_fully_masked_rows():
    q, k, v = rnd(2, 3, 6, 4), rnd(2, 3, 8, 4), rnd(2, 3, 8, 4)
    m = (torch.rand(2, 3, 8, 6) > 0.5).transpose(-1, -2)  # strides not of a contiguous mask
    m[:, :, 2] = False  # a row that sees no key: zeros, as torch gives
    compare(lambda *a: fgt.scaled_dot_product_attention(*a, attn_mask=m),
            lambda *a: F.scaled_dot_product_attention(*a, attn_mask=m), (q, k, v), 1e-12, "mask transposed")


@pytest.mark.parametrize("shape", [(6, 4), (3, 6, 4), (2, 2, 3, 6, 4), (1, 2, 2, 3, 6, 4)])
def test_sdpa_any_leading_dims(shape):
    q = rnd(*shape)
    k, v = rnd(*shape[:-2], 5, 4), rnd(*shape[:-2], 5, 4)
    m = torch.rand(shape[-2], 5) > 0.3
    for kw in (dict(is_causal=True), dict(attn_mask=m), {}):
        compare(lambda *a: fgt.scaled_dot_product_attention(*a, **kw),
                lambda *a: F.scaled_dot_product_attention(*a, **kw), (q, k, v), 1e-12, "%s %s" % (shape, kw))


@pytest.mark.parametrize("shape", [(0, 3, 5, 4), (2, 0, 5, 4), (2, 3, 0, 4)])
def test_sdpa_empty_sizes_as_torch(shape):
    q = rnd(*shape)
    k, v = rnd(shape[0], shape[1], 5, 4), rnd(shape[0], shape[1], 5, 4)
    a = fgt.scaled_dot_product_attention(q, k, v)
    b = F.scaled_dot_product_attention(q, k, v)
    assert a.shape == b.shape
    a.sum().backward()
    assert q.grad.shape == q.shape and k.grad.abs().sum() == 0


def test_sdpa_no_keys_gives_zeros_as_torch():
    q, k, v = rnd(1, 2, 3, 4), rnd(1, 2, 0, 4), rnd(1, 2, 0, 4)
    a = fgt.scaled_dot_product_attention(q, k, v)
    b = F.scaled_dot_product_attention(q, k, v)
    close(a, b, 0, "Nk = 0")
    a.sum().backward()
    assert q.grad.abs().sum() == 0


def test_sdpa_dropout_is_seeded_by_torch_and_unbiased():
    q, k, v = rnd(1, 2, 64, 8, grad=False), rnd(1, 2, 64, 8, grad=False), rnd(1, 2, 64, 8, grad=False)
    torch.manual_seed(3)
    a = fgt.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(3)
    b = fgt.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    c = fgt.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # E[dropout(P)] = P: the mean over many draws approaches the dropout-free output
    ref = F.scaled_dot_product_attention(q, k, v)
    mean = sum(fgt.scaled_dot_product_attention(q, k, v, dropout_p=0.3) for _ in range(200)) / 200
    assert (mean - ref).abs().mean() < 0.05 * ref.abs().mean() + 0.02


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2 ** -7), (torch.float16, 2 ** -10), (torch.float32, 1e-5)])
def test_half_inputs_computed_in_float32_returned_in_their_dtype(dtype, tol):
    """The stated tolerance: against torch's SDPA in the same dtype, out and grads within tol times
    max(1, |ref|) — one bf16/fp16 rounding of the result (ours rounds once, from float32)."""
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 4, 33, 16).to(dtype).requires_grad_() for _ in range(3))
    o1, g1 = grads(lambda *a: fgt.scaled_dot_product_attention(*a, is_causal=True), (q, k, v))
    o2, g2 = grads(lambda *a: F.scaled_dot_product_attention(*a, is_causal=True), (q, k, v))
    # the exact answer from the same rounded inputs, in float64
    o3, g3 = grads(lambda *a: F.scaled_dot_product_attention(*(x.double() for x in a), is_causal=True), (q, k, v))
    assert o1.dtype == dtype and all(g.dtype == dtype for g in g1)
    for a, b, c, n in zip([o1] + g1, [o2] + g2, [o3] + g3, ["out", "dq", "dk", "dv"]):
        scale = max(1.0, c.abs().max().item())
        ours, theirs = (a.double() - c).abs().max().item(), (b.double() - c).abs().max().item()
        assert ours <= 2 * tol * scale, "%s %s: error %.3g vs exact" % (dtype, n, ours)
        close(a, b, 4 * tol * scale, "%s %s vs torch (torch's error %.3g)" % (dtype, n, theirs))


# Inputs that do not fit, as PyTorch's SDPA tests pass them: torch raises RuntimeError; flashgrad
# raises its own class, which is also a RuntimeError (and the TypeError / ValueError of its checks).
_BAD_SDPA = [
    ("1-D query", lambda: (torch.randn(4), torch.randn(1, 4), torch.randn(1, 4)), ValueError),
    ("dtypes differ", lambda: (torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16).half(),
                               torch.randn(1, 4, 8, 16).half()), TypeError),
    ("heads differ without enable_gqa", lambda: (torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8),
                                                 torch.randn(1, 2, 3, 8)), ValueError),
    ("leading dims differ", lambda: (torch.randn(2, 2, 3, 8), torch.randn(3, 2, 3, 8),
                                     torch.randn(3, 2, 3, 8)), ValueError),
]


@pytest.mark.parametrize("case", range(len(_BAD_SDPA)))
def test_sdpa_input_errors_are_runtime_errors_as_torch(case):
    what, make, own = _BAD_SDPA[case]
    args = make()
    with pytest.raises(RuntimeError):  # the reference: torch's own answer to the same inputs
        F.scaled_dot_product_attention(*args)
    with pytest.raises(RuntimeError) as e:
        fgt.scaled_dot_product_attention(*args)
    assert isinstance(e.value, own), what
    assert "flashgrad.torch.scaled_dot_product_attention" in str(e.value) and "\n" not in str(e.value), what
    with pytest.raises(TypeError):  # not a tensor: torch's argument parser's TypeError, not a RuntimeError
        fgt.scaled_dot_product_attention([1.0], args[1], args[2])


def test_sdpa_gradcheck_float64():
    q, k, v = rnd(1, 2, 4, 3), rnd(1, 1, 6, 3), rnd(1, 1, 6, 3)
    m = torch.randn(4, 6, dtype=D64)
    for kw in (dict(is_causal=True, enable_gqa=True), dict(attn_mask=m, enable_gqa=True),
               dict(attn_mask=m > 0, enable_gqa=True, scale=0.7)):
        assert torch.autograd.gradcheck(lambda *a: fgt.scaled_dot_product_attention(*a, **kw), (q, k, v))


def test_double_backward_raises_naming_the_op():
    for f in (lambda q, k, v: fgt.scaled_dot_product_attention(q, k, v, is_causal=True),
              lambda q, k, v: fgt.flash_attn_func(q, k, v, causal=True),
              lambda q, k, v: fgt.attention(q, k, v, causal=True)):
        q, k, v = rnd(1, 2, 5, 4), rnd(1, 2, 5, 4), rnd(1, 2, 5, 4)
        with pytest.raises(RuntimeError, match="flashgrad.*double backward"):
            g = torch.autograd.grad(f(q, k, v).pow(2).sum(), q, create_graph=True)[0]
            g.pow(2).sum().backward()
    q, k, v = rnd(1, 1, 3, 2), rnd(1, 1, 3, 2), rnd(1, 1, 3, 2)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.gradgradcheck(lambda *a: fgt.scaled_dot_product_attention(*a), (q, k, v))


# ---- flash_attn: against a plain-torch reference of its documented semantics -----------------

def fa_reference(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, softmax_scale=None):
    """flash_attn_func's documented math: q (B, Nq, H, d), k, v (B, Nk, Hk, d); query i of Nq sees key
    j iff (not causal or j <= i + Nk - Nq) and i + Nk - Nq - left <= j <= i + Nk - Nq + right (-1 =
    unbounded); scores scale·q·k, softcap c·tanh(s/c), ALiBi -slope·|i + Nk - Nq - j|."""
    B, Nq, H, d = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(H // Hk, dim=2)
    vv = v.repeat_interleave(H // Hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kk) * (softmax_scale if softmax_scale else 1 / math.sqrt(d))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Nq).view(-1, 1) + Nk - Nq
    j = torch.arange(Nk).view(1, -1)
    if alibi_slopes is not None:
        sl = alibi_slopes.double().view(-1 if alibi_slopes.dim() == 2 else 1, H, 1, 1) if alibi_slopes.dim() == 2 \
            else alibi_slopes.double().view(1, H, 1, 1)
        if alibi_slopes.dim() == 2:
            sl = alibi_slopes.double().view(B, H, 1, 1)
        s = s - sl * (i - j).abs()
    ok = torch.ones(Nq, Nk, dtype=torch.bool)
    if causal:
        ok &= j <= i
    left, right = window_size
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    s = s.masked_fill(~ok, -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhij,bjhd->bihd", p, vv)


FA_CASES = [dict(), dict(causal=True), dict(window_size=(3, 1)), dict(causal=True, window_size=(2, -1)),
            dict(softcap=2.5), dict(alibi_slopes="h"), dict(alibi_slopes="bh", causal=True),
            dict(softmax_scale=0.2, softcap=1.0, window_size=(-1, 2))]


@pytest.mark.parametrize("case", range(len(FA_CASES)))
@pytest.mark.parametrize("Nq,Nk", [(6, 6), (3, 8), (8, 3)])
@pytest.mark.parametrize("Hk", [4, 2, 1])
def test_flash_attn_func_matches_its_documented_semantics(case, Nq, Nk, Hk):
    torch.manual_seed(case * 7 + Nq)
    kw = dict(FA_CASES[case])
    if kw.get("alibi_slopes") == "h":
        kw["alibi_slopes"] = torch.rand(4) * 0.5
    elif kw.get("alibi_slopes") == "bh":
        kw["alibi_slopes"] = torch.rand(2, 4) * 0.5
    q, k, v = rnd(2, Nq, 4, 8), rnd(2, Nk, Hk, 8), rnd(2, Nk, Hk, 8)
    compare(lambda *a: fgt.flash_attn_func(*a, **kw), lambda *a: fa_reference(*a, **kw), (q, k, v), 1e-12,
            "flash_attn %s" % kw)


def test_flash_attn_return_attn_probs_gives_lse_and_s_dmask():
    q, k, v = rnd(2, 5, 3, 4, grad=False), rnd(2, 7, 3, 4, grad=False), rnd(2, 7, 3, 4, grad=False)
    out, lse, probs = fgt.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert probs.shape == (2, 3, 5, 7) and lse.shape == (2, 3, 5) and lse.dtype == torch.float32
    s = torch.einsum("bihd,bjhd->bhij", q, k) / 2
    ok = torch.arange(7).view(1, -1) <= torch.arange(5).view(-1, 1) + 2
    close(lse, torch.logsumexp(s.masked_fill(~ok, -math.inf), -1), 1e-5, "lse")


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window_size=(2, 0)), dict(alibi_slopes="bh"),
                                dict(softcap=3.0, causal=True)])
def test_flash_attn_varlen_equals_each_document_alone(kw):
    torch.manual_seed(11)
    kw = dict(kw)
    lq, lk = [5, 1, 0, 9, 4], [7, 1, 3, 6, 4]
    if kw.get("alibi_slopes") == "bh":
        kw["alibi_slopes"] = torch.rand(len(lq), 4)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32)
    q, k, v = rnd(sum(lq), 4, 8), rnd(sum(lk), 2, 8), rnd(sum(lk), 2, 8)

    def per_doc(q, k, v):
        outs = []
        for s in range(len(lq)):
            a = dict(kw)
            if "alibi_slopes" in a:
                a["alibi_slopes"] = a["alibi_slopes"][s]
            qs, ks, vs = q[cu_q[s]:cu_q[s + 1]], k[cu_k[s]:cu_k[s + 1]], v[cu_k[s]:cu_k[s + 1]]
            outs.append(fa_reference(qs[None], ks[None], vs[None], **a)[0])
        return torch.cat(outs)

    compare(lambda *a: fgt.flash_attn_varlen_func(*a, cu_q, cu_k, max(lq), max(lk), **kw), per_doc, (q, k, v), 1e-12,
            "varlen %s" % kw)
    assert torch.autograd.gradcheck(lambda *a: fgt.flash_attn_varlen_func(*a, cu_q, cu_k, max(lq), max(lk), **kw),
                                    (q[:, :, :2].detach().requires_grad_(), k[:, :, :2].detach().requires_grad_(),
                                     v[:, :, :2].detach().requires_grad_()))


# ---- torch.library and torch.compile ------------------------------------------------------------

def test_opcheck_passes_for_every_op():
    q, k, v = rnd(2, 4, 6, 3), rnd(2, 2, 9, 3), rnd(2, 2, 9, 3)
    m = (torch.rand(6, 9) > 0.3).expand(2, 4, 6, 9)
    b = torch.randn(1, 4, 6, 9, dtype=D64).expand(2, 4, 6, 9)
    for mask in (None, m, b):
        torch.library.opcheck(ops.attn_fwd, (q, k, v, mask, None, None, 0.5, 2, 0.0, -1, -1, 0.0))
    torch.library.opcheck(ops.attn_fwd, (q, k, v, None, torch.rand(4, dtype=D64), None, 0.5, 1, 0.0, 3, 1, 2.0))
    cu = torch.tensor([0, 2, 6], dtype=torch.int64)
    cuk = torch.tensor([0, 5, 9], dtype=torch.int64)
    qv, kv, vv = rnd(6, 4, 3), rnd(9, 2, 3), rnd(9, 2, 3)
    torch.library.opcheck(ops.varlen_fwd, (qv, kv, vv, cu, cuk, None, None, 4, 5, 0.5, 1, 0.0, -1, -1, 0.0))


def test_compile_fullgraph_with_every_api():
    torch._dynamo.reset()
    q, k, v = rnd(2, 4, 16, 8, dtype=torch.float32), rnd(2, 2, 16, 8, dtype=torch.float32), \
        rnd(2, 2, 16, 8, dtype=torch.float32)
    m = torch.rand(16, 16) > 0.2

    def f(q, k, v):
        a = fgt.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        b = fgt.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True, dropout_p=0.1)
        c = fgt.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                                window_size=(4, 0)).transpose(1, 2)
        return a + 0 * b + c

    cf = torch.compile(f, fullgraph=True)
    torch.manual_seed(0)
    o1, g1 = grads(cf, (q, k, v))
    torch.manual_seed(0)
    o2, g2 = grads(f, (q, k, v))
    close(o1, o2, 1e-6, "compiled out")
    for a, b in zip(g1, g2):
        close(a, b, 1e-5, "compiled grad")


# ---- errors: one short line each ------------------------------------------------------------------

ERRORS = [
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 2, 5, 8), rnd(2, 2, 5, 8)), "enable_gqa"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 8),
                                              attn_mask=torch.rand(3, 5) > 0), "does not broadcast"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 8),
                                              attn_mask=torch.ones(5, 5, dtype=torch.bool), is_causal=True),
     "Explicit attn_mask should not be set when is_causal=True"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), is_causal="no"),
     "True or False"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 6)), "value's E"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 8),
                                              attn_mask=torch.randn(5, 5, dtype=D64, requires_grad=True)),
     "requires grad"),
    (lambda: fgt.scaled_dot_product_attention(rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), rnd(2, 4, 5, 8), dropout_p=1.0),
     "dropout_p"),
    (lambda: fgt.scaled_dot_product_attention(torch.ones(2, 3, 4, dtype=torch.int64), torch.ones(2, 3, 4),
                                              torch.ones(2, 3, 4)), "dtype"),
    (lambda: fgt.flash_attn_func(rnd(2, 5, 8), rnd(2, 5, 8), rnd(2, 5, 8)), "batch_size, seqlen_q, nheads"),
    (lambda: fgt.flash_attn_func(rnd(2, 5, 4, 8), rnd(2, 5, 3, 8), rnd(2, 5, 3, 8)), "multiple of nheads_k"),
    (lambda: fgt.flash_attn_func(rnd(2, 5, 4, 8), rnd(2, 5, 4, 8), rnd(2, 5, 4, 8), causal="no"), "True or False"),
    (lambda: fgt.flash_attn_func(rnd(2, 5, 4, 8), rnd(2, 5, 4, 8), rnd(2, 5, 4, 8), alibi_slopes=torch.ones(3)),
     "alibi_slopes"),
    (lambda: fgt.flash_attn_varlen_func(rnd(6, 4, 8), rnd(6, 4, 8), rnd(6, 4, 8), torch.tensor([0, 4, 6]),
                                        torch.tensor([0, 4, 6]), 2, 4), "max_seqlen_q"),
    (lambda: fgt.flash_attn_varlen_func(rnd(6, 4, 8), rnd(6, 4, 8), rnd(6, 4, 8), torch.tensor([0, 4, 7]),
                                        torch.tensor([0, 4, 7]), 4, 4), "ends at 7"),
    (lambda: fgt.flash_attn_varlen_func(rnd(6, 4, 8), rnd(6, 4, 8), rnd(6, 4, 8), torch.tensor([0, 6]),
                                        torch.tensor([0, 6]), 6, 6, block_table=torch.zeros(1)), "block_table"),
    (lambda: fgt.attention(rnd(1, 2, 5, 4), rnd(1, 2, 5, 4), rnd(1, 2, 5, 4), causal="no"), "causal must be"),
    (lambda: fgt.attention(rnd(1, 2, 5, 4), rnd(1, 2, 5, 4), rnd(1, 2, 5, 4), scale=torch.ones(100, 100)),
     "scale"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_are_short_and_say_what_is_wrong(i):
    fn, what = ERRORS[i]
    with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
        fn()
    msg = str(e.value)
    assert what in msg, msg
    assert len(msg) < 400 and msg.count("\n") < 3, "message too long: %d chars" % len(msg)
