#!/usr/bin/env python3
"""`deltafin serve`: a chat answer split into reasoning_content and content.

On a tiny Kimi K3 model (XTML: its think / response elements) and a random model with Qwen3's
vocabulary and chat template (<think>), greedy: a server with `--reasoning-format none` gives
the model's text as written; the default server's reasoning_content and content must be that
text split by this file's own reading of each format (split_ref, written from the formats in
docs/API.md, independent of engine/text/reasoning.c), whole and streamed (the streamed
delta.reasoning_content and delta.content pieces joined), with logprobs riding on the chunks
(as many entries as unstreamed); thinking off on K3 gives no reasoning; K3's
response_format answers and forced tool calls (named and "required", whole and streamed) come
in the response / tools elements (content, tool_calls), and asking for thinking with them is
a 400; `--reasoning-format` refuses an unknown value. `deltafin run --chat` prints the same
split with the reasoning between <think> lines.

usage: server_reasoning.py DELTAFIN QWEN3_VOCAB_MODEL WORK_DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from server_util import Server, check, finish, post, request, sse_events, tiny_tiktoken_model  # noqa: E402

EXE, QWEN, WORK = sys.argv[1:4]
WS = " \t\n\r\f\v"

K3_CLOSE_THINK = "<|close|>think<|sep|>"
K3_OPEN_RESP = "<|open|>response<|sep|>"
K3_CLOSE_RESP = "<|close|>response<|sep|>"
K3_CLOSE_MSG = "<|close|>message<|sep|>"
K3_OPEN_TOOLS = "<|open|>tools<|sep|>"
K3_CLOSE_TOOLS = "<|close|>tools<|sep|>"


def k3_outside(t):
    """K3 text after an element closed: (content)."""
    out = ""
    while t:
        hits = [(t.find(m), m) for m in (K3_OPEN_RESP, K3_CLOSE_MSG, K3_OPEN_TOOLS) if m in t]
        at, m = min(hits) if hits else (len(t), None)
        if t[:at].strip(WS):
            out += t[:at].rstrip(WS)
        if m is None:
            return out
        t = t[at + len(m):]
        if m == K3_OPEN_RESP:
            c, sep, t = t.partition(K3_CLOSE_RESP)
            out += c
        elif m == K3_OPEN_TOOLS:
            c, sep, t = t.partition(K3_CLOSE_TOOLS)
            out += K3_OPEN_TOOLS + c + sep
    return out


def split_ref(family, start, text):
    """(reasoning, content) of a whole answer."""
    if family == "k3":
        if start == "in":
            r, sep, rest = text.partition(K3_CLOSE_THINK)
            return (r, "") if not sep else (r, k3_outside(rest))
        c, sep, rest = text.partition(K3_CLOSE_RESP)
        return "", c + (k3_outside(rest) if sep else "")
    s = text.lstrip(WS)
    if start == "out" or not s.startswith("<think>"):
        return "", text
    r, sep, c = s[len("<think>"):].partition("</think>")
    return r.strip("\n"), c.lstrip("\n")


def chat(port, msgs, **kw):
    s, _, b = post(port, "/v1/chat/completions", dict({"model": "m", "messages": msgs,
                                                       "temperature": 0, "max_tokens": 40}, **kw))
    return s, b


def streamed(port, msgs, **kw):
    """(reasoning, content, n_logprobs, every chunk has one of the two keys at most once)."""
    body = dict({"model": "m", "messages": msgs, "temperature": 0, "max_tokens": 40,
                 "stream": True, "logprobs": True}, **kw)
    s, _, b = request(port, "POST", "/v1/chat/completions", body)
    ev = sse_events(b) if s == 200 else None
    if not ev or ev[-1] != b"[DONE]":
        return None, None, 0, False
    r = c = ""
    n_lp, shaped = 0, True
    for e in ev[:-1]:
        o = json.loads(e)
        for ch in o["choices"]:
            d = ch["delta"]
            r += d.get("reasoning_content") or ""
            c += d.get("content") or ""
            shaped &= not ("reasoning_content" in d and d.get("content"))
            n_lp += len((ch.get("logprobs") or {}).get("content") or [])
    return r, c, n_lp, shaped


def main():
    k3 = tiny_tiktoken_model(WORK, "k3-reasoning", os.path.join(HERE, "tokenizer", "tiktoken_tiny"),
                             k3=True)
    prompts = [[{"role": "user", "content": t}] for t in
               ("Hello there", "What is 2+2?", "Tell me about Paris.", "東京の天気は？")]
    for family, model in (("k3", k3), ("qwen3", QWEN)):
        raw = Server(EXE, model, "--no-draft", "--model-name", "m", "--reasoning-format", "none")
        split = Server(EXE, model, "--no-draft", "--model-name", "m")
        try:
            switches = ((("in" if family == "k3" else "auto"), {}),
                        ("out", {"chat_template_kwargs": {"enable_thinking": False}}))
            for start, kw in switches:
                for msgs in prompts:
                    what = f"{family} {start} {msgs[0]['content']!r}"
                    s1, a = chat(raw.port, msgs, **kw)
                    s2, b = chat(split.port, msgs, logprobs=True, **kw)
                    if not check(s1 == 200 and s2 == 200, f"{what}: both answer ({s1}, {s2})"):
                        continue
                    text = a["choices"][0]["message"]["content"]
                    check("reasoning_content" not in a["choices"][0]["message"],
                          f"{what}: --reasoning-format none has no reasoning_content")
                    want_r, want_c = split_ref(family, start, text)
                    m = b["choices"][0]["message"]
                    got = (m.get("reasoning_content") or "", m["content"])
                    check(got == (want_r, want_c),
                          f"{what}: split {got!r} == the format's reading {(want_r, want_c)!r} "
                          f"of {text!r}")
                    check(bool(m.get("reasoning_content")) == bool(want_r),
                          f"{what}: reasoning_content present iff non-empty")
                    if family == "k3" and start == "in":
                        check(want_r != "", f"{what}: thinking on, the answer starts as reasoning")
                    r, c, n_lp, shaped = streamed(split.port, msgs, **kw)
                    check((r, c) == got, f"{what}: streamed pieces join to the same split")
                    check(shaped, f"{what}: no chunk carries both reasoning and content")
                    n_whole = len(b["choices"][0]["logprobs"]["content"])
                    check(n_lp == n_whole and n_whole >= b["usage"]["completion_tokens"] - 1,
                          f"{what}: streamed, the same logprobs entries (one per generated "
                          f"token but the end) ride on the chunks ({n_lp} vs {n_whole})")
            if family == "k3":
                s, b = chat(split.port, prompts[0], response_format={"type": "json_object"},
                            max_tokens=60)
                m = b["choices"][0]["message"] if s == 200 else {}
                check(s == 200 and "reasoning_content" not in m and
                      m.get("content", "").lstrip().startswith("{"),
                      f"k3 json_object: the JSON is the content ({s}: {str(m)[:160]})")
                s, b = chat(split.port, prompts[0], response_format={"type": "json_object"},
                            chat_template_kwargs={"thinking": True})
                check(s == 400 and b["error"]["param"] == "response_format",
                      f"k3 json_object with thinking on is a 400 naming response_format: "
                      f"{str(b)[:200]}")
                # forced tool calls: the prompt opens an empty response element (thinking
                # off), the frame closes it and opens the tools element, the arguments follow
                # the schema; the answer is a call, no reasoning, no markup in content
                tools = [{"type": "function", "function": {
                    "name": n, "parameters": {"type": "object", "properties": {
                        "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
                    for n in ("get_weather", "get_time")]
                for choice in ({"type": "function", "function": {"name": "get_time"}}, "required"):
                    body = {"tools": tools, "tool_choice": choice, "max_tokens": 400}
                    s, b = chat(split.port, prompts[2], **body)
                    m = b["choices"][0]["message"] if s == 200 else {}
                    calls = m.get("tool_calls") or []
                    args = json.loads(calls[0]["function"]["arguments"]) if calls else None
                    want = {"get_time"} if isinstance(choice, dict) else {"get_weather", "get_time"}
                    check(s == 200 and b["choices"][0]["finish_reason"] == "tool_calls" and
                          len(calls) == 1 and calls[0]["function"]["name"] in want and
                          isinstance(args, dict) and isinstance(args.get("city"), str) and
                          not m.get("content") and "reasoning_content" not in m,
                          f"k3 forced call ({choice if isinstance(choice, str) else 'named'}): "
                          f"{str(m)[:300]}")
                    st = request(split.port, "POST", "/v1/chat/completions",
                                 dict(body, model="m", messages=prompts[2], temperature=0,
                                      stream=True))
                    ev = sse_events(st[2]) or []
                    name, arg_text, other = "", "", ""
                    for e in ev[:-1]:
                        d = json.loads(e)["choices"][0]["delta"] if json.loads(e)["choices"] else {}
                        for tc in d.get("tool_calls") or []:
                            name += tc.get("function", {}).get("name") or ""
                            arg_text += tc.get("function", {}).get("arguments") or ""
                        other += (d.get("content") or "") + (d.get("reasoning_content") or "")
                    check(calls and name == calls[0]["function"]["name"] and
                          arg_text == calls[0]["function"]["arguments"] and other == "",
                          f"k3 forced call streamed: the same call, nothing else "
                          f"({name!r}, {arg_text!r}, {other!r})")
                s, b = chat(split.port, prompts[2], tools=tools, tool_choice="required",
                            chat_template_kwargs={"thinking": True})
                check(s == 400 and b["error"]["param"] == "tool_choice",
                      f"k3 forced call with thinking on is a 400 naming tool_choice: {str(b)[:200]}")
                # run --chat prints the same split, the reasoning between <think> lines
                r = subprocess.run([EXE, "run", "--model", k3, "--chat", "--prompt",
                                    prompts[1][0]["content"], "--max-new", "40",
                                    "--temperature", "0", "--no-draft"], capture_output=True)
                _, b = chat(split.port, prompts[1])
                m = b["choices"][0]["message"]
                want = ("<think>\n" + m["reasoning_content"] if m.get("reasoning_content") else "")
                if m["content"]:
                    want += ("\n</think>\n\n" if want else "") + m["content"]
                check(r.returncode == 0 and r.stdout.decode() == want + "\n",
                      f"run --chat prints the split: {r.stdout[:200]!r} vs {want[:200]!r}")
        finally:
            raw.stop()
            split.stop()
    r = subprocess.run([EXE, "serve", "--model", QWEN, "--reasoning-format", "think"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "--reasoning-format: expected split or none, got 'think'"
          in r.stderr, f"--reasoning-format think is refused: {r.stderr.strip()[:200]}")
    finish()


main()
