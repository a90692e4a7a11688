#!/usr/bin/env python3
"""`deltafin serve` for agents: logprobs and the prefix cache.

logprobs: the top-1 logprob of each generated position equals log-softmax of the logits
`deltafin run --logits-out` writes for that position (to 1e-5; at temperature T of logits / T),
with the draft on and off; with and without the draft, alone and batched, streamed and not, the
logprobs are identical; the refusals of bad values.
Prefix cache: a 3-turn chat's second and third turns take the earlier turns' prompts from the
cache (usage.prompt_tokens_details.cached_tokens) and answer exactly what a server without the
cache answers; the same with the draft; on a Kimi K3 model (KDA recurrent state, which cannot
be cut back far: the prompt-end snapshot is restored); /metrics counts the cached tokens.

usage: server_agent.py DELTAFIN MODEL_DIR
"""
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from server_util import Server, check, finish, metrics, post, run_ref, stream_text, tiny_tiktoken_model  # noqa: E402

EXE, MODEL = sys.argv[1:3]
PROMPT = [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576, 5562]


RUN_LOGITS = {}


def run_logits(ids, temperature=0.0):
    """log-softmax(logits / T) of the last position of `ids`, from deltafin run --logits-out
    (each prompt run once)."""
    key = (tuple(ids), temperature)
    if key not in RUN_LOGITS:
        RUN_LOGITS[key] = _run_logits(ids, temperature)
    return RUN_LOGITS[key]


def _run_logits(ids, temperature):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([EXE, "run", "--model", MODEL, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new", "1", "--no-draft", "--logits-out", f.name],
                       check=True, capture_output=True)
        x = np.fromfile(f.name, dtype=np.float32).reshape(len(ids), -1)[-1].astype(np.float64)
    if temperature > 0:
        x = x / temperature
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


def completion(port, prompt, **kw):
    body = dict(dict(model="m", prompt=prompt, max_tokens=6, temperature=0), **kw)
    st, _, r = post(port, "/v1/completions", body)
    assert st == 200, r
    return r


def chat(port, messages, **kw):
    body = dict(dict(model="m", messages=messages, max_tokens=10, temperature=0), **kw)
    st, _, r = post(port, "/v1/chat/completions", body)
    assert st == 200, r
    return r


def check_logprobs_vs_run(port, label, gen):
    """Completions logprobs of the greedy continuation of PROMPT (gen: its ids, from run)."""
    r = completion(port, PROMPT, logprobs=5)
    lp = r["choices"][0]["logprobs"]
    ok = all(len(lp[k]) == 6 for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"))
    check(ok, f"{label}: completions logprobs has tokens, token_logprobs, top_logprobs and "
          "text_offset per token")
    r0 = completion(port, PROMPT, logprobs=0)["choices"][0]["logprobs"]
    check(r0["token_logprobs"] == lp["token_logprobs"] and r0["top_logprobs"] == [None] * 6,
          f"{label}: logprobs=0 gives the same token logprobs and no alternatives")
    worst = 0.0
    for i in range(3):
        ref = run_logits(PROMPT + gen[:i])
        best = float(ref.max())
        top = list(lp["top_logprobs"][i].values())
        worst = max(worst, abs(best - lp["token_logprobs"][i]), abs(top[0] - best))
        check(len(top) == 5 and top == sorted(top, reverse=True) and
              abs(top[4] - float(np.sort(ref)[-5])) < 1e-5,
              f"{label}: position {i}: the 5 alternatives are the 5 most likely, in order")
    check(worst < 1e-5, f"{label}: top-1 logprobs equal log-softmax of run --logits-out "
          f"(max |diff| {worst:.2e})")


def main():
    work = tempfile.mkdtemp(prefix="df-agent-")
    plain = Server(EXE, MODEL, "--model-name", "m", "--no-draft", "--parallel", "4")
    drafted = Server(EXE, MODEL, "--model-name", "m", "--draft", MODEL, "--parallel", "2")
    cold = Server(EXE, MODEL, "--model-name", "m", "--no-draft", "--no-prefix-cache")
    try:
        # ---- logprobs -------------------------------------------------------------------
        gen = run_ref(EXE, MODEL, None, prompt_ids=PROMPT, max_new=6)
        check_logprobs_vs_run(plain.port, "no draft", gen)
        check_logprobs_vs_run(drafted.port, "draft", gen)
        msgs = [{"role": "user", "content": "The quick brown fox"}]
        a = chat(plain.port, msgs, logprobs=True, top_logprobs=3, max_tokens=12)
        b = chat(drafted.port, msgs, logprobs=True, top_logprobs=3, max_tokens=12)
        la, lb = a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]
        check(la == lb and len(la["content"]) >= 1,
              "chat logprobs (values, tokens, bytes, top 3) identical with and without the draft")
        e0 = la["content"][0]
        check(set(e0) == {"token", "logprob", "bytes", "top_logprobs"} and len(e0["top_logprobs"]) == 3
              and e0["top_logprobs"][0]["logprob"] >= e0["top_logprobs"][1]["logprob"]
              and bytes(e0["bytes"]).decode("utf-8", "replace") == e0["token"],
              "a chat logprobs entry: token, logprob, bytes, top_logprobs most likely first")
        pool = concurrent.futures.ThreadPoolExecutor(4)
        batch = list(pool.map(lambda _: chat(plain.port, msgs, logprobs=True, top_logprobs=3,
                                             max_tokens=12), range(4)))
        check(all(x["choices"][0]["logprobs"] == la for x in batch),
              "4 concurrent requests (batched) give the logprobs of one alone")
        st, text, fin, usage, ev = stream_text(plain.port, "/v1/chat/completions",
                                               dict(model="m", messages=msgs, temperature=0,
                                                    max_tokens=12, logprobs=True, top_logprobs=3))
        streamed = []
        for e in ev[:-1]:
            for ch in json.loads(e)["choices"]:
                if ch.get("logprobs"):
                    streamed += ch["logprobs"]["content"]
        check(streamed == la["content"] and text == a["choices"][0]["message"]["content"],
              "streamed chunks carry the same logprobs as the whole answer")
        # temperature: log-softmax(logits / T) at the first position
        r = completion(plain.port, PROMPT, logprobs=1, temperature=0.7, seed=3, max_tokens=1)
        ref = run_logits(PROMPT, 0.7)
        got = list(r["choices"][0]["logprobs"]["top_logprobs"][0].values())[0]
        check(abs(float(ref.max()) - got) < 1e-5,
              f"temperature 0.7: the most likely token's logprob is that of log-softmax("
              f"logits / 0.7) (|diff| {abs(float(ref.max()) - got):.2e})")
        for body, what in [(dict(messages=msgs, logprobs=True, top_logprobs=21), "top_logprobs 21"),
                           (dict(messages=msgs, top_logprobs=2), "top_logprobs without logprobs"),
                           (dict(messages=msgs, logprobs=1), "chat logprobs as a number")]:
            st, _, r = post(plain.port, "/v1/chat/completions", dict(model="m", **body))
            check(st == 400, f"{what} is refused with 400 ({r})")
        st, _, r = post(plain.port, "/v1/completions", dict(model="m", prompt="hi", logprobs=6))
        check(st == 400, "completions logprobs 6 is refused with 400")

        # ---- prefix cache -----------------------------------------------------------------
        def three_turns(port, **kw):
            conv = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name three colours."}]
            out = []
            for nxt in ["And three animals?", "Which of those is the fastest?", None]:
                r = chat(port, conv, max_tokens=10, **kw)
                ans = r["choices"][0]["message"]["content"]
                out.append((ans, r["usage"]))
                if nxt is None:
                    break
                conv = conv + [{"role": "assistant", "content": ans},
                               {"role": "user", "content": nxt}]
            return out

        base = three_turns(cold.port)
        check(all(u["prompt_tokens_details"]["cached_tokens"] == 0 for _, u in base),
              "--no-prefix-cache: no cached tokens")
        for srv, label in [(plain, "no draft"), (drafted, "draft")]:
            got = three_turns(srv.port)
            check([a for a, _ in got] == [a for a, _ in base],
                  f"prefix cache ({label}): the three answers equal a cold server's")
            u = [x for _, x in got]
            ok = (u[1]["prompt_tokens_details"]["cached_tokens"] >= u[0]["prompt_tokens"] and
                  u[2]["prompt_tokens_details"]["cached_tokens"] >= u[1]["prompt_tokens"])
            check(ok, f"prefix cache ({label}): turns 2 and 3 take the previous prompt from the "
                  f"cache ({[x['prompt_tokens_details']['cached_tokens'] for x in u]} cached of "
                  f"{[x['prompt_tokens'] for x in u]})")
        m = metrics(plain.port)
        check(m.get("deltafin_prompt_cached_tokens_total", 0) > 0,
              "/metrics counts deltafin_prompt_cached_tokens_total")

        # the same three turns with another conversation in between (both kept: --parallel 4)
        other = [{"role": "user", "content": "Something else entirely, please."}]
        conv = [{"role": "user", "content": "Count to five."}]
        r1 = chat(plain.port, conv)
        chat(plain.port, other)
        conv2 = conv + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                        {"role": "user", "content": "Now backwards."}]
        r2 = chat(plain.port, conv2)
        r2c = chat(cold.port, conv2)
        check(r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= r1["usage"]["prompt_tokens"]
              and r2["choices"][0]["message"]["content"] == r2c["choices"][0]["message"]["content"],
              "a conversation interleaved with another still continues from its cache")
    finally:
        for s in (plain, drafted, cold):
            s.stop()

    # ---- a recurrent-state model (tiny Kimi K3: KDA layers) -------------------------------
    k3 = tiny_tiktoken_model(work, "kimi-k3-tiny", os.path.join(HERE, "tokenizer", "tiktoken_tiny"),
                             k3=True)
    warm = Server(EXE, k3, "--model-name", "m", "--no-draft")
    coldk = Server(EXE, k3, "--model-name", "m", "--no-draft", "--no-prefix-cache")
    try:
        def turns(port):
            conv = [{"role": "user", "content": "hello there"}]
            out = []
            for nxt in ["and then?", "more", None]:
                body = dict(model="m", messages=conv, max_tokens=40, temperature=0,
                            ignore_eos=True)
                st, _, r = post(port, "/v1/chat/completions", body)
                assert st == 200, r
                ans = r["choices"][0]["message"]["content"]
                out.append((ans, r["usage"]))
                if nxt is None:
                    break
                conv = conv + [{"role": "assistant", "content": ans}, {"role": "user", "content": nxt}]
            return out
        a, b = turns(warm.port), turns(coldk.port)
        check([x for x, _ in a] == [x for x, _ in b],
              "Kimi K3 (recurrent KDA state): answers with the prefix cache equal a cold server's")
        u = [x for _, x in a]
        check(u[1]["prompt_tokens_details"]["cached_tokens"] >= u[0]["prompt_tokens"] and
              u[2]["prompt_tokens_details"]["cached_tokens"] >= u[1]["prompt_tokens"],
              f"Kimi K3: turns 2 and 3 start from the previous prompt's state snapshot "
              f"({[x['prompt_tokens_details']['cached_tokens'] for x in u]} cached of "
              f"{[x['prompt_tokens'] for x in u]})")
    finally:
        warm.stop()
        coldk.stop()
    finish()


if __name__ == "__main__":
    main()
