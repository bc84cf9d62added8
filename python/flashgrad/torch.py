"""flashgrad.torch — flashgrad's attention as a torch.autograd.Function on CPU and CUDA tensors.

    import flashgrad.torch as fgt
    y = fgt.attention(q, k, v, causal=True)        # q (B, H, Nq, d); k, v (B, H_kv, Nk, d)
    y.sum().backward()

The forward runs flashgrad's kernels straight on the tensors' memory (contiguous inputs are not
copied; others are made contiguous first) and saves only O and the logsumexp (with q, k, v, which
autograd keeps anyway); the backward recomputes the attention weights from them, as fg_attention's
backward does. CUDA tensors (float32, float64, bfloat16) run flashgrad's CUDA kernels in place on
their device memory, with a synchronization before and after each call (a library built with CUDA
is needed; python/flashgrad/_torch_device.py). The options are flashgrad.attention's; in addition
seed=None (the default here) draws the dropout seed from torch's generator, so torch.manual_seed
makes runs repeat. Double backward is not supported. In nanoGPT's CausalSelfAttention,

    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)

becomes

    y = flashgrad.torch.attention(q, k, v, causal=True, dropout=p)

scaled_dot_product_attention, flash_attn_func and flash_attn_varlen_func (torch >= 2.4) are drop-ins
with SDPA's and flash_attn's signatures and semantics, registered as torch.library custom ops so that
torch.compile(fullgraph=True) traces them (python/flashgrad/_torch_ops.py).

Importing this module runs flashgrad's parallel loops on torch's OpenMP threads (share_threads),
so that torch's threads and flashgrad's do not compete for the cores; FLASHGRAD_TORCH_THREADS=0 in
the environment, or share_threads(False), keeps flashgrad's own pool.
"""
import ctypes
import os

import torch

from . import _attention as _A
from . import _lib
from . import _torch_device as _D
from ._lib import lib

if hasattr(torch, "library") and hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd"):
    from ._torch_ops import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                             flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                             flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache,
                             scaled_dot_product_attention)
    from ._flex import flex_attention
else:  # torch < 2.4: attention() works, the drop-ins (torch.library custom ops) say what they need
    def _needs_custom_op(name):
        def f(*args, **kwargs):
            raise RuntimeError("flashgrad.torch.%s needs torch >= 2.4 (torch.library.custom_op); this is torch %s"
                               % (name, torch.__version__))
        f.__name__ = name
        return f

    scaled_dot_product_attention = _needs_custom_op("scaled_dot_product_attention")
    flash_attn_func = _needs_custom_op("flash_attn_func")
    flash_attn_varlen_func = _needs_custom_op("flash_attn_varlen_func")
    flash_attn_qkvpacked_func = _needs_custom_op("flash_attn_qkvpacked_func")
    flash_attn_kvpacked_func = _needs_custom_op("flash_attn_kvpacked_func")
    flash_attn_varlen_qkvpacked_func = _needs_custom_op("flash_attn_varlen_qkvpacked_func")
    flash_attn_varlen_kvpacked_func = _needs_custom_op("flash_attn_varlen_kvpacked_func")
    flash_attn_with_kvcache = _needs_custom_op("flash_attn_with_kvcache")
    flex_attention = _needs_custom_op("flex_attention")

__all__ = ["attention", "share_threads", "scaled_dot_product_attention", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache", "flex_attention"]

_DT = {torch.float32: _lib.F32, torch.float64: _lib.F64}


# ---- threads: flashgrad's loops on torch's OpenMP threads ---------------------------------------
#
# PyTorch's CPU ops run on the threads of its OpenMP runtime, which spin for a while after each
# parallel op, waiting for the next one. flashgrad's own pool would be a second set of busy threads
# on the same cores: its workers then get the cores late (a scheduler tick), and the caller waits for
# them. So, when torch's parallel backend is OpenMP, flashgrad's loops run on torch's threads
# (python/csrc/fgpy.h: fgpy_use_openmp): one set of threads for both, as for torch's own ops.

def _openmp_runtime():
    """(path, (GOMP_parallel, omp_get_thread_num, omp_get_max_threads)) of the OpenMP runtime torch's
    own ops run on, the functions as addresses, or None. The runtime is one already loaded in the
    process, and is checked to be torch's: its thread count follows torch.set_num_threads."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({w for line in f for w in line.split()[5:6]
                            if os.path.basename(w).startswith(("libgomp", "libiomp", "libomp"))})
    except OSError:
        return None
    t = torch.get_num_threads()
    for p in paths:
        try:
            rt = ctypes.CDLL(p, mode=os.RTLD_NOLOAD)
            fns = [rt.GOMP_parallel, rt.omp_get_thread_num, rt.omp_get_max_threads]
        except (OSError, AttributeError):
            continue
        fns[2].restype, fns[2].argtypes = ctypes.c_int, []
        try:
            torch.set_num_threads(t + 1)
            ours = fns[2]() == t + 1
        finally:
            torch.set_num_threads(t)
        if ours:
            return p, tuple(ctypes.cast(f, ctypes.c_void_p).value for f in fns)
    return None


_omp = None  # _openmp_runtime(), () when there is none
_sharing = False


def share_threads(enable=True):
    """Run flashgrad's parallel loops on torch's OpenMP threads (enable=True, what importing
    flashgrad.torch does) or on flashgrad's own pool (False). A loop then uses the smaller of
    flashgrad.threads() and torch.get_num_threads() threads. Returns whether torch's threads are in
    use (False when torch's parallel backend is not OpenMP). Affects every flashgrad call in the
    process, the numpy API's included; not to be called while one is running."""
    global _omp, _sharing
    if enable and _omp is None:
        _omp = _openmp_runtime() or ()
    args = _omp[1] if enable and _omp else (None, None, None)
    _sharing = bool(lib.fgpy_use_openmp(*args))
    return _sharing


if os.environ.get("FLASHGRAD_TORCH_THREADS", "1") != "0":
    share_threads(True)


def _check(t, name, dtype=None, cuda=False):
    if cuda:
        _D.cuda_dtype("attention", name, t.dtype)
    elif t.dtype not in _DT:
        raise TypeError("attention: %s has dtype %s; flashgrad takes float32 or float64 tensors (bfloat16 on CUDA)"
                        % (name, t.dtype))
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


def _inputs(q, k, v):
    """q, k, v checked and made contiguous (copies only of the non-contiguous ones); the common case
    (CPU, dense, one float dtype, contiguous, shapes that fit) takes one test of each property."""
    if (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and
            q.dtype in _DT and k.dtype is q.dtype and v.dtype is q.dtype and q.is_cpu and k.is_cpu and v.is_cpu and
            q.layout is _STRIDED and k.layout is _STRIDED and v.layout is _STRIDED):
        qs, ks = q.shape, k.shape
        if len(qs) == 4 and len(ks) == 4 and ks == v.shape and ks[0] == qs[0] and ks[3] == qs[3] and ks[1] and \
                qs[1] % ks[1] == 0:
            return (q if q.is_contiguous() else q.contiguous(), k if k.is_contiguous() else k.contiguous(),
                    v if v.is_contiguous() else v.contiguous())
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("attention: %s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    cuda = _D.device_of("attention", (("q", q), ("k", k), ("v", v))) is not None
    q = _check(q, "q", cuda=cuda)
    k = _check(k, "k", q.dtype, cuda)
    v = _check(v, "v", q.dtype, cuda)
    _shapes(q, k, v)
    return q, k, v


_STRIDED = torch.strided


def _ptr(t):
    return t.data_ptr() if t is not None else None


def _run_backward(ctx, do):
    q, k, v, o, lse = ctx.saved_tensors
    wq, wk, wv = ctx.needs_input_grad[:3]
    if do is None or not (wq or wk or wv):
        return (torch.zeros_like(q) if wq else None, torch.zeros_like(k) if wk else None,
                torch.zeros_like(v) if wv else None, None, None, None)
    # set to zero by the C call (the kernels add into them): no fill of torch's in between
    dq = torch.empty_like(q) if wq else None
    dk = torch.empty_like(k) if wk else None
    dv = torch.empty_like(v) if wv else None
    if do.dtype is not q.dtype:
        do = do.to(q.dtype)
    if not do.is_contiguous():
        do = do.contiguous()
    L = lse.data_ptr()
    args = (ctx.a, 1, _ptr(dq), _ptr(dk), _ptr(dv), do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
            o.data_ptr(), L, L + ctx.lo_offset if ctx.lo_offset else None)
    st = _bwd(*args) if ctx.dev is None else _D.call(ctx.dev, _bwd, *args)
    if ctx.opts.callbacks is not None:
        ctx.opts.callbacks.check()
    if st:
        _lib.raise_status(st)
    return dq, dk, dv, None, None, None


_fwd, _bwd = lib.fgpy_attn_forward, lib.fgpy_attn_backward


class AttentionFunction(torch.autograd.Function):
    """forward(q, k, v, opts, a, want_lse) -> O, or (O, L) with want_lse: L the float64 logsumexp
    (B, H, Nq), not differentiable. opts is a flashgrad._attention._Options, a its C arguments for
    these sizes (opts.cached_args). Saved: q, k, v, O and L, which for float32 flash is one
    (2, B, H, Nq) float32 tensor: L, then what rounding it to float32 lost (bfloat16 on CUDA: a
    (B, H, Nq) float32 L). On CUDA every tensor is on q's device. The outputs and the
    gradients are fresh tensors on every call (autograd may hand the gradients to the caller as
    .grad)."""

    @staticmethod
    def forward(ctx, q, k, v, opts, a, want_lse):
        o = torch.empty_like(q)
        lo = a.dtype == _lib.F32 and a.impl == _lib.FLASH
        lse = q.new_empty((2, a.B, a.H, a.Nq) if lo else (a.B, a.H, a.Nq),
                          dtype=torch.float32 if a.dtype == _lib.BF16 else q.dtype)
        L = lse.data_ptr()
        ctx.lo_offset = lo_offset = 4 * a.B * a.H * a.Nq if lo else 0
        ctx.dev = dev = q.device if a.device == _lib.CUDA else None
        args = (a, o.data_ptr(), L, L + lo_offset if lo else None, q.data_ptr(), k.data_ptr(), v.data_ptr())
        st = _fwd(*args) if dev is None else _D.call(dev, _fwd, *args)
        if opts.callbacks is not None:
            opts.callbacks.check()
        if st:
            _lib.raise_status(st)
        ctx.opts, ctx.a = opts, a
        ctx.save_for_backward(q, k, v, o, lse)
        if not want_lse:
            return o
        L = lse[0].double() + lse[1] if lo else lse.double()
        ctx.mark_non_differentiable(L)
        return o, L

    @staticmethod
    def backward(ctx, do, *_dL):
        # Double backward is not supported. Grad mode is on here exactly when the caller asked for
        # create_graph=True: refuse it then, rather than hand back gradients without a graph.
        if torch.is_grad_enabled():
            raise RuntimeError("flashgrad.torch.attention: double backward (backward or autograd.grad with "
                               "create_graph=True) is not supported")
        return _run_backward(ctx, do)


def attention(q, k, v, *, causal=False, scale=None, dropout=0.0, seed=None, impl="flash", kv_heads=None, window=None,
              alibi=False, softcap=None, block_q=None, block_k=None, score_mod=None, score_mod_grad=None, mask=None,
              variant=None, return_lse=False):
    """Attention on CPU or CUDA tensors with autograd; the options of flashgrad.attention. Returns O
    (B, H, Nq, d), or (O, lse) with return_lse (lse float64, no gradient). seed=None: drawn from
    torch's (CPU) generator when dropout > 0 (give the same seed to repeat a forward exactly). On
    CUDA: float32, float64 or bfloat16 (bf16: flash only, no ALiBi or softcap), no callbacks or
    registered variants; the dropout mask is the CPU's for the same seed."""
    drawn = seed is None and bool(dropout)
    if seed is None:
        seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64)) if dropout else 0
    opts = _A.options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k,
                      score_mod, score_mod_grad, mask, variant, cache=not drawn)
    q, k, v = _inputs(q, k, v)
    B, H, Nq, d = q.shape
    if q.is_cuda:
        _D.start("attention", q.device)
        a = opts.cached_args(_D.CUDA_DT[q.dtype], B, H, k.shape[1], Nq, k.shape[2], d, _lib.CUDA)
    else:
        a = opts.cached_args(_DT[q.dtype], B, H, k.shape[1], Nq, k.shape[2], d)
    return AttentionFunction.apply(q, k, v, opts, a, bool(return_lse))
