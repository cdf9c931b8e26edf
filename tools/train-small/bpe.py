"""bpe.py: a byte-level BPE tokenizer trainer and encoder, written for
kjv-small, that saves a Hugging Face tokenizer.json.

The pipeline is Llama 3's: the added (special) tokens are matched first;
the text between them is split by Llama 3's pre-tokenizer regex (a Split,
behavior Isolated), each piece's UTF-8 bytes are mapped to printable
characters by GPT-2's byte table (ByteLevel, no prefix space, no regex of
its own), and BPE merges each piece by rank.  A post-processor puts
<|begin_of_text|> in front; the decoder is ByteLevel.  pagedllm's C
tokenizer (text/pl_tok_*.c) and Hugging Face's tokenizers load the file.

Python's re has no \\p{L} or \\p{N}, and Debian's python3-regex is not
a dependency here, so training and encoding take ASCII text only (the
King James text is all ASCII) and use the pattern with \\p{L} read as
[A-Za-z] and \\p{N} as [0-9]: on ASCII the two patterns split alike.  The
saved tokenizer.json holds Llama 3's Unicode pattern itself, for every
text.
"""

import collections
import json
import re

# Llama 3's split pattern, as its tokenizer.json holds it
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                 r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                 r"\s+(?!\S)|\s+")
ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
                         r"[^\r\nA-Za-z0-9]?[A-Za-z]+|"
                         r"[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|"
                         r"\s+(?!\S)|\s+")


def byte_table():
    """GPT-2's map from a byte to the printable character standing for it"""
    keep = (list(range(ord("!"), ord("~") + 1))
            + list(range(ord("\xa1"), ord("\xac") + 1))
            + list(range(ord("\xae"), ord("\xff") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = byte_table()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def pieces(text):
    """the pre-tokenizer's pieces of ASCII text, as byte-level strings"""
    if not text.isascii():
        raise ValueError("bpe.py takes ASCII text only: %r" % text[:40])
    return ["".join(BYTE_CHAR[b] for b in p.encode("ascii"))
            for p in ASCII_SPLIT.findall(text)]


def train(texts, tokens_wanted, min_frequency=2, log=print):
    """the merges (pairs of strings, by rank) learned from texts until the
    256 bytes and the merged strings make tokens_wanted tokens: each step
    merges the most frequent adjacent pair (ties: the pair that sorts
    last), counted over every piece times its frequency"""
    counts = collections.Counter()
    for text in texts:
        counts.update(pieces(text))
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[i]
            where[(a, b)].add(i)
    log("bpe: %d distinct pieces, %d pairs" % (len(words), len(pair_count)))
    merges = []
    made = set()
    while 256 + len(made) < tokens_wanted and pair_count:
        pair, n = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))
        if n < min_frequency:
            break
        merges.append(pair)
        joined = pair[0] + pair[1]
        made.add(joined)
        for i in list(where[pair]):
            w = words[i]
            f = freq[i]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= f
                if pair_count[(a, b)] <= 0:
                    del pair_count[(a, b)]
                where[(a, b)].discard(i)
            out = []
            k = 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == pair[0] and w[k + 1] == pair[1]:
                    out.append(joined)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += f
                where[(a, b)].add(i)
        where.pop(pair, None)
    return merges


class Tokenizer:
    """encodes and decodes with a vocabulary, merges and special tokens"""

    def __init__(self, merges, specials):
        self.merges = list(merges)
        self.rank = {p: r for r, p in enumerate(self.merges)}
        self.vocab = {BYTE_CHAR[b]: b for b in range(256)}
        for a, b in self.merges:
            self.vocab.setdefault(a + b, len(self.vocab))
        self.special = {}
        for name in specials:
            self.special[name] = len(self.vocab)
            self.vocab[name] = len(self.vocab)
        self.inverse = {i: t for t, i in self.vocab.items()}
        self.special_re = re.compile("(" + "|".join(
            re.escape(s) for s in specials) + ")")
        self.cache = {}

    def __len__(self):
        return len(self.vocab)

    def bpe(self, piece):
        """a piece's ids: the lowest-ranked adjacent pair merged first,
        every occurrence of it left to right, until no pair has a rank"""
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        w = list(piece)
        while len(w) > 1:
            ranks = [self.rank.get((a, b)) for a, b in zip(w, w[1:])]
            best = min((r for r in ranks if r is not None), default=None)
            if best is None:
                break
            a, b = self.merges[best]
            out = []
            k = 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            w = out
        ids = [self.vocab[t] for t in w]
        self.cache[piece] = ids
        return ids

    def encode(self, text, bos=None):
        """ids of text, its special tokens' names matched first; bos (a
        special token's name) goes in front when given"""
        ids = [self.special[bos]] if bos else []
        for part in self.special_re.split(text):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                for p in pieces(part):
                    ids.extend(self.bpe(p))
        return ids

    def decode(self, ids, skip_special=False):
        out = bytearray()
        for i in ids:
            t = self.inverse[i]
            if t in self.special:
                if not skip_special:
                    out += t.encode("utf-8")
            else:
                out += bytes(CHAR_BYTE[c] for c in t)
        return out.decode("utf-8", errors="replace")

    def to_json(self, bos):
        """the tokenizer.json document (Hugging Face tokenizers' format)"""
        bos_id = self.special[bos]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {"id": i, "content": name, "single_word": False,
                 "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True}
                for name, i in self.special.items()],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN},
                     "behavior": "Isolated", "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False,
                     "trim_offsets": True, "use_regex": False}]},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [bos_id],
                                         "tokens": [bos]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                        "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE", "dropout": None, "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": False,
                "byte_fallback": False, "ignore_merges": False,
                "vocab": {t: i for t, i in self.vocab.items()
                          if t not in self.special},
                "merges": [a + " " + b for a, b in self.merges]},
        }

    @classmethod
    def load(cls, path):
        """the tokenizer a tokenizer.json of to_json's holds; its
        vocabulary must be the one its merges and added tokens make"""
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        tok = cls([tuple(m.split(" ")) for m in tj["model"]["merges"]],
                  [t["content"] for t in tj["added_tokens"]])
        if tok.vocab != {**tj["model"]["vocab"],
                         **{t["content"]: t["id"]
                            for t in tj["added_tokens"]}}:
            raise ValueError("%s: the vocabulary is not the one its merges "
                             "make" % path)
        return tok

    def save(self, path, bos):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(bos), f, ensure_ascii=False, indent=1)
            f.write("\n")
