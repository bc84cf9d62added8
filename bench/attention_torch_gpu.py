#!/usr/bin/env python3
"""attention_torch_gpu.py — PyTorch's scaled_dot_product_attention on the GPU, timed on the same
shapes and precision as flashgrad's fg_cuda_bench (bench/fg_cuda_bench.cu), CSV on stdout:

    impl,dtype,B,H,N,d,causal,fwd_ms,bwd_ms,fwd_tflops,bwd_tflops

Shapes: batch · N = --tokens (16k), heads · d = --hidden (2048). FLOPs as in fg_cuda_bench
(forward 4·B·H·N²·d, halved when causal; backward 2.5× that). Timing: CUDA events, one warm-up,
median of repeats within --budget-ms. TF32 is switched off so float32 means float32; the impl
column names the SDPA backend PyTorch ran (its choice for that dtype), as far as it can be told.

    python3 bench/attention_torch_gpu.py [--n 1024,4096,16384] [--d 64,128] [--dtype float32]
                                         [--backends flash,cudnn]

--backends names SDPA backends (flash, cudnn, efficient, math) to time one by one, a row each (a
backend that refuses a shape gives a row of nan); without it the first backend that takes the
inputs gives the row.
"""
import argparse
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1024,4096,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--budget-ms", type=float, default=1500.0)
    ap.add_argument("--backends", default="", help="comma-separated: flash,cudnn,efficient,math (a row each)")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("attention_torch_gpu.py: PyTorch is not installed", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("attention_torch_gpu.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, a.dtype)
    dev = torch.device("cuda")
    print(f"attention_torch_gpu.py: torch {torch.__version__} on {torch.cuda.get_device_name(0)}", file=sys.stderr)

    # Try the memory-efficient kernel first (the fused one that supports float32), then let PyTorch choose.
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        # each backend pinned, so the impl column names the kernel that really ran: in float32 the
        # memory-efficient kernel computes its products as 3xTF32 on tensor cores (not FFMA
        # float32); flash and cuDNN take half precision only; math is the unfused reference
        if a.dtype == "bfloat16":
            candidates = [("sdpa-flash", [SDPBackend.FLASH_ATTENTION]),
                          ("sdpa-cudnn", [SDPBackend.CUDNN_ATTENTION]),
                          ("sdpa-efficient", [SDPBackend.EFFICIENT_ATTENTION]), ("sdpa-math", [SDPBackend.MATH])]
        elif a.dtype == "float32":
            candidates = [("sdpa-efficient-3xtf32", [SDPBackend.EFFICIENT_ATTENTION]), ("sdpa-math", [SDPBackend.MATH])]
        else:
            candidates = [("sdpa-math", [SDPBackend.MATH])]
        if a.backends:
            named = {"flash": ("sdpa-flash", [SDPBackend.FLASH_ATTENTION]),
                     "cudnn": ("sdpa-cudnn", [SDPBackend.CUDNN_ATTENTION]),
                     "efficient": ("sdpa-efficient", [SDPBackend.EFFICIENT_ATTENTION]),
                     "math": ("sdpa-math", [SDPBackend.MATH])}
            try:
                groups = [[named[b]] for b in a.backends.split(",")]
            except KeyError as ex:
                print(f"attention_torch_gpu.py: unknown backend {ex} (flash, cudnn, efficient, math)", file=sys.stderr)
                return 2
        else:
            groups = [candidates]
    except ImportError:  # older PyTorch
        if a.backends:
            print("attention_torch_gpu.py: --backends needs torch.nn.attention (PyTorch 2.3 or later)", file=sys.stderr)
            return 2
        sdpa_kernel = None
        groups = [[("sdpa-default-unknown", None)]]

    def timed(fn, budget):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda.synchronize()
        ts = []
        while len(ts) < 3 or (sum(ts) < budget and len(ts) < 20):
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
            if len(ts) >= 3 and sum(ts) > 4 * budget:
                break
        return statistics.median(ts)

    def one_row(candidates, q, k, v, do, B, H, N, d, causal):
        """the CSV row of the first of candidates that takes the inputs (nan: none did)"""
        row = None
        for name, backends in candidates:
            try:
                def fwd():
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                def run(f):
                    if backends is None:
                        return f()
                    with sdpa_kernel(backends):
                        return f()

                run(fwd)
                tf = timed(lambda: run(fwd), a.budget_ms)
                out = run(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))

                def bwd():
                    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

                tb = timed(bwd, a.budget_ms)
                fl = 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
                row = f"{name},{a.dtype},{B},{H},{N},{d},{causal},{tf:.3f},{tb:.3f},{fl / (tf * 1e9):.2f},{2.5 * fl / (tb * 1e9):.2f}"
                del out
                break
            except RuntimeError as ex:  # backend refused these inputs (or out of memory): next one
                print(f"attention_torch_gpu.py: {name} N={N} d={d} causal={causal}: {str(ex).splitlines()[0]}",
                      file=sys.stderr)
                torch.cuda.empty_cache()
        if row is None:
            impl = candidates[0][0] if len(candidates) == 1 else "none"
            row = f"{impl},{a.dtype},{B},{H},{N},{d},{causal},nan,nan,nan,nan"
        return row

    print("impl,dtype,B,H,N,d,causal,fwd_ms,bwd_ms,fwd_tflops,bwd_tflops")
    for N in [int(x) for x in a.n.split(",")]:
        for d in [int(x) for x in a.d.split(",")]:
            for causal in (0, 1):
                B, H = max(1, a.tokens // N), max(1, a.hidden // d)
                q, k, v, do = (torch.randn(B, H, N, d, device=dev, dtype=dtype, requires_grad=i < 3) for i in range(4))
                for candidates in groups:
                    print(one_row(candidates, q, k, v, do, B, H, N, d, causal), flush=True)
                del q, k, v, do
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
