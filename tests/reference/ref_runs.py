#!/usr/bin/python3
"""tests/reference/ref_runs.py — several runs of one reference command line in one process.

Owns: nothing but batching. Each run is exactly `MODULE.py ARGS... > OUT.json` (the module's
own main(argv), the code path of its command line), written to OUT.json.tmp and renamed to
OUT.json once main returned 0. One process pays the PyTorch import (~2 s) once instead of
once per run; nothing else is shared between runs but the imported modules.

usage: ref_runs.py MODULE --run OUT ARGS... [--run OUT ARGS...]...
  MODULE  a reference module of this folder with main(argv) -> status (kimi_k3_ref,
          kimi_linear_ref, ...)
  OUT     path prefix of the run's JSON (its folder is made); ARGS its command line
Exit status: the first failing run's status (later runs are not made), else 0.
"""
import contextlib
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse(argv):
    if len(argv) < 3 or argv[1] != "--run":
        sys.exit("usage: ref_runs.py MODULE --run OUT ARGS... [--run OUT ARGS...]...")
    runs = []
    for a in argv[1:]:
        if a == "--run":
            runs.append([])
        else:
            runs[-1].append(a)
    if any(len(r) < 2 for r in runs):
        sys.exit("ref_runs.py: every --run needs OUT and the command line's arguments")
    return argv[0], runs


def main():
    name, runs = parse(sys.argv[1:])
    mod = importlib.import_module(name)
    for out, *args in runs:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out + ".json.tmp", "w") as f, contextlib.redirect_stdout(f):
            rc = mod.main(args)
        if rc:
            print("ref_runs.py: %s %s: exit %d" % (name, " ".join(args), rc), file=sys.stderr)
            return rc
        os.replace(out + ".json.tmp", out + ".json")
        print("%s: %s.json" % (name, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
