"""tools/train/evaluate.py — measurements of the demo models.

Owns: held-out perplexity (exact full-vocabulary NLL over non-overlapping windows), the
per-layer expert load over held-out text, greedy decoding with the training module, the
equivalence check against tests/reference/qwen3_ref.py on the written bf16 checkpoint, the
speculative-decoding acceptance of the draft against the target (greedy, k draft tokens per
verify step, both models run by the reference), and the sample prompts. Does not own
training or file layout (train.py, export.py).
"""

import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import qwen3_ref  # noqa: E402

from data import windows  # noqa: E402


@torch.no_grad()
def val_nll(model, stream, T, B=8):
    """Mean NLL (nats/token) of `stream` in non-overlapping windows of T predicted tokens."""
    w = windows(stream, T)
    total, n = 0.0, 0
    for a in range(0, w.shape[0], B):
        x = w[a:a + B]
        h, _ = model.hidden(x[:, :-1])
        nll = model.nll(h.reshape(-1, h.shape[-1]), x[:, 1:].reshape(-1))
        total += float(nll.double().sum())
        n += nll.numel()
    return total / n


@torch.no_grad()
def expert_load(model, stream, T, B=8):
    """[n_moe_layers, n_experts] counts of held-out tokens routed to each expert (a token
    counts once for each of its k experts) and the number of tokens."""
    s = model.s
    w = windows(stream, T)
    counts = torch.zeros(sum(s.is_moe), s.n_exp, dtype=torch.int64)
    n = 0
    for a in range(0, w.shape[0], B):
        x = w[a:a + B, :-1]
        _, router = model.hidden(x)
        for li, (_, sel) in enumerate(router):
            counts[li] += torch.bincount(sel.reshape(-1), minlength=s.n_exp)
        n += x.numel()
    return counts, n


def argmax_low(row):
    m = row.max()
    return int(torch.nonzero(row == m)[0, 0])


@torch.no_grad()
def module_greedy(model, prompt, n):
    """Greedy continuation with the training module (full recompute each step)."""
    seq = list(prompt)
    out = []
    for _ in range(n):
        logits = model.full_logits(torch.tensor(seq))
        nxt = argmax_low(logits[-1])
        out.append(nxt)
        seq.append(nxt)
    return out


@torch.no_grad()
def module_prompt_logits(model, prompt):
    return model.full_logits(torch.tensor(prompt))


def ref_model(folder):
    return qwen3_ref.Model(folder, "fp32", threads=0)


@torch.no_grad()
def ref_greedy(ref, prompt, n):
    """(ids, prompt logits [n_prompt, V], min top-2 gap over every row an id was chosen from)."""
    ids, prompt_logits, steps = qwen3_ref.generate(ref, prompt, n)
    gap = min(qwen3_ref.top2_gap(r) for r in steps)
    return ids, prompt_logits, gap


@torch.no_grad()
def acceptance(target_ref, draft_ref, prompts, n_new, k):
    """Greedy speculative decoding with the reference forward of both models. For each
    prompt the target's greedy continuation of n_new tokens is the output; a verify step
    starts at position i, the draft proposes k tokens greedily from prompt + out[:i], the
    longest prefix equal to out[i:i+k] is accepted and the target adds its own token, so
    the next step starts at i + accepted + 1. Returns (mean accepted draft tokens per
    verify step, histogram of accepted counts 0..k, tokens per target forward)."""
    hist = [0] * (k + 1)
    steps = 0
    produced = 0
    for p in prompts:
        out, _, _ = qwen3_ref.generate(target_ref, p, n_new)
        i = 0
        while i < n_new:
            ctx = list(p) + out[:i]
            cache = draft_ref.new_cache()
            row = draft_ref.forward(ctx, cache)[-1]
            prop = []
            for j in range(k):
                t = qwen3_ref.argmax_low(row)
                prop.append(t)
                if j < k - 1:
                    row = draft_ref.forward([t], cache)[-1]
            a = 0
            while a < k and i + a < n_new and prop[a] == out[i + a]:
                a += 1
            hist[a] += 1
            steps += 1
            gained = min(a + 1, n_new - i)
            produced += gained
            i += a + 1
    mean_acc = sum(a * c for a, c in enumerate(hist)) / steps
    return mean_acc, hist, produced / steps


def prompts_from_docs(corpus, index, n_tokens):
    """The first n_tokens ids of each document in `index`."""
    return [[int(t) for t in corpus.doc_ids[i][:n_tokens]] for i in index]


def contexts_from_stream(stream, n, length, seed):
    """n deterministic length-token slices of a held-out stream (acceptance contexts)."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(stream) - length - 1, (n,), generator=g).tolist()
    return [[int(t) for t in stream[s:s + length]] for s in starts]


def ppl(nll):
    return math.exp(nll)


def load_share(counts, n_tokens):
    """Fraction of tokens that route to each expert (a token picks k experts)."""
    return counts.double().numpy() / float(n_tokens)


__all__ = ["val_nll", "expert_load", "module_greedy", "ref_model", "ref_greedy", "acceptance",
           "prompts_from_docs", "contexts_from_stream", "ppl", "load_share", "np"]
