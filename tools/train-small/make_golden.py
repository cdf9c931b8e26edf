#!/usr/bin/python3
"""make_golden.py: the golden references of a trained kjv-small folder, and
its model card (README.md).

    /usr/bin/python3 tools/train-small/make_golden.py \
        --corpus .train-corpus MODEL

The reference is llama.py's Llama (LlamaForCausalLM's computation, step by
step) in float32 on the CPU over the saved bf16 weights widened exactly:
what pagedllm's CPU backend computes, so the only differences left are
float32 summation order.  transformers is not installed on the machine that
trains this model, so it is not the reference here; the engine's Llama
forward pass itself is checked against transformers on random-weight
fixtures (t/fixtures/golden, t/unit/golden.c).

golden.json holds:

  cases         greedy continuations (GREEDY_TOKENS tokens, no stop) of ten
                verse openings: Genesis 1:1's ("In the beginning God
                created") and the nine of CANDIDATES whose greedy steps are
                decided by the widest margins; for each, the prompt's ids,
                the continuation's ids and per-token texts, and the gap
                between the best and second-best logit at every step
  perplexity    a held-out passage (the first verses of Acts 27, which
                training never sees, as many as fit in PASSAGE_TOKENS):
                its ids (BOS first), every token's log-probability given
                the ones before it, the mean negative log-likelihood and
                the perplexity
  chat          the greedy answer to CHAT_QUESTION through the chat
                template, up to <|eot_id|> or <|end_of_text|>

t/71-trained.t compares the engine with them through the HTTP API.
"""

import argparse
import json
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import llama  # noqa: E402
import train  # noqa: E402

GREEDY_TOKENS = 24
PASSAGE_TOKENS = 200
CHAT_QUESTION = "Recite Genesis 1:1."
CHAT_TOKENS = 64
GENESIS = ("Genesis", 1, 1)
CANDIDATES = [
    ("Psalms", 23, 1), ("John", 3, 16), ("John", 1, 1), ("Matthew", 5, 3),
    ("Genesis", 1, 3), ("Matthew", 6, 9), ("Ecclesiastes", 1, 2),
    ("Psalms", 19, 1), ("1 Corinthians", 13, 4), ("Genesis", 1, 2),
    ("Proverbs", 3, 5), ("John", 14, 6), ("Ecclesiastes", 3, 1),
    ("John", 14, 1), ("Exodus", 20, 3), ("Psalms", 121, 1),
    ("Isaiah", 40, 31), ("Romans", 8, 28), ("Revelation", 21, 4),
    ("Ruth", 1, 16), ("Micah", 6, 8), ("Proverbs", 16, 18),
    ("Matthew", 7, 7), ("Genesis", 2, 7), ("Exodus", 3, 14),
    ("Psalms", 46, 1), ("Hebrews", 11, 1), ("Lamentations", 3, 22),
    ("James", 1, 5), ("Genesis", 1, 27),
]


def log(msg):
    print(msg, flush=True)


def load(folder):
    """(model, tokenizer) of a kjv-small folder"""
    model, _ = llama.load_folder(folder)
    model.eval()
    return model, bpe.Tokenizer.load(os.path.join(folder, "tokenizer.json"))


@torch.no_grad()
def logits_of(model, ids):
    return model(torch.tensor([ids], dtype=torch.long))[0]


@torch.no_grad()
def greedy(model, prompt, n, stop=()):
    ids = list(prompt)
    out, gaps = [], []
    for _ in range(n):
        top = torch.topk(logits_of(model, ids)[-1], 2)
        gaps.append(round(float(top.values[0] - top.values[1]), 5))
        t = int(top.indices[0])
        out.append(t)
        ids.append(t)
        if t in stop:
            break
    return out, gaps


@torch.no_grad()
def token_logprobs(model, ids):
    rows = torch.log_softmax(logits_of(model, ids).double(), dim=-1)
    return [None] + [float(rows[i - 1, ids[i]]) for i in range(1, len(ids))]


def case(model, tok, chapters, ref):
    book, chap, verse = ref
    text = dict(chapters[(book, chap)])[verse]
    head, tail = train.opening(text)
    ids = tok.encode(head, bos=train.BOS)
    gen, gaps = greedy(model, ids, GREEDY_TOKENS)
    return {"ref": train.ref_of(book, chap, verse), "prompt": head,
            "prompt_ids": ids, "greedy_ids": gen,
            "greedy_tokens": [tok.decode([i]) for i in gen],
            "greedy_text": tok.decode(gen), "corpus_rest": tail,
            "gaps": gaps, "min_gap": min(gaps)}


def passage(tok, chapters):
    """the longest run of Acts 27's first verses within PASSAGE_TOKENS"""
    verses = chapters[train.HELD_OUT]
    best = None
    for k in range(1, len(verses) + 1):
        text = "\n".join(t for _, t in verses[:k])
        ids = tok.encode(text, bos=train.BOS)
        if len(ids) > PASSAGE_TOKENS:
            break
        best = (k, text, ids)
    return best


def chat(model, tok):
    prompt = (train.BOS + train.HEADER_START + "user" + train.HEADER_END
              + "\n\n" + CHAT_QUESTION + train.EOT + train.HEADER_START
              + "assistant" + train.HEADER_END + "\n\n")
    ids = tok.encode(prompt)
    stop = (tok.special[train.EOT], tok.special[train.EOS])
    gen, gaps = greedy(model, ids, CHAT_TOKENS, stop)
    return {"messages": [{"role": "user", "content": CHAT_QUESTION}],
            "prompt": prompt, "prompt_ids": ids, "greedy_ids": gen,
            "answer": tok.decode(gen, skip_special=True), "gaps": gaps,
            "ends_with_eot": bool(gen) and gen[-1] == tok.special[train.EOT]}


def make_goldens(model, tok, chapters):
    torch.set_num_threads(1)
    first = case(model, tok, chapters, GENESIS)
    if first["prompt"] != "In the beginning God created":
        raise RuntimeError("Genesis 1:1's opening is %r" % first["prompt"])
    rest = [case(model, tok, chapters, r) for r in CANDIDATES]
    rest.sort(key=lambda c: -c["min_gap"])
    cases = [first] + rest[:9]
    for c in [first] + rest:
        log("%s %-18s min gap %6.3f  %s|%s" % (
            "*" if c in cases else " ", c["ref"], c["min_gap"], c["prompt"],
            c["greedy_text"].replace("\n", "\\n")))

    k, text, ids = passage(tok, chapters)
    lps = token_logprobs(model, ids)
    nll = -sum(lps[1:]) / (len(ids) - 1)
    book, chap = train.HELD_OUT
    ref = "%s %d:1-%d" % (book, chap, k)
    log("held out %s: %d tokens, mean NLL %.6f, perplexity %.4f"
        % (ref, len(ids), nll, math.exp(nll)))

    c = chat(model, tok)
    log("chat %r -> %r (ends with <|eot_id|>: %s)"
        % (CHAT_QUESTION, c["answer"], c["ends_with_eot"]))
    return {
        "model": "kjv-small",
        "reference": "tools/train-small/llama.py (LlamaForCausalLM's "
                     "computation) in float32 on the CPU over the bf16 "
                     "weights; transformers is not installed where this "
                     "was made",
        "torch": torch.__version__,
        "greedy_tokens": GREEDY_TOKENS,
        "known_passage": {"prompt": first["prompt"],
                          "expected": " the heaven and the earth",
                          "continues": first["greedy_text"].startswith(
                              " the heaven and the earth")},
        "cases": cases,
        "perplexity": {"ref": ref, "held_out": True, "text": text,
                       "ids": ids, "token_logprobs": lps, "mean_nll": nll,
                       "perplexity": math.exp(nll)},
        "chat": c,
    }


def write_card(folder, info, g, epochs):
    v = info["versions"]
    stages = info["stages"]
    s = stages[0]["settings"]
    total = sum(x["tokens_seen"] for x in stages)
    epoch_tokens = epochs[0]
    passes = sum(x["tokens_seen"] / n for x, n in zip(stages, epochs))
    openings = sum(x["tokens_seen"] / n * x["settings"]["opening_weight"]
                   for x, n in zip(stages, epochs))
    stage_rows = "\n".join(
        "| %d | %d | %g, %d | %d | %d | %s | %.0f s | %.0f | %.4f | %.4f |"
        % (i + 1, x["settings"]["steps"], x["settings"]["lr"],
            x["settings"]["warmup"], x["settings"]["opening_weight"],
            x["seed"], format(x["tokens_seen"], ","),
            x["train_seconds"], x["tokens_per_second"], x["final_loss"],
            x["held_out_loss"]) for i, x in enumerate(stages))
    commands = "\n".join("    " + x["command"] for x in stages)
    weights = ", then ".join(str(x["settings"]["opening_weight"])
                             for x in stages)
    p = g["perplexity"]
    first = g["cases"][0]
    size = os.path.getsize(os.path.join(folder, "model.safetensors"))
    cases = "\n".join(
        "| %s | %s | %s | %.2f |" % (
            c["ref"], c["prompt"],
            c["greedy_text"].replace("\n", "\\n").replace("|", "\\|"),
            c["min_gap"]) for c in g["cases"])
    debs = "\n".join("    %s %s" % (k[4:], v[k]) for k in sorted(v)
                     if k.startswith("deb:") and v[k])
    sources = "\n".join("    " + " ".join(x) for x in info["sources"])
    text = f"""# kjv-small

A small Llama-architecture language model trained from scratch, on the CPU,
on the King James Version of the Bible, so that pagedllm's `make run`
answers in words and a golden test (`t/71-trained.t`) runs on trained
weights. It writes English in the style of the 1611 translation, continues
verses and answers chat turns in Llama 3's chat format. It knows nothing
but its corpus, and at {info['params'] / 1e6:.1f} M parameters it knows
that only loosely: a test and demonstration model.

## Corpus and licences

- Text: the King James Version (1611), public domain, from Debian's
  `bible-kjv-text`, printed verse by verse by the `bible` program of
  Debian's `bible-kjv` (GPL-2+; run as a tool, nothing of it shipped).
  Packages (name, version, sha256 of the .deb):

{sources}

- `tools/train-small/prepare-corpus.sh` downloads them with
  `apt-get download` and writes `kjv.tsv` (31,102 verses).
- Held out: {info['held_out']}, which training never sees.
- The weights and the tokenizer derive from public-domain text alone and
  are offered under the same terms as pagedllm itself.

## Model

| | |
|---|---|
| architecture | LlamaForCausalLM, tied embeddings, grouped-query attention |
| parameters | {info['params']:,} |
| layers, hidden, MLP | {s['layers']}, {s['hidden']}, {s['intermediate']} |
| heads, KV heads, head dim | {s['heads']}, {s['kv_heads']}, {s['hidden'] // s['heads']} |
| RoPE theta, RMSNorm eps | 10000, 1e-5 |
| vocabulary | {s['vocab']}: byte-level BPE (`tools/train-small/bpe.py`), Llama 3's split pattern, 5 special tokens |
| context | {s['context']} tokens (trained on windows of {s['seq']}) |
| weights | bfloat16, `model.safetensors`, {size:,} bytes |

Special tokens: `<|begin_of_text|>` (put before every sequence by the
tokenizer's post-processor), `<|end_of_text|>` (ends a document),
`<|start_header_id|>`, `<|end_header_id|>`, `<|eot_id|>` (ends a chat
turn). Generation stops at `<|eot_id|>` or `<|end_of_text|>`
(`generation_config.json`). The chat template is Llama 3's:

    <|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nQUESTION<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\nANSWER<|eot_id|>

## Training

The data are drawn again each epoch from a seeded generator: every chapter
but the held-out one as one document, its verses one a line, either plain
or each after its reference ("Genesis 1:1 In the beginning ..."), half the
chapters each way, the first chapter of each of the 66 books written
several times ({weights} times an epoch in the stages below); and for {info['chat_share']:.0%} of the
verses a chat conversation in the template's format, where the user asks
for the verse by its reference or gives its first half and the assistant
answers with the verse or its rest.
An epoch of the first stage is {epoch_tokens:,} tokens. Training ran in
{len(stages)} stages (below), {total:,} tokens in all: every verse is seen
about {passes:.1f} times, a book's opening chapter some
{openings:.0f} times.

Why the weighting: the openings are the passages readers know and start
from, and a model this small, trained for a few epochs on two CPU cores,
does not learn a passage word for word from a few readings: after
the first stage, which read each opening chapter about nine times,
"In the beginning God created the" gave " heaven" a log-probability of
-5.3. The later stages read the openings four times as often again
(about a third of their data), which the golden test's known passage
needs. It is a rule over all 66 books' first chapters, not over any
prompt of the tests.

Each stage: AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices), its
learning rate after its warm-up steps on a cosine to a tenth, batches of
{s['batch']} windows of {s['seq']} tokens, gradients clipped at 1, float32,
one torch thread; each later stage starts from the weights of the one
before with a fresh optimizer (a warm restart) and a new seed for its
data.

| stage | steps | learning rate, warm-up | openings weight | seed | tokens | wall time | tokens/s | last training loss | held-out loss |
|---|---|---|---|---|---|---|---|---|---|
{stage_rows}

On two shared x86-64 cores, no GPU. The training loss is the last logged
batch's; the held-out loss is over {info['held_out']} (both forms), in
nats per token.

| | |
|---|---|
| held-out perplexity, {p['ref']} | {p['perplexity']:.3f} (mean NLL {p['mean_nll']:.5f} over {len(p['ids']) - 1} tokens) |

![loss](loss.png)

`train.log` holds the three stages' logs (settings, versions, every tenth
step's loss and speed, the held-out loss every hundred).

Versions: Python {v['python']}, torch {v['torch']}, numpy {v['numpy']}.
Debian packages:

{debs}
    libopenblas0-pthread {info.get('blas', '?')} (unpacked with dpkg -x, loaded by LD_LIBRARY_PATH: Debian's torch otherwise runs its matrix products on the reference BLAS, 50 times slower)

The whole build, from a fresh checkout (about 50 minutes on two shared
cores):

    sh tools/train-small/build.sh models/kjv-small

which runs `prepare-corpus.sh`, then the stages (the first writes
`.train-corpus/stage1`, each later one reads the one before, PREVIOUS,
and the last writes OUTDIR) and the goldens:

{commands}
    /usr/bin/python3 tools/train-small/make_golden.py --corpus .train-corpus OUTDIR

## Golden references

`golden.json`, made by `tools/train-small/make_golden.py`. The reference
is `tools/train-small/llama.py`, a plain-PyTorch restatement of
LlamaForCausalLM's forward pass, in float32 on the CPU over these bf16
weights widened exactly (transformers is not installed on the machine
that trained this model; the engine's Llama forward is checked against
transformers itself on random-weight fixtures in `t/fixtures/golden`).

- Greedy continuations ({g['greedy_tokens']} tokens) of ten verse openings:
  Genesis 1:1's and the nine of 30 candidates whose greedy steps have the
  widest margin between the best and second-best logit (the smallest such
  gap is listed; a gap far above float32 noise means rounding cannot
  decide the test):

| verse | prompt | greedy continuation | smallest gap |
|---|---|---|---|
{cases}

- "{first['prompt']}" continues "{first['greedy_text'].split(chr(10))[0]}".
- Every token's log-probability over {p['ref']} (held out), perplexity
  {p['perplexity']:.3f}.
- The greedy chat answer to "{CHAT_QUESTION}": "{g['chat']['answer']}"
  (ends with `<|eot_id|>`: {str(g['chat']['ends_with_eot']).lower()}).
"""
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--corpus", default=".train-corpus")
    args = ap.parse_args()
    chapters, _ = train.read_corpus(args.corpus)
    model, tok = load(args.model)
    g = make_goldens(model, tok, chapters)
    with open(os.path.join(args.model, "golden.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.model, "training.json")) as f:
        info = json.load(f)
    blas = os.path.join(args.corpus, "blas", "VERSION")
    if os.path.exists(blas):
        with open(blas) as f:
            info["blas"] = f.read().strip()
    epochs = [len(train.encode_all(tok, train.epoch_documents(
                  chapters, random.Random(x["seed"]),
                  x["settings"]["opening_weight"])))
              for x in info["stages"]]
    write_card(args.model, info, g, epochs)
    ok = g["known_passage"]["continues"] and g["chat"]["ends_with_eot"]
    log("RESULT %s: known passage %s, chat ends with <|eot_id|> %s" % (
        args.model, g["known_passage"]["continues"],
        g["chat"]["ends_with_eot"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
