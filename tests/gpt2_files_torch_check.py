#!/usr/bin/python3
"""gpt2_files_torch_check.py: flashgrad's GPT-2 file formats against Hugging Face transformers.

Run twice by tests/test_gpt2_files.c:
  make DIR    writes random-weight GPT2LMHeadModel folders DIR/hf<i> with save_pretrained (one of
              them sharded, with model.safetensors.index.json) and a batch of token ids DIR/x<i>.npy;
              every parameter, LayerNorm gains and biases included, is drawn at random so a swapped
              or untransposed tensor cannot hide.
  check DIR   after the C side loaded each folder, wrote its logits DIR/fg_logits<i>.npy and exported
              it again (DIR/exp<i>: flashgrad -> hf; DIR/rt<i>: hf -> llm.c file -> hf):
              - flashgrad's float32 logits equal transformers' within 1e-5 (max abs);
              - each export loads with from_pretrained with no missing, unexpected or mismatched
                keys, holds exactly (bit for bit) the original tensors, and gives equal logits.
  make_ft DIR, check_ft DIR   a random GPT-2 with a byte vocabulary, and its fine-tuned export
              (tests/test_gpt2_files.c runs `flashgrad train --init-from` and `flashgrad export` between).
Exits 0 when all agree, 1 on a mismatch, 77 when numpy, torch >= 2.1 or transformers is missing.
"""
import json
import os
import sys

SKIP = 77
try:
    import numpy as np
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
except Exception as e:  # pragma: no cover
    print(f"skipped: numpy/torch/transformers not importable by {sys.executable} ({e})")
    sys.exit(SKIP)
if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 1):
    print(f"skipped: torch {torch.__version__} is older than 2.1")
    sys.exit(SKIP)
transformers.logging.set_verbosity_error()

# (n_layer, n_head, n_embd, n_positions, vocab_size, batch, T, shard size or None)
CONFIGS = [
    (2, 4, 32, 16, 100, 3, 16, None),
    (3, 2, 48, 24, 67, 2, 19, "40KB"),   # n_head != n_layer, sharded, a batch shorter than the context
    (1, 6, 24, 8, 50257, 2, 8, None),    # GPT-2's vocabulary (llm.c pads it to 50304)
    (4, 1, 16, 12, 33, 1, 5, None),
]


def make(d):
    for i, (L, H, C, T, V, B, t, shard) in enumerate(CONFIGS):
        torch.manual_seed(100 + i)
        cfg = GPT2Config(n_layer=L, n_head=H, n_embd=C, n_positions=T, vocab_size=V, bos_token_id=0, eos_token_id=0)
        m = GPT2LMHeadModel(cfg)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.normal_(0.0, 0.3 if p.dim() == 2 else 0.5)
                if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                    p.add_(1.0)
        kw = {"max_shard_size": shard} if shard else {}
        m.save_pretrained(os.path.join(d, f"hf{i}"), **kw)
        x = torch.randint(0, V, (B, t), generator=torch.Generator().manual_seed(7 + i))
        np.save(os.path.join(d, f"x{i}.npy"), x.numpy().astype(np.float64))
    with open(os.path.join(d, "count"), "w") as f:
        f.write(str(len(CONFIGS)))
    if CONFIGS[1][7] and not os.path.exists(os.path.join(d, "hf1", "model.safetensors.index.json")):
        print("save_pretrained did not shard hf1")
        return 1
    return 0


def make_ft(d):
    """A random-weight GPT-2 with a byte vocabulary (256), to fine-tune on text with --byte."""
    torch.manual_seed(3)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=256, bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(cfg).save_pretrained(os.path.join(d, "hf_start"))
    return 0


def check_ft(d):
    """The fine-tuned run exported to DIR/ft_hf: loads cleanly, and its logits on DIR/ft_x.npy equal
    flashgrad's (DIR/ft_logits.npy, from the run's checkpoint)."""
    m, info = GPT2LMHeadModel.from_pretrained(os.path.join(d, "ft_hf"), attn_implementation="eager",
                                              output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    x = np.load(os.path.join(d, "ft_x.npy"))
    fg = torch.from_numpy(np.load(os.path.join(d, "ft_logits.npy")))
    e = (logits(m, x, torch.float32).double() - fg.double()).abs().max().item()
    start = GPT2LMHeadModel.from_pretrained(os.path.join(d, "hf_start"))
    s0, s1 = start.state_dict(), m.state_dict()
    moved = max((s0[k][:s1[k].shape[0]] - s1[k]).abs().max().item() for k in s1)  # wpe was cropped
    print(f"fine-tuned export: loading info {info}, |flashgrad - transformers| logits {e:.3g}, weights moved by up to "
          f"{moved:.3g}")
    return 0 if not bad and e <= 1e-5 and moved > 0 else 1


def logits(m, x, dtype):
    m = m.to(dtype).eval()
    with torch.no_grad():
        return m(torch.from_numpy(x).long()).logits


def check(d):
    fails = 0
    worst = 0.0
    for i, (L, H, C, T, V, B, t, shard) in enumerate(CONFIGS):
        src = os.path.join(d, f"hf{i}")
        x = np.load(os.path.join(d, f"x{i}.npy"))
        ref = GPT2LMHeadModel.from_pretrained(src, attn_implementation="eager")
        sd0 = {k: v.clone() for k, v in ref.state_dict().items()}
        fg = torch.from_numpy(np.load(os.path.join(d, f"fg_logits{i}.npy")))
        r32 = logits(ref, x, torch.float32)
        r64 = logits(ref, x, torch.float64)
        if tuple(fg.shape) != tuple(r32.shape):
            print(f"hf{i}: flashgrad logits {tuple(fg.shape)}, transformers {tuple(r32.shape)}")
            fails += 1
            continue
        e32 = (fg.double() - r32.double()).abs().max().item()
        e64 = (fg.double() - r64).abs().max().item()
        t32 = (r32.double() - r64).abs().max().item()
        worst = max(worst, e32)
        print(f"hf{i} L{L} H{H} C{C} T{t} V{V}{' sharded' if shard else ''}: |flashgrad - transformers| = {e32:.3g} "
              f"(float32), {e64:.3g} vs float64 transformers (transformers' own float32 error {t32:.3g})")
        if not e32 <= 1e-5:
            print(f"  FAIL: logits differ by {e32:.3g} > 1e-5")
            fails += 1
        for tag in (f"exp{i}", f"rt{i}"):
            p = os.path.join(d, tag)
            m, info = GPT2LMHeadModel.from_pretrained(p, attn_implementation="eager", output_loading_info=True)
            bad = {k: v for k, v in info.items() if v}
            if bad:
                print(f"  FAIL: {tag} loads with {bad}")
                fails += 1
            sd = m.state_dict()
            if set(sd) != set(sd0):
                print(f"  FAIL: {tag} names differ: {sorted(set(sd) ^ set(sd0))[:5]}")
                fails += 1
                continue
            diff = [k for k in sd0 if sd[k].dtype != sd0[k].dtype or not torch.equal(sd[k], sd0[k])]
            if diff:
                print(f"  FAIL: {tag} tensors not bit for bit equal: {diff[:5]}")
                fails += 1
            e = (logits(m, x, torch.float32) - r32).abs().max().item()
            if e != 0.0:
                print(f"  FAIL: {tag} logits differ from the original's by {e:.3g}")
                fails += 1
            cfg = json.load(open(os.path.join(p, "config.json")))
            if (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]) != (L, H, C, T, V):
                print(f"  FAIL: {tag}/config.json describes another model")
                fails += 1
        print(f"  exp{i} (flashgrad -> hf) and rt{i} (hf -> llm.c -> hf): loaded with no missing or unexpected "
              f"keys, tensors bit for bit")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {len(CONFIGS)} models, worst float32 "
          f"logit error {worst:.3g}, {fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    modes = {"make": make, "check": check, "make_ft": make_ft, "check_ft": check_ft}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        print("usage: gpt2_files_torch_check.py make|check|make_ft|check_ft DIR")
        sys.exit(2)
    sys.exit(modes[sys.argv[1]](sys.argv[2]))
