"""Random-weight checkpoints for bench/paper/run.sh, made on the GPU machine.

    python3 bench/paper/make_model.py SHAPE DIR
    python3 bench/paper/make_model.py tokenizer DIR TEMPLATE_DIR

SHAPE is llama2-7b (Llama-2-7B: 32 layers, hidden 4096, 32 KV heads,
vocabulary 32000) or llama3-8b (Llama-3-8B: 32 layers, hidden 4096,
8 KV heads, intermediate 14336, vocabulary 128256, rope theta 500000).
The weights are transformers' own initialisation under a fixed seed, built
directly in bf16 on the GPU and saved as safetensors; the serving path only
needs the shapes, since every request asks for exact output lengths
(ignore_eos).

"tokenizer" gives the model in DIR a tokenizer that covers its whole
vocabulary, so that every sampled id decodes to text (the time to a
request's first token is then its first token's) and text re-encodes to
about as many tokens as English does with a real tokenizer (a chat's
history is then as long as the replies generated, and pagedllm-load's
estimate of 4 bytes a token holds).  It is a byte-level BPE built from
TEMPLATE_DIR's tokenizer.json and tokenizer_config.json (the tiny test
model's pre-tokenizer, decoder, post-processor and chat template).  Its
ids, in order around the model's bos and eos ids (which carry the
template's special tokens): the 256 byte symbols; a space followed by
one, two and three lowercase letters; a space and each word of
pagedllm-load's English word list (its load_words[]); then a space
and four letters until the vocabulary is full.  Every merge extends a
space-led token by one letter, so a space-led word encodes as one chain:
a sampled id's text (" abc", " abcd") encodes back to that id, and each
listed word to one token.
"""
import glob
import itertools
import re
import json
import os
import string
import sys
import time

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
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

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


def byte_symbols():
    """GPT-2's byte-level alphabet: byte b -> one printable character
    (tools/train-small/bpe.py's table, which needs only the standard
    library)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", "..", "tools", "train-small"))
    import bpe
    return [bpe.BYTE_CHAR[b] for b in range(256)]


def load_words():
    """pagedllm-load's English words (the text of its chat turns), from
    the array load_words[] in its sources."""
    for path in sorted(glob.glob("bench/*.c") + glob.glob("bench/load/*.c")):
        with open(path) as f:
            m = re.search(r"load_words\[\]\s*=\s*\{(.*?)\};", f.read(),
                          re.S)
        if m:
            return [w for w in re.findall(r'"([a-z]+)"', m.group(1))
                    if len(w) > 3]
    sys.exit("make_model.py: pagedllm-load's load_words[] was not found")


def symbols_and_merges(n):
    """n vocabulary strings and the merges that build those past the bytes:
    each merge is a space-led token and one more letter."""
    syms, merges = byte_symbols(), []
    seen = set(syms)
    space = syms[ord(" ")]
    letters = string.ascii_lowercase

    def chains():
        for k in (1, 2, 3):
            for t in itertools.product(letters, repeat=k):
                yield "".join(t)
        for w in load_words():
            for k in range(4, len(w) + 1):
                yield w[:k]
        for t in itertools.product(letters, repeat=4):
            yield "".join(t)

    for w in chains():
        if len(syms) == n:
            return syms, merges
        if space + w in seen:
            continue
        left = space + w[:-1]
        if left not in seen:
            continue
        syms.append(space + w)
        merges.append(f"{left} {w[-1]}")
        seen.add(space + w)
    sys.exit(f"a vocabulary of {n} is past this generator's reach")


def make_tokenizer(out, template):
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    with open(f"{template}/tokenizer.json") as f:
        tok = json.load(f)
    with open(f"{template}/tokenizer_config.json") as f:
        tcfg = json.load(f)
    vocab_size = cfg["vocab_size"]
    special = {cfg["bos_token_id"]: tcfg["bos_token"],
               cfg["eos_token_id"]: tcfg["eos_token"]}
    syms, merges = symbols_and_merges(vocab_size - len(special))
    ids = [i for i in range(vocab_size) if i not in special]
    tok["model"]["vocab"] = dict(zip(syms, ids))
    tok["model"]["merges"] = merges
    by_content = {t["content"]: t for t in tok["added_tokens"]}
    tok["added_tokens"] = [dict(by_content[c], id=i)
                           for i, c in sorted(special.items())]
    for t in tok["post_processor"].get("special_tokens", {}).values():
        t["ids"] = [i for i, c in special.items() if c == t["id"]]
    old = tcfg["added_tokens_decoder"]
    tcfg["added_tokens_decoder"] = {
        str(i): next(v for v in old.values() if v["content"] == c)
        for i, c in sorted(special.items())}
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(f"{out}/tokenizer_config.json", "w") as f:
        json.dump(tcfg, f, indent=2)
    print(f"tokenizer for {out}: {vocab_size} ids, {len(merges)} merges",
          flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "tokenizer":
        make_tokenizer(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] in SHAPES:
        make_model(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: make_model.py llama2-7b|llama3-8b DIR\n"
                 "       make_model.py tokenizer DIR TEMPLATE_DIR")
