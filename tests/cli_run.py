#!/usr/bin/env python3
"""`deltafin run` / `deltafin inspect` end to end on a golden fixture: greedy ids equal the
reference's, --logits-out writes [n_prompt, vocab] fp32 equal to the golden logits within
the engine's tolerance, a seeded sampling run is reproducible, bad options give exit 2 with
a message naming the option, and inspect reports the checkpoint's byte counts.

usage: cli_run.py DELTAFIN FIXTURES_DIR WORK_DIR
"""
import json
import os
import stat
import struct
import subprocess
import sys
import threading

import numpy as np

TOL = 1e-3
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def st_bytes(model_dir):
    """(total, expert) tensor bytes from the safetensors headers."""
    total = expert = 0
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, fn), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            h = json.loads(f.read(n))
        for name, t in h.items():
            if name == "__metadata__":
                continue
            b = t["data_offsets"][1] - t["data_offsets"][0]
            total += b
            if ".mlp.experts." in name:
                expert += b
    return total, expert


def check_logits_targets(exe, d, prompt, want, work):
    """--logits-out through a symlink replaces the link's target and keeps the link; a FIFO
    is written through (a reader gets the bytes) and stays a FIFO; a device that refuses
    the bytes (/dev/full) is an error naming it, and the device stays a device."""
    args = ["run", "--model", d, "--prompt-ids", prompt, "--max-new", "1", "--temperature", "0"]
    target, link = os.path.join(work, "target.f32"), os.path.join(work, "link.f32")
    for p in (target, link):
        if os.path.lexists(p):
            os.unlink(p)
    with open(target, "wb") as f:
        f.write(b"old")
    os.symlink(target, link)
    r = run(exe, *args, "--logits-out", link)
    check(r.returncode == 0 and os.path.islink(link) and open(target, "rb").read() == want,
          "--logits-out through a symlink: the target holds the logits, the link stays")
    fifo = os.path.join(work, "logits.fifo")
    if os.path.lexists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    r = run(exe, *args, "--logits-out", fifo)
    reader.join(timeout=60)
    check(r.returncode == 0 and got == [want] and stat.S_ISFIFO(os.lstat(fifo).st_mode),
          "--logits-out to a FIFO: written through, the FIFO stays")
    r = run(exe, *args, "--logits-out", fifo)  # nobody reads it now: an error, not a hang
    check(r.returncode == 1 and "a FIFO with no reader" in r.stderr,
          "--logits-out to a FIFO nobody reads: refused at once (%s)" % r.stderr.strip()[-80:])
    if os.path.exists("/dev/full"):
        r = run(exe, *args, "--logits-out", "/dev/full")
        check(r.returncode == 1 and "cannot write /dev/full: No space left on device" in r.stderr
              and stat.S_ISCHR(os.stat("/dev/full").st_mode),
              "--logits-out /dev/full: an error naming it, the device stays a device")


def main():
    exe, fixtures, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    for name in ("tiny-moe-sparse", "tiny-dense"):
        d = os.path.join(fixtures, name)
        g = json.load(open(os.path.join(d, "golden.json")))
        prompt = ",".join(map(str, g["prompt_ids"]))
        lpath = os.path.join(work, name + ".logits.f32")
        r = run(exe, "run", "--model", d, "--prompt-ids", prompt, "--max-new",
                str(len(g["greedy_ids"])), "--temperature", "0", "--ignore-eos",
                "--logits-out", lpath, "--stats")
        ids = [int(x) for x in r.stdout.split()]
        check(r.returncode == 0 and ids == g["greedy_ids"], "%s: greedy ids equal the reference's" % name)
        check("prefill" in r.stderr and "tok/s" in r.stderr and "ms/token" in r.stderr,
              "%s: --stats prints prefill/decode speed" % name)
        ours = np.fromfile(lpath, dtype="<f4")
        ref = np.fromfile(os.path.join(d, g["logits_file"]), dtype="<f4")
        check(ours.size == g["logits_shape"][0] * g["logits_shape"][1],
              "%s: --logits-out holds [n_prompt, vocab] floats" % name)
        check(ours.size == ref.size and float(np.abs(ours - ref).max()) <= TOL,
              "%s: --logits-out within %g of the golden logits" % (name, TOL))
        if name == "tiny-dense":
            check_logits_targets(exe, d, prompt, open(lpath, "rb").read(), work)
        total, expert = st_bytes(d)
        r = run(exe, "inspect", d)
        check(r.returncode == 0 and ("%12d bytes" % total) in r.stdout
              and ("%12d bytes" % expert) in r.stdout,
              "%s: inspect reports %d tensor bytes, %d expert bytes" % (name, total, expert))

    d = os.path.join(fixtures, "tiny-moe-tied")
    a = run(exe, "run", "--model", d, "--prompt-ids", "1,2,3", "--max-new", "24",
            "--temperature", "0.9", "--top-p", "0.95", "--top-k", "50", "--seed", "7", "--ignore-eos")
    b = run(exe, "run", "--model", d, "--prompt-ids", "1,2,3", "--max-new", "24",
            "--temperature", "0.9", "--top-p", "0.95", "--top-k", "50", "--seed", "7", "--ignore-eos")
    c = run(exe, "run", "--model", d, "--prompt-ids", "1,2,3", "--max-new", "24",
            "--temperature", "0.9", "--top-p", "0.95", "--top-k", "50", "--seed", "8", "--ignore-eos")
    check(a.returncode == 0 and a.stdout == b.stdout and len(a.stdout.split()) == 24,
          "sampling with a seed is reproducible")
    check(a.stdout != c.stdout, "another seed samples another continuation")

    bad = [
        (["--prompt-ids", "1,x,3"], "--prompt-ids: element 1"),
        (["--prompt-ids", "1,2", "--top-p", "1.5"], "--top-p: expected a number in"),
        (["--prompt-ids", "1,2", "--max-new", "-1"], "--max-new: expected an integer"),
        (["--prompt-ids", "1,2", "--bogus"], "unknown or incomplete option '--bogus'"),
        (["--prompt-ids", "1,99999"], "token id 99999 at index 1 out of range [0, 512)"),
    ]
    for args, msg in bad:
        r = run(exe, "run", "--model", d, *args)
        want_rc = 1 if "out of range" in msg else 2
        check(r.returncode == want_rc and msg in r.stderr,
              "bad input %s -> exit %d, '%s'" % (args, want_rc, msg))
    r = run(exe, "run", "--model", os.path.join(work, "does-not-exist"), "--prompt-ids", "1")
    check(r.returncode == 1 and "does-not-exist" in r.stderr and "config.json" in r.stderr,
          "missing model folder names the folder and config.json")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
