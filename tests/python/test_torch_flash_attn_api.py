"""flash_attn's API as its authors' own tests exercise it, one test per class of failure their suite
found in flashgrad's drop-ins: window_size as integer tensors, SDPA's RuntimeError for is_causal with
attn_mask, the qkv/kv-packed and varlen packed forms, return_attn_probs' S_dmask with the dropout
pattern, flash_attn_with_kvcache (appending, cache_seqlens, left padding, batch indices, paged
blocks, rotary, ALiBi, windows, GQA), and flash_attn_func as one call for the whole batch. The
references are plain torch. Needs torch >= 2.4; an older torch skips the module with one line."""
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


def rnd(*shape, dtype=D64, grad=True):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def ref_attn(q, k, v, causal=False, window=(-1, -1), softcap=0.0, slopes=None, scale=None, keep=None, p=0.0,
             key_ok=None):
    """flash_attn's math on q (B, Nq, H, d), k, v (B, Nk, Hk, d): bottom-right causal and window,
    softcap, ALiBi -slope·|i + Nk - Nq - j|, dropout by the keep pattern (B, H, Nq, Nk), key_ok (B, Nk)."""
    B, Nq, H, d = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    kk, vv = k.repeat_interleave(H // Hk, 2), v.repeat_interleave(H // Hk, 2)
    s = torch.einsum("bihd,bjhd->bhij", q, kk) * (scale or 1 / math.sqrt(d))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Nq).view(-1, 1) + Nk - Nq
    j = torch.arange(Nk).view(1, -1)
    if slopes is not None:
        s = s - slopes.to(s.dtype).view(-1, H, 1, 1) * (i - j).abs()
    ok = torch.ones(Nq, Nk, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if window[0] >= 0:
        ok &= j >= i - window[0]
    if window[1] >= 0:
        ok &= j <= i + window[1]
    ok = ok.view(1, 1, Nq, Nk)
    if key_ok is not None:
        ok = ok & key_ok.view(B, 1, 1, Nk)
    s = s.masked_fill(~ok, -math.inf)
    pr = torch.softmax(s, -1).nan_to_num(0.0)
    if keep is not None:
        pr = pr * keep / (1 - p)
    return torch.einsum("bhij,bjhd->bihd", pr, vv)


def close(a, b, tol, what):
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol, "%s: max error %.3g > %.3g" % (what, err, tol)


# ---- window_size as the authors pass it -------------------------------------------------------------

@pytest.mark.parametrize("ws", [torch.tensor([3, 1]), (torch.tensor(3), torch.tensor(1)), (3, 1),
                                torch.tensor([3, 1], dtype=torch.int32)], ids=["tensor2", "tensors", "ints", "int32"])
def test_window_size_accepts_integer_tensors(ws):
    q, k, v = rnd(2, 9, 2, 4), rnd(2, 9, 2, 4), rnd(2, 9, 2, 4)
    close(fgt.flash_attn_func(q, k, v, window_size=ws), ref_attn(q, k, v, window=(3, 1)), 1e-12, "window")
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    out = fgt.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 5, 5, window_size=ws)
    close(out[:4], ref_attn(q[:1, :4], k[:1, :4], v[:1, :4], window=(3, 1))[0], 1e-12, "varlen window")


@pytest.mark.parametrize("ws", [torch.tensor([1.5, 2.0]), torch.tensor([1, 2, 3]), (True, 1), "ab"])
def test_window_size_refuses_non_integers(ws):
    q = rnd(1, 4, 1, 4)
    with pytest.raises(TypeError, match="window_size"):
        fgt.flash_attn_func(q, q, q, window_size=ws)


def test_sdpa_causal_with_mask_raises_pytorchs_runtime_error():
    q = rnd(1, 2, 4, 8)
    m = torch.ones(4, 4, dtype=torch.bool)
    msgs = []
    for f in (F.scaled_dot_product_attention, fgt.scaled_dot_product_attention):
        with pytest.raises(RuntimeError) as e:
            f(q, q, q, attn_mask=m, is_causal=True)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


# ---- packed forms ------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_packed_forms_equal_the_unpacked_call_with_gradients_to_the_pack(causal):
    torch.manual_seed(1)
    qkv = rnd(2, 7, 3, 4, 8)
    want = ref_attn(*qkv.unbind(2), causal=causal)
    got = fgt.flash_attn_qkvpacked_func(qkv, causal=causal)
    g = torch.randn_like(got)
    (d1,) = torch.autograd.grad((got * g).sum(), qkv)
    (d2,) = torch.autograd.grad((want * g).sum(), qkv)
    close(got, want, 1e-12, "qkvpacked out")
    close(d1, d2, 1e-11, "qkvpacked dqkv")

    q, kv = rnd(2, 5, 4, 8), rnd(2, 7, 2, 2, 8)
    got = fgt.flash_attn_kvpacked_func(q, kv, causal=causal)
    want = ref_attn(q, *kv.unbind(2), causal=causal)
    (d1,) = torch.autograd.grad((got * g[:, :5]).sum(), kv)
    (d2,) = torch.autograd.grad((want * g[:, :5]).sum(), kv)
    close(got, want, 1e-12, "kvpacked out")
    close(d1, d2, 1e-11, "kvpacked dkv")

    lens = [3, 0, 6, 2]
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    T = sum(lens)
    qkv = rnd(T, 3, 4, 8)
    got = fgt.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=causal)
    parts = [ref_attn(*(x[a:b][None] for x in qkv.unbind(1)), causal=causal)[0] for a, b in zip(cu[:-1], cu[1:])]
    close(got, torch.cat(parts), 1e-12, "varlen qkvpacked")
    q, kv = rnd(T, 4, 8), rnd(T, 2, 2, 8)
    got = fgt.flash_attn_varlen_kvpacked_func(q, kv, cu, cu, max(lens), max(lens), causal=causal)
    parts = [ref_attn(q[a:b][None], kv[a:b, 0][None], kv[a:b, 1][None], causal=causal)[0]
             for a, b in zip(cu[:-1], cu[1:])]
    close(got, torch.cat(parts), 1e-12, "varlen kvpacked")
    assert torch.autograd.gradcheck(lambda x: fgt.flash_attn_varlen_qkvpacked_func(x, cu, max(lens), causal=causal),
                                    (qkv[:, :, :1, :2].detach().requires_grad_(),))


# ---- S_dmask: the weights and the dropout pattern ---------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window_size=(2, 1)), dict(alibi="h"),
                                dict(alibi="bh", causal=True), dict(softcap=2.0)])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_s_dmask_gives_the_weights_and_the_dropout_the_output_used(kw, p):
    torch.manual_seed(5)
    kw = dict(kw)
    B, Nq, Nk, H, Hk = 2, 6, 9, 4, 2
    if kw.get("alibi") == "h":
        kw["alibi_slopes"] = torch.rand(H)
    elif kw.get("alibi") == "bh":
        kw["alibi_slopes"] = torch.rand(B, H)
    kw.pop("alibi", None)
    q, k, v = rnd(B, Nq, H, 8, grad=False), rnd(B, Nk, Hk, 8, grad=False), rnd(B, Nk, Hk, 8, grad=False)
    out, lse, sd = fgt.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True, **kw)
    assert sd.shape == (B, H, Nq, Nk)
    keep = sd >= 0
    # |S_dmask| normalized by its row sum is the softmax; its row max is 1 wherever a key is seen
    w = sd.abs()
    rs = w.sum(-1, keepdim=True)
    pr = torch.where(rs > 0, w / rs, torch.zeros_like(w))
    ref_kw = dict(causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)),
                  softcap=kw.get("softcap", 0.0), slopes=kw.get("alibi_slopes"))
    want = ref_attn(q, k, v, keep=keep if p else None, p=p, **ref_kw)
    close(out, want, 1e-12, "output with S_dmask's dropout pattern")
    seen = rs.squeeze(-1) > 0
    assert torch.all(w.amax(-1)[seen] == 1) and lse.shape == (B, H, Nq)
    dense = torch.einsum("bhij,bjhd->bihd", pr, v.repeat_interleave(H // Hk, 2))
    close(dense, ref_attn(q, k, v, **ref_kw), 1e-12, "softmax from S_dmask")
    if p:
        frac = (sd < 0).sum().item() / max((w > 0).sum().item(), 1)
        assert abs(frac - p) < 0.1, frac


def test_s_dmask_dropout_fraction_on_a_large_problem():
    q = rnd(2, 128, 4, 8, grad=False)
    _, _, sd = fgt.flash_attn_func(q, q, q, dropout_p=0.17, return_attn_probs=True)
    assert abs((sd < 0).double().mean().item() - 0.17) <= 0.01
    lens = [50, 78]
    cu = torch.tensor([0, 50, 128], dtype=torch.int32)
    x = q[0]
    out, _, sd = fgt.flash_attn_varlen_func(x, x, x, cu, cu, 78, 78, dropout_p=0.17, return_attn_probs=True)
    assert sd.shape == (2, 4, 78, 78)
    for s, n in enumerate(lens):
        a = int(cu[s])
        keep = sd[s:s + 1, :, :n, :n] >= 0
        want = ref_attn(x[a:a + n][None], x[a:a + n][None], x[a:a + n][None], keep=keep, p=0.17)[0]
        close(out[a:a + n], want, 1e-12, "varlen dropout pattern, document %d" % s)


# ---- the KV cache ------------------------------------------------------------------------------------

def rotate(x, cos, sin, pos, interleaved):
    ro = 2 * cos.shape[1]
    out = x.clone()
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            c, s = cos[pos[b, t]], sin[pos[b, t]]
            for m in range(ro // 2):
                a, z = (2 * m, 2 * m + 1) if interleaved else (m, m + ro // 2)
                x1, x2 = x[b, t, :, a], x[b, t, :, z]
                out[b, t, :, a] = x1 * c[m] - x2 * s[m]
                out[b, t, :, z] = x1 * s[m] + x2 * c[m]
    return out


KV_CASES = [dict(), dict(causal=True), dict(causal=True, new=3), dict(new=2, window=(4, 0)),
            dict(new=3, causal=True, rotary=True), dict(new=3, causal=True, rotary=True, interleaved=False),
            dict(new=1, rotary=True), dict(leftpad=True, causal=True, new=2), dict(batch_idx=True, new=2, causal=True),
            dict(paged=True, new=2, causal=True), dict(alibi=True, causal=True, new=2), dict(softcap=3.0, new=1),
            dict(gqa=True, causal=True, new=3)]


@pytest.mark.parametrize("case", range(len(KV_CASES)))
def test_kvcache_appends_and_attends_like_the_reference(case):
    kw = KV_CASES[case]
    torch.manual_seed(case)
    B, S, H, d = 2, 24, 4, 8
    Hk = 2 if kw.get("gqa") else H
    new = kw.get("new", 0)
    Sq = max(new, 1) if new else 3
    causal, window = kw.get("causal", False), kw.get("window", (-1, -1))
    q = rnd(B, Sq, H, d, grad=False)
    Bc = 3 if kw.get("batch_idx") else B
    kc, vc = rnd(Bc, S, Hk, d, grad=False), rnd(Bc, S, Hk, d, grad=False)
    seqlens = torch.tensor([5, 11], dtype=torch.int32)
    k = v = None
    if new:
        k, v = rnd(B, new, Hk, d, grad=False), rnd(B, new, Hk, d, grad=False)
    left = torch.tensor([2, 4], dtype=torch.int32) if kw.get("leftpad") else None
    idx = torch.tensor([2, 0], dtype=torch.int32) if kw.get("batch_idx") else None
    slopes = torch.rand(H) * 0.3 if kw.get("alibi") else None
    cos = sin = None
    if kw.get("rotary"):
        ang = torch.rand(S, 2, dtype=D64) * 2 * math.pi
        cos, sin = torch.cos(ang), torch.sin(ang)
    inter = kw.get("interleaved", True)
    # the reference: update a copy of the cache by hand, then plain attention with a key mask
    rows = idx.long() if idx is not None else torch.arange(B)
    kref, vref = kc[rows].clone(), vc[rows].clone()
    pos_k = seqlens.long().view(B, 1) + torch.arange(new).view(1, -1)
    if new:
        kn = rotate(k, cos, sin, pos_k, inter) if cos is not None else k
        for b in range(B):
            kref[b, seqlens[b]:seqlens[b] + new] = kn[b]
            vref[b, seqlens[b]:seqlens[b] + new] = v[b]
    if cos is not None:
        pos_q = seqlens.long().view(B, 1) + (torch.arange(Sq).view(1, -1) if (causal or window != (-1, -1))
                                             else torch.zeros(1, Sq, dtype=torch.long))
        qr = rotate(q, cos, sin, pos_q, inter)
    else:
        qr = q
    outs = []
    for b in range(B):
        lo = int(left[b]) if left is not None else 0
        hi = int(seqlens[b]) + new
        outs.append(ref_attn(qr[b:b + 1], kref[b:b + 1, lo:hi], vref[b:b + 1, lo:hi], causal=causal, window=window,
                             softcap=kw.get("softcap", 0.0), slopes=slopes)[0])
    want = torch.stack(outs)
    if kw.get("paged"):
        # pages of 8 tokens, rows' pages scattered over a shared pool
        pbs, npg = 8, S // 8
        perm = torch.randperm(B * npg)
        pool_k = torch.zeros(B * npg, pbs, Hk, d, dtype=D64)
        pool_v = torch.zeros_like(pool_k)
        table = perm.view(B, npg).to(torch.int32)
        for b in range(B):
            for pg in range(npg):
                pool_k[table[b, pg]] = kc[b, pg * pbs:(pg + 1) * pbs]
                pool_v[table[b, pg]] = vc[b, pg * pbs:(pg + 1) * pbs]
        out = fgt.flash_attn_with_kvcache(q, pool_k, pool_v, k, v, cache_seqlens=seqlens, block_table=table,
                                          causal=causal, window_size=window)
        got_k = pool_k[table.long()].reshape(B, S, Hk, d)
        close(got_k, kref, 0, "paged cache after the append")
    else:
        out, lse = fgt.flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens,
                                               cache_batch_idx=idx, cache_leftpad=left, causal=causal,
                                               window_size=window, softcap=kw.get("softcap", 0.0),
                                               rotary_interleaved=inter, alibi_slopes=slopes,
                                               return_softmax_lse=True)
        assert lse.shape == (B, H, Sq) and lse.dtype == torch.float32
        close(kc[rows], kref, 1e-15, "cache after the append")
        close(vc[rows], vref, 0, "v cache after the append")
    close(out, want, 1e-12, "kvcache %s" % kw)


def test_kvcache_decoding_loop_equals_full_causal_attention():
    """nanochat's engine: prefill, then one token at a time, the cache growing by cache_seqlens."""
    torch.manual_seed(9)
    B, T, H, d = 2, 12, 2, 8
    q, k, v = rnd(B, T, H, d, grad=False), rnd(B, T, H, d, grad=False), rnd(B, T, H, d, grad=False)
    full = fgt.flash_attn_func(q, k, v, causal=True)
    kc, vc = torch.zeros(B, 16, H, d, dtype=D64), torch.zeros(B, 16, H, d, dtype=D64)
    pos = torch.zeros(B, dtype=torch.int32)
    outs = [fgt.flash_attn_with_kvcache(q[:, :5], kc, vc, k[:, :5], v[:, :5], cache_seqlens=pos, causal=True)]
    pos += 5
    for t in range(5, T):
        outs.append(fgt.flash_attn_with_kvcache(q[:, t:t + 1], kc, vc, k[:, t:t + 1], v[:, t:t + 1],
                                                cache_seqlens=pos, causal=True))
        pos += 1
    close(torch.cat(outs, 1), full, 1e-12, "decode loop")


def test_kvcache_errors():
    q = rnd(1, 1, 2, 4, grad=False)
    kc = torch.zeros(1, 4, 2, 4, dtype=D64)
    with pytest.raises(ValueError, match="cache_seqlens"):
        fgt.flash_attn_with_kvcache(q, kc, kc.clone(), rnd(1, 2, 2, 4, grad=False), rnd(1, 2, 2, 4, grad=False),
                                    cache_seqlens=3)
    pages = torch.zeros(4, 8, 2, 4, dtype=D64)
    table = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="block_table"):
        fgt.flash_attn_with_kvcache(q, pages, pages.clone(), cache_seqlens=9, block_table=table)
    assert fgt.flash_attn_with_kvcache(q, pages, pages.clone(), cache_seqlens=8, block_table=table).shape == q.shape
    with pytest.raises(ValueError, match="both k and v"):
        fgt.flash_attn_with_kvcache(q, kc, kc.clone(), rnd(1, 1, 2, 4, grad=False))


# ---- one call for the whole batch -----------------------------------------------------------------

def test_flash_attn_func_is_one_kernel_call_for_the_whole_batch(monkeypatch):
    calls = []
    real = ops.attn_fwd

    def counting(*a):
        calls.append(a[0].shape)
        return real(*a)
    monkeypatch.setattr(ops, "attn_fwd", counting)
    q = rnd(60, 23, 2, 8, dtype=torch.float32)
    out = fgt.flash_attn_func(q, q, q, causal=True)
    out.sum().backward()
    assert calls == [(60, 2, 23, 8)]


def test_varlen_with_block_table_reads_the_pages():
    torch.manual_seed(4)
    lens_q, lens_k, pbs = [3, 5], [10, 7], 4
    cu_q = torch.tensor([0, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 10, 17], dtype=torch.int32)
    q = rnd(8, 2, 4)
    pages_k, pages_v = rnd(7, pbs, 1, 4), rnd(7, pbs, 1, 4)
    table = torch.tensor([[5, 0, 3], [6, 2, 1]], dtype=torch.int32)
    got = fgt.flash_attn_varlen_func(q, pages_k, pages_v, cu_q, cu_k, 5, 10, causal=True, block_table=table)
    outs = []
    for b in range(2):
        kb = torch.cat([pages_k[int(p)] for p in table[b]])[:lens_k[b]]
        vb = torch.cat([pages_v[int(p)] for p in table[b]])[:lens_k[b]]
        outs.append(ref_attn(q[cu_q[b]:cu_q[b + 1]][None], kb[None], vb[None], causal=True)[0])
    want = torch.cat(outs)
    close(got, want, 1e-12, "paged varlen")
    g = torch.randn_like(got)
    d1 = torch.autograd.grad((got * g).sum(), (q, pages_k, pages_v))
    d2 = torch.autograd.grad((want * g).sum(), (q, pages_k, pages_v))
    for a, b in zip(d1, d2):
        close(a, b, 1e-11, "paged varlen grad")
    with pytest.raises(RuntimeError, match="block_table"):
        fgt.flash_attn_varlen_func(q, pages_k, pages_v, cu_q, torch.tensor([0, 13, 20], dtype=torch.int32), 5, 13,
                                   block_table=table[:, :2])
