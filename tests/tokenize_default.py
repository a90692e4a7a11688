#!/usr/bin/python3
"""tests/tokenize_default.py — `deltafin tokenize` without --model uses the bundled demo model,
as `run` and `serve` do.

Owns: checking that the ids of `deltafin tokenize --ids-only TEXT` without --model are those
of `--model models/demo-moe` and, for the held-out prompts of
tests/fixtures/demo_models_greedy.json, the ids the PyTorch reference was given (the real
Qwen3 tokenizer's); that `--help` (stdout, exit 0) names the default; and that a missing
TEXT is a usage error (exit 2) saying so. Needs only the deltafin binary.

Usage: tokenize_default.py DELTAFIN MODELS_DIR FIXTURE
Exit status 0 when every check passes, 77 when the demo model is not in the tree.
"""

import json
import os
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def tokenize(deltafin, *args):
    p = subprocess.run([deltafin, "tokenize", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    deltafin, models, fixture = argv[1:]
    demo = os.path.join(models, "demo-moe")
    if not os.path.exists(os.path.join(demo, "tokenizer.json")):
        print("skipped: no demo model tokenizer at %s" % demo)
        return 77
    with open(fixture) as f:
        prompts = json.load(f)["prompts"]
    texts = [(p["doc"], p["text"], p["ids"]) for p in prompts]
    texts.append(("chat", "Hello, world <|im_end|>", None))
    for doc, text, ids in texts:
        rc, out, err = tokenize(deltafin, "--ids-only", text)
        rc2, out2, _ = tokenize(deltafin, "--model", demo, "--ids-only", text)
        got = [int(x) for x in out.split()] if rc == 0 else None
        check(rc == 0 and rc2 == 0 and out == out2 and not err,
              "%s: no --model gives the ids of --model %s (%s)" % (doc, demo, out.strip()))
        if ids is not None:
            check(got == ids, "%s: the ids the reference decoded from (%s)" % (doc, ids))
    rc, out, err = tokenize(deltafin, "Hello")
    rc2, out2, _ = tokenize(deltafin, "--model", demo, "Hello")
    check(rc == 0 and out == out2 and out.startswith("9707\t\"Hello\""),
          "ID<TAB>PIECE lines from the demo model: %r" % out)
    rc, out, err = tokenize(deltafin, "--help")
    check(rc == 0 and "[--model DIR]" in out and "default: the bundled demo model" in out
          and not err, "--help on stdout names the default model")
    rc, out, err = tokenize(deltafin, "--ids-only")
    check(rc == 2 and "give the TEXT to tokenize" in err and not out,
          "no TEXT: usage error saying so (%r)" % err.splitlines()[:1])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
