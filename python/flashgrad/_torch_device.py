"""_torch_device.py — the device a flashgrad.torch call runs on, and the CUDA boundary around it.

CPU tensors run on the CPU kernels as always. CUDA tensors run flashgrad's CUDA kernels in place on
their device memory (no copy to the host), which needs:
  - a libflashgrad.so that holds flashgrad's CUDA code (`make shared` with nvcc on PATH writes
    build-cuda/libflashgrad.so; FLASHGRAD_LIB names it), else one clear error saying so;
  - every tensor of the call on one device (q on the CPU with k on CUDA is refused), and that device
    the one flashgrad runs on: cuda:0, or $FG_CUDA_DEVICE as read when flashgrad's CUDA starts;
  - float32, float64 or bfloat16 (bfloat16: flashgrad's bf16 tensor-core flash kernels, float32
    logsumexp); float16 is refused (flashgrad has no float16 kernels).

Streams: flashgrad queues its kernels on a stream of its own, not on torch's. Each call is therefore
bracketed by two synchronizations: torch's current stream first (so the inputs torch wrote are
complete), then flashgrad's stream (the C call waits for it before returning), so the outputs are
complete when the call returns and torch may use them on any stream. Correct, not overlapped: the
host waits twice per call.
"""
import os

import torch

from . import _lib
from ._lib import lib

__all__ = ["device_of", "start", "call", "CUDA_DT", "cuda_dtype"]

CUDA_DT = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.bfloat16: _lib.BF16}

_index = None  # the CUDA device index flashgrad started on, once it has


def device_of(api, named):
    """The one device of the tensors in named ((name, tensor or None), ...): None for the CPU, the
    torch.device for CUDA. ValueError for tensors on two devices or on one flashgrad has no kernels for."""
    dev, first = None, None
    for name, t in named:
        if t is None:
            continue
        if dev is None:
            dev, first = t.device, name
        elif t.device != dev:
            raise ValueError("%s: %s is on %s but %s is on %s; flashgrad needs every tensor of a call on one device"
                             % (api, first, dev, name, t.device))
    if dev is None or dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError("%s: %s is on %s; flashgrad takes CPU or CUDA tensors" % (api, first, dev))
    return dev


def cuda_dtype(api, name, dt):
    """flashgrad's dtype code for a CUDA tensor of torch dtype dt; TypeError for the others."""
    code = CUDA_DT.get(dt)
    if code is None:
        if dt == torch.float16:
            raise TypeError("%s: %s is float16 on CUDA; flashgrad has no float16 kernels (use bfloat16 or float32)"
                            % (api, name))
        raise TypeError("%s: %s has dtype %s; on CUDA flashgrad takes float32, float64 or bfloat16" % (api, name, dt))
    return code


def _fg_index():
    env = os.environ.get("FG_CUDA_DEVICE", "")
    try:
        return int(env) if env.strip() else 0
    except ValueError:
        return None  # the library refuses it at start, with its own message


def start(api, dev):
    """Make flashgrad's CUDA usable for tensors on dev (a CUDA torch.device); raises when it cannot:
    a library built without CUDA, no device, or dev not the device flashgrad runs on."""
    global _index
    if not lib.fgpy_cuda_built():
        raise RuntimeError("%s: the tensors are on %s but %s was built without CUDA; build the shared library "
                           "with nvcc on PATH (`make shared` writes build-cuda/libflashgrad.so) and load it with "
                           "FLASHGRAD_LIB=build-cuda/libflashgrad.so" % (api, dev, _lib.lib_path))
    idx = dev.index if dev.index is not None else torch.cuda.current_device() if torch.cuda.is_available() else 0
    if _index is None:
        want = _fg_index()
        if want is not None and want != idx:
            raise ValueError("%s: the tensors are on cuda:%d but flashgrad runs on cuda:%d (set FG_CUDA_DEVICE=%d "
                             "before the first call to use that device)" % (api, idx, want, idx))
        if torch.cuda.is_available():
            with torch.cuda.device(idx):
                st = lib.fgpy_cuda_start()
        else:  # (only tensors without memory get here) flashgrad says why it has no device
            st = lib.fgpy_cuda_start()
        if st:
            _lib.raise_status(st)
        _index = want if want is not None else idx
    elif idx != _index:
        raise ValueError("%s: the tensors are on cuda:%d but flashgrad runs on cuda:%d (the device it started on; "
                         "FG_CUDA_DEVICE picks it before the first call)" % (api, idx, _index))
    return idx


def call(dev, fn, *args):
    """fn(*args), a flashgrad C call on memory of CUDA device dev: with dev current on this thread,
    after torch's current stream has finished (the C call itself waits for flashgrad's stream)."""
    with torch.cuda.device(dev):
        torch.cuda.current_stream(dev).synchronize()
        return fn(*args)
