#!/usr/bin/env python3
"""tools/widen/widen.py preserves the function: for each fixture, widened 4x in hidden size,
with wider experts / dense MLPs and two extra layers, `deltafin run` gives bitwise-identical
prompt logits and identical greedy ids.

usage: widen_check.py DELTAFIN FIXTURES_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WIDEN = os.path.join(HERE, "..", "tools", "widen", "widen.py")


def run(exe, model, prompt, logits):
    r = subprocess.run([exe, "run", "--model", model, "--prompt-ids", prompt, "--max-new", "32",
                        "--temperature", "0", "--ignore-eos", "--no-draft", "--logits-out", logits],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("deltafin failed on %s: %s" % (model, r.stderr))
    return r.stdout.split()


def main():
    exe, fixtures, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    bad = 0
    for name in ("tiny-moe-tied", "tiny-moe-sparse", "tiny-dense"):
        src = os.path.join(fixtures, name)
        out = os.path.join(work, name + "-wide")
        subprocess.run([sys.executable, WIDEN, "--src", src, "--out", out, "--hidden-ratio", "4",
                        "--moe-inter", "128", "--inter", "512", "--extra-layers", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        g = json.load(open(os.path.join(src, "golden.json")))
        prompt = ",".join(map(str, g["prompt_ids"]))
        la, lb = os.path.join(work, name + ".a.f32"), os.path.join(work, name + ".b.f32")
        ia, ib = run(exe, src, prompt, la), run(exe, out, prompt, lb)
        same_logits = open(la, "rb").read() == open(lb, "rb").read()
        cfg = json.load(open(os.path.join(out, "config.json")))
        src_cfg = json.load(open(os.path.join(src, "config.json")))
        ok = (same_logits and ia == ib and len(ia) == 32
              and cfg["hidden_size"] == 4 * src_cfg["hidden_size"]
              and cfg["num_hidden_layers"] == src_cfg["num_hidden_layers"] + 2)
        print("%-16s hidden %d, %d layers: logits %s, greedy ids %s" % (
            name, cfg["hidden_size"], cfg["num_hidden_layers"],
            "bitwise equal" if same_logits else "DIFFER", "equal" if ia == ib else "DIFFER"))
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
