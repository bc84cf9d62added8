"""flashgrad.torch: torch.autograd.gradcheck for every variant, agreement with plain torch (SDPA and the formula
written out with autograd), memory shared with the tensors, errors, threads, and nanoGPT's attention block."""
import math
import os
import threading

import numpy as np
import pytest

if os.environ.get("FG_TORCH") == "1":
    import torch  # must be there: its absence fails the run
else:
    torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flashgrad.torch as fgt  # noqa: E402
import reference as ref  # noqa: E402

pytestmark = pytest.mark.torch
# the tests that compare with torch's own SDPA need it (torch >= 2.0; Debian's 1.13 has none)
needs_sdpa = pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"),
                                reason="needs F.scaled_dot_product_attention (torch >= 2.0), this is torch %s"
                                % torch.__version__)


def mod(s, b, h, i, j):
    return 2.0 * math.tanh(s / 2.0) - 0.05 * abs(i - j)


def mod_grad(s, b, h, i, j):
    t = math.tanh(s / 2.0)
    return 1 - t * t


def stripes(b, h, i, j):
    return (i + 2 * j + h) % 4 != 1


VARIANTS = [
    ("plain", {}, 2),
    ("causal", {"causal": True}, 2),
    ("scale", {"scale": 0.8}, 2),
    ("dropout", {"dropout": 0.3, "seed": 5}, 2),
    ("causal-dropout", {"causal": True, "dropout": 0.2, "seed": 11}, 2),
    ("gqa", {"kv_heads": 1}, 1),
    ("window", {"window": (2, 1)}, 2),
    ("window-causal", {"window": (1, None), "causal": True}, 2),
    ("alibi", {"alibi": True}, 2),
    ("alibi-slopes", {"alibi": [0.3, -0.7]}, 2),
    ("softcap", {"softcap": 1.5}, 2),
    ("everything-built-in", {"causal": True, "kv_heads": 1, "window": (3, 0), "alibi": True, "softcap": 2.0,
                             "dropout": 0.1, "seed": 3}, 1),
    ("naive", {"impl": "naive", "causal": True, "dropout": 0.2, "seed": 1}, 2),
    ("naive-softcap-alibi", {"impl": "naive", "softcap": 2.5, "alibi": True}, 2),
    ("score_mod", {"score_mod": mod, "score_mod_grad": mod_grad}, 2),
    ("mask", {"mask": stripes}, 2),
    ("variant-doc-mask", {"variant": "doc-mask", "causal": True}, 2),
    ("variant-softcap-cb", {"variant": "softcap-cb"}, 2),
]


def leaves(dtype, hkv, B=1, H=2, nq=6, nk=7, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, nq, d, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(B, hkv, nk, d, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(B, hkv, nk, d, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("case", VARIANTS, ids=[c[0] for c in VARIANTS])
def test_gradcheck_float64(case):
    _, opts, hkv = case
    q, k, v = leaves(torch.float64, hkv)
    assert torch.autograd.gradcheck(lambda q, k, v: fgt.attention(q, k, v, **opts), (q, k, v), eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


def torch_reference(q, k, v, causal=False, scale=None, dropout=0.0, seed=0, window=None, alibi=None, softcap=None,
                    score_mod=None, score_mod_grad=None, mask=None, kv_heads=None, impl=None, variant=None):
    """ops/attention.h's formula with torch ops (autograd differentiates it); dropout's keep mask from reference.py."""
    if variant == "doc-mask":
        mask = lambda b, h, i, j: i // 5 == j // 5  # noqa: E731
    if variant == "softcap-cb":
        softcap = 5.0
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    K, V = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    s = (1 / math.sqrt(d) if scale is None else scale) * q @ K.transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    ip = torch.arange(Nq)[:, None] + (Nk - Nq)
    j = torch.arange(Nk)[None, :]
    if alibi is not None and alibi is not False:
        sl = torch.tensor([ref.alibi_slope(h, H) for h in range(H)] if alibi is True else list(alibi), dtype=q.dtype)
        s = s - sl[None, :, None, None] * (ip - j).abs()
    vis = torch.ones(B, H, Nq, Nk, dtype=torch.bool)
    if causal:
        vis &= j <= ip
    if window is not None:
        L, R = (-1 if w is None else w for w in window)
        if L >= 0:
            vis &= j >= ip - L
        if R >= 0:
            vis &= j <= ip + R
    if mask is not None:
        vis &= torch.tensor([bool(mask(*ix)) for ix in np.ndindex(B, H, Nq, Nk)]).reshape(B, H, Nq, Nk)
    if score_mod is not None:
        class Mod(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.tensor([score_mod(float(x[ix]), *ix) for ix in np.ndindex(*x.shape)],
                                    dtype=x.dtype).reshape(x.shape)

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return g * torch.tensor([score_mod_grad(float(x[ix]), *ix) for ix in np.ndindex(*x.shape)],
                                        dtype=x.dtype).reshape(x.shape)
        s = Mod.apply(s)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    if dropout:
        keep = torch.from_numpy(ref.keep_mask(seed, dropout, B, H, Nq, Nk))
        p = p * keep / (1 - dropout)
    return p @ V


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", VARIANTS, ids=[c[0] for c in VARIANTS])
def test_values_and_gradients_match_plain_torch(case, dtype):
    _, opts, hkv = case
    q, k, v = leaves(dtype, hkv, B=2, H=2, nq=9, nk=11, d=4, seed=1)
    do = torch.randn(2, 2, 9, 4, dtype=dtype, generator=torch.Generator().manual_seed(2))
    y = fgt.attention(q, k, v, **opts)
    g = torch.autograd.grad(y, (q, k, v), do)
    yr = torch_reference(q, k, v, **opts)
    gr = torch.autograd.grad(yr, (q, k, v), do)
    tol = 1e-12 if dtype == torch.float64 else 3e-6
    for name, a, b in [("O", y, yr), ("dq", g[0], gr[0]), ("dk", g[1], gr[1]), ("dv", g[2], gr[2])]:
        assert a.dtype == dtype and a.shape == b.shape
        err = float((a - b).detach().abs().max())
        assert err <= tol * max(1.0, float(b.detach().abs().max())), "%s: %.3e" % (name, err)


@needs_sdpa
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_matches_scaled_dot_product_attention(causal, dtype):
    q, k, v = leaves(dtype, 4, B=2, H=4, nq=37, nk=37, d=16, seed=4)
    do = torch.randn_like(q)
    y = fgt.attention(q, k, v, causal=causal)
    g = torch.autograd.grad(y, (q, k, v), do)
    yr = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    gr = torch.autograd.grad(yr, (q, k, v), do)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip((y,) + g, (yr,) + gr):
        assert float((a - b).detach().abs().max()) <= tol * max(1.0, float(b.detach().abs().max()))


def test_memory_is_shared_and_only_o_and_the_logsumexp_are_saved():
    q, k, v = leaves(torch.float32, 2, B=2, H=2, nq=64, nk=64, d=8)
    y, lse = fgt.attention(q, k, v, causal=True, return_lse=True)
    saved = y.grad_fn.saved_tensors
    # q, k, v themselves (no copies), O (the output's memory), then L as float32 and its remainder
    assert [t.data_ptr() for t in saved[:4]] == [q.data_ptr(), k.data_ptr(), v.data_ptr(), y.data_ptr()]
    assert [(tuple(t.shape), t.dtype) for t in saved[4:]] == [((2, 2, 2, 64), torch.float32)]
    assert torch.equal(lse, saved[4][0].double() + saved[4][1])
    assert lse.dtype == torch.float64 and not lse.requires_grad
    want = torch.logsumexp(torch_reference_scores(q, k, causal=True), -1)
    assert float((lse - want.double()).abs().max()) < 1e-5


def torch_reference_scores(q, k, causal):
    s = q.detach() @ k.detach().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return s


@needs_sdpa
def test_non_contiguous_inputs_are_copied_and_gradients_reach_the_views():
    x = torch.randn(2, 10, 3 * 8, dtype=torch.float64, requires_grad=True)  # nanoGPT's (B, T, 3C) with 2 heads
    q, k, v = (t.view(2, 10, 2, 4).transpose(1, 2) for t in x.split(8, dim=2))
    assert not q.is_contiguous()
    y = fgt.attention(q, k, v, causal=True)
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    q2, k2, v2 = (t.view(2, 10, 2, 4).transpose(1, 2).contiguous() for t in x2.split(8, dim=2))
    F.scaled_dot_product_attention(q2, k2, v2, is_causal=True).sum().backward()
    assert float((x.grad - x2.grad).abs().max()) < 1e-12


def test_only_the_gradients_asked_for_are_computed():
    q, k, v = leaves(torch.float64, 2)
    k.requires_grad_(False)
    v.requires_grad_(False)
    fgt.attention(q, k, v).sum().backward()
    assert q.grad is not None and k.grad is None and v.grad is None


def test_double_backward_is_refused():
    q, k, v = leaves(torch.float64, 2)
    y = fgt.attention(q, k, v)
    # refused at create_graph=True already: a gradient without a graph would make a gradient
    # penalty silently zero
    with pytest.raises(RuntimeError, match="flashgrad.torch.attention: double backward"):
        torch.autograd.grad(y.sum(), q, create_graph=True)
    (g,) = torch.autograd.grad(fgt.attention(q, k, v).sum(), q)  # without it, as before
    assert g.grad_fn is None


def test_dropout_seed_none_follows_torch_manual_seed():
    q, k, v = leaves(torch.float32, 2)
    torch.manual_seed(7)
    a = fgt.attention(q, k, v, dropout=0.5)
    torch.manual_seed(7)
    b = fgt.attention(q, k, v, dropout=0.5)
    torch.manual_seed(8)
    c = fgt.attention(q, k, v, dropout=0.5)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_errors_carry_flashgrad_messages():
    q, k, v = leaves(torch.float32, 2)
    with pytest.raises(TypeError, match="float32 or float64"):
        fgt.attention(q.half(), k.half(), v.half())
    with pytest.raises(TypeError, match="float32 or float64"):
        fgt.attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="k is torch.float64 but q is torch.float32"):
        fgt.attention(q, k.double(), v)
    with pytest.raises(ValueError, match="is on meta"):
        fgt.attention(q.to("meta"), k, v)
    with pytest.raises(ValueError, match="rank 3"):
        fgt.attention(q[0], k, v)
    with pytest.raises(ValueError, match="do not fit"):
        fgt.attention(q, k[..., :2], v)
    with pytest.raises(TypeError, match="torch.Tensor"):
        fgt.attention(q.detach().numpy(), k, v)
    with pytest.raises(ValueError, match="dropout"):
        fgt.attention(q, k, v, dropout=1.5)
    with pytest.raises(ValueError, match="does not fit float32"):
        fgt.attention(q, k, v, softcap=1e39)


def test_a_callback_exception_propagates_from_forward_and_backward():
    q, k, v = leaves(torch.float64, 2)

    def bad_grad(s, b, h, i, j):
        raise ArithmeticError("in the backward")

    y = fgt.attention(q, k, v, score_mod=lambda s, *a: s, score_mod_grad=bad_grad)
    with pytest.raises(ArithmeticError, match="in the backward"):
        y.sum().backward()
    with pytest.raises(ZeroDivisionError):
        fgt.attention(q, k, v, mask=lambda b, h, i, j: 1 // 0)


def test_concurrent_calls_from_threads_agree():
    cases = [leaves(torch.float32, 2, B=2, H=2, nq=40, nk=40, d=16, seed=s) for s in range(4)]

    def run(q, k, v):
        q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
        y = fgt.attention(q, k, v, causal=True, dropout=0.1, seed=1)
        y.square().sum().backward()
        return y.detach(), q.grad, k.grad, v.grad

    want = [run(*c) for c in cases]
    got, errs = [None] * 16, []

    def worker(i):
        try:
            got[i] = run(*cases[i % 4])
        except BaseException as e:  # reported below
            errs.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    for i, r in enumerate(got):
        assert all(torch.equal(a, b) for a, b in zip(r, want[i % 4]))


# ---- nanoGPT's attention block, with the one line swapped ----

class CausalSelfAttention(nn.Module):
    """nanoGPT's (model.py), with `flash` choosing SDPA or flashgrad.torch.attention."""

    def __init__(self, n_embd, n_head, dropout, use_flashgrad):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd, self.dropout = n_head, n_embd, dropout
        self.use_flashgrad = use_flashgrad

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.use_flashgrad:
            y = fgt.attention(q, k, v, causal=True, dropout=self.dropout if self.training else 0)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


@needs_sdpa
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_drops_into_nanogpt_causal_self_attention(dtype):
    torch.manual_seed(0)
    a = CausalSelfAttention(32, 4, 0.0, use_flashgrad=False).to(dtype)
    b = CausalSelfAttention(32, 4, 0.0, use_flashgrad=True).to(dtype)
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 20, 32, dtype=dtype)
    ya, yb = a(x), b(x)
    ya.square().sum().backward()
    yb.square().sum().backward()
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert float((ya - yb).detach().abs().max()) < tol
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert float((pa.grad - pb.grad).abs().max()) < tol * max(1.0, float(pa.grad.abs().max())), n
    b.dropout = 0.1  # and with dropout in training mode it runs
    b.train()
    b(x).sum().backward()


# ---- the call path: threads, cached options, fresh results ----

_THREADS_PROBE = r"""
import os, sys, torch, flashgrad, flashgrad.torch as fgt
torch.set_num_threads(2)
flashgrad.set_threads(2)
on = fgt._sharing if sys.argv[1] == "env" else fgt.share_threads(sys.argv[1] == "1")
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 2, 256, 16, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
y = fgt.attention(q, k, v, causal=True)
y.backward(torch.ones_like(y))
torch.ones(1 << 16).add_(1)  # a parallel op of torch's own
names = [open("/proc/self/task/%s/comm" % t).read().strip() for t in os.listdir("/proc/self/task")]
print(int(on), names.count("flashgrad-pool"), float(y.sum()), float(q.grad.sum()), float(v.grad.sum()))
"""


def test_flashgrad_loops_run_on_torchs_openmp_threads():
    """Importing flashgrad.torch puts flashgrad's parallel loops on torch's OpenMP threads: a fresh
    process that runs attention forward and backward on 2 threads has none of flashgrad's own pool
    threads then (share_threads(False), or FLASHGRAD_TORCH_THREADS=0 in its environment: one), and
    all give the same bits."""
    import subprocess
    import sys

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc/self/task to count threads in")
    out = {}
    for share in ("1", "0", "env"):
        env = dict(os.environ, FLASHGRAD_TORCH_THREADS="0") if share == "env" else None
        r = subprocess.run([sys.executable, "-c", _THREADS_PROBE, share], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, r.stderr
        out[share] = r.stdout.split()
    if out["1"][0] == "0":
        pytest.skip("torch's parallel backend is not OpenMP")
    assert out["1"][1] == "0", "flashgrad started pool threads of its own on torch's OpenMP runtime"
    assert out["0"][:2] == ["0", "1"], "share_threads(False) did not bring flashgrad's pool back: %s" % out["0"]
    assert out["env"][:2] == ["0", "1"], "FLASHGRAD_TORCH_THREADS=0 did not keep flashgrad's pool: %s" % out["env"]
    assert out["1"][2:] == out["0"][2:] == out["env"][2:]


@pytest.mark.parametrize("accumulate", [False, True], ids=["grad", "accumulated"])
def test_results_of_one_call_are_not_overwritten_by_the_next(accumulate):
    """Outputs and gradients are fresh memory on every call: what call 1 returned (its O, the
    gradients autograd handed out or accumulated) is unchanged after call 2 on other inputs."""
    q, k, v = leaves(torch.float32, 2, B=2, H=2, nq=16, nk=16, d=8, seed=1)
    q2, k2, v2 = leaves(torch.float32, 2, B=2, H=2, nq=16, nk=16, d=8, seed=2)
    do = torch.randn_like(q)
    if accumulate:
        y1 = fgt.attention(q, k, v, causal=True)
        y1.backward(do)
        g1 = (q.grad, k.grad, v.grad)
    else:
        y1 = fgt.attention(q, k, v, causal=True)
        g1 = torch.autograd.grad(y1, (q, k, v), do)
    keep = [t.detach().clone() for t in (y1,) + tuple(g1)]
    y2 = fgt.attention(q2, k2, v2, causal=True)
    y2.backward(2 * do)
    g2 = (q2.grad, k2.grad, v2.grad)
    for a, b, name in zip((y1,) + tuple(g1), keep, ("O", "dq", "dk", "dv")):
        assert torch.equal(a.detach(), b), "call 1's %s changed in call 2" % name
    for a, b in zip((y1,) + tuple(g1), (y2,) + g2):
        assert a.data_ptr() != b.data_ptr()
    if accumulate:  # and the next backward into the same leaves adds to the kept gradients
        fgt.attention(q, k, v, causal=True).backward(do)
        for g, kept in zip((q.grad, k.grad, v.grad), keep[1:]):
            assert torch.allclose(g, 2 * kept, rtol=1e-6, atol=1e-6)


def test_cached_options_still_refuse_what_the_checks_refuse():
    """Options are checked once per set of values and kept: equal-looking values the checks tell
    apart (False vs 0.0, True vs 1) are still refused after the accepted one was cached, and
    different values give their own results."""
    q, k, v = leaves(torch.float64, 2)
    a = fgt.attention(q, k, v, dropout=0.0, block_q=2)
    with pytest.raises(TypeError, match="dropout must be a real number"):
        fgt.attention(q, k, v, dropout=False, block_q=2)
    with pytest.raises(TypeError, match="block_q must be an integer"):
        fgt.attention(q, k, v, dropout=0.0, block_q=True)
    with pytest.raises(TypeError, match="window left must be an integer"):
        fgt.attention(q, k, v, window=(True, 1))
    fgt.attention(q, k, v, window=(1, 1))
    with pytest.raises(TypeError, match="window left must be an integer"):
        fgt.attention(q, k, v, window=(True, 1))
    assert torch.equal(fgt.attention(q, k, v, dropout=0.0, block_q=2), a)
    assert not torch.equal(fgt.attention(q, k, v, causal=True, block_q=2), a)
    assert torch.equal(fgt.attention(q, k, v, alibi=[0.3, -0.7]), fgt.attention(q, k, v, alibi=(0.3, -0.7)))


def test_non_contiguous_inputs_equal_their_contiguous_copies_without_sdpa():
    """Views of every kind (a transposed K, a sliced V, an expanded Q) give what their contiguous
    copies give, forward and backward, checked against the numpy reference (no SDPA: this runs on
    any torch flashgrad.torch imports with)."""
    torch.manual_seed(2)
    q = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    kt = torch.randn(2, 3, 4, 7, dtype=torch.float64).transpose(-1, -2)  # (2, 3, 7, 4), not contiguous
    vw = torch.randn(2, 3, 7, 9, dtype=torch.float64)[..., 2:6]         # sliced rows
    qe = torch.randn(1, 3, 6, 4, dtype=torch.float64).expand(2, 3, 6, 4)
    for qq in (q, qe):
        for causal in (False, True):
            ins = [t.clone().requires_grad_() if t.is_contiguous() else t.detach().requires_grad_()
                   for t in (qq, kt, vw)]
            y = fgt.attention(*ins, causal=causal)
            dy = torch.randn_like(y)
            y.backward(dy)
            want = ref.attention(qq.contiguous().numpy(), kt.contiguous().numpy(), vw.contiguous().numpy(),
                                 causal=causal)
            want = want[0] if isinstance(want, tuple) else want
            assert np.abs(y.detach().numpy() - want).max() < 1e-12
            dq, dk, dv = ref.attention_backward(qq.contiguous().numpy(), kt.contiguous().numpy(),
                                                vw.contiguous().numpy(), dy.numpy(), causal=causal)
            for t, w in zip(ins, (dq, dk, dv)):
                assert np.abs(t.grad.numpy() - w).max() < 1e-12
