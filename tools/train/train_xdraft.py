#!/usr/bin/python3
"""tools/train/train_xdraft.py — trains a cross-tokenizer draft for models/demo-moe.

The draft does not share the target's tokenizer: it proposes text, which is re-encoded into
target tokens and verified. What it must learn is the TEXT the target writes greedily.

Owns, one command end to end (every phase keeps its output under --work and is skipped or
resumed on a rerun):
  1. tokenizer: a byte-level BPE of the project's own (bpe_tokenizer.py; GPT-2 regex and
     byte table, 256 byte tokens + merges + <|endoftext|> <|im_start|> <|im_end|>, --vocab
     ids in all) trained on the text of the training documents of data.py's split; written
     as tokenizer.json / tokenizer_config.json;
  2. tokenizer check: this file's encoder, the C engine (`deltafin tokenize --ids-only`) and
     the npm reference (@lenml/tokenizers, xdraft_tokenizer_oracle.js) give the same ids on
     the held-out documents, their paragraphs and a few edge cases;
  3. distillation data (sequence-level knowledge distillation, Kim & Rush 2016): the target's
     greedy continuations (C engine, `deltafin serve`, temperature 0) of prompts cut from the
     training documents at word boundaries, plus held-out ones for validation;
  4. training of a dense Qwen3 draft (qwen3_model.Qwen3LM, tied embedding over this
     tokenizer's vocabulary) on the Brown training stream re-encoded with the new tokenizer
     (documents separated by <|endoftext|>, as the target was trained) mixed with the
     prompt + continuation texts: next-token cross-entropy;
  5. export: bf16 model.safetensors, config.json, generation_config.json, the tokenizer
     files into WORK/demo-xdraft (--install copies it to models/demo-xdraft); the engine
     loads it and its greedy text equals this module's;
  6. agreement with the target, measured with the engine on held-out prompts: common byte
     prefix of greedy continuations (this draft and, for comparison, models/demo-draft),
     and a text-level simulation of speculative rounds. Numbers: WORK/metrics.json.

Usage: nice -n 19 /usr/bin/python3 tools/train/train_xdraft.py [--quick] [--install] [...]
"""

import argparse
import concurrent.futures as cf
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import bpe_tokenizer as bt  # noqa: E402
import data  # noqa: E402
import export  # noqa: E402
import safetensors_io as st  # noqa: E402
from qwen3_model import Qwen3LM, hf_tensors, round_to_bf16_, tied_cross_entropy, tune_malloc  # noqa: E402

STATE_VERSION = 1


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def write_json(obj, path):
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(obj, indent=1) + "\n")
    os.replace(path + ".tmp", path)


# =============================================================================================
# corpus text


def doc_texts(corpus_dir, corpus, index):
    """Detokenised text of documents (prepare_corpus.js's text/NAME.txt without the final
    newline: the text the Qwen3 ids of tokens.u32 encode)."""
    out = []
    for i in index:
        with open(os.path.join(corpus_dir, "text", corpus.docs[i]["name"] + ".txt"), encoding="utf-8") as f:
            out.append(f.read()[:-1])
    return out


# =============================================================================================
# 1-2. tokenizer


def build_tokenizer(a, train_texts):
    d = os.path.join(a.work, "tokenizer")
    n_merges = a.vocab - 256 - len(bt.SPECIALS)
    if os.path.exists(os.path.join(d, "tokenizer_config.json")):
        tok = bt.Tokenizer.load(d)
        if len(tok.merges) == n_merges:
            log("tokenizer: %s (%d ids)" % (d, tok.vocab_size))
            return tok, 0.0
        log("tokenizer: %s has %d merges, want %d: training again" % (d, len(tok.merges), n_merges))
    t0 = time.time()
    merges = bt.train(train_texts, n_merges, log=log)
    tok = bt.Tokenizer(merges)
    pieces = [tok.piece(i) for i in range(len(tok.sym))]
    if len(set(pieces)) != len(pieces):
        raise SystemExit("train_xdraft: two merges made the same byte string")
    tok.write(d, a.max_pos)
    dt = time.time() - t0
    log("tokenizer: %d merges in %.1f s -> %s" % (len(merges), dt, d))
    return tok, dt


STRESS = [
    "I'll say it's 12345 -- don't you'd've  x\t\ty\n\n\nz  ",
    "   leading spaces and trailing   ",
    "caf\u00e9 na\u00efve \u2014 \u201cquotes\u201d \u65e5\u672c\u8a9e \U0001F642 \u00a0nbsp\u2003em a\u0085b",
    "<|im_start|>user\nThe history of the county<|im_end|>\n<|im_start|>assistant\n",
    "end of text<|endoftext|>next document",
    "3.14159, 1,000,000 and 1960's; $4.50 (approx.) -- \"yes\"!?",
]


def check_tokenizer(a, tok, val_texts):
    """Ids of this encoder, the engine and the npm reference on the held-out documents,
    up to --tok-paragraphs of their paragraphs and the STRESS cases."""
    d = os.path.join(a.work, "tokenizer")
    paras = [p for t in val_texts for p in t.split("\n\n") if p.strip()]
    cases = STRESS + val_texts + paras[:a.tok_paragraphs]
    mine = [tok.encode(t) for t in cases]
    t0 = time.time()
    # The engine is started once per group (its start-up dominates): the documents, and the
    # paragraphs, are each sent as one text joined by <|endoftext|>. Added tokens are split
    # out before the pre-tokenizer, so the ids between two separators are those of the
    # segment alone; the stress cases (some hold added tokens themselves) go one by one.
    eot = tok.special["<|endoftext|>"]
    groups = [[i] for i in range(len(STRESS))] + [list(range(len(STRESS), len(STRESS) + len(val_texts))),
                                                  list(range(len(STRESS) + len(val_texts), len(cases)))]
    engine_bad = []
    for grp in groups:
        if not grp:
            continue
        text = "<|endoftext|>".join(cases[i] for i in grp)
        r = subprocess.run([a.deltafin, "tokenize", "--model", d, "--ids-only", "-"], input=text.encode("utf-8"),
                           capture_output=True)
        if r.returncode != 0:
            raise SystemExit("train_xdraft: deltafin tokenize failed: %s" % r.stderr.decode())
        ids = [int(x) for x in r.stdout.split()]
        if len(grp) == 1:
            segs = [ids]
        else:
            segs, cur = [], []
            for x in ids:
                if x == eot:
                    segs.append(cur)
                    cur = []
                else:
                    cur.append(x)
            segs.append(cur)
        if len(segs) != len(grp):
            engine_bad.extend(grp)
            continue
        engine_bad.extend(i for i, s in zip(grp, segs) if s != mine[i])
    cin, cout = os.path.join(a.work, "tokcheck_in.json"), os.path.join(a.work, "tokcheck_out.json")
    with open(cin, "w") as f:
        json.dump(cases, f)
    npm_bad, npm_err = [], None
    r = subprocess.run(["node", os.path.join(HERE, "xdraft_tokenizer_oracle.js"), d, cin, cout],
                       capture_output=True, text=True)
    if r.returncode != 0:
        npm_err = r.stderr.strip().splitlines()[-1:] or ["exit %d" % r.returncode]
    else:
        with open(cout) as f:
            ref = json.load(f)
        npm_bad = [i for i in range(len(cases)) if ref[i] != mine[i]]
    res = {"cases": len(cases), "stress": len(STRESS), "documents": len(val_texts),
           "paragraphs": min(len(paras), a.tok_paragraphs), "tokens": sum(map(len, mine)),
           "bytes": sum(len(t.encode("utf-8")) for t in cases),
           "engine_mismatches": engine_bad, "npm_mismatches": npm_bad, "npm_error": npm_err,
           "seconds": time.time() - t0}
    log("tokenizer check: %d cases (%d stress, %d documents, %d paragraphs; %d ids): engine mismatches %d, "
        "npm mismatches %s" % (res["cases"], res["stress"], res["documents"], res["paragraphs"], res["tokens"],
                               len(engine_bad), len(npm_bad) if npm_err is None else "n/a (%s)" % npm_err))
    if engine_bad or npm_bad:
        i = (engine_bad + npm_bad)[0]
        raise SystemExit("train_xdraft: tokenizers disagree, e.g. on case %d %r" % (i, cases[i][:200]))
    return res


# =============================================================================================
# 3. the engine's server, prompts, greedy continuations


class Server:
    """`deltafin serve` on one model (1 thread, --parallel sequences batched), port chosen
    by the server; complete() is a greedy /v1/completions request."""

    def __init__(self, a, model, parallel, log_path):
        self.model, self.parallel = model, parallel
        self.logf = open(log_path, "w")
        cmd = [a.deltafin, "serve", "--model", model, "--no-draft", "--threads", "1", "--parallel", str(parallel),
               "--host", "127.0.0.1", "--port", "0", "--max-queue", "1024", "--quiet"]
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        self.port = None
        for _ in range(600):
            time.sleep(0.1)
            with open(log_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
        if self.port is None:
            self.stop()
            with open(log_path) as f:
                raise SystemExit("train_xdraft: deltafin serve did not start: %s" % f.read()[-500:])
        self.name = os.path.basename(os.path.normpath(model))

    def complete(self, prompt, max_tokens, logprobs=False):
        body = {"model": self.name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        if logprobs:
            body["logprobs"] = 0
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.port, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        for attempt in range(5):
            try:
                with urllib.request.urlopen(req, timeout=900) as r:
                    return json.loads(r.read())["choices"][0]
            except OSError:
                if attempt == 4:
                    raise
                time.sleep(1 + attempt)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.logf.close()


SENT_END = re.compile(r"[.?!][\"')]*$")


def make_prompts(texts, n, seed, wmin, wmax):
    """n prompts: w words (uniform in [wmin, wmax]) of one paragraph of a random document,
    starting at a sentence start (3 in 4) or at any word, ending at a word's end."""
    g = random.Random(seed)
    out = []
    while len(out) < n:
        paras = [p for p in texts[g.randrange(len(texts))].split("\n\n") if p.strip()]
        words = paras[g.randrange(len(paras))].split(" ")
        starts = [0] + [j for j in range(1, len(words)) if SENT_END.search(words[j - 1])]
        s = g.choice(starts) if g.random() < 0.75 else g.randrange(len(words))
        k = g.randint(wmin, wmax)
        p = " ".join(words[s:s + k]).strip()
        if p:
            out.append(p)
    return out


def load_done(path, prompts, max_new):
    done = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut by an interruption
                if r["i"] < len(prompts) and r["prompt"] == prompts[r["i"]] and r["max_new"] == max_new:
                    done[r["i"]] = r
    return done


def generate(servers, prompts, max_new, path, what, logprobs=False):
    """Greedy continuations of `prompts` by the servers' model, appended to `path` (jsonl,
    one record per prompt, in completion order) as they arrive; records already there are
    kept, so an interrupted run resumes. Returns the records in prompt order."""
    done = load_done(path, prompts, max_new)
    todo = [i for i in range(len(prompts)) if i not in done]
    if todo:
        t0 = time.time()
        lock = threading.Lock()
        n_tok = [0, 0]

        def one(i):
            c = servers[i % len(servers)].complete(prompts[i], max_new, logprobs)
            r = {"i": i, "prompt": prompts[i], "max_new": max_new, "text": c["text"],
                 "finish": c["finish_reason"]}
            if logprobs:
                r["tokens"] = c["logprobs"]["tokens"]
                r["offsets"] = c["logprobs"]["text_offset"]
            with lock:
                with open(path, "a") as f:
                    f.write(json.dumps(r) + "\n")
                done[i] = r
                n_tok[0] += 1
                n_tok[1] += len(c["text"])
                if n_tok[0] % 256 == 0 or n_tok[0] == len(todo):
                    el = time.time() - t0
                    log("%s: %d/%d continuations, %.1f s, ETA %.1f min"
                        % (what, n_tok[0], len(todo), el, el / n_tok[0] * (len(todo) - n_tok[0]) / 60))

        workers = sum(s.parallel for s in servers)
        with cf.ThreadPoolExecutor(workers) as ex:
            list(ex.map(one, todo))
    return [done[i] for i in range(len(prompts))]


# =============================================================================================
# 4. token streams


def encode_samples(tok, recs, eot, prompt_weight=1.0):
    """prompt + continuation of each record -> (ids int64, loss weights f32 [len], sample
    starts, continuation start per sample). Weight w[j] belongs to predicting ids[j]: 1 for
    the continuation (the target's own text), prompt_weight for the prompt (Brown text, which
    the Brown stream already teaches). Each sample is followed by <|endoftext|>, weight 0
    where the continuation was cut by the token limit (the target did not stop there)."""
    ids, w, starts, cont = [], [], [], []
    for r in recs:
        s = tok.encode(r["prompt"] + r["text"])
        starts.append(len(ids))
        # first token whose bytes begin at or after the end of the prompt
        nb, pb, c = 0, len(r["prompt"].encode("utf-8")), len(s)
        for j, t in enumerate(s):
            if nb >= pb:
                c = j
                break
            nb += len(tok.sym[t]) if t < len(tok.sym) else 0
        cont.append(len(ids) + c)
        ids.extend(s)
        w.extend([prompt_weight] * c + [1.0] * (len(s) - c))
        ids.append(eot)
        w.append(1.0 if r["finish"] == "stop" else 0.0)
    return np.array(ids, dtype=np.int64), np.array(w, dtype=np.float32), np.array(starts), np.array(cont)


def doc_stream(tok, texts, eot):
    parts = []
    for t in texts:
        parts.extend(tok.encode(t))
        parts.append(eot)
    return np.array(parts, dtype=np.int64)


# =============================================================================================
# 5. training


def xdraft_config(a, tok):
    c = export.dense_config(a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.inter, a.max_pos)
    c["vocab_size"] = tok.vocab_size
    c["bos_token_id"] = tok.special["<|endoftext|>"]
    c["eos_token_id"] = tok.special["<|im_end|>"]
    return c


def generation_config(tok):
    eot, im_end = tok.special["<|endoftext|>"], tok.special["<|im_end|>"]
    return {"bos_token_id": eot, "do_sample": False, "eos_token_id": [im_end, eot], "pad_token_id": eot,
            "transformers_version": export.TRANSFORMERS_VERSION}


def decay_steps(steps):
    return max(1, steps // 5)


def lr_at(step, steps, peak, warmup, floor=0.1):
    """Linear warm-up, constant, linear decay to floor * peak over the last fifth."""
    if step < warmup:
        return peak * (step + 1) / warmup
    d = decay_steps(steps)
    if step < steps - d:
        return peak
    return peak * (1.0 - (1.0 - floor) * (step - (steps - d) + 1) / d)


class Batches:
    """Step s's windows are a function of (seed, s) only. Every --long-every-th step has
    B/2 windows of 2T tokens (positions up to 2T), the others B windows of T. A share
    --gen-frac of the windows starts at a random distillation sample (its prompt at position
    0, as the draft sees a prompt), the rest at a random offset of the Brown training stream
    (all weights 1)."""

    def __init__(self, a, brown, gen, gen_w, gen_starts):
        self.a, self.brown, self.gen, self.gen_w = a, brown, gen, gen_w
        self.gen_starts = gen_starts

    def get(self, step):
        a = self.a
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        long = a.long_every > 0 and step % a.long_every == a.long_every - 1
        T, B = (2 * a.seq, a.batch // 2) if long else (a.seq, a.batch)
        n_gen = int(round(B * a.gen_frac))
        xs, ws = [], []
        ok = self.gen_starts[self.gen_starts + T + 1 <= len(self.gen)]
        if len(ok) == 0:  # (--quick: fewer samples than one window)
            ok = np.arange(len(self.gen) - T)
        for _ in range(n_gen):
            s = int(ok[int(torch.randint(0, len(ok), (1,), generator=g))])
            xs.append(self.gen[s:s + T + 1])
            ws.append(self.gen_w[s + 1:s + T + 1])
        for _ in range(B - n_gen):
            s = int(torch.randint(0, len(self.brown) - T - 1, (1,), generator=g))
            xs.append(self.brown[s:s + T + 1])
            ws.append(np.ones(T, dtype=np.float32))
        return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ws))


@torch.no_grad()
def evaluate(model, brown_val, val_gen, T, max_windows):
    """Held-out Brown NLL (nats/token, windows of T) and, on the held-out distillation
    samples, NLL and teacher-forced top-1 agreement over the continuation tokens only."""
    s = model.s
    w = data.windows(brown_val, T)[:max_windows]
    h, _ = model.hidden(w[:, :-1])
    nll = float(model.nll(h.reshape(-1, s.hidden), w[:, 1:].reshape(-1)).mean())
    ids, _, starts, cont = val_gen
    ends = list(starts[1:]) + [len(ids)]
    tot, hit, n, hit8, n8 = 0.0, 0, 0, 0, 0
    for b, e, c in zip(starts, ends, cont):
        x = torch.from_numpy(ids[b:e - 1])  # the sample without its <|endoftext|>
        hh, _ = model.hidden(x[None, :-1])
        lo = max(int(c) - int(b) - 1, 0)  # position predicting the first continuation token
        hh, tgt = hh[0, lo:], x[lo + 1:]
        tot += float(model.nll(hh, tgt).sum())
        full = torch.zeros(hh.shape[0], s.vocab_size)
        full[:, model.active_ids] = model.compact_logits(hh)
        ok = full.argmax(-1) == tgt
        hit += int(ok.sum())
        n += len(tgt)
        hit8 += int(ok[:8].sum())
        n8 += len(ok[:8])
    return {"brown_nll": nll, "gen_nll": tot / n, "gen_top1": hit / n, "gen_top1_first8": hit8 / n8,
            "gen_tokens": n}


def train(a, model, batches, brown_val, val_gen, key_extra):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and n != "embed"]
    rest = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    # The schedule and the batches up to the start of the decay do not depend on --steps, so
    # a state saved before it is a valid start for any --steps whose decay starts later.
    key = hashlib.sha256(json.dumps([STATE_VERSION, a.seed, a.batch, a.seq, a.long_every, a.gen_frac, a.prompt_weight,
                                     a.lr, a.wd, a.warmup, a.threads, a.hidden, a.layers, a.heads, a.kv_heads,
                                     a.head_dim, a.inter, a.max_pos, key_extra]).encode()).hexdigest()[:16]
    decay0 = a.steps - decay_steps(a.steps)
    state_path = os.path.join(a.work, "state.pt")  # latest (any phase), for this --steps
    const_path = os.path.join(a.work, "state_const.pt")  # latest saved before the decay
    rec_path = os.path.join(a.work, "train_log.jsonl")
    step0, recs, best, spent0 = 0, [], None, 0.0
    for path in (state_path, const_path):
        if os.path.exists(path):
            s = torch.load(path)
            usable = s.get("key") == key and (s["steps"] == a.steps or s["step"] <= min(
                decay0, s["steps"] - decay_steps(s["steps"])))
            if usable and (best is None or s["step"] > best["step"]):
                best = s
    if best is not None:
        model.load_state_dict(best["model"])
        opt.load_state_dict(best["opt"])
        step0, recs = best["step"], best["records"]
        spent0 = best.get("seconds", 0.0)
        log("training: resumed at step %d" % step0)
    elif os.path.exists(state_path) or os.path.exists(const_path):
        log("training: saved states are from other settings; starting over")
    with open(rec_path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    s = model.s
    t0 = time.time()
    for step in range(step0, a.steps):
        cur = lr_at(step, a.steps, a.lr, a.warmup)
        for gr in opt.param_groups:
            gr["lr"] = cur
        x, w = batches.get(step)
        h, _ = model.hidden(x[:, :-1])
        nll = tied_cross_entropy(model, h.reshape(-1, s.hidden), x[:, 1:].reshape(-1))
        w = w.reshape(-1)
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        rec = {"step": step + 1, "loss": float(loss), "lr": cur, "grad_norm": float(gn), "T": x.shape[1] - 1}
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            model.eval()
            rec.update(evaluate(model, brown_val, val_gen, a.seq, a.val_windows))
            model.train()
        recs.append(rec)
        with open(rec_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        el = time.time() - t0
        done = step + 1 - step0
        if (step + 1) % a.print_every == 0 or "brown_nll" in rec:
            log("step %d/%d loss %.4f%s lr %.2e | %.2f s/step, ETA %.1f min"
                % (step + 1, a.steps, rec["loss"],
                   (" | held-out: Brown nll %.4f, distillation nll %.4f top-1 %.3f (first 8 %.3f)"
                    % (rec["brown_nll"], rec["gen_nll"], rec["gen_top1"], rec["gen_top1_first8"]))
                   if "brown_nll" in rec else "",
                   cur, el / done, el / done * (a.steps - step - 1) / 60))
        if (step + 1) % a.save_every == 0 or step + 1 == a.steps:
            st_ = {"key": key, "model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                   "steps": a.steps, "records": recs, "seconds": spent0 + time.time() - t0}
            for path in (state_path,) + ((const_path,) if step + 1 <= decay0 else ()):
                torch.save(st_, path + ".tmp")
                os.replace(path + ".tmp", path)
    return recs, spent0 + time.time() - t0


# =============================================================================================
# 5. export and engine check


def export_folder(model, cfg, tok, out):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for name, obj in (("config.json", cfg), ("generation_config.json", generation_config(tok))):
        with open(os.path.join(out, name), "w") as f:
            f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    tok.write(out, cfg["max_position_embeddings"])
    specs = [st.TensorSpec(n, "BF16", list(t.shape), data=st.f32_to_bf16(t.numpy()))
             for n, t in hf_tensors(model).items()]
    st.write_file(os.path.join(out, "model.safetensors"), specs, metadata={"format": "pt"})


@torch.no_grad()
def module_greedy_text(model, tok, prompt, n):
    seq = tok.encode(prompt)
    out = []
    for _ in range(n):
        logits = model.full_logits(torch.tensor(seq))[-1]
        nxt = int(torch.nonzero(logits == logits.max())[0, 0])  # lowest id on ties
        if nxt in (tok.special["<|im_end|>"], tok.special["<|endoftext|>"]):
            break
        out.append(nxt)
        seq.append(nxt)
    return tok.decode(out)


def engine_run(a, folder, prompt, n):
    r = subprocess.run([a.deltafin, "run", "--model", folder, "--no-draft", "--temperature", "0", "--threads", "1",
                        "--max-new", str(n), "--prompt", prompt], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("train_xdraft: deltafin run on %s failed: %s" % (folder, r.stderr[-500:]))
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout


# =============================================================================================
# 6. agreement with the target


def common_prefix(x, y):
    x, y = x.encode("utf-8"), y.encode("utf-8")
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def target_tokens(rec):
    """The target's continuation as its tokens' texts (from the offsets the server gave)."""
    base = rec["offsets"][0] if rec["offsets"] else 0
    offs = [o - base for o in rec["offsets"]] + [len(rec["text"])]
    return [rec["text"][offs[j]:offs[j + 1]] for j in range(len(rec["tokens"]))]


def prefix_agreement(tgt_recs, drafts, n_tok):
    """For each prompt: common byte prefix of the target's first n_tok tokens' text and a
    draft's continuation; also how many whole target tokens that prefix covers."""
    res = {}
    for name, recs in drafts.items():
        pre, cov, full, frac = [], [], 0, []
        for t, d in zip(tgt_recs, recs):
            toks = target_tokens(t)[:n_tok]
            ttext = "".join(toks)
            n = common_prefix(ttext, d["text"])
            pre.append(n)
            tb = len(ttext.encode("utf-8"))
            frac.append(n / tb if tb else 1.0)
            full += n == tb
            c, acc = 0, 0
            for s in toks:
                acc += len(s.encode("utf-8"))
                if acc > n:
                    break
                c += 1
            cov.append(c)
        res[name] = {"mean_prefix_bytes": float(np.mean(pre)), "median_prefix_bytes": float(np.median(pre)),
                     "mean_prefix_fraction": float(np.mean(frac)), "mean_target_tokens_covered": float(np.mean(cov)),
                     "prompts_fully_matched": full, "prefix_bytes": pre}
    res["target_mean_bytes"] = float(np.mean([len("".join(target_tokens(t)[:n_tok]).encode("utf-8"))
                                              for t in tgt_recs]))
    return res


def spec_simulation(server, tgt_recs, k, n_tok, workers, draft_tokens):
    """Text-level greedy speculative rounds against the target's greedy tokens t_0..t_{n-1}
    (t_0 comes from the prompt's forward). Each round the draft continues prompt + t_0..t_{i-1}
    (text) by `draft_tokens` of its own tokens; the accepted count is the largest m <= k such
    that t_i..t_{i+m-1} joined is a prefix of that text (k target tokens proposed at most, as
    coordinator/generate/text_draft.h's rounds, which let the draft write up to 3k/2 + 2 of
    its tokens); the target then adds t_{i+m}. This assumes the re-encoded proposal splits
    into the target's own tokens where the texts agree. Returns mean accepted target tokens
    per round and target tokens per target forward (the prompt's forward included)."""
    def one(t):
        toks = target_tokens(t)[:n_tok]
        n, i, rounds, acc = len(toks), 1, 0, 0
        while i < n:
            prop = server.complete(t["prompt"] + "".join(toks[:i]), draft_tokens)["text"]
            m, joined = 0, ""
            while m < k and i + m < n and prop.startswith(joined + toks[i + m]):
                joined += toks[i + m]
                m += 1
            rounds += 1
            acc += m
            i += m + 1
        return rounds, acc, n
    with cf.ThreadPoolExecutor(workers) as ex:
        out = list(ex.map(one, tgt_recs))
    rounds = sum(o[0] for o in out)
    return {"k": k, "draft_tokens": draft_tokens, "rounds": rounds,
            "mean_accepted_per_round": sum(o[1] for o in out) / rounds,
            "tokens_per_target_forward": sum(o[2] for o in out) / (rounds + len(out))}


# =============================================================================================


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(HERE, "work", "xdraft"))
    ap.add_argument("--target", default=os.path.join(ROOT, "models", "demo-moe"))
    ap.add_argument("--compare-draft", default=os.path.join(ROOT, "models", "demo-draft"),
                    help="same-tokenizer draft measured for comparison")
    ap.add_argument("--deltafin", default=os.path.join(ROOT, "build", "coordinator", "deltafin"))
    ap.add_argument("--install", action="store_true", help="copy the folder to models/demo-xdraft")
    ap.add_argument("--install-dir", default=os.path.join(ROOT, "models", "demo-xdraft"))
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (and the servers' 1 each)")
    # tokenizer
    ap.add_argument("--vocab", type=int, default=4096, help="ids: 256 bytes + merges + 3 special tokens")
    ap.add_argument("--tok-paragraphs", type=int, default=400, help="held-out paragraphs in the tokenizer check")
    # distillation data
    ap.add_argument("--gen-prompts", type=int, default=2048, help="training prompts continued by the target")
    ap.add_argument("--short-prompts", type=int, default=6144,
                    help="more training prompts with short continuations (--short-new tokens)")
    ap.add_argument("--short-new", type=int, default=24)
    ap.add_argument("--val-prompts", type=int, default=64, help="held-out prompts continued by the target")
    ap.add_argument("--gen-new", type=int, default=128, help="target tokens per continuation")
    ap.add_argument("--prompt-words", type=int, nargs=2, default=[3, 40], metavar=("MIN", "MAX"))
    ap.add_argument("--servers", type=int, default=2, help="target server processes (1 thread each)")
    ap.add_argument("--parallel", type=int, default=32, help="sequences each server decodes together")
    # shape
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=1024)
    # training
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--long-every", type=int, default=4, help="every n-th step: batch/2 windows of 2*seq")
    ap.add_argument("--gen-frac", type=float, default=0.7, help="share of windows from the distillation samples")
    ap.add_argument("--prompt-weight", type=float, default=0.5, help="loss weight of the samples' prompt tokens")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--val-windows", type=int, default=16)
    ap.add_argument("--print-every", type=int, default=20)
    ap.add_argument("--save-every", type=int, default=25)
    # agreement
    ap.add_argument("--eval-prompts", type=int, default=50)
    ap.add_argument("--eval-new", type=int, default=32, help="target tokens compared")
    ap.add_argument("--sim-new", type=int, default=64, help="target tokens per prompt in the round simulation")
    ap.add_argument("--quick", action="store_true", help="smoke test into WORK/quick")
    a = ap.parse_args(argv)
    if a.quick:
        a.work = os.path.join(a.work, "quick")
        a.install_dir = os.path.join(a.work, "installed")
        a.tok_paragraphs, a.gen_prompts, a.val_prompts, a.gen_new, a.parallel = 20, 24, 4, 24, 8
        a.short_prompts, a.short_new = 16, 8
        a.steps, a.eval_every, a.save_every, a.print_every, a.warmup = 6, 3, 3, 1, 2
        a.eval_prompts, a.eval_new, a.sim_new = 4, 8, 12
    os.makedirs(a.work, exist_ok=True)
    torch.set_num_threads(a.threads)
    tune_malloc()
    t_start = time.time()
    times = {}

    corpus_dir = data.prepare(os.path.join(HERE, "work"))
    corpus = data.Corpus(corpus_dir)
    train_texts = doc_texts(corpus_dir, corpus, corpus.train_index)
    val_texts = doc_texts(corpus_dir, corpus, corpus.val_index)

    # 1-2. tokenizer
    tok, times["tokenizer_s"] = build_tokenizer(a, train_texts)
    eot = tok.special["<|endoftext|>"]
    tok_check = check_tokenizer(a, tok, val_texts)

    # 3. distillation data: the target's greedy continuations (C engine)
    t0 = time.time()
    gen_prompts = make_prompts(train_texts, a.gen_prompts, a.seed, *a.prompt_words)
    short_prompts = make_prompts(train_texts, a.short_prompts, a.seed + 3, *a.prompt_words)
    val_prompts = make_prompts(val_texts, a.val_prompts, a.seed + 1, *a.prompt_words)
    eval_prompts = make_prompts(val_texts, a.eval_prompts, a.seed + 2, 4, 24)
    gdir = os.path.join(a.work, "gen")
    os.makedirs(gdir, exist_ok=True)
    servers = []
    try:
        jobs = [(os.path.join(gdir, "train.jsonl"), gen_prompts, a.gen_new, "distillation data", False),
                (os.path.join(gdir, "short.jsonl"), short_prompts, a.short_new, "short distillation data", False),
                (os.path.join(gdir, "val.jsonl"), val_prompts, a.gen_new, "held-out distillation data", False),
                (os.path.join(gdir, "eval_target.jsonl"), eval_prompts, a.sim_new, "agreement prompts", True)]
        if any(len(load_done(p, pr, n)) < len(pr) for p, pr, n, _, _ in jobs):
            servers = [Server(a, a.target, a.parallel, os.path.join(gdir, "serve_target%d.log" % i))
                       for i in range(a.servers)]
        recs = [generate(servers, pr, n, p, what, lp) for p, pr, n, what, lp in jobs]
    finally:
        for s in servers:
            s.stop()
        # wall time spent generating, summed over the runs that did (a resumed run adds its share)
        tpath = os.path.join(gdir, "seconds.json")
        spent = json.load(open(tpath))["seconds"] if os.path.exists(tpath) else 0.0
        if servers:
            spent += time.time() - t0
            write_json({"seconds": spent}, tpath)
    gen_recs, short_recs, val_recs, eval_recs = recs
    times["generation_s"] = spent
    log("distillation data: %d x %d + %d x %d target tokens, %d x %d held-out (%d chars), %d stopped at an end "
        "token; %.1f min" % (len(gen_recs), a.gen_new, len(short_recs), a.short_new, len(val_recs), a.gen_new,
                             sum(len(r["text"]) for r in gen_recs + short_recs),
                             sum(r["finish"] == "stop" for r in gen_recs + short_recs), times["generation_s"] / 60))

    # 4. token streams
    t0 = time.time()
    brown = doc_stream(tok, train_texts, eot)
    brown_val = doc_stream(tok, val_texts, eot)
    gen, gen_w, gen_starts, _ = encode_samples(tok, gen_recs + short_recs, eot, a.prompt_weight)
    val_gen = encode_samples(tok, val_recs, eot)
    active = torch.from_numpy(np.unique(np.concatenate([brown, gen])))
    times["encode_s"] = time.time() - t0
    log("streams: Brown %d training / %d held-out tokens, distillation %d tokens (%d samples), %d held-out "
        "distillation tokens; %d of %d ids occur (trained rows); %.1f s"
        % (len(brown), len(brown_val), len(gen), len(gen_starts), len(val_gen[0]), len(active), tok.vocab_size,
           times["encode_s"]))
    if len(active) >= tok.vocab_size:
        raise SystemExit("train_xdraft: every id occurs; the compact-vocabulary loss needs one zero row")

    # 5. training
    cfg = xdraft_config(a, tok)
    torch.manual_seed(a.seed)
    model = Qwen3LM(cfg, active, seed_std=0.02)
    with torch.no_grad():  # embedding rows at unit length: logits start O(1)
        model.embed.normal_(0.0, 1.0 / math.sqrt(a.hidden))
    n_par = model.n_params(include_embed=True)
    log("draft: %.3fM parameters (%.3fM of them the embedding rows that occur)"
        % (n_par / 1e6, model.embed.numel() / 1e6))
    data_key = hashlib.sha256(brown.tobytes() + gen.tobytes() + gen_w.tobytes()).hexdigest()[:16]
    # training wall time summed over the runs that trained (kept in the saved state)
    recs, times["train_s"] = train(a, model, Batches(a, brown, gen, gen_w, gen_starts), brown_val, val_gen, data_key)
    steps_run = sum(1 for r in recs)
    tokens_seen = sum(r["T"] * (a.batch if r["T"] == a.seq else a.batch // 2) for r in recs)

    round_to_bf16_(model)
    model.eval()
    final = evaluate(model, brown_val, val_gen, a.seq, a.val_windows)
    log("bf16 weights: held-out Brown nll %.4f (ppl %.1f), distillation nll %.4f, top-1 %.3f (first 8 %.3f)"
        % (final["brown_nll"], math.exp(final["brown_nll"]), final["gen_nll"], final["gen_top1"],
           final["gen_top1_first8"]))
    out = os.path.join(a.work, "demo-xdraft")
    export_folder(model, cfg, tok, out)
    files = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    log("wrote %s: %s (%.2f MiB)" % (out, ", ".join("%s %d" % kv for kv in files.items()),
                                     sum(files.values()) / 2 ** 20))

    # engine: loads the folder, and its greedy text equals this module's
    t0 = time.time()
    checks = []
    for p in ["The history of the county", eval_prompts[0]]:
        e_txt = engine_run(a, out, p, 40)
        m_txt = module_greedy_text(model, tok, p, 40)
        checks.append({"prompt": p, "engine": e_txt, "module": m_txt, "equal": e_txt == m_txt})
        log("engine greedy %r -> %r (%s the module's)" % (p, e_txt, "equals" if e_txt == m_txt else "DIFFERS FROM"))

    # 6. agreement with the target, all three models run by the engine
    servers = []
    try:
        xs = Server(a, out, 16, os.path.join(a.work, "serve_xdraft.log"))
        servers.append(xs)
        ds = Server(a, a.compare_draft, 16, os.path.join(a.work, "serve_demo_draft.log"))
        servers.append(ds)
        conts = {}
        for name, s_ in (("demo-xdraft", xs), ("demo-draft", ds)):
            for n in (a.eval_new, 2 * a.eval_new):
                with cf.ThreadPoolExecutor(16) as ex:
                    conts["%s_%d" % (name, n)] = list(ex.map(lambda p, s_=s_, n=n: s_.complete(p, n), eval_prompts))
        agree = prefix_agreement(eval_recs, conts, a.eval_new)
        for k_, v in agree.items():
            if isinstance(v, dict):
                log("agreement, %s tokens vs the target's first %d: common prefix %.1f bytes (of %.1f), %.2f target "
                    "tokens covered, %d/%d prompts fully matched" % (k_, a.eval_new, v["mean_prefix_bytes"],
                                                                    agree["target_mean_bytes"],
                                                                    v["mean_target_tokens_covered"],
                                                                    v["prompts_fully_matched"], len(eval_prompts)))
        sims = {}
        for name, s_ in (("demo-xdraft", xs), ("demo-draft", ds)):
            for k in (4, 6):
                dt = k if s_ is ds else 3 * k // 2 + 2  # same tokenizer: k tokens are k proposals
                sims["%s_k%d" % (name, k)] = r_ = spec_simulation(s_, eval_recs, k, a.sim_new, 16, dt)
                log("round simulation %s k=%d (%d draft tokens): %.3f target tokens accepted per round, %.3f per "
                    "target forward" % (name, k, dt, r_["mean_accepted_per_round"], r_["tokens_per_target_forward"]))
    finally:
        for s in servers:
            s.stop()
    times["checks_s"] = time.time() - t0
    times["total_s"] = time.time() - t_start

    samples = [{"prompt": t["prompt"], "target": "".join(target_tokens(t)[:a.eval_new]),
                "demo-xdraft": x["text"], "demo-draft": d["text"]}
               for t, x, d in list(zip(eval_recs, conts["demo-xdraft_%d" % (2 * a.eval_new)],
                                       conts["demo-draft_%d" % a.eval_new]))[:8]]
    m = {"args": vars(a), "config": cfg, "params": n_par, "rows_trained": len(active), "vocab": tok.vocab_size,
         "tokenizer_check": tok_check, "gen": {"train_samples": len(gen_recs), "short_samples": len(short_recs),
                                               "val_samples": len(val_recs),
                                               "stopped": sum(r["finish"] == "stop" for r in gen_recs + short_recs),
                                               "train_tokens_xdraft": len(gen), "val_tokens_xdraft": len(val_gen[0])},
         "brown_tokens_xdraft": {"train": len(brown), "val": len(brown_val)},
         "brown_tokens_qwen3": {"train": int(len(corpus.train)), "val": int(len(corpus.val))},
         "steps": steps_run, "tokens_seen": tokens_seen, "final_bf16": final,
         "val_curve": [r for r in recs if "brown_nll" in r], "engine_checks": checks,
         "agreement": agree, "simulation": sims, "samples": samples, "files": files,
         "folder_bytes": sum(files.values()), "times": times}
    write_json(m, os.path.join(a.work, "metrics.json"))
    if a.install:
        if os.path.exists(a.install_dir):
            shutil.rmtree(a.install_dir)
        shutil.copytree(out, a.install_dir)
        log("installed %s" % a.install_dir)
    log("done in %.1f min (tokenizer %.1f s, generation %.1f min, training %.1f min, checks %.1f min)"
        % (times["total_s"] / 60, times["tokenizer_s"], times["generation_s"] / 60, times["train_s"] / 60,
           times["checks_s"] / 60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
