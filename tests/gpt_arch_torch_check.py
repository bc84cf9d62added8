"""gpt_arch_torch_check.py DIR — checks flashgrad's Llama- and nanochat-style models (train/gpt.h's
architecture options) against PyTorch: the logits, the loss and the gradient of every parameter.
Run by tests/test_gpt_arch.c, which writes into DIR cases.txt (one line per case: its name, the
configuration as key=value, flashgrad's loss, the tokens x and the targets y) and, per case and
parameter, NAME__w__PARAM.npy (the weights), NAME__grad__PARAM.npy (flashgrad's gradient of the
mean cross-entropy) and NAME__out__logits.npy, all float64.

Two references:
  1. A module written here from the math (float64 throughout): embeddings, learned or rotary
     positions (rotate_half layout, or turned the other way as nanochat does), LayerNorm / RMSNorm with or without a weight, QK-norm after
     the rotary embedding, grouped-query attention with causal and sliding-window masks, GELU-tanh,
     SwiGLU or ReLU² MLPs, tied or untied head, logit softcap. Every case; float64 tolerances.
  2. transformers' LlamaForCausalLM (arch=llama) and NanoChatForCausalLM (arch=nanochat, no window)
     with the state dict as flashgrad names it, loaded strictly (a tied head aside). They compute
     their norms and rotary angles in float32 even in a float64 model, so the tolerance is
     float32's.
Exits 0 when every comparison holds, 1 otherwise, 77 when torch (or numpy) is missing."""
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"cannot run: {e} (set FG_TORCH_PYTHON to a python with torch)")
    sys.exit(77)

try:
    import transformers
except ImportError:
    transformers = None


def parse_cases(d):
    cases = []
    with open(os.path.join(d, "cases.txt")) as f:
        for line in f:
            parts = line.split()
            kv = dict(p.split("=", 1) for p in parts[1:])
            c = {"name": parts[0]}
            for k, v in kv.items():
                if k in ("x", "y"):
                    c[k] = [int(t) for t in v.split(",")]
                elif k in ("arch", "pos", "norm", "mlp", "window"):
                    c[k] = v
                elif k in ("theta", "eps", "softcap", "loss"):
                    c[k] = float(v)
                else:
                    c[k] = int(v)
            cases.append(c)
    return cases


def load_weights(d, name):
    w, g = {}, {}
    for fn in os.listdir(d):
        if not fn.startswith(name + "__") or not fn.endswith(".npy"):
            continue
        _, what, pname = fn[:-4].split("__", 2)
        t = torch.from_numpy(np.load(os.path.join(d, fn)))
        if what == "w":
            w[pname] = t
        elif what == "grad":
            g[pname] = t
        else:
            w["__" + pname] = t
    return w, g


# ---- reference 1: the model from the math ----


def names(c):
    """The parameter names of c's family, per role (a format with %d for the layer)."""
    if c["arch"] == "gpt2":
        return {
            "emb": "transformer.wte.weight", "pos": "transformer.wpe.weight",
            "embn_w": "transformer.ln_e.weight", "embn_b": "transformer.ln_e.bias",
            "ln1_w": "transformer.h.%d.ln_1.weight", "ln1_b": "transformer.h.%d.ln_1.bias",
            "qkv_w": "transformer.h.%d.attn.c_attn.weight", "qkv_b": "transformer.h.%d.attn.c_attn.bias",
            "o_w": "transformer.h.%d.attn.c_proj.weight", "o_b": "transformer.h.%d.attn.c_proj.bias",
            "ln2_w": "transformer.h.%d.ln_2.weight", "ln2_b": "transformer.h.%d.ln_2.bias",
            "gate_w": "transformer.h.%d.mlp.c_gate.weight", "gate_b": "transformer.h.%d.mlp.c_gate.bias",
            "up_w": "transformer.h.%d.mlp.c_fc.weight", "up_b": "transformer.h.%d.mlp.c_fc.bias",
            "down_w": "transformer.h.%d.mlp.c_proj.weight", "down_b": "transformer.h.%d.mlp.c_proj.bias",
            "lnf_w": "transformer.ln_f.weight", "lnf_b": "transformer.ln_f.bias", "head": "lm_head.weight",
        }
    nano = c["arch"] == "nanochat"
    p = "model.layers.%d."
    return {
        "emb": "model.embed_tokens.weight", "pos": "model.embed_positions.weight",
        "embn_w": "model.embed_norm.weight", "embn_b": "model.embed_norm.bias",
        "ln1_w": p + "input_layernorm.weight", "ln1_b": p + "input_layernorm.bias",
        "q_w": p + "self_attn.q_proj.weight", "k_w": p + "self_attn.k_proj.weight", "v_w": p + "self_attn.v_proj.weight",
        "q_b": p + "self_attn.q_proj.bias", "k_b": p + "self_attn.k_proj.bias", "v_b": p + "self_attn.v_proj.bias",
        "o_w": p + "self_attn.o_proj.weight", "o_b": p + "self_attn.o_proj.bias",
        "ln2_w": p + "post_attention_layernorm.weight", "ln2_b": p + "post_attention_layernorm.bias",
        "gate_w": p + ("mlp.fc_gate.weight" if nano else "mlp.gate_proj.weight"),
        "gate_b": p + ("mlp.fc_gate.bias" if nano else "mlp.gate_proj.bias"),
        "up_w": p + ("mlp.fc1.weight" if nano else "mlp.up_proj.weight"),
        "up_b": p + ("mlp.fc1.bias" if nano else "mlp.up_proj.bias"),
        "down_w": p + ("mlp.fc2.weight" if nano else "mlp.down_proj.weight"),
        "down_b": p + ("mlp.fc2.bias" if nano else "mlp.down_proj.bias"),
        "lnf_w": "model.norm.weight", "lnf_b": "model.norm.bias", "head": "lm_head.weight",
    }


def reference_loss(c, P):
    """The logits (B, T, V) and the mean cross-entropy of case c with parameters P (name -> leaf)."""
    N = names(c)
    get = lambda role, l=None: P.get(N[role] % l if l is not None else N[role])
    B, T = c["B"], c["Tq"]
    C, H, Hkv, L, V = c["C"], c["H"], c["Hkv"], c["L"], c["V"]
    hd = C // H
    eps = c["eps"]
    idx = torch.tensor(c["x"]).view(B, T)
    tgt = torch.tensor(c["y"])

    def norm(x, w, b):
        if c["norm"] == "layernorm":
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            y = (x - mu) / torch.sqrt(var + eps)
        else:
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        if w is not None:
            y = y * w
        if b is not None:
            y = y + b
        return y

    def lin(x, w, b):
        y = x @ w.t()
        return y + b if b is not None else y

    def rope(x):  # (B, h, T, hd): the pair (i, i + hd/2) rotated by t * theta^(-2i/hd)
        half = hd // 2
        inv = c["theta"] ** (-torch.arange(half, dtype=torch.float64) * 2.0 / hd)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        x1, x2 = x[..., :half], x[..., half:]
        if c["pos"] == "rope-nanochat":  # turned the other way
            return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    x = get("emb")[idx]
    if c["pos"] == "learned":
        x = x + get("pos")[:T]
    if c["emb_norm"]:
        x = norm(x, get("embn_w"), get("embn_b"))
    pattern = c["window"]
    for l in range(L):
        h = norm(x, get("ln1_w", l), get("ln1_b", l))
        if "qkv_w" in N:
            qkv = lin(h, get("qkv_w", l), get("qkv_b", l))
            q, k, v = qkv.split([C, Hkv * hd, Hkv * hd], dim=-1)
        else:
            q = lin(h, get("q_w", l), get("q_b", l))
            k = lin(h, get("k_w", l), get("k_b", l))
            v = lin(h, get("v_w", l), get("v_b", l))
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, Hkv, hd).transpose(1, 2)
        v = v.view(B, T, Hkv, hd).transpose(1, 2)
        if c["pos"] != "learned":
            q, k = rope(q), rope(k)
        if c["qk_norm"]:
            q = q / torch.sqrt((q * q).mean(-1, keepdim=True) + eps)
            k = k / torch.sqrt((k * k).mean(-1, keepdim=True) + eps)
        G = H // Hkv
        k = k.repeat_interleave(G, dim=1)
        v = v.repeat_interleave(G, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        visible = j <= i
        short = l != L - 1 and pattern[l % len(pattern)] == "S"
        if short:
            visible = visible & (j >= i - max(c["T"] // 4, 1))
        s = s.masked_fill(~visible, float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, get("o_w", l), get("o_b", l))
        h = norm(x, get("ln2_w", l), get("ln2_b", l))
        if c["mlp"] == "swiglu":
            a = lin(h, get("gate_w", l), get("gate_b", l))
            u = lin(h, get("up_w", l), get("up_b", l))
            m = a * torch.sigmoid(a) * u
        else:
            u = lin(h, get("up_w", l), get("up_b", l))
            if c["mlp"] == "relu2":
                m = torch.relu(u) ** 2
            else:
                m = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        x = x + lin(m, get("down_w", l), get("down_b", l))
    x = norm(x, get("lnf_w"), get("lnf_b"))
    head = get("head") if not c["tie"] else get("emb")
    logits = x @ head.t()
    if c["softcap"] > 0:
        logits = c["softcap"] * torch.tanh(logits / c["softcap"])
    loss = F.cross_entropy(logits.reshape(-1, V), tgt, ignore_index=-1)
    return logits, loss


# ---- reference 2: transformers ----


def hf_model(c):
    if transformers is None or c["arch"] not in ("llama", "nanochat") or c["window"] != "L":
        return None
    common = dict(vocab_size=c["V"], hidden_size=c["C"], intermediate_size=c["hidden"], num_hidden_layers=c["L"],
                  num_attention_heads=c["H"], num_key_value_heads=c["Hkv"], max_position_embeddings=c["T"],
                  rms_norm_eps=c["eps"], tie_word_embeddings=bool(c["tie"]),
                  rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})
    if c["arch"] == "llama":
        if c["norm"] != "rmsnorm" or c["mlp"] != "swiglu" or c["pos"] != "rope" or c["emb_norm"] or c["qk_norm"] \
                or c["softcap"] > 0:
            return None
        cfg = transformers.LlamaConfig(attention_bias=bool(c["bias"]), mlp_bias=bool(c["bias"]), **common)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        if c["norm"] != "rmsnorm-free" or c["mlp"] != "relu2" or c["pos"] != "rope-nanochat" or not c["emb_norm"] \
                or not c["qk_norm"] or c["bias"]:
            return None
        # pad_token_id None: NanoChatConfig's default (1) makes row 1 of the embedding a padding row
        # that torch never gives a gradient; the architecture has no such row
        cfg = transformers.NanoChatConfig(final_logit_softcapping=c["softcap"] if c["softcap"] > 0 else None,
                                          attention_bias=False, pad_token_id=None, **common)
        model = transformers.NanoChatForCausalLM(cfg)
    cfg._attn_implementation = "eager"
    return model.double().eval()


def worst(a, b):
    """max |a - b| / max(1, max |b|)"""
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()


def main():
    d = sys.argv[1]
    torch.manual_seed(0)
    ok = True
    for c in parse_cases(d):
        w, g = load_weights(d, c["name"])
        logits_fg = w.pop("__logits")
        P = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        logits, loss = reference_loss(c, P)
        loss.backward()
        tol = 1e-10
        errs = [("logits", worst(logits_fg, logits.detach())), ("loss", abs(c["loss"] - loss.item()))]
        errs += [(k, worst(g[k], P[k].grad if P[k].grad is not None else torch.zeros_like(P[k]))) for k in sorted(P)]
        bad = [(k, e) for k, e in errs if not e <= tol]
        print(f"{c['name']}: reference module: logits {errs[0][1]:.2e}, loss {errs[1][1]:.2e}, "
              f"{len(P)} gradients (worst {max(e for _, e in errs[2:]):.2e}) {'ok' if not bad else 'FAIL'}")
        for k, e in bad:
            print(f"  {k}: {e:.3e} > {tol:g}")
        ok = ok and not bad
        model = hf_model(c)
        if model is None:
            continue
        sd = {k: v.clone() for k, v in w.items()}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [m for m in missing if not (c["tie"] and m == "lm_head.weight")]
        if missing or unexpected:
            print(f"  {c['name']}: transformers' state dict differs: missing {missing}, unexpected {unexpected}")
            ok = False
            continue
        idx = torch.tensor(c["x"]).view(c["B"], c["Tq"])
        out = model(input_ids=idx).logits
        hl = F.cross_entropy(out.reshape(-1, c["V"]), torch.tensor(c["y"]), ignore_index=-1)
        hl.backward()
        tol = 2e-5  # transformers' float32 norms and rotary angles
        errs = [("logits", worst(logits_fg, out.detach())), ("loss", abs(c["loss"] - hl.item()))]
        for k, p in model.named_parameters():
            errs.append((k, worst(g[k], p.grad)))
        bad = [(k, e) for k, e in errs if not e <= tol]
        print(f"{c['name']}: transformers {type(model).__name__}: logits {errs[0][1]:.2e}, loss {errs[1][1]:.2e}, "
              f"{len(errs) - 2} gradients (worst {max(e for _, e in errs[2:]):.2e}) {'ok' if not bad else 'FAIL'}")
        for k, e in bad:
            print(f"  {k}: {e:.3e} > {tol:g}")
        ok = ok and not bad
    if transformers is None:
        print("transformers is not installed: the reference module only")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
