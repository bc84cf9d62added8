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
import operator
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


class SDPAInputError(RuntimeError, ValueError):
    """query, key, value (or their mask) that do not fit together: a RuntimeError, as PyTorch's
    scaled_dot_product_attention raises it, and a ValueError, as flashgrad's other checks."""


class SDPADtypeError(RuntimeError, TypeError):
    """query, key and value of different or unsupported dtypes: a RuntimeError, as PyTorch raises
    it, and a TypeError, as flashgrad's other checks."""


def _sdpa_inputs(api, query, key, value, is_causal, enable_gqa):
    """The checks of scaled_dot_product_attention on query, key, value (their dtypes, ranks,
    shapes, heads): compute dtype and device. Errors are raised as PyTorch's classes (RuntimeError)
    that are also flashgrad's (TypeError / ValueError)."""
    for n, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):  # torch's argument parser: a TypeError alone
            raise TypeError("%s: %s must be a torch.Tensor, got %s" % (api, n, type(t).__name__))
    _bool(api, "is_causal", is_causal)
    _bool(api, "enable_gqa", enable_gqa)
    try:
        cdt, dev = _qkv(api, query, key, value, cuda_ok=True)
        _sdpa_shapes(api, query, key, value, enable_gqa)
    except TypeError as e:
        raise SDPADtypeError(str(e)) from None
    except ValueError as e:
        raise SDPAInputError(str(e)) from None
    return cdt, dev


def _sdpa_shapes(api, q, k, v, enable_gqa):
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("%s: need query (..., L, E), key and value (..., S, E) of one rank, got %s, %s, %s"
                         % (api, _shp(q), _shp(k), _shp(v)))
    lead = tuple(q.shape[:-3])
    Hq = q.shape[-3] if q.dim() >= 3 else 1
    Hk = k.shape[-3] if k.dim() >= 3 else 1
    E, S = q.shape[-1], k.shape[-2]
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
    cdt, dev = _sdpa_inputs(api, query, key, value, is_causal, enable_gqa)
    q, k, v = query, key, value
    lead = tuple(q.shape[:-3])
    Hq = q.shape[-3] if q.dim() >= 3 else 1
    Hk = k.shape[-3] if k.dim() >= 3 else 1
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
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
    wl, wr = _window(api, window_size)
    if wl < -1 or wr < -1:
        raise ValueError("%s: window_size values must be >= -1, got (%d, %d)" % (api, wl, wr))
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (math.isfinite(softcap) and
                                                                                  softcap >= 0):
        raise ValueError("%s: softcap must be a float >= 0 (0 = off)" % api)
    sc = _scale(api, softmax_scale, d)
    p, seed = _dropout(api, dropout_p)
    return sc, p, seed, wl, wr, float(softcap)


def _window(api, window_size):
    """(left, right) of a window_size given as Python or numpy integers, 0-d integer tensors or one
    integer tensor of two elements (as flash_attn takes it), -1 = unbounded."""
    if isinstance(window_size, torch.Tensor):
        if window_size.is_floating_point() or window_size.is_complex() or window_size.numel() != 2:
            raise TypeError("%s: window_size must be (left, right), integers, -1 = unbounded; got a %s tensor of "
                            "shape %s" % (api, window_size.dtype, _shp(window_size)))
        window_size = window_size.flatten().tolist()
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        raise TypeError("%s: window_size must be (left, right), integers, -1 = unbounded" % api)
    out = []
    for w in window_size:
        if isinstance(w, bool) or (isinstance(w, torch.Tensor) and (w.dtype == torch.bool or w.is_floating_point())):
            raise TypeError("%s: window_size must be (left, right), integers, -1 = unbounded" % api)
        try:
            out.append(operator.index(w))
        except TypeError:
            raise TypeError("%s: window_size must be (left, right), integers, -1 = unbounded" % api) from None
    return out[0], out[1]


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


def _keep(seed, p, B, H, Nq, Nk):
    """The dropout pattern (B, H, Nq, Nk) bool of dense attention with this seed and p (flashgrad's
    own Philox, python/csrc/fgpy.h: fgpy_attn_dropout_keep)."""
    keep = torch.empty((B, H, Nq, Nk), dtype=torch.uint8)
    st = lib.fgpy_attn_dropout_keep(seed, p, B, H, Nq, Nk, keep.data_ptr() if keep.numel() else None)
    if st:
        _lib.raise_status(st)
    return keep.bool()


def _s_dmask(q4, k4, sc, causal, wl, wr, cap, slopes, p, seed):
    """flash_attn's S_dmask for q4 (B, H, Nq, d), k4 (B, Hk, Nk, d) in the kernels' dtype: the
    unnormalized weights exp(s - max_j s) of every key (one block of all keys: 0 where masked), negated
    where dropout dropped the weight. Materializes (B, H, Nq, Nk): meant for checking, as in flash_attn."""
    with torch.no_grad():
        B, H, Nq, _ = q4.shape
        Nk = k4.shape[2]
        s = torch.matmul(q4, k4.repeat_interleave(H // max(k4.shape[1], 1), 1).transpose(-1, -2)) * sc
        if cap:
            s = cap * torch.tanh(s / cap)
        i = torch.arange(Nq).view(-1, 1) + Nk - Nq
        j = torch.arange(Nk).view(1, -1)
        if slopes is not None:
            s = s - slopes.to(s.dtype).view(-1, H, 1, 1) * (i - j).abs()
        ok = torch.ones(Nq, Nk, dtype=torch.bool)
        if causal:
            ok &= j <= i
        if wl >= 0:
            ok &= j >= i - wl
        if wr >= 0:
            ok &= j <= i + wr
        s = s.masked_fill(~ok, float("-inf"))
        m = s.amax(-1, keepdim=True) if Nk else s.sum(-1, keepdim=True)
        e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        if p > 0:
            e = torch.where(_keep(seed, p, B, H, Nq, Nk), e, -e)
        return e


def _fa_checks(api, q, k, v):
    cdt, _ = _qkv(api, q, k, v)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("%s: need q (batch_size, seqlen_q, nheads, headdim), k and v (batch_size, seqlen_k, "
                         "nheads_k, headdim), got %s, %s, %s" % (api, _shp(q), _shp(k), _shp(v)))
    B, Nq, H, d = q.shape
    Hk = k.shape[2]
    if tuple(k.shape) != tuple(v.shape) or k.shape[0] != B or k.shape[3] != d or (H != 0 if Hk == 0 else H % Hk):
        raise ValueError("%s: q %s, k %s, v %s do not fit: need q (batch_size, seqlen_q, nheads, headdim), k and v "
                         "(batch_size, seqlen_k, nheads_k, headdim) with nheads a multiple of nheads_k"
                         % (api, _shp(q), _shp(k), _shp(v)))
    return cdt


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func on CPU tensors: q (batch_size, seqlen_q, nheads, headdim), k and v
    (batch_size, seqlen_k, nheads_k, headdim), nheads a multiple of nheads_k; causal aligned to the
    bottom-right corner; window_size (left, right) of integers or integer tensors, -1 = unbounded;
    softcap 0 = off; alibi_slopes (nheads,) or (batch_size, nheads), bias -slope·|i + seqlen_k -
    seqlen_q - j|. Returns out (batch_size, seqlen_q, nheads, headdim) in q's dtype; with
    return_attn_probs, (out, softmax_lse (batch_size, nheads, seqlen_q) float32, S_dmask (batch_size,
    nheads, seqlen_q, seqlen_k): exp(s - rowmax) of the weights, negative where dropout dropped them).
    deterministic is accepted: flashgrad's backward is always deterministic. The whole batch is one
    call of the kernels (with per-batch ALiBi slopes, one per row: the varlen kernels)."""
    api = _FA
    cdt = _fa_checks(api, q, k, v)
    B, Nq, H, d = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    sc, p, seed, wl, wr, cap = _fa_opts(api, q, d, dropout_p, softmax_scale, causal, window_size, softcap,
                                        deterministic, return_attn_probs)
    slopes = _slopes(api, alibi_slopes, B, H)
    if slopes is not None and slopes.dim() == 2 and (B <= 1 or bool((slopes == slopes[:1]).all())):
        slopes = slopes[0].contiguous() if B else None
    q4, k4, v4 = (t.transpose(1, 2).to(cdt) for t in (q, k, v))
    if slopes is None or slopes.dim() == 1:
        # (B, H, N, d): every batch row in one call of the dense kernels
        o, lse = attn_fwd(q4, k4, v4, None, slopes, seed, sc, 1 if causal else 0, p, wl, wr, cap)
        out = o.transpose(1, 2).to(q.dtype)
        L = lse.detach()
    else:
        # per-row slopes: B documents of equal length through the varlen kernels
        cu_q = torch.arange(B + 1, dtype=torch.int64) * Nq
        cu_k = torch.arange(B + 1, dtype=torch.int64) * Nk
        o, lse = varlen_fwd(q.reshape(B * Nq, H, d).to(cdt), k.reshape(B * Nk, Hk, d).to(cdt),
                            v.reshape(B * Nk, Hk, d).to(cdt), cu_q, cu_k, slopes, seed, Nq, Nk, sc,
                            1 if causal else 0, p, wl, wr, cap)
        out = o.to(q.dtype).reshape(B, Nq, H, d)
        L = lse.detach().reshape(2, H, B, Nq).transpose(1, 2)
    if not return_attn_probs:
        return out
    lse32 = (L[0].to(torch.float64) + L[1]).to(torch.float32)
    if slopes is not None and slopes.dim() == 2:
        # the varlen kernels draw document s's dropout from seed + s·0x9E3779B97F4A7C15 with b = 0
        sd = torch.cat([_s_dmask(q4[b:b + 1].detach(), k4[b:b + 1].detach(), sc, causal, wl, wr, cap, slopes[b], p,
                                 (_seed(seed) + b * 0x9E3779B97F4A7C15) % (1 << 64)) for b in range(B)])
    else:
        sd = _s_dmask(q4.detach(), k4.detach(), sc, causal, wl, wr, cap, slopes, p, _seed(seed))
    return out, lse32, sd.to(q.dtype)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func on CPU tensors: q (total_q, nheads, headdim), k and v
    (total_k, nheads_k, headdim), cu_seqlens_q and cu_seqlens_k (batch_size + 1,) integer offsets of
    the documents (no query sees another document's keys), max_seqlen_q / max_seqlen_k at least the
    longest document. The options are flash_attn_func's (causal, window and ALiBi per document);
    return_attn_probs gives (out, softmax_lse (nheads, total_q) float32, S_dmask (batch_size, nheads,
    max_seqlen_q, max_seqlen_k), each document's weights in its top-left corner, as flash_attn_func's).
    block_table (batch_size, max_num_blocks): k and v are pages (num_blocks, page_block_size,
    nheads_k, headdim), document b's keys its pages in order (gathered into the packed layout)."""
    api = _FAV
    if block_table is not None:
        k, v = _unpage(api, k, v, block_table, cu_seqlens_k)
    cdt, _ = _qkv(api, q, k, v)
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
    ms = []
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        try:
            if isinstance(m, bool):
                raise TypeError
            m = operator.index(m)
        except TypeError:
            raise TypeError("%s: %s must be an int >= 0" % (api, name)) from None
        if m < 0:
            raise TypeError("%s: %s must be an int >= 0" % (api, name))
        ms.append(m)
    max_seqlen_q, max_seqlen_k = ms
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
    lse32 = (lse[0].to(torch.float64) + lse[1]).to(torch.float32).detach()
    nseq = cus[0].shape[0] - 1
    sd = torch.zeros((nseq, H, max_seqlen_q, max_seqlen_k), dtype=cdt)
    for s in range(nseq):
        a, b = int(cus[0][s]), int(cus[0][s + 1])
        c, e = int(cus[1][s]), int(cus[1][s + 1])
        sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[s])
        # the varlen kernels draw document s's dropout from seed + s·0x9E3779B97F4A7C15 with b = 0
        sd[s, :, :b - a, :e - c] = _s_dmask(q[a:b].detach().to(cdt).transpose(0, 1)[None],
                                            k[c:e].detach().to(cdt).transpose(0, 1)[None], sc, causal, wl, wr, cap,
                                            sl, p, (_seed(seed) + s * 0x9E3779B97F4A7C15) % (1 << 64))[0]
    return out, lse32, sd.to(q.dtype)


def _unpage(api, k, v, block_table, cu_seqlens_k):
    """Paged k, v (num_blocks, page_block_size, nheads_k, headdim) as the packed (total_k, nheads_k,
    headdim) of the documents: document b's keys are its pages block_table[b, :] in order, cut to
    cu_seqlens_k[b + 1] - cu_seqlens_k[b] tokens (a gather: gradients reach the pages)."""
    for name, t in (("k", k), ("v", v), ("block_table", block_table), ("cu_seqlens_k", cu_seqlens_k)):
        _tensor(t, api, name)
    if k.dim() != 4 or k.shape != v.shape or block_table.dim() != 2 or block_table.is_floating_point() or \
            cu_seqlens_k.dim() != 1 or cu_seqlens_k.shape[0] != block_table.shape[0] + 1:
        raise ValueError("%s: with block_table, k and v must be (num_blocks, page_block_size, nheads_k, headdim) and "
                         "block_table (batch_size, max_num_blocks) integer, got k %s, block_table %s, cu_seqlens_k %s"
                         % (api, _shp(k), _shp(block_table), _shp(cu_seqlens_k)))
    pbs = k.shape[1]
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    bt = block_table.to(torch.int64)
    if any(n > bt.shape[1] * pbs or n < 0 for n in lens):
        raise RuntimeError("%s: a document is longer than its block_table holds (%d blocks of %d tokens)"
                           % (api, bt.shape[1], pbs))
    if bt.numel() and (int(bt.min()) < 0 or int(bt.max()) >= k.shape[0]):
        raise ValueError("%s: block_table has pages outside [0, %d)" % (api, k.shape[0]))
    idx = torch.cat([(bt[b, :(n + pbs - 1) // pbs].view(-1, 1) * pbs + torch.arange(pbs).view(1, -1)).flatten()[:n]
                     for b, n in enumerate(lens)]) if lens else torch.zeros(0, dtype=torch.int64)
    flat = (k.shape[0] * pbs,) + tuple(k.shape[2:])
    return k.reshape(flat)[idx], v.reshape(flat)[idx]


# ---- packed forms: views of one tensor, gradients back through the unbind ------------------------

def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_qkvpacked_func: qkv (batch_size, seqlen, 3, nheads, headdim); else
    flash_attn_func's options and results."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError("flashgrad.torch.flash_attn_qkvpacked_func: qkv must be (batch_size, seqlen, 3, nheads, "
                         "headdim), got %s" % (_shp(qkv) if isinstance(qkv, torch.Tensor) else type(qkv).__name__))
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_kvpacked_func: q (batch_size, seqlen_q, nheads, headdim), kv (batch_size,
    seqlen_k, 2, nheads_k, headdim); else flash_attn_func's options and results."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError("flashgrad.torch.flash_attn_kvpacked_func: kv must be (batch_size, seqlen_k, 2, nheads_k, "
                         "headdim), got %s" % (_shp(kv) if isinstance(kv, torch.Tensor) else type(kv).__name__))
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn.flash_attn_varlen_qkvpacked_func: qkv (total, 3, nheads, headdim), one cu_seqlens and
    max_seqlen for queries and keys; else flash_attn_varlen_func's options and results."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError("flashgrad.torch.flash_attn_varlen_qkvpacked_func: qkv must be (total, 3, nheads, headdim), "
                         "got %s" % (_shp(qkv) if isinstance(qkv, torch.Tensor) else type(qkv).__name__))
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale,
                                  causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_varlen_kvpacked_func: q (total_q, nheads, headdim), kv (total_k, 2,
    nheads_k, headdim); else flash_attn_varlen_func's options and results."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError("flashgrad.torch.flash_attn_varlen_kvpacked_func: kv must be (total_k, 2, nheads_k, "
                         "headdim), got %s" % (_shp(kv) if isinstance(kv, torch.Tensor) else type(kv).__name__))
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


# ---- the KV cache (inference) -------------------------------------------------------------------

_FKV = "flashgrad.torch.flash_attn_with_kvcache"


def _rotary(x, cos, sin, pos, interleaved):
    """x (B, S, H, d) with its first rotary_dim = 2·cos.shape[-1] channels rotated by the angles of
    positions pos (B, S): pairs (2c, 2c+1) when interleaved, else (c, c + rotary_dim/2)."""
    ro = 2 * cos.shape[-1]
    c, s = cos[pos].unsqueeze(2).to(x.dtype), sin[pos].unsqueeze(2).to(x.dtype)
    xr = x[..., :ro]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), -1).flatten(-2)
    else:
        x1, x2 = xr[..., :ro // 2], xr[..., ro // 2:]
        rot = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), -1)
    return torch.cat((rot, x[..., ro:]), -1)


def _int_vec(api, name, x, B, dflt):
    if x is None:
        return torch.full((B,), dflt, dtype=torch.int64)
    if isinstance(x, int) and not isinstance(x, bool):
        return torch.full((B,), x, dtype=torch.int64)
    if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.dtype == torch.bool or x.shape != (B,):
        raise ValueError("%s: %s must be an int or an integer tensor (batch_size,) = (%d,), got %s"
                         % (api, name, B, _shp(x) if isinstance(x, torch.Tensor) else type(x).__name__))
    return x.to(torch.int64).cpu()


@torch.no_grad()
def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache on CPU tensors (inference: no backward).

    q (batch_size, seqlen_q, nheads, headdim); k_cache, v_cache (batch_size_cache, seqlen_cache,
    nheads_k, headdim), or (num_blocks, page_block_size, nheads_k, headdim) with block_table
    (batch_size, max_blocks) (paged). k, v (batch_size, seqlen_new, nheads_k, headdim), when given,
    are written into the caches in place at positions cache_seqlens[b] .. + seqlen_new (rotated first
    when rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2) are given; q is rotated at the same
    positions when causal or windowed, else all of q at cache_seqlens[b]). Row b of q then attends to
    keys cache_leftpad[b] .. cache_seqlens[b] + seqlen_new of cache row cache_batch_idx[b], with
    causal, window, softcap and ALiBi aligned to that row's own length as flash_attn aligns them.
    num_splits is accepted (a GPU scheduling hint). Returns out (batch_size, seqlen_q, nheads, headdim),
    and softmax_lse (batch_size, nheads, seqlen_q) float32 with return_softmax_lse."""
    api = _FKV
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError("%s: %s must be a 4-d tensor, got %s" % (api, name, _shp(t) if isinstance(
                t, torch.Tensor) else type(t).__name__))
    cdt, _ = _qkv(api, q, k_cache, v_cache)
    B, Sq, H, d = q.shape
    Hk = k_cache.shape[2]
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != d or Hk == 0 or H % Hk:
        raise ValueError("%s: q %s, k_cache %s, v_cache %s do not fit (nheads a multiple of nheads_k, one headdim)"
                         % (api, _shp(q), _shp(k_cache), _shp(v_cache)))
    if (k is None) != (v is None):
        raise ValueError("%s: give both k and v, or neither" % api)
    sc = _scale(api, softmax_scale, d)
    wl, wr = _window(api, window_size)
    _bool(api, "causal", causal)
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not softcap >= 0:
        raise ValueError("%s: softcap must be a float >= 0 (0 = off)" % api)
    if causal:
        wr = 0
    # the cache rows this batch uses: (B, S, Hk, d) views or gathered copies
    if block_table is not None:
        _tensor(block_table, api, "block_table")
        if block_table.dim() != 2 or block_table.shape[0] != B or block_table.is_floating_point():
            raise ValueError("%s: block_table must be integer (batch_size, max_num_blocks) = (%d, n), got %s"
                             % (api, B, _shp(block_table)))
        if cache_batch_idx is not None:
            raise ValueError("%s: cache_batch_idx and block_table cannot both be given" % api)
        pbs = k_cache.shape[1]
        bt = block_table.to(torch.int64)
        S = bt.shape[1] * pbs
        rows = None
    else:
        S = k_cache.shape[1]
        rows = (torch.arange(B) if cache_batch_idx is None
                else _int_vec(api, "cache_batch_idx", cache_batch_idx, B, 0))
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= k_cache.shape[0]):
            raise ValueError("%s: cache_batch_idx out of range [0, %d)" % (api, k_cache.shape[0]))
    seqlens = _int_vec(api, "cache_seqlens", cache_seqlens, B, S)
    left = _int_vec(api, "cache_leftpad", cache_leftpad, B, 0)
    new = 0 if k is None else k.shape[1]
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _tensor(t, api, name)
            if t.dim() != 4 or t.shape[0] != B or t.shape[2] != Hk or t.shape[3] != d or t.shape[1] != new:
                raise ValueError("%s: %s must be (batch_size, seqlen_new, nheads_k, headdim) = (%d, n, %d, %d), got "
                                 "%s" % (api, name, B, Hk, d, _shp(t)))
    if B and block_table is not None and int((seqlens + new).max()) > S:
        # flash_attn's own check (a RuntimeError there too): the table's pages cannot hold the row
        raise RuntimeError("%s: cache_seqlens + seqlen_new = %d exceeds what block_table holds (%d blocks of %d "
                           "tokens)" % (api, int((seqlens + new).max()), bt.shape[1], pbs))
    if B and (int((seqlens + new).max()) > S or int(seqlens.min()) < 0 or int(left.min()) < 0 or
              bool((left > seqlens + new).any())):
        raise ValueError("%s: cache_seqlens + seqlen_new must be in [cache_leftpad, seqlen_cache = %d]" % (api, S))
    rot = rotary_cos is not None
    if rot:
        if rotary_sin is None or rotary_cos.shape != rotary_sin.shape or rotary_cos.dim() != 2 or \
                2 * rotary_cos.shape[1] > d:
            raise ValueError("%s: rotary_cos and rotary_sin must be (seqlen_ro, rotary_dim / 2) with rotary_dim <= "
                             "headdim" % api)
    qpos = seqlens.view(B, 1) + (torch.arange(Sq).view(1, Sq) if (causal or wl >= 0 or wr >= 0) else 0)
    qpos = qpos.expand(B, Sq)
    q_use = _rotary(q, rotary_cos, rotary_sin, qpos, rotary_interleaved) if (rot and k is not None) else q
    if k is not None:
        kpos = seqlens.view(B, 1) + torch.arange(new).view(1, new)
        k_new = _rotary(k, rotary_cos, rotary_sin, kpos, rotary_interleaved) if rot else k
        # write the new keys and values into the caches, in place
        if block_table is not None:
            page = torch.gather(bt, 1, kpos // pbs)
            k_cache[page, kpos % pbs] = k_new.to(k_cache.dtype)
            v_cache[page, kpos % pbs] = v.to(v_cache.dtype)
        else:
            r = rows.view(B, 1).expand(B, new)
            k_cache[r, kpos] = k_new.to(k_cache.dtype)
            v_cache[r, kpos] = v.to(v_cache.dtype)
    if block_table is not None:
        kc = k_cache[bt].reshape(B, S, Hk, d)
        vc = v_cache[bt].reshape(B, S, Hk, d)
    else:
        kc, vc = k_cache[rows], v_cache[rows]
    # which keys a query sees, per row: keys left .. len-1 with len = seqlens + new; positions j' = j - left
    # aligned to the row's own length sk = len - left (flash_attn's bottom-right rule per row)
    ln = (seqlens + new).view(B, 1, 1, 1)
    lp = left.view(B, 1, 1, 1)
    j = torch.arange(S).view(1, 1, 1, S)
    i = torch.arange(Sq).view(1, 1, Sq, 1)
    jj = j - lp
    ii = i + (ln - lp) - Sq
    ok = (j >= lp) & (j < ln) & (ii >= -(1 << 62))
    if wr >= 0:
        ok = ok & (jj <= ii + wr)
    if wl >= 0:
        ok = ok & (jj >= ii - wl)
    slopes = _slopes(api, alibi_slopes, B, H)
    if slopes is not None:
        sl = slopes.view(-1, H, 1, 1) if slopes.dim() == 2 else slopes.view(1, H, 1, 1)
        mask = torch.where(ok, -sl * (ii - jj).abs().to(torch.float64), torch.tensor(float("-inf"),
                                                                                    dtype=torch.float64))
        mask = mask.to(cdt).expand(B, H, Sq, S)
    else:
        mask = ok.expand(B, H, Sq, S)
    q4 = q_use.transpose(1, 2).to(cdt)
    k4, v4 = kc.transpose(1, 2).to(cdt), vc.transpose(1, 2).to(cdt)
    o, lse = attn_fwd(q4, k4, v4, mask, None, None, sc, 0, 0.0, -1, -1, float(softcap))
    out = o.transpose(1, 2).to(q.dtype)
    if return_softmax_lse:
        return out, (lse[0].to(torch.float64) + lse[1]).to(torch.float32)
    return out
