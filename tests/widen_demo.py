#!/usr/bin/python3
"""tests/widen_demo.py — the widened demo target decodes exactly like the demo target.

Widens models/demo-moe with tools/widen/widen.py (hidden x4, experts twice as wide, one
extra zero-output layer: about 0.35 GB, small enough for a test; the benchmark's 2-4 GB
widening uses the same code) into WORK_DIR, then runs `deltafin run` greedily for 32 tokens
on 5 prompts with both folders and requires identical token ids. Prompts: the first five of
tests/fixtures/demo_models_greedy.json when present, otherwise five fixed id lists.
Exits 77 (ctest SKIP_RETURN_CODE) with a message while models/demo-moe is absent.

usage: widen_demo.py DELTAFIN MODELS_DIR WORK_DIR
"""
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
WIDEN = os.path.join(HERE, "..", "tools", "widen", "widen.py")
FIXTURE = os.path.join(HERE, "fixtures", "demo_models_greedy.json")
ARGS = ["--hidden-ratio", "4", "--extra-layers", "1"]
N_NEW = 32
SKIP = 77


def run(exe, model, ids):
    p = subprocess.run([exe, "run", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new", str(N_NEW), "--temperature", "0", "--ignore-eos", "--no-draft"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, "exit status %d: %s" % (p.returncode, p.stderr.strip()[-400:])
    try:
        return [int(t) for t in p.stdout.split()], None
    except ValueError:
        return None, "unparsable output %r" % p.stdout[-200:]


def source_key(src, args):
    h = hashlib.sha256(" ".join(args).encode())
    for fn in sorted(os.listdir(src)):
        st = os.stat(os.path.join(src, fn))
        h.update(("%s %d %d\n" % (fn, st.st_size, int(st.st_mtime))).encode())
    return h.hexdigest()


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    exe, models, work = argv[1:]
    src = os.path.join(models, "demo-moe")
    if not os.path.exists(os.path.join(src, "config.json")):
        print("SKIP: %s is absent (the trained demo target is committed separately); "
              "nothing to widen" % src)
        return SKIP
    cfg = json.load(open(os.path.join(src, "config.json")))
    args = ARGS + ["--moe-inter", str(2 * cfg["moe_intermediate_size"])]
    os.makedirs(work, exist_ok=True)
    wide = os.path.join(work, "demo-moe-wide")
    key, stamp = source_key(src, args), os.path.join(work, "demo-moe-wide.key")
    if not (os.path.exists(os.path.join(wide, "config.json")) and os.path.exists(stamp)
            and open(stamp).read().strip() == key):
        subprocess.run([sys.executable, WIDEN, "--src", src, "--out", wide] + args, check=True)
        with open(stamp, "w") as f:
            f.write(key + "\n")
    wcfg = json.load(open(os.path.join(wide, "config.json")))
    print("demo-moe: hidden %d, %d layers, expert width %d -> widened: hidden %d, %d layers, "
          "expert width %d" % (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["moe_intermediate_size"],
                               wcfg["hidden_size"], wcfg["num_hidden_layers"], wcfg["moe_intermediate_size"]))
    if os.path.exists(FIXTURE):
        prompts = [p["ids"] for p in json.load(open(FIXTURE))["prompts"][:5]]
    else:
        v = cfg["vocab_size"]
        prompts = [[(17 + 7919 * (i * 16 + j)) % min(v, 150000) for j in range(8 + 4 * i)] for i in range(5)]
    jobs = [(m, i) for i in range(len(prompts)) for m in (src, wide)]
    with ThreadPoolExecutor(max_workers=2) as ex:
        res = dict(zip(jobs, ex.map(lambda j: run(exe, j[0], prompts[j[1]]), jobs)))
    bad = 0 if len(prompts) == 5 else 1
    for i in range(len(prompts)):
        (a, ea), (b, eb) = res[(src, i)], res[(wide, i)]
        if ea or eb:
            print("FAIL prompt %d: %s" % (i, ea or eb))
            bad += 1
        elif a != b or len(a) != N_NEW:
            k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print("FAIL prompt %d: ids differ at position %d\n  demo-moe %s\n  widened  %s" % (i, k, a, b))
            bad += 1
        else:
            print("ok   prompt %d: %d identical greedy ids" % (i, N_NEW))
    print("%d of %d prompts decode identically on the widened target" % (len(prompts) - bad, len(prompts)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
