#!/usr/bin/env python3
"""What a new user sees of `deltafin run` and `make demo`.

usage: run_ux.py SCENARIO DELTAFIN MODELS_DIR FIXTURES_DIR WORK_DIR SOURCE_DIR DRAFTS_DIR
SCENARIO:
  quiet     the default run (bundled demo pair, --prompt text, and --prompt-ids) prints
            nothing on stderr; drafting that switches itself off because it does not pay (a
            tiny target with the perturbed draft of DRAFTS_DIR, tests/make_spec_drafts.py)
            prints nothing without --stats and, with it, one line after the output
            ("deltafin: drafting went off: it does not pay ...") before the figures; a
            request past the demo's 512 tokens names the model's limit (not --ctx)
  clock     --stats' "load" counts from the process's creation (start-up reported, and load
            + prefill reach the first generated token's arrival within a step); a one-token
            prefill's rate is "n/a", a longer one's a number; --cluster reports the wait for
            nodes apart ("waited S s for N nodes") and load leaves it out
  seed      without --seed each sampling run draws another seed, printed by --stats
            ("seed N"), and --seed N repeats that run's ids; a greedy run prints no seed; the
            demo pair samples as its generation_config asks
  progress  a prefill longer than a second draws a "\\r" bar with ETA on stderr when
            DF_PROGRESS=1 (stderr a pipe) and when stderr is a terminal, cleared at the end,
            never on stdout; nothing without DF_PROGRESS on a pipe; nothing for a short run
            even with DF_PROGRESS=1
  build     tools/build-quiet.sh (make demo's build) prints one line on success with the
            build's output in BUILD/build.log, and on failure one line naming the first error
            and the log on stderr, exit 1 (on a throwaway CMake project)
Exit 77 (skipped) when the demo pair a scenario needs is missing.
"""
import os
import pty
import re
import select
import shutil
import socket
import subprocess
import sys
import time

SCEN, EXE, MODELS, FIX, WORK, SRC, DRAFTS = sys.argv[1:8]
DEMO_PROMPT = "The committee reported that the new school"
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def env_without(*names, **extra):
    e = {k: v for k, v in os.environ.items() if k not in names}
    e.update(extra)
    return e


def run(*args, env=None, timeout=300):
    e = env if env is not None else env_without("DF_PROGRESS")
    t0 = time.monotonic()
    r = subprocess.run([EXE, "run", *args], capture_output=True, timeout=timeout, env=e)
    r.wall = time.monotonic() - t0
    # decoded here, not with text=True: universal newlines would turn the bar's "\r" into "\n"
    r.stdout, r.stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    return r


def need_demo():
    for m in ("demo-moe", "demo-draft"):
        if not os.path.exists(os.path.join(MODELS, m, "model.safetensors")):
            print("skipped: %s is missing" % os.path.join(MODELS, m))
            sys.exit(77)


def stats_line(stderr):
    m = re.search(r"(?:^|\r)load ([0-9.]+) s(?: \(start-up ([0-9.]+) s\))?"
                  r"(?: \| waited ([0-9.]+) s for (\d+) nodes?)?"
                  r" \| prefill (\d+) tokens in ([0-9.]+) s = (n/a|[0-9.]+ tok/s)"
                  r" \| generate (\d+) tokens in ([0-9.]+) s = "
                  r"(n/a|[0-9.]+ tok/s, [0-9.]+ ms/token)$", stderr, re.M)
    if not m:
        return None
    g = m.groups()
    return {"load": float(g[0]), "startup": float(g[1]) if g[1] else None,
            "waited": float(g[2]) if g[2] else None, "nodes": int(g[3]) if g[3] else None,
            "n_prompt": int(g[4]), "prefill_s": float(g[5]), "prefill_rate": g[6],
            "n_out": int(g[7]), "generate_s": float(g[8]), "generate_rate": g[9]}


def seed_of(stderr):
    m = re.search(r"^sampling: .*, seed (\d+) \(--seed (\d+) repeats", stderr, re.M)
    return int(m.group(1)) if m and m.group(1) == m.group(2) else None


# ---- quiet ---------------------------------------------------------------------------------


def scen_quiet():
    need_demo()
    r = run("--prompt", DEMO_PROMPT, "--max-new", "48")
    check(r.returncode == 0 and len(r.stdout.strip()) > 0, "default run: exit 0 and text")
    check(r.stderr == "", "default run (text): nothing on stderr (got %r)" % r.stderr[:300])
    r = run("--prompt-ids", "785,12801,4961,429,279,501,2906", "--max-new", "48")
    check(r.returncode == 0 and len(r.stdout.split()) == 48 and r.stderr == "",
          "default run (--prompt-ids): 48 ids, nothing on stderr (got %r)" % r.stderr[:300])
    # too long a request: --ctx is the fix only below the model's limit (512 for the demo)
    r = run("--prompt-ids", "785,12801,4961,429,279,501,2906", "--max-new", "600")
    check(r.returncode != 0 and "exceeds the context of 512 tokens, the model's limit" in
          r.stderr and "--max-new 505 or less" in r.stderr and "raise --ctx" not in r.stderr,
          "prompt 7 + max-new 600 at the model's 512: says the limit, not --ctx (%s)"
          % r.stderr.strip())
    r = run("--prompt-ids", "785,12801,4961,429,279,501,2906", "--max-new", "600", "--ctx", "64")
    check(r.returncode != 0 and "raise --ctx, up to max_position_embeddings 512" in r.stderr,
          "with --ctx 64: raise --ctx, up to 512 (%s)" % r.stderr.strip())
    # a switch-off the measurement decides: silent by default, one line with --stats
    common = ["--model", os.path.join(FIX, "tiny-moe-sparse"), "--draft",
              os.path.join(DRAFTS, "perturbed"), "--prompt-ids", "400,3,77,1,0,12,5,6,9,100",
              "--max-new", "64", "--temperature", "0", "--ignore-eos"]
    r = run(*common)
    check(r.returncode == 0 and len(r.stdout.split()) == 64 and r.stderr == "",
          "a draft that does not pay, without --stats: nothing on stderr (%r)" % r.stderr[:300])
    r = run(*common, "--stats")
    lines = r.stderr.splitlines()
    off = [ln for ln in lines if ln.startswith("deltafin: drafting went off: it does not pay (")]
    at_load = [i for i, ln in enumerate(lines) if ln.startswith("load ")]
    check(r.returncode == 0 and len(off) == 1 and off[0].endswith("; the target ran alone from "
          "then on") and bool(at_load) and lines.index(off[0]) < at_load[0]
          and not any("drafting off" in ln for ln in lines),
          "with --stats: one 'drafting went off: it does not pay' line before the figures (%s)"
          % (off[0] if off else r.stderr.strip()[-300:]))
    # the demo pair: the measurement usually switches drafting off too, but it is timing-driven
    went_off = False
    for attempt in range(4):
        r = run("--prompt", DEMO_PROMPT, "--max-new", "48", "--stats")
        off = re.search(r"^draft: .*\| off: (it does not pay.*)$", r.stderr, re.M)
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("deltafin: drafting went off")]
        check(r.returncode == 0 and bool(off) == bool(line),
              "--stats: a 'drafting went off' line exactly when the draft line says off (%s)"
              % (line[0] if line else "stayed on"))
        if off:
            lines = r.stderr.splitlines()
            at_load = [i for i, ln in enumerate(lines) if ln.startswith("load ")]
            check(len(line) == 1 and off.group(1) in line[0]
                  and line[0].endswith("; the target ran alone from then on")
                  and bool(at_load) and lines.index(line[0]) < at_load[0],
                  "--stats: the line gives the reason, once, before the figures")
            went_off = True
            break
    if not went_off:
        print("note: drafting stayed on in %d runs here; the switch-off line was not seen" %
              (attempt + 1))


# ---- clock ---------------------------------------------------------------------------------


def first_output_time(args):
    """(seconds from spawn to the first stdout byte, stdout, stderr, rc)."""
    t0 = time.monotonic()
    p = subprocess.Popen([EXE, "run", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_without("DF_PROGRESS"))
    first = p.stdout.read(1)
    t_first = time.monotonic() - t0
    out, err = p.communicate(timeout=300)
    return t_first, (first + out).decode(), err.decode(), p.returncode


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scen_clock():
    model = os.path.join(FIX, "tiny-moe-sparse")
    t_first, out, err, rc = first_output_time(
        ["--model", model, "--prompt-ids", "400,3,77,1,0,12,5,6,9,100", "--max-new", "40",
         "--temperature", "0", "--ignore-eos", "--stats"])
    st = stats_line(err)
    check(rc == 0 and st is not None, "--stats line parses (%s)" % err.strip()[-300:])
    if st:
        check(st["startup"] is not None and 0 < st["startup"] <= st["load"],
              "load %.3f s includes the start-up before main (%s s)" % (st["load"], st["startup"]))
        # the process was created after t0, so load + prefill <= t_first (+ one 10 ms tick);
        # and the first token follows them by about one step, not by the start-up
        step = st["generate_s"] / max(st["n_out"], 1)
        lag = t_first - st["load"] - st["prefill_s"]
        check(-0.02 <= lag <= 0.25 + 5 * step,
              "load + prefill (%.3f s) reach the first token's arrival (%.3f s after spawn)"
              % (st["load"] + st["prefill_s"], t_first))
        check(re.fullmatch(r"[0-9.]+ tok/s", st["prefill_rate"]) is not None,
              "a 10-token prefill has a rate (%s)" % st["prefill_rate"])
    r = run("--model", model, "--prompt-ids", "400", "--max-new", "4", "--temperature", "0",
            "--ignore-eos", "--stats")
    st = stats_line(r.stderr)
    check(r.returncode == 0 and st is not None and st["n_prompt"] == 1
          and st["prefill_rate"] == "n/a",
          "a one-token prefill (no forward) has no rate: %s" % (st and st["prefill_rate"]))
    # cluster: no node joins; the wait is reported apart and is not in load
    state = os.path.join(WORK, "state")
    os.makedirs(state, mode=0o700, exist_ok=True)
    os.chmod(state, 0o700)
    r = run("--model", model, "--prompt-ids", "1,2,3", "--max-new", "4", "--temperature", "0",
            "--cluster", "--cluster-bind", "127.0.0.1", "--cluster-port", str(free_port()),
            "--state-dir", state, "--cluster-wait", "2", "--stats")
    st = stats_line(r.stderr)
    check(r.returncode == 0 and st is not None and st["waited"] is not None
          and st["nodes"] == 0 and 1.9 <= st["waited"] <= 3.0,
          "--cluster: 'waited ~2 s for 0 nodes' reported apart (%s)"
          % (r.stderr.strip().splitlines()[-2:] if r.stderr.strip() else ""))
    if st and st["waited"] is not None:
        check(st["load"] + st["waited"] <= r.wall + 0.05,
              "--cluster: load %.3f s leaves out the wait %.3f s (process ran %.3f s)"
              % (st["load"], st["waited"], r.wall))


# ---- seed ----------------------------------------------------------------------------------


def scen_seed():
    model = os.path.join(FIX, "tiny-moe-tied")
    samp = ["--model", model, "--prompt-ids", "1,2,3", "--max-new", "24", "--temperature", "0.9",
            "--top-p", "0.95", "--top-k", "50", "--ignore-eos", "--stats"]
    runs = [run(*samp) for _ in range(3)]
    seeds = [seed_of(r.stderr) for r in runs]
    ids = [r.stdout.split() for r in runs]
    check(all(r.returncode == 0 for r in runs) and None not in seeds,
          "--stats prints the seed of a sampling run (%s)" % seeds)
    check(len(set(seeds)) == 3, "without --seed each run draws another seed")
    check(len({" ".join(i) for i in ids}) >= 2,
          "without --seed the sampled ids differ from run to run")
    if seeds[0] is not None:
        again = run(*samp, "--seed", str(seeds[0]))
        check(again.returncode == 0 and again.stdout.split() == ids[0]
              and seed_of(again.stderr) == seeds[0],
              "--seed %d (the printed seed) repeats that run's ids" % seeds[0])
    r = run("--model", model, "--prompt-ids", "1,2,3", "--max-new", "4", "--temperature", "0",
            "--stats")
    check(r.returncode == 0 and "sampling:" not in r.stderr, "a greedy run prints no seed")
    if all(os.path.exists(os.path.join(MODELS, m, "config.json")) for m in ("demo-moe",)):
        r = run("--prompt-ids", "785,12801", "--max-new", "4", "--no-draft", "--stats")
        check(r.returncode == 0
              and "sampling: temperature 0.6, top-k 20, top-p 0.95, seed " in r.stderr,
              "the demo model samples as its generation_config asks, with a printed seed")


# ---- progress ------------------------------------------------------------------------------

def long_args():
    """A prefill of the demo target computing every position's logits one row at a time:
    seconds (its 151936-row lm_head per position), so the bar's one-second delay passes."""
    ids = ",".join(str(100 + i) for i in range(500))
    return ["--model", os.path.join(MODELS, "demo-moe"), "--prompt-ids", ids, "--max-new", "2",
            "--temperature", "0", "--no-draft", "--chunk", "1", "--threads", "1",
            "--logits-out", "/dev/null", "--stats"]


BAR = re.compile(r"\rprefill \[[#.]+\] +\d+%  \d+/\d+ tokens  ETA (\d+:\d\d|--:--)")


def run_pty_stderr(args, env):
    """Run with stderr on a pseudo-terminal, stdout on a pipe: (rc, stdout, stderr bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([EXE, "run", *args], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    got = b""
    while True:
        rd, _, _ = select.select([master], [], [], 300)
        if not rd:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        got += chunk
    out = p.stdout.read().decode()
    p.wait(timeout=300)
    os.close(master)
    return p.returncode, out, got.decode(errors="replace")


def scen_progress():
    need_demo()
    args = long_args()
    r = run(*args, env=env_without("DF_PROGRESS", DF_PROGRESS="1"))
    st = stats_line(r.stderr)
    bars = BAR.findall(r.stderr)
    check(r.returncode == 0 and st is not None and st["prefill_s"] > 1.0,
          "the long prefill runs over a second (%s s)" % (st and st["prefill_s"]))
    check(len(bars) >= 1, "DF_PROGRESS=1, stderr a pipe: the prefill bar with ETA on stderr "
          "(%d draws)" % len(bars))
    check(re.search(r"\rprefill \[[^\r\n]*\r +\rload ", r.stderr) is not None,
          "the last bar is cleared (carriage return, blanks, carriage return) before the figures")
    check("\r" not in r.stdout and "prefill" not in r.stdout and len(r.stdout.split()) == 2,
          "nothing of the bar on stdout (%r)" % r.stdout[:80])
    r = run(*args, env=env_without("DF_PROGRESS"))
    check(r.returncode == 0 and "\r" not in r.stderr and "prefill [" not in r.stderr,
          "stderr a pipe, no DF_PROGRESS: no bar (%r)" % r.stderr[:120])
    rc, out, err = run_pty_stderr(args, env_without("DF_PROGRESS"))
    check(rc == 0 and len(BAR.findall(err)) >= 1 and "\r" not in out and len(out.split()) == 2,
          "stderr a terminal: the bar appears there, stdout holds only the ids")
    r = run("--model", os.path.join(FIX, "tiny-moe-sparse"), "--prompt-ids", "1,2,3",
            "--max-new", "4", "--temperature", "0", env=env_without("DF_PROGRESS", DF_PROGRESS="1"))
    check(r.returncode == 0 and r.stderr == "",
          "DF_PROGRESS=1 and a run under a second: no bar (%r)" % r.stderr[:120])


# ---- build ---------------------------------------------------------------------------------


def scen_build():
    script = os.path.join(SRC, "tools", "build-quiet.sh")
    for name, body in (("good", "int main(void) { return 0; }\n"),
                       ("bad", "int main(void) { return syntax error here }\n")):
        src = os.path.join(WORK, name + "-src")
        bld = os.path.join(WORK, name + "-build")
        for d in (src, bld):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.16)\nproject(q C)\n"
                    "foreach(i RANGE 1 10)\n  add_executable(p${i} main.c)\nendforeach()\n")
        with open(os.path.join(src, "main.c"), "w") as f:
            f.write(body)
        r = subprocess.run([script, bld, "2", src], capture_output=True, text=True, timeout=600)
        log = os.path.join(bld, "build.log")
        log_text = open(log).read() if os.path.exists(log) else ""
        if name == "good":
            check(r.returncode == 0 and r.stdout.count("\n") == 1 and r.stderr == ""
                  and log in r.stdout,
                  "a build that succeeds: one line naming the log (%r)"
                  % (r.stdout + r.stderr)[:300])
            check(log_text.count("Linking C executable") == 10,
                  "its compiler output is in the log, not on the terminal")
        else:
            check(r.returncode == 1 and r.stdout.count("\n") == 1 and r.stderr.count("\n") == 1
                  and "FAILED" in r.stderr and "error" in r.stderr and log in r.stderr,
                  "a build that fails: exit 1 and one line with the first error and the log "
                  "(%r)" % r.stderr[:300])


def main():
    os.makedirs(WORK, exist_ok=True)
    {"quiet": scen_quiet, "clock": scen_clock, "seed": scen_seed, "progress": scen_progress,
     "build": scen_build}[SCEN]()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
