"""_torch_ops.py — flashgrad's attention as torch.library custom ops, and the drop-in front ends
scaled_dot_product_attention, flash_attn_func and flash_attn_varlen_func (flashgrad.torch exports them).

The ops (namespace "flashgrad") take tensors already in the kernels' dtype (float32, or float64; on
CUDA also bfloat16) and return fresh tensors on the inputs' device; the front ends do the rest:
SDPA's and flash_attn's argument rules, layouts and broadcasting, and the dtype (on the CPU float16
and bfloat16 inputs are computed in float32 and the result cast back, through ordinary
differentiable casts; on CUDA bfloat16 runs flashgrad's bf16 kernels and float16 is refused). The
dense ops run on CUDA tensors in place (python/flashgrad/_torch_device.py: the synchronizations
around each call); the varlen ones and tensor masks are CPU only. Each op has a fake
implementation (shapes only) and its backward registered with register_autograd, so
torch.compile(fullgraph=True) traces through them and torch.library.opcheck passes. The backward ops are not differentiable: a double backward
raises an error naming the op.

  flashgrad::attn_fwd(q, k, v, mask, slopes, seed, ...) -> (o, lse)   q (B, H, Nq, d), k, v (B, H_kv, Nk, d)
  flashgrad::attn_bwd(do, q, k, v, o, lse, ...)        -> (dq, dk, dv)
  flashgrad::varlen_fwd(q, k, v, cu_q, cu_k, ...)      -> (o, lse)   q (Tq, H, d), k, v (Tk, H_kv, d)
  flashgrad::varlen_bwd(...)                           -> (dq, dk, dv)

lse is (2, B, H, Nq) (dense) or (2, H, Tq) (varlen): the logsumexp, then what rounding it to float32
lost (zeros in float64 and bfloat16); the backward reads both. It is float32 for bfloat16 inputs.
"""
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from . import _torch_device as _D
from ._lib import lib

_DT = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.bfloat16: _lib.BF16}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_NO_DOUBLE = ("%s: double backward (differentiating the gradient, e.g. after backward(create_graph=True)) "
              "is not supported")


def _args(q, H_kv, Nq, Nk, scale, causal, dropout_p, seed, wl, wr, softcap, slopes, B=None, H=None, d=None):
    a = _lib.Args(dtype=_DT[q.dtype], device=_lib.CUDA if q.is_cuda else _lib.CPU, impl=_lib.FLASH,
                  B=q.shape[0] if B is None else B, H=q.shape[1] if H is None else H, H_kv=H_kv, Nq=Nq, Nk=Nk,
                  d=q.shape[-1] if d is None else d,
                  scale=scale, causal=causal, dropout=dropout_p, seed=int(seed) if seed is not None else 0,
                  softcap=softcap)
    if wl >= 0 or wr >= 0:
        a.window, a.window_left, a.window_right = 1, wl, wr
    if slopes is not None:
        a.alibi = 1
        if slopes.dim() == 1:
            a.alibi_slopes = slopes.data_ptr()
    return a


def _seed(seed):
    return int(seed.item()) % (1 << 64) if seed is not None else 0


def _c(t):
    return t if t is None or t.is_contiguous() else t.contiguous()


def _set_mask(a, mask):
    """a's tensor mask from mask, a (B, H, Nq, Nk) view (any strides, broadcast ones 0)."""
    if mask is None:
        return
    if mask.dtype == torch.bool:
        a.mask_kind = 1
    elif mask.dtype == torch.float32:
        a.mask_kind = 2
    elif mask.dtype == torch.float64:
        a.mask_kind = 3
    else:
        raise TypeError("flashgrad attention: mask dtype %s (bool, float32 or float64)" % mask.dtype)
    a.mask_data = mask.data_ptr()
    for i, s in enumerate(mask.stride()):
        a.mask_stride[i] = s if mask.shape[i] > 1 else 0


def _lse_shape(B, H, N):
    return (2, B, H, N)


def _lse_dtype(dt):
    return torch.float32 if dt == torch.bfloat16 else dt


def _run(q, fn, *args):
    """The C call fn(*args) on q's device (CUDA: inside the synchronizations of _torch_device.call)."""
    return _D.call(q.device, fn, *args) if q.is_cuda else fn(*args)


# ---- dense: (B, H, N, d) ------------------------------------------------------------------------

@torch.library.custom_op("flashgrad::attn_fwd", mutates_args=())
def attn_fwd(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], slopes: Optional[Tensor],
             seed: Optional[Tensor], scale: float, causal: int, dropout_p: float, window_left: int,
             window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    q, k, v, slopes = _c(q), _c(k), _c(v), _c(slopes)
    B, H, Nq, d = q.shape
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_lse_shape(B, H, Nq), dtype=_lse_dtype(q.dtype), device=q.device)
    a = _args(q, k.shape[1], Nq, k.shape[2], scale, causal, dropout_p, _seed(seed), window_left, window_right,
              softcap, slopes)
    _set_mask(a, mask)
    L = lse.data_ptr()
    st = _run(q, lib.fgpy_attn_forward, a, o.data_ptr(), L, L + lse[1].numel() * lse.element_size(), q.data_ptr(),
              k.data_ptr(), v.data_ptr())
    if st:
        _lib.raise_status(st)
    return o, lse


@attn_fwd.register_fake
def _attn_fwd_fake(q, k, v, mask, slopes, seed, scale, causal, dropout_p, window_left, window_right, softcap):
    B, H, Nq, d = q.shape
    return q.new_empty(q.shape), q.new_empty(_lse_shape(B, H, Nq), dtype=_lse_dtype(q.dtype))


@torch.library.custom_op("flashgrad::attn_bwd", mutates_args=())
def attn_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, mask: Optional[Tensor],
             slopes: Optional[Tensor], seed: Optional[Tensor], scale: float, causal: int, dropout_p: float,
             window_left: int, window_right: int, softcap: float) -> Tuple[Tensor, Tensor, Tensor]:
    do, q, k, v, o, lse, slopes = _c(do.to(q.dtype)), _c(q), _c(k), _c(v), _c(o), _c(lse), _c(slopes)
    B, H, Nq, d = q.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    a = _args(q, k.shape[1], Nq, k.shape[2], scale, causal, dropout_p, _seed(seed), window_left, window_right,
              softcap, slopes)
    _set_mask(a, mask)
    L = lse.data_ptr()
    st = _run(q, lib.fgpy_attn_backward, a, 1, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), do.data_ptr(),
              q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), L, L + lse[1].numel() * lse.element_size())
    if st:
        _lib.raise_status(st)
    return dq, dk, dv


@attn_bwd.register_fake
def _attn_bwd_fake(do, q, k, v, o, lse, mask, slopes, seed, scale, causal, dropout_p, window_left, window_right,
                   softcap):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_DENSE_OPTS = ("scale", "causal", "dropout_p", "window_left", "window_right", "softcap")


def _attn_setup(ctx, inputs, output):
    q, k, v, mask, slopes, seed = inputs[:6]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, mask, slopes, seed)
    ctx.opts = inputs[6:]


def _attn_backward(ctx, do, dlse):
    q, k, v, o, lse, mask, slopes, seed = ctx.saved_tensors
    dq, dk, dv = attn_bwd(do, q, k, v, o, lse, mask, slopes, seed, *ctx.opts)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


def _bwd_setup(ctx, inputs, output):
    pass


def _no_double(name):
    def backward(ctx, *grads):
        raise RuntimeError(_NO_DOUBLE % name)
    return backward


torch.library.register_autograd("flashgrad::attn_fwd", _attn_backward, setup_context=_attn_setup)
torch.library.register_autograd("flashgrad::attn_bwd", _no_double("flashgrad::attn_bwd (the backward of "
                                                                  "flashgrad attention)"),
                                setup_context=_bwd_setup)


# ---- varlen: (T, H, d) packed --------------------------------------------------------------------

def _varlen_call(fn, q, k, cu_q, cu_k, max_q, max_k, slopes, seed, scale, causal, dropout_p, wl, wr, softcap):
    H, d = q.shape[1], q.shape[2]
    nseq = cu_q.shape[0] - 1
    a = _args(q, k.shape[1], max_q, max_k, scale, causal, dropout_p, _seed(seed), wl, wr, softcap, slopes, B=1, H=H,
              d=d)
    per_doc = slopes.data_ptr() if slopes is not None and slopes.dim() == 2 else None
    return a, nseq, per_doc


@torch.library.custom_op("flashgrad::varlen_fwd", mutates_args=())
def varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, slopes: Optional[Tensor],
               seed: Optional[Tensor], max_q: int, max_k: int, scale: float, causal: int, dropout_p: float,
               window_left: int, window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    q, k, v, cu_q, cu_k, slopes = _c(q), _c(k), _c(v), _c(cu_q), _c(cu_k), _c(slopes)
    Tq, H, d = q.shape
    o = torch.empty(q.shape, dtype=q.dtype)
    lse = torch.empty((2, H, Tq), dtype=q.dtype)
    a, nseq, per_doc = _varlen_call(None, q, k, cu_q, cu_k, max_q, max_k, slopes, seed, scale, causal, dropout_p,
                                    window_left, window_right, softcap)
    L = lse.data_ptr()
    st = lib.fgpy_attn_varlen_forward(a, cu_q.data_ptr(), cu_k.data_ptr(), nseq, Tq, k.shape[0], per_doc,
                                      o.data_ptr(), L, L + lse[1].numel() * lse.element_size(), q.data_ptr(),
                                      k.data_ptr(), v.data_ptr())
    if st:
        _lib.raise_status(st)
    return o, lse


@varlen_fwd.register_fake
def _varlen_fwd_fake(q, k, v, cu_q, cu_k, slopes, seed, max_q, max_k, scale, causal, dropout_p, window_left,
                     window_right, softcap):
    Tq, H, d = q.shape
    return q.new_empty(q.shape), q.new_empty((2, H, Tq))


@torch.library.custom_op("flashgrad::varlen_bwd", mutates_args=())
def varlen_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, cu_q: Tensor, cu_k: Tensor,
               slopes: Optional[Tensor], seed: Optional[Tensor], max_q: int, max_k: int, scale: float, causal: int,
               dropout_p: float, window_left: int, window_right: int,
               softcap: float) -> Tuple[Tensor, Tensor, Tensor]:
    do, q, k, v, o, lse = _c(do.to(q.dtype)), _c(q), _c(k), _c(v), _c(o), _c(lse)
    cu_q, cu_k, slopes = _c(cu_q), _c(cu_k), _c(slopes)
    Tq = q.shape[0]
    dq, dk, dv = torch.empty(q.shape, dtype=q.dtype), torch.empty(k.shape, dtype=q.dtype), \
        torch.empty(v.shape, dtype=q.dtype)
    a, nseq, per_doc = _varlen_call(None, q, k, cu_q, cu_k, max_q, max_k, slopes, seed, scale, causal, dropout_p,
                                    window_left, window_right, softcap)
    L = lse.data_ptr()
    st = lib.fgpy_attn_varlen_backward(a, cu_q.data_ptr(), cu_k.data_ptr(), nseq, Tq, k.shape[0], per_doc, 1,
                                       dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), do.data_ptr(), q.data_ptr(),
                                       k.data_ptr(), v.data_ptr(), o.data_ptr(), L,
                                       L + lse[1].numel() * lse.element_size())
    if st:
        _lib.raise_status(st)
    return dq, dk, dv


@varlen_bwd.register_fake
def _varlen_bwd_fake(do, q, k, v, o, lse, cu_q, cu_k, slopes, seed, max_q, max_k, scale, causal, dropout_p,
                     window_left, window_right, softcap):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, slopes, seed = inputs[:7]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, slopes, seed)
    ctx.opts = inputs[7:]


def _varlen_backward(ctx, do, dlse):
    q, k, v, o, lse, cu_q, cu_k, slopes, seed = ctx.saved_tensors
    dq, dk, dv = varlen_bwd(do, q, k, v, o, lse, cu_q, cu_k, slopes, seed, *ctx.opts)
    return (dq, dk, dv) + (None,) * 12


torch.library.register_autograd("flashgrad::varlen_fwd", _varlen_backward, setup_context=_varlen_setup)
torch.library.register_autograd("flashgrad::varlen_bwd", _no_double("flashgrad::varlen_bwd (the backward of "
                                                                    "flashgrad varlen attention)"),
                                setup_context=_bwd_setup)


# ---- front ends ----------------------------------------------------------------------------------

def _shp(t):
    return "(" + ", ".join(str(int(s)) for s in t.shape) + ")"


def _tensor(t, api, name, cuda_ok=False):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: %s must be a torch.Tensor, got %s" % (api, name, type(t).__name__))
    if t.device.type != "cpu" and not (cuda_ok and t.device.type == "cuda"):
        raise ValueError("%s: %s is on %s; flashgrad runs %s on CPU tensors%s" %
                         (api, name, t.device, api.split(".")[-1],
                          " only" if t.device.type == "cuda" else ""))
    if t.layout != torch.strided:
        raise TypeError("%s: %s has layout %s; flashgrad takes dense tensors" % (api, name, t.layout))


def _qkv(api, q, k, v, cuda_ok=False):
    """The dtype the kernels compute in, and the CUDA device of q, k, v (None: the CPU); on CUDA
    (cuda_ok) flashgrad's device is started here."""
    names = (("query", q), ("key", k), ("value", v))
    for n, t in names:
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: %s must be a torch.Tensor, got %s" % (api, n, type(t).__name__))
    dev = _D.device_of(api, names)
    for n, t in names:
        _tensor(t, api, n, cuda_ok)
        if t.dtype not in _FLOATS:
            raise TypeError("%s: %s has dtype %s (float16, bfloat16, float32 or float64)" % (api, n, t.dtype))
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("%s: query, key and value must have one dtype, got %s, %s, %s" % (api, q.dtype, k.dtype,
                                                                                         v.dtype))
    if dev is not None:
        # CUDA: the tensors' own dtype (bfloat16 on the bf16 kernels); float16 refused
        _D.cuda_dtype(api, "query", q.dtype)
        _D.start(api, dev)
        return q.dtype, dev
    # float32 inside for the half types; float64 stays float64
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    return cdt, None


def _scale(api, scale, d):
    if scale is None:
        return 1.0 / math.sqrt(d) if d > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError("%s: scale must be a float or None, got %s" % (api, type(scale).__name__))
    if not math.isfinite(scale) or scale == 0:
        raise ValueError("%s: scale must be finite and nonzero, got %g" % (api, scale))
    return float(scale)


def _dropout(api, p):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError("%s: dropout_p must be a float in [0, 1), got %s" % (api, p if isinstance(p, (int, float))
                                                                              else type(p).__name__))
    p = float(p)
    # flashgrad's Philox dropout, seeded from torch's generator (torch.manual_seed repeats it)
    seed = torch.randint(-(2 ** 62), 2 ** 62, (), dtype=torch.int64) if p > 0 else None
    return p, seed


def _bool(api, name, x):
    if not isinstance(x, bool):
        raise TypeError("%s: %s must be True or False, got %s" % (api, name, type(x).__name__))
    return x


_SDPA = "flashgrad.torch.scaled_dot_product_attention"


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics on CPU tensors:
    query (..., Hq, L, E), key and value (..., H, S, E) with the same leading dims; is_causal
    top-left aligned (query i sees keys j <= i); attn_mask bool (True = take part) or float (added
    to the scores), broadcastable to (..., Hq, L, S); enable_gqa for Hq a multiple of H; scale None =
    1/sqrt(E); dropout_p with flashgrad's own generator (seeded from torch's). Returns (..., Hq, L, E)
    in query's dtype (float16/bfloat16 computed in float32). Not supported (refused with an error):
    value's E different from query's, leading dims that broadcast instead of matching, a mask that
    requires grad, attn_mask with CUDA tensors. CUDA tensors (float32, float64, bfloat16 on flashgrad's
    bf16 kernels; float16 refused) run in place on their device (python/flashgrad/_torch_device.py)."""
    api = _SDPA
    cdt, dev = _qkv(api, query, key, value, cuda_ok=True)
    _bool(api, "is_causal", is_causal)
    _bool(api, "enable_gqa", enable_gqa)
    q, k, v = query, key, value
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("%s: need query (..., L, E), key and value (..., S, E) of one rank, got %s, %s, %s"
                         % (api, _shp(q), _shp(k), _shp(v)))
    lead = tuple(q.shape[:-3])
    Hq = q.shape[-3] if q.dim() >= 3 else 1
    Hk = k.shape[-3] if k.dim() >= 3 else 1
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    if (tuple(k.shape[:-3]) != lead or tuple(v.shape[:-3]) != lead or k.shape[-1] != E or v.shape[-1] != E or
            v.shape[-2] != S or (v.shape[-3] if v.dim() >= 3 else 1) != Hk):
        raise ValueError("%s: query %s, key %s, value %s do not fit: need query (..., Hq, L, E), key and value "
                         "(..., H, S, E) with the same leading dims and E (flashgrad needs value's E = query's)"
                         % (api, _shp(q), _shp(k), _shp(v)))
    if Hk != Hq:
        if not enable_gqa:
            raise ValueError("%s: query has %d heads but key and value %d: pass enable_gqa=True for grouped-query "
                             "attention" % (api, Hq, Hk))
        if Hk == 0 or Hq % Hk:
            raise ValueError("%s: query's %d heads are not a multiple of key's %d" % (api, Hq, Hk))
    if is_causal and attn_mask is not None:
        raise ValueError("%s: attn_mask and is_causal=True cannot both be given (as in torch)" % api)
    sc = _scale(api, scale, E)
    p, seed = _dropout(api, dropout_p)
    B = 1
    for s in lead:
        B *= s
    out_shape = q.shape[:-1] + (E,)
    mask = None
    if attn_mask is not None and dev is not None:
        raise ValueError("%s: attn_mask with CUDA tensors is not supported (flashgrad's tensor masks run on the "
                         "CPU); is_causal=True is" % api)
    if attn_mask is not None:
        _tensor(attn_mask, api, "attn_mask")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise TypeError("%s: attn_mask must be bool (True = take part) or float (added to the scores), got %s"
                            % (api, attn_mask.dtype))
        if attn_mask.requires_grad:
            raise ValueError("%s: attn_mask requires grad; flashgrad does not differentiate the mask (detach it)"
                             % api)
        full = tuple(q.shape[:-1]) + (S,)
        try:
            torch.broadcast_shapes(tuple(attn_mask.shape), full)
        except RuntimeError:
            raise ValueError("%s: attn_mask %s does not broadcast to (..., Hq, L, S) = %s" %
                             (api, _shp(attn_mask), "(" + ", ".join(map(str, full)) + ")")) from None
        if attn_mask.dim() > len(full):
            raise ValueError("%s: attn_mask %s has more dims than the scores %s" % (api, _shp(attn_mask), full))
        m = attn_mask if attn_mask.dtype == torch.bool else attn_mask.to(cdt)
        mask = m.expand(full).reshape(B, Hq, L, S)
    q4 = q.reshape(B, Hq, L, E).to(cdt)
    k4 = k.reshape(B, Hk, S, E).to(cdt)
    v4 = v.reshape(B, Hk, S, E).to(cdt)
    o, _ = attn_fwd(q4, k4, v4, mask, None, seed, sc, 2 if is_causal else 0, p, -1, -1, 0.0)
    return o.to(q.dtype).reshape(out_shape)


def _fa_opts(api, q, d, dropout_p, softmax_scale, causal, window_size, softcap, deterministic, return_attn_probs):
    _bool(api, "causal", causal)
    _bool(api, "deterministic", deterministic)
    _bool(api, "return_attn_probs", return_attn_probs)
    if (isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2 or
            not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)):
        raise TypeError("%s: window_size must be (left, right), integers, -1 = unbounded" % api)
    wl, wr = (int(w) for w in window_size)
    if wl < -1 or wr < -1:
        raise ValueError("%s: window_size values must be >= -1, got (%d, %d)" % (api, wl, wr))
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (math.isfinite(softcap) and
                                                                                  softcap >= 0):
        raise ValueError("%s: softcap must be a float >= 0 (0 = off)" % api)
    sc = _scale(api, softmax_scale, d)
    p, seed = _dropout(api, dropout_p)
    return sc, p, seed, wl, wr, float(softcap)


def _slopes(api, alibi_slopes, B, H):
    if alibi_slopes is None:
        return None
    _tensor(alibi_slopes, api, "alibi_slopes")
    s = alibi_slopes
    if not s.is_floating_point() or tuple(s.shape) not in ((H,), (B, H)):
        raise ValueError("%s: alibi_slopes must be float (nheads,) or (batch_size, nheads) = (%d,) or (%d, %d), got "
                         "%s %s" % (api, H, B, H, s.dtype, _shp(s)))
    return s.detach().to(torch.float64).contiguous()


_FA = "flashgrad.torch.flash_attn_func"
_FAV = "flashgrad.torch.flash_attn_varlen_func"


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func on CPU tensors: q (batch_size, seqlen_q, nheads, headdim), k and v
    (batch_size, seqlen_k, nheads_k, headdim), nheads a multiple of nheads_k; causal aligned to the
    bottom-right corner; window_size (left, right), -1 = unbounded; softcap 0 = off; alibi_slopes
    (nheads,) or (batch_size, nheads), bias -slope·|i + seqlen_k - seqlen_q - j|. Returns out
    (batch_size, seqlen_q, nheads, headdim) in q's dtype; with return_attn_probs, (out, softmax_lse
    (batch_size, nheads, seqlen_q) float32, None): the attention probabilities themselves are not
    returned (None). deterministic is accepted: flashgrad's backward is always deterministic."""
    api = _FA
    cdt, _ = _qkv(api, q, k, v)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("%s: need q (batch_size, seqlen_q, nheads, headdim), k and v (batch_size, seqlen_k, "
                         "nheads_k, headdim), got %s, %s, %s" % (api, _shp(q), _shp(k), _shp(v)))
    B, Nq, H, d = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    if tuple(k.shape) != tuple(v.shape) or k.shape[0] != B or k.shape[3] != d or (H != 0 if Hk == 0 else H % Hk):
        raise ValueError("%s: q %s, k %s, v %s do not fit: need q (batch_size, seqlen_q, nheads, headdim), k and v "
                         "(batch_size, seqlen_k, nheads_k, headdim) with nheads a multiple of nheads_k"
                         % (api, _shp(q), _shp(k), _shp(v)))
    sc, p, seed, wl, wr, cap = _fa_opts(api, q, d, dropout_p, softmax_scale, causal, window_size, softcap,
                                        deterministic, return_attn_probs)
    slopes = _slopes(api, alibi_slopes, B, H)
    if slopes is not None and slopes.dim() == 2 and B == 0:
        slopes = None
    # the packed layout of varlen with B documents of equal length: no transposes in Python (empty
    # sizes are the C side's, as for every entry point)
    cu_q = torch.arange(B + 1, dtype=torch.int64) * Nq
    cu_k = torch.arange(B + 1, dtype=torch.int64) * Nk
    o, lse = varlen_fwd(q.reshape(B * Nq, H, d).to(cdt), k.reshape(B * Nk, Hk, d).to(cdt),
                        v.reshape(B * Nk, Hk, d).to(cdt), cu_q, cu_k, slopes, seed, Nq, Nk, sc, 1 if causal else 0, p,
                        wl, wr, cap)
    out = o.to(q.dtype).reshape(B, Nq, H, d)
    if not return_attn_probs:
        return out
    L = (lse[0].to(torch.float64) + lse[1]).to(torch.float32).reshape(H, B, Nq).transpose(0, 1).detach()
    return out, L, None


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func on CPU tensors: q (total_q, nheads, headdim), k and v
    (total_k, nheads_k, headdim), cu_seqlens_q and cu_seqlens_k (batch_size + 1,) integer offsets of
    the documents (no query sees another document's keys), max_seqlen_q / max_seqlen_k at least the
    longest document. The options are flash_attn_func's (causal, window and ALiBi per document);
    return_attn_probs gives (out, softmax_lse (nheads, total_q) float32, None). block_table (paged
    KV) is not supported."""
    api = _FAV
    cdt, _ = _qkv(api, q, k, v)
    if block_table is not None:
        raise ValueError("%s: block_table (paged KV cache) is not supported" % api)
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("%s: need q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), got %s, %s, "
                         "%s" % (api, _shp(q), _shp(k), _shp(v)))
    Tq, H, d = q.shape
    Tk, Hk = k.shape[0], k.shape[1]
    if tuple(k.shape) != tuple(v.shape) or k.shape[2] != d or (H != 0 if Hk == 0 else H % Hk):
        raise ValueError("%s: q %s, k %s, v %s do not fit: need q (total_q, nheads, headdim), k and v (total_k, "
                         "nheads_k, headdim) with nheads a multiple of nheads_k" % (api, _shp(q), _shp(k), _shp(v)))
    cus = []
    for name, cu, T in (("cu_seqlens_q", cu_seqlens_q, Tq), ("cu_seqlens_k", cu_seqlens_k, Tk)):
        _tensor(cu, api, name)
        if cu.dtype not in (torch.int32, torch.int64) or cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError("%s: %s must be int32 or int64 of shape (batch_size + 1,), got %s %s" %
                             (api, name, cu.dtype, _shp(cu)))
        cus.append(cu.to(torch.int64).contiguous())
    if cus[0].shape[0] != cus[1].shape[0]:
        raise ValueError("%s: cu_seqlens_q has %d entries but cu_seqlens_k %d" % (api, cus[0].shape[0],
                                                                                 cus[1].shape[0]))
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise TypeError("%s: %s must be an int >= 0" % (api, name))
    sc, p, seed, wl, wr, cap = _fa_opts(api, q, d, dropout_p, softmax_scale, causal, window_size, softcap,
                                        deterministic, return_attn_probs)
    slopes = _slopes(api, alibi_slopes, cus[0].shape[0] - 1, H)
    if not torch.compiler.is_compiling():
        # the offsets are data: checked here in eager mode (the C side checks them again in any mode)
        for name, cu, m in (("cu_seqlens_q", cus[0], max_seqlen_q), ("cu_seqlens_k", cus[1], max_seqlen_k)):
            if cu.shape[0] > 1:
                longest = int((cu[1:] - cu[:-1]).max())
                if longest > m:
                    raise ValueError("%s: %s has a document of %d tokens, more than %s = %d"
                                     % (api, name, longest, "max_seqlen_q" if name[-1] == "q" else "max_seqlen_k",
                                        m))
    o, lse = varlen_fwd(q.to(cdt), k.to(cdt), v.to(cdt), cus[0], cus[1], slopes, seed, max_seqlen_q, max_seqlen_k,
                        sc, 1 if causal else 0, p, wl, wr, cap)
    out = o.to(q.dtype)
    if not return_attn_probs:
        return out
    return out, (lse[0].to(torch.float64) + lse[1]).to(torch.float32).detach(), None
