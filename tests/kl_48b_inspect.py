#!/usr/bin/env python3
"""deltafin inspect on the real Kimi-Linear-48B-A3B layout without its 98 GB: the reference's
header-only folder (tests/reference/kimi_linear_ckpt.py --header-only) with every shard
extended to its described size as a sparse file (no disk blocks; the data reads as zeros),
so the engine binds all 20,493 tensors by their published names and shapes and prints the
memory plan: the MLA latent cache per token and the KDA state per sequence, the parameter
counts, and the placement on two 64 GiB nodes.

usage: kl_48b_inspect.py DELTAFIN PYTHON REFERENCE_DIR WORK_DIR
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys

exe, py, ref, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
subprocess.run([py, os.path.join(ref, "kimi_linear_ckpt.py"), "--header-only", "--out", work],
               check=True, capture_output=True)
for f in sorted(glob.glob(os.path.join(work, "*.safetensors"))):
    with open(f, "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        hdr = json.loads(h.read(n))
    end = max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
    os.truncate(f, 8 + n + end)
r = subprocess.run([exe, "inspect", work, "--nodes", "64G,64G"], capture_output=True, text=True,
                   timeout=120)
out = r.stdout + r.stderr
fails = 0


def check(cond, what):
    global fails
    print(("ok    " if cond else "FAIL  ") + what)
    fails += not cond


check(r.returncode == 0, "inspect exits 0 (%s)" % r.stderr.strip()[:200])
check("KDA on 20 of 27 layers: 32 heads x 128, conv 4, softplus decay gate, low-rank output gate"
      in out, "20 KDA layers of 32 x 128, the 48B's gates")
check("NoPE MLA on 7: 32 heads, q_lora_rank 0, kv_lora_rank 512, qk_nope 128 + qk_rope 64" in out,
      "7 NoPE MLA layers with q_proj")
check("26 of 27 layers, 256 experts" in out and "top-8" in out, "26 MoE layers, 256 experts top-8")
# 7 MLA layers x (512 + 64) x 4 B
check(re.search(r"KV cache per token +16128 bytes", out) is not None, "MLA cache 16128 B/token")
# per KDA layer: 2 x (S 32*128*128 + windows 3*4096*3) + 64 log rows x (4*4096 + 32), fp32
per = (2 * (32 * 128 * 128 + 3 * 4096 * 3) + 64 * (4 * 4096 + 32)) * 4
m = re.search(r"state per sequence +(\d+) bytes", out)
check(m is not None and per * 20 <= int(m.group(1)) < per * 20 + 20 * 256,
      "KDA state per sequence %s B (20 x %d + the structs)" % (m.group(1) if m else "?", per))
# the published sizes: ~48 B parameters, ~3 B active per token
m = re.search(r"parameters +([\d.]+) B total, ([\d.]+) B active per token", out)
check(m is not None and 47 < float(m.group(1)) < 50 and 2.8 < float(m.group(2)) < 3.3,
      "parameters ~48 B total, ~3 B active (%s)" % (m.group(0) if m else "missing"))
# on two 64 GiB nodes: 26 x 256 experts of 3 x 1024 x 2304 BF16 = 13.5 MiB each, half each
check("placement on 2 node(s): 6656 (layer, expert) pairs of 13.5 MiB" in out, "6656 pairs")
check(out.count("(64.0 GiB)  3328 pairs (43.875 GiB)") == 2, "3328 pairs on each 64 GiB node")
check(re.search(r"coordinator +0 pairs \(0\.000 GiB\) \+ the resident part \(3\.748 GiB\)", out)
      is not None, "the coordinator keeps only the resident 3.75 GiB")
shutil.rmtree(work, ignore_errors=True)
print("all checks passed" if not fails else "%d checks failed" % fails)
sys.exit(1 if fails else 0)
