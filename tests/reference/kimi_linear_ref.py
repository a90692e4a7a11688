#!/usr/bin/python3
"""tests/reference/kimi_linear_ref.py — PyTorch reference forward pass of the Kimi Linear family.

Owns: the test oracle for model_type "kimi_linear" (moonshotai/Kimi-Linear-48B-A3B) and for
the K3-style wrapper (model_type "kimi_k3", text model under "text_config", tensors under
"language_model."; only config/prefix resolution — Attention Residuals, latent MoE, SiTU and
MXFP4 are not part of this family's reference). Written from the semantics of the published
modeling_kimi.py (KimiDeltaAttention, KimiMLAAttention, KimiMoEGate, KimiSparseMoeBlock,
KimiDecoderLayer), fla's kda ops (fused_kda_gate / naive_kda_gate, naive_kda_lowerbound_gate,
fused_recurrent_kda, ShortConvolution, FusedRMSNormGated, l2norm) and vLLM's
model_executor/models/kimi_linear.py + layers/kda.py. Reuses qwen3_ref.py's greedy decoding
and CLI; does not own file formats (safetensors_io.py) or checkpoint generation
(kimi_linear_ckpt.py).

Numeric modes: as qwen3_ref.py. fp32 (the engine's contract): stored weights widened exactly
to float32, every activation float32, and KDA's recurrence evaluated token by token in
float32 — the same semantics for prefill and decode (no chunked form). bf16 rounds op
results to bf16 where transformers would materialise a bf16 tensor (documentation only).

Forward per decoder layer (plain pre-norm residual):
  n = input_layernorm(x);  x = x + attn(n);  n = post_attention_layernorm(x);  x = x + ffn(n)
  RMSNorm(x; w, eps) = w * (x * rsqrt(mean(x^2) + eps)), eps = rms_norm_eps; the MLA
  q_a_layernorm / kv_a_layernorm use eps 1e-6 (KimiRMSNorm's default: the published module
  constructs them without an eps).
Layer i is KDA iff (i + 1) in linear_attn_config.kda_layers (1-based), else MLA.
KDA (H heads of width D, P = H*D, per token t, channels head-major c = h*D + d):
  q~, k~, v~ = q_proj(n), k_proj(n), v_proj(n)
  q, k, v = silu(causal depthwise conv of width W over q~, k~, v~): y_t[c] =
      sum_j w[c, 0, j] * x~_{t-W+1+j}[c], x~ before the sequence = 0; taps summed oldest first
  g_raw = f_b_proj(f_a_proj(n)) viewed [H, D];  beta = sigmoid(b_proj(n))  [H]
  decay (A = exp(A_log[h]), one value per head; A_log may be [1,1,H,1] or [>= H], first H used):
      gate_lower_bound absent:  g = -(A * softplus(g_raw + dt_bias))   (softplus threshold 20)
      gate_lower_bound = lb:    g = lb * sigmoid(A * (g_raw + dt_bias))
  q^ = (q * rsqrt(sum q^2 + 1e-6)) * D^-0.5,  k^ = k * rsqrt(sum k^2 + 1e-6)
  per head, S [D_k, D_v] float32, S_0 = 0:
      S = S * exp(g_t)[:, None];  u = (v_t - S^T k^_t) * beta_t;  S = S + k^_t (x) u;  o_t = S^T q^_t
  gate = g_b_proj(g_a_proj(n)) (or g_proj(n) when use_full_rank_gate), per head
  o' = ((o * rsqrt(mean(o^2) + eps)) * o_norm.weight) * sigmoid(gate), eps = rms_norm_eps
  out = o_proj(concat_h o')
MLA (NoPE; DeepSeek-V3 projections, no rotary embedding at all):
  q = q_proj(n) or q_b_proj(RMSNorm(q_a_proj(n); 1e-6)) viewed [nh, dn + dr]
  c, k_r = split(kv_a_proj_with_mqa(n), [kv_lora, dr]);  k_nope, v = split(kv_b_proj(RMSNorm(c; 1e-6)))
  K_h = [k_nope_h, k_r] (k_r shared by every head);  softmax(Q K^T * (dn + dr)^-0.5) V, causal
  mla_use_output_gate: attn = attn * sigmoid(g_proj(n)) over the concatenated heads
  out = o_proj(attn)
MoE (KimiMoEGate, noaux_tc): logits = gate(n) in fp32, s = sigmoid(logits);
  choice = s + e_score_correction_bias (selection only); with use_grouped_topk and
  num_expert_group > 1: group score = sum of the top-2 choices per group, keep topk_group
  groups (others excluded with -inf; transformers fills 0.0 — stats["hf_mask_differs"] counts
  tokens where that would choose differently); top-k experts by choice; weights = s of those
  experts (the UNBIASED scores), / (sum + 1e-20) when moe_renormalize and k > 1, times
  routed_scaling_factor. out = sum_k w_k * expert_k(n) in router order (descending choice,
  lower index first) + shared_experts(n) (width moe_intermediate_size * num_shared_experts).
  Experts: w2(silu(w1 x) * w3 x). The published 48B modeling_kimi.py adds the bias in place
  to a view of `scores` and so weights by the biased scores; vLLM, SGLang and K3's file use
  the unbiased ones, as does this reference.
Cache per sequence: KDA layers keep S [H, D, D] and the last W-1 pre-conv rows of q~, k~, v~;
MLA layers keep the expanded K [nh, S, dn + dr] and V [nh, S, dv].

CLI: as qwen3_ref.py (kimi_linear_ref.py --model DIR --prompt-ids 1,2,3 [...]).
"""

import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

SUPPORTED_TYPES = ("kimi_linear", "kimi_k3")
RefError = qr.RefError
MLA_LORA_NORM_EPS = 1e-6
L2NORM_EPS = 1e-6


class Config:
    def __init__(self, d):
        self.raw = d
        mt = d.get("model_type")
        if mt not in SUPPORTED_TYPES:
            raise RefError("config.json: model_type %r not supported (supported: %s)" % (mt, ", ".join(SUPPORTED_TYPES)))
        self.prefix = ""
        top = d
        if mt == "kimi_k3":
            d = d.get("text_config")
            if not isinstance(d, dict) or d.get("model_type", "kimi_linear") != "kimi_linear":
                raise RefError("config.json: kimi_k3 needs a kimi_linear text_config")
            self.prefix = "language_model."
            for k in ("attn_res_block_size", "routed_expert_hidden_size"):
                if d.get(k):
                    raise RefError("config.json: %s (K3 Attention Residuals / latent MoE) not supported" % k)
        self.model_type = mt
        g = d.get
        self.vocab_size = int(d["vocab_size"])
        self.hidden_size = int(d["hidden_size"])
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.q_lora_rank = g("q_lora_rank")
        self.kv_lora_rank = int(d["kv_lora_rank"])
        self.qk_nope_head_dim = int(d["qk_nope_head_dim"])
        self.qk_rope_head_dim = int(d["qk_rope_head_dim"])
        self.v_head_dim = int(d["v_head_dim"])
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.mla_use_output_gate = bool(g("mla_use_output_gate", False))
        if not g("mla_use_nope", False):
            raise RefError("config.json: mla_use_nope must be true (the published model asserts it)")
        self.intermediate_size = int(g("intermediate_size") or 0)
        self.moe_intermediate_size = int(g("moe_intermediate_size") or 0)
        ne = g("num_experts")
        self.num_experts = int(ne) if ne is not None else 0
        self.num_experts_per_tok = int(g("num_experts_per_token") or 0)
        self.n_shared_experts = int(g("num_shared_experts") or 0)
        self.use_grouped_topk = bool(g("use_grouped_topk", True))
        self.n_group = int(g("num_expert_group", 1) or 1)
        self.topk_group = int(g("topk_group", 1) or 1)
        self.routed_scaling_factor = float(g("routed_scaling_factor", 1.0))
        self.moe_renormalize = bool(g("moe_renormalize", True))
        self.first_k_dense_replace = int(g("first_k_dense_replace", 0))
        self.moe_layer_freq = int(g("moe_layer_freq", 1))
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        self.tie_word_embeddings = bool(g("tie_word_embeddings", top.get("tie_word_embeddings", False)))
        if g("moe_router_activation_func", "sigmoid") != "sigmoid":
            raise RefError("config.json: only moe_router_activation_func sigmoid is supported")
        if g("hidden_act", "silu") != "silu":
            raise RefError("config.json: hidden_act must be silu")
        if g("quantization_config") or top.get("quantization_config"):
            raise RefError("config.json: quantized Kimi Linear checkpoints are not supported by the reference")
        la = g("linear_attn_config")
        if la is None:
            raise RefError("config.json: linear_attn_config missing")
        self.kda_heads = int(la["num_heads"])
        self.kda_head_dim = int(la["head_dim"])
        self.conv_size = int(la["short_conv_kernel_size"])
        self.gate_lower_bound = la.get("gate_lower_bound")
        if self.gate_lower_bound is not None:
            self.gate_lower_bound = float(self.gate_lower_bound)
        self.full_rank_gate = bool(la.get("use_full_rank_gate", False))
        kda = set(int(x) for x in la["kda_layers"])
        full = set(int(x) for x in la.get("full_attn_layers") or [])
        L = self.num_hidden_layers
        self.is_kda = [(i + 1) in kda for i in range(L)]
        bad = sorted(x for x in kda | full if not 1 <= x <= L)
        if bad or kda & full:
            raise RefError("config.json: kda_layers / full_attn_layers (1-based) out of range or overlapping: %s"
                           % (bad or sorted(kda & full)))
        eos = top.get("eos_token_id", g("eos_token_id"))
        self.eos_token_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(x) for x in eos])
        self.is_moe = [self.num_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0
                       for i in range(L)]
        self.scaling = self.qk_head_dim ** -0.5

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return cls(json.load(f))


def kda_recurrence(q, k, v, g, beta, S=None):
    """The KDA delta rule, token by token in float32 (prefill and decode alike).
    q, k [T, H, Dk] (q already l2-normalised and scaled, k l2-normalised), v [T, H, Dv],
    g [T, H, Dk] log-decay, beta [T, H], S [H, Dk, Dv] or None (zeros).
    Per token: S = S * exp(g)[:, None]; u = (v - S^T k) * beta; S = S + k (x) u; o = S^T q.
    Returns (o [T, H, Dv], final S)."""
    T, H, Dk = k.shape
    Dv = v.shape[-1]
    if S is None:
        S = torch.zeros(H, Dk, Dv, dtype=torch.float32)
    decay = torch.exp(g)
    outs = []
    for t in range(T):
        S = S * decay[t][:, :, None]
        kt = k[t]
        u = (v[t] - (S * kt[:, :, None]).sum(1)) * beta[t][:, None]   # [H, Dv]
        S = S + kt[:, :, None] * u[:, None, :]
        outs.append((S * q[t][:, :, None]).sum(1))                    # [H, Dv]
    return torch.stack(outs), S


class Cache:
    def __init__(self, n_layers):
        self.k = [None] * n_layers      # MLA: [nh, S, dn + dr]
        self.v = [None] * n_layers      # MLA: [nh, S, dv]
        self.conv = [None] * n_layers   # KDA: (q, k, v) windows, each [W - 1, P] pre-conv rows
        self.state = [None] * n_layers  # KDA: S [H, D_k, D_v] float32
        self.length = 0


class Model:
    def __init__(self, model_dir, dtype="fp32", threads=1):
        if dtype not in ("fp32", "bf16"):
            raise RefError("dtype must be fp32 or bf16")
        if threads:
            torch.set_num_threads(threads)
        self.cfg = Config.load(model_dir)
        self.mode = dtype
        self.R = qr._bf16 if dtype == "bf16" else qr._ident
        self.ck = st.Checkpoint(model_dir)
        self.stats = {"min_router_margin": math.inf, "hf_mask_differs": 0}
        self._load()

    def _w(self, name, shape=None, shapes=None):
        """Tensor prefix+name widened to float32 (F32 parameters are never rounded)."""
        full = self.cfg.prefix + name
        if full not in self.ck:
            raise RefError("%s: tensor %s missing" % (self.ck.dir, full))
        got = self.ck.shape(full)
        ok = got == list(shape) if shape is not None else any(s(got) for s in shapes)
        if not ok:
            raise RefError("%s: tensor %s has shape %s, expected %s" % (self.ck.dir, full, got, shape))
        t = torch.from_numpy(np.array(self.ck.float32(full), dtype=np.float32))
        if self.mode == "bf16" and self.ck.dtype(full) != "F32":
            t = qr._bf16(t)
        return t

    def _load(self):
        c = self.cfg
        Hd, V, nh = c.hidden_size, c.vocab_size, c.num_attention_heads
        dn, dr, dv, L = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        kh, kd, W = c.kda_heads, c.kda_head_dim, c.conv_size
        P = kh * kd
        self.embed = self._w("model.embed_tokens.weight", [V, Hd])
        self.layers = []

        def mlp(p, inter, names=("gate_proj", "up_proj", "down_proj")):
            return (self._w(p + names[0] + ".weight", [inter, Hd]),
                    self._w(p + names[1] + ".weight", [inter, Hd]),
                    self._w(p + names[2] + ".weight", [Hd, inter]))

        for i in range(c.num_hidden_layers):
            p = "model.layers.%d." % i
            a = p + "self_attn."
            Lw = {"in_norm": self._w(p + "input_layernorm.weight", [Hd]),
                  "post_norm": self._w(p + "post_attention_layernorm.weight", [Hd])}
            if c.is_kda[i]:
                for x in "qkv":
                    Lw[x] = self._w(a + "%s_proj.weight" % x, [P, Hd])
                    Lw[x + "_conv"] = self._w(a + "%s_conv1d.weight" % x, [P, 1, W]).view(P, W)
                # per head: [1, 1, H, 1] (48B), [H], or [>= H] zero padded (K3); first H used
                alog = self._w(a + "A_log", shapes=[lambda s: s == [1, 1, kh, 1],
                                                     lambda s: len(s) == 1 and s[0] >= kh])
                Lw["A_log"] = alog.reshape(-1)[:kh].clone()
                Lw["dt_bias"] = self._w(a + "dt_bias", [P])
                Lw["f_a"] = self._w(a + "f_a_proj.weight", [kd, Hd])
                Lw["f_b"] = self._w(a + "f_b_proj.weight", [P, kd])
                Lw["b"] = self._w(a + "b_proj.weight", [kh, Hd])
                if c.full_rank_gate:
                    Lw["g"] = self._w(a + "g_proj.weight", [P, Hd])
                else:
                    Lw["g_a"] = self._w(a + "g_a_proj.weight", [kd, Hd])
                    Lw["g_b"] = self._w(a + "g_b_proj.weight", [P, kd])
                Lw["o_norm"] = self._w(a + "o_norm.weight", [kd])
                Lw["o"] = self._w(a + "o_proj.weight", [Hd, P])
            else:
                if c.q_lora_rank:
                    Lw["q_a"] = self._w(a + "q_a_proj.weight", [c.q_lora_rank, Hd])
                    Lw["q_a_norm"] = self._w(a + "q_a_layernorm.weight", [c.q_lora_rank])
                    Lw["q_b"] = self._w(a + "q_b_proj.weight", [nh * (dn + dr), c.q_lora_rank])
                else:
                    Lw["q"] = self._w(a + "q_proj.weight", [nh * (dn + dr), Hd])
                Lw["kv_a"] = self._w(a + "kv_a_proj_with_mqa.weight", [L + dr, Hd])
                Lw["kv_a_norm"] = self._w(a + "kv_a_layernorm.weight", [L])
                Lw["kv_b"] = self._w(a + "kv_b_proj.weight", [nh * (dn + dv), L])
                if c.mla_use_output_gate:
                    Lw["g"] = self._w(a + "g_proj.weight", [nh * dv, Hd])
                Lw["o"] = self._w(a + "o_proj.weight", [Hd, nh * dv])
            if c.is_moe[i]:
                m = p + "block_sparse_moe."
                E = c.num_experts
                Lw["router"] = self._w(m + "gate.weight", [E, Hd])
                Lw["bias"] = self._w(m + "gate.e_score_correction_bias", [E])
                Lw["experts"] = [mlp(m + "experts.%d." % e, c.moe_intermediate_size, ("w1", "w3", "w2"))
                                 for e in range(E)]
                Lw["shared"] = (mlp(m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts)
                                if c.n_shared_experts > 0 else None)
            else:
                Lw["mlp"] = mlp(p + "mlp.", c.intermediate_size)
            self.layers.append(Lw)
        self.norm = self._w("model.norm.weight", [Hd])
        self.lm_head = self.embed if c.tie_word_embeddings else self._w("lm_head.weight", [V, Hd])

    # --- ops ---

    def linear(self, x, w):
        return self.R(x @ w.t())

    def rmsnorm(self, x, w, eps=None):
        eps = self.cfg.rms_norm_eps if eps is None else eps
        var = x.pow(2).mean(-1, keepdim=True)
        y = self.R(x * torch.rsqrt(var + eps))
        return self.R(w * y)

    def swiglu(self, x, wg, wu, wd):
        R = self.R
        return self.linear(R(R(F.silu(self.linear(x, wg))) * self.linear(x, wu)), wd)

    def short_conv(self, x, w, prev):
        """Causal depthwise conv + SiLU. x [T, P] (new pre-conv rows), w [P, W], prev [W-1, P]
        or None (zeros). Returns (silu(y) [T, P], the last W-1 pre-conv rows)."""
        T, P = x.shape
        W = w.shape[1]
        if prev is None:
            prev = torch.zeros(W - 1, P, dtype=torch.float32)
        win = torch.cat((prev, x), dim=0)  # [W-1+T, P]
        acc = w[:, 0] * win[0:T]
        for j in range(1, W):
            acc = acc + w[:, j] * win[j:j + T]
        return self.R(F.silu(acc)), win[T:].clone()

    def kda_gate(self, Lw, g_raw):
        """g_raw [T, H, D] -> log-decay g [T, H, D] (fp32)."""
        c = self.cfg
        H, D = c.kda_heads, c.kda_head_dim
        x = g_raw + Lw["dt_bias"].view(H, D)
        A = torch.exp(Lw["A_log"]).view(H, 1)
        if c.gate_lower_bound is None:
            return -(A * F.softplus(x, beta=1.0, threshold=20.0))
        return c.gate_lower_bound * torch.sigmoid(A * x)

    def kda(self, Lw, li, x, cache):
        c, R = self.cfg, self.R
        T = x.shape[0]
        H, D = c.kda_heads, c.kda_head_dim
        prev = cache.conv[li] if cache is not None and cache.conv[li] is not None else (None, None, None)
        q, cq = self.short_conv(self.linear(x, Lw["q"]), Lw["q_conv"], prev[0])
        k, ck = self.short_conv(self.linear(x, Lw["k"]), Lw["k_conv"], prev[1])
        v, cv = self.short_conv(self.linear(x, Lw["v"]), Lw["v_conv"], prev[2])
        g = self.kda_gate(Lw, self.linear(self.linear(x, Lw["f_a"]), Lw["f_b"]).view(T, H, D))
        beta = torch.sigmoid(self.linear(x, Lw["b"]))  # [T, H]
        q, k, v = q.view(T, H, D), k.view(T, H, D), v.view(T, H, D)
        q = (q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)) * (D ** -0.5)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)
        S0 = cache.state[li] if cache is not None and cache.state[li] is not None else None
        o, S = kda_recurrence(q, k, v, g, beta, S0)
        o = R(o)  # [T, H, D]
        if cache is not None:
            cache.conv[li] = (cq, ck, cv)
            cache.state[li] = S
        if c.full_rank_gate:
            gate = self.linear(x, Lw["g"])
        else:
            gate = self.linear(self.linear(x, Lw["g_a"]), Lw["g_b"])
        gate = gate.view(T, H, D)
        y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)
        y = R((y * Lw["o_norm"]) * torch.sigmoid(gate))
        return self.linear(y.reshape(T, H * D), Lw["o"])

    def mla(self, Lw, li, x, cache):
        c, R = self.cfg, self.R
        T = x.shape[0]
        nh, dn, dr, dv, L = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        if c.q_lora_rank:
            q = self.linear(self.rmsnorm(self.linear(x, Lw["q_a"]), Lw["q_a_norm"], MLA_LORA_NORM_EPS), Lw["q_b"])
        else:
            q = self.linear(x, Lw["q"])
        q = q.view(T, nh, dn + dr).transpose(0, 1)  # [nh, T, dn+dr]
        ckv = self.linear(x, Lw["kv_a"])
        c_kv, k_rot = ckv[:, :L], ckv[:, L:]
        kv = self.linear(self.rmsnorm(c_kv, Lw["kv_a_norm"], MLA_LORA_NORM_EPS), Lw["kv_b"])
        kv = kv.view(T, nh, dn + dv).transpose(0, 1)
        k = torch.cat((kv[..., :dn], k_rot[None].expand(nh, T, dr)), dim=-1)
        v = kv[..., dn:]
        past = 0
        if cache is not None:
            past = cache.length
            if cache.k[li] is not None:
                k = torch.cat((cache.k[li], k), dim=1)
                v = torch.cat((cache.v[li], v), dim=1)
            cache.k[li], cache.v[li] = k, v
        S = k.shape[1]
        scores = R(R(q @ k.transpose(1, 2)) * c.scaling)
        qpos = torch.arange(past, past + T)[:, None]
        kpos = torch.arange(S)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = R(torch.softmax(scores, dim=-1, dtype=torch.float32))
        out = R(probs @ v).transpose(0, 1).reshape(T, nh * dv)
        if c.mla_use_output_gate:
            out = R(out * R(torch.sigmoid(self.linear(x, Lw["g"]))))
        return self.linear(out, Lw["o"])

    def route(self, Lw, x):
        """(idx [T, k] long, weights [T, k] float32) per KimiMoEGate with unbiased weights."""
        c = self.cfg
        T, E, K = x.shape[0], c.num_experts, c.num_experts_per_tok
        logits = x @ Lw["router"].t()  # fp32 router from the stored weights
        scores = torch.sigmoid(logits)
        choice = scores + Lw["bias"][None, :]
        masked = choice
        G, TG = c.n_group, c.topk_group
        grouped = c.use_grouped_topk and G > 1 and TG < G
        if grouped:
            gr = choice.view(T, G, E // G)
            top2 = torch.sort(gr, dim=-1, descending=True, stable=True).values[..., :2]
            gscore = top2[..., 0] + top2[..., 1]
            gorder = torch.sort(gscore, dim=-1, descending=True, stable=True).indices
            keep = torch.zeros(T, G, dtype=torch.bool)
            keep.scatter_(1, gorder[:, :TG], True)
            emask = keep[:, :, None].expand(T, G, E // G).reshape(T, E)
            masked = choice.masked_fill(~emask, float("-inf"))
            gs = torch.gather(gscore, 1, gorder)
            self.stats["min_router_margin"] = min(self.stats["min_router_margin"],
                                                  float((gs[:, TG - 1] - gs[:, TG]).min()))
        order = torch.sort(masked, dim=-1, descending=True, stable=True).indices
        idx = order[:, :K]
        sm = torch.gather(masked, 1, order)
        n_cand = TG * (E // G) if grouped else E
        if K < n_cand:
            self.stats["min_router_margin"] = min(self.stats["min_router_margin"], float((sm[:, K - 1] - sm[:, K]).min()))
        if grouped:  # transformers fills excluded experts with 0.0 instead of -inf
            self.stats["hf_mask_differs"] += int((sm[:, K - 1] <= 0).sum())
        w = torch.gather(scores, 1, idx)
        if c.moe_renormalize and K > 1:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        return idx, w

    def moe(self, Lw, x):
        c, R = self.cfg, self.R
        T, K = x.shape[0], c.num_experts_per_tok
        idx, w = self.route(Lw, x)
        y = torch.zeros(T, K, c.hidden_size, dtype=torch.float32)
        for e in range(c.num_experts):
            rows, slots = torch.nonzero(idx == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            ye = self.swiglu(x[rows], *Lw["experts"][e])
            y[rows, slots] = ye * w[rows, slots][:, None]
        acc = y[:, 0].clone()
        for j in range(1, K):
            acc = acc + y[:, j]
        acc = R(acc)
        if Lw["shared"] is not None:
            acc = R(acc + self.swiglu(x, *Lw["shared"]))
        return acc

    def forward(self, ids, cache=None):
        """ids: token ids appended after `cache` (None = a fresh sequence without cache).
        Returns float32 logits [len(ids), vocab]."""
        c, R = self.cfg, self.R
        ids_t = torch.tensor(ids, dtype=torch.int64)
        if ids_t.numel() == 0:
            raise RefError("empty input")
        if int(ids_t.min()) < 0 or int(ids_t.max()) >= c.vocab_size:
            raise RefError("token id out of range 0..%d" % (c.vocab_size - 1))
        x = self.embed[ids_t]
        for li, Lw in enumerate(self.layers):
            h = self.rmsnorm(x, Lw["in_norm"])
            a = self.kda(Lw, li, h, cache) if c.is_kda[li] else self.mla(Lw, li, h, cache)
            x = R(x + a)
            h = self.rmsnorm(x, Lw["post_norm"])
            x = R(x + (self.moe(Lw, h) if c.is_moe[li] else self.swiglu(h, *Lw["mlp"])))
        if cache is not None:
            cache.length += len(ids)
        return self.linear(self.rmsnorm(x, self.norm), self.lm_head)

    def new_cache(self):
        return Cache(self.cfg.num_hidden_layers)


def main(argv=None):
    return qr.main(argv, model_cls=Model, prog="kimi_linear_ref")


if __name__ == "__main__":
    sys.exit(main())
