#!/usr/bin/python3
"""tests/bench_smoke.py — the benchmark harness runs end to end and writes what it promises.

Runs tools/bench/suite.py in tiny mode (the tests' tiny fixtures stand in for every
checkpoint; the demo target/draft are tiny-moe-tied/tiny-dense) into WORK_DIR and checks
results.json: the schema, every figure named by docs/PERFORMANCE.md present with its
commands and commit, status ok (the tokenizer and server figures may be "skipped" without
tools/node_modules), the exactness flags the figures carry (speculative output identical
with and without the draft, cluster ids identical to local, plan_k3's predicted and measured
times) and the shape of each figure's
numbers. It never checks a speed: every number only has to be a finite positive value.

usage: bench_smoke.py BUILD_DIR WORK_DIR
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "..", "tools", "bench", "suite.py")
FIGURES = ("memory_bandwidth", "engine_random", "bandwidth_utilisation", "engine_widened_demo",
           "llama_cpp", "speculative", "cluster", "plan_k3", "server", "tokenizer", "wait_policy")
# llama_cpp: tiny mode times the peer only where it is installed already (BUILD/bench/peer, or
# BENCH_LLAMA_CPP); the skip says which
MAY_SKIP = ("server", "tokenizer", "llama_cpp")

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
    return cond


def pos(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def main():
    build, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    p = subprocess.run([sys.executable, SUITE, "--build", build, "--mode", "tiny", "--out", work,
                        "--command", "bench_smoke"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=900)
    sys.stdout.write(p.stderr[-4000:])
    check(p.returncode == 0, "suite.py exit status %d" % p.returncode)
    path = os.path.join(work, "results.json")
    if not check(os.path.exists(path), "results.json written"):
        return report()
    r = json.load(open(path))
    check(r.get("schema") == "deltafin-bench/1", "schema deltafin-bench/1")
    for k in ("command", "commit", "mode", "date", "machine", "load", "figures"):
        check(k in r, "top-level key %s" % k)
    check(r["mode"] == "tiny", "mode tiny")
    check(isinstance(r["load"].get("quiet"), bool), "load.quiet is a boolean")
    F = r["figures"]
    for name in FIGURES:
        f = F.get(name)
        if not check(f is not None, "figure %s present" % name):
            continue
        check(f.get("commit") == r["commit"], "%s: commit" % name)
        check(f.get("status") == "skipped" or
              (len(f.get("commands", [])) > 0 and all(isinstance(c, str) and c for c in f["commands"])),
              "%s: commands" % name)
        ok = f.get("status") == "ok" or (name in MAY_SKIP and f.get("status") == "skipped")
        check(ok, "%s: status %s %s" % (name, f.get("status"), f.get("error", f.get("reason", ""))))
        check(f.get("status") != "ok" or "ratio" in f, "%s: side-by-side ratio" % name)
    if F.get("engine_random", {}).get("status") == "ok":
        for m in F["engine_random"]["models"]:
            for k in ("mem_read_gbs", "decode_ms_per_token", "decode_tok_s", "prefill_tok_s", "gemm64_gflops",
                      "bandwidth_utilisation", "active_bytes_per_token"):
                check(pos(m.get(k)), "engine_random %s: %s positive" % (m.get("label"), k))
            b = m.get("decode_breakdown_s_per_token", {})
            check(set(b) >= {"attention", "router", "experts", "combine", "lm_head"}, "decode breakdown parts")
    if F.get("memory_bandwidth", {}).get("status") == "ok":
        check(pos(F["memory_bandwidth"].get("gbs")), "memory_bandwidth gbs")
    if F.get("engine_widened_demo", {}).get("status") == "ok":
        m = F["engine_widened_demo"]["model"]
        check(m["hidden"] == 4 * 64, "widened target is 4x wider than tiny-moe-tied")
    p = F.get("llama_cpp", {})
    if p.get("status") == "ok":
        check(isinstance(p.get("peer"), str) and "llama.cpp" in p["peer"], "llama_cpp: names its peer and build")
        for m in p["models"]:
            for k in ("deltafin_decode_tok_s", "peer_decode_tok_s", "deltafin_prefill_tok_s", "peer_prefill_tok_s",
                      "decode_ratio", "prefill_ratio"):
                check(pos(m.get(k)), "llama_cpp %s: %s positive" % (m.get("label"), k))
            check(m.get("gguf", "").endswith(".gguf"), "llama_cpp %s: the GGUF it ran" % m.get("label"))
        g = p.get("greedy_ids")
        check(g is None or (g["same"] is True and len(g["peer"]) == 16),
              "llama_cpp: the peer's greedy ids equal Deltafin's on the demo target")
    elif p.get("status") == "skipped":
        check("node-llama-cpp" in p.get("reason", "") or "node" in p.get("reason", ""),
              "llama_cpp: the skip says which peer is missing")
    s = F.get("speculative", {})
    if s.get("status") == "ok":
        check(s.get("identical_output") is True, "speculative: identical output")
        check(0 <= s.get("acceptance", -1) <= 1, "speculative: acceptance in [0, 1]")
        check(pos(s.get("off_ms_per_token")) and pos(s.get("on_ms_per_token")), "speculative: timings")
    c = F.get("cluster", {})
    if c.get("status") == "ok":
        check(c.get("identical_ids") is True, "cluster: ids identical to local")
        check(set(c.get("runs", {})) == {"local", "nodes_1", "nodes_3"}, "cluster: local, 1 and 3 nodes")
        check(all(pos(v.get("decode_ms_per_token")) for v in c["runs"].values()), "cluster: timings")
    pk = F.get("plan_k3", {})
    if pk.get("status") == "ok":
        check(pk.get("identical_ids") is True, "plan_k3: cluster ids identical to local")
        pr = pk.get("prediction", {})
        check(set(pr) == {"local", "nodes_1", "nodes_3"}, "plan_k3: local, 1 and 3 nodes")
        check(all(pos(x.get("measured_ms")) and pos(x.get("predicted_ms")) for x in pr.values()),
              "plan_k3: measured and predicted ms/token")
        check(abs(pr.get("local", {}).get("error", 1)) < 0.01, "plan_k3: the local run is the calibration")
        check(pos(pk.get("loopback", {}).get("app_rtt_ms")) and pos(pk["loopback"].get("gbit_s")),
              "plan_k3: loopback round trip and throughput")
        check(isinstance(pk.get("within_25pct"), bool), "plan_k3: within_25pct flag")
    v = F.get("server", {})
    if v.get("status") == "ok":
        check([x["streams"] for x in v["levels"]] == [1, 4, 8], "server: 1, 4 and 8 streams")
        check(all(pos(x["tok_s"]) and x["completion_tokens"] == x["streams"] * v["tokens_per_stream"]
                  for x in v["levels"]), "server: every stream completed its tokens")
    t = F.get("tokenizer", {})
    if t.get("status") == "ok":
        for name, x in t["tokenizers"].items():
            check(pos(x["c"]["mb_s"]) and pos(x["js"]["mb_s"]), "tokenizer %s: throughputs" % name)
            check(x["same_id_count"] is True, "tokenizer %s: C and JS give as many ids" % name)
    md = os.path.join(work, "results.md")
    check(os.path.exists(md) and "| figure |" in open(md).read(), "results.md table")
    return report()


def report():
    for f in fails:
        print("FAIL " + f)
    print("bench smoke: %s" % ("ok" if not fails else "%d failure(s)" % len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
