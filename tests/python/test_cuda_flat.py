"""The flat C interface (python/csrc/fgpy.h) with device = cuda, on any machine: a library built
without CUDA refuses naming how to build one; one built with CUDA on a machine without a device says
there is none; bfloat16 is refused on the CPU and the varlen calls on CUDA. No torch needed, no GPU
used (python/flashgrad/_torch_device.py is the torch side; tests/python/test_torch_cuda.py tests it)."""
import ctypes

import flashgrad._lib as L

BUILT = bool(L.lib.fgpy_cuda_built())


def _has_gpu():
    """A CUDA library that can start its device (only then do the calls get past the start)."""
    if not BUILT:
        return False
    ok = L.lib.fgpy_cuda_start() == 0
    L.lib.fgpy_clear_error()
    return ok


def test_flat_interface_refuses_cuda_without_it():
    """The C call with device = cuda: a CPU-only library names how to build with CUDA; a CUDA one
    without a device says there is none. Either way one error, no crash (NULL pointers are never read)."""
    a = L.Args(dtype=L.F32, device=L.CUDA, impl=L.FLASH, B=1, H=1, H_kv=1, Nq=4, Nk=4, d=8)
    st = L.lib.fgpy_attn_forward(a, None, None, None, None, None, None)
    msg = L.lib.fgpy_last_error().decode()
    L.lib.fgpy_clear_error()
    if _has_gpu():
        assert st != 0 and "NULL array" in msg
    else:
        assert st != 0
        assert ("built without CUDA" in msg and "make shared" in msg) if not BUILT else "CUDA" in msg, msg


def test_flat_interface_bf16_is_cuda_only():
    a = L.Args(dtype=L.BF16, device=L.CPU, impl=L.FLASH, B=1, H=1, H_kv=1, Nq=2, Nk=2, d=8)
    q = (ctypes.c_uint16 * 16)()
    o = (ctypes.c_uint16 * 16)()
    lse = (ctypes.c_float * 2)()
    st = L.lib.fgpy_attn_forward(a, ctypes.addressof(o), ctypes.addressof(lse), None, ctypes.addressof(q),
                                 ctypes.addressof(q), ctypes.addressof(q))
    msg = L.lib.fgpy_last_error().decode()
    L.lib.fgpy_clear_error()
    assert st != 0 and "bfloat16 on cuda" in msg, msg


def test_flat_interface_varlen_is_cpu_only():
    a = L.Args(dtype=L.F32, device=L.CUDA, impl=L.FLASH, B=1, H=1, H_kv=1, Nq=2, Nk=2, d=8)
    st = L.lib.fgpy_attn_varlen_forward(a, None, None, 1, 2, 2, None, None, None, None, None, None, None)
    msg = L.lib.fgpy_last_error().decode()
    L.lib.fgpy_clear_error()
    assert st != 0 and "CPU tensors only" in msg, msg
