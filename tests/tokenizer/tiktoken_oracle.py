#!/usr/bin/python3
"""tests/tokenizer/tiktoken_oracle.py — an independent Python implementation of the Kimi
TikTokenTokenizer (tokenization_kimi.py + tiktoken), the oracle of test_tok_tiktoken.

Writes, under tests/tokenizer/tiktoken_tiny/:
  tiktoken.model          a small synthetic vocabulary: the 256 single bytes at permuted ranks,
                          byte-level BPE merges trained on the corpus below, then a few tokens
                          BPE cannot reach (only the whole-piece lookup finds them)
  tokenizer_config.json   TikTokenTokenizer, named specials in added_tokens_decoder (the rest of
                          the 256 reserved ids are unnamed), bos/eos/pad
  goldens.json            the stress set and the ids this oracle gives, with specials allowed
                          ("ids") and with none ("plain"); long cases by count + FNV-1a 64

Independent of the C code: the pattern is compiled as written in tokenization_kimi.py, with the
`&&` class intersections, by the `regex` module's V1 mode (Debian python3-regex); BPE is a
literal transcription of tiktoken's _byte_pair_merge (a heap version for long pieces, checked
against the literal one); the guards are tokenization_kimi.py's. Debian python3-regex has
Unicode 15.0 tables, the tiktoken core Unicode 16.0 (docs/TOKENIZER.md, "Unicode version"): the
two disagree on the code points first assigned in 15.1 and 16.0, so the stress set here keeps to
Unicode 14 code points; the newer ones are checked against the core itself
(tiktoken_npm_oracle.js unicode16).

Usage: /usr/bin/python3 tiktoken_oracle.py          (re)write the files
       /usr/bin/python3 tiktoken_oracle.py --check  exit 1 unless the files equal a fresh run
"""
import base64
import heapq
import json
import os
import sys

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiktoken_tiny")

PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
RE = regex.compile(PAT, regex.V1)

CORPUS = """
The quick brown fox jumps over the lazy dog. It's the dog's bone; they're sure we've seen
what I'm told you'll find, and he'd said it wasn't. THE CAPITAL OF FRANCE IS PARIS. Hello world!
Hello, World. hello there. The capital of France is Paris, the capital of Italy is Rome.
Deltafin is an inference engine written in C11; it loads models and tokenizes text.
int main(void) { return printf("%d\\n", 42) > 0 ? 0 : 1; } // comment
for (i = 0; i < 1024; i++) x[i] = y[i] * 3.14159 + 2718281828;
你好世界，这是一个测试。我们今天学习中文和日本語。北京是中国的首都。天气很好。
こんにちは世界、カタカナとひらがなのテストです。東京は日本の首都です。
안녕하세요 세계, 한국어 테스트입니다. Привет, мир! Это проверка токенизатора. Ελληνικά γράμματα.
مرحبا بالعالم. Ünïcödé naïve café résumé façade. Straße und Grüße.
Numbers: 1, 12, 123, 1234, 12345, 2026-12-01, 3.5%, $1,000,000.
Emoji 😀😀 🎉 👍🏽 — dashes -- ... !!! ??? *** ### === ---- ____
   indented    spaces   and	tabs	here
line one
line two

line four
""" * 3

SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
            5: "<|sep|>", 6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]",
            18: "<|media_begin|>", 254: "[UNK]", 255: "[PAD]"}
NOT_SPECIAL = {3, 4, 5}  # "special": false in the config, as K3's <|open|> <|close|> <|sep|>
N_MERGES = 700
UNREACHABLE = [b" Deltafin", b"xyzzy", b"\xe4\xbd\xa0\xe5", b"=" * 12, b"'S"]


def train():
    """Ranks: 256 single bytes (rank r is byte (r*167+13) % 256), then BPE merges on the corpus
    pre-split by the pattern (most frequent pair first, ties by the smaller pair), then the
    unreachable tokens."""
    vocab = [bytes([(r * 167 + 13) % 256]) for r in range(256)]
    words = {}
    for w in RE.findall(CORPUS):
        b = w.encode("utf-8")
        words[b] = words.get(b, 0) + 1
    segs = {w: [bytes([c]) for c in w] for w in words}
    seen = set(vocab)
    while len(vocab) < 256 + N_MERGES:
        counts = {}
        for w, f in words.items():
            s = segs[w]
            for i in range(len(s) - 1):
                counts[(s[i], s[i + 1])] = counts.get((s[i], s[i + 1]), 0) + f
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], [-x for x in kv[0][0] + kv[0][1]]))[0]
        new = best[0] + best[1]
        for w in words:
            s = segs[w]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            segs[w] = out
        if new not in seen:
            seen.add(new)
            vocab.append(new)
    for u in UNREACHABLE:
        if u not in seen:
            seen.add(u)
            vocab.append(u)
    return vocab


def bpe_literal(ranks, piece):
    """tiktoken's _byte_pair_merge, transcribed (parts = (start, rank of parts[i..i+2]))."""
    INF = float("inf")

    def get_rank(parts, i):
        if i + 3 < len(parts):
            return ranks.get(piece[parts[i][0]:parts[i + 3][0]], INF)
        return INF

    parts = []
    min_rank = (INF, -1)
    for i in range(len(piece) - 1):
        r = ranks.get(piece[i:i + 2], INF)
        if r < min_rank[0]:
            min_rank = (r, i)
        parts.append([i, r])
    parts.append([len(piece) - 1, INF])
    parts.append([len(piece), INF])
    while min_rank[0] != INF:
        i = min_rank[1]
        if i > 0:
            parts[i - 1][1] = get_rank(parts, i - 1)
        parts[i][1] = get_rank(parts, i)
        del parts[i + 1]
        min_rank = (INF, -1)
        for j in range(len(parts) - 1):
            if parts[j][1] < min_rank[0]:
                min_rank = (parts[j][1], j)
    return [ranks[piece[parts[i][0]:parts[i + 1][0]]] for i in range(len(parts) - 1)]


def bpe_heap(ranks, piece):
    """The same merges with a heap of (rank, start) over a linked list of parts."""
    n = len(piece)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n
    h = []
    for i in range(n - 1):
        r = ranks.get(piece[i:i + 2])
        if r is not None:
            heapq.heappush(h, (r, i))
    while h:
        r, i = heapq.heappop(h)
        if not alive[i] or nxt[i] >= n:
            continue
        j = nxt[i]
        if ranks.get(piece[i:nxt[j]]) != r:
            continue
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] < n:
            prv[nxt[j]] = i
        if prv[i] >= 0:
            q = ranks.get(piece[prv[i]:nxt[i]])
            if q is not None:
                heapq.heappush(h, (q, prv[i]))
        if nxt[i] < n:
            q = ranks.get(piece[i:nxt[nxt[i]]])
            if q is not None:
                heapq.heappush(h, (q, i))
    out, i = [], 0
    while i < n:
        out.append(ranks[piece[i:nxt[i]]])
        i = nxt[i]
    return out


class Oracle:
    def __init__(self, vocab):
        self.ranks = {b: i for i, b in enumerate(vocab)}
        self.n_base = len(vocab)
        self.specials = {}
        for k in range(256):
            self.specials[SPECIALS.get(k, "<|reserved_token_%d|>" % (self.n_base + k))] = \
                self.n_base + k
        self.cache = {}

    def encode_ordinary(self, text):
        out = []
        for m in RE.finditer(text):
            piece = m.group().encode("utf-8")
            if piece in self.ranks:
                out.append(self.ranks[piece])
                continue
            if piece not in self.cache:
                if len(piece) <= 400:
                    ids = bpe_literal(self.ranks, piece)
                    assert ids == bpe_heap(self.ranks, piece), piece
                else:
                    ids = bpe_heap(self.ranks, piece)
                self.cache[piece] = ids
            out.extend(self.cache[piece])
        return out

    def encode_tiktoken(self, text, allow_special):
        if not allow_special:
            return self.encode_ordinary(text)
        out, pos = [], 0
        while True:
            best = None
            for s in self.specials:
                k = text.find(s, pos)
                if k >= 0 and (best is None or k < best[0] or (k == best[0] and len(s) > len(best[1]))):
                    best = (k, s)
            if best is None:
                out.extend(self.encode_ordinary(text[pos:]))
                return out
            out.extend(self.encode_ordinary(text[pos:best[0]]))
            out.append(self.specials[best[1]])
            pos = best[0] + len(best[1])

    @staticmethod
    def split_runs(s, max_len):
        """tokenization_kimi.py _split_whitespaces_or_nonwhitespaces."""
        cur_len = 0
        cur_space = s[0].isspace() if len(s) > 0 else False
        start = 0
        for i in range(len(s)):
            now = s[i].isspace()
            if cur_space ^ now:
                cur_len = 1
                cur_space = now
            else:
                cur_len += 1
                if cur_len > max_len:
                    yield s[start:i]
                    start = i
                    cur_len = 1
        yield s[start:]

    def encode(self, text, allow_special=True):
        """tokenization_kimi.py encode: 400,000-char slices, runs of > 25,000 cut."""
        out = []
        for i in range(0, len(text), 400_000):
            for sub in self.split_runs(text[i:i + 400_000], 25_000):
                out.extend(self.encode_tiktoken(sub, allow_special))
        return out


def stress_set():
    """(bytes, description) pairs."""
    s = [
        "Hello world", "Hello, World!", "The capital of France is", " Paris", "hello   world",
        "It's the dog's bone; they're sure we've seen what I'm told you'll find, he'd",
        "IT'S THE DOG'S; THEY'RE WE'VE I'M YOU'LL HE'D", "don'T CAN'S x'Re y'vE", "word'ſ Word'ſ",
        "'s 't 're alone'", "O'Neil McDonald's iPhone eBay", "ABCdef abcDEF AbCdEf",
        "你好世界", "这是一个测试。", "中文English混合text中", "東京は日本の首都です", "こんにちは",
        "カタカナ漢字ひらがな", "々〆〇一二三", "、。「」", "안녕하세요 세계", "Привет, мир!",
        "Ελληνικά γράμματα", "مرحبا بالعالم", "naïve café résumé", "e\u0301 a\u0308\u0301 \u0301x",
        "Straße ǅungla ǈ", "1 12 123 1234 12345 123456", "3.14159 2026-12-01 $1,000,000",
        "٣٤٥ ⅫⅣ ①②", "x1y22z333w4444", "   leading", "trailing   ", "a  b   c    d",
        "\t\ttabs\t", "line one\nline two\n\nline four\n", "\r\n\r\nwin\r\n", "a\n\n\n   b",
        "  \n  \n  x", "end with spaces \n   ", "\u00a0nbsp\u2003em\u3000ideo", "\u0085nel\u0085",
        "\u2028ls\u2029ps", "\ufeffbom", "\x1c\x1d\x1e\x1fseps", "\x00nul\x7f",
        "Emoji 😀😀 🎉 👍🏽 👨‍👩‍👧", "!!! ??? *** ### === ---- ____", "====================",
        " Deltafin", "Deltafin", "xyzzy xyzzyx", "你好 你好你好", "<html><body>x</body></html>",
        "int main(void) { return printf(\"%d\\n\", 42) > 0 ? 0 : 1; }", "a+b=c; x->y",
        "[BOS]Hello[EOS]", "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>",
        "<|reserved_token_%d|>", "<|reserved_token_%d|>", "[UNK][PAD] [EOT]", "<|open|",
        "<|<|open|>|>", "[BOS", "x<|media_begin|>y", "",
        " ", "  ", "\n", "'", "'s", "A", "é", "中",
    ]
    out = [(t.encode("utf-8"), "") for t in s]
    out += [
        (b"caf\xc3", "truncated UTF-8"), (b"\xff\xfeab", "invalid bytes"),
        (b"a\xed\xa0\x80b", "surrogate"), (b"\xe4\xbd\xa0\xe5\xa5", "cut CJK"),
        (b"\xf0\x9f\x98", "cut emoji"), (b"\xc0\xafx", "overlong"),
    ]
    return out


def long_cases():
    """(repeat, times, suffix): the guards change these ids."""
    return [
        ("ing", 8334, ""),            # 25,002 letters: cut after 25,000
        (" ", 25001, "x"),            # 25,001 spaces then x
        ("  \n", 9000, "end"),       # 27,000 whitespace chars
        ("ab ", 9000, ""),           # alternating, never cut
        ("hello world ", 33334, ""),  # 400,008 chars: a slice cut inside "hello"
        ("東京は", 8334, ""),          # 25,002 Han + kana: cut after 25,000
    ]


def fnv64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def build():
    vocab = train()
    o = Oracle(vocab)
    model = "".join("%s %d\n" % (base64.b64encode(b).decode(), i) for i, b in enumerate(vocab))
    cfg = {
        "tokenizer_class": "TikTokenTokenizer",
        "bos_token": "[BOS]", "eos_token": "<|end_of_msg|>", "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "added_tokens_decoder": {
            str(o.n_base + k): {"content": v, "lstrip": False, "normalized": False,
                                "rstrip": False, "single_word": False,
                                "special": k not in NOT_SPECIAL}
            for k, v in sorted(SPECIALS.items())
        },
    }
    cases = []
    reserved = [o.n_base + 40, o.n_base + 200]
    k = 0
    for b, what in stress_set():
        if b == b"<|reserved_token_%d|>":
            b = ("<|reserved_token_%d|>" % reserved[k]).encode()
            k += 1
        text = b.decode("utf-8", "replace")
        c = {"ids": o.encode(text, True), "plain": o.encode(text, False)}
        try:
            c = {"text": b.decode("utf-8"), **c}
        except UnicodeDecodeError:
            c = {"hex": b.hex(), "note": what, **c}
        cases.append(c)
    longs = []
    for rep, times, suffix in long_cases():
        text = rep * times + suffix
        ids = o.encode(text, True)
        unguarded = o.encode_tiktoken(text, True)
        longs.append({"repeat": rep, "times": times, "suffix": suffix, "n": len(ids),
                      "fnv64": fnv64(ids), "head": ids[:16], "tail": ids[-16:],
                      "guard_changes_ids": ids != unguarded})
    goldens = {"n_base": o.n_base, "cases": cases, "long": longs}
    return {
        "tiktoken.model": model,
        "tokenizer_config.json": json.dumps(cfg, indent=1, ensure_ascii=False) + "\n",
        "goldens.json": json.dumps(goldens, ensure_ascii=False) + "\n",
    }


def check_class_identity():
    """The C side writes each `[X&&[^\\p{Han}]]` as one negated class (PCRE2 has no `&&`):
    check on every code point that the two spellings are the same set."""
    s = "".join(chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000)
    for inter, neg in (
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]", r"[^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{Han}]"),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]", r"[^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{Han}]")):
        a = [m.start() for m in regex.finditer(inter, s, regex.V1)]
        b = [m.start() for m in regex.finditer(neg, s, regex.V1)]
        if a != b:
            print("tiktoken_oracle: %s and %s differ" % (inter, neg))
            sys.exit(1)


def main():
    check_class_identity()
    files = build()
    if "--check" in sys.argv:
        bad = 0
        for name, text in files.items():
            with open(os.path.join(OUT, name), encoding="utf-8", newline="") as f:
                if f.read() != text:
                    print("tiktoken_oracle: %s differs from a fresh run" % name)
                    bad = 1
        print("tiktoken_oracle: %s" % ("MISMATCH" if bad else "committed files equal a fresh run"))
        sys.exit(bad)
    os.makedirs(OUT, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(OUT, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print("tiktoken_oracle: wrote %s" % OUT)


if __name__ == "__main__":
    main()
