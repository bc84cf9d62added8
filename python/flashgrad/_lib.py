"""_lib.py — finds libflashgrad.so, declares its C functions (ctypes) and turns its errors into exceptions.

The library is looked for, in order:
  1. $FLASHGRAD_LIB, when set (a path to the .so; an error if it cannot be loaded);
  2. libflashgrad.so next to this file (what `pip install ./python` installs);
  3. build/libflashgrad.so of the source tree this package sits in (python/flashgrad/ in a checkout
     where `make shared` ran).

The Python side calls the flat interface of python/csrc/fgpy.h, never the library's nested option
structs, and checks at load time that its mirror of fgpy_attn_args has the C size and ABI version.
ctypes releases the GIL for every call into the library, so flashgrad computes while other Python
threads run; each thread reads its own error message (the library's error buffer is per thread).
"""
import ctypes
import importlib.util
import os
import sys

__all__ = ["lib", "lib_path", "Args", "CheckReport", "SCORE_MOD_FN", "MASK_FN", "raise_status", "F32", "F64",
           "BF16", "CPU", "CUDA", "NAIVE", "FLASH"]

ABI_VERSION = 3
F32, F64, BF16 = 0, 1, 2  # fg_dtype
CPU, CUDA = 0, 1          # fg_device
NAIVE, FLASH = 0, 1      # fg_attn_impl

# fg_status (tensor/error.h) -> the exception a Python caller expects
_OK, _ARG, _SHAPE, _DTYPE, _DEVICE, _OOM, _IO, _FORMAT, _STATE, _NUMERIC = range(10)
_EXC = {_ARG: ValueError, _SHAPE: ValueError, _DTYPE: TypeError, _DEVICE: ValueError, _OOM: MemoryError,
        _IO: OSError, _FORMAT: ValueError, _STATE: RuntimeError, _NUMERIC: ValueError}

SCORE_MOD_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_void_p)
MASK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_void_p)


class Args(ctypes.Structure):
    """fgpy_attn_args (python/csrc/fgpy.h), field for field."""
    _fields_ = [
        ("dtype", ctypes.c_int32), ("device", ctypes.c_int32), ("impl", ctypes.c_int32),
        ("B", ctypes.c_int64), ("H", ctypes.c_int64), ("H_kv", ctypes.c_int64),
        ("Nq", ctypes.c_int64), ("Nk", ctypes.c_int64), ("d", ctypes.c_int64),
        ("scale", ctypes.c_double), ("causal", ctypes.c_int32),
        ("block_q", ctypes.c_int32), ("block_k", ctypes.c_int32),
        ("dropout", ctypes.c_double), ("seed", ctypes.c_uint64),
        ("window", ctypes.c_int32), ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
        ("alibi", ctypes.c_int32), ("alibi_slopes", ctypes.c_void_p), ("softcap", ctypes.c_double),
        ("score_mod", SCORE_MOD_FN), ("score_mod_grad", SCORE_MOD_FN), ("mask", MASK_FN),
        ("user", ctypes.c_void_p), ("custom", ctypes.c_char_p),
        ("mask_data", ctypes.c_void_p), ("mask_kind", ctypes.c_int32), ("mask_stride", ctypes.c_int64 * 4),
    ]


_MAX_ROWS = 16  # FG_ATTN_CHECK_MAX_ROWS


class CheckRow(ctypes.Structure):
    _fields_ = [("check", ctypes.c_char_p), ("tensor", ctypes.c_char_p), ("max_abs", ctypes.c_double),
                ("max_rel", ctypes.c_double), ("limit", ctypes.c_double), ("passed", ctypes.c_int32)]


class CheckReport(ctypes.Structure):
    """fgpy_check_report (python/csrc/fgpy.h)."""
    _fields_ = [("passed", ctypes.c_int32), ("n_rows", ctypes.c_int32), ("rows", CheckRow * _MAX_ROWS),
                ("fd_worst_tensor", ctypes.c_char_p), ("fd_worst_index", ctypes.c_int64),
                ("fd_analytic", ctypes.c_double), ("fd_numeric", ctypes.c_double),
                ("f32_skipped", ctypes.c_char * 256)]


def _candidates():
    env = os.environ.get("FLASHGRAD_LIB")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libflashgrad.so"),
            os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libflashgrad.so")], False


def _torch_first(path):
    """Import torch before a libflashgrad.so built with CUDA, when torch is installed: that library
    needs libcudart, libcublas and libnccl by soname, and in one process the first copy of a soname
    loaded serves everyone. torch's CUDA build must load its own (newer) ones first, else importing
    torch after flashgrad fails (undefined NCCL symbols); flashgrad then runs on torch's copies."""
    if "torch" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)  # the dynamic section's names are near the start
    except OSError:
        return
    if b"libcudart.so" in head or b"libnccl.so" in head:
        try:
            import torch  # noqa: F401
        except ImportError:
            pass


def _load():
    paths, from_env = _candidates()
    errors = []
    for p in paths:
        if not from_env and not os.path.exists(p):
            continue
        _torch_first(p)
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            if from_env:
                raise ImportError("flashgrad: cannot load FLASHGRAD_LIB=%s: %s" % (p, e)) from None
            errors.append("%s: %s" % (p, e))
    raise ImportError("flashgrad: libflashgrad.so not found (looked for %s; build it with `make shared` or set "
                      "FLASHGRAD_LIB)%s" % (", ".join(paths), ("; " + "; ".join(errors)) if errors else ""))


lib, lib_path = _load()

_P = ctypes.c_void_p
_ARGS_P = ctypes.POINTER(Args)
for _name, _res, _argt in [
    ("fgpy_abi_version", ctypes.c_int, []),
    ("fgpy_attn_args_size", ctypes.c_size_t, []),
    ("fgpy_check_report_size", ctypes.c_size_t, []),
    ("fgpy_attn_forward", ctypes.c_int, [_ARGS_P, _P, _P, _P, _P, _P, _P]),
    ("fgpy_attn_backward", ctypes.c_int, [_ARGS_P, ctypes.c_int, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    ("fgpy_attn_varlen_forward", ctypes.c_int, [_ARGS_P, _P, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P,
                                                 _P, _P, _P, _P, _P, _P]),
    ("fgpy_attn_varlen_backward", ctypes.c_int, [_ARGS_P, _P, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                  _P, ctypes.c_int, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    ("fgpy_attn_gradcheck", ctypes.c_int, [_ARGS_P, ctypes.c_uint64, ctypes.c_double, ctypes.POINTER(CheckReport)]),
    ("fgpy_attn_dropout_keep", ctypes.c_int, [ctypes.c_uint64, ctypes.c_double, ctypes.c_int64, ctypes.c_int64,
                                               ctypes.c_int64, ctypes.c_int64, _P]),
    ("fgpy_variant_name", ctypes.c_char_p, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    ("fgpy_last_error", ctypes.c_char_p, []),
    ("fgpy_last_status", ctypes.c_int, []),
    ("fgpy_clear_error", None, []),
    ("fgpy_threads", ctypes.c_int, []),
    ("fgpy_set_threads", None, [ctypes.c_int]),
    ("fgpy_use_openmp", ctypes.c_int, [_P, _P, _P]),
    ("fgpy_cuda_built", ctypes.c_int, []),
    ("fgpy_cuda_start", ctypes.c_int, []),
]:
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        raise ImportError("flashgrad: %s has no %s: it is not a libflashgrad.so built by `make shared` of this "
                          "version" % (lib_path, _name)) from None
    _f.restype = _res
    _f.argtypes = _argt

if lib.fgpy_abi_version() != ABI_VERSION or lib.fgpy_attn_args_size() != ctypes.sizeof(Args) or \
        lib.fgpy_check_report_size() != ctypes.sizeof(CheckReport):
    raise ImportError("flashgrad: %s was built from another version of flashgrad (interface %d, the package "
                      "expects %d); rebuild it with `make shared`" % (lib_path, lib.fgpy_abi_version(), ABI_VERSION))

# The registry of named variants initializes itself on first use: do that now, on one thread.
lib.fgpy_variant_name(0, None)


def raise_status(st):
    """Raise the exception for a nonzero fg_status, with the calling thread's flashgrad message."""
    msg = lib.fgpy_last_error()
    msg = msg.decode("utf-8", "replace") if msg else "flashgrad error %d" % st
    lib.fgpy_clear_error()
    exc = _EXC.get(st, RuntimeError)(msg)
    exc.fg_status = st
    raise exc
