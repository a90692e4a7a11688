#!/usr/bin/env python3
"""tests/device_cli.py — `deltafin run --device` end to end on a machine without a GPU:
greedy ids of the torch compute path (torch-cpu) equal the CPU path's on the fixtures; cuda
and auto fall back to the CPU with one line and the CPU's ids where libtorch has no CUDA (on
a GPU machine they print the placement line instead and must give the same ids); a bad
value is a usage error.

usage: device_cli.py DELTAFIN FIXTURES_DIR
"""
import subprocess
import sys


def run(exe, model, device, ids="1,2,3,4,5,6,7", n=16):
    args = [exe, "run", "--model", model, "--prompt-ids", ids, "--max-new", str(n)]
    if device is not None:
        args += ["--device", device]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def main():
    exe, fx = sys.argv[1], sys.argv[2]
    failures = 0
    for name in ("tiny-moe-sparse", "tiny-moe-tied", "tiny-dense"):
        model = f"{fx}/{name}"
        rc, ref, err = run(exe, model, None)
        assert rc == 0 and ref, (name, rc, err)
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
    ok = rc == 2 and "expected cpu, cuda, cuda:N, auto or torch-cpu" in err
    print(f"{'ok' if ok else 'FAIL'} bad --device value: rc {rc}: {err}")
    failures += not ok
    print(f"{16 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
