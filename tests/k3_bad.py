#!/usr/bin/env python3
"""Damaged Kimi K3 folders (copies of tests/fixtures/tiny-k3) refused by `deltafin run` with one
line naming what is wrong (exit 1), never run into wrong tokens:
  * an E8M0 scale byte 255 (NaN) in every routed expert of layer 1: named by layer, expert
    and weight before the expert's first use, and `verify --deep` names the scale tensors;
  * a NaN in the output mix's weight: the output mix's values are not finite;
  * attn_res_block_size removed from config.json while the checkpoint holds Attention
    Residuals' tensors, or latent_moe_use_norm false while it holds routed_expert_norm: the
    config does not describe the weights;
  * quantization_config removed while the experts are MXFP4 pairs.

usage: k3_bad.py DELTAFIN FIXTURES WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_checkpoints import read_st, write_st  # noqa: E402

M = "language_model.model."


def poke(d, name, off, raw):
    p = os.path.join(d, "model.safetensors")
    h, data = read_st(p)
    data = bytearray(data)
    b = h[name]["data_offsets"][0] + off
    data[b:b + len(raw)] = raw
    write_st(p, h, bytes(data))


def config(d, fn):
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    fn(c["text_config"])
    json.dump(c, open(p, "w"), indent=2)


CASES = [
    ("nan_scale", lambda d: [poke(d, M + "layers.1.block_sparse_moe.experts.%d.w2.weight_scale" % e, 5,
                                  b"\xff") for e in range(8)],
     ["layer 1 expert ", "down (w2)", "255 (NaN)", "row 2, group 1"]),
    ("nan_output_mix", lambda d: poke(d, M + "output_attn_res_proj.weight", 0, b"\xc0\x7f"),
     ["the output mix", "non-finite"]),
    ("attn_res_switch_lost", lambda d: config(d, lambda t: t.pop("attn_res_block_size")),
     ["Attention Residuals' tensors", "attn_res_block_size"]),
    ("latent_norm_switch_lost", lambda d: config(d, lambda t: t.update(latent_moe_use_norm=False)),
     ["routed_expert_norm", "latent_moe_use_norm"]),
    ("quantization_config_lost", lambda d: config(d, lambda t: t.pop("quantization_config")),
     ["MXFP4 pair", "quantization_config"]),
]


def main():
    exe, fixtures, work = sys.argv[1:4]
    fails = 0
    for name, damage, want in CASES:
        d = os.path.join(work, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(fixtures, "tiny-k3"), d)
        damage(d)
        r = subprocess.run([exe, "run", "--model", d, "--prompt-ids", "1,2,3,4,5", "--max-new", "4",
                            "--temperature", "0"], capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 1 and len(lines) == 1 and all(w in lines[0] for w in want)
        if name == "nan_scale":
            v = subprocess.run([exe, "verify", "--deep", "--quiet", d], capture_output=True,
                               text=True, timeout=120)
            ok = ok and v.returncode == 1 and (M + "layers.1.block_sparse_moe.experts.0.w2.weight_scale "
                                               "(MXFP4 E8M0 scales): 1 of its bytes are 255") in v.stderr
            print("    verify --deep: exit %d  %s" % (v.returncode, v.stderr.strip()[:300]))
        print("%-26s %s  exit %d  %s" % (name, "ok  " if ok else "FAIL", r.returncode, r.stderr.strip()[:300]))
        if not ok:
            print("    expected exit 1 and one line containing %s" % want)
            fails += 1
        shutil.rmtree(d, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
