#!/usr/bin/env python3
"""Bad checkpoints through the CLI: each corruption of a valid fixture must make
`deltafin run` exit with status 1 and print exactly one line naming the file and, where one
is involved, the tensor (or, for a NaN weight, the layer) — never crash.

usage: bad_checkpoints.py DELTAFIN FIXTURE_DIR WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_st(path, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def case_truncated(d):
    p = os.path.join(d, "model.safetensors")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size // 2)
    return ["model.safetensors"]


def case_header_past_end(d):
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 1 << 40))
    return ["model.safetensors"]


def edit(d, fn):
    p = os.path.join(d, "model.safetensors")
    h, data = read_st(p)
    out = fn(h, data)
    write_st(p, h, data)
    return out


def case_offsets_out_of_range(d):
    name = "model.layers.1.self_attn.k_proj.weight"
    def fn(h, data):
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [len(data) - (e - b) + 64, len(data) + 64]
    edit(d, fn)
    return ["model.safetensors", name]


def case_overlapping(d):
    a, b = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
    def fn(h, data):
        h[b]["data_offsets"] = list(h[a]["data_offsets"])
    edit(d, fn)
    return ["model.safetensors"]


def case_dtype_f8(d):
    name = "model.norm.weight"
    def fn(h, data):
        t = h[name]
        t["dtype"] = "F8_E4M3"
        t["shape"] = [t["shape"][0] * 2]
    edit(d, fn)
    return ["model.safetensors", name, "F8_E4M3"]


def case_dtype_i32(d):
    name = "model.layers.0.input_layernorm.weight"
    def fn(h, data):
        t = h[name]
        t["dtype"] = "I32"
        t["shape"] = [t["shape"][0] // 2]
    edit(d, fn)
    return ["model.safetensors", name, "I32"]


def case_shape(d):
    name = "model.layers.1.self_attn.q_proj.weight"
    def fn(h, data):
        t = h[name]
        t["shape"] = [t["shape"][1], t["shape"][0]]
    edit(d, fn)
    return ["model.safetensors", name, "shape"]


def case_missing(d):
    name = "model.layers.2.post_attention_layernorm.weight"
    def fn(h, data):
        h["unused.weight"] = h.pop(name)
    edit(d, fn)
    return [name, "missing"]


def case_bad_json(d):
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(b"{{{{")
    return ["model.safetensors"]


def case_config_layers(d):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    cfg["num_hidden_layers"] += 1
    json.dump(cfg, open(p, "w"))
    n = cfg["num_hidden_layers"] - 1
    return ["model.layers.%d." % n, "missing"]


def case_nan_weight(d):
    """A NaN in layer 1's attention output projection: every token's layer-1 output is NaN,
    which the forward refuses, naming the layer (it used to print ids of garbage, exit 0)."""
    name = "model.layers.1.self_attn.o_proj.weight"
    def fn(h, data):
        t = h[name]
        assert t["dtype"] == "BF16"
        b = t["data_offsets"][0]
        data[b:b + 2] = struct.pack("<H", 0x7FC0)  # bf16 quiet NaN
    p = os.path.join(d, "model.safetensors")
    h, data = read_st(p)
    data = bytearray(data)
    fn(h, data)
    write_st(p, h, bytes(data))
    return ["layer 1", "non-finite", "nan", "position 0"]


def case_nan_final_norm(d):
    """A NaN in the final norm's weight: every logit is NaN, which is refused naming model.norm
    and lm_head (greedy decoding used to print id 0 forever, exit 0)."""
    p = os.path.join(d, "model.safetensors")
    h, data = read_st(p)
    data = bytearray(data)
    b = h["model.norm.weight"]["data_offsets"][0]
    data[b:b + 2] = struct.pack("<H", 0x7FC0)
    write_st(p, h, bytes(data))
    return ["non-finite logit", "model.norm or lm_head"]


CASES = [case_truncated, case_header_past_end, case_offsets_out_of_range, case_overlapping,
         case_dtype_f8, case_dtype_i32, case_shape, case_missing, case_bad_json,
         case_config_layers, case_nan_weight, case_nan_final_norm]


def main():
    exe, fixture, work = sys.argv[1:4]
    failures = 0
    for case in CASES:
        d = os.path.join(work, case.__name__)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(fixture, d)
        want = case(d)
        r = subprocess.run([exe, "run", "--model", d, "--prompt-ids", "1,2,3", "--max-new", "2"],
                           capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 1 and len(lines) == 1 and all(w in lines[0] for w in want)
        if case is case_nan_weight:  # and verify --deep names the tensor
            v = subprocess.run([exe, "verify", "--deep", "--quiet", d], capture_output=True,
                               text=True, timeout=60)
            ok = ok and v.returncode == 1 and "model.layers.1.self_attn.o_proj.weight (BF16): 1 of its values are NaN or Inf (the first at flat index 0)" in v.stderr
            print("    verify --deep: exit %d  %s" % (v.returncode, v.stderr.strip()))
        print("%-28s %s  exit %d  %s" % (case.__name__, "ok  " if ok else "FAIL", r.returncode,
                                         r.stderr.strip()))
        if not ok:
            print("    expected exit 1 and one line containing %s" % want)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
