#!/usr/bin/env python3
"""Bounded soak of `deltafin serve`: 64 connections at once for --seconds (default 60),
each looping over a mix of streamed and plain chat/completion requests, clients that hang
up mid-stream, malformed bodies, /metrics and /health. Passes when the server never
crashes, every answer has an expected status (200, or 400 for the malformed ones, 429 when
the queue is full), the server is idle at the end, and it exits 0 on SIGTERM — which, in a
build with -fsanitize=address, also means LeakSanitizer found no leak.

usage: server_soak.py DELTAFIN MODEL_DIR [--seconds S] [--conns N]
"""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Server, check, finish, metrics, request  # noqa: E402


def rss_kb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--conns", type=int, default=64)
    a = ap.parse_args()
    name = os.path.basename(a.model.rstrip("/"))
    srv = Server(a.exe, a.model, "--quiet", "--parallel", "16", "--max-queue", "40")
    port = srv.port
    stop_at = time.time() + a.seconds
    lock = threading.Lock()
    stats = {"ok": 0, "bad": 0, "busy": 0, "hangup": 0, "unexpected": []}

    def note(k, what=None):
        with lock:
            if k == "unexpected":
                stats[k].append(what)
            else:
                stats[k] += 1

    def client(i):
        rnd = random.Random(i)
        while time.time() < stop_at:
            kind = rnd.randrange(8)
            try:
                if kind == 0:  # malformed
                    body = rnd.choice([b"{", b"[]", b'{"model":1}', b'{"model":"%s","messages":[],"x":1}' % name.encode(),
                                       bytes(rnd.randrange(256) for _ in range(rnd.randrange(64)))])
                    s, h, b = request(port, "POST", rnd.choice(["/v1/chat/completions", "/v1/completions"]), body)
                    note("bad" if s == 400 else "unexpected", (s, b[:200]))
                elif kind == 1:  # hang up mid-stream
                    body = json.dumps({"model": name, "prompt": "soak %d" % i, "max_tokens": 200,
                                       "ignore_eos": True, "stream": True}).encode()
                    sk = socket.create_connection(("127.0.0.1", port), timeout=60)
                    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    sk.recv(rnd.choice([1, 100, 2000]))
                    sk.close()
                    note("hangup")
                elif kind == 2:
                    s, h, b = request(port, "GET", rnd.choice(["/metrics", "/health", "/v1/models"]))
                    note("ok" if s == 200 else "unexpected", (s, b[:200]))
                else:
                    path = "/v1/chat/completions" if kind % 2 else "/v1/completions"
                    body = {"model": name, "max_tokens": rnd.randrange(1, 24),
                            "temperature": rnd.choice([0, 0.7, 1.0]), "seed": rnd.randrange(1000),
                            "stream": rnd.random() < 0.5, "stop": rnd.choice([None, "e", ["a", "th"]])}
                    if body["stream"] and rnd.random() < 0.5:
                        body["stream_options"] = {"include_usage": True}
                    if path.endswith("chat/completions"):
                        body["messages"] = [{"role": "user", "content": "soak message %d" % rnd.randrange(100)}]
                    else:
                        body["prompt"] = "soak prompt %d" % rnd.randrange(100)
                    s, h, b = request(port, "POST", path, body)
                    if s == 200 and (not body["stream"] or b.endswith(b"data: [DONE]\n\n")):
                        note("ok")
                    elif s == 429:
                        note("busy")
                    elif s in (200, 500) and b"is not in the vocabulary" in b:
                        # random weights sample ids past the tokenizer's last token: the
                        # generation ends with an error (as `deltafin run` does)
                        note("ok")
                    else:
                        note("unexpected", (s, b[-200:]))
            except (OSError, http.client.HTTPException) as e:
                note("unexpected", repr(e))

    rss0 = rss_kb(srv.p.pid)
    ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.conns)]
    for t in ts:
        t.start()
    rss_mid = 0
    while any(t.is_alive() for t in ts):
        time.sleep(0.5)
        if not rss_mid and time.time() > stop_at - a.seconds / 2:
            rss_mid = rss_kb(srv.p.pid)
        if not srv.alive():
            break
    for t in ts:
        t.join(120)
    rss1 = rss_kb(srv.p.pid)
    if not check(srv.alive(), "the server survived the soak"):
        print("".join(srv.log[-60:]))
        finish()
    print(f"      {stats['ok']} ok, {stats['bad']} malformed refused, {stats['busy']} 429, "
          f"{stats['hangup']} hang-ups; RSS {rss0 // 1024} -> {rss_mid // 1024} -> {rss1 // 1024} MiB")
    check(not stats["unexpected"], f"every answer expected ({stats['unexpected'][:5]})")
    check(stats["ok"] > a.conns and stats["bad"] > 0 and stats["hangup"] > 0, "the mix ran")
    t0 = time.time()
    m = {}
    while time.time() - t0 < 30:
        m = metrics(port)
        if m.get("deltafin_running_sequences") == 0 and m.get("deltafin_queue_depth") == 0:
            break
        time.sleep(0.1)
    check(m.get("deltafin_running_sequences") == 0 and m.get("deltafin_queue_depth") == 0,
          "idle after the soak (every hung-up generation was cancelled)")
    rc = srv.stop(timeout=120)
    tail = "".join(srv.log[-20:])
    check(rc == 0, f"clean exit on SIGTERM, no leak reported (status {rc}){'' if rc == 0 else chr(10) + tail}")
    finish()


if __name__ == "__main__":
    main()
