#!/usr/bin/python3
"""hf_arch_torch_check.py: flashgrad's Llama and NanoChat Hugging Face folders against transformers.

Run by tests/test_hf_arch.c:
  make DIR    writes random-weight LlamaForCausalLM and NanoChatForCausalLM folders DIR/hf<i> with
              save_pretrained (GQA and MQA, tied and untied heads, softcaps, biases, a scaled-down
              SmolLM2-135M shape, sharded ones with model.safetensors.index.json, a bfloat16 one, a float16
              sharded one, one whose config.json has transformers 4's top-level rope_theta), a batch of token ids
              DIR/x<i>.npy and a prompt DIR/prompt<i>.txt ("3,1,4"). Every parameter, norm gains
              included, is drawn at random, so a swapped or misnamed tensor cannot hide.
  check DIR   after the C side loaded each folder, wrote its float32 logits DIR/fg_logits<i>.npy, its
              greedy continuation of the prompt DIR/fg_gen<i>.txt (`flashgrad sample --temperature 0`)
              and exported it again to DIR/exp<i> (`export --to hf` with DIR/exp_args<i>.txt's flags: the
              original's dtype, and for a sharded original --max-shard-size):
              - flashgrad's logits equal transformers' (float32, eager attention) within 1e-5;
              - the greedy tokens equal generate(do_sample=False);
              - the export loads with from_pretrained with no missing, unexpected or mismatched keys,
                has the original's tensor names, and every tensor's bytes equal the original's, and
                gives equal logits; a sharded export has an index naming each tensor's file.
  make_ft DIR, check_ft DIR   a random Llama and a random NanoChat with a byte vocabulary (256), and
              their exports after 50 steps of `flashgrad train --init-from` (tests/test_hf_arch.c runs
              them): each loads cleanly and its logits on DIR/ft_x.npy equal flashgrad's within 1e-5.
Exits 0 when all agree, 1 on a mismatch, 77 when numpy, torch >= 2.1 or transformers (with
NanoChatForCausalLM) is missing.
"""
import json
import math
import os
import sys

SKIP = 77
try:
    import numpy as np
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, NanoChatConfig, NanoChatForCausalLM
except Exception as e:  # pragma: no cover
    print(f"skipped: numpy/torch/transformers (with NanoChatForCausalLM) not importable by {sys.executable} ({e})")
    sys.exit(SKIP)
if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 1):
    print(f"skipped: torch {torch.__version__} is older than 2.1")
    sys.exit(SKIP)
transformers.logging.set_verbosity_error()

# name, class, config keywords, batch, T, shard size or None, dtype, legacy rope_theta
CONFIGS = [
    ("llama GQA untied", "llama",
     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
          vocab_size=100, max_position_embeddings=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), 3, 16, None, torch.float32, False),
    ("llama MQA tied", "llama",
     dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, hidden_size=48, intermediate_size=80,
          vocab_size=67, max_position_embeddings=24, rms_norm_eps=1e-5, tie_word_embeddings=True,
          rope_parameters={"rope_type": "default", "rope_theta": 500000.0}), 2, 19, "40KB", torch.float32, False),
    ("llama SmolLM2-135M shape (L2, V300)", "llama",
     dict(num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3, hidden_size=576, intermediate_size=1536,
          vocab_size=300, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
          rope_parameters={"rope_type": "default", "rope_theta": 100000.0}), 2, 24, "2MB", torch.float32, False),
    ("llama biases, transformers 4 rope_theta", "llama",
     dict(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, hidden_size=16, intermediate_size=40,
          vocab_size=40, max_position_embeddings=16, rms_norm_eps=1e-6, tie_word_embeddings=False,
          attention_bias=True, mlp_bias=True,
          rope_parameters={"rope_type": "default", "rope_theta": 20000.0}), 2, 9, None, torch.float32, True),
    ("llama bfloat16 weights", "llama",
     dict(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, hidden_size=32, intermediate_size=64,
          vocab_size=50, max_position_embeddings=16, rms_norm_eps=1e-6, tie_word_embeddings=False,
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), 1, 12, None, torch.bfloat16, False),
    ("nanochat softcap 15 untied", "nanochat",
     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, hidden_size=32, intermediate_size=128,
          vocab_size=100, max_position_embeddings=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
          final_logit_softcapping=15.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
     3, 16, None, torch.float32, False),
    ("nanochat GQA softcap 30 tied", "nanochat",
     dict(num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2, hidden_size=48, intermediate_size=96,
          vocab_size=77, max_position_embeddings=24, rms_norm_eps=1e-5, tie_word_embeddings=True,
          final_logit_softcapping=30.0, rope_parameters={"rope_type": "default", "rope_theta": 50000.0}),
     2, 20, "40KB", torch.float32, False),
    ("nanochat float16 weights", "nanochat",
     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=128,
          vocab_size=100, max_position_embeddings=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
          final_logit_softcapping=15.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
     2, 14, "20KB", torch.float16, False),
    ("nanochat MQA no softcap", "nanochat",
     dict(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=16, intermediate_size=64,
          vocab_size=40, max_position_embeddings=16, rms_norm_eps=1e-6, tie_word_embeddings=False,
          final_logit_softcapping=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
     2, 11, None, torch.float32, False),
]
CLASSES = {"llama": (LlamaConfig, LlamaForCausalLM), "nanochat": (NanoChatConfig, NanoChatForCausalLM)}
NEW_TOKENS = 12


def randomize(m, seed):
    """Every parameter at random, scaled so activations stay of order one (a 576-wide model too)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2 and "embed_tokens" in name:  # a tied head's logits of order one too
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[1])))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[1])))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def build(kind, kw, seed):
    cfg_cls, model_cls = CLASSES[kind]
    torch.manual_seed(seed)
    m = model_cls(cfg_cls(bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw))
    randomize(m, seed)
    return m


def load(kind, path):
    return CLASSES[kind][1].from_pretrained(path, attn_implementation="eager", output_loading_info=True)


def make(d):
    for i, (name, kind, kw, B, t, shard, dtype, legacy) in enumerate(CONFIGS):
        m = build(kind, kw, 100 + i).to(dtype)
        p = os.path.join(d, f"hf{i}")
        m.save_pretrained(p, **({"max_shard_size": shard} if shard else {}))
        if legacy:  # transformers 4 wrote the base beside the keys, with rope_scaling null
            cj = os.path.join(p, "config.json")
            c = json.load(open(cj))
            c["rope_theta"] = c.pop("rope_parameters")["rope_theta"]
            c["rope_scaling"] = None
            json.dump(c, open(cj, "w"), indent=2)
        if shard and not os.path.exists(os.path.join(p, "model.safetensors.index.json")):
            print(f"save_pretrained did not shard hf{i}")
            return 1
        args = {torch.float32: "", torch.bfloat16: "--dtype bfloat16", torch.float16: "--dtype float16"}[dtype]
        if shard:  # transformers' "40KB" is 40000 bytes
            args += f" --max-shard-size {int(float(shard[:-2]) * {'KB': 1e3, 'MB': 1e6}[shard[-2:]])}"
        open(os.path.join(d, f"exp_args{i}.txt"), "w").write(args)
        V = kw["vocab_size"]
        x = torch.randint(0, V, (B, t), generator=torch.Generator().manual_seed(7 + i))
        np.save(os.path.join(d, f"x{i}.npy"), x.numpy().astype(np.float64))
        prompt = torch.randint(0, V, (5,), generator=torch.Generator().manual_seed(70 + i)).tolist()
        open(os.path.join(d, f"prompt{i}.txt"), "w").write(",".join(str(v) for v in prompt))
    open(os.path.join(d, "count"), "w").write(str(len(CONFIGS)))
    open(os.path.join(d, "new_tokens"), "w").write(str(NEW_TOKENS))
    return 0


def logits(m, x):
    m = m.float().eval()
    with torch.no_grad():
        return m(torch.from_numpy(np.asarray(x)).long()).logits


def check(d):
    fails, worst = 0, 0.0
    for i, (name, kind, kw, B, t, shard, dtype, legacy) in enumerate(CONFIGS):
        src = os.path.join(d, f"hf{i}")
        ref, _ = load(kind, src)
        sd0 = {k: v.clone() for k, v in ref.state_dict().items()}
        x = np.load(os.path.join(d, f"x{i}.npy"))
        r32 = logits(ref, x)
        fg = torch.from_numpy(np.load(os.path.join(d, f"fg_logits{i}.npy")))
        if tuple(fg.shape) != tuple(r32.shape):
            print(f"hf{i} {name}: flashgrad logits {tuple(fg.shape)}, transformers {tuple(r32.shape)}")
            fails += 1
            continue
        e = (fg.double() - r32.double()).abs().max().item()
        r64 = CLASSES[kind][1].from_pretrained(src, attn_implementation="eager").double().eval()
        with torch.no_grad():
            t32 = (r64(torch.from_numpy(x).long()).logits - r32.double()).abs().max().item()
        worst = max(worst, e)
        ok = e <= 1e-5
        fails += not ok
        # greedy decoding
        prompt = [int(v) for v in open(os.path.join(d, f"prompt{i}.txt")).read().split(",")]
        with torch.no_grad():
            gen = ref.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0].tolist()
        fg_gen = [int(v) for v in open(os.path.join(d, f"fg_gen{i}.txt")).read().split()]
        gen_ok = fg_gen == gen
        fails += not gen_ok
        print(f"hf{i} {name}{' sharded' if shard else ''}: |flashgrad - transformers| logits {e:.3g}"
              f"{'' if ok else '  FAIL > 1e-5'} (transformers' own float32 error {t32:.3g}, logits up to "
              f"{r32.abs().max().item():.3g}); greedy {NEW_TOKENS} tokens {'equal' if gen_ok else 'DIFFER'}"
              f"{'' if gen_ok else f' (flashgrad {fg_gen}, transformers {gen})'}")
        # the export
        p = os.path.join(d, f"exp{i}")
        m, info = load(kind, p)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            print(f"  FAIL: exp{i} loads with {bad}")
            fails += 1
        from safetensors import safe_open
        names0 = set()
        for f in sorted(os.listdir(src)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(src, f), "pt") as s:
                    names0 |= set(s.keys())
        t1, where = {}, {}
        for f in sorted(os.listdir(p)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(p, f), "pt") as s:
                    for k in s.keys():
                        t1[k], where[k] = s.get_tensor(k), f
        names1 = set(t1)
        idx = os.path.join(p, "model.safetensors.index.json")
        if shard:
            wm = json.load(open(idx))["weight_map"] if os.path.exists(idx) else None
            if wm != where or len(set(where.values())) < 2:
                print(f"  FAIL: exp{i} is not sharded with an index naming each tensor's file")
                fails += 1
        elif os.path.exists(idx) or set(where.values()) != {"model.safetensors"}:
            print(f"  FAIL: exp{i} should be one model.safetensors")
            fails += 1
        if names0 != names1:
            print(f"  FAIL: exp{i} tensor names differ: {sorted(names0 ^ names1)[:6]}")
            fails += 1
        diff = []
        for k in names0 & names1:
            a = sd0[k]
            b = t1[k]
            same = a.dtype == b.dtype and a.shape == b.shape and a.view(-1).view(torch.uint8).numpy().tobytes() == \
                b.view(-1).view(torch.uint8).numpy().tobytes()
            if not same:
                diff.append(k)
        if diff:
            print(f"  FAIL: exp{i} tensors not bit for bit: {diff[:5]}")
            fails += 1
        e2 = (logits(m, x) - r32).abs().max().item()
        if e2 != 0.0:
            print(f"  FAIL: exp{i} logits differ from the original's by {e2:.3g}")
            fails += 1
        if not (bad or diff or e2 or names0 != names1):
            print(f"  exp{i} (hf -> flashgrad -> hf): no missing or unexpected keys, the same {len(names1)} names, "
                  f"{str(dtype)[6:]} bytes bit for bit{', sharded' if shard else ''}, equal logits")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {len(CONFIGS)} models, worst float32 "
          f"logit error {worst:.3g}, {fails} failures")
    return 1 if fails else 0


FT = [("llama", dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                     intermediate_size=128, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
      ("nanochat", dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                        intermediate_size=256, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))]


def make_ft(d):
    for kind, kw in FT:
        torch.manual_seed(3)
        cfg_cls, model_cls = CLASSES[kind]
        model_cls(cfg_cls(bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)).save_pretrained(
            os.path.join(d, f"{kind}_start"))
    return 0


def check_ft(d):
    fails = 0
    for kind, kw in FT:
        m, info = load(kind, os.path.join(d, f"{kind}_ft"))
        bad = {k: v for k, v in info.items() if v}
        x = np.load(os.path.join(d, "ft_x.npy"))
        fg = torch.from_numpy(np.load(os.path.join(d, f"{kind}_ft_logits.npy")))
        e = (logits(m, x).double() - fg.double()).abs().max().item()
        start, _ = load(kind, os.path.join(d, f"{kind}_start"))
        s0, s1 = start.state_dict(), m.state_dict()
        moved = max((s0[k] - s1[k]).abs().max().item() for k in s1)
        ok = not bad and e <= 1e-5 and moved > 0
        fails += not ok
        print(f"{kind} fine-tuned 50 steps and exported: loading info {info}, |flashgrad - transformers| logits "
              f"{e:.3g}, weights moved by up to {moved:.3g}{'' if ok else '  FAIL'}")
    return 1 if fails else 0


if __name__ == "__main__":
    modes = {"make": make, "check": check, "make_ft": make_ft, "check_ft": check_ft}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        print("usage: hf_arch_torch_check.py make|check|make_ft|check_ft DIR")
        sys.exit(2)
    sys.exit(modes[sys.argv[1]](sys.argv[2]))
