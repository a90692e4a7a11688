#!/usr/bin/python3
"""tools/train/train.py — trains and writes the demo target (qwen3_moe) and draft (qwen3).

Owns the pipeline, one command end to end:
  1. tokenise the Brown corpus with the real Qwen3 tokenizer (prepare_corpus.js, node);
  2. train the target from scratch (next-token loss + Qwen3-MoE load-balancing loss);
  3. write models/demo-moe (bf16) and read its embedding table back;
  4. distil the draft from the written (bf16) target — soft cross-entropy against the
     target's next-token distribution — with that bf16 table frozen (tied input/output
     embedding), write models/demo-draft — both files hold byte-identical embed_tokens;
  5. evaluate: held-out perplexity of target, draft and a unigram, expert load, greedy
     equivalence of the training module and tests/reference/qwen3_ref.py on the written
     checkpoints, draft acceptance at k = 4, sample continuations;
  6. write the plots, models/README.md and tests/fixtures/demo_models_greedy.json.
Does not own the model's maths (qwen3_model.py), data handling (data.py), file layout
(export.py) or the measurements (evaluate.py).

Determinism: one seed drives initialisation (torch.manual_seed) and the window order (a
pure function of seed and step); the thread count is fixed (--threads). Training state is
saved every --save-every steps under WORK and a rerun resumes from it.

Usage: /usr/bin/python3 tools/train/train.py [--quick] [--threads N] [...]
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import data  # noqa: E402
import evaluate as ev  # noqa: E402
import export  # noqa: E402
import make_greedy_fixture as greedy_fixture  # noqa: E402
from qwen3_model import (Qwen3LM, distillation_loss, per_layer_balancing_loss, round_to_bf16_,  # noqa: E402
                         tied_cross_entropy, tune_malloc)

TARGET_SHAPE = dict(hidden=128, layers=6, heads=4, kv_heads=2, head_dim=64, inter=512,
                    experts=32, top_k=4, moe_inter=128)
# Part of the resume key: bump when the training step itself changes.
STATE_VERSION = 2
DRAFT_SHAPE = dict(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=64, inter=512)


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if (p.dim() < 2 or name == "embed") else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def decay_steps(steps):
    return max(40, steps // 5)


def lr_at(step, steps, peak, warmup, floor=0.1):
    """Warm-up, constant, then linear decay to floor * peak over the last decay_steps(steps)
    steps. Up to steps - decay_steps(steps) the schedule does not depend on `steps`, so a
    run can be lengthened or shortened from a state saved before its decay begins."""
    if step < warmup:
        return peak * (step + 1) / warmup
    d0 = steps - decay_steps(steps)
    if step < d0:
        return peak
    t = (step - d0 + 1) / decay_steps(steps)
    return peak * (1.0 - (1.0 - floor) * t)


def train_model(name, model, corpus, a, steps, lr, aux_coef, work, teacher=None):
    """Train `model` for `steps` steps; returns the list of logged records. With a
    `teacher` (the draft's target) the loss is the distillation loss against the teacher's
    next-token distribution instead of the cross-entropy against the text's next token."""
    s = model.s
    batches = data.Batches(corpus.train, a.batch, a.seq, a.seed)
    val_w = data.windows(corpus.val, a.seq)[:a.val_windows]
    opt = torch.optim.AdamW(param_groups(model, a.wd), lr=lr, betas=(0.9, 0.95), eps=1e-8)
    hk = hashlib.sha256(json.dumps([name, STATE_VERSION, lr, aux_coef, a.seed, a.batch, a.seq, a.threads, a.wd,
                                    a.warmup, repr(sorted(vars(s).items()))]
                                   + (["distilled"] if teacher is not None else [])).encode())
    for p in model.state_dict().values():  # the starting weights (a draft: the target's table)
        hk.update(p.detach().contiguous().numpy().tobytes())
    key = hk.hexdigest()[:16]
    state_dir = os.path.join(work, "%s_states" % name)
    os.makedirs(state_dir, exist_ok=True)
    log_path = os.path.join(work, "%s_log.jsonl" % name)
    records, start = [], 0
    # States are saved while the learning rate is still constant, so any saved state up to
    # the start of this run's decay is a valid starting point.
    usable = []
    for f in os.listdir(state_dir):
        if f.startswith(key + "-") and f.endswith(".pt"):
            k = int(f[len(key) + 1:-3])
            if k <= steps - decay_steps(steps):
                usable.append(k)
    if usable:
        k = max(usable)
        st = torch.load(os.path.join(state_dir, "%s-%06d.pt" % (key, k)))
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        records, start = st["records"], st["step"]
        log("%s: resuming at step %d" % (name, start))
    with open(log_path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    n_tok = a.batch * a.seq
    t0 = time.time()
    for step in range(start, steps):
        cur = lr_at(step, steps, lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = cur
        x = batches.get(step)
        h, router = model.hidden(x[:, :-1])
        if teacher is None:
            ce = tied_cross_entropy(model, h.reshape(-1, s.hidden), x[:, 1:].reshape(-1)).mean()
        else:
            with torch.no_grad():
                th, _ = teacher.hidden(x[:, :-1])
            ce = distillation_loss(model, h.reshape(-1, s.hidden), teacher, th.reshape(-1, s.hidden)).mean()
        loss = ce
        aux = torch.zeros(())
        if s.n_exp:
            per_layer = per_layer_balancing_loss(router, s.n_exp, s.top_k)
            loss = ce + aux_coef * per_layer.sum()
            aux = per_layer.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        rec = {"step": step + 1, "tokens": (step + 1) * n_tok, "loss": float(ce), "aux": float(aux),
               "lr": cur, "grad_norm": float(gn)}
        if (step + 1) % a.eval_every == 0 or step + 1 == steps:
            model.eval()
            with torch.no_grad():
                hv, rv = model.hidden(val_w[:, :-1])
                rec["val_loss"] = float(model.nll(hv.reshape(-1, s.hidden), val_w[:, 1:].reshape(-1)).mean())
                if rv:  # per-layer share of held-out tokens on the busiest expert
                    rec["val_max_share"] = [float(torch.bincount(sel.reshape(-1), minlength=s.n_exp).max())
                                            / sel.shape[0] for _, sel in rv]
            model.train()
        records.append(rec)
        with open(log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        el = time.time() - t0
        done = step + 1 - start
        if (step + 1) % a.print_every == 0 or "val_loss" in rec or step + 1 == steps:
            log("%s step %d/%d loss %.4f aux %.4f%s%s lr %.2e | %.2f s/step, ETA %.1f min"
                % (name, step + 1, steps, rec["loss"], rec["aux"],
                   (" val %.4f" % rec["val_loss"]) if "val_loss" in rec else "",
                   (" max-share %s" % "/".join("%.2f" % x for x in rec["val_max_share"]))
                   if "val_max_share" in rec else "", cur,
                   el / done, el / done * (steps - step - 1) / 60))
        if (step + 1) % a.save_every == 0 and step + 1 <= steps - decay_steps(steps):
            path = os.path.join(state_dir, "%s-%06d.pt" % (key, step + 1))
            torch.save({"key": key, "model": model.state_dict(), "opt": opt.state_dict(),
                        "records": records, "step": step + 1}, path + ".tmp")
            os.replace(path + ".tmp", path)
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(HERE, "work"), help="scratch folder (git-ignored)")
    ap.add_argument("--models", default=os.path.join(ROOT, "models"), help="output models/ folder")
    ap.add_argument("--fixture", default=os.path.join(ROOT, "tests", "fixtures", "demo_models_greedy.json"))
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256, help="training window (tokens)")
    ap.add_argument("--batch", type=int, default=8, help="windows per step")
    ap.add_argument("--target-steps", type=int, default=1600)
    ap.add_argument("--draft-steps", type=int, default=400)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--aux-coef", type=float, default=0.1, help="router_aux_loss_coef (per MoE layer)")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--max-pos", type=int, default=512, help="max_position_embeddings written")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--val-windows", type=int, default=16)
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--accept-contexts", type=int, default=24)
    ap.add_argument("--accept-new", type=int, default=64)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: a few steps, outputs under WORK/quick instead of models/")
    a = ap.parse_args(argv)
    if a.quick:
        a.work = os.path.join(a.work, "quick")
        a.models = os.path.join(a.work, "models")
        a.fixture = os.path.join(a.work, "demo_models_greedy.json")
        a.target_steps, a.draft_steps, a.eval_every, a.save_every, a.warmup = 4, 4, 2, 2, 2
        a.accept_contexts, a.accept_new, a.val_windows = 2, 8, 4
    os.makedirs(a.work, exist_ok=True)
    torch.set_num_threads(a.threads)
    tune_malloc()
    t_start = time.time()
    times = {}

    # 1. data
    corpus = data.Corpus(data.prepare(os.path.join(HERE, "work")))
    if a.quick:
        corpus.val = corpus.val[:4 * a.seq + 1]
    log("corpus: %d train tokens (%d documents), %d held-out tokens (%d documents), %d token rows trained"
        % (len(corpus.train), len(corpus.train_index), len(corpus.val), len(corpus.val_index),
           len(corpus.active_ids)))

    # 2-3. target
    T = TARGET_SHAPE
    tcfg = export.moe_config(T["hidden"], T["layers"], T["heads"], T["kv_heads"], T["head_dim"], T["inter"],
                             a.max_pos, T["experts"], T["top_k"], T["moe_inter"], a.aux_coef)
    torch.manual_seed(a.seed)
    target = Qwen3LM(tcfg, corpus.active_ids, seed_std=0.02)
    with torch.no_grad():  # embedding rows at unit length: logits start O(1)
        target.embed.normal_(0.0, 1.0 / math.sqrt(T["hidden"]))
    log("target: %.2fM parameters besides the embedding (%.2fM active per token)"
        % (target.n_params() / 1e6, active_params(target) / 1e6))
    t0 = time.time()
    t_rec = train_model("target", target, corpus, a, a.target_steps, a.target_lr, a.aux_coef, a.work)
    times["target_s"] = time.time() - t0
    round_to_bf16_(target)
    target.eval()
    moe_dir = os.path.join(a.models, "demo-moe")
    export.write_folder(target, tcfg, moe_dir)
    log("wrote %s" % moe_dir)

    # 4. draft on the target's bf16 table
    D = DRAFT_SHAPE
    dcfg = export.dense_config(D["hidden"], D["layers"], D["heads"], D["kv_heads"], D["head_dim"], D["inter"], a.max_pos)
    table = export.read_embed(moe_dir)[corpus.active_ids]
    torch.manual_seed(a.seed + 1)
    draft = Qwen3LM(dcfg, corpus.active_ids, embed=table, seed_std=0.02)
    draft.embed.requires_grad_(False)
    log("draft: %.2fM parameters besides the embedding" % (draft.n_params() / 1e6))
    t0 = time.time()
    d_rec = train_model("draft", draft, corpus, a, a.draft_steps, a.draft_lr, 0.0, a.work, teacher=target)
    times["draft_s"] = time.time() - t0
    round_to_bf16_(draft)
    draft.eval()
    assert torch.equal(draft.embed, table), "draft embedding moved"
    draft_dir = os.path.join(a.models, "demo-draft")
    export.write_folder(draft, dcfg, draft_dir)
    log("wrote %s" % draft_dir)

    # 5. evaluation
    t0 = time.time()
    m = {"seed": a.seed, "threads": a.threads, "seq": a.seq, "batch": a.batch,
         "target_steps": a.target_steps, "draft_steps": a.draft_steps,
         "target_lr": a.target_lr, "draft_lr": a.draft_lr, "aux_coef": a.aux_coef, "wd": a.wd,
         "warmup": a.warmup, "max_pos": a.max_pos,
         "target_shape": T, "draft_shape": D,
         "target_params": target.n_params(), "target_active_params": active_params(target),
         "draft_params": draft.n_params(), "embed_rows_trained": len(corpus.active_ids),
         "train_tokens": len(corpus.train), "val_tokens": len(corpus.val),
         "train_docs": len(corpus.train_index), "val_docs": corpus.names(corpus.val_index),
         "target_epochs": a.target_steps * a.batch * a.seq / len(corpus.train),
         "draft_epochs": a.draft_steps * a.batch * a.seq / len(corpus.train)}
    m["nll_target"] = ev.val_nll(target, corpus.val, a.seq)
    m["nll_draft"] = ev.val_nll(draft, corpus.val, a.seq)
    m["nll_unigram"] = data.unigram_nll(corpus.train, corpus.val)
    for k in ("target", "draft", "unigram"):
        m["ppl_" + k] = math.exp(m["nll_" + k])
    log("held-out perplexity: target %.2f, draft %.2f, unigram %.2f"
        % (m["ppl_target"], m["ppl_draft"], m["ppl_unigram"]))
    counts, n_tok = ev.expert_load(target, corpus.val, a.seq)
    share = ev.load_share(counts, n_tok)
    m["expert_counts"] = counts.tolist()
    m["expert_tokens"] = n_tok
    m["expert_max_share"] = [float(r.max()) for r in share]
    m["expert_min_share"] = [float(r.min()) for r in share]
    log("expert load: max share per layer %s" % ", ".join("%.3f" % x for x in m["expert_max_share"]))
    if max(m["expert_max_share"]) > 0.5:
        msg = "a layer routes more than half of the held-out tokens to one expert"
        if not a.quick:
            raise SystemExit("train: " + msg)
        log("warning: " + msg)

    # the fixture: greedy ids of the reference on the written checkpoints ...
    fixture = greedy_fixture.build(a.models, corpus)
    greedy_fixture.write(fixture, a.fixture)
    # ... which the training module (bf16-rounded weights) must reproduce
    t_ref = ev.ref_model(moe_dir)
    d_ref = ev.ref_model(draft_dir)
    m["equivalence_max_logit_diff"] = {}
    for name, mod, ref in (("demo-moe", target, t_ref), ("demo-draft", draft, d_ref)):
        worst = 0.0
        for pi, pr in enumerate(fixture["prompts"]):
            p = pr["ids"]
            mine = ev.module_greedy(mod, p, fixture["max_new"])
            if mine != fixture["models"][name][pi]:
                raise SystemExit("train: %s: training module and reference disagree on greedy ids "
                                 "for prompt %s:\n  module    %s\n  reference %s"
                                 % (name, p, mine, fixture["models"][name][pi]))
            with torch.no_grad():
                plog = ref.forward(p)
            worst = max(worst, float((ev.module_prompt_logits(mod, p) - plog).abs().max()))
        m["equivalence_max_logit_diff"][name] = worst
    log("greedy equivalence module == reference: ok (max prompt-logit diff %s)"
        % ", ".join("%s %.2e" % kv for kv in m["equivalence_max_logit_diff"].items()))
    decoder = data.Decoder()
    m["samples"] = [{"doc": pr["doc"], "prompt": pr["text"],
                     "target": decoder(fixture["models"]["demo-moe"][i]),
                     "draft": decoder(fixture["models"]["demo-draft"][i])}
                    for i, pr in enumerate(fixture["prompts"])]
    m["min_top2_gap"] = fixture["min_top2_gap"]

    ctx = ev.contexts_from_stream(corpus.val, a.accept_contexts, 32, a.seed)
    mean_acc, hist, per_fwd = ev.acceptance(t_ref, d_ref, ctx, a.accept_new, 4)
    m.update({"accept_k": 4, "accept_mean": mean_acc, "accept_hist": hist, "tokens_per_target_forward": per_fwd,
              "accept_contexts": a.accept_contexts, "accept_new": a.accept_new})
    log("acceptance k=4: mean accepted %.3f, tokens per target forward %.3f, histogram %s"
        % (mean_acc, per_fwd, hist))
    times["eval_s"] = time.time() - t0
    times["total_s"] = time.time() - t_start
    m["times"] = times

    # 6. report
    import report  # matplotlib only here
    m["files"] = report.file_sizes(a.models)
    m["packed"] = report.packed_size(a.models)
    report.plots(t_rec, d_rec, counts, n_tok, a.models)
    with open(os.path.join(a.work, "metrics.json"), "w") as f:
        f.write(json.dumps(m, indent=1) + "\n")
    report.readme(m, os.path.join(a.models, "README.md"))
    log("done in %.1f min: %s" % (times["total_s"] / 60, a.models))
    return 0


def active_params(model):
    s = model.s
    n = model.n_params()
    if s.n_exp:
        per = 3 * s.hidden * s.moe_inter
        n -= sum(s.is_moe) * (s.n_exp - s.top_k) * per
    return n


if __name__ == "__main__":
    sys.exit(main())
