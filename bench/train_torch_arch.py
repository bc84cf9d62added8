#!/usr/bin/env python3
"""train_torch_arch.py — the PyTorch side of bench_scale.py for the Llama and nanochat architectures.

flashgrad's `--arch llama` and `--arch nanochat` models are Hugging Face's LlamaForCausalLM and
NanoChatForCausalLM (train/gpt.h; their files load into each other), so the reference here is
transformers' own model with PyTorch's SDPA attention, trained the way bench_scale.py trains the GPT-2
reference: AdamW with weight decay on the 2-d tensors only, gradient-norm clipping, dropout 0, in a
child process started with OMP_NUM_THREADS=N and torch.set_num_threads(N).

    run_torch(cfg, tmp) -> {"median_s", "tok_s", "n_params", "peak_rss_kb", "torch", "attention"}

cfg holds: arch, n_layer, n_head, n_kv_head, n_embd, mlp_hidden, block_size, batch_size, vocab,
untied (1/0), softcap, rope_theta, steps, untimed, lr, weight_decay, beta1, beta2, grad_clip, threads,
seed, train_npy (token ids). The step timed is forward, loss, backward, clipping and the AdamW step.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def hf_model(c):
    """A random-weight transformers model of c's shape (SDPA attention, float32)."""
    import transformers
    rope = {"rope_type": "default", "rope_theta": float(c["rope_theta"])}
    common = dict(vocab_size=c["vocab"], hidden_size=c["n_embd"], intermediate_size=c["mlp_hidden"],
                  num_hidden_layers=c["n_layer"], num_attention_heads=c["n_head"],
                  num_key_value_heads=c["n_kv_head"], max_position_embeddings=c["block_size"],
                  rms_norm_eps=1e-6, rope_parameters=rope,
                  tie_word_embeddings=not c["untied"], attention_bias=False)
    if c["arch"] == "llama":
        cfg = transformers.LlamaConfig(mlp_bias=False, **common)
        cls = transformers.LlamaForCausalLM
    elif c["arch"] == "nanochat":
        cfg = transformers.NanoChatConfig(final_logit_softcapping=float(c["softcap"]) if c["softcap"] else None, **common)
        cls = transformers.NanoChatForCausalLM
    else:
        raise ValueError("unknown arch %r" % c["arch"])
    cfg._attn_implementation = "sdpa"
    return cls(cfg)


def worker(cpath, opath):
    import numpy as np
    import torch
    with open(cpath) as f:
        c = json.load(f)
    torch.set_num_threads(c["threads"])
    torch.manual_seed(c["seed"])
    model = hf_model(c).float().train()
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": other, "weight_decay": 0.0}], lr=c["lr"],
                            betas=(c["beta1"], c["beta2"]), eps=1e-8)
    data = np.load(c["train_npy"]).astype(np.int64)
    B, T = c["batch_size"], c["block_size"]
    g = np.random.default_rng(c["seed"])
    times = []
    for s in range(c["steps"]):
        off = g.integers(0, len(data) - T - 1, B)
        x = torch.from_numpy(np.stack([data[o:o + T] for o in off]))
        y = torch.from_numpy(np.stack([data[o + 1:o + T + 1] for o in off]))
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, c["grad_clip"])
        opt.step()
        dt = time.perf_counter() - t0
        if s >= c["untimed"]:
            times.append(dt)
    out = {"median_s": statistics.median(times), "tok_s": B * T / statistics.median(times), "n_params": n_params,
           "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "torch": torch.__version__,
           "attention": "scaled_dot_product_attention (transformers %s)" % c["arch"], "loss": loss.item()}
    with open(opath, "w") as f:
        json.dump(out, f)


def run_torch(c, tmp):
    cpath, opath = os.path.join(tmp, "arch_cfg.json"), os.path.join(tmp, "arch_out.json")
    with open(cpath, "w") as f:
        json.dump(c, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(c["threads"]), OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", cpath, opath], env=env)
    if p.returncode != 0:
        raise RuntimeError("the PyTorch %s worker exited with %d" % (c["arch"], p.returncode))
    with open(opath) as f:
        r = json.load(f)
    os.unlink(cpath)
    os.unlink(opath)
    return r


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        print("usage: train_torch_arch.py --worker CONFIG.json OUT.json (bench_scale.py runs it)", file=sys.stderr)
        sys.exit(2)
