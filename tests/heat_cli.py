#!/usr/bin/env python3
"""tests/heat_cli.py — the expert heat file (STATE/heat/<key>.u64,
coordinator/cluster/expert_heat.h) through the CLI.

files: an empty --state-dir is a usage error (exit 2, naming the flag) for run, serve,
  cluster and df-node (one parser each for all their subcommands), and nothing appears at
  /heat; a FIFO in place of the heat file never blocks `run --device cuda` or
  `serve --device auto`
  (one line naming the path and "not a regular file"; the FIFO stays); corrupt heat files
  (truncated, garbage, another pair count) give exactly one line naming the file and the
  fault, the ids are unchanged, and the file then holds this run's counts; an unusable one
  (symlink loop) gives one line and is left as it is. The full tables of malformed files are
  test_expert_heat's.
concurrent: 8 `deltafin run --device torch-cpu` at once on one state directory: the stored
  counts are exactly 8 x prompt tokens x MoE layers x top-k (per layer, from config.json).

usage: heat_cli.py files|concurrent DELTAFIN DF_NODE MODEL_DIR
"""
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import check, failures  # noqa: E402

IDS = "1,2,3"


def heat_path(state, model):
    h = 1469598103934665603  # FNV-1a 64 of the model folder's real path
    for b in os.path.realpath(model).encode():
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(state, "heat", "%016x.u64" % h)


def read_heat(path):
    """The counts of a well-formed heat file, else None."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        b = open(path, "rb").read()
    except OSError:
        return None
    if len(b) < 16 or b[:8] != b"DFHEAT1\0":
        return None
    n = struct.unpack("<Q", b[8:16])[0]
    if len(b) != 16 + 8 * n:
        return None
    return list(struct.unpack("<%dQ" % n, b[16:]))


def moe_shape(model):
    """(layers, experts, top-k, indices of the MoE layers) of a qwen3_moe config."""
    c = json.load(open(os.path.join(model, "config.json")))
    L, E, k = c["num_hidden_layers"], c["num_experts"], c["num_experts_per_tok"]
    step, dense = c.get("decoder_sparse_step", 1) or 1, set(c.get("mlp_only_layers") or [])
    moe = [l for l in range(L) if l not in dense and E > 0 and (l + 1) % step == 0]
    return L, E, k, moe


def run_args(exe, model, state, device="torch-cpu"):
    return [exe, "run", "--model", model, "--prompt-ids", IDS, "--max-new", "1",
            "--temperature", "0", "--no-draft", "--threads", "1", "--device", device,
            "--state-dir", state]


def run(args, timeout=30):
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout.strip(), p.stderr
    except subprocess.TimeoutExpired as e:
        return "timeout", "", (e.stderr or b"").decode("utf-8", "replace")


def empty_state_dir(exe, node, model):
    root_heat = os.path.exists("/heat")
    cmds = {
        "run": [exe, "run", "--model", model, "--prompt-ids", IDS, "--max-new", "1",
                "--device", "torch-cpu", "--state-dir", ""],
        "run --state-dir=": [exe, "run", "--model", model, "--prompt-ids", IDS, "--max-new", "1",
                             "--device", "torch-cpu", "--state-dir="],
        "serve": [exe, "serve", "--model", model, "--port", "0", "--device", "auto",
                  "--state-dir", ""],
        "cluster token": [exe, "cluster", "token", "--state-dir", ""],
        "df-node join": [node, "join", "127.0.0.1:9", "--token", "x", "--state-dir", ""],
    }  # (each command parses the option once for all its subcommands; every start loads
    #    libtorch, about a second here)
    for what, args in cmds.items():
        rc, _, err = run(args, timeout=15)
        check(rc == 2 and "--state-dir: expected a folder path, got ''" in err,
              f"{what} --state-dir '': exit {rc}, {err.strip()[:100]!r}")
    check(root_heat or not os.path.exists("/heat"), "nothing written at /heat")


def fifo(exe, model, work):
    state = os.path.join(work, "fifo")
    path = heat_path(state, model)
    os.makedirs(os.path.dirname(path))
    os.mkfifo(path)
    for dev in ("cuda",):  # the torch path's CPU fallback where libtorch has no CUDA
        t0 = time.time()
        rc, out, err = run(run_args(exe, model, state, dev), timeout=30)
        lines = [l for l in err.splitlines() if path in l]
        check(rc == 0 and out and len(lines) == 1 and "not a regular file" in lines[0] and
              stat.S_ISFIFO(os.lstat(path).st_mode),
              f"run --device {dev} with a FIFO heat file: exit {rc} in {time.time() - t0:.1f} s, "
              f"lines {lines}")
    # serve --device auto: listens, shuts down on SIGTERM, one line, the FIFO stays
    p = subprocess.Popen([exe, "serve", "--model", model, "--port", "0", "--device", "auto",
                          "--no-draft", "--threads", "1", "--state-dir", state],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log, listening = [], False
    deadline = time.time() + 30
    os.set_blocking(p.stderr.fileno(), False)
    buf = b""
    while time.time() < deadline and not listening and p.poll() is None:
        chunk = p.stderr.read()
        if chunk:
            buf += chunk
            listening = b"listening on" in buf
        else:
            time.sleep(0.05)
    if p.poll() is None:
        p.send_signal(signal.SIGTERM if listening else signal.SIGKILL)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    os.set_blocking(p.stderr.fileno(), True)
    buf += p.stderr.read()
    log = buf.decode("utf-8", "replace").splitlines()
    lines = [l for l in log if path in l]
    check(listening and p.returncode == 0 and len(lines) == 1 and
          "not a regular file" in lines[0] and stat.S_ISFIFO(os.lstat(path).st_mode),
          f"serve --device auto with a FIFO heat file: listening {listening}, exit "
          f"{p.returncode}, lines {lines}")


def bad_files(exe, model, work):
    L, E, k, moe = moe_shape(model)
    n = L * E
    per_run = len(IDS.split(",")) * len(moe) * k
    good = struct.pack("<%dQ" % n, *range(1, n + 1))
    hdr = b"DFHEAT1\0" + struct.pack("<Q", n)
    corrupt = [
        ("truncated", hdr + good[:100], "expected %d bytes for %d counts, found %d"
         % (16 + 8 * n, n, 116)),
        ("garbage", b"\x00garbage" * 40, "not a heat file (no DFHEAT1 header)"),
        ("another pair count", b"DFHEAT1\0" + struct.pack("<Q", 5) + good[:40],
         "holds 5 counts, the model has %d" % n),
    ]
    state = os.path.join(work, "bad")
    path = heat_path(state, model)
    rc, ref, err = run(run_args(exe, model, state))
    check(rc == 0 and ref and path not in err, f"first run, no heat file yet: exit {rc}, {ref}")
    hmode = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
    check(hmode == 0o700, f"STATE/heat is created mode 700, as the state directory: {hmode:03o}")
    for what, data, expect in corrupt:
        open(path, "wb").write(data)
        rc, out, err = run(run_args(exe, model, state))
        lines = [l for l in err.splitlines() if "heat" in l]
        h = read_heat(path)
        check(rc == 0 and out == ref and len(lines) == 1 and path in lines[0] and
              expect in lines[0] and h is not None and len(h) == n and sum(h) == per_run,
              f"{what}: exit {rc}, ids {'equal' if out == ref else out}, lines {lines}, "
              f"then {sum(h) if h else None} counts (this run's: {per_run})")
    # (trailing junk, an absurd count, a folder, ...: test_expert_heat's tables)
    for what, make in (("symlink loop", lambda: os.symlink(path, path)),):
        os.unlink(path)
        make()
        before = os.lstat(path)
        rc, out, err = run(run_args(exe, model, state))
        lines = [l for l in err.splitlines() if "heat" in l]
        after = os.lstat(path)
        check(rc == 0 and out == ref and len(lines) == 1 and path in lines[0] and
              "left as it is" in lines[0] and before.st_mode == after.st_mode and
              before.st_ino == after.st_ino,
              f"{what}: exit {rc}, lines {lines}, left in place {before.st_ino == after.st_ino}")


def concurrent(exe, model, work):
    L, E, k, moe = moe_shape(model)
    n_prompt = len(IDS.split(","))
    procs = 8
    state = os.path.join(work, "conc")
    t0 = time.time()
    ps = [subprocess.Popen(run_args(exe, model, state), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for _ in range(procs)]
    res = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in ps]
    for p in ps:
        p.stdout.close()
        p.stderr.close()
    secs = time.time() - t0
    ok_runs = all(rc == 0 and "heat" not in err for rc, _, err in res)
    check(ok_runs, f"{procs} concurrent runs all exit 0 with no heat message "
          f"({[rc for rc, _, _ in res]}, {secs:.1f} s)")
    h = read_heat(heat_path(state, model))
    want = procs * n_prompt * len(moe) * k
    check(h is not None and sum(h) == want,
          f"total {sum(h) if h else None}, expected {procs} runs x {n_prompt} tokens x "
          f"{len(moe)} MoE layers x top-{k} = {want}")
    if h is not None:
        per_layer = [sum(h[l * E:(l + 1) * E]) for l in range(L)]
        check(per_layer == [procs * n_prompt * k if l in moe else 0 for l in range(L)],
              f"per layer {per_layer}")
    left = sorted(os.listdir(os.path.join(state, "heat")))
    check(not [f for f in left if ".tmp." in f], f"no temporary files left: {left}")


def main():
    mode, exe, node, model = sys.argv[1:5]
    work = tempfile.mkdtemp(prefix="df-heat-cli-")
    try:
        if mode == "files":
            empty_state_dir(exe, node, model)
            fifo(exe, model, work)
            bad_files(exe, model, work)
        elif mode == "concurrent":
            concurrent(exe, model, work)
        else:
            sys.exit(__doc__)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
