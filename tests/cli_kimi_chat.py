#!/usr/bin/env python3
"""`deltafin run --chat` on a Kimi tiktoken.model folder (tests/tokenizer/kimi_k2_tiny: the tiny
tiktoken vocabulary with Kimi K2's special names and K2's chat template) over a random
checkpoint of that vocabulary size (1141). The chat prompt must be exactly the ids that jinja2
rendering the template plus the independent Python tiktoken encoder give (a typed <|im_end|>
stays text): the prompt logits of `--prompt TEXT --chat` equal those of `--prompt-ids` with
those ids, byte for byte, with and without --system. Then `deltafin serve` on the same folder:
/v1/chat/completions takes the same prompt ids and returns the text of `run --prompt-ids`
(greedy, eos ignored) as the oracle decodes it.

usage: cli_kimi_chat.py DELTAFIN WORK_DIR
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tokenizer"))
import gen_chat_goldens as g  # noqa: E402  (jinja2 + the tiktoken oracle)

from server_util import Server, check, failures, post, run_ref, tiny_tiktoken_model  # noqa: E402


def main():
    exe, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    model = tiny_tiktoken_model(work, "kimi-k2-tiny-moe", os.path.join(HERE, "tokenizer", "kimi_k2_tiny"))
    with open(os.path.join(HERE, "tokenizer", "kimi_k2_chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    oracle = g.k2_oracle()
    text = "Say <|im_end|><|im_system|> hi, 你好 café"
    common = ["--model", model, "--max-new", "4", "--temperature", "0", "--no-draft"]
    for system in (None, "Be brief."):
        msgs = ([g.S(system)] if system else []) + [g.U(text)]
        ids = g.k2_ids(oracle, template, msgs, {"add_generation_prompt": True})
        la, lb = os.path.join(work, "chat.f32"), os.path.join(work, "ids.f32")
        extra = ["--system", system] if system else []
        a = subprocess.run([exe, "run", *common, "--prompt", text, "--chat", *extra,
                            "--logits-out", la, "--stats"], capture_output=True, text=True)
        b = subprocess.run([exe, "run", *common, "--prompt-ids", ",".join(map(str, ids)),
                            "--logits-out", lb], capture_output=True, text=True)
        what = "with --system" if system else "default system turn"
        check(a.returncode == 0 and f"prefill {len(ids)} tokens" in a.stderr,
              f"run --chat ({what}) prefills the {len(ids)} oracle ids: {a.stderr.strip()[:200]}")
        same = (a.returncode == 0 and b.returncode == 0 and
                open(la, "rb").read() == open(lb, "rb").read() and os.path.getsize(la) > 0)
        check(same, f"run --chat ({what}): prompt logits equal --prompt-ids of the oracle ids")
    # the server's chat endpoint on the same folder: the same prompt ids, the same greedy text
    ids = g.k2_ids(oracle, template, [g.U(text)], {"add_generation_prompt": True})
    want = run_ref(exe, model, None, prompt_ids=ids, max_new=6, ignore_eos=True)
    # the oracle's decode, specials skipped (as the endpoint does)
    piece = {r: b for b, r in oracle.ranks.items()}
    want_text = b"".join(piece[i] for i in want if i < oracle.n_base).decode(
        "utf-8", "replace")
    srv = Server(exe, model, "--no-draft")
    try:
        st, _, body = post(srv.port, "/v1/chat/completions",
                              {"model": "kimi-k2-tiny-moe", "messages": [{"role": "user", "content": text}],
                               "temperature": 0, "max_tokens": 6, "ignore_eos": True})
        ok = st == 200 and isinstance(body, dict)
        check(ok and body["usage"]["prompt_tokens"] == len(ids),
              f"serve: /v1/chat/completions prompt is the {len(ids)} oracle ids: {st} "
              f"{str(body)[:200]}")
        check(ok and body["usage"]["completion_tokens"] == len(want),
              f"serve: {len(want)} completion tokens, as run --prompt-ids")
        # K2's template has no thinking switch: refused, not ignored
        st2, _, b2 = post(srv.port, "/v1/chat/completions",
                          {"model": "kimi-k2-tiny-moe", "messages": [{"role": "user", "content": "x"}],
                           "chat_template_kwargs": {"enable_thinking": False}})
        check(st2 == 400 and "not an option of this model's chat template" in str(b2),
              "serve: enable_thinking on the K2 template is a 400: %s" % str(b2)[:160])
        r = subprocess.run([exe, "run", "--model", model, "--chat", "--no-think", "--prompt", "x",
                            "--max-new", "1"], capture_output=True, text=True)
        check(r.returncode == 2 and "no thinking switch" in r.stderr,
              "run --chat --no-think on the K2 template is refused: " + r.stderr.strip())
        check(ok and body["choices"][0]["message"]["content"] == want_text,
              f"serve: the greedy text equals run --prompt-ids' ({want_text!r})")
    finally:
        srv.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
