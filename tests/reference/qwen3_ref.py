#!/usr/bin/python3
"""tests/reference/qwen3_ref.py — PyTorch reference forward pass of qwen3_moe and qwen3.

Owns: the test oracle for the Qwen3 families, written from the semantics of transformers'
models/qwen3_moe/modeling_qwen3_moe.py, models/qwen3/modeling_qwen3.py and
modeling_rope_utils.py (default, linear and YaRN RoPE). Does not own: file formats
(safetensors_io.py) or checkpoint generation (make_checkpoint.py).

Numeric modes
  fp32 (default; the engine's contract): weights are read in their stored dtype and widened
      exactly to float32; every activation, product and accumulation is float32. Routed
      expert outputs are weighted and summed in fp32 in router order (descending routing
      weight, lower expert index first on equal weights), starting from zero.
  bf16: mimics transformers running the model in torch.bfloat16 with eager attention: every
      op computes in fp32 and rounds its result to bf16 (round to nearest even), exactly
      where a bf16 tensor would be materialised: after each linear, each elementwise op,
      q*cos and rotate_half(q)*sin separately, QK^T then its scaling, the residual adds,
      RMSNorm's normalised x before the weight multiply and after it. Softmaxes run in fp32
      and are rounded after; router softmax/top-k/renormalisation in fp32, weights rounded to
      bf16; routed outputs accumulate in a bf16 buffer in ascending expert index (HF's
      index_add_ loop). Used to document the fp32-vs-bf16 gap, not as the oracle.

Forward (per decoder layer; layer i is MoE iff model_type is qwen3_moe, num_experts > 0,
i not in mlp_only_layers and (i+1) % decoder_sparse_step == 0):
  h = x + o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n))), n = input_layernorm(x)
  y = h + mlp(post_attention_layernorm(h))
RMSNorm(x) = w * (x * rsqrt(mean(x^2) + eps)), variance in fp32. q_norm/k_norm act on each
head's head_dim slice before RoPE. RoPE: rotate_half pairing (i, i + d/2),
inv_freq = 1 / theta^(arange(0, d, 2) / d) in fp32, cos/sin of fp32 position*inv_freq,
both multiplied by the rope attention factor (YaRN). Attention: causal, GQA (query head h
reads kv head h // (n_head / n_head_kv)), scale head_dim^-0.5, softmax in fp32.
MoE: router logits = gate(n); p = softmax(logits) in fp32; top-k of p; if norm_topk_prob
p_k /= sum(p_k); out = sum_k p_k * down(silu(gate_proj(n)) * up_proj(n)).
Logits = lm_head(norm(x)) (lm_head = embed_tokens when tie_word_embeddings).

YaRN parameters follow transformers' _compute_yarn_parameters with the explicit
rope_scaling.factor (transformers 5 computes it from the ratio only when factor is absent;
vLLM and llama.cpp also use the explicit factor). The Qwen3-era transformers 4.x code replaced
factor by max_position_embeddings / original_max_position_embeddings whenever the latter key
is present; the two agree when max_position_embeddings == factor *
original_max_position_embeddings, which the fixtures keep.

CLI:
  qwen3_ref.py --model DIR --prompt-ids 1,2,3 [--max-new N] [--logits-out FILE]
               [--dtype fp32|bf16] [--stop-eos] [--no-cache] [--json] [--threads N]
Prints the greedy continuation ids (comma-separated). Greedy = argmax, lowest index on ties.
--logits-out writes float32 little-endian row-major [n_prompt, vocab]: the logits of every
prompt position (from one full-sequence forward).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402

SUPPORTED_TYPES = ("qwen3_moe", "qwen3")


class RefError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# config


class Config:
    def __init__(self, d):
        self.raw = d
        mt = d.get("model_type")
        if mt not in SUPPORTED_TYPES:
            raise RefError("config.json: model_type %r not supported (supported: %s)" % (mt, ", ".join(SUPPORTED_TYPES)))
        self.model_type = mt
        g = d.get
        self.vocab_size = int(d["vocab_size"])
        self.hidden_size = int(d["hidden_size"])
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.num_key_value_heads = int(g("num_key_value_heads") or self.num_attention_heads)
        # absent head_dim: Qwen3Config defaults to 128; Qwen3MoeConfig falls back to hidden/heads
        default_hd = 128 if mt == "qwen3" else self.hidden_size // self.num_attention_heads
        self.head_dim = int(g("head_dim") or default_hd)
        self.intermediate_size = int(d["intermediate_size"])
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        self.rope_theta = float(g("rope_theta", 10000.0))
        self.rope_scaling = g("rope_scaling")
        self.max_position_embeddings = int(g("max_position_embeddings", 32768))
        self.tie_word_embeddings = bool(g("tie_word_embeddings", False))
        self.attention_bias = bool(g("attention_bias", False))
        act = g("hidden_act", "silu")
        if act != "silu":
            raise RefError("config.json: hidden_act %r not supported (only silu)" % act)
        if g("use_sliding_window", False):
            raise RefError("config.json: use_sliding_window true not supported")
        if self.num_attention_heads % self.num_key_value_heads:
            raise RefError("config.json: num_attention_heads not divisible by num_key_value_heads")
        eos = g("eos_token_id")
        self.eos_token_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(x) for x in eos])
        if mt == "qwen3_moe":
            # absent keys take Qwen3MoeConfig's defaults
            self.num_experts = int(g("num_experts", 128))
            self.num_experts_per_tok = int(g("num_experts_per_tok", 8))
            self.moe_intermediate_size = int(g("moe_intermediate_size", 768))
            self.norm_topk_prob = bool(g("norm_topk_prob", False))
            self.decoder_sparse_step = int(g("decoder_sparse_step", 1))
            self.mlp_only_layers = [int(x) for x in (g("mlp_only_layers") or [])]
        else:
            self.num_experts = 0
            self.num_experts_per_tok = 0
            self.moe_intermediate_size = 0
            self.norm_topk_prob = False
            self.decoder_sparse_step = 1
            self.mlp_only_layers = []
        self.is_moe = [self.num_experts > 0 and i not in self.mlp_only_layers
                       and (i + 1) % self.decoder_sparse_step == 0
                       for i in range(self.num_hidden_layers)]

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return cls(json.load(f))


# ---------------------------------------------------------------------------------------------
# RoPE (transformers modeling_rope_utils semantics, fp32)


def rope_parameters(cfg):
    """(inv_freq float32 [head_dim/2], attention_factor float) as transformers computes them."""
    dim = cfg.head_dim
    base = cfg.rope_theta
    rs = cfg.rope_scaling or {}
    rtype = rs.get("rope_type", rs.get("type", "default")) if rs else "default"
    if rtype == "default":
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        return inv_freq, 1.0
    if rtype == "linear":
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        inv_freq = inv_freq / float(rs["factor"])
        return inv_freq, 1.0
    if rtype == "yarn":
        factor = rs.get("factor")
        omax = rs.get("original_max_position_embeddings") or cfg.max_position_embeddings
        if factor is None:
            factor = cfg.max_position_embeddings / omax
        factor = float(factor)
        attention_factor = rs.get("attention_factor")
        mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1
        truncate = rs.get("truncate", True)

        def corr_dim(rot):
            return (dim * math.log(omax / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
        inv_extra = 1.0 / pos_freqs
        inv_inter = 1.0 / (factor * pos_freqs)
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extra_factor = 1 - ramp
        inv_freq = inv_inter * (1 - extra_factor) + inv_extra * extra_factor
        return inv_freq, float(attention_factor)
    raise RefError("config.json: rope_scaling type %r not supported (default, linear, yarn)" % rtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


# ---------------------------------------------------------------------------------------------
# model


def _bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def _ident(x):
    return x


class KVCache:
    def __init__(self, n_layers):
        self.k = [None] * n_layers  # [n_kv, S, head_dim], post k_norm + RoPE
        self.v = [None] * n_layers
        self.length = 0


class Model:
    def __init__(self, model_dir, dtype="fp32", threads=1):
        if dtype not in ("fp32", "bf16"):
            raise RefError("dtype must be fp32 or bf16")
        if threads:
            torch.set_num_threads(threads)
        self.cfg = Config.load(model_dir)
        self.mode = dtype
        self.R = _bf16 if dtype == "bf16" else _ident
        self.ck = st.Checkpoint(model_dir)
        self.inv_freq, self.attn_factor = rope_parameters(self.cfg)
        self.stats = {"min_router_margin": math.inf}
        self._load()

    def _w(self, name, shape):
        if name not in self.ck:
            raise RefError("%s: tensor %s missing" % (self.ck.dir, name))
        if self.ck.shape(name) != list(shape):
            raise RefError("%s: tensor %s has shape %s, expected %s" % (self.ck.dir, name, self.ck.shape(name), list(shape)))
        t = torch.from_numpy(np.array(self.ck.float32(name)))
        if self.mode == "bf16":
            t = _bf16(t)  # transformers with torch_dtype=bfloat16 rounds stored f16/f32 weights
        return t

    def _load(self):
        c = self.cfg
        H, V, hd = c.hidden_size, c.vocab_size, c.head_dim
        nh, kv = c.num_attention_heads, c.num_key_value_heads
        self.embed = self._w("model.embed_tokens.weight", [V, H])
        self.layers = []
        for i in range(c.num_hidden_layers):
            p = "model.layers.%d." % i
            L = {
                "in_norm": self._w(p + "input_layernorm.weight", [H]),
                "q": self._w(p + "self_attn.q_proj.weight", [nh * hd, H]),
                "k": self._w(p + "self_attn.k_proj.weight", [kv * hd, H]),
                "v": self._w(p + "self_attn.v_proj.weight", [kv * hd, H]),
                "o": self._w(p + "self_attn.o_proj.weight", [H, nh * hd]),
                "q_norm": self._w(p + "self_attn.q_norm.weight", [hd]),
                "k_norm": self._w(p + "self_attn.k_norm.weight", [hd]),
                "post_norm": self._w(p + "post_attention_layernorm.weight", [H]),
            }
            for n, rows in (("q", nh * hd), ("k", kv * hd), ("v", kv * hd), ("o", H)):
                L[n + "_b"] = self._w(p + "self_attn.%s_proj.bias" % n, [rows]) if c.attention_bias else None
            if c.is_moe[i]:
                E, I = c.num_experts, c.moe_intermediate_size
                L["router"] = self._w(p + "mlp.gate.weight", [E, H])
                L["experts"] = [(self._w(p + "mlp.experts.%d.gate_proj.weight" % e, [I, H]),
                                 self._w(p + "mlp.experts.%d.up_proj.weight" % e, [I, H]),
                                 self._w(p + "mlp.experts.%d.down_proj.weight" % e, [H, I])) for e in range(E)]
            else:
                I = c.intermediate_size
                L["mlp"] = (self._w(p + "mlp.gate_proj.weight", [I, H]),
                            self._w(p + "mlp.up_proj.weight", [I, H]),
                            self._w(p + "mlp.down_proj.weight", [H, I]))
            self.layers.append(L)
        self.norm = self._w("model.norm.weight", [H])
        if c.tie_word_embeddings:
            self.lm_head = self.embed
        else:
            self.lm_head = self._w("lm_head.weight", [V, H])

    # --- ops (R rounds to bf16 in bf16 mode, identity in fp32 mode) ---

    def linear(self, x, w, b=None):
        y = x @ w.t()
        if b is not None:
            y = y + b
        return self.R(y)

    def rmsnorm(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        y = self.R(x * torch.rsqrt(var + self.cfg.rms_norm_eps))
        return self.R(w * y)

    def rope_cos_sin(self, positions):
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return self.R(emb.cos() * self.attn_factor), self.R(emb.sin() * self.attn_factor)

    def apply_rope(self, x, cos, sin):
        # x [heads, T, d]; cos/sin [T, d]
        R = self.R
        return R(R(x * cos) + R(rotate_half(x) * sin))

    def swiglu(self, x, wg, wu, wd):
        R = self.R
        g = self.linear(x, wg)
        u = self.linear(x, wu)
        return self.linear(R(R(torch.nn.functional.silu(g)) * u), wd)

    def attention(self, L, li, x, positions, cache):
        c, R = self.cfg, self.R
        T = x.shape[0]
        nh, kv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q = self.linear(x, L["q"], L["q_b"]).view(T, nh, hd)
        k = self.linear(x, L["k"], L["k_b"]).view(T, kv, hd)
        v = self.linear(x, L["v"], L["v_b"]).view(T, kv, hd)
        q = self.rmsnorm(q, L["q_norm"]).transpose(0, 1)  # [nh, T, hd]
        k = self.rmsnorm(k, L["k_norm"]).transpose(0, 1)  # [kv, T, hd]
        v = v.transpose(0, 1)
        cos, sin = self.rope_cos_sin(positions)
        q = self.apply_rope(q, cos, sin)
        k = self.apply_rope(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            if cache.k[li] is not None:
                k = torch.cat((cache.k[li], k), dim=1)
                v = torch.cat((cache.v[li], v), dim=1)
            cache.k[li], cache.v[li] = k, v
        S = k.shape[1]
        rep = nh // kv
        k = k.repeat_interleave(rep, dim=0)  # head h reads kv head h // rep
        v = v.repeat_interleave(rep, dim=0)
        scores = R(R(q @ k.transpose(1, 2)) * (hd ** -0.5))  # [nh, T, S]
        qpos = torch.arange(past, past + T)[:, None]
        kpos = torch.arange(S)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = R(torch.softmax(scores, dim=-1, dtype=torch.float32))
        out = R(probs @ v)  # [nh, T, hd]
        out = out.transpose(0, 1).reshape(T, nh * hd)
        return self.linear(out, L["o"], L["o_b"])

    def moe(self, L, x):
        c, R = self.cfg, self.R
        T = x.shape[0]
        E, K = c.num_experts, c.num_experts_per_tok
        logits = self.linear(x, L["router"])  # [T, E]; fp32 mode: fp32 router from stored weights
        probs = torch.softmax(logits.to(torch.float32), dim=-1, dtype=torch.float32)
        # top-k by descending probability, lower expert index first on ties (stable sort)
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
        sel = order[:, :K]
        w = torch.gather(probs, 1, sel)
        if K < E:
            sorted_logits = torch.gather(logits, 1, order)
            margin = float((sorted_logits[:, K - 1] - sorted_logits[:, K]).min())
            self.stats["min_router_margin"] = min(self.stats["min_router_margin"], margin)
        if c.norm_topk_prob:
            w = w / w.sum(dim=-1, keepdim=True)
        w = R(w)
        # expert outputs per (token, slot)
        y = torch.zeros(T, K, c.hidden_size, dtype=torch.float32)
        for e in range(E):
            rows, slots = torch.nonzero(sel == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            wg, wu, wd = L["experts"][e]
            ye = self.swiglu(x[rows], wg, wu, wd)
            y[rows, slots] = R(ye * w[rows, slots][:, None])
        if self.mode == "fp32":
            acc = y[:, 0].clone()
            for j in range(1, K):
                acc = acc + y[:, j]
            return acc
        # bf16: HF accumulates into a bf16 buffer, looping experts in ascending index
        slot_order = torch.argsort(sel, dim=-1)
        acc = torch.zeros(T, c.hidden_size, dtype=torch.float32)
        for j in range(K):
            s = slot_order[:, j]
            acc = R(acc + y[torch.arange(T), s])
        return acc

    def forward(self, ids, cache=None):
        """ids: list of token ids, appended after `cache` (None = a fresh sequence without
        cache). Returns float32 logits [len(ids), vocab]."""
        c, R = self.cfg, self.R
        ids_t = torch.tensor(ids, dtype=torch.int64)
        if ids_t.numel() == 0:
            raise RefError("empty input")
        if int(ids_t.min()) < 0 or int(ids_t.max()) >= c.vocab_size:
            raise RefError("token id out of range 0..%d" % (c.vocab_size - 1))
        past = cache.length if cache is not None else 0
        positions = torch.arange(past, past + len(ids))
        x = self.embed[ids_t]
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["in_norm"])
            x = R(x + self.attention(L, li, h, positions, cache))
            h = self.rmsnorm(x, L["post_norm"])
            if c.is_moe[li]:
                m = self.moe(L, h)
            else:
                m = self.swiglu(h, *L["mlp"])
            x = R(x + m)
        if cache is not None:
            cache.length += len(ids)
        x = self.rmsnorm(x, self.norm)
        return self.linear(x, self.lm_head)

    def new_cache(self):
        return KVCache(self.cfg.num_hidden_layers)


# ---------------------------------------------------------------------------------------------
# greedy decoding


def argmax_low(row):
    """Index of the maximum, lowest index on ties."""
    m = row.max()
    return int(torch.nonzero(row == m)[0, 0])


def top2_gap(row):
    t = torch.topk(row, 2).values
    return float(t[0] - t[1])


def generate(model, prompt, max_new, stop_eos=False, use_cache=True):
    """Greedy continuation. Returns (new ids, prompt logits [n, V], step logits list) where
    step logits[j] is the row new id j was chosen from (step 0 = last prompt row)."""
    if use_cache:
        cache = model.new_cache()
        prompt_logits = model.forward(prompt, cache)
    else:
        prompt_logits = model.forward(prompt)
    steps = [prompt_logits[-1]]
    out = []
    seq = list(prompt)
    for j in range(max_new):
        nxt = argmax_low(steps[-1])
        out.append(nxt)
        seq.append(nxt)
        if stop_eos and nxt in model.cfg.eos_token_ids:
            break
        if j == max_new - 1:
            break
        if use_cache:
            steps.append(model.forward([nxt], cache)[-1])
        else:
            steps.append(model.forward(seq)[-1])
    return out, prompt_logits, steps


def parse_ids(s):
    try:
        ids = [int(x) for x in s.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise SystemExit("qwen3_ref: --prompt-ids wants comma-separated integers, got %r" % s)
    if not ids:
        raise SystemExit("qwen3_ref: --prompt-ids is empty")
    return ids


def main(argv=None, model_cls=None, prog="qwen3_ref"):
    """CLI; model_cls(dir, dtype, threads) builds the model (default: this file's Model)."""
    ap = argparse.ArgumentParser(prog=prog, description="Reference forward pass and greedy decoding.")
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--max-new", type=int, default=16, help="greedy tokens to generate (default 16)")
    ap.add_argument("--logits-out", help="write float32 LE [n_prompt, vocab] prompt logits here")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="numeric mode (default fp32)")
    ap.add_argument("--stop-eos", action="store_true", help="stop after an eos_token_id (as generate() does)")
    ap.add_argument("--no-cache", action="store_true", help="recompute the whole sequence at every step")
    ap.add_argument("--json", action="store_true", help="print a JSON object with ids and margins")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    prompt = parse_ids(a.prompt_ids)
    try:
        model = (model_cls or Model)(a.model, a.dtype, a.threads)
        with torch.no_grad():
            ids, prompt_logits, steps = generate(model, prompt, a.max_new, a.stop_eos, not a.no_cache)
    except (RefError, st.SafetensorsError, OSError, KeyError) as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
    if a.logits_out:
        arr = prompt_logits.numpy().astype("<f4")
        with open(a.logits_out + ".tmp", "wb") as f:
            f.write(arr.tobytes())
        os.replace(a.logits_out + ".tmp", a.logits_out)
    if a.json:
        rows = list(prompt_logits) + steps[1:]
        print(json.dumps({"prompt_ids": prompt, "greedy_ids": ids, "dtype": a.dtype,
                          "min_top2_gap": min(top2_gap(r) for r in rows),
                          "min_router_margin": model.stats["min_router_margin"]
                          if math.isfinite(model.stats["min_router_margin"]) else None}))
    else:
        print(",".join(str(i) for i in ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
