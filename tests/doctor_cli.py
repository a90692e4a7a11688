#!/usr/bin/env python3
"""`deltafin doctor`, `deltafin inspect --json` and `deltafin cluster status [--json]` end to
end, on the bundled demo model (models/demo-moe) and the tiny-moe-sparse fixture.

usage: doctor_cli.py SCENARIO DELTAFIN MODELS_DIR FIXTURES_DIR WORK_DIR
SCENARIO:
  doctor    a good setup (demo model, a state directory from `cluster init`): every check's
            line OK (isa: the level this CPU has per /proc/cpuinfo), exit 0, and --json
            carries the same checks; DF_ISA=scalar on a vector CPU: isa WARN, exit 1; a 0644
            coordinator.key: state-dir FAIL naming the file and `chmod 600` it, exit 2; a 0644
            tokens file: WARN, exit 1; a --model folder that does not exist: model FAIL naming
            it, exit 2; a folder whose pull manifest gives a wrong size: model FAIL naming the
            file; one without tokenizer.json: model FAIL naming it, exit 2; a df-node state
            directory whose coordinator address refuses: cluster WARN naming HOST:PORT, exit
            1; one recording tcp://HOST:PORT that listens: cluster OK; one that recorded only
            the key (to find the coordinator
            by discovery) with no avahi-daemon reachable: cluster WARN, discovery OK saying
            it is unavailable
  inspect   inspect --json has the numbers the text output prints for models/demo-moe, and
            the checkpoint's byte counts from its safetensors header
  cluster   cluster status on an empty state directory (not running, no nodes, the
            allow-listed key), on a status file of a coordinator gone (its node offline in
            --json as in the text), with a running `serve --quiet --cluster` (running, its
            pid, "serve"; doctor reaches its port; no cluster progress lines) and after it stopped, and after a `run --cluster` (its
            pid, "run")
Exit 77 (skipped) when the demo model is not there.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

SCEN, DELTAFIN, MODELS, FIX, WORK = sys.argv[1:6]
DEMO = os.path.join(MODELS, "demo-moe")
CHECKS = ["isa", "libraries", "cuda", "model", "memory", "disk", "state-dir", "cluster",
          "discovery"]
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.pop("DF_ISA", None)
    e.update(env or {})
    return subprocess.run([DELTAFIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=e)


def lines(out):
    """{check: (status, finding, fix)} from doctor's text output, and the order of checks."""
    got, order, last = {}, [], None
    for ln in out.splitlines():
        m = re.match(r"^(OK|WARN|FAIL) +([a-z-]+): (.*)$", ln)
        if m:
            last = m.group(2)
            got[last] = [m.group(1), m.group(3), None]
            order.append(last)
        elif ln.startswith("      fix: ") and last:
            got[last][2] = ln[len("      fix: "):]
    return got, order


def cpu_level():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("flags"):
                flags = set(ln.split(":", 1)[1].split())
                break
    if {"avx2", "fma"} <= flags:
        return "avx512" if {"avx512f", "avx512vl"} <= flags else "avx2"
    return "scalar"


def st_header(model_dir):
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def fmt_bytes(n):
    """coordinator/hub/pull_util.c df_pull_fmt_bytes."""
    units, v, u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], float(n), 0
    while v >= 1024 and u < 5:
        v, u = v / 1024, u + 1
    return "%d B" % n if u == 0 else "%.2f %s" % (v, units[u])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def init_state(name):
    """A coordinator state directory as `cluster init` + `cluster token` leave it."""
    d = fresh(name)
    r = run("cluster", "init", "--state-dir", d)
    assert r.returncode == 0, r.stderr
    fp = re.search(r"fingerprint ([0-9a-f]{16})", r.stdout).group(1)
    r = run("cluster", "token", "--state-dir", d)
    assert r.returncode == 0, r.stderr
    return d, fp


# ---------------------------------------------------------------------------------------


def scen_doctor():
    state, _ = init_state("state-good")
    r = run("doctor", "--model", DEMO, "--state-dir", state)
    got, order = lines(r.stdout)
    print(r.stdout)
    level = cpu_level()
    isa_ok = level != "scalar"
    check(order == CHECKS, "doctor prints the checks in order: %s" % order)
    for c in CHECKS:
        want = "OK" if c != "isa" or isa_ok else "WARN"
        check(got.get(c, [None])[0] == want, "good setup: %s is %s (%s)" % (c, want, got.get(c)))
    check(r.returncode == (0 if isa_ok else 1), "good setup: exit %d (got %d)"
          % (0 if isa_ok else 1, r.returncode))
    check(not any(v[2] for v in got.values() if v[0] == "OK"), "OK lines carry no fix")
    isa = got.get("isa", ["", ""])[1]
    check(isa.startswith("kernels run %s (this CPU: %s;" % (level, level)),
          "isa names the kernels run and this CPU's level %s: %s" % (level, isa))
    check("%d CPUs online" % os.cpu_count() in isa, "isa counts %d CPUs" % os.cpu_count())
    hdr = st_header(DEMO)
    n_tensors = len([k for k in hdr if k != "__metadata__"])
    model = got.get("model", ["", ""])[1]
    check(model.startswith(DEMO + ": no pull manifest") and "%d tensors in 1 safetensors files "
          "match config.json" % n_tensors in model and "tokenizer.json loads" in model,
          "model: no manifest, %d tensors match config.json, tokenizer loads" % n_tensors)
    ins = json.loads(run("inspect", DEMO, "--json").stdout)
    mem = got.get("memory", ["", ""])[1]
    want_mem = "resident part %s + routed experts %s;" % (
        fmt_bytes(ins["memory"]["resident_bytes"]), fmt_bytes(ins["memory"]["expert_bytes"]))
    check(mem.startswith(want_mem), "memory gives inspect's resident and expert bytes (%s): %s"
          % (want_mem, mem))
    m = re.search(r"([\d.]+) (\w+) available of ([\d.]+) (\w+)", mem)
    info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in open("/proc/meminfo")}
    check(m and m.group(3) + " " + m.group(4) == fmt_bytes(info["MemTotal"]),
          "memory gives MemTotal %s" % fmt_bytes(info["MemTotal"]))
    vf = os.statvfs(DEMO)
    disk = got.get("disk", ["", ""])[1]
    fs_size = fmt_bytes(vf.f_blocks * vf.f_frsize)
    check(disk.endswith("free of %s on the filesystem of %s" % (fs_size, DEMO)),
          "disk gives the size of the model folder's filesystem: %s" % disk)
    sd = got.get("state-dir", ["", ""])[1]
    check(sd == "%s (a coordinator state directory): mode 700, yours; 3 files, none open to group "
          "or others; keys: coordinator.key" % state, "state-dir: mode 700, 3 files: %s" % sd)
    check(got.get("cluster", ["", ""])[1] == "no cluster configured in %s (no node allow-listed, "
          "no coordinator has run)" % state, "cluster: none configured")

    # --json: the same checks, statuses and findings
    rj = run("doctor", "--model", DEMO, "--state-dir", state, "--json")
    js = json.loads(rj.stdout)
    check(rj.returncode == r.returncode and js["exit_status"] == r.returncode and
          js["status"] == ("OK" if isa_ok else "WARN"), "--json: status %s, exit %d"
          % (js.get("status"), rj.returncode))
    check([c["check"] for c in js["checks"]] == CHECKS, "--json: the same checks in order")
    check(all(set(c) == {"check", "status", "finding", "fix"} for c in js["checks"]),
          "--json: each check has check, status, finding, fix")
    # (free memory and disk space move between the two runs: their figures are masked)
    check(all(c["status"] == got[c["check"]][0] and c["fix"] == got[c["check"]][2] and
              (re.sub(r"\d+\.\d+ [KMGTP]iB", "N", c["finding"]) ==
               re.sub(r"\d+\.\d+ [KMGTP]iB", "N", got[c["check"]][1])
               if c["check"] in ("memory", "disk") else c["finding"] == got[c["check"]][1])
              for c in js["checks"]),
          "--json: statuses, findings and fixes equal the text lines")

    if isa_ok:
        r = run("doctor", "--model", DEMO, "--state-dir", state, env={"DF_ISA": "scalar"})
        g, _ = lines(r.stdout)
        check(g["isa"][0] == "WARN" and g["isa"][1].startswith("kernels run scalar (this CPU: %s"
                                                               % level) and
              "DF_ISA=scalar" in g["isa"][1] and "unset DF_ISA" in (g["isa"][2] or ""),
              "DF_ISA=scalar: isa WARN, kernels run scalar, fix: unset DF_ISA (%s)" % g["isa"])
        check(r.returncode == 1, "DF_ISA=scalar: exit 1 (got %d)" % r.returncode)

    # a key file others can read: FAIL naming it, fix chmod 600; exit 2
    key = os.path.join(state, "coordinator.key")
    os.chmod(key, 0o644)
    r = run("doctor", "--model", DEMO, "--state-dir", state)
    g, _ = lines(r.stdout)
    sd = g.get("state-dir", ["", "", ""])
    check(sd[0] == "FAIL" and "coordinator.key has mode 644" in sd[1] and "refused" in sd[1],
          "0644 coordinator.key: state-dir FAIL naming the file: %s" % sd[1])
    check(sd[2] == "chmod 600 %s" % key, "fix: chmod 600 the key (%s)" % sd[2])
    check(r.returncode == 2, "0644 coordinator.key: exit 2 (got %d)" % r.returncode)
    js = json.loads(run("doctor", "--model", DEMO, "--state-dir", state, "--json").stdout)
    e = [c for c in js["checks"] if c["check"] == "state-dir"][0]
    check(js["exit_status"] == 2 and e["status"] == "FAIL" and "coordinator.key" in e["finding"]
          and e["fix"] == "chmod 600 %s" % key, "--json: the same FAIL and fix")
    os.chmod(key, 0o600)
    tokens = os.path.join(state, "tokens")
    os.chmod(tokens, 0o644)
    r = run("doctor", "--model", DEMO, "--state-dir", state)
    g, _ = lines(r.stdout)
    sd = g.get("state-dir", ["", "", ""])
    check(sd[0] == "WARN" and "tokens has mode 644: readable by group or others" in sd[1] and
          sd[2] == "chmod 600 %s" % tokens, "0644 tokens: state-dir WARN naming it: %s" % sd)
    check(r.returncode == 1, "0644 tokens: exit 1 (got %d)" % r.returncode)
    os.chmod(tokens, 0o600)
    os.chmod(state, 0o770)
    r = run("doctor", "--model", DEMO, "--state-dir", state)
    g, _ = lines(r.stdout)
    sd = g.get("state-dir", ["", "", ""])
    check(sd[0] == "FAIL" and "writable by group or others (mode 770)" in sd[1] and
          sd[2] == "chmod 700 %s" % state and r.returncode == 2,
          "a state directory group can write: FAIL, chmod 700, exit 2: %s" % sd)
    os.chmod(state, 0o700)

    # a model folder that does not exist
    missing = os.path.join(WORK, "no-such-model")
    r = run("doctor", "--model", missing, "--state-dir", state)
    g, order = lines(r.stdout)
    check(g.get("model", [""])[0] == "FAIL" and g["model"][1] == missing + " does not exist" and
          "deltafin pull" in (g["model"][2] or ""), "missing --model: model FAIL naming it: %s"
          % g.get("model"))
    check("memory" not in g and "disk" not in g, "missing --model: no memory / disk lines")
    check(r.returncode == 2, "missing --model: exit 2 (got %d)" % r.returncode)

    # a pulled folder (manifest) whose sizes agree, then one whose manifest disagrees
    src = os.path.join(FIX, "tiny-moe-sparse")
    pulled = fresh("pulled")
    os.makedirs(pulled)
    files = []
    for fn in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, fn), pulled)
        b = open(os.path.join(pulled, fn), "rb").read()
        files.append({"path": fn, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()})

    def manifest(fs):
        with open(os.path.join(pulled, ".deltafin-manifest.json"), "w") as f:
            json.dump({"format": "deltafin-manifest", "version": 1,
                       "endpoint": "https://hub.invalid", "repo": "test/tiny", "revision": "main",
                       "commit": "0" * 40, "created": "2026-01-01T00:00:00Z", "mode": "full",
                       "complete": True, "files": fs, "pending": []}, f)
    manifest(files)
    # weights that match but no tokenizer: run and serve cannot use it
    r = run("doctor", "--model", pulled, "--state-dir", state)
    g, _ = lines(r.stdout)
    check(g.get("model", [""])[0] == "FAIL" and g["model"][1] == pulled + ": no tokenizer.json "
          "(or tiktoken.model): deltafin run and serve need it" and r.returncode == 2,
          "a folder without tokenizer.json: model FAIL naming it, exit 2: %s" % g.get("model"))
    shutil.copy(os.path.join(DEMO, "tokenizer.json"), pulled)
    b = open(os.path.join(pulled, "tokenizer.json"), "rb").read()
    files.append({"path": "tokenizer.json", "size": len(b),
                  "sha256": hashlib.sha256(b).hexdigest()})
    manifest(files)
    r = run("doctor", "--model", pulled, "--state-dir", state)
    g, _ = lines(r.stdout)
    check(g.get("model", [""])[0] == "OK" and g["model"][1].startswith(
        pulled + ": 4 files match the sizes in its pull manifest"),
        "a pulled folder: model OK, 4 files match the manifest: %s" % g.get("model"))
    bad = [dict(f) for f in files]
    bad[2]["size"] += 1
    manifest(bad)
    r = run("doctor", "--model", pulled, "--state-dir", state)
    g, _ = lines(r.stdout)
    want = "model.safetensors: size %d bytes, the manifest says %d" % (files[2]["size"],
                                                                     files[2]["size"] + 1)
    check(g.get("model", [""])[0] == "FAIL" and want in g["model"][1] and
          ("deltafin verify %s" % pulled) in (g["model"][2] or ""),
          "a size that differs from the manifest: model FAIL naming the file: %s" % g.get("model"))
    check(r.returncode == 2, "manifest mismatch: exit 2 (got %d)" % r.returncode)

    # a df-node state directory whose coordinator does not answer
    nstate = fresh("node-state")
    os.makedirs(nstate, mode=0o700)
    os.chmod(nstate, 0o700)
    pub = open(key).read().split()[1]  # any Z85 key will do
    port = free_port()
    fd = os.open(os.path.join(nstate, "coordinator"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, ("%s 127.0.0.1:%d\n" % (pub, port)).encode())
    os.close(fd)
    r = run("doctor", "--model", DEMO, "--state-dir", nstate)
    g, _ = lines(r.stdout)
    cl = g.get("cluster", ["", "", ""])
    check(g.get("state-dir", [""])[0] == "OK" and "a df-node state directory" in
          g["state-dir"][1], "a df-node state directory is recognised: %s" % g.get("state-dir"))
    check(cl[0] == "WARN" and "coordinator 127.0.0.1:%d" % port in cl[1] and
          "cannot be reached" in cl[1] and "start the coordinator" in (cl[2] or ""),
          "unreachable recorded coordinator: cluster WARN naming 127.0.0.1:%d: %s" % (port, cl))
    check(r.returncode == 1, "unreachable coordinator: exit 1 (got %d)" % r.returncode)
    # as df-node writes it (node/target.c: "KEY tcp://HOST:PORT"), with a listener there
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(4)
    lport = lsn.getsockname()[1]
    fd = os.open(os.path.join(nstate, "coordinator"), os.O_WRONLY | os.O_TRUNC, 0o600)
    os.write(fd, ("%s tcp://127.0.0.1:%d\n" % (pub, lport)).encode())
    os.close(fd)
    r = run("doctor", "--model", DEMO, "--state-dir", nstate)
    lsn.close()
    cl = lines(r.stdout)[0].get("cluster", ["", "", ""])
    check(cl[0] == "OK" and "this node's coordinator 127.0.0.1:%d" % lport in cl[1] and
          cl[1].endswith("accepts connections"),
          "a df-node's recorded tcp://127.0.0.1:%d that listens: cluster OK: %s" % (lport, cl))
    # joined by discovery (the key recorded, no address yet) and no avahi-daemon to ask
    fd = os.open(os.path.join(nstate, "coordinator"), os.O_WRONLY | os.O_TRUNC, 0o600)
    os.write(fd, ("%s\n" % pub).encode())
    os.close(fd)
    nobus = {"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=" + os.path.join(nstate, "no-such-bus")}
    r = run("doctor", "--model", DEMO, "--state-dir", nstate, env=nobus)
    g, _ = lines(r.stdout)
    cl, dc = g.get("cluster", ["", "", ""]), g.get("discovery", ["", "", ""])
    check(cl[0] == "WARN" and "no recorded address, and discovery is unavailable" in cl[1] and
          "df-node join HOST:PORT" in (cl[2] or ""),
          "a node to find its coordinator by discovery, without a daemon: cluster WARN: %s" % cl)
    check(dc[0] == "OK" and dc[1].startswith("unavailable: ") and "HOST:PORT" in dc[1],
          "discovery OK saying it is unavailable and what that means: %s" % dc)

    r = run("doctor", "--bogus")
    check(r.returncode == 2 and "unknown or incomplete option '--bogus'" in r.stderr,
          "an unknown option: usage error, exit 2")


def scen_inspect():
    r = run("inspect", DEMO)
    rj = run("inspect", DEMO, "--json")
    check(r.returncode == 0 and rj.returncode == 0, "inspect and inspect --json exit 0")
    js = json.loads(rj.stdout)
    t = r.stdout

    def num(pattern):
        m = re.search(pattern, t, re.M)
        return int(m.group(1)) if m else None
    check(js["model"] == DEMO and js["model_type"] == re.search(r"^type\s+(\S+)", t, re.M).group(1)
          == "qwen3_moe", "model and type: %s" % js["model_type"])
    m = re.search(r"^layers\s+(\d+) \(hidden (\d+), vocab (\d+)\)", t, re.M)
    check([js["layers"], js["hidden_size"], js["vocab_size"]] == [int(x) for x in m.groups()],
          "layers, hidden, vocab equal the text: %s" % list(m.groups()))
    cfg = json.load(open(os.path.join(DEMO, "config.json")))
    check([js["layers"], js["hidden_size"], js["vocab_size"]] ==
          [cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]],
          "and config.json's")
    check(all(ln in t for ln in js["summary"]) and len(js["summary"]) >= 2,
          "summary lines are the text's: %s" % js["summary"])
    check(js["tie_word_embeddings"] == ("tied (lm_head" in t), "tie_word_embeddings")
    mem = js["memory"]
    check(mem["checkpoint_bytes"] == num(r"checkpoint tensors\s+(\d+) bytes") and
          mem["files"] == num(r"in (\d+) file\(s\)"), "checkpoint bytes and files equal the text")
    check(mem["resident_bytes"] == num(r"resident part\s+(\d+) bytes"), "resident bytes")
    check(mem["expert_bytes"] == num(r"routed experts\s+(\d+) bytes"), "expert bytes")
    check(mem["read_per_token_bytes"] == num(r"weights read/token\s+(\d+) bytes"),
          "weights read per token")
    check(mem["kv_bytes_per_token"] == num(r"KV cache per token\s+(\d+) bytes"),
          "KV bytes per token")
    check(mem["state_kind"] in t, "state kind: %s" % mem["state_kind"])
    hdr = st_header(DEMO)
    sizes = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items()
             if k != "__metadata__"}
    ex = sum(b for k, b in sizes.items() if ".mlp.experts." in k)
    check(mem["checkpoint_bytes"] == sum(sizes.values()) and mem["expert_bytes"] == ex and
          mem["resident_bytes"] == sum(sizes.values()) - ex,
          "byte counts equal the safetensors header's (%d total, %d experts)"
          % (sum(sizes.values()), ex))
    # KV per token: K and V, fp32, per kv head, every layer
    kv = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    check(mem["kv_bytes_per_token"] == kv, "KV bytes per token = layers x 2 x kv heads x "
          "head_dim x 4 = %d" % kv)
    p = js["parameters"]
    m = re.search(r"^parameters\s+([\d.]+) B total, ([\d.]+) B active", t, re.M)
    check("%.2f" % (p["total"] / 1e9) == m.group(1) and "%.2f" % (p["active_per_token"] / 1e9)
          == m.group(2), "parameters equal the text (%s, %s)" % m.groups())
    check(p["total"] == sum(sizes.values()) // 2, "total parameters = BF16 bytes / 2")
    check(p["experts"] == cfg["num_experts"] and p["experts_per_token"] ==
          cfg["num_experts_per_tok"], "experts and top-k")
    names = [x["name"] for x in js["tensors"]]
    check(names == re.findall(r"^  (\S+)\s+\w+\s+\[", t, re.M),
          "the tensor inventory lists the text's tensors in order (%d)" % len(names))
    check(all(x["bytes"] == sizes[x["name"]] and x["shape"] == hdr[x["name"]]["shape"]
              for x in js["tensors"]), "each tensor's bytes and shape are the header's")
    groups = js["expert_groups"]
    check(len(groups) == cfg["num_hidden_layers"] and
          sum(g["bytes"] for g in groups) == ex and
          all(g["tensors"] == 3 * cfg["num_experts"] and g["dtype"] == "BF16" for g in groups),
          "one expert group per layer, %d tensors each, bytes summing to the experts'"
          % (3 * cfg["num_experts"]))
    check(js["quant"] is None and js["dense_mlp"] is None and js["other_tensors"] is None,
          "no quantisation, no dense MLP layers, no other towers")
    rn = run("inspect", DEMO, "--nodes", "8M,16M")
    rnj = run("inspect", "--json", DEMO, "--nodes", "8M,16M")
    pl = json.loads(rnj.stdout)["placement"]
    rows = re.findall(r"node \d+ \([\d.]+ GiB\)\s+(\d+) pairs \([\d.]+ GiB\) \+ (\d+) replicas",
                      rn.stdout)
    check([[n["pairs"], n["replicas"]] for n in pl["nodes"]] == [[int(a), int(b)] for a, b in rows]
          and [n["budget"] for n in pl["nodes"]] == [8 << 20, 16 << 20],
          "--nodes: the placement's pairs and replicas per node equal the text: %s" % rows)
    want_pairs = cfg["num_hidden_layers"] * cfg["num_experts"]
    cpairs = re.search(r"coordinator\s+(\d+) pairs", rn.stdout)
    check(pl["pairs"] == want_pairs and pl["pair_bytes"] == ex // want_pairs and cpairs and
          pl["coordinator_pairs"] == int(cpairs.group(1)),
          "--nodes: %d pairs of %d bytes, coordinator pairs equal the text (%s)"
          % (want_pairs, ex // want_pairs, pl["coordinator_pairs"]))


def wait_for(pred, what, timeout=90):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    check(False, "timed out waiting for " + what)
    return False


def read(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


def scen_cluster():
    state, fp = init_state("state-cluster")
    r = run("cluster", "status", "--state-dir", state, "--json")
    js = json.loads(r.stdout)
    check(r.returncode == 0 and js["coordinator"] == {"running": False, "pid": None,
                                                      "command": None, "endpoint": None,
                                                      "status_written": False}
          and js["nodes"] == [] and js["allow_listed"] == [] and js["state_dir"] == state,
          "empty state directory: not running, no nodes, nothing allow-listed: %s" % js)
    r = run("cluster", "status", "--state-dir", state)
    check(r.returncode == 0 and r.stdout.startswith("coordinator: not running; no coordinator "
                                                    "has written a status"),
          "empty state directory, text: not running (%s)" % r.stdout.strip())
    r = run("cluster", "status", "--state-dir", os.path.join(WORK, "no-such-state"))
    check(r.returncode == 1 and "no state directory" in r.stderr, "a missing state directory: "
          "exit 1 naming it")
    # the coordinator's own public key allow-listed as a node: its fingerprint is init's
    pub = open(os.path.join(state, "coordinator.key")).read().split()[1]
    fd = os.open(os.path.join(state, "nodes"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, ("%s n1 1700000000\n" % pub).encode())
    os.close(fd)
    js = json.loads(run("cluster", "status", "--state-dir", state, "--json").stdout)
    check(js["allow_listed"] == [{"key_fingerprint": fp, "name": "n1"}],
          "an allow-listed key: its name and fingerprint %s: %s" % (fp, js["allow_listed"]))

    # a status file whose coordinator is gone, with a node it last saw ready: offline in both
    gone = fresh("state-gone")
    os.makedirs(gone, mode=0o700)
    with open(os.path.join(gone, "cluster-status.json"), "w") as f:
        json.dump({"pid": 999999999, "command": "serve", "updated": 1700000000,
                   "endpoint": "tcp://127.0.0.1:7070", "key_fingerprint": fp, "pairs": 192,
                   "pairs_on_coordinator": 0, "pair_bytes": 1024,
                   "nodes": [{"name": "n1", "key_fingerprint": fp, "health": "ready",
                              "rtt_us": 500, "budget": 1 << 20, "device": 0, "held": 1 << 20,
                              "experts": 192, "routed": 7, "placement": "L0:0-31"}]}, f)
    js = json.loads(run("cluster", "status", "--state-dir", gone, "--json").stdout)
    r = run("cluster", "status", "--state-dir", gone)
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("n1 ")]
    check(js["coordinator"]["running"] is False and [n["health"] for n in js["nodes"]] ==
          ["offline"] and len(row) == 1 and row[0].split()[2] == "offline",
          "no coordinator running: the node's health is offline in --json and text: %s / %s"
          % ([n.get("health") for n in js["nodes"]], row))

    # a running serve --cluster
    port = free_port()
    log = os.path.join(WORK, "serve.log")
    with open(log, "wb") as f:
        p = subprocess.Popen([DELTAFIN, "serve", "--model", DEMO, "--port", "0", "--no-draft",
                              "--quiet", "--parallel", "1", "--cluster", "--cluster-bind", "127.0.0.1",
                              "--cluster-port", str(port), "--cluster-wait", "0",
                              "--state-dir", state], stdout=f, stderr=f)
    try:
        wait_for(lambda: "listening on http://" in read(log), "serve to listen")
        wait_for(lambda: os.path.exists(os.path.join(state, "cluster-status.json")),
                 "the status file")
        check("deltafin: cluster: listening on" not in read(log) and
              "deltafin serve: loading" not in read(log),
              "serve --quiet --cluster: no loading or cluster listening line: %r" % read(log))
        r = run("cluster", "status", "--state-dir", state, "--json")
        js = json.loads(r.stdout)
        co = js["coordinator"]
        check(co["running"] is True and co["pid"] == p.pid and co["command"] == "serve" and
              co["endpoint"] == "tcp://127.0.0.1:%d" % port,
              "serve --cluster running: pid %d, serve, its endpoint: %s" % (p.pid, co))
        check(js["pid"] == p.pid and js["command"] == "serve" and js["nodes"] == [] and
              js["pairs"] == 6 * 32 and js["pairs_on_coordinator"] == 6 * 32,
              "the status file records pid, command and 192 pairs on the coordinator")
        r = run("cluster", "status", "--state-dir", state)
        check(r.stdout.startswith("coordinator: running (pid %d, serve) on tcp://127.0.0.1:%d "
                                  "(key %s)" % (p.pid, port, fp)),
              "text: coordinator: running (pid %d, serve): %s" % (p.pid, r.stdout.splitlines()[0]))
        check("allow-listed node keys:\n  %s n1" % fp in r.stdout,
              "text lists the allow-listed key")
        r = run("doctor", "--model", DEMO, "--state-dir", state)
        g, _ = lines(r.stdout)
        cl = g.get("cluster", ["", ""])
        check(cl[0] == "OK" and cl[1].startswith("coordinator running (pid %d, serve), accepting "
                                                 "on 127.0.0.1:%d" % (p.pid, port)) and
              "1 allow-listed" in cl[1], "doctor reaches the running coordinator: %s" % cl)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
    js = json.loads(run("cluster", "status", "--state-dir", state, "--json").stdout)
    check(js["coordinator"]["running"] is False and js["coordinator"]["pid"] == p.pid and
          js["coordinator"]["command"] == "serve", "after SIGTERM: not running, last pid %d, serve"
          % p.pid)
    r = run("cluster", "status", "--state-dir", state)
    check(r.stdout.startswith("coordinator: not running (last: pid %d, serve)" % p.pid) and
          "offline" not in r.stdout, "text: not running (last: pid %d, serve)" % p.pid)
    r = run("doctor", "--model", DEMO, "--state-dir", state)
    g, _ = lines(r.stdout)
    check(g.get("cluster", ["", ""])[1] == "1 node key allow-listed; no coordinator running "
          "(last: pid %d, serve)" % p.pid, "doctor: no coordinator running, last serve: %s"
          % g.get("cluster"))

    # a run --cluster that ends: its pid and "run"
    q = subprocess.run([DELTAFIN, "run", "--model", DEMO, "--prompt-ids", "1,2,3", "--max-new",
                        "2", "--no-draft", "--temperature", "0", "--cluster", "--cluster-bind",
                        "127.0.0.1", "--cluster-port", str(free_port()), "--cluster-wait", "0",
                        "--state-dir", state], capture_output=True, text=True, timeout=120)
    check(q.returncode == 0, "run --cluster exit 0 (%s)" % q.stderr.strip()[-200:])
    js = json.loads(run("cluster", "status", "--state-dir", state, "--json").stdout)
    co = js["coordinator"]
    check(co["running"] is False and co["command"] == "run" and co["pid"] == js["pid"] and
          co["pid"] != p.pid, "after run --cluster: not running, command run, its pid: %s" % co)


def main():
    if not os.path.exists(os.path.join(DEMO, "config.json")):
        print("skipped: %s is not there" % DEMO)
        sys.exit(77)
    os.makedirs(WORK, exist_ok=True)
    {"doctor": scen_doctor, "inspect": scen_inspect, "cluster": scen_cluster}[SCEN]()
    if failures:
        print("%d failure(s):\n  %s" % (len(failures), "\n  ".join(failures)))
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
