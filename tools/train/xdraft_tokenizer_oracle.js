#!/usr/bin/env node
// tools/train/xdraft_tokenizer_oracle.js — encodes texts with the npm reference tokenizer
// (@lenml/tokenizers, a port of transformers.js) loaded from a tokenizer.json on disk, for
// train_xdraft.py's tokenizer check.
//
// Usage: node xdraft_tokenizer_oracle.js TOKENIZER_DIR IN_JSON OUT_JSON
// IN_JSON: ["text", ...]; OUT_JSON: [[id, ...], ...] (no special tokens added; added tokens
// in the text are matched, as in the Hugging Face pipeline).
"use strict";

const fs = require("fs");
const path = require("path");

const [dir, inFile, outFile] = process.argv.slice(2);
if (!dir || !inFile || !outFile) {
  console.error("usage: node xdraft_tokenizer_oracle.js TOKENIZER_DIR IN_JSON OUT_JSON");
  process.exit(2);
}
const nodeModules = path.join(__dirname, "..", "node_modules");
const { TokenizerLoader } = require(path.join(nodeModules, "@lenml", "tokenizers"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const texts = JSON.parse(fs.readFileSync(inFile, "utf8"));
const out = texts.map((t) => tok.encode(t, { add_special_tokens: false }));
fs.writeFileSync(outFile, JSON.stringify(out) + "\n");
