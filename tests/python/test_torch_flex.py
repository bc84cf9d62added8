"""flashgrad.torch.flex_attention against PyTorch: the forward against torch.nn.attention's own
flex_attention on the CPU, the backward (q, k, v and the tensors a score_mod captures) against plain
torch math with autograd, and float64 torch.autograd.gradcheck, for the variants people write:
causal, sliding window, prefix-LM, document masking, ALiBi, tanh softcap, relative-position bias, a
learned bias table, GQA. Then the BlockMask's corner cases and the errors. Needs torch >= 2.5
(torch.nn.attention.flex_attention); an older torch skips the module with one line."""
import math
import os

import pytest

if os.environ.get("FG_TORCH") == "1":
    import torch  # must be there: its absence fails the run
else:
    torch = pytest.importorskip("torch")

_V = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if _V < (2, 5):
    pytest.skip("flex_attention tests need torch >= 2.5 (torch.nn.attention.flex_attention); this is torch %s"
                % torch.__version__, allow_module_level=True)

import torch.nn.attention.flex_attention as tfa  # noqa: E402

import flashgrad.torch as fgt  # noqa: E402

pytestmark = pytest.mark.torch
tfa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # torch's eager CPU forward is the reference; no warning
D64 = torch.float64


def grid(L, S):
    """(i (1, 1, L, 1), j (1, 1, 1, S)) long index grids for the plain-torch references."""
    return torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S)


# ---- the variants: (score_mod or None, mask_mod or None, the reference's score and mask) ---------
#
# Each case is built for sizes (B, Hq, Hkv, L, S) and returns score_mod, mask_mod, the captured
# tensors that require grad, and ref(s) -> (s', visible) computing the same variant on a dense
# (B, Hq, L, S) score tensor with plain torch ops.

def case_causal(B, H, L, S):
    def mask(b, h, i, j):
        return i >= j
    i, j = grid(L, S)
    return None, mask, [], lambda s: (s, (i >= j).expand_as(s))


def case_sliding(B, H, L, S, w=5):
    def mask(b, h, i, j):
        return (i >= j) & (i - j <= w)
    i, j = grid(L, S)
    return None, mask, [], lambda s: (s, ((i >= j) & (i - j <= w)).expand_as(s))


def case_prefix_lm(B, H, L, S, prefix=7):
    def mask(b, h, i, j):
        return (j < prefix) | (i >= j)
    i, j = grid(L, S)
    return None, mask, [], lambda s: (s, ((j < prefix) | (i >= j)).expand_as(s))


def case_document(B, H, L, S):
    # document ids of the packed sequence: documents of 5, 11, 2, ... tokens
    lens = [5, 11, 2, 9, 3, 13, 4, 8, 17, 6] * 8
    q_doc = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))[:L]
    k_doc = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))[:S]

    def mask(b, h, i, j):
        return (q_doc[i] == k_doc[j]) & (i >= j)
    i, j = grid(L, S)
    return None, mask, [], lambda s: (s, ((q_doc.view(1, 1, L, 1) == k_doc.view(1, 1, 1, S)) & (i >= j)).expand_as(s))


def case_alibi(B, H, L, S):
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], dtype=D64).requires_grad_(True)

    def score_mod(s, b, h, i, j):
        return s - slopes[h] * (i - j).abs()

    def mask(b, h, i, j):
        return i >= j
    i, j = grid(L, S)
    return score_mod, mask, [slopes], lambda s: (s - slopes.view(1, H, 1, 1).to(s.dtype) * (i - j).abs(),
                                                 (i >= j).expand_as(s))


def case_softcap(B, H, L, S, cap=2.0):
    def score_mod(s, b, h, i, j):
        return cap * torch.tanh(s / cap)
    return score_mod, None, [], lambda s: (cap * torch.tanh(s / cap), None)


def case_relpos(B, H, L, S):
    def score_mod(s, b, h, i, j):
        return s + 0.05 * (i - j)
    i, j = grid(L, S)
    return score_mod, None, [], lambda s: (s + 0.05 * (i - j), None)


def case_learned_bias(B, H, L, S):
    g = torch.Generator().manual_seed(3)
    bias = (0.3 * torch.randn(H, L, S, generator=g, dtype=D64)).requires_grad_(True)

    def score_mod(s, b, h, i, j):
        return s + bias[h, i, j]

    def mask(b, h, i, j):
        return i >= j
    i, j = grid(L, S)
    return score_mod, mask, [bias], lambda s: (s + bias.unsqueeze(0).to(s.dtype), (i >= j).expand_as(s))


def case_gqa_causal(B, H, L, S):
    return case_causal(B, H, L, S)


def case_softcap_document(B, H, L, S):
    sm, _, cap, ref1 = case_softcap(B, H, L, S)
    _, mm, _, ref2 = case_document(B, H, L, S)
    return sm, mm, cap, lambda s: (ref1(s)[0], ref2(s)[1])


CASES = {"causal": case_causal, "sliding_window": case_sliding, "prefix_lm": case_prefix_lm,
         "document": case_document, "alibi": case_alibi, "softcap": case_softcap, "relative_position": case_relpos,
         "learned_bias": case_learned_bias, "gqa_causal": case_gqa_causal, "softcap_document": case_softcap_document}
GQA = {"gqa_causal"}


def make_inputs(name, B, H, L, S, E, dtype, seed=0):
    Hkv = H // 2 if name in GQA else H
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=D64).to(dtype)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=D64).to(dtype)
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=D64).to(dtype)
    return q, k, v


def block_mask_of(mask, B, H, L, S, bs):
    if mask is None:
        return None
    return tfa.create_block_mask(mask, None, None, L, S, device="cpu", BLOCK_SIZE=bs)


def reference(q, k, v, ref, scale):
    """Plain torch: dense scores, the variant, softmax, weights @ v (GQA by repeating K/V heads)."""
    G = q.shape[1] // k.shape[1]
    k2, v2 = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = torch.matmul(q, k2.transpose(-1, -2)) * scale
    s, vis = ref(s)
    if vis is not None:
        s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.matmul(p, v2)


SIZES = [(2, 4, 37, 37, 8), (1, 2, 64, 64, 16), (1, 2, 19, 45, 8)]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_flex_forward_matches_torch_flex_attention(name, size):
    B, H, L, S, E = size
    sm, mm, cap, _ = CASES[name](B, H, L, S)
    q, k, v = make_inputs(name, B, H, L, S, E, torch.float32)
    bm = block_mask_of(mm, B, H, L, S, 16)
    gqa = name in GQA
    want, lse_w = tfa.flex_attention(q, k, v, score_mod=sm, block_mask=bm, enable_gqa=gqa, return_lse=True)
    got, lse_g = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm, enable_gqa=gqa, return_lse=True)
    assert got.shape == want.shape and got.dtype == torch.float32
    err = (got - want).abs().max().item()
    assert err <= 2e-5, "%s: out max error %.3g" % (name, err)
    fin = torch.isfinite(lse_w)
    assert torch.equal(fin, torch.isfinite(lse_g)), "%s: rows with no key differ" % name
    assert (lse_g[fin] - lse_w[fin]).abs().max().item() <= 2e-5


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_flex_backward_matches_torch_math(name, size):
    B, H, L, S, E = size
    sm, mm, cap, ref = CASES[name](B, H, L, S)
    q, k, v = (t.requires_grad_(True) for t in make_inputs(name, B, H, L, S, E, D64))
    bm = block_mask_of(mm, B, H, L, S, 16)
    scale = 1 / math.sqrt(E)
    inputs = [q, k, v] + cap
    g = torch.Generator().manual_seed(11)
    got = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm, enable_gqa=name in GQA)
    w = torch.randn(got.shape, generator=g, dtype=D64)
    dgot = torch.autograd.grad((got * w).sum(), inputs)
    want = reference(q, k, v, ref, scale)
    dwant = torch.autograd.grad((want * w).sum(), inputs)
    assert (got - want).abs().max().item() <= 1e-12
    for n, a, b in zip(["dq", "dk", "dv"] + ["d(captured %d)" % i for i in range(len(cap))], dgot, dwant):
        err = (a - b).abs().max().item()
        assert err <= 1e-11, "%s %s: max error %.3g" % (name, n, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_flex_gradcheck_float64(name):
    B, H, L, S, E = 1, 2, 11, 13, 4
    sm, mm, cap, _ = CASES[name](B, H, L, S)
    q, k, v = (t.requires_grad_(True) for t in make_inputs(name, B, H, L, S, E, D64, seed=5))
    bm = block_mask_of(mm, B, H, L, S, 4)  # small blocks: full, partial and empty tiles all occur
    n_cap = len(cap)

    def f(q, k, v, *c):
        # the captured tensors are the ones gradcheck perturbs: rebuild score_mod around them
        if n_cap:
            sm2, _, _, _ = rebuild(name, c, B, H, L, S)
        else:
            sm2 = sm
        return fgt.flex_attention(q, k, v, score_mod=sm2, block_mask=bm, enable_gqa=name in GQA)
    assert torch.autograd.gradcheck(f, [q, k, v] + cap, eps=1e-6, atol=1e-8, rtol=1e-6)


def rebuild(name, c, B, H, L, S):
    """The case's score_mod over the given captured tensors (gradcheck's own inputs)."""
    if name == "alibi":
        slopes, = c

        def score_mod(s, b, h, i, j):
            return s - slopes[h] * (i - j).abs()
    elif name == "learned_bias":
        bias, = c

        def score_mod(s, b, h, i, j):
            return s + bias[h, i, j]
    else:
        raise AssertionError(name)
    return score_mod, None, list(c), None


# ---- tiles, block masks and paths ---------------------------------------------------------------

def test_flex_block_mask_full_tiles_skip_mask_mod():
    """Full tiles never call mask_mod and empty ones are never visible, as the BlockMask says; a
    mask_mod that contradicts the block mask shows which one flashgrad follows."""
    L = S = 64
    calls = []

    def mask(b, h, i, j):
        calls.append(math.prod(torch.broadcast_shapes(b.shape, h.shape, i.shape, j.shape)))
        return i >= j
    bm = tfa.create_block_mask(mask, None, None, L, S, device="cpu", BLOCK_SIZE=16)
    n_partial = int(bm.kv_num_blocks.sum())
    assert n_partial == 4 and int(bm.full_kv_num_blocks.sum()) == 6
    q, k, v = make_inputs("causal", 1, 2, L, S, 8, torch.float32)
    for sm in (None, lambda s, b, h, i, j: s * 1.0):
        calls.clear()
        fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm)
        # one call per query-block row of tiles (or one for all partial tiles), each on partial tiles only
        assert calls and sum(calls) <= n_partial * 16 * 16, calls
    # a mask_mod that says "nothing" still leaves the full tiles visible: the block mask is trusted,
    # as FlexAttention's compiled kernels trust it (torch's eager CPU forward, which evaluates
    # mask_mod everywhere, is no reference here)
    bm2 = tfa.BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
                                       BLOCK_SIZE=16, mask_mod=lambda b, h, i, j: i < 0)
    i, j = grid(L, S)
    full_tiles = (i // 16 > j // 16)
    want = reference(q.double(), k.double(), v.double(), lambda s: (s, full_tiles.expand_as(s)), 1 / math.sqrt(8))
    for sm in (None, lambda s, b, h, i, j: s):
        got = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm2)
        assert (got.double() - want).abs().max().item() <= 2e-5


def test_flex_score_mod_called_per_tile_row_not_per_element():
    L = S = 256
    n = [0]

    def sm(s, b, h, i, j):
        n[0] += 1
        return s + 0.0 * i
    q, k, v = (t.requires_grad_(True) for t in make_inputs("x", 1, 2, L, S, 8, D64))
    bm = tfa.create_block_mask(lambda b, h, i, j: i >= j, None, None, L, S, device="cpu", BLOCK_SIZE=64)
    out = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm)
    assert n[0] == 4  # 4 query blocks
    out.sum().backward()
    assert n[0] == 8


def test_flex_rows_with_no_key_give_zero_and_minus_inf_lse():
    L = S = 32

    def mask(b, h, i, j):
        return (i >= 8) & (j <= i)
    bm = tfa.create_block_mask(mask, None, None, L, S, device="cpu", BLOCK_SIZE=8)
    q, k, v = (t.requires_grad_(True) for t in make_inputs("x", 1, 2, L, S, 4, D64))
    for sm in (None, lambda s, b, h, i, j: s + 0.1):
        out, lse = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm, return_lse=True)
        assert torch.all(out[:, :, :8] == 0) and torch.all(lse[:, :, :8] == float("-inf"))
        assert torch.isfinite(out).all()
        q.grad = None
        out.sum().backward()
        assert torch.isfinite(q.grad).all() and torch.all(q.grad[:, :, :8] == 0)


def test_flex_per_batch_and_head_block_mask():
    B, H, L, S = 2, 3, 40, 40

    def mask(b, h, i, j):
        return (j <= i + b * 3) & ((i - j).abs() <= 4 + 5 * h)
    bm = tfa.create_block_mask(mask, B, H, L, S, device="cpu", BLOCK_SIZE=8)
    q, k, v = make_inputs("x", B, H, L, S, 8, torch.float32)
    for sm in (None, lambda s, b, h, i, j: s - 0.1 * h):
        got = fgt.flex_attention(q, k, v, score_mod=sm, block_mask=bm)
        want = tfa.flex_attention(q, k, v, score_mod=sm, block_mask=bm)
        assert (got - want).abs().max().item() <= 2e-5


def test_flex_half_precision_and_value_dim():
    q, k, v = make_inputs("x", 1, 2, 24, 24, 8, torch.float32)
    v16 = torch.randn(1, 2, 24, 16)
    for sm in (None, lambda s, b, h, i, j: s):
        got = fgt.flex_attention(q, k, v16, score_mod=sm)
        want = tfa.flex_attention(q, k, v16, score_mod=sm)
        assert got.shape == (1, 2, 24, 16) and (got - want).abs().max().item() <= 2e-5
    got = fgt.flex_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert got.dtype == torch.bfloat16
    want = tfa.flex_attention(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float())
    assert (got.float() - want).abs().max().item() <= 1e-2


def test_flex_return_aux_lse():
    q, k, v = make_inputs("x", 1, 2, 16, 16, 8, torch.float32)
    out, aux = fgt.flex_attention(q, k, v, return_aux=tfa.AuxRequest(lse=True))
    _, lse = fgt.flex_attention(q, k, v, return_lse=True)
    assert torch.equal(aux.lse, lse)


def test_flex_causal_block_mask_agrees_with_builtin_causal():
    """The C path (no score_mod) with a causal BlockMask computes what flashgrad's own causal
    attention computes, to rounding."""
    q, k, v = make_inputs("x", 1, 2, 300, 300, 16, torch.float32)
    bm = tfa.create_block_mask(lambda b, h, i, j: i >= j, None, None, 300, 300, device="cpu")
    got = fgt.flex_attention(q, k, v, block_mask=bm)
    want = fgt.attention(q, k, v, causal=True)
    assert (got - want).abs().max().item() <= 1e-5


# ---- errors: torch's messages and types ---------------------------------------------------------

def test_flex_errors():
    q, k, v = make_inputs("x", 1, 4, 8, 8, 4, torch.float32)
    with pytest.raises(ValueError, match="Try setting enable_gqa=True"):
        fgt.flex_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="multiple of kv heads"):
        fgt.flex_attention(q, k[:, :3], v[:, :3], enable_gqa=True)
    with pytest.raises(NotImplementedError, match="4D"):
        fgt.flex_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="same dtype"):
        fgt.flex_attention(q, k.double(), v)
    bm = tfa.create_block_mask(lambda b, h, i, j: i >= j, None, None, 4, 4, device="cpu", BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="smaller length"):
        fgt.flex_attention(q, k, v, block_mask=bm)
    with pytest.raises(ValueError, match="both return_lse and return_aux"):
        fgt.flex_attention(q, k, v, return_lse=True, return_aux=tfa.AuxRequest(lse=True))

    def bad(s, b, h, i, j):
        return s + int(i)  # a Python int of a tensor of many indices: fails on a tile
    with pytest.raises(Exception, match="once per tile"):
        fgt.flex_attention(q, k, v, score_mod=bad)
    out = fgt.flex_attention(q.requires_grad_(True), k, v, score_mod=lambda s, b, h, i, j: s)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


@pytest.mark.parametrize("name", ["learned_bias", "document", "alibi"])
def test_flex_inside_torch_compile(name):
    """Inside a torch.compile'd function (PyTorch's own flex tests compile the call): the graph
    breaks around flashgrad's flex_attention, which runs as in eager; forward and gradients against
    plain torch."""
    torch._dynamo.reset()
    B, H, L, S, E = 1, 2, 40, 40, 8
    sm, mm, cap, ref = CASES[name](B, H, L, S)
    q, k, v = (t.requires_grad_(True) for t in make_inputs(name, B, H, L, S, E, D64))
    bm = block_mask_of(mm, B, H, L, S, 16)
    inputs = [q, k, v] + cap

    def f(q, k, v):
        return fgt.flex_attention(q.sin(), k, v, score_mod=sm, block_mask=bm).cos()

    got = torch.compile(f, backend="aot_eager")(q, k, v)
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(5), dtype=D64)
    dgot = torch.autograd.grad((got * w).sum(), inputs)
    want = reference(q.sin(), k, v, ref, 1 / math.sqrt(E)).cos()
    dwant = torch.autograd.grad((want * w).sum(), inputs)
    assert (got - want).abs().max().item() <= 1e-12
    for a, b in zip(dgot, dwant):
        assert (a - b).abs().max().item() <= 1e-11
