"""ops_llama_torch_check.py DIR — checks flashgrad's rmsnorm, rope, relu2, swiglu and softcap
against PyTorch, forward and gradients. Run by tests/test_ops_llama.c, which writes into DIR
cases.txt (one line per case: name, op, dtype, parameter, pos0) and, per case, NAME_in0.npy
(NAME_in1.npy: rmsnorm's weight or SwiGLU's b), NAME_dout.npy, and flashgrad's NAME_out.npy and
NAME_grad0.npy (NAME_grad1.npy). The references:
  rmsnorm:   torch.nn.functional.rms_norm(x, (C,), weight, eps)
  rope:      transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb (its cos and sin come
             from float32 angles, so the tolerance is float32's), and the same formula in torch
             with float64 angles (flashgrad's)
  relu2:     F.relu(x) ** 2           swiglu: F.silu(a) * b           softcap: c * tanh(x / c)
Exits 0 when every comparison holds, 1 otherwise, 77 when torch (or numpy) is missing or older than 2.4."""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"cannot run: {e} (set FG_TORCH_PYTHON to a python with torch)")
    sys.exit(77)
if not hasattr(F, "rms_norm"):  # Debian's python3-torch is 1.13
    print(f"cannot run: torch {torch.__version__} has no torch.nn.functional.rms_norm (PyTorch >= 2.4; set "
          "FG_TORCH_PYTHON to a newer one)")
    sys.exit(77)


def load(d, name, what):
    p = os.path.join(d, f"{name}_{what}.npy")
    return torch.from_numpy(np.load(p)) if os.path.exists(p) else None


def rope_formula(x, theta, pos0):
    """out = x cos + rotate_half(x) sin, angles in float64 then cast (what flashgrad does)."""
    B, H, T, D = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    pos = torch.arange(pos0, pos0 + T, dtype=torch.float64)
    ang = torch.outer(pos, inv)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_hf(x, theta, pos0):
    """transformers' Llama rotary embedding, or None (with the reason) where it cannot be built."""
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    except Exception as e:  # noqa: BLE001 - any import failure means "no transformers"
        return None, f"transformers not importable ({type(e).__name__})"
    B, H, T, D = x.shape
    cfg = LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D, rope_theta=theta,
                      max_position_embeddings=max(2048, pos0 + T))
    if getattr(cfg, "rope_parameters", None) is not None:  # transformers 5: the theta lives here
        cfg.rope_parameters["rope_theta"] = theta
    rot = LlamaRotaryEmbedding(cfg)
    ids = torch.arange(pos0, pos0 + T).unsqueeze(0).expand(B, T)
    cos, sin = rot(x, ids)
    q, _ = apply_rotary_pos_emb(x, x, cos, sin)
    return q, None


def main():
    d = sys.argv[1]
    bad = 0
    n = 0
    with open(os.path.join(d, "cases.txt")) as f:
        lines = [ln.split() for ln in f if ln.strip()]
    for name, op, dtype, p, pos0 in lines:
        p, pos0 = float(p), int(pos0)
        x, y, dout = load(d, name, "in0"), load(d, name, "in1"), load(d, name, "dout")
        got = [load(d, name, "out"), load(d, name, "grad0"), load(d, name, "grad1")]
        tol = 2e-6 if dtype == "float32" else 1e-12
        x = x.clone().requires_grad_(True)
        if y is not None:
            y = y.clone().requires_grad_(True)
        extra = []
        if op in ("rmsnorm", "rmsnorm_w"):
            out = F.rms_norm(x, (x.shape[-1],), y, p)
        elif op == "rope":
            out = rope_formula(x, p, pos0)
            hf, why = rope_hf(x.detach(), p, pos0)
            if hf is None:
                print(f"{name}: transformers' rotary embedding skipped: {why}")
            else:
                extra.append(("out vs transformers", hf, got[0], 2e-6))
        elif op == "relu2":
            out = F.relu(x) ** 2
        elif op == "swiglu":
            out = F.silu(x) * y
        elif op == "softcap":
            out = p * torch.tanh(x / p)
        else:
            print(f"{name}: unknown op {op}")
            return 1
        out.backward(dout)
        want = [out.detach(), x.grad, y.grad if y is not None else None]
        checks = [(w, want[i], got[i], tol) for i, w in enumerate(("out", "grad0", "grad1")) if want[i] is not None]
        for what, ref, val, t in checks + extra:
            n += 1
            if val is None:
                print(f"{name}: {what}: flashgrad wrote nothing")
                bad += 1
                continue
            ref = ref.detach().to(torch.float64)
            val = val.to(torch.float64)
            scale = max(ref.abs().max().item(), 1.0)
            err = (ref - val).abs().max().item() / scale
            ok = err <= t
            bad += not ok
            print(f"{name}: {what}: max error {err:.3g} of max {scale:.3g} ({'ok' if ok else 'FAIL'}, tolerance {t:g})")
    print(f"{n - bad} of {n} comparisons within tolerance (torch {torch.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
