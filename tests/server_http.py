#!/usr/bin/env python3
"""`deltafin serve` over plain HTTP: outputs equal `deltafin run`, SSE framing byte-exact
(checked on curl's raw chunked output, no UTF-8 character split across chunks), stop
strings across token boundaries, eight parallel requests equal to the same requests one by
one (and sharing forward passes), the malformed-input table with OpenAI-shaped 4xx errors,
API keys, 429 past --max-queue, a disconnecting client cancelled, /health, /v1/models,
/metrics, and a clean exit on SIGTERM. The main server drafts with the target itself as
its draft (every draft token accepted; greedy requests speculate whenever at most two
sequences run, so drafting starts mid-sequence in the parallel test), the second one with
a random dense draft (nearly every draft token rejected): outputs stay those of
`deltafin run --no-draft` either way.

usage: server_http.py DELTAFIN MODEL_DIR
"""
import concurrent.futures
import json
import shutil
import tempfile
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import (KEEPALIVE, Server, check, finish, metrics, post, request, run_ref, sse_events,  # noqa: E402
                         stream_text)

EXE, MODEL = sys.argv[1:3]
POOL = concurrent.futures.ThreadPoolExecutor(4)
REFS = {}


def ref(key, *a, **kw):
    """`deltafin run` reference outputs, started early in the background (model loading
    dominates a run); ref(key) alone waits for one started before."""
    if a or kw:
        REFS[key] = POOL.submit(run_ref, EXE, MODEL, *a, **kw)
        return REFS[key]
    return REFS[key].result()


def prefetch():
    ref("greedy_chat", "The quick brown fox", chat=True, max_new=24, ignore_eos=True)
    ref("sampled_chat", "The quick brown fox", chat=True, system="Be brief.", no_think=True,
        max_new=20, temperature=0.9, top_p=0.8, top_k=50, seed=11)
    ref("cmpl", "Once upon a time", max_new=16, temperature=0.7, seed=5)
    ref("sse_ids", None, prompt_ids=SSE_PROMPT, max_new=40, ignore_eos=True)
    ref("sse_chat", "hi", chat=True, max_new=6)
    ref("stop_cmpl", "A completion with a stop", max_new=30, ignore_eos=True)
    ref("par", "two", chat=True, max_new=33, temperature=1.0, seed=1)


# a prompt (found by search) whose greedy continuation has a token that ends inside a UTF-8
# character (an emoji's first three bytes)
SSE_PROMPT = [3430, 4430, 17, 5430]
NAME = os.path.basename(MODEL.rstrip("/"))
CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"


def byte_pieces():
    """id -> bytes of that token (GPT-2 byte-level alphabet), special ids -> None."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    bd = {chr(c): b for b, c in zip(bs, cs)}
    tj = json.load(open(os.path.join(MODEL, "tokenizer.json"), encoding="utf-8"))
    out = {v: bytes(bd[c] for c in k) for k, v in tj["model"]["vocab"].items()}
    for t in tj["added_tokens"]:
        out[t["id"]] = None if t["special"] else t["content"].encode()
    return out


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def read_head(sk):
    """Bytes from sk up to the end of a response head (or EOF / an error), then close it."""
    resp = b""
    try:
        while b"\r\n\r\n" not in resp:
            d = sk.recv(4096)
            if not d:
                break
            resp += d
    except OSError:
        pass
    sk.close()
    return resp


def curl_raw(port, path, body):
    """Headers and the HTTP chunks of a streamed response, from curl --raw, keep-alive
    comment chunks left out."""
    r = subprocess.run(["curl", "-sS", "--raw", "-N", "-D", "-", "-H",
                        "Content-Type: application/json", "--data-binary", json.dumps(body),
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, timeout=120)
    data = r.stdout
    head, _, rest = data.partition(b"\r\n\r\n")
    chunks = []
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        if rest[:n] != KEEPALIVE:  # sent only while a stream waits for the model
            chunks.append(rest[:n])
        if rest[n:n + 2] != b"\r\n":
            return head, None
        rest = rest[n + 2:]
    return head.decode("latin-1"), chunks


def test_basics(port):
    s, h, b = request(port, "GET", "/health")
    check(s == 200 and json.loads(b) == {"status": "ok"}, "/health is 200 {status: ok}")
    s, h, b = request(port, "GET", "/v1/models")
    o = json.loads(b)
    check(s == 200 and o["object"] == "list" and [m["id"] for m in o["data"]] == [NAME],
          "/v1/models lists the model by its folder name")
    s, h, b = request(port, "GET", "/v1/models/" + NAME)
    check(s == 200 and json.loads(b)["id"] == NAME, "/v1/models/{id}")


def test_exact(port):
    p = "The quick brown fox"
    want = ref("greedy_chat")
    s, h, o = post(port, CHAT, {"model": NAME, "messages": [{"role": "user", "content": p}],
                                "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    check(s == 200 and h["content-type"].startswith("application/json"), "chat: 200 JSON")
    check(o["object"] == "chat.completion" and o["id"].startswith("chatcmpl-")
          and o["choices"][0]["message"] == {"role": "assistant", "content": want}
          and o["choices"][0]["finish_reason"] == "length",
          "chat (greedy) equals `deltafin run --chat`")
    check(o["usage"]["completion_tokens"] == 24
          and o["usage"]["total_tokens"] == o["usage"]["prompt_tokens"] + 24, "chat usage")
    want = ref("sampled_chat")
    s, h, o = post(port, CHAT, {"model": NAME, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": p}],
        "max_completion_tokens": 20, "temperature": 0.9, "top_p": 0.8, "top_k": 50, "seed": 11,
        "chat_template_kwargs": {"enable_thinking": False}})
    check(s == 200 and o["choices"][0]["message"]["content"] == want,
          "chat (sampled, seeded, system, no thinking) equals `deltafin run`")
    want = ref("cmpl")
    s, h, o = post(port, CMPL, {"model": NAME, "prompt": "Once upon a time", "temperature": 0.7,
                                "top_p": 1, "top_k": 0, "seed": 5})
    check(s == 200 and o["object"] == "text_completion" and o["choices"][0]["text"] == want
          and o["usage"]["completion_tokens"] == 16,
          "completion (default max_tokens 16, sampled) equals `deltafin run`")


def test_sse_bytes(port, pieces):
    prompt = SSE_PROMPT
    want_ids = ref("sse_ids")
    bs = [pieces.get(i) for i in want_ids]
    if not check(all(i in pieces for i in want_ids) and
                 any(b is not None and not valid_utf8(b) for b in bs),
                 "the SSE prompt's output has tokens splitting UTF-8 characters"):
        return
    want = b"".join(pieces[i] or b"" for i in want_ids).decode("utf-8", "replace")
    head, chunks = curl_raw(port, CMPL, {"model": NAME, "prompt": prompt, "max_tokens": 40,
                                         "temperature": 0, "ignore_eos": True, "stream": True,
                                         "stream_options": {"include_usage": True}})
    check(head.startswith("HTTP/1.1 200") and "content-type: text/event-stream" in head.lower()
          and "transfer-encoding: chunked" in head.lower(), "SSE: 200, text/event-stream, chunked")
    if not check(chunks is not None and len(chunks) > 3, "SSE: well-formed HTTP chunks"):
        return
    check(all(valid_utf8(c) for c in chunks), "SSE: every HTTP chunk is whole UTF-8 (no character split)")
    ev = [sse_events(c) for c in chunks]
    check(all(e is not None and len(e) == 1 for e in ev), "SSE: each HTTP chunk is exactly one `data: ...\\n\\n` event")
    body = b"".join(chunks)
    check(body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1, "SSE: ends with data: [DONE]")
    objs = [json.loads(c[6:-2]) for c in chunks[:-1]]
    check(all(json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode() == c[6:-2]
              for o, c in zip(objs, chunks)), "SSE: compact JSON, keys in OpenAI's order")
    ids = {o["id"] for o in objs}
    check(len(ids) == 1 and ids.pop().startswith("cmpl-") and len({o["created"] for o in objs}) == 1
          and all(o["object"] == "text_completion" and o["model"] == NAME for o in objs),
          "SSE: one id/created/model for every chunk")
    text = "".join(o["choices"][0]["text"] for o in objs if o["choices"])
    check(text == want, "SSE: streamed text equals the decoding of `deltafin run --prompt-ids`")
    check(any(ord(ch) > 127 for ch in text), "SSE: the output has multi-byte characters")
    fin = [o for o in objs if o["choices"] and o["choices"][0]["finish_reason"]]
    check(len(fin) == 1 and fin[0] is objs[-2] and fin[0]["choices"][0]["finish_reason"] == "length",
          "SSE: one final chunk with finish_reason length, before the usage chunk")
    check(objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 40
          and objs[-1]["usage"]["prompt_tokens"] == 4, "SSE: usage chunk (include_usage)")
    check(all("usage" in o and o["usage"] is None for o in objs[:-1]), "SSE: usage null in the other chunks")

    # chat: role delta first, exact bytes of the frame
    head, chunks = curl_raw(port, CHAT, {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                                         "max_tokens": 6, "temperature": 0, "stream": True})
    objs = [json.loads(c[6:-2]) for c in chunks[:-1]]
    o0 = objs[0]
    check(chunks[0] == ("data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%d,"
                        "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                        "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
                        % (o0["id"], o0["created"], NAME)).encode(),
          "SSE chat: first chunk is the role delta, byte-exact")
    check(chunks[-2] == ("data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%d,"
                         "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                         "\"finish_reason\":\"length\"}]}\n\n" % (o0["id"], o0["created"], NAME)).encode()
          and chunks[-1] == b"data: [DONE]\n\n", "SSE chat: final chunk and [DONE], byte-exact (no usage without include_usage)")
    want = ref("sse_chat")
    check("".join(o["choices"][0]["delta"].get("content", "") for o in objs[1:]) == want,
          "SSE chat: content equals `deltafin run --chat`")


def test_stop(port):
    p = "Stop strings"
    body = {"model": NAME, "messages": [{"role": "user", "content": p}], "max_tokens": 30,
            "temperature": 0, "ignore_eos": True}
    s, text, fin, usage, ev = stream_text(port, CHAT, body)
    deltas = [json.loads(e)["choices"][0]["delta"].get("content", "") for e in ev[1:-2]]
    deltas = [d for d in deltas if d]
    # a stop string spanning the boundary between the 3rd and 4th pieces of text
    i = 3
    stop = deltas[i - 1][-2:] + deltas[i][:2]
    cut = text.find(stop)
    want = text[:cut]
    s, h, o = post(port, CHAT, dict(body, stop=[stop, "\u0001never"]))
    check(s == 200 and o["choices"][0]["message"]["content"] == want
          and o["choices"][0]["finish_reason"] == "stop",
          "stop string across a token boundary: text cut before it, finish_reason stop")
    s, t2, fin2, usage2, ev2 = stream_text(port, CHAT, dict(body, stop=stop,
                                                           stream_options={"include_usage": True}))
    check(t2 == want and fin2 == "stop" and stop not in t2 and usage2["completion_tokens"] < 30,
          "stop string, streamed: never emitted, generation ends there")
    want_c = ref("stop_cmpl")
    stop_c = want_c[5:8]
    s, h, o = post(port, CMPL, {"model": NAME, "prompt": "A completion with a stop", "max_tokens": 30,
                                "temperature": 0, "ignore_eos": True, "stop": stop_c})
    check(s == 200 and o["choices"][0]["text"] == want_c[:want_c.find(stop_c)]
          and o["choices"][0]["finish_reason"] == "stop", "completion with a stop string")


PAR = [
    (CHAT, {"messages": [{"role": "user", "content": "one"}], "max_tokens": 40, "temperature": 0}),
    (CHAT, {"messages": [{"role": "user", "content": "two"}], "max_tokens": 33, "temperature": 1.0, "seed": 1}),
    (CMPL, {"prompt": "three", "max_tokens": 25, "temperature": 0.8, "top_p": 0.9, "seed": 2}),
    (CMPL, {"prompt": "four four four four four four four four four four", "max_tokens": 38,
            "temperature": 0, "stream": True}),
    (CHAT, {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "five"}],
            "max_tokens": 12, "temperature": 1.2, "top_k": 20, "seed": 3, "stream": True}),
    (CMPL, {"prompt": [5, 6, 7, 8, 9], "max_tokens": 40, "temperature": 0, "ignore_eos": True}),
    (CHAT, {"messages": [{"role": "user", "content": "seven " * 30}], "max_tokens": 20, "temperature": 0.5, "seed": 4}),
    (CMPL, {"prompt": "eight", "max_tokens": 1, "temperature": 0}),
]


def do(port, path, body):
    body = dict(body, model=NAME)
    if body.get("stream"):
        s, text, fin, usage, ev = stream_text(port, path, body)
        return s, text, fin
    s, h, o = post(port, path, body)
    if s != 200:
        return s, o, None
    c = o["choices"][0]
    return s, c["message"]["content"] if "message" in c else c["text"], c["finish_reason"]


def test_parallel(port):
    one = [do(port, p, b) for p, b in PAR]
    check(all(r[0] == 200 for r in one), "8 requests one by one: all 200")
    m0 = metrics(port)
    res = [None] * len(PAR)
    go = threading.Barrier(len(PAR))

    def worker(i):
        go.wait()
        res[i] = do(port, *PAR[i])

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(PAR))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m1 = metrics(port)
    check(res == one, "8 parallel requests give the same outputs as one by one")
    steps = m1["deltafin_batch_steps_total"] - m0["deltafin_batch_steps_total"]
    toks = m1["deltafin_completion_tokens_total"] - m0["deltafin_completion_tokens_total"]
    check(steps < 0.6 * toks, f"parallel requests share forward passes ({steps:.0f} steps for {toks:.0f} tokens)")
    want = ref("par")
    check(one[1][1] == want, "a sampled request of the batch equals `deltafin run`")


def test_errors(port):
    msgs = [{"role": "user", "content": "hi"}]
    table = [
        ("malformed JSON", CHAT, b'{"model": "x", "messages": [', 400, None, "could not parse"),
        ("empty body", CHAT, b"", 400, None, "could not parse"),
        ("not an object", CHAT, b"[]", 400, None, "JSON object"),
        ("wrong type", CHAT, {"model": NAME, "messages": msgs, "max_tokens": "5"}, 400, "max_tokens", "integer"),
        ("wrong type (messages)", CHAT, {"model": NAME, "messages": "hi"}, 400, "messages", "array"),
        ("unknown field", CHAT, {"model": NAME, "messages": msgs, "frobnicate": True}, 400, "frobnicate", "Unrecognized"),
        ("n > 1", CHAT, {"model": NAME, "messages": msgs, "n": 3}, 400, "n", "n = 1"),
        ("logprobs", CHAT, {"model": NAME, "messages": msgs, "logprobs": "yes"}, 400, "logprobs", "boolean"),
        ("tools", CHAT, {"model": NAME, "messages": msgs, "tools": [{"type": "function", "function": {"name": "a b"}}]}, 400, "tools[0].function.name", "1 to 64"),
        ("response_format xml", CHAT, {"model": NAME, "messages": msgs, "response_format": {"type": "xml"}}, 400, "response_format.type", "must be"),
        ("unknown model", CHAT, {"model": "gpt-4o", "messages": msgs}, 404, "model", "does not exist"),
        ("missing model", CMPL, {"prompt": "x"}, 400, "model", "model"),
        ("prompt token outside the vocabulary", CMPL, {"model": NAME, "prompt": [1, 999999]}, 400, "prompt", "vocabulary"),
        ("context overflow", CMPL, {"model": NAME, "prompt": "hello", "max_tokens": 100000}, 400, "max_tokens", "maximum context length is 512"),
        ("prompt too long", CMPL, {"model": NAME, "prompt": "word " * 600}, 400, "prompt", "The prompt has"),
    ]
    for what, path, body, status, param, msg in table:
        s, h, o = post(port, path, body)
        ok = (s == status and isinstance(o, dict) and set(o) == {"error"}
              and set(o["error"]) == {"message", "type", "param", "code"}
              and o["error"]["param"] == param and msg in o["error"]["message"]
              and h.get("content-type", "").startswith("application/json"))
        check(ok, f"{what}: {status} with an OpenAI error naming {param} ({s} {o})" if not ok
              else f"{what}: {status} with an OpenAI error naming {param}")
    s, h, o = post(port, CMPL, {"model": NAME, "prompt": "x" * (5 << 20)})
    check(s == 413 and o["error"]["code"] == "request_too_large", "huge body: 413")
    # a huge body sent without Content-Length (chunked upload)
    sk = socket.create_connection(("127.0.0.1", port))
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/json\r\n\r\n")
    piece = b"x" * 65536
    try:
        for _ in range(80):
            sk.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sk.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    sk.settimeout(30)
    resp = read_head(sk)
    check(resp.startswith(b"HTTP/1.1 413"), "huge chunked body: 413")
    # a client that waits for "100 Continue" before sending a body over the limit is refused
    # at once, not invited to upload it
    sk = socket.create_connection(("127.0.0.1", port), timeout=10)
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Expect: 100-continue\r\nContent-Length: 999999999\r\n\r\n")
    resp = read_head(sk)
    check(resp.startswith(b"HTTP/1.1 413"),
          "Expect: 100-continue over --max-body: 413 before any body (%r)" % resp[:40])
    s, h, o = request(port, "GET", CHAT)
    check(s == 405 and json.loads(o)["error"]["code"] == "method_not_allowed", "GET on a POST endpoint: 405")
    check(s == 405 and h.get("allow") == "POST", "GET on a POST endpoint: Allow: POST")
    for path in ("/v1/models", "/health", "/metrics"):
        s, h, o = request(port, "HEAD", path)
        check(s == 200 and o == b"", "HEAD %s: 200 without a body (%d, %r)" % (path, s, o[:40]))
    s, h, o = request(port, "DELETE", "/v1/models")
    check(s == 405 and h.get("allow") == "GET, HEAD", "DELETE /v1/models: 405, Allow: GET, HEAD")
    s, h, o = request(port, "GET", "/v2/nothing")
    check(s == 404 and json.loads(o)["error"]["code"] == "unknown_url", "unknown path: 404")
    s, h, o = request(port, "GET", "/v1/models/other")
    check(s == 404, "unknown model id: 404")
    # garbage on the socket
    for junk in (b"\x00\xff\x13garbage\r\n\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\n{"):
        sk = socket.create_connection(("127.0.0.1", port))
        sk.sendall(junk)
        sk.close()
    s, h, b = request(port, "GET", "/health")
    check(s == 200, "the server is up after every bad request")
    m = metrics(port)
    check(m.get('deltafin_requests_total{endpoint="/v1/chat/completions",code="400"}', 0) >= 6
          and m.get('deltafin_requests_total{endpoint="/v1/completions",code="413"}', 0) >= 1,
          "/metrics counts requests by status")


def test_key_queue_cancel(exe):
    srv = Server(exe, MODEL, "--parallel", "1", "--max-queue", "1", "--quiet",
                 "--draft", MODEL + "-draft", env={"DELTAFIN_API_KEY": "sekret"})
    port = srv.port
    auth = {"Authorization": "Bearer sekret"}
    s, h, o = post(port, CHAT, {"model": NAME, "messages": [{"role": "user", "content": "The quick brown fox"}],
                                "max_tokens": 24, "temperature": 0, "ignore_eos": True}, auth)
    m = metrics(port)
    check(s == 200 and o["choices"][0]["message"]["content"] == ref("greedy_chat")
          and m['deltafin_draft_tokens_total{result="proposed"}'] > 0
          and m["deltafin_draft_acceptance_ratio"] < 0.5,
          "a draft the target rejects: greedy output still equals `deltafin run --no-draft`")
    body = {"model": NAME, "prompt": "x", "max_tokens": 2, "temperature": 0}
    s, h, o = post(port, CMPL, body)
    check(s == 401 and o["error"]["message"].startswith("You didn't provide an API key"), "missing key: 401")
    s, h, o = post(port, CMPL, body, {"Authorization": "Bearer wrong"})
    check(s == 401 and o["error"]["code"] == "invalid_api_key", "wrong key: 401 invalid_api_key")
    s, h, o = post(port, CMPL, body, {"Authorization": "Bearer sekret"})
    check(s == 200, "right key (DELTAFIN_API_KEY): 200")
    s, h, o = post(port, CMPL, body, {"Authorization": "bearer sekret"})
    check(s == 200, "the scheme is case-insensitive (RFC 7235): 'bearer KEY' gets 200 (%s)" % s)
    s, h, o = post(port, CMPL, body, {"Authorization": "bearer wrong"})
    check(s == 401, "'bearer wrong': still 401 (%s)" % s)
    # without the key, the answer comes on the header: a client that then drips its body
    # (one byte a second of a declared 100000) holds nothing
    sk = socket.create_connection(("127.0.0.1", port))
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 100000\r\n\r\n{")
    sk.settimeout(5)
    t0 = time.monotonic()
    try:
        head = sk.recv(4096)
    except OSError:
        head = b""
    check(head.startswith(b"HTTP/1.1 401") and time.monotonic() - t0 < 3,
          f"no key, body still to come: 401 at once ({head[:40]!r})")
    sk.close()
    s, h, b = request(port, "GET", "/health")
    check(s == 200, "/health needs no key")
    # two long streams hold the slot and the queue; a third request is 429
    long_body = json.dumps({"model": NAME, "prompt": "long", "max_tokens": 500, "temperature": 0,
                            "ignore_eos": True, "stream": True}).encode()
    socks = []
    for _ in range(2):
        sk = socket.create_connection(("127.0.0.1", port))
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(long_body), long_body))
        socks.append(sk)
    socks[0].settimeout(30)
    first = socks[0].recv(4096)  # the first stream runs
    time.sleep(0.3)
    s, h, o = post(port, CMPL, body, auth)
    check(s == 429 and h.get("retry-after") == "1" and o["error"]["code"] == "rate_limit_exceeded",
          "past --max-queue: 429 with Retry-After")
    m = metrics(port)
    check(m["deltafin_queue_depth"] == 1 and m["deltafin_running_sequences"] == 1, "/metrics queue depth")
    # the queued client goes away: its place is given back while the first stream still runs,
    # so the next request queues instead of getting a 429
    socks[1].close()
    t0 = time.time()
    while time.time() - t0 < 10 and metrics(port)["deltafin_queue_depth"] != 0:
        time.sleep(0.02)
    m = metrics(port)
    check(m["deltafin_queue_depth"] == 0 and m["deltafin_running_sequences"] == 1,
          "a queued client that disconnects leaves the queue at once")
    later = {}
    th = threading.Thread(target=lambda: later.update(r=post(port, CMPL, body, auth)))
    th.start()
    t0 = time.time()
    while time.time() - t0 < 10 and metrics(port)["deltafin_queue_depth"] != 1:
        time.sleep(0.02)
    check(metrics(port)["deltafin_queue_depth"] == 1 and th.is_alive(),
          "its place is taken by the next request (queued, not 429)")
    # the clients go away: both generations are cancelled and the slot is free again
    c0 = m["deltafin_completion_tokens_total"]
    socks[0].close()
    th.join(60)
    check(later.get("r", (0,))[0] == 200, "the request that took the freed place is served")
    t0 = time.time()
    while time.time() - t0 < 10:
        m = metrics(port)
        if m["deltafin_running_sequences"] == 0 and m["deltafin_queue_depth"] == 0:
            break
        time.sleep(0.02)
    check(m["deltafin_running_sequences"] == 0 and m["deltafin_queue_depth"] == 0
          and m['deltafin_generations_total{reason="cancelled"}'] == 2,
          "disconnected clients: both generations cancelled")
    check(m["deltafin_completion_tokens_total"] - c0 < 500 and first.startswith(b"HTTP/1.1 200"),
          f"the cancelled stream stopped early ({m['deltafin_completion_tokens_total'] - c0:.0f} tokens after the close)")
    s, h, o = post(port, CMPL, body, auth)
    check(s == 200, "the server serves again after the cancellations")
    rc = srv.stop()
    check(rc == 0, f"SIGTERM: clean exit (status {rc})")


def timed(f, *a):
    t0 = time.time()
    f(*a)
    print(f"      ({f.__name__}: {time.time() - t0:.1f} s)", flush=True)


def test_key_file(exe):
    """--api-key-file: the key is the file's first line (not the DELTAFIN_API_KEY of the
    environment); a file others can read, or a symlink, is refused before anything loads."""
    d = tempfile.mkdtemp(prefix="df-keyfile-")
    kf = os.path.join(d, "api.key")
    with open(kf, "w") as f:
        f.write("filekey \n")
    os.chmod(kf, 0o644)
    r = subprocess.run([exe, "serve", "--model", MODEL, "--api-key-file", kf, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "accessible to others (mode 644); chmod 600 it" in r.stderr,
          f"a world-readable key file is refused: {r.stderr.strip()}")
    os.symlink(kf, kf + ".lnk")
    r = subprocess.run([exe, "serve", "--model", MODEL, "--api-key-file", kf + ".lnk", "--port",
                        "0"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "symbolic link" in r.stderr, "a symlinked key file is refused")
    # a key with a NUL byte (it used to become the bytes before the NUL), an empty key by
    # flag or environment (it used to turn the check off without a word)
    nf = os.path.join(d, "nul.key")
    fd = os.open(nf, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"ab\0cd\n")
    os.close(fd)
    r = subprocess.run([exe, "serve", "--model", MODEL, "--api-key-file", nf, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "holds a NUL byte" in r.stderr, "a key file with a NUL byte is refused")
    r = subprocess.run([exe, "serve", "--model", MODEL, "--api-key", "", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--api-key is empty" in r.stderr, "an empty --api-key is refused")
    r = subprocess.run([exe, "serve", "--model", MODEL, "--port", "0"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, DELTAFIN_API_KEY=""))
    check(r.returncode == 2 and "DELTAFIN_API_KEY is set but empty" in r.stderr,
          "an empty DELTAFIN_API_KEY is refused")
    os.chmod(kf, 0o600)
    srv = Server(exe, MODEL, "--quiet", "--no-draft", "--api-key-file", kf,
                 env={"DELTAFIN_API_KEY": "envkey"})
    try:
        body = {"model": NAME, "prompt": "x", "max_tokens": 1, "temperature": 0}
        s, _, _ = post(srv.port, CMPL, body, {"Authorization": "Bearer envkey"})
        check(s == 401, "--api-key-file: the environment's key is not the key")
        s, _, _ = post(srv.port, CMPL, body, {"Authorization": "Bearer filekey"})
        check(s == 200, "--api-key-file: the file's first line (trailing space dropped) is")
    finally:
        srv.stop()
    shutil.rmtree(d, ignore_errors=True)


def main():
    prefetch()
    pieces = byte_pieces()
    srv = Server(EXE, MODEL, "--quiet", "--draft", MODEL, "--draft-max-seqs", "2")
    try:
        timed(test_basics, srv.port)
        timed(test_exact, srv.port)
        timed(test_sse_bytes, srv.port, pieces)
        timed(test_stop, srv.port)
        timed(test_parallel, srv.port)
        timed(test_errors, srv.port)
        check(srv.alive(), "the server is still running")
        m = metrics(srv.port)
        proposed = m['deltafin_draft_tokens_total{result="proposed"}']
        check(m["deltafin_draft_enabled"] == 1 and proposed > 50
              and m["deltafin_draft_acceptance_ratio"] == 1.0,
              "self-draft: greedy requests speculated, every draft token accepted "
              f"({proposed:.0f} proposed, ratio "
              f"{m['deltafin_draft_acceptance_ratio']})")
    finally:
        rc = srv.stop()
    check(rc == 0, f"SIGTERM: clean exit (status {rc})")
    timed(test_key_queue_cancel, EXE)
    timed(test_key_file, EXE)
    r = subprocess.run([EXE, "serve", "--host", "0.0.0.0", "--model", "/nonexistent/model", "--port", "0"],
                       capture_output=True, text=True)
    check("warning: listening on 0.0.0.0 without an API key" in r.stderr and r.returncode == 1,
          "a non-loopback address without a key: warning")
    finish()


if __name__ == "__main__":
    main()
