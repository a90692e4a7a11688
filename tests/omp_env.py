#!/usr/bin/env python3
"""The executables' OpenMP waiting default (engine/omp_preinit.c), read back from libgomp
itself through OMP_DISPLAY_ENV=VERBOSE, which prints the values libgomp initialised with.

Usage: omp_env.py DELTAFIN DF_NODE
"""
import os
import re
import subprocess
import sys


def spincount(argv, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    e["OMP_DISPLAY_ENV"] = "VERBOSE"
    e.update(env)
    r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)
    m = re.search(r"GOMP_SPINCOUNT = '(\d+)'", r.stdout + r.stderr)
    if not m:
        sys.exit("omp_env: %s printed no GOMP_SPINCOUNT line:\n%s%s" % (argv, r.stdout, r.stderr))
    return m.group(1)


def expect(what, got, want):
    print("%-60s GOMP_SPINCOUNT %s" % (what, got))
    if got != want:
        sys.exit("omp_env: %s: libgomp initialised with GOMP_SPINCOUNT %s, expected %s" % (what, got, want))


def main():
    deltafin, node = sys.argv[1], sys.argv[2]
    missing = ["--model", "/nonexistent-model-dir", "--prompt-ids", "1"]
    # commands that run kernels get the short spin ...
    expect("deltafin run", spincount([deltafin, "run"] + missing), "1000")
    expect("deltafin serve", spincount([deltafin, "serve", "--model", "/nonexistent-model-dir"]), "1000")
    expect("df-node --help", spincount([node, "--help"]), "1000")
    # ... the user's own settings win ...
    expect("deltafin run, GOMP_SPINCOUNT=77 set by the user",
           spincount([deltafin, "run"] + missing, GOMP_SPINCOUNT="77"), "77")
    expect("deltafin run, OMP_WAIT_POLICY=passive set by the user",
           spincount([deltafin, "run"] + missing, OMP_WAIT_POLICY="passive"), "0")
    # ... and quick commands do not re-execute (libgomp's own default stays)
    expect("deltafin --version", spincount([deltafin, "--version"]), "300000")
    expect("deltafin inspect", spincount([deltafin, "inspect", "/nonexistent-model-dir"]), "300000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
