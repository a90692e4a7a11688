"""tools/train/bpe_tokenizer.py — a byte-level BPE tokenizer of the project's own (GPT-2 scheme).

Owns: training the merges on a list of texts, encoding text to ids (the semantics of the
Hugging Face `tokenizers` pipeline this file writes: added tokens split out first, then the
GPT-2 regex, the byte -> unicode table, BPE by merge rank), decoding, and writing
tokenizer.json / tokenizer_config.json. Does not own the corpus or the model.

Ids: 0..255 are the single bytes (id = byte value), 256 + r is the symbol made by merge r
(rank r, in the order training chose them), then the added special tokens.

Training (Sennrich et al. 2016, GPT-2's byte-level variant): the texts are split with the
GPT-2 pre-tokenizer regex into words (pre-tokens) counted once per occurrence; every word
starts as its bytes; each step merges the most frequent adjacent pair of symbols, counted
over all words weighted by their frequency. Ties are broken by the smaller pair in byte
order: (bytes of the left symbol, bytes of the right symbol) compared as Python bytes
tuples. A merge rewrites every word left to right, non-overlapping ("a a a" -> "aa a"), as
the encoder does. Pair counts are updated only for the words that hold the merged pair;
the best pair comes from a heap with stale entries skipped. Deterministic: the result is a
function of the texts and the merge count only.
"""

import heapq
import json
import os
from collections import Counter

import regex

# GPT-2's pre-tokenizer (openai/gpt-2 encoder.py; tokenizers ByteLevel with use_regex true).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRE = regex.compile(GPT2_PATTERN)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # Qwen3's chat markup spellings


def bytes_to_unicode():
    """GPT-2's table: byte -> printable character (printable Latin-1 bytes map to themselves,
    the other 68 to U+0100.. in byte order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) \
        + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def _merge_word(w, a, b, new):
    out, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(w[i])
            i += 1
    return out


def train(texts, n_merges, log=None):
    """-> merges [(left id, right id)] in rank order; symbol 256 + r is merge r's result."""
    counts = Counter()
    for t in texts:
        counts.update(m.encode("utf-8") for m in PRE.findall(t))
    words = [list(w) for w in counts]  # symbols (ids) of each distinct word
    freq = list(counts.values())
    sym = [bytes([i]) for i in range(256)]  # id -> bytes
    pc, where = Counter(), {}
    for wi, w in enumerate(words):
        for p in zip(w, w[1:]):
            pc[p] += freq[wi]
            where.setdefault(p, set()).add(wi)
    heap = [(-c, sym[a], sym[b], a, b) for (a, b), c in pc.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        c, _, _, a, b = heapq.heappop(heap)
        if pc.get((a, b), 0) != -c or c == 0:
            continue  # stale entry (the pair's count changed since it was pushed)
        new = len(sym)
        sym.append(sym[a] + sym[b])
        merges.append((a, b))
        changed = set()
        for wi in sorted(where.pop((a, b))):
            w, f = words[wi], freq[wi]
            for p in zip(w, w[1:]):
                pc[p] -= f
                changed.add(p)
            w = words[wi] = _merge_word(w, a, b, new)
            for p in zip(w, w[1:]):
                pc[p] += f
                changed.add(p)
                where.setdefault(p, set()).add(wi)
        for p in changed:
            n = pc.get(p, 0)
            if n > 0:
                heapq.heappush(heap, (-n, sym[p[0]], sym[p[1]], p[0], p[1]))
            else:
                pc.pop(p, None)
                where.pop(p, None)
        if log and len(merges) % 500 == 0:
            log("bpe: %d merges, last %r (count %d)" % (len(merges), sym[new], -c))
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.sym = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            self.sym.append(self.sym[a] + self.sym[b])
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self.special = {s: len(self.sym) + i for i, s in enumerate(SPECIALS)}
        self.vocab_size = len(self.sym) + len(SPECIALS)
        self.split_special = regex.compile("(" + "|".join(regex.escape(s) for s in SPECIALS) + ")")
        self._cache = {}

    def _bpe(self, word):
        ids = self._cache.get(word)
        if ids is None:
            w = list(word)
            while len(w) > 1:  # apply the lowest-ranked pair present, everywhere in the word
                best = min(zip(w, w[1:]), key=lambda p: self.rank.get(p, 1 << 30))
                r = self.rank.get(best)
                if r is None:
                    break
                w = _merge_word(w, best[0], best[1], 256 + r)
            ids = self._cache[word] = w
        return ids

    def encode(self, text, specials=True):
        out = []
        parts = self.split_special.split(text) if specials else [text]
        for i, part in enumerate(parts):
            if i % 2 == 1:
                out.append(self.special[part])
                continue
            for m in PRE.findall(part):
                out.extend(self._bpe(m.encode("utf-8")))
        return out

    def decode_bytes(self, ids):
        inv = {v: k.encode("utf-8") for k, v in self.special.items()}
        return b"".join(self.sym[i] if i < len(self.sym) else inv.get(i, b"") for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def piece(self, i):
        return "".join(B2U[b] for b in self.sym[i])

    # ---- Hugging Face files ----------------------------------------------------------------

    def tokenizer_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s, i in self.special.items()]
        return {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False,
                      "vocab": {self.piece(i): i for i in range(len(self.sym))},
                      "merges": ["%s %s" % (self.piece(a), self.piece(b)) for a, b in self.merges]},
        }

    def tokenizer_config(self, max_len):
        return {
            "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
            "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False,
                                              "rstrip": False, "single_word": False, "special": True}
                                     for s, i in self.special.items()},
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": max_len, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": None,
        }

    def write(self, folder, max_len):
        os.makedirs(folder, exist_ok=True)
        for name, obj in (("tokenizer.json", self.tokenizer_json()),
                          ("tokenizer_config.json", self.tokenizer_config(max_len))):
            with open(os.path.join(folder, name) + ".tmp", "w", encoding="utf-8") as f:
                f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
            os.replace(os.path.join(folder, name) + ".tmp", os.path.join(folder, name))

    @classmethod
    def load(cls, folder):
        """From a tokenizer.json written by write() (merges of pieces -> ids)."""
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        vocab = tj["model"]["vocab"]
        return cls([(vocab[a], vocab[b]) for a, b in (m.split(" ") for m in tj["model"]["merges"])])
