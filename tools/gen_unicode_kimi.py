#!/usr/bin/env python3
"""tools/gen_unicode_kimi.py — writes engine/text/unicode_kimi.h, the code points whose classes in
the Kimi K2/K3 pre-split pattern differ between the system PCRE2's Unicode tables and the
Unicode version of the tiktoken core (the reference), each with a stand-in code point.

The Kimi pattern asks six questions of a code point: \\p{Han} (Script), [\\p{L}\\p{N}],
[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]], [\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]], \\p{N}
and \\s. The reference's answers come from the tiktoken core itself (npm `tiktoken`, the Rust
`regex` crate's tables), asked with the published class spellings over every code point; its
Unicode version is found from probe code points first assigned in 15.0, 15.1, 16.0 and 17.0 and
must be EXPECT_UNICODE. PCRE2's answers come from the C spellings of tokenizer_tiktoken.c,
compiled and run against the system libpcre2-8 (a small C program built here with cc). Every
code point answered differently (all of them were unassigned in PCRE2's tables) is listed with a
stand-in: the smallest code point that PCRE2 answers exactly as the reference answers the listed
one and that has the same UTF-8 length. tokenizer_pretok.c matches the pattern on a copy of the
text with the listed code points replaced by their stand-ins (same byte offsets), so the pattern
itself, and every Unicode <= 14 answer, is unchanged.

usage: python3 tools/gen_unicode_kimi.py [TOOLS_DIR] > engine/text/unicode_kimi.h
(TOOLS_DIR defaults to tools/, where tools/install-deps.sh puts node_modules). Deterministic.
"""
import json, os, subprocess, sys, tempfile

EXPECT_UNICODE = "16.0"
# First-assigned probes: (version, code point). The core's version is the last one assigned.
PROBES = [("15.0", 0x31350), ("15.1", 0x2EBF0), ("16.0", 0x10D50), ("17.0", 0x323B0)]
CLASSES = ["han", "ln", "upper", "lower", "n", "ws"]
CORE = {  # as tokenization_kimi.py publishes them
    "han": r"[\p{Han}]", "ln": r"[\p{L}\p{N}]",
    "upper": r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]",
    "lower": r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]", "n": r"\p{N}", "ws": r"\s",
}
PCRE = {  # as engine/text/tokenizer_tiktoken.c writes them (\s rewritten to White_Space)
    "han": r"[\p{sc:Han}]", "ln": r"[\p{L}\p{N}]",
    "upper": r"[^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}]",
    "lower": r"[^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}]", "n": r"\p{N}",
    "ws": r"\p{White_Space}",
}

JS = r"""
const [mod, spec] = process.argv.slice(1);
const { Tiktoken } = require(mod);
const model = Array.from({length: 256}, (_, b) => Buffer.from([b]).toString("base64") + " " + b).join("\n");
const pats = JSON.parse(spec);
const all = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) all.push(String.fromCodePoint(c));
const text = all.join("");
const out = {};
// Text the pattern does not match is dropped by the core, and the ranks are the byte values:
// the bytes of the ids are the members, in order.
for (const [k, p] of Object.entries(pats)) {
  const enc = new Tiktoken(model, {}, p);
  out[k] = Array.from(Buffer.from(enc.encode_ordinary(text)).toString("utf8"), (ch) => ch.codePointAt(0));
  enc.free();
}
out.version = require(mod.replace(/lite[\\/]tiktoken\.cjs$/, "package.json")).version;
process.stdout.write(JSON.stringify(out));
"""

C = r"""
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
static int utf8(unsigned c, unsigned char *o) {
  if (c < 0x80) { o[0] = c; return 1; }
  if (c < 0x800) { o[0] = 0xC0 | c >> 6; o[1] = 0x80 | (c & 63); return 2; }
  if (c < 0x10000) { o[0] = 0xE0 | c >> 12; o[1] = 0x80 | (c >> 6 & 63); o[2] = 0x80 | (c & 63); return 3; }
  o[0] = 0xF0 | c >> 18; o[1] = 0x80 | (c >> 12 & 63); o[2] = 0x80 | (c >> 6 & 63); o[3] = 0x80 | (c & 63);
  return 4;
}
int main(int argc, char **argv) {
  char ver[64], uver[64];
  pcre2_config(PCRE2_CONFIG_VERSION, ver);
  pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, uver);
  printf("{\"version\":\"%s\",\"unicode\":\"%s\"", ver, uver);
  for (int k = 2; k + 1 < argc; k += 2) {
    int ec; PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)argv[k + 1], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
    if (!re) return 2;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    printf(",\"%s\":[", argv[k]);
    int first = 1;
    for (unsigned c = 0; c <= 0x10ffff; c++) {
      if (c >= 0xd800 && c <= 0xdfff) continue;
      unsigned char b[4];
      if (pcre2_match(re, b, utf8(c, b), 0, 0, md, NULL) >= 0) { printf(first ? "%u" : ",%u", c); first = 0; }
    }
    printf("]");
  }
  printf("}\n");
  return 0;
}
"""


def utf8_len(c):
    return 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4


BLOCK_SHIFT = 6  # the block of the fast reject in kimi_view: 64 code points


def main():
    tools = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
    mod = os.path.join(tools, "node_modules", "tiktoken", "lite", "tiktoken.cjs")
    spec = dict(CORE)
    spec.update({"probe%d" % i: "[\\x{%X}]" % cp for i, (_, cp) in enumerate(PROBES)})
    spec["cn"] = r"\p{Cn}"
    core = json.loads(subprocess.run(["node", "-e", JS, mod, json.dumps(spec)], check=True,
                                     capture_output=True).stdout)
    cn = set(core["cn"])
    found = None
    for v, cp in PROBES:
        if cp not in cn:
            found = v
    for i, (v, cp) in enumerate(PROBES):  # each probe is in its own class: the core sees it
        assert core["probe%d" % i] == [cp], (v, hex(cp))
    if found != EXPECT_UNICODE:
        sys.exit("gen_unicode_kimi: the tiktoken core has Unicode %s, expected %s" % (found, EXPECT_UNICODE))
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "pcre_classes")
        subprocess.run(["cc", "-O2", "-x", "c", "-", "-o", exe, "-lpcre2-8"], input=C.encode(), check=True)
        args = [exe, "-"]
        for k in CLASSES:
            args += [k, PCRE[k]]
        pc = json.loads(subprocess.run(args, check=True, capture_output=True).stdout)
    bit = {k: i for i, k in enumerate(CLASSES)}
    ref, loc = {}, {}
    for k in CLASSES:
        for c in core[k]:
            ref[c] = ref.get(c, 0) | 1 << bit[k]
        for c in pc[k]:
            loc[c] = loc.get(c, 0) | 1 << bit[k]
    diff = sorted(c for c in set(ref) | set(loc) if ref.get(c, 0) != loc.get(c, 0))
    if diff and diff[0] < 0x800:  # kimi_view decodes only 3- and 4-byte characters
        sys.exit("gen_unicode_kimi: U+%04X is under U+0800" % diff[0])
    # Stand-ins: never a code point that is itself listed, never one whose case folds to ASCII
    # (U+212A KELVIN SIGN is caseless k), never below U+0100 (literals of the pattern).
    listed = set(diff)
    stand = {}
    for c in diff:
        key = (ref.get(c, 0), utf8_len(c))
        if key in stand:
            continue
        p = next((p for p in range(0x100, 0x110000)
                  if not 0xD800 <= p <= 0xDFFF and p not in listed and p != 0x212A
                  and utf8_len(p) == key[1] and loc.get(p, 0) == key[0]), None)
        if p is None:
            sys.exit("gen_unicode_kimi: no stand-in for U+%04X" % c)
        stand[key] = p
    ranges = []
    for c in diff:
        p = stand[(ref.get(c, 0), utf8_len(c))]
        if ranges and ranges[-1][1] == c - 1 and ranges[-1][2] == p:
            ranges[-1][1] = c
        else:
            ranges.append([c, c, p])
    w = sys.stdout.write
    w("/* engine/text/unicode_kimi.h — generated by tools/gen_unicode_kimi.py; do not edit.\n")
    w(" *\n * The code points whose answers to the Kimi K2/K3 pre-split classes differ between PCRE2 %s\n"
      % pc["version"])
    w(" * (Unicode %s tables) and the tiktoken core of npm tiktoken %s (Unicode %s), each range\n"
      % (pc["unicode"], core["version"], found))
    w(" * with a stand-in that PCRE2 answers as the reference answers the range (same UTF-8 length).\n")
    w(" * Bits of `cls` (the reference's answers): ")
    w(", ".join("%d %s" % (1 << bit[k], k) for k in CLASSES) + ".\n")
    w(" * %d code points in %d ranges. */\n" % (len(diff), len(ranges)))
    w("#ifndef DF_UNICODE_KIMI_H\n#define DF_UNICODE_KIMI_H\n\n#include <stdint.h>\n\n")
    w('#define DF_KIMI_UNICODE_VERSION "%s"\n\n' % found)
    w("typedef struct df_kimi_remap {\n  uint32_t lo, hi, stand_in;\n  uint8_t cls;\n} df_kimi_remap;\n\n")
    w("static const df_kimi_remap df_kimi_remaps[] = {\n")
    for lo, hi, p in ranges:
        w("    {0x%05X, 0x%05X, 0x%05X, %d},\n" % (lo, hi, p, ref.get(lo, 0)))
    w("};\n\n")
    # The fast reject: one bit per block of 64 code points (a 3-byte character's block is its
    # first two bytes), set where the block holds a listed code point. 64, not 256: Thai and
    # Kannada share their 256-blocks with U+0ECE and U+0CF3, and would all be looked up.
    nb = (diff[-1] >> BLOCK_SHIFT) + 1
    bits = [0] * ((nb + 7) // 8)
    for c in diff:
        bits[(c >> BLOCK_SHIFT) >> 3] |= 1 << ((c >> BLOCK_SHIFT) & 7)
    w("/* Bit b of df_kimi_blocks[b >> 3] (b & 7): some code point of [b << %d, (b + 1) << %d) is\n"
      % (BLOCK_SHIFT, BLOCK_SHIFT))
    w(" * listed; a character of a clear block (or of a block >= DF_KIMI_N_BLOCKS) needs no lookup.\n"
      " * %d of %d blocks are set. */\n" % (sum(bin(b).count("1") for b in bits), nb))
    w("#define DF_KIMI_BLOCK_SHIFT %d\n#define DF_KIMI_N_BLOCKS %du\n\n" % (BLOCK_SHIFT, nb))
    w("static const uint8_t df_kimi_blocks[%d] = {\n" % len(bits))
    for i in range(0, len(bits), 16):
        w("    " + " ".join("0x%02X," % b for b in bits[i:i + 16]) + "\n")
    w("};\n\n#endif\n")


if __name__ == "__main__":
    main()
