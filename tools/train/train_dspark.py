#!/usr/bin/python3
"""tools/train/train_dspark.py — trains a DSpark block drafter for models/demo-moe.

Owns, one command end to end (resumable: every phase keeps its output under --work):
  1. data: windows of --seq tokens = a text prefix of P tokens (P random in
     [--prefix-min, --prefix-max], from the training split of data.py) followed by the
     frozen target's own GREEDY continuation (bf16 weights, fp32 compute, batched KV cache);
     per position the target's residual stream after --capture layers (the drafter's context
     rows) and its final-normed hidden state (for the soft distillation term) are kept.
     In the continuation every token is the target's argmax given everything before it, so
     "label = next token" and "label = target argmax" coincide and the Markov head's previous
     token is exactly what it sees at inference when the earlier rows were accepted;
  2. training of the drafter (the math of tests/reference/dspark_ref.py, float32): many
     anchors per window at once — block(L) (rows [embed(s_L), embed(mask) x (r-1)] at
     positions L..L+r-1, L >= P) attends to the context rows j < L and to its own r rows,
     through an explicit mask; loss = per-row weighted cross-entropy of row k
     (target lm_head + Markov bias with prev = s_{L+k}) against the mixture
     (1 - kd) onehot(s_{L+k+1}) + kd p_target(. | s_0..s_{L+k}), row weights gamma^k
     (acceptance is a prefix); the confidence head is fitted on detached features (BCE on
     "row k's argmax is the target's token"); the target's embedding / lm_head stay frozen
     and are not training parameters;
  3. export: config.json (the published keys + block_size) and bf16 model.safetensors
     (no duplicate embed_tokens.weight: the engine never reads it) into WORK/demo-dspark;
     a copy with the target's embed_tokens.weight added (the published layout, which
     tests/reference/dspark_ref.py insists on) under WORK/demo-dspark-ref;
  4. checks with tests/reference/dspark_ref.py: its CLI loads the folder and proposes; its
     logits match this module's on the bf16 weights; greedy speculative rounds on held-out
     contexts (mean accepted length per round) for the block drafter and for
     models/demo-draft, with the same schedule; --install copies the folder to
     models/demo-dspark.
Numbers go to WORK/metrics.json and the log.

Usage: nice -n 19 /usr/bin/python3 tools/train/train_dspark.py [--quick] [--install] [...]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REF = os.path.join(ROOT, "tests", "reference")
sys.path.insert(0, HERE)
sys.path.insert(0, REF)

import data  # noqa: E402
import evaluate as ev  # noqa: E402
import safetensors_io as st  # noqa: E402
from qwen3_model import Qwen3LM, rms_norm, rotate_half, tune_malloc  # noqa: E402

STATE_VERSION = 1


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


# =============================================================================================
# target (frozen): Qwen3LM with the bf16 weights of models/demo-moe, batched KV-cache decoding


def load_target(folder):
    """Qwen3LM holding the checkpoint's bf16 values (float32). The compact vocabulary is the
    set of rows with a non-zero embedding; every other row's logit is exactly 0."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    ck = st.Checkpoint(folder)
    W = lambda n: torch.from_numpy(np.array(ck.float32(n)))  # noqa: E731
    emb = W("model.embed_tokens.weight")
    active = torch.nonzero(emb.abs().sum(1) > 0)[:, 0]
    m = Qwen3LM(cfg, active, embed=emb[active])
    with torch.no_grad():
        for i, L in enumerate(m.layers):
            p = "model.layers.%d." % i
            L.in_norm.copy_(W(p + "input_layernorm.weight"))
            L.post_norm.copy_(W(p + "post_attention_layernorm.weight"))
            for a, n in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj"),
                         ("q_norm", "q_norm"), ("k_norm", "k_norm")):
                getattr(L.attn, a).copy_(W(p + "self_attn.%s.weight" % n))
            if L.moe:
                L.mlp.router.copy_(W(p + "mlp.gate.weight"))
                for e in range(m.s.n_exp):
                    q = p + "mlp.experts.%d." % e
                    L.mlp.gate[e].copy_(W(q + "gate_proj.weight"))
                    L.mlp.up[e].copy_(W(q + "up_proj.weight"))
                    L.mlp.down[e].copy_(W(q + "down_proj.weight"))
            else:
                L.mlp.gate.copy_(W(p + "mlp.gate_proj.weight"))
                L.mlp.up.copy_(W(p + "mlp.up_proj.weight"))
                L.mlp.down.copy_(W(p + "mlp.down_proj.weight"))
        m.norm.copy_(W("model.norm.weight"))
    for p in m.parameters():
        p.requires_grad_(False)
    m.eval()
    inactive = torch.ones(m.s.vocab_size, dtype=torch.bool)
    inactive[active] = False
    m.lowest_inactive = int(torch.nonzero(inactive)[0, 0]) if inactive.any() else -1
    return m, cfg


class TargetRunner:
    """Batched incremental forward of the frozen target: feed(ids [B, n]) appends n tokens to
    each of the B sequences and returns (capture [B, n, C*H], final-normed hidden [B, n, H],
    greedy next ids [B, n] over the full vocabulary, lowest id on ties)."""

    def __init__(self, model, capture):
        self.m, self.capture = model, list(capture)
        self.kc = [None] * len(model.layers)
        self.vc = [None] * len(model.layers)
        self.len = 0

    def _attn(self, li, L, x):
        s = self.m.s
        B, n, _ = x.shape
        nh, kv, hd = s.n_head, s.n_kv, s.head_dim
        A = L.attn
        q = rms_norm((x @ A.q.t()).view(B, n, nh, hd), A.q_norm, s.eps).transpose(1, 2)
        k = rms_norm((x @ A.k.t()).view(B, n, kv, hd), A.k_norm, s.eps).transpose(1, 2)
        v = (x @ A.v.t()).view(B, n, kv, hd).transpose(1, 2)
        pos = torch.arange(self.len, self.len + n)
        fr = pos.to(torch.float32)[:, None] * self.m.inv_freq[None, :]
        emb = torch.cat((fr, fr), -1)
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kc[li] is not None:
            k = torch.cat((self.kc[li], k), 2)
            v = torch.cat((self.vc[li], v), 2)
        self.kc[li], self.vc[li] = k, v
        S = k.shape[2]
        rep = nh // kv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        sc = (q @ k.transpose(-1, -2)) * hd ** -0.5
        mask = torch.arange(S)[None, :] > (pos[:, None])
        sc = sc.masked_fill(mask, float("-inf"))
        out = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(B, n, nh * hd)
        return out @ A.o.t()

    @torch.no_grad()
    def feed(self, ids):
        m, s = self.m, self.m.s
        B, n = ids.shape
        table = torch.cat((m.embed, m.embed.new_zeros(1, s.hidden)), 0)
        x = table[m.lookup[ids]]
        caps = {}
        for li, L in enumerate(m.layers):
            x = x + self._attn(li, L, rms_norm(x, L.in_norm, s.eps))
            h = rms_norm(x, L.post_norm, s.eps)
            if L.moe:
                mo, _, _ = L.mlp(h.reshape(B * n, s.hidden))
                x = x + mo.view(B, n, s.hidden)
            else:
                x = x + L.mlp(h)
            if li in self.capture:
                caps[li] = x
        self.len += n
        fin = rms_norm(x, m.norm, s.eps)
        logits = fin @ m.embed.t()  # compact
        mx, arg = logits.max(-1)  # first index of the max = lowest id (active_ids sorted)
        nxt = m.active_ids[arg]
        if m.lowest_inactive >= 0:  # the zero logits of rows without an embedding
            lo = m.lowest_inactive
            nxt = torch.where((mx < 0) | ((mx == 0) & (nxt > lo)), torch.full_like(nxt, lo), nxt)
        cap = torch.cat([caps[i] for i in self.capture], -1)
        return cap, fin, nxt


@torch.no_grad()
def make_windows(target, capture, stream, G, T, P, seed_starts):
    """G windows: stream[start:start+P] then the target's greedy continuation to T tokens.
    Returns tokens [G, T] int64, capture [G, T, C*H], final hidden [G, T, H]."""
    prefix = torch.from_numpy(np.stack([stream[s:s + P] for s in seed_starts])).long()
    run = TargetRunner(target, capture)
    cap, fin, nxt = run.feed(prefix)
    toks, caps, fins = [prefix], [cap], [fin]
    cur = nxt[:, -1:]
    for _ in range(T - P):
        toks.append(cur)
        cap, fin, nxt = run.feed(cur)
        caps.append(cap)
        fins.append(fin)
        cur = nxt
    return torch.cat(toks, 1), torch.cat(caps, 1), torch.cat(fins, 1)


def build_data(a, target, corpus, split, n_windows, tag):
    """Shards of generated windows under WORK/data (skipped when present). Returns the
    concatenated (tokens int64 [N, T], P int64 [N], capture f32 [N, T, C*H], fin f32 [N, T, H])."""
    out = os.path.join(a.work, "data")
    os.makedirs(out, exist_ok=True)
    stream = corpus.train if split == "train" else corpus.val
    G, T = a.gen_batch, a.seq
    n_shards = (n_windows + G - 1) // G
    parts = []
    t0 = time.time()
    made = 0
    for si in range(n_shards):
        path = os.path.join(out, "%s_%03d.pt" % (tag, si))
        if not os.path.exists(path):
            g = torch.Generator().manual_seed(a.seed * 7919 + (0 if split == "train" else 1) * 100003 + si)
            P = int(torch.randint(a.prefix_min, a.prefix_max + 1, (1,), generator=g))
            starts = torch.randint(0, len(stream) - P - 1, (G,), generator=g).tolist()
            toks, cap, fin = make_windows(target, a.capture, stream, G, T, P, starts)
            torch.save({"tokens": toks.int(), "P": torch.full((G,), P, dtype=torch.int32),
                        "cap": cap.half(), "fin": fin.half(), "cap_absmax": float(cap.abs().max())},
                       path + ".tmp")
            os.replace(path + ".tmp", path)
            made += 1
            el = time.time() - t0
            log("data %s: shard %d/%d (P=%d) %.1f s/shard, ETA %.1f min"
                % (tag, si + 1, n_shards, P, el / made, el / made * (n_shards - si - 1) / 60))
        parts.append(torch.load(path))
    cat = lambda k: torch.cat([p[k] for p in parts], 0)  # noqa: E731
    absmax = max(p["cap_absmax"] for p in parts)
    if absmax > 6e4:
        raise SystemExit("train_dspark: capture rows reach %g, beyond float16" % absmax)
    return (cat("tokens").long()[:n_windows], cat("P").long()[:n_windows],
            cat("cap").float()[:n_windows], cat("fin").float()[:n_windows])


# =============================================================================================
# drafter (training module, float32; the formulas of tests/reference/dspark_ref.py)


def rope_interleaved(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).reshape(x.shape)


class DSpark(nn.Module):
    def __init__(self, a, H, active_ids, vocab, E_act, final_init):
        super().__init__()
        self.a = a
        C = len(a.capture)
        nh, dn, dr, dv, KL, ql, I, R = (a.heads, a.nope, a.rope, a.v, a.kv_lora, a.q_lora, a.inter,
                                        a.markov_rank)
        self.H, self.C, self.eps = H, C, a.eps
        n_act = len(active_ids)
        self.register_buffer("E", E_act.clone(), persistent=False)  # frozen target table (compact)
        lookup = torch.full((vocab,), n_act, dtype=torch.long)
        lookup[active_ids] = torch.arange(n_act)
        self.register_buffer("lookup", lookup, persistent=False)
        self.register_buffer("active_ids", active_ids.clone(), persistent=False)
        self.log_zero = math.log(vocab - n_act)
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, dr, 2, dtype=torch.int64).to(dtype=torch.float) / dr))
        self.register_buffer("inv_freq", inv, persistent=False)  # qwen3_ref.rope_parameters, default
        self.scaling = (dn + dr) ** -0.5
        P = lambda *s, std: nn.Parameter(torch.randn(*s) * std)  # noqa: E731
        ones = lambda n: nn.Parameter(torch.ones(n))  # noqa: E731
        out_std = 0.02 / math.sqrt(2 * a.layers)
        self.context_proj = P(H, C * H, std=1 / math.sqrt(C * H))
        self.context_norm = ones(H)
        self.layers = nn.ModuleList()
        for _ in range(a.layers):
            L = nn.Module()
            L.in_norm, L.post_norm = ones(H), ones(H)
            if ql:
                L.q_a, L.q_a_norm, L.q_b = P(ql, H, std=H ** -0.5), ones(ql), P(nh * (dn + dr), ql, std=ql ** -0.5)
            else:
                L.q = P(nh * (dn + dr), H, std=H ** -0.5)
            L.kv_a, L.kv_a_norm = P(KL + dr, H, std=H ** -0.5), ones(KL)
            L.kv_b = P(nh * (dn + dv), KL, std=KL ** -0.5)
            L.o = P(H, nh * dv, std=out_std)
            L.gate, L.up, L.down = P(I, H, std=H ** -0.5), P(I, H, std=H ** -0.5), P(H, I, std=out_std)
            self.layers.append(L)
        self.final_norm = nn.Parameter(final_init.clone())
        self.markov_w1 = P(n_act, R, std=1.0)
        self.markov_w2 = nn.Parameter(torch.zeros(n_act, R))
        self.conf_w = nn.Parameter(torch.zeros(1, H + R))
        self.conf_b = nn.Parameter(torch.zeros(1))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def rope(self, x, pos, heads=False):
        ang = pos.to(torch.float32)[..., None] * self.inv_freq
        cos, sin = ang.cos(), ang.sin()
        if heads:  # x [..., nh, dr]
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        return rope_interleaved(x, cos, sin)

    def latent(self, L, x, pos):
        KL = self.a.kv_lora
        kv = x @ L.kv_a.t()
        return rms_norm(kv[..., :KL], L.kv_a_norm, self.eps), self.rope(kv[..., KL:], pos)

    def query(self, L, x):
        if self.a.q_lora:
            return rms_norm(x @ L.q_a.t(), L.q_a_norm, self.eps) @ L.q_b.t()
        return x @ L.q.t()

    def forward(self, cap, anchors, tokens, r):
        """cap [B, T, C*H] context rows of B windows, anchors [B, A] positions L, tokens [B, T]
        -> final-normed block rows [B, A, r, H]; block (b, a) sees context rows j < L and
        its own r rows (positions L..L+r-1)."""
        a = self.a
        nh, dn, dr, dv = a.heads, a.nope, a.rope, a.v
        B, T, _ = cap.shape
        A = anchors.shape[1]
        ctx = rms_norm(cap @ self.context_proj.t(), self.context_norm, self.eps)
        tpos = torch.arange(T)
        pos = anchors[:, :, None] + torch.arange(r)  # [B, A, r]
        ids = torch.full((B, A, r), a.mask_id, dtype=torch.long)
        ids[:, :, 0] = torch.gather(tokens, 1, anchors)
        h = self.E[self.lookup[ids]]  # [B, A, r, H]
        cmask = (tpos[None, None, :] >= anchors[:, :, None])[:, :, None, None, :]  # [B,A,1,1,T]
        for L in self.layers:
            ckv_c, kpe_c = self.latent(L, ctx, tpos)  # [B,T,KL], [B,T,dr]
            kvc = (ckv_c @ L.kv_b.t()).view(B, T, nh, dn + dv)
            kn_c, v_c = kvc[..., :dn], kvc[..., dn:]
            x = rms_norm(h, L.in_norm, self.eps)
            q = self.query(L, x).view(B, A, r, nh, dn + dr)
            qn, qp = q[..., :dn], self.rope(q[..., dn:], pos, heads=True)
            ckv_b, kpe_b = self.latent(L, x, pos)  # [B,A,r,KL], [B,A,r,dr]
            kvb = (ckv_b @ L.kv_b.t()).view(B, A, r, nh, dn + dv)
            kn_b, v_b = kvb[..., :dn], kvb[..., dn:]
            s_c = (torch.einsum("bakhd,bthd->bahkt", qn, kn_c)
                   + torch.einsum("bakhd,btd->bahkt", qp, kpe_c)) * self.scaling
            s_c = s_c.masked_fill(cmask, float("-inf"))
            s_b = (torch.einsum("bakhd,bajhd->bahkj", qn, kn_b)
                   + torch.einsum("bakhd,bajd->bahkj", qp, kpe_b)) * self.scaling
            p = torch.softmax(torch.cat((s_c, s_b), -1), -1)
            o = (torch.einsum("bahkt,bthd->bakhd", p[..., :T], v_c)
                 + torch.einsum("bahkj,bajhd->bakhd", p[..., T:], v_b)).reshape(B, A, r, nh * dv)
            h = h + o @ L.o.t()
            y = rms_norm(h, L.post_norm, self.eps)
            h = h + (F.silu(y @ L.gate.t()) * (y @ L.up.t())) @ L.down.t()
        return rms_norm(h, self.final_norm, self.eps)


CHUNK = 224  # rows per logits chunk (qwen3_model.CHUNK_ROWS: stays in the malloc heap)


class _BlockCE(torch.autograd.Function):
    """Per-row cross-entropy of z = hn @ E^T + m @ w2^T over the compact vocabulary plus the
    (vocab - n_active) tokens whose logit is exactly 0 (no embedding row, no Markov row),
    against q = (1 - kd) onehot(label) + kd * teacher probs (rows of `tprob` picked by tidx).
    Returns (loss [N], argmax [N] compact index). E is frozen: no gradient."""

    @staticmethod
    def forward(ctx, hn, m, w2, E, labels, tprob, tidx, kd, log_zero):
        losses, args, saved = [], [], []
        for c0 in range(0, hn.shape[0], CHUNK):
            sl = slice(c0, c0 + CHUNK)
            z = hn[sl] @ E.t() + m[sl] @ w2.t()
            lse = torch.logaddexp(torch.logsumexp(z, 1), z.new_tensor(log_zero))
            zl = torch.gather(z, 1, labels[sl, None])[:, 0]
            loss = lse - (1.0 - kd) * zl
            if kd > 0:
                loss = loss - kd * (tprob[tidx[sl]] * z).sum(1)
            losses.append(loss)
            args.append(z.argmax(1))
            saved.append((z, lse))
        ctx.saved = saved
        ctx.kd = kd
        ctx.save_for_backward(hn, m, w2, E, labels, tprob, tidx)
        return torch.cat(losses), torch.cat(args)

    @staticmethod
    def backward(ctx, g, _garg):
        hn, m, w2, E, labels, tprob, tidx = ctx.saved_tensors
        kd = ctx.kd
        gh, gm = torch.empty_like(hn), torch.empty_like(m)
        gw2 = torch.zeros_like(w2)
        for i, c0 in enumerate(range(0, hn.shape[0], CHUNK)):
            sl = slice(c0, c0 + CHUNK)
            z, lse = ctx.saved[i]
            p = z.sub_(lse[:, None]).exp_()  # softmax, in place
            n = p.shape[0]
            p[torch.arange(n), labels[sl]] -= 1.0 - kd
            if kd > 0:
                p.sub_(kd * tprob[tidx[sl]])
            p.mul_(g[sl, None])
            gh[sl] = p @ E
            gm[sl] = p @ w2
            gw2 += p.t() @ m[sl]
        ctx.saved = None
        return gh, gm, gw2, None, None, None, None, None, None


def row_weights(r, gamma):
    w = torch.tensor([gamma ** k for k in range(r)])
    return w * (r / w.sum())


def batch_loss(model, batch, anchors, r, a):
    """Mean weighted loss and statistics of one batch: windows (tokens [B, T], cap, fin) and
    anchors [B, A] (positions L with L + r <= T - 1)."""
    tokens, cap, fin = batch
    B, T = tokens.shape
    A = anchors.shape[1]
    hn = model(cap, anchors, tokens, r)  # [B, A, r, H]
    pos = anchors[:, :, None] + torch.arange(r)  # position of row k: predicts pos + 1
    prev = torch.gather(tokens, 1, pos.view(B, -1)).view(B, A, r)  # s_{L+k}: anchor, then true tokens
    label = torch.gather(tokens, 1, (pos + 1).view(B, -1)).view(B, A, r)
    prow = model.lookup[prev]
    lrow = model.lookup[label]
    n_act = model.E.shape[0]
    valid = (lrow < n_act)
    lrow = lrow.clamp(max=n_act - 1)
    m1 = torch.cat((model.markov_w1, model.markov_w1.new_zeros(1, model.markov_w1.shape[1])), 0)[prow]
    with torch.no_grad():
        tprob = None
        if a.kd > 0:
            tl = fin.reshape(B * T, -1) @ model.E.t()
            lse = torch.logaddexp(torch.logsumexp(tl, 1), tl.new_tensor(model.log_zero))
            tprob = tl.sub_(lse[:, None]).exp_()
        tidx = (torch.arange(B)[:, None, None] * T + pos).reshape(-1)
    H = hn.shape[-1]
    loss, arg = _BlockCE.apply(hn.reshape(-1, H), m1.reshape(-1, m1.shape[-1]), model.markov_w2, model.E,
                               lrow.reshape(-1), tprob if tprob is not None else hn.new_zeros(1, 1),
                               tidx, float(a.kd), model.log_zero)
    w = row_weights(r, a.gamma)[None, None, :].expand(B, A, r) * valid
    loss = loss.view(B, A, r)
    total = (loss * w).sum() / w.sum()
    correct = (arg.view(B, A, r) == lrow) & valid
    # confidence head: logistic regression on detached [h_k || markov_w1[prev_k]]
    feat = torch.cat((hn.detach(), m1.detach()), -1)
    clog = (feat @ model.conf_w.t())[..., 0] + model.conf_b
    closs = F.binary_cross_entropy_with_logits(clog, correct.float())
    acc_len = torch.cumprod(correct.float(), -1).sum(-1)  # accepted rows under greedy verify
    return total + closs, {"loss": float(total), "conf": float(closs),
                           "row_acc": correct.float().mean((0, 1)).tolist(),
                           "acc_len": float(acc_len.mean())}


def sample_anchors(P, T, r, A, g):
    """[B, A] anchor positions, for window b uniform without replacement in [P_b, T-1-r]."""
    out = []
    for p in P.tolist():
        n = T - r - p
        idx = torch.randperm(n, generator=g)[:A] if n >= A else torch.randint(0, n, (A,), generator=g)
        out.append(idx + p)
    return torch.stack(out)


def all_anchor_batches(P, T, r):
    """Every anchor of every window (for the held-out metric): list of (window, anchors [1, n])."""
    return [(i, torch.arange(int(p), T - r)[None]) for i, p in enumerate(P.tolist())]


@torch.no_grad()
def eval_windows(model, win, a, r):
    tokens, P, cap, fin = win
    tot_len, tot_n, rows = 0.0, 0, torch.zeros(r)
    loss_sum = 0.0
    for i, anc in all_anchor_batches(P, a.seq, r):
        b = (tokens[i:i + 1], cap[i:i + 1], fin[i:i + 1])
        _, s = batch_loss(model, b, anc, r, a)
        n = anc.shape[1]
        tot_len += s["acc_len"] * n
        rows += torch.tensor(s["row_acc"]) * n
        loss_sum += s["loss"] * n
        tot_n += n
    return {"acc_len": tot_len / tot_n, "row_acc": (rows / tot_n).tolist(), "loss": loss_sum / tot_n,
            "anchors": tot_n}


def lr_at(step, steps, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def train(a, model, train_win, val_win):
    tokens, P, cap, fin = train_win
    N, T = tokens.shape
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith("markov") and n != "conf_w"]
    rest = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    state_path = os.path.join(a.work, "state.pt")
    key = {"v": STATE_VERSION, "seed": a.seed, "steps": a.steps, "batch": a.batch, "anchors": a.anchors,
           "block": a.block, "windows": a.windows, "kd": a.kd, "gamma": a.gamma, "lr": a.lr,
           "shape": [a.layers, a.heads, a.q_lora, a.kv_lora, a.nope, a.rope, a.v, a.inter, a.markov_rank,
                     list(a.capture), a.mask_id, a.rope_theta, a.seq, a.prefix_min, a.prefix_max],
           "short_every": a.short_every, "wd": a.wd, "warmup": a.warmup, "threads": a.threads}
    step0, rec = 0, {"train": [], "val": []}
    if os.path.exists(state_path):
        s = torch.load(state_path)
        if s["key"] == key:
            model.load_state_dict(s["model"])
            opt.load_state_dict(s["opt"])
            step0, rec = s["step"], s["rec"]
            torch.set_rng_state(s["rng"])
            log("resumed at step %d" % step0)
        else:
            log("state.pt from other settings; starting over")
    t0 = time.time()
    run_loss, run_len, run_n, run_full = 0.0, 0.0, 0, 0
    for step in range(step0, a.steps):
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        # block size: r most of the time, sometimes shorter (the engine may run r' < r rows)
        r = a.block if (a.short_every <= 0 or step % a.short_every) else int(torch.randint(1, a.block, (1,), generator=g))
        idx = torch.randperm(N, generator=g)[:a.batch]
        anc = sample_anchors(P[idx], T, r, a.anchors, g)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, a.steps, a.lr, a.warmup)
        loss, s = batch_loss(model, (tokens[idx], cap[idx], fin[idx]), anc, r, a)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += s["loss"]
        if r == a.block:
            run_len += s["acc_len"]
            run_full += 1
        run_n += 1
        rec["train"].append({"step": step + 1, "loss": s["loss"], "acc_len": s["acc_len"], "r": r,
                             "row_acc": s["row_acc"]})
        done = step + 1
        if done % a.print_every == 0 or done == a.steps:
            el = time.time() - t0
            per = el / (done - step0)
            log("step %d/%d loss %.3f acc_len(r=%d) %.2f rows %s lr %.2e | %.2f s/step, ETA %.1f min"
                % (done, a.steps, run_loss / run_n, a.block, run_len / max(1, run_full),
                   " ".join("%.2f" % x for x in s["row_acc"]), opt.param_groups[0]["lr"], per,
                   per * (a.steps - done) / 60))
            run_loss, run_len, run_n, run_full = 0.0, 0.0, 0, 0
        if done % a.eval_every == 0 or done == a.steps:
            v = eval_windows(model, val_win, a, a.block)
            v["step"] = done
            rec["val"].append(v)
            log("held-out: loss %.3f, accepted rows per block %.3f of %d, row acc %s (%d anchors)"
                % (v["loss"], v["acc_len"], a.block, " ".join("%.3f" % x for x in v["row_acc"]), v["anchors"]))
        if done % a.save_every == 0 or done == a.steps:
            torch.save({"key": key, "model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "rec": rec, "rng": torch.get_rng_state()}, state_path + ".tmp")
            os.replace(state_path + ".tmp", state_path)
    return rec


# =============================================================================================
# export


def drafter_config(a, tcfg, n_act_unused=None):
    return {
        "architectures": ["K3DSparkModel"],
        "block_size": a.block,
        "draft_vocab_size": int(tcfg["vocab_size"]),
        "hidden_size": int(tcfg["hidden_size"]),
        "intermediate_size": a.inter,
        "kv_lora_rank": a.kv_lora,
        "markov_head_type": "vanilla",
        "markov_rank": a.markov_rank,
        "mask_token_id": a.mask_id,
        "max_position_embeddings": int(tcfg["max_position_embeddings"]),
        "mla_use_nope": False,
        "mla_use_output_gate": False,
        "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.heads,
        "num_target_layers": len(a.capture),
        "q_lora_rank": a.q_lora if a.q_lora else None,
        "qk_nope_head_dim": a.nope,
        "qk_rope_head_dim": a.rope,
        "rms_norm_eps": a.eps,
        "rope_scaling": None,
        "rope_theta": a.rope_theta,
        "target_layer_ids": list(a.capture),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "v_head_dim": a.v,
    }


def drafter_tensors(model, vocab):
    """{published name: float32 tensor}; Markov tables scattered to the full vocabulary (rows
    of tokens without an embedding stay zero)."""
    out = {"context_proj.weight": model.context_proj, "context_norm.weight": model.context_norm}
    for n, L in enumerate(model.layers):
        p = "layers.%d." % n
        s = p + "self_attn."
        out[p + "input_layernorm.weight"] = L.in_norm
        out[p + "post_attention_layernorm.weight"] = L.post_norm
        if model.a.q_lora:
            out[s + "q_a_proj.weight"] = L.q_a
            out[s + "q_a_layernorm.weight"] = L.q_a_norm
            out[s + "q_b_proj.weight"] = L.q_b
        else:
            out[s + "q_proj.weight"] = L.q
        out[s + "kv_a_proj_with_mqa.weight"] = L.kv_a
        out[s + "kv_a_layernorm.weight"] = L.kv_a_norm
        out[s + "kv_b_proj.weight"] = L.kv_b
        out[s + "o_proj.weight"] = L.o
        out[p + "mlp.gate_proj.weight"] = L.gate
        out[p + "mlp.up_proj.weight"] = L.up
        out[p + "mlp.down_proj.weight"] = L.down
    out["final_norm.weight"] = model.final_norm
    for nm, t in (("markov_head.markov_w1.weight", model.markov_w1), ("markov_head.markov_w2.weight", model.markov_w2)):
        full = torch.zeros(vocab, t.shape[1])
        full[model.active_ids] = t.detach()
        out[nm] = full
    out["confidence_head.proj.weight"] = model.conf_w
    out["confidence_head.proj.bias"] = model.conf_b
    return {k: v.detach().float().contiguous() for k, v in out.items()}


def write_json(obj, path):
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(path + ".tmp", path)


def export(model, cfg, out, embed_from=None):
    os.makedirs(out, exist_ok=True)
    write_json(cfg, os.path.join(out, "config.json"))
    specs = [st.TensorSpec(n, "BF16", list(t.shape), data=st.f32_to_bf16(t.numpy()))
             for n, t in drafter_tensors(model, cfg["draft_vocab_size"]).items()]
    if embed_from:  # the published folder's duplicate of the target embedding (bytes copied)
        ck = st.Checkpoint(embed_from)
        e = "model.embed_tokens.weight"
        specs.append(st.TensorSpec("embed_tokens.weight", "BF16", ck.shape(e),
                                   data=np.ascontiguousarray(ck.array(e), dtype=np.uint16)))
    st.write_file(os.path.join(out, "model.safetensors"), specs, metadata={"format": "pt"})


@torch.no_grad()
def round_to_bf16_(model):
    for p in model.parameters():
        p.copy_(p.to(torch.bfloat16).to(torch.float32))


# =============================================================================================
# checks with the reference


@torch.no_grad()
def module_block(model, capture, ctx_ids, anchor, r):
    """This module's (z [r, V] with the Markov bias, proposals) for one block, full vocabulary."""
    L = len(ctx_ids)
    toks = torch.tensor(list(ctx_ids) + [anchor])[None]
    cap = capture[None, :L]
    capp = torch.cat((cap, cap.new_zeros(1, 1, cap.shape[-1])), 1)  # row L unused (masked)
    hn = model(capp, torch.tensor([[L]]), toks, r)[0, 0]
    V = model.lookup.shape[0]
    raw = torch.zeros(r, V)
    raw[:, model.active_ids] = hn @ model.E.t()
    w2 = torch.zeros(V, model.markov_w2.shape[1])
    w2[model.active_ids] = model.markov_w2
    props, zs, prev = [], [], anchor
    for k in range(r):
        row = model.lookup[prev]
        m1 = model.markov_w1[row] if row < model.E.shape[0] else torch.zeros(model.markov_w1.shape[1])
        z = raw[k] + w2 @ m1
        t = ev.argmax_low(z)
        zs.append(z)
        props.append(t)
        prev = t
    return torch.stack(zs), props


def ref_check(a, model, ref_dir, target_ref, ctx_ids, anchor):
    """dspark_ref.py CLI on the written folder (fp64, its own target capture): proposals and
    logits against this module on the bf16 weights."""
    import dspark_ref as dr
    prefix = os.path.join(a.work, "refcheck")
    cmd = [sys.executable, os.path.join(REF, "dspark_ref.py"), "--target", a.target, "--drafter", ref_dir,
           "--context-ids", ",".join(map(str, ctx_ids)), "--anchor", str(anchor), "--json",
           "--out-bin", prefix, "--rounds", "3"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit("train_dspark: dspark_ref.py failed: %s" % res.stderr)
    j = json.loads(res.stdout)
    z_ref = torch.from_numpy(np.fromfile(prefix + ".logits.f32", dtype="<f4").reshape(j["r"], -1))
    cap, _ = dr.capture_hidden(target_ref, ctx_ids, list(a.capture))
    z, props = module_block(model, cap, ctx_ids, anchor, a.block)
    diff = float((z - z_ref).abs().max())
    return {"cmd": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:]),
            "ref_proposals": j["proposals"], "module_proposals": props, "max_logit_diff": diff,
            "top2_gap_min": j["top2_gap_min"],
            "ref_rounds_accepted": [rd["accepted"] for rd in j.get("rounds", [])]}


@torch.no_grad()
def spec_rounds(target_ref, contexts, n_new, propose, outs):
    """Greedy speculative decoding on the target's reference greedy output: out[0] comes from
    the prompt's forward; then each round has committed prompt + out[:i] (out[i-1] pending),
    `propose(prompt, i, out)` returns its proposals for out[i..], the longest prefix equal to
    out is accepted and the target adds its own token. Returns (mean accepted per round,
    histogram, tokens per target forward incl. the prefill, rounds)."""
    hist, rounds, produced, fwd = {}, 0, 0, 0
    for p in contexts:
        if tuple(p) not in outs:
            outs[tuple(p)] = __import__("qwen3_ref").generate(target_ref, p, n_new)[0]
        out = outs[tuple(p)]
        i, fwd, produced = 1, fwd + 1, produced + 1
        while i < n_new:
            prop = propose(p, i, out)
            acc = 0
            while acc < len(prop) and i + acc < n_new and prop[acc] == out[i + acc]:
                acc += 1
            hist[acc] = hist.get(acc, 0) + 1
            rounds += 1
            fwd += 1
            produced += min(acc + 1, n_new - i)
            i += acc + 1
    mean = sum(k * v for k, v in hist.items()) / rounds
    return mean, [hist.get(k, 0) for k in range(max(hist) + 1)], produced / fwd, rounds


def acceptance(a, target_ref, ref_dir, contexts):
    import dspark_ref as dr
    import qwen3_ref as qr
    res, outs = {}, {}
    drafter = dr.Drafter(ref_dir, target_ref, "fp64")
    caps = {}

    def cap_of(p, out):
        key = tuple(p)
        if key not in caps:
            caps[key] = dr.capture_hidden(target_ref, list(p) + out[:-1], list(a.capture))[0]
        return caps[key]

    for r in sorted({a.block, 4}):
        def prop_dspark(p, i, out, r=r):
            ctx = list(p) + out[:i - 1]
            res_ = drafter.draft(ctx, out[i - 1], block_ids=[out[i - 1]] + [a.mask_id] * (r - 1),
                                 capture=cap_of(p, out)[:len(ctx)])
            return res_["proposals"]
        t0 = time.time()
        res["dspark_r%d" % r] = spec_rounds(target_ref, contexts, a.accept_new, prop_dspark, outs) + (time.time() - t0,)
        log("acceptance, DSpark block r=%d: mean accepted %.3f per round, histogram %s, %.3f tokens per target "
            "forward, %d rounds (%.0f s)" % ((r,) + res["dspark_r%d" % r][:4] + (res["dspark_r%d" % r][4],)))
    draft_ref = qr.Model(a.draft_model, "fp32", threads=0)
    st_ = {}

    def draft_feed(ids):
        """The draft's last logits row after `ids`, reusing the cached common prefix (rejected
        proposals are cut off the cache; the same values as a fresh forward up to fp rounding)."""
        fed, cache = st_.get("fed", []), st_.get("cache")
        n = 0
        while cache is not None and n < min(len(fed), len(ids) - 1) and fed[n] == ids[n]:
            n += 1
        if cache is None or n == 0:
            cache, n = draft_ref.new_cache(), 0
        else:
            for li in range(len(cache.k)):
                cache.k[li], cache.v[li] = cache.k[li][:, :n], cache.v[li][:, :n]
            cache.length = n
        row = draft_ref.forward(list(ids[n:]), cache)[-1]
        st_["fed"], st_["cache"] = list(ids), cache
        return row

    for k in sorted({4, a.block}):
        def prop_draft(p, i, out, k=k):
            seq = list(p) + out[:i]
            row = draft_feed(seq)
            prop = []
            for j in range(k):
                t = qr.argmax_low(row)
                prop.append(t)
                if j < k - 1:
                    seq = seq + [t]
                    row = draft_feed(seq)
            return prop
        t0 = time.time()
        res["draft_k%d" % k] = spec_rounds(target_ref, contexts, a.accept_new, prop_draft, outs) + (time.time() - t0,)
        log("acceptance, demo-draft k=%d: mean accepted %.3f per round, histogram %s, %.3f tokens per target "
            "forward, %d rounds (%.0f s)" % ((k,) + res["draft_k%d" % k][:4] + (res["draft_k%d" % k][4],)))
    return res


# =============================================================================================


def parse_ids(s):
    return [int(x) for x in s.split(",") if x != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(HERE, "work", "dspark"))
    ap.add_argument("--target", default=os.path.join(ROOT, "models", "demo-moe"))
    ap.add_argument("--draft-model", default=os.path.join(ROOT, "models", "demo-draft"),
                    help="the dense draft compared against")
    ap.add_argument("--install", action="store_true", help="copy the folder to models/demo-dspark")
    ap.add_argument("--install-dir", default=os.path.join(ROOT, "models", "demo-dspark"))
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--threads", type=int, default=1)
    # data
    ap.add_argument("--seq", type=int, default=128, help="window: text prefix + target greedy continuation")
    ap.add_argument("--prefix-min", type=int, default=8)
    ap.add_argument("--prefix-max", type=int, default=56)
    ap.add_argument("--windows", type=int, default=2048, help="training windows generated")
    ap.add_argument("--val-windows", type=int, default=32, help="held-out windows (validation documents)")
    ap.add_argument("--gen-batch", type=int, default=32, help="windows per generation shard")
    # drafter shape
    ap.add_argument("--capture", type=parse_ids, default=[1, 3, 5], help="0-based target layers")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--q-lora", type=int, default=64, help="0 = q_proj")
    ap.add_argument("--kv-lora", type=int, default=64)
    ap.add_argument("--nope", type=int, default=32)
    ap.add_argument("--rope", type=int, default=16)
    ap.add_argument("--v", type=int, default=32)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--markov-rank", type=int, default=32)
    ap.add_argument("--block", type=int, default=6, help="block_size r")
    ap.add_argument("--mask-id", type=int, default=data.ENDOFTEXT)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-6)
    # training
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=4, help="windows per step")
    ap.add_argument("--anchors", type=int, default=40, help="anchors (blocks) per window per step")
    ap.add_argument("--short-every", type=int, default=4, help="every n-th step uses a random r' < r (0: never)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--gamma", type=float, default=0.8, help="row weight gamma^k")
    ap.add_argument("--kd", type=float, default=0.5, help="weight of the target's soft distribution in the target mix")
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--save-every", type=int, default=25)
    # evaluation
    ap.add_argument("--accept-contexts", type=int, default=24)
    ap.add_argument("--accept-new", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke test into WORK/quick")
    a = ap.parse_args(argv)
    if a.quick:
        a.work = os.path.join(a.work, "quick")
        a.windows, a.val_windows, a.gen_batch, a.steps, a.eval_every, a.save_every = 8, 4, 4, 6, 3, 3
        a.print_every, a.warmup, a.accept_contexts, a.accept_new = 2, 2, 2, 12
    os.makedirs(a.work, exist_ok=True)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tune_malloc()
    t_start = time.time()
    times = {}

    corpus = data.Corpus(data.prepare(os.path.join(HERE, "work")))
    target, tcfg = load_target(a.target)
    if not torch.equal(target.active_ids, corpus.active_ids):
        log("note: target rows with an embedding differ from the training text's token set")
    log("target %s: %d rows with an embedding; capture layers %s of %d"
        % (a.target, len(target.active_ids), a.capture, tcfg["num_hidden_layers"]))
    if int(target.lookup[a.mask_id]) >= len(target.active_ids):
        raise SystemExit("train_dspark: mask id %d has a zero embedding row" % a.mask_id)

    # 1. data
    t0 = time.time()
    train_win = build_data(a, target, corpus, "train", a.windows, "train")
    val_win = build_data(a, target, corpus, "val", a.val_windows, "val")
    times["data_s"] = time.time() - t0
    log("data: %d training windows (%d greedy tokens), %d held-out windows, %.1f min"
        % (len(train_win[0]), int((a.seq - train_win[1]).sum()), len(val_win[0]), times["data_s"] / 60))

    # 2. training
    torch.manual_seed(a.seed + 1)
    model = DSpark(a, int(tcfg["hidden_size"]), target.active_ids, int(tcfg["vocab_size"]),
                   target.embed.detach(), target.norm.detach())
    n_par = model.n_params()
    n_mk = model.markov_w1.numel() + model.markov_w2.numel()
    log("drafter: %.3fM trainable parameters (%.3fM of them the compact Markov tables)" % (n_par / 1e6, n_mk / 1e6))
    t0 = time.time()
    rec = train(a, model, train_win, val_win)
    times["train_s"] = time.time() - t0

    # 3. export
    round_to_bf16_(model)
    model.eval()
    cfg = drafter_config(a, tcfg)
    out = os.path.join(a.work, "demo-dspark")
    ref_dir = os.path.join(a.work, "demo-dspark-ref")
    export(model, cfg, out)
    export(model, cfg, ref_dir, embed_from=a.target)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    log("wrote %s (%.2f MiB) and %s (+ embed_tokens.weight, for dspark_ref.py)" % (out, size / 2 ** 20, ref_dir))
    v_bf16 = eval_windows(model, val_win, a, a.block)
    log("held-out windows, bf16 weights: accepted rows per block %.3f, row acc %s"
        % (v_bf16["acc_len"], " ".join("%.3f" % x for x in v_bf16["row_acc"])))

    # 4. reference checks and acceptance
    import dspark_ref as dr
    t0 = time.time()
    target_ref = dr.load_target(a.target, 0)
    contexts = ev.contexts_from_stream(corpus.val, a.accept_contexts, 32, a.seed)
    first, _, _ = __import__("qwen3_ref").generate(target_ref, contexts[0], 1)
    chk = ref_check(a, model, ref_dir, target_ref, contexts[0], first[0])
    log("dspark_ref.py on the written folder: proposals %s (module %s), max |logit diff| %.2e, "
        "min top-2 gap %.3f, accepted in 3 rounds %s"
        % (chk["ref_proposals"], chk["module_proposals"], chk["max_logit_diff"], chk["top2_gap_min"],
           chk["ref_rounds_accepted"]))
    if chk["max_logit_diff"] > 1e-2:
        raise SystemExit("train_dspark: module and dspark_ref.py disagree on the logits")
    acc = acceptance(a, target_ref, ref_dir, contexts)
    times["eval_s"] = time.time() - t0
    times["total_s"] = time.time() - t_start

    m = {"args": {k: v for k, v in vars(a).items()}, "config": cfg, "params": n_par, "markov_params": n_mk,
         "train_windows": len(train_win[0]), "val_windows": len(val_win[0]),
         "train_greedy_tokens": int((a.seq - train_win[1]).sum()),
         "val_final": rec["val"][-1] if rec["val"] else None, "val_bf16": v_bf16, "ref_check": chk,
         "acceptance": {k: {"mean_accepted": v[0], "hist": v[1], "tokens_per_target_forward": v[2],
                            "rounds": v[3], "seconds": v[4]} for k, v in acc.items()},
         "accept_contexts": a.accept_contexts, "accept_new": a.accept_new,
         "folder_bytes": size, "times": times, "val_curve": rec["val"]}
    write_json(m, os.path.join(a.work, "metrics.json"))
    if a.install:
        if os.path.exists(a.install_dir):
            shutil.rmtree(a.install_dir)
        shutil.copytree(out, a.install_dir)
        log("installed %s" % a.install_dir)
    log("done in %.1f min (data %.1f, training %.1f, checks %.1f)"
        % (times["total_s"] / 60, times["data_s"] / 60, times["train_s"] / 60, times["eval_s"] / 60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
