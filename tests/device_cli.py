#!/usr/bin/env python3
"""tests/device_cli.py — `deltafin run --device` end to end on a machine without a GPU:
greedy ids of the torch compute path (torch-cpu) equal the CPU path's on the fixtures; cuda
and auto fall back to the CPU with one line and the CPU's ids where libtorch has no CUDA (on
a GPU machine they print the placement line instead and must give the same ids); a bad
value is a usage error. A --device run stores expert heat in a state directory: every run
here gets a temporary one (--state-dir), never the user's ~/.local/state/deltafin.

usage: device_cli.py DELTAFIN FIXTURES_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

STATE = None  # the state directory of runs given none (main makes it, and removes it)


def run(exe, model, device, ids="1,2,3,4,5,6,7", n=16, extra=()):
    args = [exe, "run", "--model", model, "--prompt-ids", ids, "--max-new", str(n), *extra]
    if "--state-dir" not in extra:
        args += ["--state-dir", STATE]
    if device is not None:
        args += ["--device", device]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def read_heat(state):
    d = os.path.join(state, "heat")  # KEY.u64 beside the .lock of the heat file's updates
    files = [f for f in os.listdir(d) if f.endswith(".u64")] if os.path.isdir(d) else []
    if len(files) != 1:
        return None
    b = open(os.path.join(d, files[0]), "rb").read()
    if b[:8] != b"DFHEAT1\0":
        return None
    n = struct.unpack("<Q", b[8:16])[0]
    if len(b) != 16 + 8 * n:
        return None
    return list(struct.unpack("<%dQ" % n, b[16:]))


def heat(exe, model):
    """A --device run stores its routing counts (STATE/heat/*.u64), the next one adds to them;
    a plain CPU run writes nothing."""
    cfg = json.load(open(os.path.join(model, "config.json")))
    L, E, k = cfg["num_hidden_layers"], cfg["num_experts"], cfg["num_experts_per_tok"]
    state = os.path.join(os.environ.get("TMPDIR", "/tmp"), "df-device-cli-%d" % os.getpid())
    shutil.rmtree(state, ignore_errors=True)
    run(exe, model, None, extra=("--state-dir", state))
    none = read_heat(state) is None
    rc1, out1, _ = run(exe, model, "torch-cpu", extra=("--state-dir", state))
    h1 = read_heat(state)
    rc2, out2, _ = run(exe, model, "torch-cpu", extra=("--state-dir", state))
    h2 = read_heat(state)
    shutil.rmtree(state, ignore_errors=True)
    ok = (none and rc1 == 0 and rc2 == 0 and out1 == out2 and h1 is not None and
          h2 is not None and len(h1) == L * E and sum(h1) > 0 and sum(h1) % k == 0 and
          h2 == [2 * x for x in h1])
    if ok:  # per MoE layer the same number of routed pairs
        per = {sum(h1[l * E:(l + 1) * E]) for l in range(L)} - {0}
        ok = len(per) == 1
    print(f"{'ok' if ok else 'FAIL'} heat file: cpu run writes none {none}; "
          f"{L}x{E} counts, sum {sum(h1) if h1 else None}, doubled after a second run")
    return 0 if ok else 1


def cluster_standby(exe, model, ref):
    """--cluster with every routed expert admitted to the coordinator's device: one line says
    the nodes stand by; ids equal the CPU path's (ref: its output, run's defaults)."""
    import socket
    import tempfile
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    state = tempfile.mkdtemp(prefix="df-standby-")
    try:
        rc, out, err = run(exe, model, "torch-cpu", extra=(
            "--cluster", "--cluster-wait", "0", "--cluster-bind", "127.0.0.1", "--cluster-port",
            str(port), "--state-dir", state))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    lines = [l for l in err.splitlines() if "stand by" in l]
    ok = (rc == 0 and out == ref and len(lines) == 1 and
          "all 16 routed experts are on this machine's torch-cpu" in lines[0])
    print(f"{'ok' if ok else 'FAIL'} --cluster with every expert on the device: {lines}")
    return 0 if ok else 1


def main():
    global STATE
    STATE = tempfile.mkdtemp(prefix="df-device-cli-state-")
    try:
        return checks()
    finally:
        shutil.rmtree(STATE, ignore_errors=True)


def checks():
    exe, fx = sys.argv[1], sys.argv[2]
    failures = 0
    refs = {}
    for name in ("tiny-moe-sparse", "tiny-moe-tied", "tiny-dense", "tiny-ds-fp8"):
        model = f"{fx}/{name}"
        rc, ref, err = run(exe, model, None)
        assert rc == 0 and ref, (name, rc, err)
        refs[name] = ref
        for dev in ("cpu", "torch-cpu", "cuda", "cuda:3", "auto"):
            rc, out, err = run(exe, model, dev)
            lines = [l for l in err.splitlines() if l.startswith("deltafin: device:")]
            ok = rc == 0 and out == ref
            if dev == "cpu":
                ok = ok and not lines
            elif dev == "torch-cpu":
                ok = ok and len(lines) == 1 and "torch-cpu" in lines[0]
            else:  # no CUDA here: the fallback line; on a GPU machine: the placement line
                ok = ok and len(lines) == 1 and ("running on the CPU" in lines[0] or
                                                 "experts on the device" in lines[0])
            print(f"{'ok' if ok else 'FAIL'} {name} --device {dev}: {out[:40]}... {lines}")
            failures += not ok
    rc, out, err = run(exe, f"{fx}/tiny-moe-sparse", "gpu0")
    ok = rc == 2 and "expected cpu, cuda, cuda:N with N from 0 to 63, auto or torch-cpu" in err
    print(f"{'ok' if ok else 'FAIL'} bad --device value: rc {rc}: {err}")
    failures += not ok
    failures += heat(exe, f"{fx}/tiny-moe-sparse")
    failures += cluster_standby(exe, f"{fx}/tiny-moe-sparse", refs["tiny-moe-sparse"])
    print(f"{23 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
