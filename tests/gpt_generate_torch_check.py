#!/usr/bin/python3
"""gpt_generate_torch_check.py: flashgrad's KV-cache generation against nanoGPT's generate().

Run by tests/test_gpt_kv.c as `gpt_generate_torch_check.py DIR`. DIR holds, for each case k,
  case_k.safetensors  a flashgrad GPT's weights (nanoGPT's names; lm_head tied to wte)
  case_k.txt          "n_layer n_head n_embd block_size vocab n_prompt" on line 1, then flashgrad's
                      greedy tokens (prompt first) on line 2, generated with its KV cache

nanoGPT's GPT (model.py: pre-LayerNorm blocks, causal scaled_dot_product_attention, LM head on the
last position at inference) and its generate() are written out here in plain float32 torch, as
nanoGPT runs on the CPU. Greedy is generate(..., temperature=1.0, top_k=1): nanoGPT's own top-k mask
leaves only the largest logit, so its multinomial draw is that token. generate() crops the context
to the last block_size tokens and recomputes from position 0, so the cases run well past the block.
One difference from nanoGPT's file is deliberate: its MLP uses nn.GELU() (the erf form), flashgrad
GPT-2's tanh form (as OpenAI's GPT-2, HF and llm.c); the weights here are flashgrad's, so the MLP is
flashgrad's. The safetensors files are parsed with the standard library.

Exits 0 when every case's tokens agree, 1 on a mismatch, 77 when numpy or torch >= 2.1 is missing.
"""
import json
import math
import os
import struct
import sys

SKIP = 77
try:
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except ImportError as e:  # pragma: no cover
    print(f"skipped: numpy/torch not importable by {sys.executable} ({e})")
    sys.exit(SKIP)
ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if ver < (2, 1):
    print(f"skipped: torch {torch.__version__} at {sys.executable} is older than 2.1")
    sys.exit(SKIP)


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    data = b[8 + n:]
    hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        a, z = v["data_offsets"]
        assert v["dtype"] == "F32", v["dtype"]
        out[k] = torch.from_numpy(np.frombuffer(data[a:z], dtype=np.float32).reshape(v["shape"]).copy())
    return out


# ---- nanoGPT's model.py, trimmed to inference (bias=True, dropout 0) ----
class CausalSelfAttention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.n_head, self.n_embd = H, C

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")  # nanoGPT: nn.GELU(); flashgrad's is GPT-2's tanh form
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, H)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.block_size = T
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block(C, H) for _ in range(L)]), ln_f=nn.LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return self.lm_head(x[:, [-1], :]), None

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def main():
    d = sys.argv[1]
    torch.manual_seed(0)
    bad = 0
    k = 0
    while os.path.exists(os.path.join(d, f"case_{k}.txt")):
        lines = open(os.path.join(d, f"case_{k}.txt")).read().split("\n")
        L, H, C, T, V, n_prompt = (int(x) for x in lines[0].split())
        want = [int(x) for x in lines[1].split()]
        m = GPT(L, H, C, T, V)
        sd = load_st(os.path.join(d, f"case_{k}.safetensors"))
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
        missing, unexpected = m.load_state_dict(sd, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        m.eval()
        got = m.generate(torch.tensor([want[:n_prompt]]), len(want) - n_prompt, temperature=1.0, top_k=1)[0].tolist()
        first = next((i for i in range(len(want)) if got[i] != want[i]), None)
        what = f"case {k}: L{L} H{H} C{C} block {T} V{V}, prompt {n_prompt}, {len(want) - n_prompt} new tokens"
        if first is None:
            print(f"{what}: flashgrad's KV-cache tokens equal nanoGPT generate()'s")
        else:
            print(f"{what}: MISMATCH at token {first}: flashgrad {want[first]}, nanoGPT {got[first]}\n"
                  f"  flashgrad {want}\n  nanoGPT   {got}")
            bad += 1
        k += 1
    if k == 0:
        print(f"no cases in {d}")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
