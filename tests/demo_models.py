#!/usr/bin/python3
"""tests/demo_models.py — the C engine decodes the demo models exactly like the reference.

Owns: running `deltafin run` greedily on models/demo-moe and models/demo-draft for every
prompt of tests/fixtures/demo_models_greedy.json and comparing the ids with the ones the
PyTorch reference (tests/reference/qwen3_ref.py) produced; the fixture is written by
tools/train/make_greedy_fixture.py. Needs only the deltafin binary and the standard library.

Usage: demo_models.py DELTAFIN MODELS_DIR FIXTURE
Exit status 0 when every (model, prompt) pair matches; otherwise one line per mismatch.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def run(deltafin, model_dir, prompt, n):
    cmd = [deltafin, "run", "--model", model_dir, "--prompt-ids", ",".join(str(i) for i in prompt),
           "--max-new", str(n), "--temperature", "0", "--ignore-eos"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if p.returncode != 0:
        return None, "exit status %d: %s" % (p.returncode, p.stderr.strip()[-400:])
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        ids = [int(t) for t in lines[-1].replace(",", " ").split()]
    except (IndexError, ValueError):
        return None, "unparsable output %r" % p.stdout[-200:]
    return ids, None


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    deltafin, models, fixture = argv[1:]
    missing = [p for p in (os.path.join(models, "demo-moe", "model.safetensors"),
                           os.path.join(models, "demo-draft", "model.safetensors"), fixture)
               if not os.path.exists(p)]
    if missing:
        print("skipped: the trained demo pair is not in this tree yet (missing %s)"
              % ", ".join(missing))
        return 77
    with open(fixture) as f:
        fx = json.load(f)
    n = fx["max_new"]
    jobs = []
    for name, expected in sorted(fx["models"].items()):
        for pi, prompt in enumerate(fx["prompts"]):
            jobs.append((name, pi, prompt["ids"], expected[pi]))
    with ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(lambda j: run(deltafin, os.path.join(models, j[0]), j[2], n), jobs))
    failures = 0
    for (name, pi, prompt, expected), (got, err) in zip(jobs, results):
        if err:
            print("FAIL %s prompt %d: %s" % (name, pi, err))
            failures += 1
        elif got != expected:
            first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            print("FAIL %s prompt %d: ids differ from the reference at position %d\n  engine    %s\n  reference %s"
                  % (name, pi, first, got, expected))
            failures += 1
        else:
            print("ok   %s prompt %d: %d ids" % (name, pi, len(got)))
    print("%d of %d decodes match the reference" % (len(jobs) - failures, len(jobs)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
