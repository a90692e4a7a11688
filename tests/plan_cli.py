#!/usr/bin/env python3
"""deltafin plan on the real Kimi K3 layout (tests/reference/kimi_k3_ckpt.py --header-only: the
released config and all 497,220 tensor headers in 96 sparse shards; no weight byte is read),
for the three machine sets of docs/K3.md "Planning a machine or a cluster":

  A  one box, 512 GiB, NVMe 5 GB/s
  B  4 boxes x 128 GiB, NVMe 5 GB/s, 10 Gbit/s
  C  16 boxes x 128 GiB, NVMe 5 GB/s, 2.5 Gbit/s

Checks (--json): the resident part's bytes exact and on the coordinator in RAM, every one of the
82,432 (layer, expert) pairs placed, the RAM placement exact (each machine's RAM less the 4 GiB
reserve, the coordinator's also less the resident part and state, in whole 17,547,264-byte
pairs), bytes read per token = resident read + state + 92 x 16 pairs, disk bytes = the top-k
share of the pairs on disk, network bytes = 2 ways x 16 x 3584 x 4 B x 92 layers x the remote
share, and a prediction with and without speculation. Then a 64 GiB box without a disk is
refused (exit 1) naming both shortfalls in GiB, and `plan --help` answers.

usage: plan_cli.py DELTAFIN PYTHON REFERENCE_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

exe, py, ref, work = sys.argv[1:5]
GiB = 1 << 30
RESIDENT = 113509512192          # deltafin inspect's resident part of the real folder
EMBED = 163840 * 7168 * 2        # the embedding table: a forward reads rows of it only
PAIR = 17547264                  # one MXFP4 expert: 3 x (packed + scales)
PAIRS = 92 * 896
EXPERT_TOK = 92 * 16 * PAIR      # 25,829,572,608 bytes per token row
WIDTH = 3584                     # the latent width the routed experts take
RESERVE = 4 * GiB

fails = 0


def check(cond, what):
    global fails
    print(("ok    " if cond else "FAIL  ") + what)
    fails += not cond


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(1.0, abs(b))


# the folder the ctest fixture k3_real made (kimi_k3.cmake), used read-only; else our own
own = not os.path.exists(os.path.join(work, "model.safetensors.index.json"))
if own:
    subprocess.run([py, os.path.join(ref, "kimi_k3_ckpt.py"), "--header-only", "--out", work],
                   check=True, capture_output=True)


def plan(nodes, *extra):
    args = [exe, "plan", "--model", work]
    for n in nodes:
        args += ["--node", n]
    return subprocess.run(args + list(extra), capture_output=True, text=True, timeout=500)


state = None
for name, nodes in (("A one box 512 GiB", ["512G,5,0"]),
                    ("B 4 x 128 GiB, 10 Gbit/s", ["128G,5,10"] * 4),
                    ("C 16 x 128 GiB, 2.5 Gbit/s", ["128G,5,2.5"] * 16)):
    r = plan(nodes, "--json")
    check(r.returncode == 0, "%s: plan exits 0 (%s)" % (name, r.stderr.strip()[:300]))
    if r.returncode != 0:
        continue
    j = json.loads(r.stdout)
    ms = j["machines"]
    state = j["state_bytes"]
    check(j["feasible"] and j["shortfall"]["experts_bytes"] == 0 and
          j["shortfall"]["coordinator_bytes"] == 0, "%s: feasible" % name)
    check(j["resident_bytes"] == RESIDENT and ms[0]["resident_ram_bytes"] == RESIDENT and
          ms[0]["resident_disk_bytes"] == 0,
          "%s: resident part %d bytes, all in the coordinator's RAM" % (name, RESIDENT))
    check(j["resident_read_bytes"] == RESIDENT - EMBED, "%s: resident read per forward %d" %
          (name, RESIDENT - EMBED))
    ex = j["experts"]
    check(ex["pairs"] == PAIRS and ex["pair_bytes"] == PAIR and ex["top_k"] == 16 and
          ex["bytes_per_token_row"] == EXPERT_TOK and ex["row_width"] == WIDTH,
          "%s: 82432 pairs of %d bytes, top-16, %d bytes per token row" % (name, PAIR, EXPERT_TOK))
    ram = [m["pairs_ram"] for m in ms]
    disk = [m["pairs_disk"] for m in ms]
    check(sum(ram) + sum(disk) == PAIRS, "%s: every pair placed (RAM %d + disk %d)" %
          (name, sum(ram), sum(disk)))
    room = [(ms[0]["mem_bytes"] - RESERVE - state - RESIDENT) // PAIR] + \
           [(m["mem_bytes"] - RESERVE) // PAIR for m in ms[1:]]
    if sum(room) >= PAIRS:
        check(sum(disk) == 0 and all(a <= b for a, b in zip(ram, room)),
              "%s: all in RAM, each machine within its room %s" % (name, ram))
    else:
        check(ram == room, "%s: RAM full in whole pairs %s" % (name, ram))
    pt = [m["per_token"] for m in ms]
    total = sum(p["memory_bytes"] + p["disk_bytes"] for p in pt)
    check(close(total, RESIDENT - EMBED + j["state_read_bytes"] + EXPERT_TOK),
          "%s: bytes read per token %.6e = resident read + state + experts" % (name, total))
    check(close(sum(p["disk_bytes"] for p in pt), EXPERT_TOK * sum(disk) / PAIRS),
          "%s: disk bytes per token = top-k share of the %d pairs on disk" % (name, sum(disk)))
    remote = sum(ram[1:]) + sum(disk[1:])
    net = 2 * 16 * WIDTH * 4 * 92 * remote / PAIRS
    check(close(pt[0]["network_bytes"], net), "%s: network %.3f MB per token" % (name, net / 1e6))
    a, s = j["target_alone"], j["speculative"]
    check(a["s_per_token"] > 0 and s["s_per_token"] > 0 and s["rows"] == 5 and
          s["tokens_per_forward"] == 3.0,
          "%s: %.3f s/token alone, %.3f speculative" % (name, a["s_per_token"], s["s_per_token"]))

# one box of 64 GiB without a disk: refused, both shortfalls named
r = plan(["64G,0,0"])
out = r.stdout + r.stderr
if state is not None:
    short = (RESIDENT + state - (64 * GiB - RESERVE)) / GiB
    check(r.returncode == 1 and ("short by %.3f GiB" % short) in r.stderr,
          "64 GiB, no disk: refused, coordinator short by %.3f GiB" % short)
check(r.returncode == 1 and "short by %.3f GiB (82432 of 82432 pairs)" % (PAIRS * PAIR / GiB) in
      r.stderr, "64 GiB, no disk: experts short by %.3f GiB" % (PAIRS * PAIR / GiB))
if fails:
    print(out[-3000:])

r = subprocess.run([exe, "plan", "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "--node" in r.stdout, "plan --help")
r = subprocess.run([exe, "plan", "--model", work, "--node", "64G,x,1"], capture_output=True,
                   text=True)
check(r.returncode == 2 and "--node" in r.stderr, "a malformed --node is a usage error")

if own:
    shutil.rmtree(work, ignore_errors=True)
print("all checks passed" if not fails else "%d checks failed" % fails)
sys.exit(1 if fails else 0)
