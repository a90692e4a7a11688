#!/usr/bin/python3
"""tests/widen_dspark.py — a block drafter widened with its target drafts exactly as before.

Widens models/demo-moe (hidden x4) and models/demo-dspark by the same ratio with
tools/widen/widen.py (--dspark-src/--dspark-out) into WORK_DIR (kept and reused while the
sources and widen.py are unchanged), then runs `deltafin run --draft DRAFTER --temperature 0
--fixed-k --draft-k 6 --stats` on the pair and on the widened pair, once with a text prompt
(the text must be equal) and once with token ids (the generated ids must be equal), and
requires the same drafting figures: rounds, acceptance, mean accepted length and k histogram
(the `draft:` line without its timings). Fixed k, so the adaptive controller's timing-driven
choices do not enter. Exits 77 (ctest SKIP_RETURN_CODE) while either source is absent.

usage: widen_dspark.py DELTAFIN MODELS_DIR WORK_DIR
"""
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
WIDEN = os.path.join(HERE, "..", "tools", "widen", "widen.py")
FIXTURE = os.path.join(HERE, "fixtures", "demo_models_greedy.json")
RATIO = "4"
N_NEW = 24
TEXT = "The history of the county begins with"
FALLBACK_IDS = [785, 3840, 315, 279, 13867, 12033, 448]
SKIP = 77


def run(exe, model, draft, prompt):
    cmd = [exe, "run", "--model", model, "--draft", draft, "--max-new", str(N_NEW), "--temperature", "0",
           "--ignore-eos", "--fixed-k", "--draft-k", "6", "--stats"] + prompt
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, "%s: exit status %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-400:])
    m = re.search(r"^draft: (\d+) rounds, acceptance ([0-9.]+), mean accepted length ([0-9.]+).*$",
                  p.stderr, re.M)
    if not m:
        return None, "no draft: line in %r" % p.stderr[-400:]
    # the line without its timings: "draft X ms per round, target Y ms per forward"
    line = re.sub(r"draft [0-9.]+ ms per round, target [0-9.]+ ms per forward, ", "", m.group(0))
    rounds, acc, mal = int(m.group(1)), float(m.group(2)), float(m.group(3))
    return {"out": p.stdout, "line": line, "rounds": rounds, "acceptance": acc, "mal": mal,
            "accepted": round(mal * rounds)}, None


def key_of(paths, extra):
    h = hashlib.sha256(extra.encode())
    for p in paths:
        for fn in sorted(os.listdir(p)) if os.path.isdir(p) else [""]:
            st = os.stat(os.path.join(p, fn) if fn else p)
            h.update(("%s/%s %d %d\n" % (p, fn, st.st_size, int(st.st_mtime))).encode())
    return h.hexdigest()


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    exe, models, work = argv[1:]
    src, dsrc = os.path.join(models, "demo-moe"), os.path.join(models, "demo-dspark")
    for d in (src, dsrc):
        if not os.path.exists(os.path.join(d, "config.json")):
            print("SKIP: %s is absent; nothing to widen" % d)
            return SKIP
    os.makedirs(work, exist_ok=True)
    wide, dwide = os.path.join(work, "demo-moe-x4"), os.path.join(work, "demo-dspark-x4")
    key, stamp = key_of([src, dsrc, WIDEN], RATIO), os.path.join(work, "widened.key")
    if not (os.path.exists(os.path.join(wide, "config.json")) and os.path.exists(os.path.join(dwide, "config.json"))
            and os.path.exists(stamp) and open(stamp).read().strip() == key):
        subprocess.run([sys.executable, WIDEN, "--src", src, "--out", wide, "--hidden-ratio", RATIO,
                        "--dspark-src", dsrc, "--dspark-out", dwide], check=True)
        with open(stamp, "w") as f:
            f.write(key + "\n")
    ids = json.load(open(FIXTURE))["prompts"][0]["ids"] if os.path.exists(FIXTURE) else FALLBACK_IDS
    prompts = {"text": ["--prompt", TEXT], "ids": ["--prompt-ids", ",".join(map(str, ids))]}
    pairs = {"demo": (src, dsrc), "widened": (wide, dwide)}
    jobs = [(p, k) for p in prompts for k in pairs]
    with ThreadPoolExecutor(max_workers=2) as ex:
        res = dict(zip(jobs, ex.map(lambda j: run(exe, *pairs[j[1]], prompts[j[0]]), jobs)))
    bad = 0
    for p in prompts:
        (a, ea), (b, eb) = res[(p, "demo")], res[(p, "widened")]
        if ea or eb:
            print("FAIL %s prompt: %s" % (p, ea or eb))
            bad += 1
            continue
        if a["out"] != b["out"]:
            print("FAIL %s prompt: outputs differ\n  demo     %r\n  widened  %r" % (p, a["out"], b["out"]))
            bad += 1
        if p == "ids" and len(a["out"].split()) != N_NEW:
            print("FAIL ids prompt: %d ids, expected %d" % (len(a["out"].split()), N_NEW))
            bad += 1
        if a["line"] != b["line"]:
            print("FAIL %s prompt: drafting differs\n  demo     %s\n  widened  %s" % (p, a["line"], b["line"]))
            bad += 1
        if a["accepted"] == 0:
            print("FAIL %s prompt: the drafter had no token accepted (%s)" % (p, a["line"]))
            bad += 1
        print("%s %s prompt: %d rounds, %d accepted, acceptance %.3f, mean accepted length %.2f on both "
              "(%s)" % ("ok  " if not bad else "    ", p, a["rounds"], a["accepted"], a["acceptance"], a["mal"],
                        "same text" if p == "text" else "same %d ids" % N_NEW))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
