#!/usr/bin/env python3
"""Draft checkpoints for the speculative-decoding tests, written into OUT_DIR:
  perturbed/  tiny-moe-sparse with the sign of every 5th weight of two layers' o_proj and
              down_proj flipped: a draft that agrees with the target often, not always
  vocab256/   a qwen3 dense model with a 256-token vocabulary (mismatch with the 512-token
              targets: drafting must switch itself off)
usage: make_spec_drafts.py FIXTURES_DIR OUT_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np


def main():
    fixtures, out = sys.argv[1:3]
    src = os.path.join(fixtures, "tiny-moe-sparse")
    dst = os.path.join(out, "perturbed")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, fn), dst)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    for name in ("model.layers.2.self_attn.o_proj.weight", "model.layers.3.self_attn.o_proj.weight",
                 "model.layers.2.mlp.down_proj.weight"):
        if name not in header:
            continue
        b, e = header[name]["data_offsets"]
        w = np.frombuffer(bytes(blob[base + b:base + e]), dtype="<u2").copy()
        w[::5] ^= 0x8000
        blob[base + b:base + e] = w.tobytes()
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(blob)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "reference", "make_checkpoint.py"),
                    "--preset", "tiny-dense", "--vocab", "256", "--out",
                    os.path.join(out, "vocab256")], check=True, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
