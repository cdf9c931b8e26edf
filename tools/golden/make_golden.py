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

Beam mode records transformers' beam search over the committed fixture
models (it rebuilds nothing: each model is loaded from FIXTURES/<model>/):

    python3 tools/golden/make_golden.py beam OUTDIR [FIXTURES]
        (FIXTURES defaults to t/fixtures/golden; writes OUTDIR/<model>/beam.json)

For every model, BEAM_CONFIGS' settings of generate(num_beams=k,
num_return_sequences=n, length_penalty, early_stopping, max_new_tokens,
do_sample=False) over one prompt each: the returned beams' generated token
ids, sequences_scores, the cumulative log-probability recomputed from a
plain forward pass (whose quotient by length ** length_penalty must equal
the score) and the eos set used.  Besides the model's eos, every case adds
two stop tokens picked from the model's own likely continuations (one the
greedy path reaches), so that finished hypotheses and the three
early_stopping rules all take part.  A case is kept only when its result is
stable: the same search with every step's log-probabilities perturbed by
uniform noise of +-NOISE must return the same tokens, so float32 summation
order cannot decide it; stable_noise records the largest noise it also
withstands (for backends computing in bf16).  Each result is also checked against
reference_beam_search, a plain restatement of the algorithm pagedllm
implements; a disagreement is printed and fails the run.

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


BEAM_CONFIGS = (
    # k, n, length_penalty, early_stopping, max_new_tokens
    (2, 1, 1.0, False, 12),
    (2, 2, 0.5, True, 10),
    (4, 2, 1.0, "never", 12),
    (4, 4, 2.0, False, 10),
    (6, 3, 1.0, True, 8),
    (6, 6, 0.5, "never", 10),
    (6, 2, 2.0, "never", 9),
)
NOISE = 3e-4
BEAM_TRIES = 24


NOISE_LEVELS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


class Perturb:
    """A logits processor adding seeded uniform noise to log-probs."""

    def __init__(self, seed, amplitude=NOISE):
        self.g = torch.Generator().manual_seed(seed)
        self.amplitude = amplitude

    def __call__(self, input_ids, scores):
        noise = (torch.rand(scores.shape, generator=self.g) * 2 - 1)
        return scores + (noise * self.amplitude).to(scores.dtype)


def stable_noise(model, prompt, eos, cfg, beams):
    """The largest of NOISE_LEVELS at which (and below which) three
    perturbed searches all return beams; NOISE when none: how much
    error in the log-probs (a bf16 backend's, say) the case tolerates."""
    best = NOISE
    for level in NOISE_LEVELS:
        for seed in (21, 22, 23):
            noisy, _ = run_beam(model, prompt, eos, cfg,
                                [Perturb(seed, level)])
            if noisy != beams:
                return best
        best = level
    return best


def model_eos(model):
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]


def cut_at_eos(gen, eos):
    for i, t in enumerate(gen):
        if t in eos:
            return gen[:i + 1]
    return gen


@torch.no_grad()
def run_beam(model, prompt, eos, cfg, processors=None):
    k, n, lp, es, new = cfg
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=eos,
        pad_token_id=eos[0])
    gc = GenerationConfig(
        num_beams=k, num_return_sequences=n, length_penalty=lp,
        early_stopping=es, do_sample=False, max_new_tokens=new,
        eos_token_id=eos, pad_token_id=eos[0],
        bos_token_id=model.config.bos_token_id, output_scores=True,
        return_dict_in_generate=True)
    ids = torch.tensor([prompt], dtype=torch.long)
    kw = {}
    if processors:
        kw["logits_processor"] = transformers.LogitsProcessorList(processors)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         generation_config=gc, **kw)
    beams = [cut_at_eos(row[len(prompt):].tolist(), eos)
             for row in out.sequences]
    return beams, [float(x) for x in out.sequences_scores]


@torch.no_grad()
def cum_logprob(model, prompt, gen):
    rows = torch.log_softmax(logits_of(model, prompt + gen), dim=-1)
    return sum(float(rows[len(prompt) - 1 + i, t]) for i, t in enumerate(gen))


@torch.no_grad()
def reference_beam_search(model, prompt, eos, cfg):
    """The algorithm pagedllm's engine implements, restated without KV
    caches: every step each running beam's log-softmax row adds to its
    cumulative log-prob; of all candidates the best k that end in eos
    (or reach max_new_tokens) become hypotheses scored cum / (generated
    length, the new token included) ** length_penalty, only when among
    the top k overall; the best k others run on.  Done when all k
    hypothesis slots are full and: early_stopping True; False: the best
    running cum / generated ** lp is no better than the worst kept
    hypothesis; "never": the same with max_new_tokens as the length when
    lp > 0."""
    k, n, lp, es, new = cfg
    running = [(0.0, [])]
    hyps = []
    for step in range(1, new + 1):
        cands = []
        for cum, gen in running:
            row = torch.log_softmax(logits_of(model, prompt + gen)[-1], -1)
            vals, idx = torch.topk(row, k + len(eos))
            for v, t in zip(vals.tolist(), idx.tolist()):
                cands.append((cum + v, gen + [t]))
        cands.sort(key=lambda c: -c[0])
        last = step == new
        for rank, (cum, gen) in enumerate(cands[:k]):
            if gen[-1] in eos or last:
                hyps.append((cum / (step ** lp), gen))
        hyps.sort(key=lambda h: -h[0])
        hyps = hyps[:k]
        running = [c for c in cands if c[1][-1] not in eos][:k]
        if last:
            break
        if len(hyps) == k:
            if es is True:
                break
            length = new if (es == "never" and lp > 0) else step
            if running[0][0] / (length ** lp) <= hyps[-1][0]:
                break
    return [g for _, g in hyps[:n]], [s for s, _ in hyps[:n]]


@torch.no_grad()
def beam_stop_tokens(model, prompt, eos):
    """Two extra stop tokens: the greedy path's 4th token and the
    runner-up at the first step, neither an eos already."""
    ids = list(prompt)
    for _ in range(4):
        row = logits_of(model, ids)[-1]
        ids.append(int(torch.argmax(row)))
    first = torch.topk(logits_of(model, prompt)[-1], 8).indices.tolist()
    stops = []
    for t in [ids[len(prompt) + 3]] + first[1:]:
        if t not in eos and t not in stops:
            stops.append(t)
        if len(stops) == 2:
            break
    return stops


def beam_case(model, eos, prompt, cfg, log):
    stops = beam_stop_tokens(model, prompt, eos)
    full = eos + stops
    beams, scores = run_beam(model, prompt, full, cfg)
    again, _ = run_beam(model, prompt, full, cfg)
    if again != beams:
        raise RuntimeError("generate is not deterministic here")
    for seed in (11, 12, 13):
        noisy, _ = run_beam(model, prompt, full, cfg, [Perturb(seed)])
        if noisy != beams:
            return None
    ref, ref_scores = reference_beam_search(model, prompt, full, cfg)
    if ref != beams or any(abs(a - b) > 1e-4 for a, b in
                           zip(ref_scores, scores)):
        log.write("  REFERENCE DIFFERS cfg %s prompt %s:\n    hf  %s %s\n"
                  "    ref %s %s\n" % (cfg, prompt, beams, scores, ref,
                                        ref_scores))
        raise RuntimeError("reference_beam_search differs from generate")
    k, n, lp, es, new = cfg
    cums = [cum_logprob(model, prompt, g) for g in beams]
    for c, g, sc in zip(cums, beams, scores):
        if abs(c / (len(g) ** lp) - sc) > 1e-4 * max(1.0, abs(sc)):
            raise RuntimeError("score %g is not cum %g / %d ** %g" % (
                sc, c, len(g), lp))
    return {"prompt": prompt, "num_beams": k, "num_return_sequences": n,
            "length_penalty": lp, "early_stopping": es,
            "max_new_tokens": new, "eos_token_ids": eos,
            "stop_token_ids": stops, "beams": beams,
            "scores": [round(x, 7) for x in scores],
            "cum_logprobs": [round(x, 7) for x in cums],
            "finished_by_eos": [g[-1] in full for g in beams],
            "stable_noise": stable_noise(model, prompt, full, cfg, beams)}


def beam_model(name, fixtures, root, log):
    src = os.path.join(fixtures, name)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            src, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(
            src, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.float().eval()
    with open(os.path.join(src, "golden.json")) as f:
        golden = json.load(f)
    for case in golden["cases"]:
        row = logits_of(model, case["prompt"])[-1]
        if int(torch.argmax(row)) != case["greedy"][0]:
            raise RuntimeError("loaded model disagrees with golden.json")
    g = torch.Generator().manual_seed(4242)
    eos = model_eos(model)
    prompts = [c["prompt"] for c in golden["cases"]]
    cases = []
    for i, cfg in enumerate(BEAM_CONFIGS):
        got = None
        for t in range(BEAM_TRIES):
            if t < len(prompts):
                prompt = prompts[(i + t) % len(prompts)]
            else:
                length = int(torch.randint(4, 14, (1,), generator=g))
                prompt = torch.randint(3, VOCAB, (length,),
                                       generator=g).tolist()
            got = beam_case(model, eos, prompt, cfg, log)
            if got is not None:
                break
        if got is None:
            raise RuntimeError("no stable prompt for %s" % (cfg,))
        cases.append(got)
        log.write("  %s k=%d n=%d lp=%g es=%s: %s eos-finished %s\n" % (
            name, cfg[0], cfg[1], cfg[2], cfg[3],
            [len(b) for b in got["beams"]], got["finished_by_eos"]))
    os.makedirs(os.path.join(root, name), exist_ok=True)
    with open(os.path.join(root, name, "beam.json"), "w") as f:
        json.dump({"model": name, "transformers": transformers.__version__,
                   "torch": torch.__version__, "noise": NOISE,
                   "reference": "generate(num_beams, num_return_sequences, "
                                "length_penalty, early_stopping, "
                                "do_sample=False), float32 CPU, eager",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    log.write("%s: %d beam cases\n" % (name, len(cases)))


def main_beam(argv):
    root = argv[0] if argv else "golden-beam"
    fixtures = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "t",
        "fixtures", "golden")
    torch.set_num_threads(4)
    torch.set_grad_enabled(False)
    os.makedirs(root, exist_ok=True)
    failed = 0
    log = sys.stdout
    log.write("beam: transformers %s, torch %s\n" % (
        transformers.__version__, torch.__version__))
    for name in sorted(specs()):
        try:
            beam_model(name, fixtures, root, log)
        except Exception:
            failed += 1
            log.write("%s: FAILED\n%s" % (name, traceback.format_exc()))
        log.flush()
    return 1 if failed else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "beam":
        return main_beam(sys.argv[2:])
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
