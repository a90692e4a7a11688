#!/usr/bin/python3
"""tests/reference/dspark_ref.py — PyTorch reference of a DSpark block drafter (hidden-state
drafter, Inferact "Kimi-K3-DSpark", docs/K3.md §6.2) on any target the reference runs.

Owns: the oracle of one drafting step: target capture -> context rows -> per-layer latent KV
cache -> one block of r rows through the drafter layers -> target lm_head -> sequential Markov
head -> greedy proposals and confidence logits. Targets: qwen3 / qwen3_moe (qwen3_ref.py) and
deepseek_v3 / kimi_k2 (deepseek_ref.py), built with deepseek_ref.model_for. Does not own the
target forward passes (used unmodified), checkpoint generation (dspark_ckpt.py) or the file
format (safetensors_io.py). Kimi K3 targets are refused: which row K3 captures is disputed
(K3.md §7 D1).

Numerics. The target runs in the reference's fp32 mode (the engine's target contract, the
mode of every golden file): the capture rows are that forward's own float32 residual-stream
rows. From there the drafter is evaluated in float64 (`--dtype fp64`, default) from its stored
BF16 weights and the target's embedding / lm_head widened exactly; `--dtype fp32` runs the same
formulas in float32 arithmetic (~5e-7 relative on the logits, dspark_selfcheck.py). RoPE: inv_freq
as transformers computes it (float32, qwen3_ref.rope_parameters, YaRN included) and the angle
position * inv_freq as a float32 product (as transformers / vLLM / the engine's tables); in
fp64 mode cos/sin of that float32 angle are float64, times the YaRN attention factor.

Computation (H hidden, C = len(target_layer_ids), L committed positions, r = block_size):
 1. capture_t = concat_i h_i[t] for i in target_layer_ids: h_i = the target's residual stream
    after layer i (0-based, before the final norm) — caught on the target's own forward as the
    input of layer i+1's input_layernorm (of the final norm for the last layer).
 2. ctx_t = RMSNorm(context_proj(capture_t); context_norm.weight, eps)
 3. per drafter layer n, per context position t (ctx_t itself, NOT through input_layernorm):
    kv = kv_a_proj_with_mqa(ctx_t); c_kv = RMSNorm(kv[:KL]; kv_a_layernorm, eps);
    k_pe = RoPE(kv[KL:], t) -> layer n's cache at positions 0..L-1 (latent form)
 4. block rows at positions L..L+r-1: h = target_embed([anchor, mask x (r-1)])
 5. per layer, pre-norm: a = RMSNorm(h; input_layernorm);
    q = q_b(RMSNorm(q_a(a); q_a_layernorm, eps)) (or q_proj(a)) -> per head [q_nope dn | q_pe dr];
    (c_kv, k_pe) of the block rows from a as in 3, appended after the context rows;
    per head [k_nope dn | v dv] = kv_b(c_kv) for every key row;
    score = (q_nope.k_nope + RoPE(q_pe).k_pe) * (dn+dr)^-0.5 * m^2, m = 0.1 mscale_all_dim
    ln(factor) + 1 when rope_scaling sets mscale_all_dim (deepseek_ref.yarn_get_mscale);
    softmax over the L context keys AND all r block keys (no causal mask inside the block);
    h += o_proj(probs @ v); h += down(silu(gate(b)) * up(b)), b = RMSNorm(h; post_attention_layernorm)
    RoPE pairs are INTERLEAVED: (x[2i], x[2i+1]) rotated by angle pos * inv_freq[i] (vLLM
    is_neox_style=False; equal, up to the same permutation of q and k, to DeepSeek-V3's HF
    de-interleave + rotate_half, which dspark_selfcheck.py checks bitwise).
 6. logits_k = target_lm_head(RMSNorm(h_k; final_norm.weight)) (no target final norm)
 7. prev = anchor; for k: z_k = logits_k + markov_w2 @ markov_w1[prev]; tok_k = argmax z_k
    (lowest id on ties); prev = tok_k
 8. confidence_k = confidence_head.proj([RMSNorm(h_k; final_norm) || markov_w1[prev_k]]) + bias,
    prev_k = the token before tok_k (anchor for k = 0)
eps: every drafter norm, q_a_layernorm and kv_a_layernorm included, uses the drafter config's
rms_norm_eps — the engine uses one eps (as vLLM's MLA layer; the K3 reference module's own
default 1e-6 differs, K3.md §7 D2; the generated drafters use 1e-6 where both agree).

CLI:
  dspark_ref.py --target DIR --drafter DIR --context-ids 1,2,3 --anchor ID [--json]
      [--out-bin PREFIX] [--dtype fp64|fp32] [--rounds N] [--threads N]
Prints the proposals (comma-separated), or with --json one object {capture_layers, L, r,
proposals, confidence, top2_gap_min, positions, ...}. --out-bin PREFIX writes float32
little-endian row-major PREFIX.capture.f32 [L, C*H], PREFIX.ctx.f32 [L, H], PREFIX.logits.f32
[r, V] (final z, Markov bias included), PREFIX.raw_logits.f32 [r, V] (before the bias) and
PREFIX.hidden.f32 [r, H] (final-normed block rows). --rounds N > 1 also simulates greedy
speculative decoding: the target verifies [anchor, proposals] (fp32 forward of the whole
sequence), the accepted prefix and the anchor join the context, the target's token at the
first mismatch becomes the next anchor; each round recomputes everything from scratch; the
JSON gets "rounds" (round 0 = the top-level fields; --out-bin files are round 0's).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref as dr  # noqa: E402
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

RefError = qr.RefError
TARGET_TYPES = ("qwen3", "qwen3_moe", "deepseek_v3", "kimi_k2")
DTYPES = {"fp64": torch.float64, "fp32": torch.float32}


# ---------------------------------------------------------------------------------------------
# config


class DSparkConfig:
    def __init__(self, d):
        self.raw = d
        g = d.get
        if "K3DSparkModel" not in (g("architectures") or []):
            raise RefError("drafter config.json: architectures must contain K3DSparkModel")
        self.hidden_size = int(d["hidden_size"])
        self.intermediate_size = int(d["intermediate_size"])
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.num_key_value_heads = int(g("num_key_value_heads") or self.num_attention_heads)
        self.q_lora_rank = int(g("q_lora_rank")) if g("q_lora_rank") else None
        self.kv_lora_rank = int(d["kv_lora_rank"])
        self.qk_nope_head_dim = int(d["qk_nope_head_dim"])
        self.qk_rope_head_dim = int(d["qk_rope_head_dim"])
        self.v_head_dim = int(d["v_head_dim"])
        self.head_dim = self.qk_rope_head_dim  # the RoPE width, for qwen3_ref.rope_parameters
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        self.rope_theta = float(g("rope_theta", 10000.0))
        self.rope_scaling = g("rope_scaling")
        self.max_position_embeddings = int(g("max_position_embeddings", 4096))
        self.num_target_layers = int(d["num_target_layers"])
        self.target_layer_ids = [int(x) for x in d["target_layer_ids"]]
        self.mask_token_id = int(d["mask_token_id"])
        self.markov_rank = int(d["markov_rank"])
        self.draft_vocab_size = int(d["draft_vocab_size"])
        self.block_size = int(g("block_size") or 7)
        if self.num_key_value_heads != self.num_attention_heads:
            raise RefError("drafter config.json: num_key_value_heads must equal num_attention_heads (MLA)")
        if g("mla_use_nope", False) or g("mla_use_output_gate", False):
            raise RefError("drafter config.json: mla_use_nope / mla_use_output_gate true not supported")
        if g("markov_head_type", "vanilla") != "vanilla":
            raise RefError("drafter config.json: markov_head_type must be vanilla")
        if g("tie_word_embeddings", False):
            raise RefError("drafter config.json: tie_word_embeddings must be false")
        if len(self.target_layer_ids) != self.num_target_layers or not self.target_layer_ids:
            raise RefError("drafter config.json: target_layer_ids must list num_target_layers ids")
        if self.qk_rope_head_dim % 2 or self.block_size < 1 or self.markov_rank < 1:
            raise RefError("drafter config.json: qk_rope_head_dim must be even, block_size and markov_rank positive")
        self.scaling = (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5
        rs = self.rope_scaling
        if rs:
            mad = rs.get("mscale_all_dim", 0)
            if mad:
                m = dr.yarn_get_mscale(rs["factor"], mad)
                self.scaling = self.scaling * m * m

    @classmethod
    def load(cls, d):
        with open(os.path.join(d, "config.json")) as f:
            return cls(json.load(f))


# ---------------------------------------------------------------------------------------------
# target


def load_target(target_dir, threads=1):
    with open(os.path.join(target_dir, "config.json")) as f:
        mt = json.load(f).get("model_type")
    if mt not in TARGET_TYPES:
        raise RefError("target model_type %r not supported (%s; kimi_k3: K3.md §7 D1)" % (mt, ", ".join(TARGET_TYPES)))
    return dr.model_for(target_dir, "fp32", threads)


def capture_hidden(model, ids, layer_ids):
    """The target reference's own fp32 forward over `ids` (fresh sequence, positions 0..):
    (capture float32 [len(ids), C*H] = residual stream after each layer of layer_ids, in that
    order, logits float32 [len(ids), V]). Layer i's output is caught as the input of layer
    i+1's input_layernorm call, or of the final norm for the last layer."""
    nl = len(model.layers)
    if any(i < 0 or i >= nl for i in layer_ids):
        raise RefError("target_layer_ids %s outside the target's layers 0..%d" % (layer_ids, nl - 1))
    slot = {id(Lw["in_norm"]): li - 1 for li, Lw in enumerate(model.layers) if li > 0}
    slot[id(model.norm)] = nl - 1
    got = {}
    orig = model.rmsnorm

    def hook(x, w):
        li = slot.get(id(w))
        if li is not None:
            if li in got:
                raise RefError("capture hook: layer %d output seen twice" % li)
            got[li] = x.clone()
        return orig(x, w)

    model.rmsnorm = hook  # instance attribute shadows the method for this forward only
    try:
        logits = model.forward(list(ids))
    finally:
        del model.rmsnorm
    if sorted(got) != list(range(nl)):
        raise RefError("capture hook: saw the outputs of layers %s, expected 0..%d" % (sorted(got), nl - 1))
    return torch.cat([got[i] for i in layer_ids], dim=-1), logits


# ---------------------------------------------------------------------------------------------
# drafter


def rope_interleaved(x, cos, sin):
    """x [..., T, d]; cos/sin [T, d/2]: pairs (x[2i], x[2i+1]) rotated by angle i."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.stack((o1, o2), dim=-1).reshape(x.shape)


class Drafter:
    def __init__(self, drafter_dir, target, dtype="fp64"):
        if dtype not in DTYPES:
            raise RefError("dtype must be fp64 or fp32")
        self.mode = dtype
        self.dt = DTYPES[dtype]
        self.cfg = DSparkConfig.load(drafter_dir)
        self.target = target
        tc = target.cfg
        c = self.cfg
        if c.hidden_size != tc.hidden_size:
            raise RefError("drafter hidden_size %d != target hidden_size %d" % (c.hidden_size, tc.hidden_size))
        if c.draft_vocab_size != tc.vocab_size:
            raise RefError("drafter draft_vocab_size %d != target vocab_size %d" % (c.draft_vocab_size, tc.vocab_size))
        if any(i < 0 or i >= tc.num_hidden_layers for i in c.target_layer_ids):
            raise RefError("target_layer_ids %s outside the target's 0..%d" % (c.target_layer_ids, tc.num_hidden_layers - 1))
        if not 0 <= c.mask_token_id < tc.vocab_size:
            raise RefError("mask_token_id %d outside the vocabulary" % c.mask_token_id)
        self.ck = st.Checkpoint(drafter_dir)
        self.inv_freq, self.attn_factor = qr.rope_parameters(c)  # float32 inv_freq, python float
        self._load()

    def _w(self, name, shape):
        if name not in self.ck:
            raise RefError("%s: tensor %s missing" % (self.ck.dir, name))
        if self.ck.shape(name) != list(shape):
            raise RefError("%s: tensor %s has shape %s, expected %s" % (self.ck.dir, name, self.ck.shape(name), list(shape)))
        return torch.from_numpy(np.array(self.ck.float32(name), dtype=np.float32)).to(self.dt)

    def _load(self):
        c = self.cfg
        H, V, R, I = c.hidden_size, c.draft_vocab_size, c.markov_rank, c.intermediate_size
        nh, dn, drp, dv, KL = (c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim,
                               c.v_head_dim, c.kv_lora_rank)
        C = c.num_target_layers
        self.context_proj = self._w("context_proj.weight", [H, C * H])
        self.context_norm = self._w("context_norm.weight", [H])
        self.layers = []
        for n in range(c.num_hidden_layers):
            p = "layers.%d." % n
            s = p + "self_attn."
            Lw = {"in_norm": self._w(p + "input_layernorm.weight", [H]),
                  "post_norm": self._w(p + "post_attention_layernorm.weight", [H])}
            if c.q_lora_rank:
                Lw["q_a"] = self._w(s + "q_a_proj.weight", [c.q_lora_rank, H])
                Lw["q_a_norm"] = self._w(s + "q_a_layernorm.weight", [c.q_lora_rank])
                Lw["q_b"] = self._w(s + "q_b_proj.weight", [nh * (dn + drp), c.q_lora_rank])
            else:
                Lw["q"] = self._w(s + "q_proj.weight", [nh * (dn + drp), H])
            Lw["kv_a"] = self._w(s + "kv_a_proj_with_mqa.weight", [KL + drp, H])
            Lw["kv_a_norm"] = self._w(s + "kv_a_layernorm.weight", [KL])
            Lw["kv_b"] = self._w(s + "kv_b_proj.weight", [nh * (dn + dv), KL])
            Lw["o"] = self._w(s + "o_proj.weight", [H, nh * dv])
            Lw["mlp"] = (self._w(p + "mlp.gate_proj.weight", [I, H]),
                         self._w(p + "mlp.up_proj.weight", [I, H]),
                         self._w(p + "mlp.down_proj.weight", [H, I]))
            self.layers.append(Lw)
        self.final_norm = self._w("final_norm.weight", [H])
        self.markov_w1 = self._w("markov_head.markov_w1.weight", [V, R])
        self.markov_w2 = self._w("markov_head.markov_w2.weight", [V, R])
        self.conf_w = self._w("confidence_head.proj.weight", [1, H + R])
        self.conf_b = self._w("confidence_head.proj.bias", [1])
        # embed_tokens.weight (the published folder's duplicate of the target's) is never
        # read: a folder without it, like models/demo-dspark, loads the same
        # the target's embedding and lm_head (float32 exact widenings of the stored weights)
        self.embed = self.target.embed.to(self.dt)
        self.lm_head = self.target.lm_head.to(self.dt)

    # --- ops ---

    @staticmethod
    def linear(x, w):
        return x @ w.t()

    def rmsnorm(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + self.cfg.rms_norm_eps))

    def rope_cos_sin(self, positions):
        """cos, sin [T, dr/2]: angle = float32(position) * float32 inv_freq (a float32 product)."""
        ang = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        if self.mode == "fp32":
            return ang.cos() * self.attn_factor, ang.sin() * self.attn_factor
        a = ang.to(torch.float64)
        return a.cos() * self.attn_factor, a.sin() * self.attn_factor

    def rope(self, x, positions):
        cos, sin = self.rope_cos_sin(positions)
        return rope_interleaved(x, cos, sin)

    def latent(self, Lw, x, positions):
        """(c_kv normed [T, KL], k_pe roped [T, dr]) of rows x at `positions`."""
        KL = self.cfg.kv_lora_rank
        kv = self.linear(x, Lw["kv_a"])
        return self.rmsnorm(kv[:, :KL], Lw["kv_a_norm"]), self.rope(kv[:, KL:], positions)

    def attention(self, Lw, a, positions, cache, causal=False):
        c = self.cfg
        T = a.shape[0]
        nh, dn, drp, dv = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        if c.q_lora_rank:
            q = self.linear(self.rmsnorm(self.linear(a, Lw["q_a"]), Lw["q_a_norm"]), Lw["q_b"])
        else:
            q = self.linear(a, Lw["q"])
        q = q.view(T, nh, dn + drp).transpose(0, 1)  # [nh, T, dn+dr]
        q_nope, q_pe = q[..., :dn], self.rope(q[..., dn:], positions)
        ckv_b, kpe_b = self.latent(Lw, a, positions)
        ckv = torch.cat((cache[0], ckv_b), dim=0)  # [S, KL], S = L + T
        kpe = torch.cat((cache[1], kpe_b), dim=0)  # [S, dr]
        S = ckv.shape[0]
        kv = self.linear(ckv, Lw["kv_b"]).view(S, nh, dn + dv).transpose(0, 1)  # [nh, S, dn+dv]
        k = torch.cat((kv[..., :dn], kpe[None].expand(nh, S, drp)), dim=-1)
        v = kv[..., dn:]
        scores = (torch.cat((q_nope, q_pe), dim=-1) @ k.transpose(1, 2)) * c.scaling  # [nh, T, S]
        if causal:  # only for dspark_selfcheck.py: the mask the drafter must NOT use
            L = S - T
            qi = torch.arange(T)[:, None]
            kj = torch.arange(S)[None, :]
            scores = scores.masked_fill(kj > L + qi, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).transpose(0, 1).reshape(T, nh * dv)
        return self.linear(out, Lw["o"])

    def swiglu(self, x, wg, wu, wd):
        return self.linear(torch.nn.functional.silu(self.linear(x, wg)) * self.linear(x, wu), wd)

    def context(self, capture):
        """capture [L, C*H] -> (ctx [L, H], caches [(c_kv [L, KL], k_pe [L, dr]) per layer])."""
        cat = capture.to(self.dt)
        ctx = self.rmsnorm(self.linear(cat, self.context_proj), self.context_norm)
        pos = torch.arange(ctx.shape[0])
        return ctx, [self.latent(Lw, ctx, pos) for Lw in self.layers]

    def block(self, caches, L, block_ids, causal=False):
        """Final-normed hidden rows [r, H] of the block `block_ids` at positions L.. ."""
        h = self.embed[torch.tensor(block_ids, dtype=torch.int64)]
        pos = torch.arange(L, L + len(block_ids))
        for Lw, cache in zip(self.layers, caches):
            h = h + self.attention(Lw, self.rmsnorm(h, Lw["in_norm"]), pos, cache, causal)
            h = h + self.swiglu(self.rmsnorm(h, Lw["post_norm"]), *Lw["mlp"])
        return self.rmsnorm(h, self.final_norm)

    def heads(self, hn, anchor):
        """Markov head + confidence: (raw logits, z, tokens, confidence) from hn [r, H]."""
        raw = self.linear(hn, self.lm_head)  # [r, V]
        z, toks, conf = [], [], []
        prev = anchor
        for k in range(hn.shape[0]):
            m1 = self.markov_w1[prev]  # [R]
            zk = raw[k] + self.markov_w2 @ m1
            conf.append(float((self.conf_w @ torch.cat((hn[k], m1)))[0] + self.conf_b[0]))
            tok = qr.argmax_low(zk)
            z.append(zk)
            toks.append(tok)
            prev = tok
        return raw, torch.stack(z), toks, conf

    def draft(self, context_ids, anchor, block_ids=None, causal=False, capture=None):
        """One proposal block. Returns a dict of tensors and lists (see main for the JSON)."""
        c = self.cfg
        V = c.draft_vocab_size
        ids = list(context_ids)
        if not ids:
            raise RefError("empty context")
        if any(i < 0 or i >= V for i in ids + [anchor]):
            raise RefError("token id out of range 0..%d" % (V - 1))
        if capture is None:
            capture, _ = capture_hidden(self.target, ids, c.target_layer_ids)
        L = len(ids)
        ctx, caches = self.context(capture)
        if block_ids is None:
            block_ids = [anchor] + [c.mask_token_id] * (c.block_size - 1)
        hn = self.block(caches, L, block_ids, causal)
        raw, z, toks, conf = self.heads(hn, anchor)
        return {"capture": capture, "ctx": ctx, "caches": caches, "hidden": hn, "raw_logits": raw,
                "z": z, "proposals": toks, "confidence": conf, "L": L, "block_ids": block_ids,
                "positions": list(range(L, L + len(block_ids)))}


# ---------------------------------------------------------------------------------------------
# CLI


def top2_gap(row):
    t = torch.topk(row, 2).values
    return float(t[0] - t[1])


def summary(d, res, context_ids, anchor):
    c = d.cfg
    gaps = [top2_gap(r) for r in res["z"]]
    raw_arg = [qr.argmax_low(r) for r in res["raw_logits"]]
    return {
        "capture_layers": c.target_layer_ids,
        "L": res["L"],
        "r": len(res["block_ids"]),
        "context_ids": list(context_ids),
        "anchor": anchor,
        "mask_token_id": c.mask_token_id,
        "block_ids": res["block_ids"],
        "positions": res["positions"],
        "proposals": res["proposals"],
        "confidence": res["confidence"],
        "top2_gap_min": min(gaps),
        "top2_gaps": gaps,
        "raw_argmax": raw_arg,
        "markov_changed": sum(int(a != b) for a, b in zip(raw_arg, res["proposals"])),
        "dtype": d.mode,
    }


def verify(target, context_ids, anchor, proposals):
    """Greedy verification by the target: (accepted count, next anchor, target tokens)."""
    seq = list(context_ids) + [anchor] + list(proposals)
    logits = target.forward(seq)
    L = len(context_ids)
    tt = [qr.argmax_low(logits[L + k]) for k in range(len(proposals) + 1)]
    a = 0
    while a < len(proposals) and proposals[a] == tt[a]:
        a += 1
    return a, tt[a], tt


def write_f32(path, t):
    arr = np.ascontiguousarray(t.detach().to(torch.float64).numpy().astype("<f4"))
    with open(path + ".tmp", "wb") as f:
        f.write(arr.tobytes())
    os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dspark_ref", description="DSpark block drafter reference.")
    ap.add_argument("--target", required=True, help="target model folder")
    ap.add_argument("--drafter", required=True, help="DSpark drafter folder")
    ap.add_argument("--context-ids", required=True, help="comma-separated committed token ids")
    ap.add_argument("--anchor", type=int, required=True, help="the target's last emitted token (not in the context)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out-bin", help="prefix of the float32 LE dumps (.capture/.ctx/.logits/.raw_logits/.hidden.f32)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp64")
    ap.add_argument("--rounds", type=int, default=1, help="simulated speculative rounds (default 1)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    ids = qr.parse_ids(a.context_ids)
    try:
        target = load_target(a.target, a.threads)
        d = Drafter(a.drafter, target, a.dtype)
        rounds = []
        ctx_ids, anchor = list(ids), a.anchor
        with torch.no_grad():
            for rn in range(max(1, a.rounds)):
                res = d.draft(ctx_ids, anchor)
                s = summary(d, res, ctx_ids, anchor)
                if rn == 0 and a.out_bin:
                    files = {}
                    for key in ("capture", "ctx", "logits", "raw_logits", "hidden"):
                        t = res["z"] if key == "logits" else res[key]
                        path = "%s.%s.f32" % (a.out_bin, key)
                        write_f32(path, t)
                        files[key] = {"file": path, "shape": list(t.shape)}
                    s["files"] = files
                if a.rounds > 1:
                    acc, nxt, tt = verify(target, ctx_ids, anchor, res["proposals"])
                    s["target_tokens"], s["accepted"], s["next_anchor"] = tt, acc, nxt
                    ctx_ids = ctx_ids + [anchor] + res["proposals"][:acc]
                    anchor = nxt
                rounds.append(s)
    except (RefError, st.SafetensorsError, OSError, KeyError) as e:
        print("dspark_ref: %s" % e, file=sys.stderr)
        return 1
    out = dict(rounds[0])
    if a.rounds > 1:
        out["rounds"] = rounds
    if a.json:
        print(json.dumps(out))
    else:
        print(",".join(str(t) for t in out["proposals"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
