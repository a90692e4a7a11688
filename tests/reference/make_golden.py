#!/usr/bin/python3
"""tests/reference/make_golden.py — write one golden fixture folder.

Owns: choosing a fixture's prompt and writing golden.json, golden_logits.f32 and
golden_step_logits.f32 next to the checkpoint that make_checkpoint.py writes there. Does not
own: the checkpoint bytes (make_checkpoint.py) or the forward pass (qwen3_ref.py).

Prompt choice (deterministic): candidate c draws 64 ids from the PCG64 stream of
(preset seed, "prompt/c") modulo vocab_size - 2 (never bos/eos, the last two ids). Each
candidate is decoded greedily for 32 tokens in fp32; candidates whose continuation holds an
eos id are dropped, candidates with fewer than --min-distinct different continuation ids are
only used when nothing better exists, and among the rest the one with the largest
min(min_top2_gap / logit_scale, min_router_margin / router_scale) wins, so the fixture keeps
as far from argmax and expert-choice ties as this random model allows.

Usage: make_golden.py --preset NAME --out DIR [--candidates N] [--prompt-len 64] [--new 32]
"""

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref as dr  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import qwen3_ref as qr  # noqa: E402


def candidate_prompt(seed, c, n, vocab):
    w = mc.stream_words(seed, "prompt/%d" % c, n)
    return [int(x) % (vocab - 2) for x in w]


def evaluate(model, prompt, n_new):
    model.stats["min_router_margin"] = math.inf
    if "hf_mask_differs" in model.stats:
        model.stats["hf_mask_differs"] = 0
    with torch.no_grad():
        ids, pl, steps = qr.generate(model, prompt, n_new)
    rows = list(pl) + steps[1:]
    return {
        "prompt": prompt, "ids": ids, "prompt_logits": pl, "steps": torch.stack(steps),
        "min_gap": min(qr.top2_gap(r) for r in rows),
        "min_gap_greedy": min(qr.top2_gap(r) for r in steps),
        "router": model.stats["min_router_margin"],
    }


def dump_json(obj):
    """JSON with one key per line and each list of numbers on a single line."""
    lines = ["  %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in obj.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _f(x):
    return None if x is None or not math.isfinite(x) else float("%.6g" % x)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a golden fixture (checkpoint + reference logits).")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidates", type=int, default=48)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--min-distinct", type=int, default=8)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()

    p = mc.preset_args(a.preset)
    knobs = dict(mc.GEN_DEFAULTS, **p.get("knobs", {}))
    cfg, files, nbytes = mc.write_preset(a.preset, a.out)
    cfg = cfg.get("text_config", cfg)  # K3-style wrapper: the text model's keys
    V = cfg["vocab_size"]
    eos = {cfg["eos_token_id"], cfg["bos_token_id"]}
    m32 = dr.model_for(a.out, "fp32")
    ds = "hf_mask_differs" in m32.stats  # deepseek_ref.py / kimi_linear_ref.py
    ref_file = {"deepseek_ref": "deepseek_ref.py", "kimi_linear_ref": "kimi_linear_ref.py",
                "kimi_k3_ref": "kimi_k3_ref.py"}.get(
        type(m32).__module__, "qwen3_ref.py")

    best, best_key = None, None
    for c in range(a.candidates):
        r = evaluate(m32, candidate_prompt(p["seed"], c, a.prompt_len, V), a.new)
        if eos & set(r["ids"]):
            continue
        if ds and m32.stats["hf_mask_differs"]:
            continue  # keep fixtures where transformers' 0.0 group mask agrees
        distinct = len(set(r["ids"]))
        score = min(r["min_gap"] / knobs["logit_scale"],
                    (r["router"] / knobs.get("margin_unit", knobs["router_scale"]))
                    if math.isfinite(r["router"]) else math.inf)
        key = (min(distinct, a.min_distinct), score)
        if best_key is None or key > best_key:
            best, best_key, r["candidate"], r["distinct"] = r, key, c, distinct
    if best is None:
        raise SystemExit("make_golden: every candidate prompt generated an eos id")

    mbf = dr.model_for(a.out, "bf16")
    with torch.no_grad():
        ids_bf, pl_bf, _ = qr.generate(mbf, best["prompt"], a.new)
    diff = float((best["prompt_logits"] - pl_bf).abs().max())

    best["prompt_logits"].numpy().astype("<f4").tofile(os.path.join(a.out, "golden_logits.f32"))
    best["steps"].numpy().astype("<f4").tofile(os.path.join(a.out, "golden_step_logits.f32"))
    golden = {
        "model": a.preset,
        "generator": "tests/reference/make_checkpoint.py --preset %s" % a.preset,
        "prompt_ids": best["prompt"],
        "greedy_ids": best["ids"],
        "logits_file": "golden_logits.f32",
        "logits_shape": [a.prompt_len, V],
        "step_logits_file": "golden_step_logits.f32",
        "step_logits_shape": [a.new, V],
        "min_top2_gap": _f(best["min_gap"]),
        "min_top2_gap_greedy": _f(best["min_gap_greedy"]),
        "min_router_margin": _f(best["router"]),
        "max_abs_diff_fp32_vs_bf16": _f(diff),
        "greedy_ids_bf16": ids_bf,
        "reference": "tests/reference/%s fp32" % ref_file,
    }
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        f.write(dump_json(golden))
    print("%s: prompt candidate %d, %d distinct greedy ids, min_top2_gap %.4f (greedy %.4f), "
          "router margin %s, fp32-vs-bf16 %.4f, bf16 greedy %s, %.1f s"
          % (a.preset, best["candidate"], best["distinct"], best["min_gap"], best["min_gap_greedy"],
             _f(best["router"]), diff, "same" if ids_bf == best["ids"] else "differs", time.time() - t0),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
