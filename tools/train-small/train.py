#!/usr/bin/python3
"""train.py: trains kjv-small, the small Llama model `make run` serves, on
the CPU with Debian's PyTorch (no transformers, no tokenizers library).

    /usr/bin/python3 tools/train-small/train.py --corpus .train-corpus OUTDIR
    /usr/bin/python3 tools/train-small/train.py --probe 20 OUTDIR
    /usr/bin/python3 tools/train-small/train.py --continue-from PREVIOUS \
        --steps N --lr LR --warmup N --seed N OUTDIR

It trains a byte-level BPE tokenizer (bpe.py), then a Llama (llama.py)
from scratch on the King James Bible (public domain; Debian's
bible-kjv-text, made into kjv.tsv by prepare-corpus.sh), and writes into
OUTDIR a Hugging Face folder: config.json, generation_config.json,
model.safetensors (bf16), tokenizer.json, tokenizer_config.json (with the
chat template), plus loss.tsv, loss.png and training.json (the settings,
versions, times and losses make_golden.py puts in the model card).
--probe N trains N steps and prints the speed, writing nothing.
--continue-from trains the model of a folder it wrote further, as a new
stage with its own warm-up and cosine (a warm restart), its tokenizer
kept; training.json lists the stages and loss.png shows them end to end.

Data, drawn again each epoch from a seeded generator: every chapter but
the held-out one (Acts 27) as one document, its verses one a line, either
plain or each after its reference ("Genesis 1:1 In the beginning ..."),
half the chapters each way, the first chapter of each of the 66 books
written OPENING_WEIGHT times (the openings are the passages readers know
and start from, and a model this small, trained for two or three epochs,
does not learn a passage it has seen two or three times); and for 30% of the verses a chat conversation
in the template's format, where the user asks for the verse by its
reference or gives its first half and the assistant answers with the verse
or its rest.  Each epoch's documents, shuffled, are concatenated and cut
into windows; the training sees every verse once an epoch (an opening
chapter's OPENING_WEIGHT times), so the number of epochs is what decides
how well it knows a passage.  Seeds are fixed
(Python, numpy, torch) and torch runs on one thread (on this shared
two-core machine one thread ran a step faster than two), so a run on the
same versions and BLAS repeats its losses.
"""

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import llama  # noqa: E402

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
HEADER_START = "<|start_header_id|>"
HEADER_END = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIALS = [BOS, EOS, HEADER_START, HEADER_END, EOT]

# Llama 3's chat format over this vocabulary's special tokens
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")

HELD_OUT = ("Acts", 27)
CHAT_SHARE = 0.2
# the first chapter of every book is written this many times an epoch
# (--opening-weight)
OPENING_WEIGHT = 4

SIZE = dict(opening_weight=OPENING_WEIGHT,
            vocab=4096, hidden=192, layers=4, heads=3, kv_heads=1,
            intermediate=512, context=256, seq=256, batch=16, steps=900,
            lr=3e-3, warmup=50, log_every=10, eval_every=100)

ASK = ["What does %s say?", "Quote %s.", "Recite %s.",
       "Give me %s from the King James Bible.", "What is written in %s?"]
CONTINUE = ["Finish this verse: %s", "Continue: %s",
            "How does this verse go on? %s"]


def log(msg):
    print(msg, flush=True)


def debian_version(package):
    try:
        return subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package],
            capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def versions():
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "numpy": np.__version__, "threads": torch.get_num_threads(),
         "cpu": platform.processor() or platform.machine()}
    for pkg in ("python3", "python3-torch", "libtorch1.13", "python3-numpy",
                "python3-matplotlib", "libopenblas0-pthread"):
        v["deb:" + pkg] = debian_version(pkg)
    return v


# ---- the corpus and the documents ---------------------------------------------

def read_corpus(folder):
    """{(book, chapter): [(verse, text)]} in the Bible's order, and the
    SOURCES lines (package, version, sha256)"""
    chapters = {}
    with open(os.path.join(folder, "kjv.tsv"), encoding="utf-8") as f:
        for line in f:
            book, chap, verse, text = line.rstrip("\n").split("\t")
            chapters.setdefault((book, int(chap)), []).append(
                (int(verse), text))
    with open(os.path.join(folder, "SOURCES"), encoding="utf-8") as f:
        sources = [line.split() for line in f if line.strip()]
    return chapters, sources


def ref_of(book, chap, verse):
    return "%s %d:%d" % (book, chap, verse)


def opening(text):
    """a verse cut after the first half of its words (at least four, one
    left over): the head and the rest, the rest with its leading space"""
    words = text.split(" ")
    k = min(max(4, (len(words) + 1) // 2), len(words) - 1)
    return " ".join(words[:k]), " " + " ".join(words[k:])


def chat_text(user, assistant):
    return (BOS + HEADER_START + "user" + HEADER_END + "\n\n" + user.strip()
            + EOT + HEADER_START + "assistant" + HEADER_END + "\n\n"
            + assistant.strip() + EOT)


def chapter_text(book, chap, verses, with_refs):
    if with_refs:
        lines = [ref_of(book, chap, v) + " " + t for v, t in verses]
    else:
        lines = [t for _, t in verses]
    return BOS + "\n".join(lines) + EOS


def chat_doc(book, chap, verse, text, rng):
    if len(text.split(" ")) >= 6 and rng.random() < 0.5:
        head, tail = opening(text)
        return chat_text(rng.choice(CONTINUE) % head, tail)
    return chat_text(rng.choice(ASK) % ref_of(book, chap, verse), text)


def epoch_documents(chapters, rng, opening_weight=OPENING_WEIGHT):
    """one epoch's documents: each chapter once (a book's first chapter
    opening_weight times), plain or with references, and chat
    conversations for CHAT_SHARE of the verses"""
    docs = []
    for (book, chap), verses in chapters.items():
        if (book, chap) == HELD_OUT:
            continue
        for _ in range(opening_weight if chap == 1 else 1):
            docs.append(chapter_text(book, chap, verses, rng.random() < 0.5))
        for v, t in verses:
            if rng.random() < CHAT_SHARE:
                docs.append(chat_doc(book, chap, v, t, rng))
    rng.shuffle(docs)
    return docs


def held_out_documents(chapters):
    book, chap = HELD_OUT
    verses = chapters[HELD_OUT]
    return [chapter_text(book, chap, verses, False),
            chapter_text(book, chap, verses, True)]


def make_tokenizer(chapters, s, seed):
    """the BPE tokenizer, trained on one epoch's documents"""
    t = time.time()
    sample = epoch_documents(chapters, random.Random(seed + 1))
    merges = bpe.train((without_specials(d) for d in sample),
                       s["vocab"] - len(SPECIALS), log=log)
    tok = bpe.Tokenizer(merges, SPECIALS)
    log("tokenizer: %d tokens, %d merges (%.1f s); Genesis 1:1 -> %s" % (
        len(tok), len(merges), time.time() - t,
        [tok.inverse[i] for i in tok.encode(chapters[("Genesis", 1)][0][1])]))
    return tok


def without_specials(doc):
    """a document's text for the BPE trainer, which would otherwise learn
    merges inside the special tokens' names"""
    for name in SPECIALS:
        doc = doc.replace(name, "\n")
    return doc


def encode_all(tok, docs):
    ids = []
    for d in docs:
        ids.extend(tok.encode(d))
    return np.asarray(ids, dtype=np.int64)


# ---- training ----------------------------------------------------------------------

def lr_at(step, s):
    if step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    p = (step - s["warmup"]) / max(1, s["steps"] - s["warmup"])
    return s["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, s):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    keep = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": keep, "weight_decay": 0.0}],
                             lr=s["lr"], betas=(0.9, 0.95), eps=1e-8)


def windows(ids, seq):
    """ids cut into [n, seq + 1] windows (each one token longer than the
    model's input: its targets are the input moved by one)"""
    n = (len(ids) - 1) // seq
    return np.stack([ids[i * seq:i * seq + seq + 1] for i in range(n)])


def batches(chapters, tok, s, seed):
    """endless (epoch, batch) pairs: each epoch's documents drawn, encoded,
    cut into windows, the windows shuffled"""
    rng = random.Random(seed)
    order = np.random.default_rng(seed)
    epoch = 0
    while True:
        data = encode_all(tok, epoch_documents(chapters, rng,
                                               s["opening_weight"]))
        w = windows(data, s["seq"])
        order.shuffle(w)
        log("epoch %d: %d tokens, %d windows" % (epoch, len(data), len(w)))
        for i in range(0, len(w) - s["batch"] + 1, s["batch"]):
            yield epoch, torch.from_numpy(w[i:i + s["batch"]])
        epoch += 1


def loss_of(model, batch):
    logits = model(batch[:, :-1])
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def held_out_loss(model, val, seq):
    model.eval()
    w = torch.from_numpy(windows(val, seq))
    loss = float(loss_of(model, w))
    model.train()
    return loss


def train(model, chapters, tok, val, s, seed, on_eval):
    opt = make_optimizer(model, s)
    curve = []
    t0 = time.time()
    tokens = 0
    epoch = 0
    model.train()
    feed = batches(chapters, tok, s, seed)
    for step in range(s["steps"]):
        epoch, batch = next(feed)
        lr = lr_at(step, s)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = loss_of(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += batch.shape[0] * (batch.shape[1] - 1)
        done = step + 1
        if done % s["log_every"] == 0 or done == s["steps"]:
            elapsed = time.time() - t0
            curve.append(("train", done, float(loss)))
            log("step %5d/%d  epoch %d  loss %.4f  lr %.2e  grad-norm %.3f  "
                "%.0f tokens/s  %.0f s" % (done, s["steps"], epoch,
                                         float(loss), lr, float(norm),
                                         tokens / elapsed, elapsed))
        if done % s["eval_every"] == 0 or done == s["steps"]:
            v = held_out_loss(model, val, s["seq"])
            curve.append(("held-out", done, v))
            log("step %5d  held-out loss %.4f" % (done, v))
            on_eval(curve)
    return curve, time.time() - t0, tokens, epoch


# ---- saving --------------------------------------------------------------------

def save_tokenizer(tok, outdir, context):
    tok.save(os.path.join(outdir, "tokenizer.json"), BOS)
    decoder = {}
    for name in SPECIALS:
        decoder[str(tok.special[name])] = {
            "content": name, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": True}
    cfg = {"added_tokens_decoder": decoder, "bos_token": BOS,
           "eos_token": EOT, "chat_template": CHAT_TEMPLATE,
           "clean_up_tokenization_spaces": False,
           "model_max_length": context,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def save_model(model, cfg, outdir):
    llama.save_safetensors(os.path.join(outdir, "model.safetensors"),
                           llama.checkpoint_tensors(model))
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg.hf(), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg.bos, "eos_token_id": cfg.eos,
                   "do_sample": True, "temperature": 0.7, "top_p": 0.9},
                  f, indent=2)
        f.write("\n")


def write_curve(curve, outdir):
    with open(os.path.join(outdir, "loss.tsv"), "w") as f:
        f.write("series\tstep\tloss\n")
        for series, step, value in curve:
            f.write("%s\t%d\t%.5f\n" % (series, step, value))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    train_pts = [(s, v) for k, s, v in curve if k == "train"]
    val_pts = [(s, v) for k, s, v in curve if k == "held-out"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(*zip(*train_pts), label="training (one batch)", lw=1)
    ax.plot(*zip(*val_pts), "o-", label="held out (Acts 27)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("kjv-small")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "loss.png"))
    plt.close(fig)


def stacked_curve(folder, curve):
    """the loss curve of an earlier stage (its loss.tsv), then this
    stage's, its steps counted on from the earlier stage's last"""
    with open(os.path.join(folder, "loss.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    before = [(k, int(step), float(v)) for k, step, v in rows]
    last = max(step for _, step, _ in before)
    return before + [(k, step + last, v) for k, step, v in curve]


# ---- main -------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--corpus", default=".train-corpus",
                    help="the folder prepare-corpus.sh wrote")
    ap.add_argument("--probe", type=int,
                    help="train this many steps, print the speed, save "
                         "nothing")
    ap.add_argument("--steps", type=int, help="training steps")
    ap.add_argument("--lr", type=float, help="peak learning rate")
    ap.add_argument("--warmup", type=int, help="warm-up steps")
    ap.add_argument("--opening-weight", type=int,
                    help="how many times a book's first chapter is written "
                         "an epoch (default %d)" % OPENING_WEIGHT)
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--continue-from", metavar="FOLDER",
                    help="a folder this script wrote: train its model "
                         "further, with its tokenizer, as a new stage")
    args = ap.parse_args()

    torch.set_num_threads(1)
    s = dict(SIZE)
    for key in ("steps", "lr", "warmup", "opening_weight"):
        if getattr(args, key):
            s[key] = getattr(args, key)
    if args.probe:
        s.update(steps=args.probe, log_every=5, eval_every=args.probe)
    v = versions()
    log("versions: " + json.dumps(v, sort_keys=True))
    log("settings: " + json.dumps(s, sort_keys=True))
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    chapters, sources = read_corpus(args.corpus)
    log("corpus: %d chapters, %d verses, sources %s" % (
        len(chapters), sum(len(c) for c in chapters.values()), sources))

    if args.continue_from:
        tok = bpe.Tokenizer.load(os.path.join(args.continue_from,
                                              "tokenizer.json"))
        model, cfg = llama.load_folder(args.continue_from)
    else:
        tok = make_tokenizer(chapters, s, args.seed)
        s["vocab"] = len(tok)
        cfg = llama.Config(s["vocab"], s["hidden"], s["layers"], s["heads"],
                           s["kv_heads"], s["intermediate"], s["context"],
                           bos=tok.special[BOS],
                           eos=[tok.special[EOS], tok.special[EOT]])
        model = llama.Llama(cfg)
        model.init_weights()
    val = encode_all(tok, held_out_documents(chapters))
    params = llama.count_params(model)
    log("model: %d parameters; held out %d tokens" % (params, len(val)))

    if not args.probe:
        os.makedirs(args.outdir, exist_ok=True)
        save_tokenizer(tok, args.outdir, s["context"])

    def on_eval(curve):
        if not args.probe:
            save_model(model, cfg, args.outdir)
            write_curve(curve, args.outdir)

    curve, seconds, tokens, epoch = train(model, chapters, tok, val, s,
                                          args.seed, on_eval)
    final = [x for x in curve if x[0] == "train"][-1][2]
    held = [x for x in curve if x[0] == "held-out"][-1][2]
    log("trained: %d steps, %d tokens, %d epochs begun, in %.1f s "
        "(%.0f tokens/s); final loss %.4f, held-out %.4f"
        % (s["steps"], tokens, epoch + 1, seconds, tokens / seconds, final,
           held))
    if args.probe:
        return 0

    command = "/usr/bin/python3 tools/train-small/train.py --corpus " \
              ".train-corpus"
    for key in ("steps", "lr", "warmup", "opening_weight"):
        if getattr(args, key):
            command += " --%s %g" % (key.replace("_", "-"),
                                     getattr(args, key))
    if args.seed != 1611:
        command += " --seed %d" % args.seed
    if args.continue_from:
        command += " --continue-from PREVIOUS"
    stage = {"settings": s, "seed": args.seed, "tokens_seen": tokens,
             "epochs_begun": epoch + 1, "train_seconds": seconds,
             "tokens_per_second": tokens / seconds, "final_loss": final,
             "held_out_loss": held, "command": command + " OUTDIR"}
    stages = [stage]
    if args.continue_from:
        with open(os.path.join(args.continue_from, "training.json")) as f:
            stages = json.load(f)["stages"] + stages
        curve = stacked_curve(args.continue_from, curve)
        write_curve(curve, args.outdir)
    info = {"versions": v, "sources": sources, "params": params,
            "stages": stages, "chat_share": CHAT_SHARE,
            "held_out": "%s %d" % HELD_OUT}
    with open(os.path.join(args.outdir, "training.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
