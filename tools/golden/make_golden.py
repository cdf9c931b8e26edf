#!/usr/bin/env python3
"""make_golden: golden references from Hugging Face transformers.

Builds tiny random models of every architecture pagedllm serves, with
transformers itself and from fixed seeds, saves each as a Hugging Face
folder (config.json, generation_config.json, *.safetensors) and records
what transformers computes for a few fixed prompts of token ids:

    golden.json   the prompts, the greedy continuation (16 tokens), the gap
                  between the best and second-best logit at every greedy
                  step, and the versions that made them
    logits.bin    float32 little-endian logits of every position of
                  prompt + continuation, case after case: [positions][vocab]

The references are computed on the CPU in float32 with eager attention.  A
checkpoint saved in bfloat16 or float16 is first rounded to that dtype and
the reference is the float32 forward pass over the rounded weights, which is
what pagedllm's CPU backend computes (it widens weights to fp32), so the
only differences left are float32 summation order.

Prompts are drawn from a seeded generator; for each length the first
candidate whose greedy steps all have a top-2 gap of at least MIN_GAP is
kept, so the greedy comparison is not decided by rounding noise.

    python3 tools/golden/make_golden.py OUTDIR     (writes OUTDIR/<model>/)

Needs torch, transformers and safetensors (the lent GPU machine has them;
no GPU is used).  t/unit/golden.c reads the result, committed under
t/fixtures/golden/.
"""

import copy
import inspect
import json
import math
import os
import struct
import sys
import traceback

import torch
import transformers
from transformers import (AutoModelForCausalLM, GenerationConfig, LlamaConfig,
                          MistralConfig, OPTConfig, Qwen2Config)

VOCAB = 256
HIDDEN = 64
LAYERS = 2
HEADS = 4
GREEDY = 16
PROMPT_LENGTHS = (5, 13, 29)
MIN_GAP = 0.02
CANDIDATES = 60


def rope_kwargs(cls, theta, scaling):
    """RoPE settings in whichever form this transformers takes."""
    params = inspect.signature(cls.__init__).parameters
    if "rope_parameters" in params:
        rp = {"rope_type": "default", "rope_theta": theta}
        if scaling is not None:
            rp.update(scaling)
        return {"rope_parameters": rp}
    kw = {"rope_theta": theta}
    if scaling is not None:
        kw["rope_scaling"] = dict(scaling)
    return kw


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0,
                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 32}


def specs():
    """name -> a function returning (config, saved dtype, shard size or
    None, generation_config extras); built lazily so that one
    transformers refusal costs one model, not all"""
    return {
        "llama3_gqa": lambda: (LlamaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
            eos_token_id=2, **rope_kwargs(LlamaConfig, 500000.0,
                                          LLAMA3_SCALING)),
            torch.float32, None,
            {"eos_token_id": [2, 3], "do_sample": True, "temperature": 0.6,
             "top_p": 0.9, "top_k": 40}),
        "llama_tied": lambda: (LlamaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=96,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=HEADS, max_position_embeddings=128,
            rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=1,
            eos_token_id=2, **rope_kwargs(LlamaConfig, 10000.0, {
                "rope_type": "linear", "factor": 2.0})),
            torch.bfloat16, None, {}),
        "mistral": lambda: (MistralConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
            rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
            bos_token_id=1, eos_token_id=2,
            **rope_kwargs(MistralConfig, 1000000.0, None)),
            torch.float32, "100KB", {}),
        "qwen2_bias": lambda: (Qwen2Config(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, tie_word_embeddings=True,
            use_sliding_window=False, bos_token_id=1, eos_token_id=2,
            **rope_kwargs(Qwen2Config, 1000000.0, None)),
            torch.float32, None, {}),
        "opt_pre_ln": lambda: (OPTConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=128,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            max_position_embeddings=128, word_embed_proj_dim=HIDDEN,
            do_layer_norm_before=True, activation_function="relu",
            pad_token_id=1, bos_token_id=2, eos_token_id=2),
            torch.float16, None, {}),
        "opt_post_ln": lambda: (OPTConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=128,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            max_position_embeddings=128, word_embed_proj_dim=HIDDEN,
            do_layer_norm_before=False, activation_function="relu",
            pad_token_id=1, bos_token_id=2, eos_token_id=2),
            torch.float32, None, {}),
    }


def randomize(model, seed):
    """Every parameter drawn again: transformers starts biases at zero and
    norms at one, which would leave those code paths untested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith("bias"):
                p.copy_(0.2 * r)
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * r)
            elif "embed" in name:
                p.copy_(r if "positions" not in name else 0.5 * r)
            else:
                p.copy_(r / math.sqrt(p.shape[-1]))


def build(cfg, seed):
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg,
                                                 attn_implementation="eager")
    except (TypeError, ValueError):
        model = AutoModelForCausalLM.from_config(cfg)
    model = model.float().eval()
    randomize(model, seed)
    return model


@torch.no_grad()
def logits_of(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long))
    return out.logits[0].float()


def top2_gap(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


@torch.no_grad()
def greedy(model, prompt):
    ids = list(prompt)
    gaps = []
    for _ in range(GREEDY):
        row = logits_of(model, ids)[-1]
        gaps.append(top2_gap(row))
        ids.append(int(torch.argmax(row)))
    return ids[len(prompt):], gaps


def pick_prompt(model, g, length):
    best = None
    for _ in range(CANDIDATES):
        prompt = torch.randint(3, VOCAB, (length,), generator=g).tolist()
        tokens, gaps = greedy(model, prompt)
        if best is None or min(gaps) > min(best[2]):
            best = (prompt, tokens, gaps)
        if min(gaps) >= MIN_GAP:
            break
    return best


def fix_config_dtype(path, dtype):
    """config.json must name the dtype the weights were saved in."""
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16",
            torch.float16: "float16"}[dtype]
    with open(path) as f:
        cfg = json.load(f)
    keys = [k for k in ("dtype", "torch_dtype") if k in cfg] or ["torch_dtype"]
    for k in keys:
        cfg[k] = name
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save(model, cfg, dtype, shard, gen_extra, outdir):
    """Round the weights to dtype, save a copy in dtype; the fp32 model
    (rotary buffers untouched) keeps the rounded values."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).float())
    kw = {"max_shard_size": shard} if shard else {}
    copy.deepcopy(model).to(dtype).save_pretrained(outdir, **kw)
    fix_config_dtype(os.path.join(outdir, "config.json"), dtype)
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id}
    gen.update(gen_extra)
    GenerationConfig(**gen).save_pretrained(outdir)


def make_model(name, spec, seed, root, log):
    cfg, dtype, shard, gen_extra = spec()
    outdir = os.path.join(root, name)
    os.makedirs(outdir, exist_ok=True)
    model = build(cfg, seed)
    save(model, cfg, dtype, shard, gen_extra, outdir)

    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    with open(os.path.join(outdir, "logits.bin"), "wb") as f:
        offset = 0
        for length in PROMPT_LENGTHS:
            prompt, tokens, gaps = pick_prompt(model, g, length)
            rows = logits_of(model, prompt + tokens)
            f.write(rows.contiguous().numpy().astype("<f4").tobytes())
            cases.append({"prompt": prompt, "greedy": tokens,
                          "gaps": [round(x, 6) for x in gaps],
                          "positions": len(prompt) + len(tokens),
                          "logits_offset": offset})
            offset += rows.numel()
    golden = {
        "model": name, "architecture": type(model).__name__,
        "saved_dtype": str(dtype).split(".")[1], "vocab_size": VOCAB,
        "reference": "float32 CPU forward, eager attention, over the saved "
                     "weights", "transformers": transformers.__version__,
        "torch": torch.__version__, "seed": seed, "cases": cases,
    }
    with open(os.path.join(outdir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    tied = getattr(cfg, "tie_word_embeddings", False)
    log.write("%s: %s, %s, tied %s (shared %s), files %s, min gaps %s\n" % (
        name, type(model).__name__, golden["saved_dtype"], tied,
        model.get_output_embeddings().weight is
        model.get_input_embeddings().weight, sorted(os.listdir(outdir)),
        [round(min(c["gaps"]), 4) for c in cases]))
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None:
        log.write("  inv_freq %s\n" % rotary.inv_freq.tolist())
    with open(os.path.join(outdir, "config.json")) as f:
        log.write("  config.json " + f.read().replace("\n", " ") + "\n")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "golden"
    torch.set_num_threads(4)
    torch.set_grad_enabled(False)
    os.makedirs(root, exist_ok=True)
    failed = 0
    log = sys.stdout
    log.write("transformers %s, torch %s\n" % (transformers.__version__,
                                               torch.__version__))
    for i, (name, spec) in enumerate(sorted(specs().items())):
        try:
            make_model(name, spec, 1000 + 17 * i, root, log)
        except Exception:
            failed += 1
            log.write("%s: FAILED\n%s" % (name, traceback.format_exc()))
        log.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
