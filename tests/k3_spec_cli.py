#!/usr/bin/env python3
"""Speculative decoding over a Kimi K3 target gives exactly the target's greedy ids: `deltafin
run` on tests/fixtures/tiny-k3 alone, with another K3 as the draft (tiny-k3-deep: its
proposals are mostly rejected, so the target's KDA states roll back nearly every round) and
with the target as its own draft (all accepted), at prompt lengths 1, 9 and 40, through
prefill chunks of 7 rows. Drafting must run at least 4 rounds (the bad draft is then switched
off as not paying, which must not change the ids either).

usage: k3_spec_cli.py DELTAFIN FIXTURES
"""
import re
import subprocess
import sys


def run(exe, model, ids, extra):
    r = subprocess.run([exe, "run", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new", "24", "--temperature", "0", "--ignore-eos", "--chunk", "7",
                        "--stats", *extra], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (extra, r.returncode, r.stderr.strip()[-400:]))
    return r.stdout.split(), r.stderr


def main():
    exe, fx = sys.argv[1:3]
    target, fails = fx + "/tiny-k3", 0
    for n in (1, 9, 40):
        ids = [(i * 41 + 7) % 512 for i in range(n)]
        alone, _ = run(exe, target, ids, ["--no-draft"])
        for draft in ("tiny-k3-deep", "tiny-k3"):
            got, err = run(exe, target, ids, ["--draft", fx + "/" + draft])
            m = re.search(r"draft: (\d+) rounds", err)
            ok = got == alone and m is not None and int(m.group(1)) >= 4
            fails += not ok
            print("%s  prompt %d, draft %s: %s" % ("ok  " if ok else "FAIL", n, draft,
                  " ".join(got) if ok else "%s vs alone %s\n%s" % (got, alone, err)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
