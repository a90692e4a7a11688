#!/usr/bin/env python3
"""tools/gpu/check.py — the GPU checks that `deltafin` itself can run, CPU side by side with
the device, each writing one JSON file under OUT. Called by tools/gpu/check.sh; standard
library only (the deltafin and df-node binaries do the work).

  check.py demo    BUILD OUT   greedy ids of the demo target on --device cpu and cuda, and
                               the reference's ids (tests/fixtures/demo_models_greedy.json);
                               max |logit(cuda) - logit(cpu)| over every prompt position
  check.py cluster BUILD OUT   a cluster of one GPU node (df-node --device cuda) and one CPU
                               node serving a random checkpoint's experts: ids equal local
  check.py bench   BUILD OUT   decode and prefill tok/s on cuda vs cpu, widened demo target
                               (tools/widen, as docs/PERFORMANCE.md) or, without the demo
                               pair, the random 'bench2g' checkpoint

Every result says "ok", "fail" or "pending" (with why) and the command lines that made it.
Runs keep their state (expert heat, cluster keys and tokens) under BUILD/gpu-check/, never in
~/.local/state.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
DEMO = os.path.join(ROOT, "models", "demo-moe")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "demo_models_greedy.json")
# the device under test; torch-cpu runs the same torch compute path on a machine without GPU
DEV = os.environ.get("DF_GPU_DEVICE", "cuda")


def log(*a):
    print("[check.py]", *a, file=sys.stderr, flush=True)


def run(cmd, timeout=600, **kw):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    return p, time.time() - t


def deltafin(build):
    return os.path.join(build, "coordinator", "deltafin")


def read_f32(path):
    with open(path, "rb") as f:
        b = f.read()
    return struct.unpack("<%df" % (len(b) // 4), b)


def device_line(stderr):
    return [l for l in stderr.splitlines() if l.startswith("deltafin: device:")]


def write(out, name, obj):
    with open(os.path.join(out, name), "w") as f:
        json.dump(obj, f, indent=1)
    log(name, obj.get("status"), obj.get("why", ""))


def scratch(build, name):
    """A work folder under BUILD/gpu-check (big files stay out of OUT)."""
    d = os.path.join(build, "gpu-check", name)
    os.makedirs(d, exist_ok=True)
    return d


def demo(build, out):
    res = {"check": "demo pair greedy ids, cpu vs %s vs reference" % DEV, "device": DEV,
           "commands": []}
    if not os.path.exists(os.path.join(DEMO, "model.safetensors")) or not os.path.exists(FIXTURE):
        res.update(status="pending", why="models/demo-moe or the fixture is not on this machine")
        return write(out, "demo.json", res)
    fx = json.load(open(FIXTURE))
    n = fx["max_new"]
    refs = fx.get("models", {}).get("demo-moe", [])
    res["prompts"] = []
    worst = 0.0
    ok = True
    for i, pr in enumerate(fx["prompts"]):
        ids = ",".join(str(t) for t in pr["ids"])
        row = {"doc": pr.get("doc")}
        for dev in ("cpu", DEV):
            lo = os.path.join(scratch(build, "demo"), "%d-%s.f32" % (i, dev))
            cmd = [deltafin(build), "run", "--model", DEMO, "--prompt-ids", ids, "--max-new",
                   str(n), "--temperature", "0", "--ignore-eos", "--no-draft", "--device", dev,
                   "--logits-out", lo, "--state-dir", scratch(build, "state")]
            p, dt = run(cmd)
            if i == 0:
                res["commands"].append(" ".join(cmd))
            row[dev] = [int(t) for t in p.stdout.split()] if p.returncode == 0 else None
            row[dev + "_s"] = round(dt, 2)
            if dev == DEV:
                row["device_line"] = device_line(p.stderr)
            if p.returncode != 0:
                row[dev + "_error"] = p.stderr[-300:]
        ref = refs[i] if i < len(refs) else None
        row["reference"] = ref
        if row["cpu"] is not None and row[DEV] is not None:
            a = read_f32(os.path.join(scratch(build, "demo"), "%d-cpu.f32" % i))
            b = read_f32(os.path.join(scratch(build, "demo"), "%d-%s.f32" % (i, DEV)))
            d = max(abs(x - y) for x, y in zip(a, b))
            row["max_abs_dlogit_prompt"] = d
            worst = max(worst, d)
        row["device_equals_cpu"] = row[DEV] is not None and row[DEV] == row["cpu"]
        row["cpu_equals_reference"] = ref is None or row["cpu"] == ref[:len(row["cpu"] or [])]
        ok = ok and row["device_equals_cpu"]
        res["prompts"].append(row)
    res["max_abs_dlogit_prompt"] = worst
    # the device must reproduce the CPU path; the CPU path's agreement with the reference is
    # test_demo_models' business (reported here, a stale fixture does not fail this check)
    res["cpu_equals_reference_all"] = all(r["cpu_equals_reference"] for r in res["prompts"])
    res["status"] = "ok" if ok else "fail"
    write(out, "demo.json", res)


def cluster(build, out):
    res = {"check": "cluster: one GPU df-node + one CPU df-node vs local", "commands": []}
    work = scratch(build, "cluster")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "model")
    mk = [PY, os.path.join(ROOT, "tests", "reference", "make_checkpoint.py"), "--preset",
          "rss200m", "--out", model]
    p, _ = run(mk, timeout=900)
    res["commands"].append(" ".join(mk))
    if p.returncode != 0:
        res.update(status="fail", why="make_checkpoint: " + p.stderr[-300:])
        return write(out, "cluster.json", res)
    df, node = deltafin(build), os.path.join(build, "node", "df-node")
    state = os.path.join(work, "state")
    prompt = "1,2,3,4,5,6,7,8"
    base = [df, "run", "--model", model, "--prompt-ids", prompt, "--max-new", "24",
            "--temperature", "0", "--ignore-eos", "--no-draft"]
    p, _ = run(base)
    local = p.stdout.split()
    tok = run([df, "cluster", "token", "--state-dir", state, "--reusable"])[0].stdout.strip()
    port = 7391
    coord_cmd = base + ["--cluster", "--cluster-bind", "127.0.0.1", "--cluster-port", str(port),
                        "--state-dir", state, "--cluster-nodes", "2", "--cluster-wait", "120",
                        "--stats"]
    res["commands"].append(" ".join(coord_cmd))
    procs = []
    try:
        co = subprocess.Popen(coord_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(co)
        time.sleep(1.0)
        for name, dev in (("gpu", DEV), ("cpu", "cpu")):
            cmd = [node, "join", "127.0.0.1:%d" % port, "--state-dir", os.path.join(work, name),
                   "--memory", "1G", "--name", name, "--token", tok, "--model-dir", model,
                   "--device", dev]
            res["commands"].append(" ".join(cmd))
            procs.append(subprocess.Popen(cmd, stdout=open(os.path.join(work, name + ".log"), "w"),
                                          stderr=subprocess.STDOUT))
        so, se = co.communicate(timeout=300)
        res["ids_local"], res["ids_cluster"] = local, so.split()
        res["coordinator_stderr"] = se[-1500:]
        for name in ("gpu", "cpu"):
            res[name + "_node_log"] = open(os.path.join(work, name + ".log")).read()[-1500:]
        ok = co.returncode == 0 and res["ids_cluster"] == local and local
        res["status"] = "ok" if ok else "fail"
        if "--device" in res.get("gpu_node_log", "") and "unknown" in res["gpu_node_log"]:
            res.update(status="pending", why="this df-node has no --device option")
    except subprocess.TimeoutExpired:
        res.update(status="fail", why="coordinator did not finish in 300 s")
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.terminate()
    write(out, "cluster.json", res)


def bench(build, out):
    res = {"check": "decode / prefill tok/s, %s vs cpu" % DEV, "commands": []}
    ck = os.path.join(scratch(build, "bench"), "model")
    if os.path.exists(os.path.join(DEMO, "model.safetensors")):
        cmd = [PY, os.path.join(ROOT, "tools", "widen", "widen.py"), "--src", DEMO, "--out", ck,
               "--hidden-ratio", "16", "--moe-inter", "512", "--extra-layers", "4"]
        res["model"] = "widened demo target (docs/PERFORMANCE.md)"
    else:
        cmd = [PY, os.path.join(ROOT, "tests", "reference", "make_checkpoint.py"), "--preset",
               "bench2g", "--out", ck]
        res["model"] = "random bench2g (L, 1.9 GB): the demo pair is not on this machine"
    if not os.path.exists(os.path.join(ck, "config.json")):
        p, dt = run(cmd, timeout=1200)
        res["commands"].append(" ".join(cmd))
        if p.returncode != 0:
            res.update(status="fail", why=p.stderr[-300:])
            return write(out, "bench.json", res)
    prompt = ",".join(str(i) for i in range(1, 129))
    for dev in ("cpu", DEV):
        cmd = [deltafin(build), "run", "--model", ck, "--prompt-ids", prompt, "--max-new", "64",
               "--temperature", "0", "--ignore-eos", "--no-draft", "--stats", "--device", dev,
               "--state-dir", scratch(build, "state")]
        res["commands"].append(" ".join(cmd))
        p, dt = run(cmd, timeout=900)
        res[dev] = {"rc": p.returncode, "stats": [l for l in p.stderr.splitlines() if "tok/s" in l],
                    "device_line": device_line(p.stderr), "ids": p.stdout.split()[:16],
                    "wall_s": round(dt, 2)}
    res["device"] = DEV
    res["ids_equal_first16"] = res["cpu"]["ids"] == res[DEV]["ids"] and res["cpu"]["rc"] == 0
    res["status"] = "ok" if res[DEV]["rc"] == 0 and res["cpu"]["rc"] == 0 else "fail"
    write(out, "bench.json", res)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("demo", "cluster", "bench"):
        print(__doc__, file=sys.stderr)
        return 2
    what, build, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    globals()[what](os.path.abspath(build), os.path.abspath(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
