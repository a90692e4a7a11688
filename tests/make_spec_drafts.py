#!/usr/bin/env python3
"""Draft checkpoints for the speculative-decoding tests, written into OUT_DIR:
  perturbed/  tiny-moe-sparse with the sign of every 5th weight of two layers' o_proj and
              down_proj flipped: a draft that agrees with the target often, not always
  vocab256/   a qwen3 dense model with a 256-token vocabulary (mismatch with the 512-token
              targets: drafting must switch itself off)
  v16-target/, v16-draft/
              a 16-token vocabulary pair for the sampling-distribution test: a qwen3_moe
              target (tiny-moe-tied shapes) and a qwen3 dense draft with other weights, both
              with logit scale 2 so that every token has mass
  big-target/, big-draft/
              tied qwen3_moe target and qwen3 dense draft with a 32768 x 256 bf16 embedding
              table (16 MiB) that is byte-identical in both (same seed, same name, same scale):
              the shared-tensor test
  target-tok/ tiny-moe-sparse (files linked) with a small byte-level BPE tokenizer.json;
  tok-same/   the perturbed draft with the same tokenizer written with other JSON formatting
  tok-diff/   the perturbed draft with a tokenizer whose ids 256 and 257 are swapped
  corrupt/    the perturbed draft with its safetensors file cut in half (load fails)
  ds-target-tok/
              tiny-ds-bf16 (files linked) with a 512-token byte-level BPE tokenizer (the 256
              byte symbols and the 256 two-letter merges of "etaoinshrdlucmfw"; pieces of two
              characters), so that every id the model can emit has text
  ds-relabeled/
              tiny-ds-bf16 with the rows of embed_tokens and lm_head permuted by RELABEL and a
              tokenizer whose ids are permuted the same way: the target itself under other
              ids, a cross-tokenizer draft that writes exactly the target's greedy text
  v16-relabeled/
              v16-target with the rows of its (tied) embedding permuted: row (5i + 3) mod 16 is
              the target's row i, the draft of the sampling test's text-draft case (it writes
              the target's letters under the permuted letter tokenizer the test makes)
  demo-swapped/
              models/demo-draft (files linked, from MODELS_DIR) with a tokenizer.json whose
              ids 150000 and 150001 are swapped: a draft with another tokenizer for
              models/demo-moe that writes the text demo-draft writes
  xdraft-oob/ models/demo-xdraft (files linked) with one more added token, id 5000, than its
              model has rows (4096): refused at load
usage: make_spec_drafts.py FIXTURES_DIR OUT_DIR [MODELS_DIR (default FIXTURES_DIR/../../models)]
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "train"))
import bpe_tokenizer  # noqa: E402  (GPT-2's byte table)


OUT = None


def main():
    global OUT
    fixtures, out = sys.argv[1:3]
    models = sys.argv[3] if len(sys.argv) > 3 else os.path.join(fixtures, "..", "..", "models")
    OUT = out
    src = os.path.join(fixtures, "tiny-moe-sparse")
    dst = os.path.join(out, "perturbed")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, fn), dst)
    def flip(name, h, w):
        w = w.copy()
        w[::5] ^= 0x8000
        return w
    edit_tensors(os.path.join(src, "model.safetensors"), os.path.join(dst, "model.safetensors"),
                 ("model.layers.2.self_attn.o_proj.weight", "model.layers.3.self_attn.o_proj.weight",
                  "model.layers.2.mlp.down_proj.weight"), flip)
    mk("vocab256", "--preset", "tiny-dense", "--vocab", "256")
    mk("v16-target", "--preset", "tiny-moe-tied", "--vocab", "16", "--logit-scale", "2")
    mk("v16-draft", "--preset", "tiny-dense", "--vocab", "16", "--logit-scale", "2", "--seed", "77")
    mk("big-target", "--preset", "tiny-moe-tied", "--vocab", "32768", "--hidden", "256")
    mk("big-draft", "--preset", "tiny-dense", "--vocab", "32768", "--hidden", "256", "--tied",
       "true", "--seed", "1001", "--layers", "1")
    tok = byte_level_tokenizer()
    tgt = os.path.join(out, "target-tok")
    shutil.rmtree(tgt, ignore_errors=True)
    os.makedirs(tgt)
    for fn in os.listdir(src):
        os.symlink(os.path.join(os.path.abspath(src), fn), os.path.join(tgt, fn))
    with open(os.path.join(tgt, "tokenizer.json"), "w") as f:
        json.dump(tok, f, indent=2)
    for name, t, indent in (("tok-same", tok, None),
                            ("tok-diff", swap_ids(tok, 256, 257), 2),
                            ("corrupt", None, None)):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(dst, d)
        if t is not None:
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(t, f, indent=indent)
        else:
            path = os.path.join(d, "model.safetensors")
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.truncate(size // 2)
    ds_pair(fixtures, out)
    relabel_v16(out)
    demo_swapped(models, out)
    xdraft_oob(models, out)


# id pairs swapped by ds-relabeled: bytes "e"/"t" and " "/"a", and four two-letter tokens
RELABEL = ((101, 116), (32, 97), (256, 300), (400, 511))


def ds_pair(fixtures, out):
    src = os.path.join(fixtures, "tiny-ds-bf16")
    tok = bigram_tokenizer()
    tgt = os.path.join(out, "ds-target-tok")
    shutil.rmtree(tgt, ignore_errors=True)
    os.makedirs(tgt)
    for fn in os.listdir(src):
        os.symlink(os.path.join(os.path.abspath(src), fn), os.path.join(tgt, fn))
    with open(os.path.join(tgt, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    dst = os.path.join(out, "ds-relabeled")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, fn), dst)
    def relabel(name, h, w):
        assert h["dtype"] == "BF16" and h["shape"][0] == 512, name
        rows = w.reshape(512, -1).copy()
        for x, y in RELABEL:
            rows[[x, y]] = rows[[y, x]]
        return rows
    edit_tensors(os.path.join(src, "model.safetensors"), os.path.join(dst, "model.safetensors"),
                 ("model.embed_tokens.weight", "lm_head.weight"), relabel)
    for x, y in RELABEL:
        tok = swap_ids(tok, x, y)
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def retokenized(src, dst, edit):
    """dst: src's files linked, its tokenizer.json written after edit(tokenizer dict)."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for fn in ("config.json", "generation_config.json", "model.safetensors",
               "tokenizer_config.json"):
        os.symlink(os.path.abspath(os.path.join(src, fn)), os.path.join(dst, fn))
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    edit(tok)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def xdraft_oob(models, out):
    def add_id_5000(tok):
        tok["added_tokens"].append({"id": 5000, "content": " history", "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": False})
    retokenized(os.path.join(models, "demo-xdraft"), os.path.join(out, "xdraft-oob"), add_id_5000)


def demo_swapped(models, out):
    def swap(tok):
        v = tok["model"]["vocab"]
        inv = {i: k for k, i in v.items() if i in (150000, 150001)}
        v[inv[150000]], v[inv[150001]] = 150001, 150000
    retokenized(os.path.join(models, "demo-draft"), os.path.join(out, "demo-swapped"), swap)


def relabel_v16(out):
    src, dst = os.path.join(out, "v16-target"), os.path.join(out, "v16-relabeled")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")

    def permute(name, h, w):
        rows = w.reshape(16, -1)
        new = rows.copy()
        for i in range(16):
            new[(5 * i + 3) % 16] = rows[i]
        return new
    edit_tensors(path, path, ("model.embed_tokens.weight",), permute)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        assert "lm_head.weight" not in json.loads(f.read(n)), "v16-target is tied"


def edit_tensors(src, dst, names, fn):
    """Copy the safetensors file src to dst with each tensor of `names` present in it replaced
    by fn(name, header entry, its data as a flat little-endian array of its dtype's width):
    an array of the same bytes' length."""
    with open(src, "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    for name in names:
        if name not in header:
            continue
        h = header[name]
        b, e = h["data_offsets"]
        dt = {"BF16": "<u2", "F32": "<f4"}[h["dtype"]]
        w = np.frombuffer(bytes(blob[8 + n + b:8 + n + e]), dtype=dt)
        out = fn(name, h, w).tobytes()
        assert len(out) == e - b, name
        blob[8 + n + b:8 + n + e] = out
    with open(dst, "wb") as f:
        f.write(blob)


def mk(name, *args):
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "reference", "make_checkpoint.py"), *args,
                    "--out", os.path.join(OUT, name)], check=True, stdout=subprocess.DEVNULL)


def byte_level_tokenizer():
    """A GPT-2-style byte-level BPE tokenizer.json: the 256 byte symbols and a few merges."""
    vocab = {bpe_tokenizer.B2U[b]: b for b in range(256)}
    merges = []
    for a, b in zip("thaeiouns", "heentrdgt"):
        for x, y in ((a, b), (b, a)):
            if x + y not in vocab:
                vocab[x + y] = len(vocab)
                merges.append(x + " " + y)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}


def bigram_tokenizer():
    """512 tokens: the 256 byte symbols (id = byte value) and 256 two-letter merges."""
    t = byte_level_tokenizer()
    v = {k: i for k, i in t["model"]["vocab"].items() if i < 256}
    merges = []
    for a in "etaoinshrdlucmfw":
        for b in "etaoinshrdlucmfw":
            v[a + b] = len(v)
            merges.append(a + " " + b)
    t["model"]["vocab"] = v
    t["model"]["merges"] = merges
    t["added_tokens"] = []
    # pieces of two characters, so the random models' letter soup still has piece boundaries
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[\\s\\S]{1,2}"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    return t


def swap_ids(tok, a, b):
    t = json.loads(json.dumps(tok))
    v = t["model"]["vocab"]
    ka = next(k for k, i in v.items() if i == a)
    kb = next(k for k, i in v.items() if i == b)
    v[ka], v[kb] = b, a
    return t


if __name__ == "__main__":
    main()
