#!/usr/bin/python3
"""tools/train/make_greedy_fixture.py — tests/fixtures/demo_models_greedy.json from the reference.

Owns: the demo models' test prompts (the first PROMPT_TOKENS tokens of every fifth held-out
Brown document: five prompts from five genres) and their greedy continuations of MAX_NEW
tokens computed by tests/reference/qwen3_ref.py (fp32 forward of the bf16 checkpoints,
lowest index on ties). tests/demo_models.py checks the C engine against this file.
train.py calls build() after writing the models; run this script alone to regenerate the
fixture from models/ as committed.

Usage: make_greedy_fixture.py [--models DIR] [--out FILE]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import data  # noqa: E402
import evaluate as ev  # noqa: E402

MODELS = ("demo-moe", "demo-draft")
PROMPT_TOKENS = 12
MAX_NEW = 48


def prompt_docs(corpus):
    return corpus.val_index[::5]


def prompts(corpus):
    return ev.prompts_from_docs(corpus, prompt_docs(corpus), PROMPT_TOKENS)


def build(models_dir, corpus):
    """The fixture dict: prompts (document, ids, text), each model's greedy ids per prompt,
    and each model's smallest top-1/top-2 logit gap over the rows the ids came from."""
    decoder = data.Decoder()
    ps = prompts(corpus)
    names = corpus.names(prompt_docs(corpus))
    fx = {"max_new": MAX_NEW,
          "prompts": [{"doc": n, "ids": p, "text": decoder(p)} for n, p in zip(names, ps)],
          "models": {}, "min_top2_gap": {}}
    for name in MODELS:
        ref = ev.ref_model(os.path.join(models_dir, name))
        ids_all, gaps = [], []
        for p in ps:
            ids, _, gap = ev.ref_greedy(ref, p, MAX_NEW)
            ids_all.append(ids)
            gaps.append(gap)
        fx["models"][name] = ids_all
        fx["min_top2_gap"][name] = min(gaps)
    return fx


def write(fx, path):
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(fx, indent=1) + "\n")
    os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "demo_models_greedy.json"))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    corpus = data.Corpus(data.prepare(os.path.join(HERE, "work")))
    fx = build(a.models, corpus)
    write(fx, a.out)
    print("make_greedy_fixture: wrote %s (%d prompts x %d tokens, min top-2 gap %s)"
          % (a.out, len(fx["prompts"]), MAX_NEW,
             ", ".join("%s %.3f" % kv for kv in fx["min_top2_gap"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
