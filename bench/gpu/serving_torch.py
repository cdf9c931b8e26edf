"""Baselines for bench/gpu/serving.sh, on the lent GPU machine.

make-model DIR: a Llama-2-7B-shaped checkpoint with random bf16 weights
(transformers' own initialisation, fixed seed), saved as safetensors.
copy: only the copy bandwidth.
baseline DIR BATCHES P G: transformers' generate (greedy, exactly G new
tokens) at each batch size on the same shapes, and the device-to-device
copy bandwidth; one line per measurement.
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPE = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
             max_position_embeddings=4096, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=False,
             bos_token_id=1, eos_token_id=2)


def make_model(out):
    torch.manual_seed(0)
    config = LlamaConfig(**SHAPE)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"     # both spellings
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    params = sum(p.numel() for p in model.parameters())
    print(f"model {out}: {params / 1e9:.2f} B parameters, "
          f"{params * 2 / 1e9:.2f} GB bf16", flush=True)


def copy_bandwidth():
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        dst.copy_(src)
    torch.cuda.synchronize()
    secs = (time.perf_counter() - t) / 20
    print(f"copy d2d {2 * src.numel() / secs / 1e12:.2f} TB/s "
          f"(read + write)", flush=True)


def baseline(path, batches, prompt, gen):
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                             device_map="cuda")
    model.eval()
    for b in batches:
        ids = torch.randint(3, 32000, (b, prompt), device="cuda")
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = model.generate(ids, max_new_tokens=gen, min_new_tokens=gen,
                                 **kw)
            torch.cuda.synchronize()
            secs = time.perf_counter() - t
        new = (out.shape[1] - prompt) * b
        print(f"transformers batch {b}: {new / secs:.1f} output tok/s, "
              f"{secs / gen * 1e3:.2f} ms per step", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make-model":
        make_model(sys.argv[2])
    elif sys.argv[1] == "copy":
        copy_bandwidth()
    else:
        copy_bandwidth()
        baseline(sys.argv[2], [int(b) for b in sys.argv[3].split(",")],
                 int(sys.argv[4]), int(sys.argv[5]))
