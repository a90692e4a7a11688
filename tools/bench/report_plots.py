#!/usr/bin/python3
"""tools/bench/report_plots.py — PNG plots of a results.json (Debian python3-matplotlib).

  report_plots.py RESULTS_JSON [OUT_DIR]     (suite.py calls plot_all after every run)

Writes, for the figures present with status ok: engine.png (decode and prefill tok/s per
model with the bandwidth-utilisation ratio), breakdown.png (decode ms/token by part),
speculative.png (target alone, draft model and block drafter: speed-up and mean accepted
length), llama_cpp.png (Deltafin and the llama.cpp peer: decode and prefill tok/s), cluster.png, server.png, tokenizer.png. Returns the paths written.
"""
import json
import os
import sys


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _subtitle(res):
    q = "" if res["load"]["quiet"] else ", MEASURED UNDER LOAD"
    return "commit %s, %s CPUs, load %.1f at start, others up to %.1f cores%s" % (
        res["commit"], res["machine"]["cpus"], (res["load"]["start"] or [0])[0],
        res["load"].get("other_cpu_cores_peak") or 0, q)


def _ok(res, name):
    f = res["figures"].get(name)
    return f if f and f.get("status") == "ok" else None


def _engine_runs(res):
    runs = list((_ok(res, "engine_random") or {}).get("models", []))
    w = _ok(res, "engine_widened_demo")
    if w:
        runs.append(w["model"])
    return runs


def plot_all(res, out):
    plt = _plt()
    paths = []

    def save(fig, name):
        p = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)

    runs = _engine_runs(res)
    if runs:
        labels = ["%s\n%.2f GB" % (r["label"], r["size_gb"]) for r in runs]
        fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 4))
        b = a1.bar(labels, [r["decode_tok_s"] for r in runs], color="#4c72b0")
        a1.bar_label(b, fmt="%.1f")
        a1.set_title("decode tok/s")
        b = a2.bar(labels, [r["bandwidth_utilisation"] for r in runs], color="#55a868")
        a2.bar_label(b, fmt="%.2f")
        a2.axhline(0.8, ls="--", color="grey", lw=1)
        a2.set_ylim(0, max(1.0, max(r["bandwidth_utilisation"] for r in runs) * 1.15))
        a2.set_title("decode weight GB/s / read GB/s (%.1f GB/s)" % max(r["mem_read_gbs"] for r in runs), fontsize=10)
        b = a3.bar(labels, [r["prefill_tok_s"] for r in runs], color="#c44e52")
        a3.bar_label(b, fmt="%.0f")
        a3.set_title("prefill tok/s (%d-token prompt)" % runs[0]["prefill_tokens"])
        fig.suptitle("Engine on random bf16 checkpoints — " + _subtitle(res), fontsize=10)
        save(fig, "engine.png")

        parts = ("attention", "router", "experts", "combine", "dense_mlp", "lm_head", "embed", "residual")
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = [0.0] * len(runs)
        for p in parts:
            v = [1e3 * r["decode_breakdown_s_per_token"].get(p, 0.0) for r in runs]
            if max(v) == 0:
                continue
            ax.bar([r["label"] for r in runs], v, bottom=bottom, label=p)
            bottom = [x + y for x, y in zip(bottom, v)]
        ax.set_ylabel("ms per decoded token")
        ax.legend(fontsize=8)
        ax.set_title("Decode time by part\n" + _subtitle(res), fontsize=9)
        save(fig, "breakdown.png")

    s = _ok(res, "speculative")
    if s and s.get("arms"):
        plot_speculative(plt, s, _subtitle(res), save)
    elif s:
        fig, ax = plt.subplots(figsize=(6, 4))
        b = ax.bar(["target alone", "with draft"], [1e3 / s["off_ms_per_token"], 1e3 / s["on_ms_per_token"]],
                   color=["#4c72b0", "#55a868"])
        ax.bar_label(b, fmt="%.1f")
        ax.set_ylabel("decode tok/s")
        ax.set_title("Speculative: acceptance %.2f, mean accepted %.2f, x%.2f\n%s" % (
            s["acceptance"], s["mean_accepted_length"], s["ratio"]["value"], _subtitle(res)), fontsize=9)
        save(fig, "speculative.png")

    p = _ok(res, "llama_cpp")
    if p:
        ms = [m for m in p["models"] if m["status"] == "ok"]
        labels = [m["label"] for m in ms]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        w = 0.38
        xs = range(len(ms))
        for ax, what, unit in ((axes[0], "decode", "decode tok/s"), (axes[1], "prefill", "prefill tok/s")):
            b1 = ax.bar([x - w / 2 for x in xs], [m["deltafin_%s_tok_s" % what] for m in ms], w, label="Deltafin",
                        color="#4c72b0")
            b2 = ax.bar([x + w / 2 for x in xs], [m["peer_%s_tok_s" % what] for m in ms], w, label="llama.cpp",
                        color="#dd8452")
            ax.bar_label(b1, labels=["%.0f\n%.2fx" % (m["deltafin_%s_tok_s" % what], m["%s_ratio" % what])
                                     for m in ms], fontsize=8)
            ax.bar_label(b2, fmt="%.0f", fontsize=8)
            ax.set_xticks(list(xs))
            ax.set_xticklabels(labels)
            ax.set_ylabel(unit + ", 2 threads")
            ax.set_yscale("log")
            ax.legend(fontsize=8)
        fig.suptitle("Deltafin and llama.cpp on the same bf16 weights (%s)\n%s" % (p.get("peer", "?"), _subtitle(res)),
                     fontsize=9)
        save(fig, "llama_cpp.png")

    c = _ok(res, "cluster")
    if c:
        names = [k for k in ("local", "nodes_1", "nodes_3") if k in c["runs"]]
        fig, ax = plt.subplots(figsize=(6, 4))
        b = ax.bar([n.replace("nodes_", "") + (" node(s)" if n != "local" else "") for n in names],
                   [c["runs"][n]["decode_ms_per_token"] for n in names], color="#8172b2")
        ax.bar_label(b, fmt="%.1f")
        ax.set_ylabel("decode ms/token")
        ax.set_title("Cluster on loopback (%s)\n%s" % (os.path.basename(c["model"]), _subtitle(res)), fontsize=9)
        save(fig, "cluster.png")

    v = _ok(res, "server")
    if v:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [x["streams"] for x in v["levels"]]
        ax.plot(xs, [x["tok_s"] for x in v["levels"]], "o-", label="aggregate")
        ax.plot(xs, [x["per_stream_tok_s"] for x in v["levels"]], "s--", label="per stream")
        ax.set_xticks(xs)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("completion tok/s")
        ax.legend()
        ax.set_title("deltafin serve (%s)\n%s" % (os.path.basename(v["model"]), _subtitle(res)), fontsize=9)
        save(fig, "server.png")

    t = _ok(res, "tokenizer")
    if t:
        names = list(t["tokenizers"])
        fig, ax = plt.subplots(figsize=(6, 4))
        w = 0.35
        xs = range(len(names))
        b1 = ax.bar([x - w / 2 for x in xs], [t["tokenizers"][n]["c"]["mb_s"] for n in names], w, label="C")
        b2 = ax.bar([x + w / 2 for x in xs], [t["tokenizers"][n]["js"]["mb_s"] for n in names], w, label="JavaScript")
        ax.bar_label(b1, fmt="%.2f")
        ax.bar_label(b2, fmt="%.2f")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names)
        ax.set_ylabel("encode MB/s, one thread")
        ax.legend()
        ax.set_title("Tokenizer on Brown documents\n" + _subtitle(res), fontsize=9)
        save(fig, "tokenizer.png")
    return paths


SPEC_LABELS = {"alone": "target\nalone", "draft": "draft model\nadaptive k", "dspark": "block drafter\nadaptive k",
               "text": "own-tokenizer\ndraft, adaptive k"}
SPEC_COLORS = {"alone": "#4c72b0", "draft": "#55a868", "dspark": "#c44e52", "text": "#8172b3"}


def plot_speculative(plt, s, subtitle, save):
    """speculative.png with the arms of one interleaved run: speed-up over the target alone
    (mean of the rounds, each round's own ratio as a dot; tok/s written on the bar) and the
    mean accepted length per round."""
    A = s["arms"]
    arms = list(A)
    labels = [SPEC_LABELS.get(a, "block drafter\nfixed k " + a[len("dspark_k"):] if a.startswith("dspark_k") else a)
              for a in arms]
    colors = [SPEC_COLORS.get(a, "#dd8452") for a in arms]
    xs = list(range(len(arms)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    b = a1.bar(xs, [A[a]["speedup"] for a in arms], color=colors)
    a1.bar_label(b, labels=["x%.2f\n%.1f tok/s" % (A[a]["speedup"], A[a]["tok_s"]) for a in arms], fontsize=8)
    for x, a in zip(xs, arms):
        per = A[a].get("speedup_per_run", [])
        a1.plot([x + 0.32] * len(per), per, "k.", ms=4)
    a1.axhline(1.0, ls="--", color="grey", lw=1)
    a1.set_xticks(xs)
    a1.set_xticklabels(labels, fontsize=8)
    a1.set_ylim(0, max(max(A[a]["speedup"] for a in arms),
                       max((v for a in arms for v in A[a].get("speedup_per_run", [])), default=0)) * 1.3)
    a1.set_ylabel("decode speed-up over the target alone")
    a1.set_title("speed-up: geometric mean of the paired runs (dots: each round and prompt)", fontsize=9)
    dr = [a for a in arms if a != "alone"]
    b = a2.bar([xs[arms.index(a)] for a in dr], [A[a]["mean_accepted_length"] for a in dr],
               color=[colors[arms.index(a)] for a in dr])
    a2.bar_label(b, labels=["%.2f\n(acc. %.2f)" % (A[a]["mean_accepted_length"], A[a]["acceptance"]) for a in dr],
                 fontsize=8)
    a2.set_xticks(xs)
    a2.set_xticklabels(labels, fontsize=8)
    a2.set_ylim(0, max([A[a]["mean_accepted_length"] for a in dr] + [1]) * 1.3)
    a2.set_ylabel("mean accepted draft tokens per round")
    a2.set_title("mean accepted length (+1 target token per round)", fontsize=9)
    fig.suptitle("Speculative decoding on %s, greedy, identical output: %s, %d round(s) x %d prompt(s) x %d tokens\n%s"
                 % (os.path.basename(s["target"]), "yes" if s["identical_output"] else "NO", s.get("rounds", 1),
                    s.get("prompt_count", 1), s.get("max_new", 0), subtitle), fontsize=9)
    save(fig, "speculative.png")


if __name__ == "__main__":
    r = json.load(open(sys.argv[1]))
    for p in plot_all(r, sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(sys.argv[1]))):
        print(p)
