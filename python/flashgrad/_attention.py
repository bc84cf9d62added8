"""_attention.py — flashgrad's attention on numpy arrays (see the package docstring for the API).

Legend: B batch, H query heads, H_kv K/V heads, Nq queries, Nk keys, d head dim.
  q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o, do, dq (B, H, Nq, d); dk, dv like k; lse (B, H, Nq).

C-contiguous, aligned, native-endian float32/float64 arrays go to the C kernels as they are (their
memory is the kernels' input); other arrays are copied into that layout first. Outputs are numpy
arrays the kernels write into. The options are checked here only for what the library cannot see
(Python types, the sizes of the arrays, values the C interface would read as "default", such as
scale 0 or block 0); everything else (ranges, combinations) is the library's check, whose message
becomes the exception's (flashgrad._lib.raise_status).
"""
import ctypes
import math
import operator
from collections import namedtuple

import numpy as np

from . import _lib
from ._lib import lib

__all__ = ["attention", "attention_backward", "gradcheck_attention", "variants", "threads", "set_threads",
           "GradcheckReport"]

_INT32_MAX = 2 ** 31 - 1
_IMPLS = {"naive": _lib.NAIVE, "flash": _lib.FLASH}
_DTYPES = {np.dtype(np.float32): _lib.F32, np.dtype(np.float64): _lib.F64}


# ---- options ----------------------------------------------------------------------------------

def _int(name, x, lo=None, hi=None):
    if isinstance(x, bool) and name != "seed":
        raise TypeError("attention: %s must be an integer, got %s" % (name, _short(x)))
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError("attention: %s must be an integer, got %s" % (name, _short(x))) from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError("attention: %s must be in [%s, %s], got %d" % (name, lo, hi, v))
    return v


def _real(name, x):
    if isinstance(x, (bool, np.bool_, str, bytes, complex, np.complexfloating)):
        raise TypeError("attention: %s must be a real number, got %s" % (name, _short(x)))
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError("attention: %s must be a real number, got %s" % (name, _short(x))) from None


class _Callbacks:
    """The user's Python callbacks as C function pointers. The C side may call them from any of its
    threads, many times, in no order; an exception stops further calls to the user's functions (the
    trampolines return a neutral value) and is raised again by check() once the C call has returned.
    The trampolines share a one-element list with this object, not the object itself, so that no
    reference cycle keeps the C function pointers alive after the call."""

    def __init__(self, score_mod, score_mod_grad, mask):
        self.err = err = [None]
        self.score_mod = self.score_mod_grad = self.mask = None
        if score_mod is not None:
            self.score_mod = _lib.SCORE_MOD_FN(_score_tramp(score_mod, "score_mod", err))
        if score_mod_grad is not None:
            self.score_mod_grad = _lib.SCORE_MOD_FN(_score_tramp(score_mod_grad, "score_mod_grad", err))
        if mask is not None:
            self.mask = _lib.MASK_FN(_mask_tramp(mask, err))

    def check(self):
        e = self.err[0]
        if e is not None:
            self.err[0] = None
            raise e


def _to_float(name, r):
    if isinstance(r, (float, int, np.floating, np.integer)) and not isinstance(r, (bool, np.bool_)):
        return float(r)
    if isinstance(r, np.ndarray) and r.ndim == 0 and r.dtype.kind in "fiu":
        return float(r)
    raise TypeError("attention: %s must return a real number, got %s" % (name, _short(r)))


def _score_tramp(fn, name, err):
    def tramp(s, b, h, i, j, user):
        if err[0] is not None:
            return s
        try:
            return _to_float(name, fn(s, b, h, i, j))
        except BaseException as e:  # raised again by _Callbacks.check after the C call
            if err[0] is None:
                err[0] = e
            return s
    return tramp


def _mask_tramp(fn, err):
    def tramp(b, h, i, j, user):
        if err[0] is not None:
            return 1
        try:
            return 1 if fn(b, h, i, j) else 0
        except BaseException as e:
            if err[0] is None:
                err[0] = e
            return 1
    return tramp


_CAUSAL = {"bottom-right": 1, "top-left": 2}


def _short(x):
    """repr of x for a message, at most 60 characters (never a whole tensor or array)."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return "%s of shape %s, dtype %s" % (type(x).__name__, tuple(x.shape), x.dtype)
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


class _Options:
    """The attention options, checked; args() makes the C struct for given sizes."""
    __slots__ = ("impl", "causal", "scale", "dropout", "seed", "kv_heads", "window", "alibi", "slopes",
                 "softcap", "block_q", "block_k", "callbacks", "variant", "_args")

    def __init__(self, causal=False, scale=None, dropout=0.0, seed=0, impl="flash", kv_heads=None, window=None,
                 alibi=False, softcap=None, block_q=None, block_k=None, score_mod=None, score_mod_grad=None,
                 mask=None, variant=None):
        if impl not in _IMPLS:
            raise ValueError("attention: impl must be 'flash' or 'naive', got %s" % (_short(impl),))
        self.impl = _IMPLS[impl]
        # a bool (bottom-right aligned), or the alignment by name; 1/0 and other truthy values are refused
        if causal is True or causal is False or isinstance(causal, np.bool_):
            self.causal = 1 if causal else 0
        elif isinstance(causal, str) and causal in _CAUSAL:
            self.causal = _CAUSAL[causal]
        else:
            raise TypeError("attention: causal must be True, False, 'bottom-right' or 'top-left', got %s"
                            % _short(causal))
        self.scale = 0.0 if scale is None else _real("scale", scale)
        if scale is not None and (self.scale == 0 or not math.isfinite(self.scale)):
            raise ValueError("attention: scale must be finite and nonzero (None = 1/sqrt(d)), got %s" % (_short(scale),))
        self.dropout = _real("dropout", dropout)  # its range: the library's check (ops/attention.c)
        self.seed = _int("seed", seed, 0, 2 ** 64 - 1)
        self.kv_heads = None if kv_heads is None else _int("kv_heads", kv_heads, 1, _INT32_MAX)
        self.window = None
        if window is not None:
            if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
                raise TypeError("attention: window must be (left, right), each an integer >= 0 or -1/None "
                                "(unbounded), got %s" % (_short(window),))
            lr = []
            for side, w in zip(("left", "right"), window):
                w = -1 if w is None else _int("window " + side, w, -1)
                lr.append(-1 if w >= 2 ** 32 else w)  # as far as any key: unbounded (as the C side reads it)
            self.window = tuple(lr)
        self.slopes = None
        if alibi is None or isinstance(alibi, (int, np.integer, np.bool_)):
            self.alibi = 1 if alibi else 0
        else:
            s = np.asarray(alibi)
            if s.ndim != 1 or not (np.issubdtype(s.dtype, np.floating) or np.issubdtype(s.dtype, np.integer)):
                raise TypeError("attention: alibi must be True/False or a sequence of H slopes, got %s" % (_short(alibi),))
            self.alibi = 1
            self.slopes = np.ascontiguousarray(s, dtype=np.float64)
        self.softcap = 0.0 if softcap is None else _real("softcap", softcap)  # range: the library's check
        self.block_q = 0 if block_q is None else _int("block_q", block_q, 1, 65536)
        self.block_k = 0 if block_k is None else _int("block_k", block_k, 1, 65536)
        for name, f in (("score_mod", score_mod), ("score_mod_grad", score_mod_grad), ("mask", mask)):
            if f is not None and not callable(f):
                raise TypeError("attention: %s must be callable, got %s" % (name, _short(f)))
        if (score_mod is None) != (score_mod_grad is None):
            raise ValueError("attention: a score_mod needs its derivative score_mod_grad, and the reverse")
        self.callbacks = None
        if score_mod is not None or mask is not None:
            self.callbacks = _Callbacks(score_mod, score_mod_grad, mask)
        if variant is not None and not isinstance(variant, str):
            raise TypeError("attention: variant must be the name of a registered variant (flashgrad.variants()), "
                            "got %s" % (_short(variant),))
        # a variant with callbacks: refused by the library (python/csrc/fgpy.c, opts_of)
        self.variant = variant.encode() if variant is not None else None
        self._args = {}

    def cached_args(self, dtype, B, H, H_kv, Nq, Nk, d, device=_lib.CPU):
        """args(dtype, sizes, device) for this implementation, made once per set of sizes and kept:
        the struct is only read by the library, so calls with the same sizes may share it."""
        key = (dtype, B, H, H_kv, Nq, Nk, d, device)
        a = self._args.get(key)
        if a is None:
            a = self.args(dtype, B, H, H_kv, Nq, Nk, d, device=device)
            if len(self._args) >= 16:
                self._args.clear()
            self._args[key] = a
        return a

    def args(self, dtype, B, H, H_kv, Nq, Nk, d, impl=None, device=_lib.CPU):
        if self.kv_heads is not None and self.kv_heads != H_kv:
            raise ValueError("attention: opts ask for %d K/V heads but k and v have %d" % (self.kv_heads, H_kv))
        if self.slopes is not None and self.slopes.shape[0] != H:
            raise ValueError("attention: alibi has %d slopes but there are %d query heads"
                             % (self.slopes.shape[0], H))
        a = _lib.Args(dtype=dtype, device=device, impl=self.impl if impl is None else impl, B=B, H=H, H_kv=H_kv,
                      Nq=Nq, Nk=Nk, d=d, scale=self.scale, causal=self.causal, block_q=self.block_q,
                      block_k=self.block_k,
                      dropout=self.dropout, seed=self.seed, alibi=self.alibi, softcap=self.softcap,
                      custom=self.variant)
        if self.window is not None:
            a.window, a.window_left, a.window_right = 1, self.window[0], self.window[1]
        if self.slopes is not None:
            a.alibi_slopes = self.slopes.ctypes.data
        cb = self.callbacks
        if cb is not None:
            if cb.score_mod is not None:
                a.score_mod, a.score_mod_grad = cb.score_mod, cb.score_mod_grad
            if cb.mask is not None:
                a.mask = cb.mask
        return a

    def check_callbacks(self):
        if self.callbacks is not None:
            self.callbacks.check()


_OPTIONS = {}


def options(causal=False, scale=None, dropout=0.0, seed=0, impl="flash", kv_heads=None, window=None, alibi=False,
            softcap=None, block_q=None, block_k=None, score_mod=None, score_mod_grad=None, mask=None, variant=None,
            cache=True):
    """_Options(...), made once per set of option values and kept (at most 64 sets): a call with
    options seen before skips their checks. Options with callbacks (whose errors are per call), or
    that are not hashable (alibi slopes as a list), or cache=False (a seed drawn per call) are made
    anew each time. The key carries the values' types as well, since the checks tell True from 1."""
    if cache and score_mod is None and score_mod_grad is None and mask is None:
        try:
            key = (causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k, variant,
                   type(causal), type(scale), type(dropout), type(seed), type(kv_heads), type(softcap),
                   type(block_q), type(block_k), type(alibi), None if window is None else tuple(map(type, window)))
            o = _OPTIONS.get(key)
        except TypeError:  # not hashable, or a window that is no pair (the checks below say so)
            key = None
        else:
            if o is not None:
                return o
        o = _Options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k, None,
                     None, None, variant)
        if key is not None:
            if len(_OPTIONS) >= 64:
                _OPTIONS.clear()
            _OPTIONS[key] = o
        return o
    return _Options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k,
                    score_mod, score_mod_grad, mask, variant)


def _call(opts, fn, *args):
    """fn(*args) into the library; then a callback's exception, else the library's error, is raised."""
    st = fn(*args)
    opts.check_callbacks()
    if st:
        _lib.raise_status(st)


# ---- arrays -----------------------------------------------------------------------------------

def _array(x, name, want_dtype=None):
    """x as a C-contiguous, aligned, native float32/float64 ndarray (x itself when it already is)."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception as e:
            raise TypeError("attention: %s is not an array: %s" % (name, e)) from None
    dt = x.dtype
    if dt.kind != "f" or dt.itemsize not in (4, 8):
        raise TypeError("attention: %s has dtype %s; flashgrad takes float32 or float64 arrays" % (name, dt))
    if not dt.isnative:
        x = x.astype(dt.newbyteorder("="))
    if not (x.flags.c_contiguous and x.flags.aligned):
        x = np.ascontiguousarray(x)
        if not x.flags.aligned:
            x = x.copy()
    if want_dtype is not None and x.dtype != want_dtype:
        raise TypeError("attention: %s is %s but q is %s" % (name, x.dtype, want_dtype))
    return x


def _shape_str(s):
    return "(" + ", ".join(str(n) for n in s) + ")"


def _qkv(q, k, v):
    q = _array(q, "q")
    k = _array(k, "k", q.dtype)
    v = _array(v, "v", q.dtype)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError("attention: %s must be (B, H, N, d), got rank %d %s" % (name, t.ndim, _shape_str(t.shape)))
    B, H, _, d = q.shape
    Hkv = k.shape[1]
    if (k.shape[0] != B or v.shape[0] != B or v.shape[1] != Hkv or (H != 0 if Hkv == 0 else H % Hkv != 0) or
            k.shape[3] != d or v.shape[3] != d or k.shape[2] != v.shape[2]):
        raise ValueError("attention: q %s, k %s, v %s do not fit: need q (B, H, Nq, d), k and v (B, H_kv, Nk, d) with "
                         "H a multiple of H_kv" % (_shape_str(q.shape), _shape_str(k.shape), _shape_str(v.shape)))
    return q, k, v


def _ptr(a):
    return a.ctypes.data if a is not None else None


def _forward(opts, q, k, v, impl=None):
    """Runs the forward (opts' implementation, or impl); returns new arrays o, lse and lse_lo (float32
    flash only, else None)."""
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    dt = _DTYPES[q.dtype]
    impl = opts.impl if impl is None else impl
    a = opts.args(dt, B, H, Hkv, Nq, Nk, d, impl)
    o = np.empty(q.shape, q.dtype)
    lse = np.empty((B, H, Nq), q.dtype)
    lse_lo = None
    if dt == _lib.F32 and impl == _lib.FLASH:
        lse_lo = np.empty((B, H, Nq), np.float32)
    _call(opts, lib.fgpy_attn_forward, ctypes.byref(a), _ptr(o), _ptr(lse), _ptr(lse_lo), _ptr(q), _ptr(k), _ptr(v))
    return o, lse, lse_lo


def attention(q, k, v, *, causal=False, scale=None, dropout=0.0, seed=0, impl="flash", kv_heads=None, window=None,
              alibi=False, softcap=None, block_q=None, block_k=None, score_mod=None, score_mod_grad=None, mask=None,
              variant=None, return_lse=False):
    """O = softmax(mask(mod(q k^T scale))) v, per batch and head; with return_lse, (O, lse).

    q (B, H, Nq, d); k, v (B, H_kv, Nk, d), H a multiple of H_kv; float32 or float64, all alike.
    O has q's dtype. lse (B, H, Nq) is float64: for float32 flash it carries the logsumexp L to the
    precision the library's backward uses (float32 L plus what rounding lost), so that
    attention_backward reproduces fg_attention's gradients bit for bit.
    Options (ops/attention.h gives the exact semantics):
      causal          bottom-right aligned: query i sees key j iff j <= i + Nk - Nq
      scale           score scale (None: 1/sqrt(d))
      dropout, seed   dropout p on the attention weights, regenerated from seed (Philox), never stored
      impl            "flash" (tiled, O(N) memory) or "naive" (materializes the scores)
      kv_heads        when given, must equal k's heads (grouped-query / multi-query attention)
      window          (left, right): query i' = i + Nk - Nq sees keys i' - left .. i' + right; -1 or
                      None leaves a side unbounded
      alibi           True (standard slopes) or a sequence of H slopes
      softcap         c > 0: s = c tanh(s / c)
      block_q/k       flash tile sizes (None: 64)
      score_mod, score_mod_grad   Python callables f(s, b, h, i, j) -> float and its derivative in s
      mask            Python callable m(b, h, i, j) -> bool (query i may see key j)
      variant         the name of a registered C variant (flashgrad.variants())
    Callbacks are slow (called per element, from flashgrad's threads): meant for checking variants.
    """
    opts = _Options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k,
                    score_mod, score_mod_grad, mask, variant)
    q, k, v = _qkv(q, k, v)
    o, lse, lse_lo = _forward(opts, q, k, v)
    if not return_lse:
        return o
    L = lse.astype(np.float64)
    if lse_lo is not None:
        L += lse_lo
    return o, L


def _split_lse(lse, q, B, H, Nq, impl):
    """lse for the backward kernels: (hi, lo) in q's dtype; lo only for float32 flash from a float64 lse."""
    if not isinstance(lse, np.ndarray):
        lse = np.asarray(lse)
    if lse.shape != (B, H, Nq):
        raise ValueError("attention backward: lse must be (B, H, Nq) = %s, got %s"
                         % (_shape_str((B, H, Nq)), _shape_str(lse.shape)))
    if lse.dtype != np.float64 and lse.dtype != q.dtype:
        raise TypeError("attention backward: lse is %s; it must be float64 or q's dtype (%s)" % (lse.dtype, q.dtype))
    lse = _array(lse, "lse")
    if q.dtype == np.float64 or lse.dtype == q.dtype:
        return lse, None
    hi = lse.astype(np.float32)
    if impl != _lib.FLASH:
        return hi, None
    with np.errstate(invalid="ignore"):
        lo = (lse - hi).astype(np.float32)
    lo[~np.isfinite(hi)] = 0  # L -inf (no key) or NaN rows: nothing was lost
    return hi, lo


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, dropout=0.0, seed=0, impl="flash",
                       kv_heads=None, window=None, alibi=False, softcap=None, block_q=None, block_k=None,
                       score_mod=None, score_mod_grad=None, mask=None, variant=None):
    """(dq, dk, dv) of attention(q, k, v, same options) for the output gradient do.

    o and lse are the forward's (attention(..., return_lse=True)); flash recomputes the weights
    P = exp(S - lse) tile by tile from them, as fg_attention's backward does. naive, whose op keeps
    P, recomputes P with its forward (o and lse are then only checked for shape). lse may be the
    float64 one attention returns or one of q's dtype (then float32 flash works from the float32
    L alone). Dropout must have the forward's seed.
    """
    opts = _Options(causal, scale, dropout, seed, impl, kv_heads, window, alibi, softcap, block_q, block_k,
                    score_mod, score_mod_grad, mask, variant)
    q, k, v = _qkv(q, k, v)
    o = _array(o, "o", q.dtype)
    do = _array(do, "do", q.dtype)
    for name, t in (("o", o), ("do", do)):
        if t.shape != q.shape:
            raise ValueError("attention backward: %s must be shaped like q %s, got %s"
                             % (name, _shape_str(q.shape), _shape_str(t.shape)))
    B, H, Nq, d = q.shape
    hi, lo = _split_lse(lse, q, B, H, Nq, opts.impl)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    a = opts.args(_DTYPES[q.dtype], B, H, k.shape[1], Nq, k.shape[2], d)
    _call(opts, lib.fgpy_attn_backward, ctypes.byref(a), 1, _ptr(dq), _ptr(dk), _ptr(dv), _ptr(do), _ptr(q), _ptr(k),
          _ptr(v), _ptr(o), _ptr(hi), _ptr(lo))
    return dq, dk, dv


# ---- gradient check ---------------------------------------------------------------------------

Row = namedtuple("Row", "check tensor max_abs max_rel limit passed worst")
Row.__doc__ = """One row of the report. passed: True, False, or None for rows that only inform (naive
float32's own error). limit: the bound max_abs (checks 1, 3) or max_rel (check 2) was held to (None
for check 1, whose bound is per element). worst: the Element where |a - b| is largest, or None."""
Element = namedtuple("Element", "input index got want")
Element.__doc__ = """An element of a compared tensor: input ('O', 'dQ', 'dK', 'dV'), index (a tuple into
it), got (the checked value), want (the reference: finite differences, or naive float64)."""


class GradcheckReport:
    """The three checks of fg_attn_gradcheck (ops/attention.h) as rows:
      1. naive f64 vs finite diff   dQ, dK, dV: |analytic - numeric| <= 1e-7 + 1e-5 |numeric| per element
      2. flash f64 vs naive f64     O, dQ, dK, dV: max|a - b| / max|b| <= 1e-12
      3. flash f32 vs naive f64     O, dQ, dK, dV: max|a - b| <= 2 x naive f32's error + a floor, with
         the "naive f32 vs naive f64" rows (information) under them
    passed: every check passed. rows: list of Row. fd_worst: the worst finite-difference Element when
    check 1 failed (else None). f32_skipped: why check 3 did not run ('' when it ran). str(report)
    is the table `flashgrad gradcheck attention` prints."""

    def __init__(self, passed, rows, fd_worst, f32_skipped, shape):
        self.passed, self.rows, self.fd_worst, self.f32_skipped, self.shape = passed, rows, fd_worst, f32_skipped, shape

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return "<GradcheckReport %s, %d rows>" % ("PASS" if self.passed else "FAIL", len(self.rows))

    def __str__(self):
        lines = ["%-24s %-6s %-12s %-12s %-12s %-6s %s" % ("check", "tensor", "max abs err", "max rel err", "limit",
                                                             "result", "worst element (got / want)")]
        for r in self.rows:
            res = "-" if r.passed is None else "PASS" if r.passed else "FAIL"
            lim = "-" if r.limit is None else "%.2e" % r.limit
            w = "-" if r.worst is None else "%s%s %.9g / %.9g" % (r.worst.input, list(r.worst.index), r.worst.got,
                                                                  r.worst.want)
            lines.append("%-24s %-6s %-12.3e %-12.3e %-12s %-6s %s" % (r.check, r.tensor, r.max_abs, r.max_rel, lim,
                                                                        res, w))
        if self.fd_worst is not None:
            e = self.fd_worst
            lines.append("    worst finite-difference element: %s%s analytic %.12g numeric %.12g"
                         % (e.input, list(e.index), e.got, e.want))
        if self.f32_skipped:
            lines.append("flash f32 vs naive f64: skipped, " + self.f32_skipped)
        lines.append("gradcheck attention: " + ("PASS" if self.passed else "FAIL"))
        return "\n".join(lines)


lib.fg_rand_normal.restype = ctypes.c_void_p
lib.fg_rand_normal.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                               ctypes.c_double, ctypes.c_double, ctypes.c_uint64, ctypes.c_uint64]
lib.fg_to_host.restype = ctypes.c_int
lib.fg_to_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.fg_release.restype = None
lib.fg_release.argtypes = [ctypes.c_void_p]


def _normal(shape, std, seed, stream):
    """fg_rand_normal(float64, CPU, shape, 0, std, seed, stream) as an ndarray: the check's inputs."""
    out = np.empty(shape, np.float64)
    dims = (ctypes.c_int64 * 4)(*shape)
    t = lib.fg_rand_normal(_lib.F64, 0, 4, dims, 0.0, std, seed, stream)
    if not t:
        _lib.raise_status(lib.fgpy_last_status())
    st = lib.fg_to_host(t, out.ctypes.data)
    lib.fg_release(t)
    if st:
        _lib.raise_status(st)
    return out


def _worst(name, a, b):
    """The element where |a - b| is largest, fg_attn_gradcheck's way (equal infinities agree; a
    non-finite difference is the worst)."""
    if a.size == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a.astype(np.float64) - b)
    diff[np.isinf(b) & (a == b)] = 0
    diff[np.isnan(diff)] = np.inf
    i = np.unravel_index(int(np.argmax(diff)), a.shape)
    return Element(name, tuple(int(x) for x in i), float(a[i]), float(b[i]))


def _run(opts, impl, q, k, v, do):
    o, lse, lo = _forward(opts, q, k, v, impl)
    B, H, Nq, d = q.shape
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    a = opts.args(_DTYPES[q.dtype], B, H, k.shape[1], Nq, k.shape[2], d, impl)
    _call(opts, lib.fgpy_attn_backward, ctypes.byref(a), 1, _ptr(dq), _ptr(dk), _ptr(dv), _ptr(do), _ptr(q), _ptr(k),
          _ptr(v), _ptr(o), _ptr(lse), _ptr(lo))
    return o, dq, dk, dv


def gradcheck_attention(*, shape=(2, 2, 8, 11, 4), causal=False, scale=None, dropout=0.0, seed=0, kv_heads=None,
                        window=None, alibi=False, softcap=None, block_q=None, block_k=None, score_mod=None,
                        score_mod_grad=None, mask=None, variant=None, qk_std=1.0):
    """fg_attn_gradcheck — `flashgrad gradcheck attention` — as a GradcheckReport.

    shape: (B, H, Nq, Nk, d), or (B, H, N, d) for Nq = Nk = N. K and V have kv_heads heads (None: H).
    seed draws the inputs (normal; Q and K with std qk_std) and is the dropout seed, as the CLI's
    --seed. Blocks default to 4 x 3 so that the tiles do not divide N. Both implementations run; the
    report's worst elements come from rerunning the checks' computations here on the same inputs.
    Raises ValueError (etc.) when the checks cannot run (bad sizes or options)."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__") or len(shape) not in (4, 5):
        raise TypeError("gradcheck_attention: shape must be (B, H, Nq, Nk, d) or (B, H, N, d), got %s" % (_short(shape),))
    dims = [_int("shape", s, 0, _INT32_MAX) for s in shape]
    if len(dims) == 4:
        dims.insert(3, dims[2])
    B, H, Nq, Nk, d = dims
    qk_std = _real("qk_std", qk_std)
    if not (math.isfinite(qk_std) and qk_std >= 0):
        raise ValueError("gradcheck_attention: qk_std must be finite and >= 0 (0 = 1), got %s" % (_short(qk_std),))
    opts = _Options(causal, scale, dropout, seed, "flash", kv_heads, window, alibi, softcap,
                    4 if block_q is None else block_q, 3 if block_k is None else block_k,
                    score_mod, score_mod_grad, mask, variant)
    Hkv = opts.kv_heads if opts.kv_heads is not None else H
    a = opts.args(_lib.F64, B, H, Hkv, Nq, Nk, d)
    rep = _lib.CheckReport()
    _call(opts, lib.fgpy_attn_gradcheck, ctypes.byref(a), opts.seed, qk_std, ctypes.byref(rep))

    # the checks' inputs (ops/attention_check.c: Philox streams 1..4 of the seed), for the worst elements
    std = qk_std if qk_std > 0 else 1.0
    qs, ks = (B, H, Nq, d), (B, Hkv, Nk, d)
    q, k = _normal(qs, std, opts.seed, 1), _normal(ks, std, opts.seed, 2)
    v, do = _normal(ks, 1.0, opts.seed, 3), _normal(qs, 1.0, opts.seed, 4)
    names = ("O", "dQ", "dK", "dV")
    nf = _run(opts, _lib.NAIVE, q, k, v, do)
    ff = _run(opts, _lib.FLASH, q, k, v, do)
    worst = {("flash f64 vs naive f64", n): _worst(n, a_, b_) for n, a_, b_ in zip(names, ff, nf)}
    skipped = rep.f32_skipped.decode("utf-8", "replace")
    if not skipped:
        r32 = [x.astype(np.float32) for x in (q, k, v, do)]
        ref = _run(opts, _lib.NAIVE, *[x.astype(np.float64) for x in r32])
        n32 = _run(opts, _lib.NAIVE, *r32)
        f32 = _run(opts, _lib.FLASH, *r32)
        for n, a_, b_, c_ in zip(names, f32, n32, ref):
            worst[("flash f32 vs naive f64", n)] = _worst(n, a_, c_)
            worst[("naive f32 vs naive f64", n)] = _worst(n, b_, c_)
    rows = []
    for r in rep.rows[:rep.n_rows]:
        check, tensor = r.check.decode(), r.tensor.decode()
        rows.append(Row(check, tensor, r.max_abs, r.max_rel, r.limit if r.limit != 0 else None,
                        None if r.passed < 0 else bool(r.passed), worst.get((check, tensor))))
    fd = None
    if rep.fd_worst_tensor:
        t = rep.fd_worst_tensor.decode()
        ishape = qs if t == "dQ" else ks
        fd = Element(t, tuple(int(x) for x in np.unravel_index(rep.fd_worst_index, ishape)), rep.fd_analytic,
                     rep.fd_numeric)
    return GradcheckReport(bool(rep.passed), rows, fd, skipped, (B, H, Nq, Nk, d))


# ---- the rest ---------------------------------------------------------------------------------

def variants():
    """The registered C variants, {name: help}, usable as attention(..., variant=name)."""
    out = {}
    i = 0
    while True:
        h = ctypes.c_char_p()
        n = lib.fgpy_variant_name(i, ctypes.byref(h))
        if n is None:
            return out
        out[n.decode()] = (h.value or b"").decode()
        i += 1


def threads():
    """The threads flashgrad's pool computes with (the calling one included). Once flashgrad.torch
    is imported its loops run on torch's OpenMP threads, at most torch.get_num_threads() of them."""
    return lib.fgpy_threads()


def set_threads(n):
    """Sets the pool's thread count (1..64; 0 = the default: $FG_NUM_THREADS, else the CPUs this
    process may use). Call it while no flashgrad call is running in another thread."""
    lib.fgpy_set_threads(_int("threads", n, 0, 64))
