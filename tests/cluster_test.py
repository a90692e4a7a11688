#!/usr/bin/env python3
"""Cluster integration tests: real `deltafin run --cluster` coordinators and `df-node`
processes on 127.0.0.x loopback, compared bit for bit with a local-only run.

usage: cluster_test.py SCENARIO BUILD_DIR FIXTURES_DIR WORK_DIR
SCENARIO:
  exact     local only / one node holding every expert / three nodes with uneven budgets
            whose sum, not any one, covers the routed experts: identical ids and logits
  ds_fp8, ds_bf16, kl_48b
            the same three-node comparison on the deepseek_v3 / kimi_k2 fixtures
            (tiny-ds-fp8: F8_E4M3 experts with 32x32 block scales; tiny-ds-bf16) and the
            kimi_linear one (tiny-kl-48b: block_sparse_moe.experts.<e>.w1/w3/w2); one node
            streams its tensors, which stay FP8 on the wire and in its cache
  k3        Kimi K3 (tiny-k3: latent MoE, SiTU-GLU, MXFP4 routed experts): one node with every
            expert and three nodes with uneven budgets give the local run's ids and prompt
            logits bit for bit; one node streams the packed bytes and E8M0 scales, one has a
            checkpoint copy whose scales hold 255 (its copy is refused by SHA-256, the tensors
            fetched); a node that does not declare `act` / `mx` (an older df-node) is given
            no expert
  k3_kill   Kimi K3: a node frozen and then killed during the prefill (its in-flight groups
            rerun: prompt logits still bitwise identical) and another killed mid-generation
            (ids identical); the first restarted rejoins with its stored key
  k3_badscale
            Kimi K3 whose experts' E8M0 scales hold the NaN byte 255: the node refuses the FFN
            with ERROR (no crash; it keeps running), the coordinator drops it and fails the
            way one machine does, with the same message
  stream    nodes without the checkpoint get the tensors streamed (SHA-256 checked,
            content-addressed cache); a second run reuses the cache
  device    a node with a device budget (simulated: --device torch-cpu) and a CPU node: the
            hottest pairs of the stored heat go to it up to that budget; ids equal local
  kill      kill -9 of a node mid-generation: ids unchanged; the restarted node rejoins
            with its stored key (no token)
  security  unknown key, wrong / reused / expired token, garbage frames, wrong protocol
            version, plain TCP, truncated and wrongly-shaped RESULTs: all refused or
            dropped with a logged reason while the coordinator keeps generating
  idle      no CPU burnt while waiting: coordinator with an idle / dead node, node whose
            coordinator vanished (it keeps retrying)
  wrongkey  a node holding another coordinator's token, then that coordinator's stored key,
            gives up in seconds with exit 3 and one line naming the key; a key the coordinator
            does not admit, exit 3; no flood: repeated identical lines are written once (node
            and coordinator); a node whose coordinator is down keeps retrying quietly
  shutdown  bounded exit: coordinators, nodes and `serve --cluster` run with zmq_close
            slowed (tests/slow_close.c, LD_PRELOAD) under a flood of plain-TCP peers, so
            peers act in the middle of every socket teardown: each `run --cluster` exits
            (its teardown line written) and the nodes answer its BYE and rejoin the next
            one; a node frozen (SIGSTOP) near the end; serve exits on SIGTERM and on SIGINT,
            the second time with a request in flight on a frozen node
  state_modes
            a state directory others can write, and a --ttl whose expiry would overflow, are
            refused; df-node join with no host or a bad port is a usage error (exit 2) that
            creates nothing; revoke with a 4-hex prefix says 8 are needed
  token_cli `cluster init` names the coordinator key by its fingerprint (SHA-256 of the raw
            key, 16 hex) and never prints the Z85 key; `cluster token` prints only the token
            on stdout and, on stderr, the fingerprint, single-use / reusable and the expiry
            time (UTC, the one STATE/tokens records) or "never expires"
Readiness is awaited on log lines, never on fixed sleeps; deadlines are generous.
"""
import calendar
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import byte_level_tokenizer  # noqa: E402

SCEN, BUILD, FIX, WORK = sys.argv[1:5]
DELTAFIN = os.path.join(BUILD, "coordinator", "deltafin")
DFNODE = os.path.join(BUILD, "node", "df-node")
EVIL = os.path.join(BUILD, "tests", "cluster_evil")
RELAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "df-relay.py")
MODEL = os.path.join(FIX, "tiny-moe-sparse")
PROMPT = "1,2,3,4,5,6,7,8,9,10,11,12"
PAIR_BYTES = 3 * 48 * 96 * 2  # tiny-moe-sparse: gate/up [48, 96], down [96, 48] in BF16
DEADLINE = 90.0
IDLE_WINDOW = 1.5  # seconds over which `idle` measures a waiting process's CPU time
PATIENCE = 4.0  # seconds `wrongkey` watches a node retry a coordinator that is down, at least

failures = []
procs = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, what, timeout=DEADLINE):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    check(False, "timed out waiting for " + what)
    return False


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_log(path, text, timeout=DEADLINE, count=1):
    return wait_for(lambda: read(path).count(text) >= count, "'%s' in %s" % (text, path), timeout)


def spawn(args, log, **kw):
    f = open(log, "ab")
    p = subprocess.Popen(args, stdout=kw.pop("stdout", f), stderr=f, **kw)
    procs.append(p)
    return p


def token(state, *extra):
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", state, *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def node(name, port, state, log, memory, token_=None, model=True, host="127.0.0.1", env=None,
         token_via="file", extra=()):
    """A df-node; the join token goes in through --token-file (mode 600, the documented way),
    DELTAFIN_JOIN_TOKEN (token_via="env") or --token (token_via="arg"). model: True = MODEL as
    its --model-dir, a path = that folder, False = none."""
    args = [DFNODE, "join", "%s:%d" % (host, port), "--state-dir", state, "--memory", str(memory),
            "--name", name, "--threads", "1"]
    if token_ and token_via == "file":
        tf = os.path.join(WORK, "token-%s.txt" % name)
        fd = os.open(tf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, (token_ + "\n").encode())
        os.close(fd)
        args += ["--token-file", tf]
    elif token_ and token_via == "env":
        env = dict(env or {}, DELTAFIN_JOIN_TOKEN=token_)
    elif token_:
        args += ["--token", token_]
    if model:
        args += ["--model-dir", model if isinstance(model, str) else MODEL]
    return spawn(args + list(extra), log, env=env)


def run_local(max_new, tag, extra=()):
    out = os.path.join(WORK, tag + ".f32")
    r = subprocess.run([DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new",
                        str(max_new), "--temperature", "0", "--ignore-eos", "--no-draft",
                        "--logits-out", out, *extra], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), open(out, "rb").read()


def coordinator(tag, port, state, max_new, nodes, wait=60, extra=(), bind="127.0.0.1", env=None):
    """Start `deltafin run --cluster`; returns (proc, stdout path, stderr path, logits path)."""
    out = os.path.join(WORK, tag + ".f32")
    so, se = os.path.join(WORK, tag + ".ids"), os.path.join(WORK, tag + ".log")
    args = [DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new", str(max_new),
            "--temperature", "0", "--ignore-eos", "--no-draft", "--logits-out", out, "--stats",
            "--cluster", "--cluster-bind", bind, "--cluster-port", str(port), "--state-dir", state,
            "--cluster-nodes", str(nodes), "--cluster-wait", str(wait), *extra]
    p = spawn(args, se, stdout=open(so, "wb"), env=env)
    return p, so, se, out


def exit_status(proc):
    """proc's exit status once it ends within DEADLINE; None (and killed) otherwise."""
    try:
        return proc.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None


def finish(p, so, out, timeout=DEADLINE):
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "coordinator finished in time")
        return None, None
    ids = read(so).split()
    logits = open(out, "rb").read() if os.path.exists(out) else b""
    return ids, logits


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------


def scen_exact():
    ids0, lg0 = run_local(24, "local")
    # one node holding every expert
    port, state = free_port(), os.path.join(WORK, "coord1")
    n1 = node("all", port, os.path.join(WORK, "n-all"), os.path.join(WORK, "n-all.log"), "1G",
              token(state), token_via="env")
    p, so, se, out = coordinator("one", port, state, 24, 1)
    ids, lg = finish(p, so, out)
    n1.terminate()
    check(ids == ids0, "one node with every expert: ids identical (%s)" % " ".join(ids or []))
    check(lg == lg0, "one node with every expert: prompt logits bitwise identical")
    log = read(se)
    check("ready: 16 experts" in log, "the node holds all 16 (layer, expert) pairs")
    check(" 0 local," in log, "no group ran on the coordinator")
    # three nodes, uneven budgets: 3, 5 and 9 pairs; 16 pairs need all of them
    port, state = free_port(), os.path.join(WORK, "coord3")
    tok = token(state, "--reusable")
    budgets = [3 * PAIR_BYTES, 5 * PAIR_BYTES, 9 * PAIR_BYTES]
    for i, b in enumerate(budgets):
        check(b < 16 * PAIR_BYTES, "budget of node %d (%d B) is below the routed experts" % (i, b))
        node("u%d" % i, port, os.path.join(WORK, "n-u%d" % i), os.path.join(WORK, "n-u%d.log" % i),
             b, tok, host="127.0.0.%d" % (i + 1))
    p, so, se, out = coordinator("three", port, state, 24, 3, bind="0.0.0.0")
    ids, lg = finish(p, so, out)
    check(ids == ids0, "three nodes, uneven budgets: ids identical")
    check(lg == lg0, "three nodes, uneven budgets: prompt logits bitwise identical")
    st = subprocess.run([DELTAFIN, "cluster", "status", "--state-dir", state, "--json"],
                        capture_output=True, text=True)
    import json
    js = json.loads(st.stdout)
    check(js["pairs_on_coordinator"] == 0, "every pair placed on a node (status: %d on the "
          "coordinator)" % js["pairs_on_coordinator"])
    held = sorted(n["experts"] for n in js["nodes"])
    check(held == [3, 5, 9], "placement follows the budgets: %s" % held)
    st = subprocess.run([DELTAFIN, "cluster", "status", "--state-dir", state], capture_output=True,
                        text=True)
    check(st.returncode == 0 and "PLACEMENT" in st.stdout and "u2" in st.stdout,
          "cluster status prints the node table")
    print(st.stdout)


def expert_pair_bytes(model):
    """Bytes of one routed (layer, expert) pair: its three weights and any FP8 block scales."""
    import json
    import struct
    with open(os.path.join(model, "model.safetensors"), "rb") as f:
        hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    moe = ".block_sparse_moe.experts." if any(".block_sparse_moe.experts." in k for k in hdr) \
        else ".mlp.experts."  # Kimi Linear's or DeepSeek / Qwen's routed experts
    first = min(int(k.split(".")[2]) for k in hdr if moe + "0." in k)
    pre = "model.layers.%d%s0." % (first, moe)
    sizes = {k[len(pre):]: v["data_offsets"][1] - v["data_offsets"][0]
             for k, v in hdr.items() if k.startswith(pre)}
    pairs = {tuple(k.split(".")[2:6:3]) for k in hdr if moe in k}
    return sum(sizes.values()), sizes, len(pairs)


def scen_exact_ds(fixture):
    global MODEL
    MODEL = os.path.join(FIX, fixture)
    pair_bytes, sizes, n_pairs = expert_pair_bytes(MODEL)
    fp8 = any(k.endswith("_scale_inv") for k in sizes)
    check(fp8 == fixture.endswith("fp8"), "%s: pair of %d bytes (%s)" % (fixture, pair_bytes,
                                                                          ", ".join(sorted(sizes))))
    ids0, lg0 = run_local(24, "local")
    port, state = free_port(), os.path.join(WORK, "coord3")
    tok = token(state, "--reusable")
    # uneven budgets (3, 5 and 9 pairs for 16) that only together hold every pair; the
    # second node has no checkpoint and gets its tensors (FP8 weights and F32 scales) streamed
    counts = [n_pairs // 5, n_pairs // 3, n_pairs - n_pairs // 5 - n_pairs // 3 + 1]
    for i, np_ in enumerate(counts):
        node("u%d" % i, port, os.path.join(WORK, "n-u%d" % i), os.path.join(WORK, "n-u%d.log" % i),
             np_ * pair_bytes, tok, model=i != 1, host="127.0.0.%d" % (i + 1))
    p, so, se, out = coordinator("three", port, state, 24, 3, bind="0.0.0.0")
    ids, lg = finish(p, so, out)
    check(ids == ids0, "%s, three nodes, uneven budgets: ids identical (%s)" % (fixture, " ".join(ids or [])))
    check(lg == lg0, "%s, three nodes, uneven budgets: prompt logits bitwise identical" % fixture)
    import json
    st = subprocess.run([DELTAFIN, "cluster", "status", "--state-dir", state, "--json"],
                        capture_output=True, text=True)
    js = json.loads(st.stdout)
    check(js["pairs_on_coordinator"] == 0, "every pair placed on a node (%d on the coordinator)"
          % js["pairs_on_coordinator"])
    held = sorted(n["experts"] for n in js["nodes"])
    check(held == counts, "placement of %d pairs follows the budgets: %s" % (n_pairs, held))
    check(" 0 local," in read(se), "no group ran on the coordinator")
    log1 = read(os.path.join(WORK, "n-u1.log"))
    check("to fetch" in log1 and " 0 to fetch" not in log1 and "ready:" in log1,
          "node without the checkpoint fetched its tensors and became ready")
    cache = os.path.join(WORK, "n-u1", "cache", "sha256")
    got = sorted({os.path.getsize(os.path.join(cache, n)) for n in os.listdir(cache)})
    want = sorted(set(sizes.values()))
    check(got == want, "cached tensors keep their stored sizes (%s bytes; checkpoint %s)"
          % (got, want))


# ---- Kimi K3 ------------------------------------------------------------------------------

K3_EXPERT = re.compile(r"layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.(weight_packed|weight_scale)$")


def st_header(path):
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def k3_model():
    """The tiny-k3 preset (tests/fixtures/tiny-k3's checkpoint), generated in the work folder
    (0.1 s): the test never depends on a fixture being rewritten meanwhile."""
    out = os.path.join(WORK, "tiny-k3")
    r = subprocess.run([sys.executable, os.path.join(FIX, "..", "reference", "kimi_k3_ckpt.py"),
                        "--preset", "tiny-k3", "--out", out], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def k3_pairs(model):
    """(bytes of one routed pair: three weight_packed + three weight_scale, their sizes by
    part, number of pairs)."""
    hdr, _ = st_header(os.path.join(model, "model.safetensors"))
    sizes, pairs = {}, set()
    for k, v in hdr.items():
        m = K3_EXPERT.search(k)
        if m:
            pairs.add((int(m.group(1)), int(m.group(2))))
            sizes.setdefault("%s.%s" % (m.group(3), m.group(4)),
                             v["data_offsets"][1] - v["data_offsets"][0])
    return sum(sizes.values()), sizes, len(pairs)


def k3_damaged(model, dst, pattern):
    """A copy of model whose expert scale tensors matching pattern start with the E8M0 NaN
    byte 255 (row 0, group 0)."""
    os.makedirs(dst)
    for fn in os.listdir(model):
        if os.path.isfile(os.path.join(model, fn)):
            shutil.copy(os.path.join(model, fn), dst)
    path = os.path.join(dst, "model.safetensors")
    hdr, base = st_header(path)
    n = 0
    with open(path, "r+b") as f:
        for k, v in hdr.items():
            if re.search(pattern, k):
                f.seek(base + v["data_offsets"][0])
                f.write(b"\xff")
                n += 1
    return n


def scen_k3():
    import json
    global MODEL
    MODEL = k3_model()
    pair_bytes, sizes, n_pairs = k3_pairs(MODEL)
    check(n_pairs == 48 and len(sizes) == 6, "tiny-k3: %d MXFP4 pairs of %d bytes (%s)"
          % (n_pairs, pair_bytes, ", ".join("%s %d" % kv for kv in sorted(sizes.items()))))
    ids0, lg0 = run_local(24, "local")
    # one node holding every expert
    # (the coordinator first: nodes dialling a port not yet bound would back off for seconds)
    port, state = free_port(), os.path.join(WORK, "coord1")
    tok = token(state)
    p, so, se, out = coordinator("one", port, state, 24, 1)
    wait_log(se, "listening on")
    n1 = node("all", port, os.path.join(WORK, "n-all"), os.path.join(WORK, "n-all.log"), "1G", tok)
    ids, lg = finish(p, so, out)
    n1.terminate()
    check(ids == ids0, "K3, one node with every expert: ids identical (%s)" % " ".join(ids or []))
    check(lg == lg0, "K3, one node with every expert: prompt logits bitwise identical")
    log = read(se)
    check("ready: %d experts" % n_pairs in log, "the node holds all %d pairs" % n_pairs)
    check(" 0 local," in log and " 0 rerun" in log, "no group ran on the coordinator")
    # three nodes, uneven budgets that only together hold every pair: u0 has a (simulated)
    # device, which does not run these experts; u1 has no checkpoint (packed bytes and scales
    # streamed); u2's copy has every w1 scale damaged (255)
    damaged = os.path.join(WORK, "tiny-k3-damaged")
    n_bad = k3_damaged(MODEL, damaged, r"\.w1\.weight_scale$")
    port, state = free_port(), os.path.join(WORK, "coord3")
    tok = token(state, "--reusable")
    counts = [n_pairs // 5, n_pairs // 3, n_pairs - n_pairs // 5 - n_pairs // 3 + 1]
    p, so, se, out = coordinator("three", port, state, 24, 3, bind="0.0.0.0")
    wait_log(se, "listening on")
    # a df-node from before JOIN `features` joins first: it must be given nothing
    r = subprocess.run([EVIL, "oldnode", "tcp://127.0.0.1:%d" % port, tok], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, "a node without `features` got an empty assignment: "
          + r.stdout.strip())
    for i, np_ in enumerate(counts):
        node("u%d" % i, port, os.path.join(WORK, "n-u%d" % i), os.path.join(WORK, "n-u%d.log" % i),
             np_ * pair_bytes, tok, model=[True, False, damaged][i], host="127.0.0.%d" % (i + 1),
             extra=("--device", "torch-cpu") if i == 0 else ())
    ids, lg = finish(p, so, out)
    check(ids == ids0, "K3, three nodes, uneven budgets: ids identical (%s)" % " ".join(ids or []))
    check(lg == lg0, "K3, three nodes, uneven budgets: prompt logits bitwise identical")
    log = read(se)
    check(" 0 local," in log and " 0 rerun" in log, "no group ran on the coordinator")
    check("does not declare SiTU experts (`act`) or MXFP4 experts (`mx32`)" in log,
          "the coordinator named what the old node lacks")
    st = subprocess.run([DELTAFIN, "cluster", "status", "--state-dir", state, "--json"],
                        capture_output=True, text=True)
    js = json.loads(st.stdout)
    check(js["pairs_on_coordinator"] == 0 and js["pair_bytes"] == pair_bytes,
          "every pair on a node, pair bytes %d = packed + scales (status: %d on the "
          "coordinator, %d bytes)" % (pair_bytes, js["pairs_on_coordinator"], js["pair_bytes"]))
    held = sorted(n["experts"] for n in js["nodes"] if n["name"].startswith("u"))
    check(held == counts, "placement of %d pairs follows the budgets: %s" % (n_pairs, held))
    check("device: these experts are MXFP4 and SiTU-GLU, which the device path does not run; "
          "they run on the CPU" in read(os.path.join(WORK, "n-u0.log")),
          "the --device node keeps K3's experts on its CPU and says so")
    log1 = read(os.path.join(WORK, "n-u1.log"))
    m1 = re.search(r"(\d+) experts, 0 tensors local, (\d+) to fetch", log1)
    check(m1 is not None and int(m1.group(2)) == 6 * int(m1.group(1)) and "ready:" in log1,
          "node without the checkpoint fetched six tensors per pair and became ready")
    cache = os.path.join(WORK, "n-u1", "cache", "sha256")
    got = sorted({os.path.getsize(os.path.join(cache, n)) for n in os.listdir(cache)})
    check(got == sorted(set(sizes.values())), "cached tensors keep their stored sizes: %s bytes "
          "(packed and E8M0 scales; checkpoint %s)" % (got, sorted(set(sizes.values()))))
    log2 = read(os.path.join(WORK, "n-u2.log"))
    m2 = re.search(r"(\d+) experts, (\d+) tensors local, (\d+) to fetch", log2)
    check(n_bad == n_pairs and m2 is not None and int(m2.group(3)) == int(m2.group(1))
          and int(m2.group(2)) == 5 * int(m2.group(1)),
          "node whose copy has damaged w1 scales fetched exactly those (%s)"
          % (m2.group(0) if m2 else "no assignment line"))


def scen_k3_kill():
    global MODEL, PROMPT
    MODEL = k3_model()
    pair_bytes, _, n_pairs = k3_pairs(MODEL)
    PROMPT = ",".join(str((i * 37 + 15) % 512) for i in range(48))
    max_new, chunk = 64, ("--chunk", "1")  # one token per prefill forward: a long prefill
    ids0, lg0 = run_local(max_new, "local", chunk)
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    rport = free_port()
    spawn([sys.executable, RELAY, "127.0.0.1:%d" % rport, "127.0.0.1:%d" % port, "--rtt-ms", "6"],
          os.path.join(WORK, "relay.log"), stdout=open(os.path.join(WORK, "relay.out"), "wb"))
    wait_log(os.path.join(WORK, "relay.out"), "listening")
    budget = (n_pairs // 2) * pair_bytes  # any two nodes hold every pair; replicas spread
    p, so, se, out = coordinator("killrun", port, state, max_new, 3, extra=chunk)
    wait_log(se, "listening on")
    frozen_state = os.path.join(WORK, "frozen")
    frozen = node("frozen", rport, frozen_state, os.path.join(WORK, "frozen.log"), budget, tok)
    victim = node("victim", rport, os.path.join(WORK, "victim"), os.path.join(WORK, "victim.log"),
                  budget, tok)
    node("k1", port, os.path.join(WORK, "k1"), os.path.join(WORK, "k1.log"), budget, tok)
    # freeze one node as the prefill starts: a layer's round trip to it stays in flight, then
    # it is killed with the prefill still waiting on it
    wait_log(se, "3 nodes ready")
    os.kill(frozen.pid, signal.SIGSTOP)
    time.sleep(1.0)  # the prefill reaches a layer routed to the frozen node and waits there
    in_prefill = read(so).split() == []
    os.kill(frozen.pid, signal.SIGKILL)
    frozen.wait()
    # and another one mid-generation
    wait_for(lambda: len(read(so).split()) >= 8, "8 generated tokens")
    n_before = len(read(so).split())
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    ids, lg = finish(p, so, out)
    log = read(se)
    check(in_prefill, "a node was killed during the prefill (no token out yet)")
    check(n_before < max_new, "a node died mid-generation (after %d of %d tokens)" % (n_before, max_new))
    check(ids == ids0, "K3, nodes killed in the prefill and mid-generation: ids identical (%s)"
          % " ".join(ids or []))
    check(lg == lg0, "K3, a node killed during the prefill: prompt logits bitwise identical")
    check("dropped node frozen" in log and "dropped node victim" in log,
          "coordinator dropped both killed nodes")
    m = re.search(r"(\d+) rerun locally after a node failed", log)
    check(m is not None and int(m.group(1)) > 0, "the killed nodes' groups in flight were rerun "
          "(%s)" % (m.group(0) if m else "no stats line"))
    # the frozen one restarted without a token (and without the relay): it rejoins with its
    # stored key
    p, so, se, out = coordinator("rejoin", port, state, 16, 2, extra=chunk)
    wait_log(se, "listening on")
    node("frozen", port, frozen_state, os.path.join(WORK, "frozen2.log"), budget)
    ids, lg = finish(p, so, out)
    check(ids == ids0[:16] and lg == lg0, "run after the rejoin: ids and prompt logits identical")
    check(re.search(r"node frozen \(\w+\) joined with its stored key", read(se)) is not None,
          "the restarted node rejoined by its key")


def scen_k3_badscale():
    global MODEL
    good = k3_model()
    MODEL = os.path.join(WORK, "tiny-k3-nan")
    n_bad = k3_damaged(good, MODEL, r"layers\.1\.block_sparse_moe\.experts\.\d+\.w1\.weight_scale$")
    check(n_bad > 0, "%d layer-1 gate scales start with the NaN byte 255" % n_bad)
    r = subprocess.run([DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new",
                        "8", "--temperature", "0", "--no-draft"], capture_output=True, text=True,
                       timeout=120)
    m = re.search(r"layer 1 expert \d+: the gate \(w1\) weight's E8M0 scales hold 255 \(NaN\)"
                  r"[^\n]*", r.stderr)
    check(r.returncode == 1 and m is not None, "one machine refuses the damaged expert: "
          + r.stderr.strip())
    want = m.group(0) if m else "E8M0 scales hold 255"
    port, state = free_port(), os.path.join(WORK, "coord")
    nlog = os.path.join(WORK, "n-bad.log")
    tok = token(state)
    p, so, se, out = coordinator("nan", port, state, 8, 1)
    wait_log(se, "listening on")
    n1 = node("bad", port, os.path.join(WORK, "n-bad"), nlog, "1G", tok, model=False)
    finish(p, so, out)
    log = read(se)
    check(p.returncode == 1, "the cluster run fails as one machine does (exit %s)" % p.returncode)
    check(want in log, "with the same message: '%s'" % want)
    check("dropped node bad" in log and "error 4 on FFN: layer 1 expert" in log
          and "255 (NaN)" in log, "the coordinator dropped the node for its ERROR")
    check("refused FFN: layer 1 expert" in read(nlog), "the node refused the FFN with a reason")
    time.sleep(0.5)  # a crash would show now: the node redials the coordinator that left
    alive = n1.poll() is None
    n1.terminate()
    check(alive and n1.wait(timeout=DEADLINE) == 0, "the node did not crash (still running, "
          "exit 0 on SIGTERM)")


def scen_stream():
    ids0, lg0 = run_local(16, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    logs = []
    for i, b in enumerate([6 * PAIR_BYTES, 11 * PAIR_BYTES]):
        lg = os.path.join(WORK, "n%d.log" % i)
        logs.append(lg)
        node("s%d" % i, port, os.path.join(WORK, "n%d" % i), lg, b, tok, model=False)
    p, so, se, out = coordinator("stream", port, state, 16, 2)
    ids, lg = finish(p, so, out)
    check(ids == ids0 and lg == lg0, "streamed shards: ids and logits identical")
    check(all("to fetch" in read(l) and " 0 to fetch" not in read(l).split("assigned")[1]
              for l in logs), "nodes without the checkpoint fetched their tensors")
    cache = os.path.join(WORK, "n1", "cache", "sha256")
    names = os.listdir(cache) if os.path.isdir(cache) else []
    check(len(names) > 0 and all(len(n) == 64 for n in names),
          "content-addressed cache holds %d tensors" % len(names))
    check(not os.listdir(os.path.join(WORK, "n1", "cache", "tmp")), "no partial downloads left")
    # second coordinator: the running nodes rejoin with their keys and reuse the cache
    for l in logs:
        open(l, "a").write("---- second run\n")
    p, so, se, out = coordinator("stream2", port, state, 16, 2)
    ids, lg = finish(p, so, out)
    check(ids == ids0 and lg == lg0, "second run: ids and logits identical")
    tail = read(logs[1]).split("---- second run")[1]
    # the coordinator's word: the node's own "joining" line may precede the marker (it
    # redials as soon as the first coordinator says BYE) and is written once per 30 s
    check(re.search(r"node s1 \(\w+\) joined with its stored key", read(se)) is not None,
          "node rejoined without a token")
    check(" 0 to fetch" in tail, "node reused its cache (nothing fetched)")


def scen_kill():
    max_new = 160
    ids0, _ = run_local(max_new, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    rport = free_port()
    relay = spawn([sys.executable, RELAY, "127.0.0.1:%d" % rport, "127.0.0.1:%d" % port,
                   "--rtt-ms", "6"], os.path.join(WORK, "relay.log"),
                  stdout=open(os.path.join(WORK, "relay.out"), "wb"))
    wait_log(os.path.join(WORK, "relay.out"), "listening")
    victim_state = os.path.join(WORK, "victim")
    victim = node("victim", rport, victim_state, os.path.join(WORK, "victim.log"),
                  6 * PAIR_BYTES, tok)
    node("k1", port, os.path.join(WORK, "k1"), os.path.join(WORK, "k1.log"), 6 * PAIR_BYTES, tok)
    node("k2", port, os.path.join(WORK, "k2"), os.path.join(WORK, "k2.log"), 6 * PAIR_BYTES, tok)
    p, so, se, out = coordinator("killrun", port, state, max_new, 3)
    # kill -9 once a few tokens are out
    wait_for(lambda: len(read(so).split()) >= 8, "8 generated tokens")
    n_before = len(read(so).split())
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    ids, _ = finish(p, so, out)
    check(n_before < max_new, "the node died mid-generation (after %d of %d tokens)" % (n_before, max_new))
    check(ids == ids0, "kill -9 mid-generation: ids identical to the undisturbed run")
    log = read(se)
    check("dropped node victim" in log, "coordinator dropped the killed node")
    # restart the node with no token: it rejoins with its stored key
    node("victim", rport, victim_state, os.path.join(WORK, "victim2.log"), 6 * PAIR_BYTES)
    p, so, se, out = coordinator("rejoin", port, state, 24, 3)
    ids, _ = finish(p, so, out)
    check(ids == ids0[:24], "run after the rejoin: ids identical")
    v2 = read(os.path.join(WORK, "victim2.log"))
    check("with the stored key" in v2 and "ready:" in v2, "restarted node rejoined without a token")
    check("victim" in read(se) and "joined with its stored key" in read(se),
          "coordinator admitted the restarted node by its key")


def scen_device():
    """A node with a device budget (simulated: --device torch-cpu, whose free memory counts as
    unlimited, so its JOIN declares device = --memory) gets the hottest pairs of the stored
    heat, up to that budget; a CPU node the rest. Ids equal the local run's."""
    import json
    import struct
    ids0, _ = run_local(24, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    # STATE/heat/<FNV-1a 64 of the model's real path>.u64, layer-major [4 layers x 8 experts]
    h = 1469598103934665603
    for b in os.path.realpath(MODEL).encode():
        h = ((h ^ b) * 1099511628211) & (2**64 - 1)
    heat = [0] * 32
    heat[3 * 8 + 6], heat[1 * 8 + 2], heat[3 * 8 + 1], heat[1 * 8 + 7] = 50, 40, 40, 30
    os.makedirs(os.path.join(state, "heat"), exist_ok=True)
    hpath = os.path.join(state, "heat", "%016x.u64" % h)
    with open(hpath, "wb") as f:
        f.write(b"DFHEAT1\0" + struct.pack("<Q", 32) + struct.pack("<32Q", *heat))
    spawn([DFNODE, "join", "127.0.0.1:%d" % port, "--state-dir", os.path.join(WORK, "n-gpu"),
           "--memory", str(3 * PAIR_BYTES), "--name", "gpu", "--threads", "1", "--token", tok,
           "--model-dir", MODEL, "--device", "torch-cpu"], os.path.join(WORK, "n-gpu.log"))
    node("cpu", port, os.path.join(WORK, "n-cpu"), os.path.join(WORK, "n-cpu.log"),
         16 * PAIR_BYTES, tok, host="127.0.0.2")
    p, so, se, out = coordinator("two", port, state, 24, 2, bind="0.0.0.0")
    ids, _ = finish(p, so, out)
    check(ids == ids0, "a torch-cpu node and a CPU node: ids identical (%s)" % " ".join(ids or []))
    check("MiB on its device" in read(se), "the coordinator logs the declared device budget")
    st = subprocess.run([DELTAFIN, "cluster", "status", "--state-dir", state, "--json"],
                        capture_output=True, text=True)
    js = {n["name"]: n for n in json.loads(st.stdout)["nodes"]}
    g, c = js.get("gpu", {}), js.get("cpu", {})
    check(g.get("device") == 3 * PAIR_BYTES and c.get("device") == 0,
          "declared device budgets: gpu %s, cpu %s" % (g.get("device"), c.get("device")))
    # the three hottest (3,6) 50, (1,2) 40, (3,1) 40 (tie: lower pair first), not (1,7) 30
    check(g.get("placement") == "L1:2 L3:1,6", "the hottest pairs on the device node: %s"
          % g.get("placement"))
    check(c.get("experts") == 16, "the CPU node holds the other 13 and replicas of the 3: %s"
          % c.get("experts"))
    with open(hpath, "rb") as f:
        after = struct.unpack("<32Q", f.read()[16:])
    check(sum(after) > sum(heat), "the cluster run added its routing counts to the heat file")


def scen_ds_fp8_device():
    """FP8 experts on a device node: a --device torch-cpu node without the checkpoint fetches
    the F8_E4M3 weights and F32 block scales over the wire and keeps every pair it serves on
    its device as stored (one byte per weight plus the scales); a CPU node holds the rest.
    Ids equal the local run's (prompt logits agree to fp32 rounding: the device path sums in
    another order)."""
    global MODEL
    MODEL = os.path.join(FIX, "tiny-ds-fp8")
    pair_bytes, _, n_pairs = expert_pair_bytes(MODEL)
    ids0, lg0 = run_local(24, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    spawn([DFNODE, "join", "127.0.0.1:%d" % port, "--state-dir", os.path.join(WORK, "n-gpu"),
           "--memory", str(n_pairs // 2 * pair_bytes), "--name", "gpu", "--threads", "1",
           "--token", tok, "--device", "torch-cpu"], os.path.join(WORK, "n-gpu.log"))
    node("cpu", port, os.path.join(WORK, "n-cpu"), os.path.join(WORK, "n-cpu.log"),
         n_pairs * pair_bytes, tok, host="127.0.0.2")
    p, so, se, out = coordinator("two", port, state, 24, 2, bind="0.0.0.0")
    ids, lg = finish(p, so, out)
    check(ids == ids0, "FP8 experts on a torch-cpu node + a CPU node: ids identical (%s)"
          % " ".join(ids or []))
    import array
    a, b = array.array("f", lg or b""), array.array("f", lg0)
    d = max((abs(x - y) for x, y in zip(a, b)), default=None)
    check(d is not None and len(a) == len(b) and d < 1e-4,
          "prompt logits within 1e-4 of the local run's (max |d| %s)" % d)
    log = read(os.path.join(WORK, "n-gpu.log"))
    want = "device: %d of %d experts kept there" % (n_pairs // 2, n_pairs // 2)
    check(want in log, "the device node kept its FP8 pairs on the device ('%s')" % want)
    check(" 0 local," in read(se), "no group ran on the coordinator")


def scen_security():
    ids0, lg0 = run_local(24, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    ep = "tcp://127.0.0.1:%d" % port
    good_tok = token(state)  # single-use
    node("good", port, os.path.join(WORK, "good"), os.path.join(WORK, "good.log"), "1G", good_tok)
    # the coordinator waits for 3 ready nodes: the attacks happen while it waits; the two
    # lying nodes become ready, get FFN requests, answer wrongly and are dropped
    p, so, se, out = coordinator("sec", port, state, 24, 3)
    wait_log(se, "node good ready")
    # 1,500 idle TCP connections, made and then closed by the coordinator while the next four
    # nodes are refused (~15 s alone, most of it the kernel's SYN retries against the
    # coordinator's full accept queue, which the nodes' joins now share; the mode takes no
    # token)
    idle_evil = subprocess.Popen([EVIL, "idle", ep, "-"], stdout=subprocess.PIPE, text=True)
    procs.append(idle_evil)

    def refused_node(name, tok, expect, state_dir=None, copy_pin=False):
        sd = state_dir or os.path.join(WORK, "att-" + name)
        if copy_pin:
            os.makedirs(sd, exist_ok=True)
            shutil.copy(os.path.join(WORK, "good", "coordinator"), os.path.join(sd, "coordinator"))
        lg = os.path.join(WORK, "att-%s.log" % name)
        q = node(name, port, sd, lg, "1G", tok)
        try:
            rc = q.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            q.kill()
            rc = None
        check(rc == 3 and expect in read(lg), "%s: node refused (exit %s, '%s')" % (name, rc, expect))

    # no token outstanding: an unknown key fails the CURVE handshake (ZAP)
    refused_node("unknown-key", None, "not admitted", copy_pin=True)
    check("unknown key" in read(se), "coordinator logged the unknown key")
    # reused single-use token
    reusable = token(state, "--reusable")  # opens the token window for the attackers below
    # a token that expires in 1 s, issued now: it expires while the next two nodes are refused
    short = token(state, "--ttl", "1")
    t_short = time.monotonic()
    # (a node whose key is unknown redeems a token on the token's join key; the handshake
    # refuses the join key of a used, wrong or expired token, so nothing is read from it)
    refused_node("reused", good_tok, "the token is not open there")
    # wrong secret
    bad = good_tok[:-4] + ("0000" if not good_tok.endswith("0000") else "1111")
    refused_node("wrong", bad, "the token is not open there")
    # expired token
    time.sleep(max(0.0, 2.1 - (time.monotonic() - t_short)))  # wall-clock expiry: no event
    refused_node("expired", short, "the token is not open there")
    try:
        o, _ = idle_evil.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        idle_evil.kill()
        o = ""
    check(idle_evil.returncode == 0 and "1500 idle connections opened, 0 still open" in o,
          "evil idle: %s" % o.strip())
    # protocol abuse by admitted peers
    for mode, expect in [("garbage", "garbage refused"), ("version", "version refused"),
                         ("plain", "connection closed"),
                         ("stranger", "stranger refused at the handshake while a token is open"),
                         ("churn", "300 keys joined and left, every one admitted")]:
        r = subprocess.run([EVIL, mode, ep, reusable], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and expect in r.stdout, "evil %s: %s" % (mode, r.stdout.strip()))
    evils = [subprocess.Popen([EVIL, mode, ep, reusable], stdout=subprocess.PIPE, text=True)
             for mode in ("truncated", "shape", "nan", "huge")]
    ids, lg = finish(p, so, out)
    for e, mode in zip(evils, ("truncated", "shape", "nan", "huge")):
        try:
            o, _ = e.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            e.kill()
            o = ""
        check(e.returncode == 0 and "dropped" in o, "evil %s: %s" % (mode, o.strip()))
    log = read(se)
    check(ids == ids0 and lg == lg0, "coordinator kept generating: ids and logits identical")
    for what in ["join key: its token was already used", "join key: no open token has this key",
                 "join key: its token expired", "malformed", "unsupported protocol version",
                 "dropped node evil-truncated", "dropped node evil-shape", "wrongly-shaped RESULT",
                 "dropped node evil-nan", "dropped node evil-huge",
                 "slot of departed node churn-",
                 "RESULT with a non-finite or implausible value (nan",
                 "RESULT with a non-finite or implausible value (3e+38"]:
        check(what in log, "coordinator log: '%s'" % what)


def scen_state_modes():
    """The state directory decides who may join: one others can write is refused (the files
    in it: tests/test_transport.c test_allow_list)."""
    r = subprocess.run([DELTAFIN, "cluster", "token", "--ttl", "106751991167300d", "--state-dir",
                        os.path.join(WORK, "ttl")], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "at most 36500d" in r.stderr,
          "a --ttl whose expiry would overflow is refused: " + r.stderr.strip())
    d = os.path.join(WORK, "lax")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o777)
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", d], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode != 0 and "writable by group or others (mode 777)" in r.stderr
          and "chmod 700" in r.stderr, "a mode-777 state directory is refused: " + r.stderr.strip())
    os.chmod(d, 0o700)
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", d], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0 and r.stdout.startswith("dft1_"), "mode 700: a token is issued")
    r = subprocess.run([DELTAFIN, "cluster", "revoke", "2906", "--state-dir", d],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "at least 8 of its 16 hex characters" in r.stderr,
          "revoke with a 4-hex-digit prefix says 8 are needed: " + r.stderr.strip())
    # coordinator addresses that can never work: usage errors naming the part, nothing made
    nd = os.path.join(WORK, "bad-endpoint")
    for addr, says in (("127.0.0.1:99999", "port '99999'"), (":7171", "no host"),
                       ("127.0.0.1:7171:1", "port '7171:1'"), ("127.0.0.1:", "port ''")):
        r = subprocess.run([DFNODE, "join", addr, "--state-dir", nd, "--token", "dft1_x"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and says in r.stderr and not os.path.exists(nd),
              "df-node join %s: exit 2 naming %s (%d: %s)" % (addr, says, r.returncode,
                                                                r.stderr.strip()))


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_decode(s):
    out = b""
    for i in range(0, len(s), 5):
        v = 0
        for c in s[i:i + 5]:
            v = v * 85 + Z85.index(c)
        out += v.to_bytes(4, "big")
    return out


def scen_token_cli():
    """What `cluster init` and `cluster token` print for a person to read."""
    state = os.path.join(WORK, "tok")
    r = subprocess.run([DELTAFIN, "cluster", "init", "--state-dir", state], capture_output=True,
                       text=True, timeout=60)
    pub = ""
    try:
        with open(os.path.join(state, "coordinator.key")) as f:
            pub = f.readline().split()[1]
    except (OSError, IndexError):
        pass
    raw = z85_decode(pub) if len(pub) == 40 else b""
    fp = hashlib.sha256(raw).hexdigest()[:16]
    want = "created coordinator key, fingerprint %s, in %s/coordinator.key\n" % (fp, state)
    check(r.returncode == 0 and len(raw) == 32 and r.stdout == want,
          "cluster init names the new key by its fingerprint: %r" % r.stdout)
    check(pub and pub not in r.stdout + r.stderr, "cluster init does not print the Z85 key")
    r = subprocess.run([DELTAFIN, "cluster", "init", "--state-dir", state], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0 and r.stdout == want.replace("created", "existing", 1),
          "cluster init again: the existing key's fingerprint: %r" % r.stdout)
    line = re.compile(r"join token for coordinator ([0-9a-f]{16}): (single-use|reusable), "
                      r"(?:expires (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \(in ([0-9dhms ]+)\)"
                      r"|never expires)\n")
    for ttl, extra, use, within in (("1h", [], "single-use", "1h"),
                                     ("90061", ["--reusable"], "reusable", "1d 1h 1m 1s"),
                                     ("0", ["--reusable"], "reusable", None)):
        t0 = int(time.time())
        r = subprocess.run([DELTAFIN, "cluster", "token", "--ttl", ttl, "--state-dir", state, *extra],
                           capture_output=True, text=True, timeout=60)
        t1 = int(time.time())
        m = line.fullmatch(r.stderr)
        check(r.returncode == 0 and re.fullmatch(r"dft1_([0-9a-f]{64})_[0-9a-f]{32}\n", r.stdout)
              and r.stdout[5:69] == raw.hex(),
              "cluster token --ttl %s: stdout is the token alone, carrying the key" % ttl)
        check(m is not None and m.group(1) == fp and m.group(2) == use,
              "cluster token --ttl %s: one stderr line with the fingerprint and %s: %r"
              % (ttl, use, r.stderr))
        if not m:
            continue
        try:
            with open(os.path.join(state, "tokens")) as f:
                recorded = int(f.read().splitlines()[-1].split()[1])
        except (OSError, IndexError, ValueError):
            recorded = None
        if within is None:
            check(m.group(3) is None and recorded == 0,
                  "cluster token --ttl 0: 'never expires', as recorded (%s)" % recorded)
            continue
        when = calendar.timegm(time.strptime(m.group(3), "%Y-%m-%dT%H:%M:%SZ"))
        secs = int(ttl) if ttl.isdigit() else 3600
        check(t0 + secs <= when <= t1 + secs and when == recorded and m.group(4) == within,
              "cluster token --ttl %s: expires %s UTC (in %s), the expiry STATE/tokens records"
              % (ttl, m.group(3), m.group(4)))


def scen_idle():
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    n1 = node("idle1", port, os.path.join(WORK, "i1"), os.path.join(WORK, "i1.log"), "1G", tok)
    # waits for 3 nodes that never come: an idle coordinator with one idle node
    p, so, se, out = coordinator("idle", port, state, 4, 3, wait=60)
    wait_log(se, "node idle1 ready")
    c0, n0 = cpu_seconds(p.pid), cpu_seconds(n1.pid)
    t0 = time.monotonic()
    # measuring CPU over an interval: the interval is the point (1.5 s: a spinning or
    # polling process shows at once; 10% of it is 15 clock ticks)
    time.sleep(IDLE_WINDOW)
    dt = time.monotonic() - t0
    dc, dn = cpu_seconds(p.pid) - c0, cpu_seconds(n1.pid) - n0
    check(dc < 0.1 * dt, "idle coordinator used %.3f s CPU in %.1f s" % (dc, dt))
    check(dn < 0.1 * dt, "idle node used %.3f s CPU in %.1f s" % (dn, dt))
    # a revoked key: the running coordinator drops the node, which cannot come back
    rlog = os.path.join(WORK, "rv.log")
    rv = node("rv", port, os.path.join(WORK, "rv"), rlog, "1G", tok)
    wait_log(se, "node rv ready")
    r = subprocess.run([DELTAFIN, "cluster", "revoke", "rv", "--state-dir", state],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "revoked 1 key" in r.stdout, "cluster revoke rv: " + r.stdout.strip())
    wait_log(se, "dropped node rv")
    check("key revoked" in read(se), "the coordinator dropped the revoked node")
    rc = exit_status(rv)
    check(rc == 3 and "not admitted" in read(rlog),
          "the revoked node is refused when it reconnects (exit %s)" % rc)
    r = subprocess.run([DELTAFIN, "cluster", "revoke", "rv", "--state-dir", state],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "no allow-listed key" in r.stderr, "a second revoke finds nothing")
    # the reusable token is still open: it does not admit the revoked key again
    rlog2 = os.path.join(WORK, "rv2.log")
    rv = node("rv", port, os.path.join(WORK, "rv"), rlog2, "1G", tok)
    rc = exit_status(rv)
    check(rc == 3 and "revoked" in read(rlog2),
          "a revoked key is not admitted again by the open reusable token (exit %s)" % rc)
    # one coordinator and one node per state directory: a second of each is refused at once
    r = subprocess.run([DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new",
                        "2", "--cluster", "--cluster-bind", "127.0.0.1", "--cluster-port",
                        str(free_port()), "--state-dir", state], capture_output=True, text=True,
                       timeout=DEADLINE)
    check(r.returncode != 0 and "another coordinator (pid %d)" % p.pid in r.stderr,
          "a second coordinator on the state directory is refused: " + r.stderr.strip()[-160:])
    r = subprocess.run([DFNODE, "join", "127.0.0.1:%d" % port, "--state-dir",
                        os.path.join(WORK, "i1"), "--memory", "1G", "--name", "twin"],
                       capture_output=True, text=True, timeout=DEADLINE)
    check(r.returncode == 1 and "another df-node (pid %d)" % n1.pid in r.stderr,
          "a second df-node on a node's state directory is refused: " + r.stderr.strip()[-160:])
    # dead node: kill -9, the coordinator notices and stays idle
    os.kill(n1.pid, signal.SIGKILL)
    n1.wait()
    wait_log(se, "dropped node idle1")
    c0, t0 = cpu_seconds(p.pid), time.monotonic()
    time.sleep(IDLE_WINDOW)
    dc, dt = cpu_seconds(p.pid) - c0, time.monotonic() - t0
    check(dc < 0.1 * dt, "coordinator with a dead node used %.3f s CPU in %.1f s" % (dc, dt))
    # a node whose coordinator vanishes keeps retrying with backoff, without burning CPU
    n2log = os.path.join(WORK, "i2.log")
    n2 = node("idle2", port, os.path.join(WORK, "i2"), n2log, "1G", tok)
    wait_log(n2log, "ready:")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    wait_log(n2log, "reconnecting", timeout=30)
    check("reconnecting" in read(n2log), "node noticed the coordinator vanished and freed its session")
    n0, t0 = cpu_seconds(n2.pid), time.monotonic()
    time.sleep(IDLE_WINDOW)
    dn, dt = cpu_seconds(n2.pid) - n0, time.monotonic() - t0
    check(dn < 0.1 * dt, "node retrying a vanished coordinator used %.3f s CPU in %.1f s" % (dn, dt))
    check(n2.poll() is None, "node is still running (retrying)")
    # the coordinator comes back: the node rejoins by itself
    p, so, se, out = coordinator("back", port, state, 4, 1, wait=60)
    ids, _ = finish(p, so, out)
    check(ids is not None and len(ids) == 4, "node rejoined the restarted coordinator")


def scen_wrongkey():
    port, state = free_port(), os.path.join(WORK, "coord")
    other = os.path.join(WORK, "other-coord")
    # a token of another coordinator (its key is created on first use)
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", other], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    foreign_tok = r.stdout.strip()
    foreign_fp = re.search(r"coordinator ([0-9a-f]{16})", r.stderr).group(1)
    # a coordinator that is down is retried, quietly, without giving up: this node dials a
    # port nobody listens on for the whole scenario (at least PATIENCE seconds), checked last
    patient_port = free_port()
    while patient_port == port:
        patient_port = free_port()
    patient_log = os.path.join(WORK, "patient.log")
    patient = node("patient", patient_port, os.path.join(WORK, "n-patient"), patient_log, "1G",
                   foreign_tok)
    t_patient = time.monotonic()
    # the coordinator waits for a node that never comes
    p, so, se, out = coordinator("wk", port, state, 4, 1, wait=120)
    wait_log(se, "listening on")
    own_fp = re.search(r"listening on \S+ \(key ([0-9a-f]{16})\)", read(se)).group(1)

    def start(name, tok, tag=""):
        """A node started now; its exit status and time are recorded as it ends."""
        import threading
        lg = os.path.join(WORK, name + tag + ".log")
        q = node(name, port, os.path.join(WORK, "n-" + name), lg, "1G", tok)
        t0, ended = time.monotonic(), {}

        def reap():
            ended["rc"] = q.wait()
            ended["dt"] = time.monotonic() - t0
        th = threading.Thread(target=reap, daemon=True)
        th.start()
        return q, lg, t0, th, ended

    def gives_up(started, name, expect, limit=30.0):
        q, lg, t0, th, ended = started
        th.join(max(0.0, limit - (time.monotonic() - t0)))
        if th.is_alive():
            q.kill()
            th.join()
        rc = ended["rc"] if ended["dt"] < limit else None
        dt = ended["dt"]
        text = read(lg)
        lines = text.splitlines()
        errs = [ln for ln in lines if all(e in ln for e in expect)]
        check(rc == 3 and dt < limit and len(errs) == 1,
              "%s: exit %s after %.1f s, one line with %s" % (name, rc, dt, expect))
        check(len(lines) <= 4, "%s: %d log lines, no flood:\n    %s" % (name, len(lines),
                                                                   "\n    ".join(lines[:6])))
        return text

    # a key this coordinator does not admit (its own key pinned, no token outstanding); it
    # gives up while the node below is still retrying (two nodes at once: the verdicts and
    # the coordinator's lines are each node's own)
    sd = os.path.join(WORK, "n-stranger")
    os.makedirs(sd)
    with open(os.path.join(state, "coordinator.key")) as f:
        pub = f.readline().split()[1]
    with open(os.path.join(sd, "coordinator"), "w") as f:
        f.write("%s tcp://127.0.0.1:%d\n" % (pub, port))
    stranger = start("stranger", None)
    # a token from another coordinator: the pinned key is wrong
    t = gives_up(start("foreign", foreign_tok), "foreign",
                 ["wrong coordinator key", foreign_fp, "from --token", "deltafin cluster token"])
    check(t.count("closed the CURVE handshake; retrying") == 1,
          "foreign: the retry line is written once, not per attempt")
    # the same node again, rejoining with the key it stored: the same verdict
    again = start("foreign", None, tag="-again")
    gives_up(stranger, "stranger", ["not admitted", "remove %s/node.key" % sd,
                                    "deltafin cluster token"])
    gives_up(again, "foreign", ["wrong coordinator key", foreign_fp, "at its first join"])
    log = read(se)
    fails = [ln for ln in log.splitlines() if "CURVE handshake on" in ln]
    check(len(fails) == 1 and own_fp in fails[0],
          "coordinator wrote the handshake failure once for 10 failed handshakes: %d lines"
          % len(fails))
    check(log.count("refused connection from") == 1, "coordinator logged the stranger's refusal")
    check(p.poll() is None, "coordinator still running")
    # how long the node of the coordinator that is down keeps trying is the point
    time.sleep(max(0.0, PATIENCE - (time.monotonic() - t_patient)))
    check(patient.poll() is None, "node of an unreachable coordinator keeps retrying (%.1f s)"
          % (time.monotonic() - t_patient))
    check(len(read(patient_log).splitlines()) <= 2, "and writes nothing per attempt")


def junk_flood(port, stop):
    """Plain-TCP peers that write junk and hang up, one after another until stop is set: the
    coordinator's socket monitor reports events at every moment, its teardown included."""
    import threading

    def loop():
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"\xff\0\0\0\0\0\0\0\x01\x7fjunk")
            except OSError:
                time.sleep(0.01)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def scen_shutdown():
    import http.client
    import json
    import threading
    shim = os.path.join(BUILD, "tests", "libdf_slow_close.so")
    check(os.path.exists(shim), "fault-injection shim built: " + shim)
    env = dict(os.environ, LD_PRELOAD=shim, DF_SLOW_CLOSE_MS="20")
    max_new = 24
    ids0, _ = run_local(max_new, "local")
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state, "--reusable")
    nodes, logs = [], []
    for i, np_ in enumerate([3, 5, 9]):
        logs.append(os.path.join(WORK, "n%d.log" % i))
        nodes.append(node("u%d" % i, port, os.path.join(WORK, "n%d" % i), logs[-1], np_ * PAIR_BYTES,
                          tok, host="127.0.0.%d" % (i + 1), env=env))
    stop = threading.Event()
    junk_flood(port, stop)
    runs = 4
    for k in range(runs):
        p, so, se, out = coordinator("run%d" % k, port, state, max_new, 3, bind="0.0.0.0", env=env)
        ids, _ = finish(p, so, out)
        log = read(se)
        check(ids == ids0 and p.returncode == 0, "run %d: exit 0, ids identical" % k)
        check("3 nodes ready" in log, "run %d: the three nodes (re)joined" % k)
        check("MoE layer calls" in log, "run %d: the cluster teardown finished (its stats line)" % k)
    for i, lg in enumerate(logs):  # (the node writes a repeated line once per 30 s)
        check("coordinator said bye" in read(lg) and nodes[i].poll() is None,
              "node u%d answered the BYEs and still runs" % i)
    # a node frozen near the end: its round trips miss the deadline (or the BYE finds it
    # frozen); the coordinator finishes with the same ids and exits
    ids_long, _ = run_local(200, "local200")
    p, so, se, out = coordinator("frozen", port, state, 200, 3, bind="0.0.0.0", env=env,
                                 extra=("--cluster-timeout", "2"))
    wait_log(se, "3 nodes ready")
    os.kill(nodes[2].pid, signal.SIGSTOP)
    ids, _ = finish(p, so, out)
    os.kill(nodes[2].pid, signal.SIGCONT)
    check(ids == ids_long and p.returncode == 0,
          "a node frozen near the end: exit 0, ids identical")
    check("MoE layer calls" in read(se), "frozen node: the cluster teardown finished")
    # serve --cluster: SIGTERM when idle after a request, SIGINT with a request in flight
    # whose round trips wait on a frozen node
    sm = os.path.join(WORK, "serve-model")
    os.makedirs(sm)
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(MODEL, fn), sm)
    os.symlink(os.path.abspath(os.path.join(MODEL, "model.safetensors")),
               os.path.join(sm, "model.safetensors"))
    with open(os.path.join(sm, "tokenizer.json"), "w") as f:
        f.write(byte_level_tokenizer())

    def serve(tag):
        se = os.path.join(WORK, tag + ".log")
        q = spawn([DELTAFIN, "serve", "--model", sm, "--port", "0", "--no-draft", "--parallel", "2",
                   "--cluster", "--cluster-bind", "0.0.0.0", "--cluster-port", str(port),
                   "--state-dir", state, "--cluster-nodes", "3", "--cluster-wait", "60",
                   "--cluster-timeout", "2"], se, env=env)
        wait_log(se, "listening on http://")
        m = re.search(r"listening on http://[^ ]*:(\d+) ", read(se))
        return q, se, int(m.group(1)) if m else 0

    def complete(hport, n, extra=()):
        c = http.client.HTTPConnection("127.0.0.1", hport, timeout=DEADLINE)
        body = json.dumps({"model": "serve-model",
                           "prompt": [int(x) for x in PROMPT.split(",")] + list(extra),
                           "max_tokens": n, "temperature": 0, "ignore_eos": True})
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        except OSError as e:
            return None, str(e).encode()
        finally:
            c.close()

    def stopped(q, sig, what):
        q.send_signal(sig)
        try:
            rc = q.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            q.kill()
            rc = None
        check(rc == 0, "%s: serve exits 0 (rc %s)" % (what, rc))

    q, se, hport = serve("serve1")
    status, _ = complete(hport, max_new)
    check(status == 200, "serve --cluster answered a completion (HTTP %s)" % status)
    # the prefix cache lives on the coordinator: a prompt that extends the last one starts
    # from its cached positions
    status, b = complete(hport, 4, extra=(7, 8, 9))
    cached = json.loads(b)["usage"]["prompt_tokens_details"]["cached_tokens"] if status == 200 else -1
    check(cached == len(PROMPT.split(",")),
          "serve --cluster: an extended prompt takes the previous one from the prefix cache "
          "(%d cached)" % cached)
    stopped(q, signal.SIGTERM, "SIGTERM when idle")
    q, se, hport = serve("serve2")
    os.kill(nodes[1].pid, signal.SIGSTOP)
    res = {}
    th = threading.Thread(target=lambda: res.update(r=complete(hport, 400)), daemon=True)
    th.start()
    # the request's first forward waits (--cluster-timeout 2) on the frozen node: the signal
    # lands while a round trip is outstanding
    time.sleep(0.5)
    stopped(q, signal.SIGINT, "SIGINT with a request in flight on a frozen node")
    os.kill(nodes[1].pid, signal.SIGCONT)
    th.join(timeout=DEADLINE)
    check(not th.is_alive(), "the in-flight request ended with the server")
    stop.set()


def main():
    if os.path.isdir(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    try:
        {"exact": scen_exact, "stream": scen_stream, "kill": scen_kill,
         "security": scen_security, "device": scen_device, "idle": scen_idle, "wrongkey": scen_wrongkey,
         "ds_fp8": lambda: scen_exact_ds("tiny-ds-fp8"), "ds_fp8_device": scen_ds_fp8_device,
         "ds_bf16": lambda: scen_exact_ds("tiny-ds-bf16"),
         "kl_48b": lambda: scen_exact_ds("tiny-kl-48b"), "shutdown": scen_shutdown,
         "state_modes": scen_state_modes, "token_cli": scen_token_cli, "k3": scen_k3, "k3_kill": scen_k3_kill,
         "k3_badscale": scen_k3_badscale}[SCEN]()
    finally:
        for q in procs:
            if q.poll() is None:
                q.terminate()
        for q in procs:
            try:
                q.wait(timeout=10)
            except subprocess.TimeoutExpired:
                q.kill()
    if failures:
        print("%d check(s) failed; logs in %s" % (len(failures), WORK))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
