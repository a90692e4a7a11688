#!/usr/bin/env python3
"""`deltafin run --chat` and `serve` on a tiny Kimi K3 folder (tests/tokenizer/tiktoken_tiny: the
tiny tiktoken vocabulary with K3's special names and no chat template, so XTML is used, over
kimi_k3_ckpt.py's tiny-k3 checkpoint at that vocabulary size, 1141: Attention Residuals,
latent MoE, SiTU, MXFP4 experts). The chat prompt must be exactly the golden ids of
tests/tokenizer/gen_k3_goldens.py (jinja2 text, the independent Python segmenter, each segment
encoded alone by the Python tiktoken oracle; a typed <|end_of_msg|> stays text): the prompt
logits of `--prompt TEXT --chat` equal those of `--prompt-ids` with those ids, byte for byte,
with the defaults (thinking on, effort max), with --system and with --no-think.

usage: cli_kimi_k3_chat.py DELTAFIN WORK_DIR
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tokenizer"))
import gen_k3_goldens as g  # noqa: E402  (jinja2 + the segmenter + the tiktoken oracle)

from server_util import Server, check, failures, post, run_ref, tiny_tiktoken_model  # noqa: E402


def main():
    exe, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    model = tiny_tiktoken_model(work, "kimi-k3-tiny", os.path.join(HERE, "tokenizer", "tiktoken_tiny"),
                                k3=True)
    template = g.template_text()  # optional (see gen_k3_goldens.py)
    oracle = g.oracle()
    text = "Say <|end_of_msg|><|open|>message hi, 你好 café"
    common = ["--model", model, "--max-new", "4", "--temperature", "0", "--no-draft"]
    for system, think in ((None, True), ("Be brief.", True), (None, False)):
        msgs = ([g.S(system)] if system else []) + [g.U(text)]
        opts = {"add_generation_prompt": True}
        if not think:
            opts["thinking"] = False
        segs = g.segments(msgs, opts)
        if template is not None:
            assert "".join(t for _, t in segs) == g.render(template, msgs, opts)
        ids = [i for k, t in segs
               for i in ([oracle.specials[t]] if k == "special" else oracle.encode(t, False))]
        la, lb = os.path.join(work, "chat.f32"), os.path.join(work, "ids.f32")
        extra = (["--system", system] if system else []) + ([] if think else ["--no-think"])
        a = subprocess.run([exe, "run", *common, "--prompt", text, "--chat", *extra,
                            "--logits-out", la, "--stats"], capture_output=True, text=True)
        b = subprocess.run([exe, "run", *common, "--prompt-ids", ",".join(map(str, ids)),
                            "--logits-out", lb], capture_output=True, text=True)
        what = ("with --system" if system else "defaults") + ("" if think else ", --no-think")
        check(a.returncode == 0 and f"prefill {len(ids)} tokens" in a.stderr,
              f"run --chat ({what}) prefills the {len(ids)} golden ids: {a.stderr.strip()[:200]}")
        same = (a.returncode == 0 and b.returncode == 0 and
                open(la, "rb").read() == open(lb, "rb").read() and os.path.getsize(la) > 0)
        check(same, f"run --chat ({what}): prompt logits equal --prompt-ids of the golden ids")
    # the server's chat endpoint: the same per-segment ids, with K3's request switches
    srv = Server(exe, model, "--no-draft")
    try:
        for kw, opts in (({}, {}),
                         ({"chat_template_kwargs": {"thinking": False}}, {"thinking": False}),
                         ({"chat_template_kwargs": {"thinking_effort": "low"}},
                          {"thinking_effort": "low"}),
                         ({"reasoning_effort": "high"}, {"thinking_effort": "high"}),
                         ({"chat_template_kwargs": {"thinking_effort": None}},
                          {"thinking_effort": None})):
            msgs = [g.U(text)]
            segs = g.segments(msgs, dict(opts, add_generation_prompt=True))
            n_ids = sum(1 if k == "special" else len(oracle.encode(t, False)) for k, t in segs)
            st, _, body = post(srv.port, "/v1/chat/completions",
                                  dict({"model": os.path.basename(model), "messages": msgs,
                                        "temperature": 0, "max_tokens": 2}, **kw))
            check(st == 200 and body["usage"]["prompt_tokens"] == n_ids,
                  f"serve {kw or 'defaults'}: the prompt is the {n_ids} per-segment ids "
                  f"({st} {str(body)[:160]})")
        st, _, body = post(srv.port, "/v1/chat/completions",
                              {"model": os.path.basename(model), "messages": [g.U(text)],
                               "chat_template_kwargs": {"thinking_effort": "huge"}})
        check(st == 400 and "thinking_effort" in str(body), "serve: a bad thinking_effort is 400")
    finally:
        srv.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
