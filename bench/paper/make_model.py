"""Random-weight checkpoints for bench/paper/run.sh, made on the GPU machine.

    python3 bench/paper/make_model.py SHAPE DIR

SHAPE is llama2-7b (Llama-2-7B: 32 layers, hidden 4096, 32 KV heads,
vocabulary 32000) or llama3-8b (Llama-3-8B: 32 layers, hidden 4096,
8 KV heads, intermediate 14336, vocabulary 128256, rope theta 500000).
The weights are transformers' own initialisation under a fixed seed, built
directly in bf16 on the GPU and saved as safetensors; the serving path only
needs the shapes, since every request asks for exact output lengths
(ignore_eos).  The models have no tokenizer of their own: run.sh copies the
tiny test model's tokenizer.json in and sends token-id prompts.
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000,
                      max_position_embeddings=4096, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_theta=500000.0, tie_word_embeddings=False,
                      bos_token_id=128000, eos_token_id=128001),
}


def make_model(shape, out):
    t = time.time()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**SHAPES[shape]))
    model.save_pretrained(out, safe_serialization=True)
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"     # both spellings
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    params = sum(p.numel() for p in model.parameters())
    print(f"model {shape} in {out}: {params / 1e9:.2f} B parameters, "
          f"{params * 2 / 1e9:.2f} GB bf16, made in {time.time() - t:.0f} s",
          flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit("usage: make_model.py llama2-7b|llama3-8b DIR")
    make_model(sys.argv[1], sys.argv[2])
