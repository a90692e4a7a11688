#!/usr/bin/env python3
"""deltafin inspect on the real Kimi K3 layout without its 1.56 TB: the reference's
header-only folder (tests/reference/kimi_k3_ckpt.py --header-only: the released config.json,
model.safetensors.index.json and 96 shards whose headers list all 497,220 tensors, each shard
extended to its described size as a sparse file), so the engine binds every published text
tensor by name, dtype and shape (routed experts only as MXFP4 weight_packed + weight_scale U8
pairs, vision tensors ignored) and prints the memory plan.

Checks (the engine's K3 print format was not settled when this was written, so the
patterns are loose; each check prints ok / FAIL / SKIP):
  * inspect exits 0
  * parameters ~2.8 T total (2.70..2.90 T) and ~104 B active per token (100..108 B)
  * 69 KDA layers of 96 x 128 and 24 NoPE MLA layers
  * 92 MoE layers of 896 experts, top-16
  * MLA cache per token 24 x (512 + 64) x 4 = 55,296 bytes (as kimi_linear prints it)
  * the index's metadata.total_size is 1,560,860,324,864 (generator check)
  * the memory plan: resident part 113,509,512,192 B (K3.md §1.5's spine less layer 0's two
    self_attention_res tensors, which are never read), routed experts 1,446,456,066,048 B
  * `deltafin run` on a machine whose memory is below the resident part is refused before the
    first token by the admission, naming both sizes (skipped where the machine is that large)

usage: k3_inspect.py DELTAFIN PYTHON REFERENCE_DIR DIR   (DIR: the header-only folder, made
       there and removed afterwards unless it already holds one)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

exe, py, ref, work = sys.argv[1:5]
# the folder the ctest fixture k3_real made (kimi_k3.cmake), used read-only; else our own
own = not os.path.exists(os.path.join(work, "model.safetensors.index.json"))
if own:
    subprocess.run([py, os.path.join(ref, "kimi_k3_ckpt.py"), "--header-only", "--out", work],
                   check=True, capture_output=True)
fails = 0


def check(cond, what):
    global fails
    print(("ok    " if cond else "FAIL  ") + what)
    fails += not cond


with open(os.path.join(work, "model.safetensors.index.json")) as f:
    idx = json.load(f)
check(idx["metadata"]["total_size"] == 1560860324864 and len(idx["weight_map"]) == 497220,
      "index: 497,220 tensors, total_size 1,560,860,324,864")

t0 = time.time()
try:
    r = subprocess.run([exe, "inspect", work], capture_output=True, text=True, timeout=540)
except subprocess.TimeoutExpired:
    check(False, "inspect finishes within 540 s")
    sys.exit(1)
print("inspect: exit %d after %.1f s" % (r.returncode, time.time() - t0))
out = r.stdout + r.stderr
check(r.returncode == 0, "inspect exits 0 (exit %d: %s)" % (r.returncode, r.stderr.strip()[-300:]))


def number(s):
    return float(s.replace(",", ""))


# parameters: "parameters  X B total, Y B active per token" (kimi_linear's format) or T units
m = re.search(r"parameters +([\d.,]+) ([TB])\w* total, ([\d.,]+) ([TB])\w* active", out)
tot = act = None
if m:
    tot = number(m.group(1)) * (1000.0 if m.group(2) == "T" else 1.0)
    act = number(m.group(3)) * (1000.0 if m.group(4) == "T" else 1.0)
check(tot is not None and 2700 <= tot <= 2900 and 100 <= act <= 108,
      "parameters ~2.8 T total, ~104 B active (%s)" % (m.group(0) if m else "line missing"))
check(re.search(r"KDA on 69 of 93 layers: 96 heads x 128", out) is not None, "69 KDA layers of 96 x 128")
check(re.search(r"NoPE MLA on 24\b", out) is not None, "24 NoPE MLA layers")
check(re.search(r"92 of 93 layers, 896 experts", out) is not None and "top-16" in out,
      "92 MoE layers x 896 experts top-16")
check(re.search(r"KV cache per token +55296 bytes", out) is not None, "MLA cache 55296 B/token")
check(re.search(r"parameters +2779\.48 B total, 104\.19 B active", out) is not None,
      "parameters exactly 2779.48 B total, 104.19 B active")
check(re.search(r"resident part +113509512192 bytes", out) is not None,
      "resident part 113,509,512,192 B")
check(re.search(r"routed experts +1446456066048 bytes", out) is not None,
      "routed experts 1,446,456,066,048 B")
check("168 tensors outside language_model.*" in out, "the 168 vision tensors named as never read")
mem = 0
with open("/proc/meminfo") as f:
    for line in f:
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
if 0 < mem < 113509512192:
    r = subprocess.run([exe, "run", "--model", work, "--prompt-ids", "1008,10484", "--max-new", "1"],
                       capture_output=True, text=True, timeout=540)
    check(r.returncode != 0 and "admission: the resident part" in r.stderr and "105.7 GiB" in r.stderr
          and "GiB short" in r.stderr and "load " not in r.stderr,
          "run is refused by the admission before the first token: %s" % r.stderr.strip()[-300:])
else:
    print("skip  run admission: this machine holds the resident part (%d B of memory)" % mem)
if fails:
    print(out[-4000:])
if own:
    shutil.rmtree(work, ignore_errors=True)
print("all checks passed" if not fails else "%d checks failed" % fails)
sys.exit(1 if fails else 0)
