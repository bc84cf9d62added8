#!/usr/bin/env python3
"""attention_dropin_speed.py — forward+backward time of flashgrad.torch's drop-ins against torch's SDPA.

In one process, on CPU float32 tensors, for each N and causal or not (B, H, d from the flags):
  F.sdpa          torch.nn.functional.scaled_dot_product_attention, (B, H, N, d)
  fg.sdpa         flashgrad.torch.scaled_dot_product_attention, the same tensors
  fg.flash_attn   flashgrad.torch.flash_attn_func on (B, N, H, d) tensors
  C op            the kernels alone through flashgrad's flat C interface (fgpy_attn_forward and
                  fgpy_attn_backward on preallocated tensors): what the wrappers add is their overhead
Each figure is the median of --reps timed runs of forward + backward (after one untimed run). Then
varlen against padding: --docs documents of uneven length packed, causal, through
flash_attn_varlen_func, against the same documents padded to the longest and run through
fg.sdpa and F.sdpa with a (padding ∧ causal) bool mask.

    PYTHONPATH=python /work/torch2/bin/python bench/attention_dropin_speed.py [--sizes 512,1024,2048,4096]
        [--B 4] [--H 4] [--d 64] [--reps 3] [--threads 2] [--md FILE]
"""
import argparse
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="512,1024,2048,4096")
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", default="1500,300,700,100,2000,600,900,92")
    ap.add_argument("--md", default=None)
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F
    import flashgrad
    import flashgrad.torch as fgt
    from flashgrad import _lib

    torch.set_num_threads(a.threads)
    flashgrad.set_threads(a.threads)
    B, H, d = a.B, a.H, a.d

    def timed(fn):
        fn()
        ts = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    def fwd_bwd(f, *ins):
        def run():
            for t in ins:
                t.grad = None
            o = f(*ins)
            o.backward(torch.ones_like(o))
        return run

    def c_op(q, k, v, causal):
        N = q.shape[2]
        o, dq, dk, dv, do = (torch.empty_like(q) for _ in range(5))
        do.fill_(1)
        lse = torch.empty(2, B, H, N)
        args = _lib.Args(dtype=_lib.F32, impl=_lib.FLASH, B=B, H=H, H_kv=H, Nq=N, Nk=N, d=d,
                         scale=d ** -0.5, causal=2 if causal else 0)
        L = lse.data_ptr()
        lo = L + lse[1].numel() * 4

        def run(keep=(lse, q, k, v)):  # keep: the closure must own every buffer the C calls write
            st = _lib.lib.fgpy_attn_forward(args, o.data_ptr(), L, lo, q.data_ptr(), k.data_ptr(), v.data_ptr())
            st = st or _lib.lib.fgpy_attn_backward(args, 1, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                                   do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                   o.data_ptr(), L, lo)
            assert st == 0
        return run

    rows = []
    print("B %d H %d d %d float32, %d threads, torch %s" % (B, H, d, a.threads, torch.__version__), flush=True)
    for N in [int(x) for x in a.sizes.split(",")]:
        for causal in (False, True):
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, H, N, d, requires_grad=True) for _ in range(3))
            qf, kf, vf = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
            t_sd = timed(fwd_bwd(lambda *x: F.scaled_dot_product_attention(*x, is_causal=causal), q, k, v))
            t_fs = timed(fwd_bwd(lambda *x: fgt.scaled_dot_product_attention(*x, is_causal=causal), q, k, v))
            t_fa = timed(fwd_bwd(lambda *x: fgt.flash_attn_func(*x, causal=causal), qf, kf, vf))
            t_c = timed(c_op(q.detach(), k.detach(), v.detach(), causal))
            rows.append((N, causal, t_sd, t_fs, t_fa, t_c))
            print("N %5d causal %-5s F.sdpa %8.1f ms  fg.sdpa %8.1f ms  fg.flash_attn %8.1f ms  C op %8.1f ms  "
                  "fg.sdpa overhead %+.1f%%  flash_attn overhead %+.1f%%"
                  % (N, causal, 1e3 * t_sd, 1e3 * t_fs, 1e3 * t_fa, 1e3 * t_c, 100 * (t_fs / t_c - 1),
                     100 * (t_fa / t_c - 1)), flush=True)

    # varlen against padding
    lens = [int(x) for x in a.docs.split(",")]
    n, T = len(lens), sum(lens)
    Lm = max(lens)
    torch.manual_seed(1)
    qp, kp, vp = (torch.randn(T, H, d, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(n)], dtype=torch.int32)
    t_var = timed(fwd_bwd(lambda *x: fgt.flash_attn_varlen_func(*x, cu, cu, Lm, Lm, causal=True), qp, kp, vp))
    pad = torch.zeros(n, H, Lm, d)
    for i, l in enumerate(lens):
        pad[i, :, :l] = qp.detach()[cu[i]:cu[i + 1]].transpose(0, 1)
    qq, kk, vv = (pad.clone().requires_grad_() for _ in range(3))
    valid = torch.arange(Lm)[None, :] < torch.tensor(lens)[:, None]  # (n, Lm)
    mask = (valid[:, None, None, :] & torch.ones(Lm, Lm, dtype=torch.bool).tril()[None, None])
    t_pfg = timed(fwd_bwd(lambda *x: fgt.scaled_dot_product_attention(*x, attn_mask=mask), qq, kk, vv))
    t_psd = timed(fwd_bwd(lambda *x: F.scaled_dot_product_attention(*x, attn_mask=mask), qq, kk, vv))
    print("varlen: %d documents %s (%d tokens, longest %d), causal: flash_attn_varlen_func %.1f ms; padded to "
          "%d x %d with a bool mask: fg.sdpa %.1f ms, F.sdpa %.1f ms" % (n, lens, T, Lm, 1e3 * t_var, n, Lm,
                                                                       1e3 * t_pfg, 1e3 * t_psd), flush=True)
    lines = ["forward+backward, B %d H %d d %d float32, %d threads, torch %s (median of %d)" %
             (B, H, d, a.threads, torch.__version__, a.reps), "",
             "| N | causal | F.sdpa ms | fg.sdpa ms | fg.flash_attn_func ms | C op ms | fg.sdpa / F.sdpa | "
             "fg.sdpa over C op | flash_attn_func over C op |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for N, c, t_sd, t_fs, t_fa, t_c in rows:
        lines.append("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %+.1f%% | %+.1f%% |" %
                     (N, c, 1e3 * t_sd, 1e3 * t_fs, 1e3 * t_fa, 1e3 * t_c, t_fs / t_sd, 100 * (t_fs / t_c - 1),
                      100 * (t_fa / t_c - 1)))
    lines += ["", "varlen, %d causal documents of %s tokens (%d in all): flash_attn_varlen_func %.1f ms; padded to "
              "%d x %d with a bool mask: fg.sdpa %.1f ms, F.sdpa %.1f ms" % (n, "/".join(map(str, lens)), T,
                                                                              1e3 * t_var, n, Lm, 1e3 * t_pfg,
                                                                              1e3 * t_psd)]
    text = "\n".join(lines)
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
