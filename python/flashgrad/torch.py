"""flashgrad.torch — flashgrad's attention as a torch.autograd.Function on CPU tensors.

    import flashgrad.torch as fgt
    y = fgt.attention(q, k, v, causal=True)        # q (B, H, Nq, d); k, v (B, H_kv, Nk, d)
    y.sum().backward()

The forward runs flashgrad's kernels straight on the tensors' memory (contiguous inputs are not
copied; others are made contiguous first) and saves only O and the logsumexp (with q, k, v, which
autograd keeps anyway); the backward recomputes the attention weights from them, as fg_attention's
backward does. The options are flashgrad.attention's; in addition seed=None (the default here)
draws the dropout seed from torch's generator, so torch.manual_seed makes runs repeat. Double
backward is not supported. In nanoGPT's CausalSelfAttention,

    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)

becomes

    y = flashgrad.torch.attention(q, k, v, causal=True, dropout=p)
"""
import ctypes

import torch
from torch.autograd.function import once_differentiable

from . import _attention as _A
from . import _lib
from ._lib import lib

__all__ = ["attention"]

_DT = {torch.float32: _lib.F32, torch.float64: _lib.F64}


def _check(t, name, dtype=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError("attention: %s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("attention: %s is on %s; flashgrad.torch works on CPU tensors" % (name, t.device))
    if t.dtype not in _DT:
        raise TypeError("attention: %s has dtype %s; flashgrad takes float32 or float64 tensors" % (name, t.dtype))
    if dtype is not None and t.dtype != dtype:
        raise TypeError("attention: %s is %s but q is %s" % (name, t.dtype, dtype))
    if t.layout != torch.strided:
        raise TypeError("attention: %s has layout %s; flashgrad takes dense tensors" % (name, t.layout))
    if t.is_complex() or t.is_quantized:
        raise TypeError("attention: %s must be a real float tensor" % name)
    return t if t.is_contiguous() else t.contiguous()


def _shapes(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError("attention: %s must be (B, H, N, d), got rank %d %s" % (name, t.dim(),
                                                                                   _A._shape_str(t.shape)))
    B, H, _, d = q.shape
    Hkv = k.shape[1]
    if (k.shape[0] != B or v.shape[0] != B or v.shape[1] != Hkv or (H != 0 if Hkv == 0 else H % Hkv != 0) or
            k.shape[3] != d or v.shape[3] != d or k.shape[2] != v.shape[2]):
        raise ValueError("attention: q %s, k %s, v %s do not fit: need q (B, H, Nq, d), k and v (B, H_kv, Nk, d) with "
                         "H a multiple of H_kv" % (_A._shape_str(q.shape), _A._shape_str(k.shape),
                                                   _A._shape_str(v.shape)))


class AttentionFunction(torch.autograd.Function):
    """forward(q, k, v, opts, want_lse) -> O, or (O, L) with want_lse: L the float64 logsumexp (B, H,
    Nq), not differentiable. opts is a flashgrad._attention._Options. Saved: q, k, v, O and L (for
    float32 flash as float32 L and its rounding remainder)."""

    @staticmethod
    def forward(ctx, q, k, v, opts, want_lse):
        B, H, Nq, d = q.shape
        dt = _DT[q.dtype]
        a = opts.args(dt, B, H, k.shape[1], Nq, k.shape[2], d)
        o = torch.empty((B, H, Nq, d), dtype=q.dtype)
        lse = torch.empty((B, H, Nq), dtype=q.dtype)
        lo = torch.empty((B, H, Nq), dtype=torch.float32) if dt == _lib.F32 and opts.impl == _lib.FLASH else None
        _A._call(opts, lib.fgpy_attn_forward, ctypes.byref(a), o.data_ptr(), lse.data_ptr(),
                 lo.data_ptr() if lo is not None else None, q.data_ptr(), k.data_ptr(), v.data_ptr())
        ctx.opts, ctx.args, ctx.has_lo = opts, a, lo is not None
        if lo is None:
            ctx.save_for_backward(q, k, v, o, lse)
        else:
            ctx.save_for_backward(q, k, v, o, lse, lo)
        if not want_lse:
            return o
        L = lse.double()
        if lo is not None:
            L += lo
        ctx.mark_non_differentiable(L)
        return o, L

    @staticmethod
    @once_differentiable
    def backward(ctx, do, *_dL):
        saved = ctx.saved_tensors
        q, k, v, o, lse = saved[:5]
        lo = saved[5] if ctx.has_lo else None
        wq, wk, wv = ctx.needs_input_grad[:3]
        if do is None or not (wq or wk or wv):
            return (torch.zeros_like(q) if wq else None, torch.zeros_like(k) if wk else None,
                    torch.zeros_like(v) if wv else None, None, None)
        # set to zero by the C call (the kernels add into them): no fill of torch's in between
        dq = torch.empty_like(q) if wq else None
        dk = torch.empty_like(k) if wk else None
        dv = torch.empty_like(v) if wv else None
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        if not do.is_contiguous():
            do = do.contiguous()
        _A._call(ctx.opts, lib.fgpy_attn_backward, ctypes.byref(ctx.args), 1, dq.data_ptr() if wq else None,
                 dk.data_ptr() if wk else None, dv.data_ptr() if wv else None, do.data_ptr(), q.data_ptr(),
                 k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), lo.data_ptr() if lo is not None else None)
        return dq, dk, dv, None, None


def attention(q, k, v, *, causal=False, scale=None, dropout=0.0, seed=None, impl="flash", kv_heads=None, window=None,
              alibi=False, softcap=None, block_q=None, block_k=None, score_mod=None, score_mod_grad=None, mask=None,
              variant=None, return_lse=False):
    """Attention on CPU tensors with autograd; the options of flashgrad.attention. Returns O (B, H,
    Nq, d), or (O, lse) with return_lse (lse float64, no gradient). seed=None: drawn from torch's
    generator when dropout > 0 (give the same seed to repeat a forward exactly)."""
    if seed is None:
        seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64)) if dropout else 0
    opts = _A._Options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k,
                       score_mod, score_mod_grad, mask, variant)
    q = _check(q, "q")
    k = _check(k, "k", q.dtype)
    v = _check(v, "v", q.dtype)
    _shapes(q, k, v)
    return AttentionFunction.apply(q, k, v, opts, bool(return_lse))
