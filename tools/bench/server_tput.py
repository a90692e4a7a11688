#!/usr/bin/python3
"""tools/bench/server_tput.py — aggregate completion throughput of `deltafin serve` at several
numbers of concurrent streams, measured side by side against one server process.

Each stream is a streamed /v1/completions request with a prompt of token ids, max_tokens N,
greedy decoding and ignore_eos; a level's figure is the completion tokens all its streams
report (usage) divided by the wall time from the first request to the last [DONE]; best of
--repeat. Every request has a prompt of its own (no prefix-cache hits), and one untimed pass at
the most streams first pages in the weights and allocates every sequence slot's KV cache. A model folder without tokenizer.json (a random bench checkpoint) is served from
a folder of symlinks plus the tokenizer given by --tokenizer. Prints one JSON object.

usage: server_tput.py DELTAFIN MODEL_DIR [--tokenizer DIR] [--levels 1,4,8] [--tokens N]
                      [--prompt-len N] [--repeat N]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time


def start(exe, model, args):
    p = subprocess.Popen([exe, "serve", "--model", model, "--port", "0", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = []
    deadline = time.time() + 300
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        line = line.decode("utf-8", "replace")
        log.append(line)
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    p.wait()
    raise SystemExit("server_tput: the server did not start:\n" + "".join(log[-20:]))


def stream(port, body, out, i):
    """One streamed request; out[i] = completion tokens from the usage chunk (None on error)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    try:
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            out[i] = None
            sys.stderr.write("server_tput: HTTP %d: %s\n" % (r.status, r.read()[:300]))
            return
        toks, done = None, False
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if ev.get("usage"):
                toks = ev["usage"].get("completion_tokens")
        out[i] = toks if done else None
    except (OSError, ValueError) as e:
        sys.stderr.write("server_tput: %s\n" % e)
        out[i] = None
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("model")
    ap.add_argument("--tokenizer")
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    model = os.path.abspath(a.model.rstrip("/"))
    tmp = None
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        if not a.tokenizer:
            raise SystemExit("server_tput: %s has no tokenizer.json; give --tokenizer DIR" % model)
        tmp = tempfile.mkdtemp(prefix="df-bench-srv-")
        link = os.path.join(tmp, os.path.basename(model))
        os.mkdir(link)
        for f in os.listdir(model):
            if f not in ("tokenizer.json", "tokenizer_config.json"):
                os.symlink(os.path.join(model, f), os.path.join(link, f))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer, f), link)
        model = link
    name = os.path.basename(model)
    cfg = json.load(open(os.path.join(model, "config.json")))
    vocab = cfg["vocab_size"]
    args = ["--quiet", "--no-draft", "--parallel", str(max(levels)), "--max-queue", "64"]
    cmd = "deltafin serve --model %s --port 0 %s" % (name, " ".join(args))
    p, port = start(a.exe, model, args)
    res = {"server_command": cmd, "tokens_per_stream": a.tokens, "prompt_tokens": a.prompt_len, "levels": []}
    try:
        passes = [0]

        def body(i):
            # every pass its own prompts: no stream starts from another pass's cached prefix
            passes[0] += 1
            prompt = [(1000 + 7919 * (passes[0] * a.prompt_len + j)) % vocab for j in range(a.prompt_len)]
            return {"model": name, "prompt": prompt, "max_tokens": a.tokens, "temperature": 0,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}

        # warm-up: one pass at the most streams pages in the weights of every expert a batch
        # touches and allocates the KV cache of every sequence slot, costs a server pays once,
        # not per request
        n = max(levels)
        warm = [None] * n
        ts = [threading.Thread(target=stream, args=(port, body(i), warm, i)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if any(x is None for x in warm):
            raise SystemExit("server_tput: the warm-up pass failed")
        for n in levels:
            best = None
            for _ in range(a.repeat):
                out = [None] * n
                ts = [threading.Thread(target=stream, args=(port, body(i), out, i)) for i in range(n)]
                t0 = time.time()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                dt = time.time() - t0
                if any(x is None for x in out):
                    raise SystemExit("server_tput: a request at %d streams failed" % n)
                tps = sum(out) / dt
                if best is None or tps > best["tok_s"]:
                    best = {"streams": n, "tok_s": round(tps, 3), "per_stream_tok_s": round(tps / n, 3),
                            "completion_tokens": sum(out), "seconds": round(dt, 3)}
            res["levels"].append(best)
            sys.stderr.write("server: %d streams %.1f completion tok/s aggregate\n" % (n, best["tok_s"]))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
