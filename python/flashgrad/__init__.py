"""flashgrad — exact flash attention (forward, backward, variants, gradient checks) from Python.

A thin layer over the C library libflashgrad.so (ctypes, no compiled extension): numpy arrays are
handed to the C kernels without copies when they are C-contiguous float32/float64, and the GIL is
released while flashgrad computes.

    import flashgrad
    o, lse = flashgrad.attention(q, k, v, causal=True, return_lse=True)      # q (B, H, N, d)
    dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, causal=True)
    print(flashgrad.gradcheck_attention(shape=(2, 4, 16, 16, 8), softcap=5.0))

    import flashgrad.torch                                # when PyTorch is installed
    y = flashgrad.torch.attention(q, k, v, causal=True)   # an autograd.Function on CPU (or CUDA) tensors

Errors are ValueError (bad sizes or options), TypeError (dtypes, argument types), MemoryError and
the like, carrying flashgrad's message. The library is found next to this package (pip install),
through $FLASHGRAD_LIB, or in the source tree's build/ (make shared).
"""
from ._lib import lib_path
from ._attention import (GradcheckReport, attention, attention_backward, gradcheck_attention, set_threads, threads,
                         variants)

__version__ = "0.1.0"
__all__ = ["attention", "attention_backward", "gradcheck_attention", "GradcheckReport", "variants", "threads",
           "set_threads", "lib_path", "__version__"]
