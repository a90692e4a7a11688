#!/usr/bin/env python3
"""`deltafin serve` under hostile or careless clients: idle sockets cannot starve the server
(more idle connections than the old limit of 256 and /health still answers at once; silent
connections are closed after --idle-timeout, whether they sent nothing, half a request, or
sit idle after a keep-alive request; connections past --max-connections wait and are served
once idle ones are dropped), while long generations (a stream waiting in the queue, a
non-streamed answer) are never cut by that timeout. Requests that cannot fit the context are
refused cheaply: a body of 60000 chat messages gets its 400 (`messages`,
context_length_exceeded) for a fraction of a CPU second instead of being encoded first.

usage: server_robust.py DELTAFIN MODEL_DIR
"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import KEEPALIVE, Server, check, finish, metrics, request, sse_events  # noqa: E402

EXE, MODEL = sys.argv[1:3]
NAME = os.path.basename(MODEL.rstrip("/"))
IDLE = 1  # --idle-timeout of the small server, seconds
N_QUEUED = 5  # 480-token completions ahead of the stream: about 0.5 s each on 2 cores


def closed_by_server(s, within):
    """True when the server closes s (EOF or reset) within `within` seconds."""
    s.settimeout(within)
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def timed_health(port, timeout):
    t0 = time.monotonic()
    try:
        st, _, b = request(port, "GET", "/health", timeout=timeout)
    except OSError as e:
        return None, "%s after %.1f s" % (e.__class__.__name__, time.monotonic() - t0)
    return st, "%d %s after %.2f s" % (st, b.decode(errors="replace"), time.monotonic() - t0)


def health_from(port, source, timeout):
    """GET /health from local address `source` (127.0.0.x: another client host on loopback)."""
    sk = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    try:
        sk.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return sk.recv(4096).split(b"\r\n", 1)[0]
    except OSError as e:
        return repr(e).encode()
    finally:
        sk.close()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def oversized_refused_cheaply(srv):
    """Context 512: far too many messages, or too many prompt ids, are refused with the
    OpenAI-shaped 400 naming the field, costing the server little CPU."""
    for path, body, param in [
            ("/v1/chat/completions",
             {"model": NAME, "messages": [{"role": "user", "content": "a"}] * 60000,
              "max_tokens": 1}, "messages"),
            ("/v1/completions", {"model": NAME, "prompt": [1] * 300000, "max_tokens": 1},
             "prompt")]:
        raw = json.dumps(body).encode()
        c0, t0 = cpu_seconds(srv.p.pid), time.monotonic()
        st, _, b = request(srv.port, "POST", path, raw)
        dc, dt = cpu_seconds(srv.p.pid) - c0, time.monotonic() - t0
        err = json.loads(b).get("error", {}) if st == 400 else {}
        check(st == 400 and err.get("param") == param and
              err.get("code") == "context_length_exceeded" and
              err.get("type") == "invalid_request_error",
              "%s with a %.1f MB body: %d %s" % (path, len(raw) / 1e6, st, b[:160].decode()))
        check(dc < 1.0, "%s refused after %.2f s CPU (%.2f s wall)" % (path, dc, dt))
    st, _, b = request(srv.port, "GET", "/health", timeout=5)
    check(st == 200, "server healthy after the oversized requests")


def generations_outlive_idle_timeout(port):
    """--parallel 1: five long non-streamed completions queue one behind the other and a
    stream waits behind them after its first (role) event; every answer arrives whole."""
    out = {}

    def plain(i):
        t0 = time.monotonic()
        try:
            st, _, b = request(port, "POST", "/v1/completions",
                               {"model": NAME, "prompt": "hello", "max_tokens": 480,
                                "ignore_eos": True, "temperature": 0})
            out[i] = (st, json.loads(b), time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            out[i] = (None, repr(e), time.monotonic() - t0)

    def stream():
        t0 = time.monotonic()
        try:
            st, _, b = request(port, "POST", "/v1/chat/completions",
                               {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 8, "ignore_eos": True, "temperature": 0,
                                "stream": True, "stream_options": {"include_usage": True}})
            out["s"] = (st, b, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            out["s"] = (None, repr(e), time.monotonic() - t0)

    th = []
    for i in range(N_QUEUED):
        th.append(threading.Thread(target=plain, args=(i,)))
        th[-1].start()
        time.sleep(0.1)
    th.append(threading.Thread(target=stream))
    th[-1].start()
    for t in th:
        t.join()
    for i in range(N_QUEUED):
        st, b, dt = out[i]
        check(st == 200 and isinstance(b, dict) and b["usage"]["completion_tokens"] == 480,
              "queued non-streamed completion %d answered whole after %.1f s (idle timeout %d s)"
              % (i, dt, IDLE))
    st, b, dt = out["s"]
    ev = sse_events(b) if isinstance(b, bytes) else None
    usage = None
    if ev and ev[-1] == b"[DONE]":
        usage = json.loads(ev[-2]).get("usage")
    check(st == 200 and usage is not None and usage["completion_tokens"] == 8,
          "stream queued for %.1f s ended with its usage and [DONE]" % dt)
    check(dt > 1.5 * IDLE, "the stream's wait (%.1f s) outlasted the idle timeout (%d s)" % (dt, IDLE))
    # while it waited it was never silent for the idle timeout: a keep-alive comment at least
    # every IDLE / 2 s (libmicrohttpd 1.0 keeps timing a connection whose callback waits)
    n_ka = b.count(KEEPALIVE) if isinstance(b, bytes) else 0
    check(n_ka >= int(dt / IDLE), "the waiting stream sent %d keep-alive comments in %.1f s" % (n_ka, dt))


def prompts_over_the_chunk():
    """Prompts waiting together for more tokens than one step feeds (--chunk 8) while another
    sequence decodes: each gets its share in turn, and every answer equals its answer alone
    (the scheduler once sent the prompts left without budget as empty sequences, failing the
    whole batch with 500)."""
    srv = Server(EXE, MODEL, "--no-draft", "--parallel", "4", "--chunk", "8")
    try:
        def ask(prompt, n):
            st, _, b = request(srv.port, "POST", "/v1/completions",
                               {"model": NAME, "prompt": prompt, "max_tokens": n,
                                "ignore_eos": True, "temperature": 0})
            return st, (json.loads(b)["choices"][0]["text"] if st == 200 else b[:200])
        prompts = [[5 + i + 7 * t for t in range(12)] for i in range(3)]
        alone = [ask(p, 4) for p in prompts]
        long_alone = ask([1, 2, 3], 120)
        out = {}
        th = [threading.Thread(target=lambda: out.__setitem__("long", ask([1, 2, 3], 120)))]
        th[0].start()
        time.sleep(0.3)  # the long one is decoding
        for i, p in enumerate(prompts):
            th.append(threading.Thread(target=lambda i=i, p=p: out.__setitem__(i, ask(p, 4))))
            th[-1].start()
        for t in th:
            t.join()
        check(all(a[0] == 200 for a in alone) and long_alone[0] == 200, "answers alone: 200")
        check(out.get("long") == long_alone, "the decoding sequence's answer is unchanged: %s"
              % (out.get("long", ("missing",))[0],))
        for i in range(3):
            check(out.get(i) == alone[i], "prompt %d of 12 tokens (chunk 8) queued beside "
                  "others: answer equals its answer alone (%s)" % (i, out.get(i, ("missing",))[0]))
    finally:
        check(srv.stop() == 0, "server exits 0 on SIGTERM")


def main():
    # A small server: 1 s idle timeout, 8 connections, 1 sequence at a time.
    srv = Server(EXE, MODEL, "--no-draft", "--parallel", "1", "--idle-timeout", str(IDLE),
                 "--max-connections", "8")
    try:
        generations_outlive_idle_timeout(srv.port)

        # silent connections are closed: nothing sent, half a request, idle keep-alive
        quiet = socket.create_connection(("127.0.0.1", srv.port))
        half = socket.create_connection(("127.0.0.1", srv.port))
        half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        ka = socket.create_connection(("127.0.0.1", srv.port))
        ka.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        ka.settimeout(10)
        first = ka.recv(4096)
        check(first.startswith(b"HTTP/1.1 200"), "keep-alive request answered")
        for s, what in ((quiet, "a connection that sent nothing"),
                        (half, "a connection that sent half a request"),
                        (ka, "an idle keep-alive connection")):
            check(closed_by_server(s, IDLE + 5), "%s is closed after the idle timeout" % what)
            s.close()

        # at the connection limit: more connections wait, and are served once the idle
        # ones are dropped
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(8)]
        time.sleep(0.2)
        st, what = timed_health(srv.port, IDLE + 10)
        check(st == 200, "/health with 8 idle connections at --max-connections 8: " + what)
        for s in idle:
            s.close()
        check(srv.alive(), "server still running")
    finally:
        check(srv.stop() == 0, "server exits 0 on SIGTERM")

    # Default limits: more idle sockets than the old limit of 256 (from three hosts, each under
    # the default --max-connections-per-host 128), /health answers at once.
    srv = Server(EXE, MODEL, "--no-draft")
    try:
        idle = [socket.create_connection(("127.0.0.1", srv.port), source_address=(src, 0))
                for src in ("127.0.0.3", "127.0.0.4") for _ in range(120)]
        idle += [socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.5", 0))
                 for _ in range(60)]
        time.sleep(0.5)
        st, what = timed_health(srv.port, 3)
        check(st == 200, "/health with 300 idle connections open: " + what)
        for s in idle:
            s.close()
        # one host holding many idle connections (a slowloris) gets no more than 128; the
        # others are still served at once
        hog = [socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.6", 0))
               for _ in range(200)]
        time.sleep(0.5)
        refused = 0
        for s in hog:
            s.settimeout(0.05)
            try:
                refused += s.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                refused += 1
        check(refused == 200 - 128, f"a host past --max-connections-per-host 128: its other "
              f"{200 - 128} connections closed at once ({refused})")
        first = health_from(srv.port, "127.0.0.7", 3)
        check(first.startswith(b"HTTP/1.1 200"), "another host is served meanwhile: %r" % first)
        m = metrics(srv.port)
        check(m.get('deltafin_connections_refused_total{reason="per_host"}', 0) >= 72,
              "/metrics counts the refused connections")
        for s in hog:
            s.close()
        oversized_refused_cheaply(srv)
    finally:
        check(srv.stop() == 0, "server exits 0 on SIGTERM")
    prompts_over_the_chunk()
    finish()


if __name__ == "__main__":
    main()
