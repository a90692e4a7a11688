#!/usr/bin/env python3
"""--threads below and above the machine's core count: `deltafin run --threads 1` and
`--threads 3` give exactly the greedy ids of the default count (and of the reference) on
golden fixtures, and `deltafin serve --threads 1` / `--threads 3` answer requests — the
server generates on its scheduler thread, not the thread that loaded the model — with the
text of `deltafin run`. The kernels are thread-invariant (docs/ENGINE.md), so every count
must give identical ids.

usage: cli_threads.py DELTAFIN FIXTURES_DIR SERVER_MODEL_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Server, check, finish, post, run_ref  # noqa: E402

EXE, FIXTURES, SERVER_MODEL = sys.argv[1:4]
COUNTS = (None, 1, 3)  # None: the default (every online CPU)


def run_ids(model, prompt, n, threads):
    cmd = [EXE, "run", "--model", model, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new", str(n), "--temperature", "0", "--ignore-eos"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return "exit %d: %s" % (r.returncode, r.stderr.strip()[-400:])
    return [int(x) for x in r.stdout.split()]


def main():
    for name in ("tiny-moe-sparse", "tiny-ds-fp8"):
        d = os.path.join(FIXTURES, name)
        g = json.load(open(os.path.join(d, "golden.json")))
        base = None
        for t in COUNTS:
            ids = run_ids(d, g["prompt_ids"], len(g["greedy_ids"]), t)
            what = "%s: run --threads %s" % (name, t if t is not None else "default")
            check(ids == g["greedy_ids"], what + " gives the reference's greedy ids"
                  + ("" if ids == g["greedy_ids"] else " (got %s)" % ids))
            if base is None:
                base = ids
            else:
                check(ids == base, what + " gives the default count's ids exactly")

    check(subprocess.run([EXE, "run", "--threads", "0"], capture_output=True, text=True,
                         timeout=60).returncode == 2, "run --threads 0 is a usage error")

    prompt, n = "Once upon a time", 16
    want = run_ref(EXE, SERVER_MODEL, prompt, max_new=n, ignore_eos=True)
    model_id = os.path.basename(SERVER_MODEL.rstrip("/"))
    for t in COUNTS[1:]:
        s = Server(EXE, SERVER_MODEL, "--no-draft", "--threads", str(t))
        try:
            for i in range(2):  # the first request, and one more on the same server
                try:
                    st, _, body = post(s.port, "/v1/completions",
                                       {"model": model_id, "prompt": prompt, "max_tokens": n,
                                        "temperature": 0, "ignore_eos": True})
                except OSError as e:
                    st, body = None, str(e)
                ok = st == 200 and isinstance(body, dict)
                check(ok, "serve --threads %d answers request %d (status %s)" % (t, i + 1, st))
                if ok:
                    check(body["choices"][0]["text"] == want and
                          body["usage"]["completion_tokens"] == n,
                          "serve --threads %d request %d: the text of deltafin run" % (t, i + 1))
            check(s.alive(), "serve --threads %d still running" % t)
        finally:
            rc = s.stop()
        check(rc == 0, "serve --threads %d exits 0 on SIGTERM (got %s)%s" %
              (t, rc, "" if rc == 0 else ":\n" + "".join(s.log[-5:])))
    finish()


if __name__ == "__main__":
    main()
