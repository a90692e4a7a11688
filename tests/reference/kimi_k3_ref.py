#!/usr/bin/python3
"""tests/reference/kimi_k3_ref.py — PyTorch reference forward pass of the Kimi K3 text tower.

Owns: the test oracle for model_type "kimi_k3" folders with K3's switches on
(attn_res_block_size, routed_expert_hidden_size, hidden_act situ, MXFP4 routed experts):
Block Attention Residuals, the latent MoE ("Stable LatentMoE"), SiTU-GLU, MXFP4 decoding.
Written from the specification (/work/shared/K3.md, docs/K3.md: §3.1-§3.8, §4) and the
engine's numeric contract (DESIGN.md §4), not from the C engine. KDA and NoPE MLA are
kimi_linear_ref.py's (imported: Model.kda / Model.mla / short_conv / kda_gate / rmsnorm /
route and its Cache), which already implements K3's KDA/MLA switches (gate_lower_bound
sigmoid decay gate, use_full_rank_gate g_proj, A_log per head from [>= H] or [H], F32
conv / dt_bias / o_norm, q_lora, MLA output gate, NoPE). Does not own file formats
(safetensors_io.py) or checkpoint generation (kimi_k3_ckpt.py).

Numeric modes (--dtype):
  fp32 (default; the engine's contract, DESIGN.md §4, and the goldens): stored weights
    widened exactly (BF16, F32, MXFP4 decoded exactly), no activation ever rounded to BF16 —
    where K3.md §3 writes bf16(...) of an activation, this keeps full precision. EVALUATED IN
    FLOAT64: every activation, reduction, transcendental and the KDA state in float64, the
    logits rounded once to float32 at the end. This is the exact value the fp32 engine
    approximates (K3.md §9 suggests float64 reductions for the oracle): the oracle does not
    depend on summation order (cached == full sequence to ~1e-12, where float32 arithmetic
    differs by up to 5e-4 on these fixtures: Attention Residuals amplify rounding about 2x
    per layer, K3.md §8.1), so engine-vs-reference differences are the engine's own rounding.
  fp32-native: the same formulas in float32 arithmetic (torch's order) — for measuring how
    much fp32 rounding moves the logits.
  bf16: float32 arithmetic, rounded to bf16 where the published BF16 model materialises a
    bf16 tensor (K3.md §3: linear outputs, the two-rounding KimiRMSNorm, the AttnRes mix
    output, every prefix add, SiTU output, the MoE combine, R + shared). Documentation only.

Forward (K3.md §0, §3.2; B = attn_res_block_size; eps = rms_norm_eps):
  prefix = embed[token]; blocks = []                     (per token; nothing crosses positions)
  for layer l:
    h = prefix if l == 0 else AttnResMix(blocks, prefix; self_attention_res_norm/proj of l)
    if l % B == 0: blocks.append(prefix); prefix = None  (snapshot BEFORE attention, reset)
    a = Attn_l(RMSNorm(h; input_layernorm))              KDA, or gated NoPE MLA
    prefix = a if prefix is None else prefix + a
    h = AttnResMix(blocks, prefix; mlp_res_norm/proj of l)   (blocks include a new snapshot)
    prefix = prefix + FFN_l(RMSNorm(h; post_attention_layernorm))   dense SiTU-GLU (l = 0) or
                                                                    latent MoE (l >= 1)
  logits = lm_head(RMSNorm(AttnResMix(blocks, prefix; output_attn_res_norm/proj); model.norm))
  RMSNorm(x; w, eps) = w * (x * rsqrt(mean(x^2) + eps))  (weight after normalising)
  AttnResMix(blocks, prefix; norm, proj):  V = [blocks..., prefix] (raw values);
    k_i = V_i * rsqrt(mean(V_i^2) + eps);  w = norm.weight * proj.weight[0];
    s_i = sum_d k_i[d] * w[d];  p = softmax_i(s);  out = sum_i p_i V_i  (source order).
  SiTU(g, u) = (beta * tanh(g / beta)) * sigmoid(g) * u',  u' = beta_lin * tanh(u / beta_lin)
    (divide by beta); activation_situ_linear_beta null -> u' = u; activation_situ_beta null ->
    beta = 1.0. GLU(x) = down(SiTU(gate(x), up(x))) for the dense layer-0 MLP, the shared
    expert (width moe_intermediate_size * num_shared_experts) and every routed expert
    (w1 gate, w3 up, w2 down).
  Latent MoE: s = sigmoid(x W_gate^T) (fp32, from the stored weights); selection = top-k of
    s + e_score_correction_bias (num_expert_group 1: no grouping), slots in the canonical
    order: descending selection score, ties -> lower expert id; weights = the UNBIASED s of
    the chosen experts / (sum + 1e-20) (moe_renormalize, k > 1) * routed_scaling_factor;
    z = routed_expert_down_proj(x); y_e = GLU_e(z) (MXFP4 experts in the latent width);
    Y = sum_k w_k y_{e_k} accumulated in slot order; Y = RMSNorm(Y; routed_expert_norm, eps)
    (latent_moe_use_norm); out = routed_expert_up_proj(Y) + shared_experts(x).
  MXFP4 (K3.md §4): low nibble = even column, T = {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 = sign
    (code 8 = -0.0), scale byte s -> 2^(s - 127) per 32 columns; 255 refused.

Where sources disagree (K3.md §7) this reference takes:
  D0  A_log per HEAD: only A_log[0..H-1] is read; zero padding ignored.
  D2  MLA q_a_layernorm / kv_a_layernorm eps 1e-6 (every other RMSNorm: rms_norm_eps).
  D3  fla l2norm x * rsqrt(sum x^2 + 1e-6) (q additionally * head_dim^-0.5).
  D4  F32 parameters (conv, A_log, dt_bias, o_norm, correction bias) used as stored.
  D5  fp32 stream and activations (the engine's contract) instead of the reference's BF16
      rounding at every add (the bf16 mode shows the difference).
  D6  routed_expert_norm on the COMBINED latent output, after the weighted sum.
  D7  SiTU divides by beta (g / beta, u / beta_lin), never multiplies by 1/beta.
  slot order: the MoE combine sums the k weighted expert outputs in descending
      selection-score order (score + bias), ties -> lower id (K3.md §8.7's canonical order).
  routed_expert_norm eps: rms_norm_eps (1e-5 in K3 and every preset).
  KDA: the recurrent form token by token for prefill and decode (K3.md §8.3; as
      kimi_linear_ref.py): S = S*exp(g); u = (v - S^T k)*beta; S += k (x) u; o = S^T q.
  MLA: expanded K/V, fp32 scores (the engine's absorbed form equals it up to reassociation).

CLI: as kimi_linear_ref.py: --model DIR --prompt-ids a,b,c [--max-new N] [--json]
[--logits-out F.f32] [--dtype fp32|fp32-native|bf16] [--no-cache] [--stop-eos]; --json adds, per greedy
step, the top-5 (id, logit) of the row the id was chosen from ("step_top5"), and counts of
MoE token-layers whose top-k the correction bias changed ("bias_changed_selection").
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kimi_k3_ckpt as k3c  # noqa: E402  (registers U8 with safetensors_io)
import kimi_linear_ref as klr  # noqa: E402
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

RefError = qr.RefError
SUPPORTED_TYPES = ("kimi_k3",)


class Config:
    """The K3 text_config, with the attribute names kimi_linear_ref's KDA / MLA code reads."""

    def __init__(self, top):
        if top.get("model_type") != "kimi_k3":
            raise RefError("config.json: model_type %r is not kimi_k3" % top.get("model_type"))
        d = top.get("text_config")
        if not isinstance(d, dict) or d.get("model_type", "kimi_linear") != "kimi_linear":
            raise RefError("config.json: kimi_k3 needs a kimi_linear text_config")
        self.raw = top
        self.model_type = "kimi_k3"
        self.prefix = "language_model."
        g = d.get

        def req(k):
            if d.get(k) is None:
                raise RefError("config.json: text_config.%s missing" % k)
            return d[k]
        self.vocab_size = int(req("vocab_size"))
        self.hidden_size = int(req("hidden_size"))
        self.num_hidden_layers = int(req("num_hidden_layers"))
        self.intermediate_size = int(req("intermediate_size"))
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-5))
        if g("hidden_act") != "situ":
            raise RefError("config.json: text_config.hidden_act must be situ")
        b = g("activation_situ_beta")
        self.situ_beta = 1.0 if b is None else float(b)   # the reference's `beta or 1.0`
        bl = g("activation_situ_linear_beta")
        self.situ_linear_beta = None if bl is None else float(bl)  # null: up passes unchanged
        self.block = int(req("attn_res_block_size"))
        if self.block < 1:
            raise RefError("config.json: attn_res_block_size must be >= 1")
        # MLA
        self.num_attention_heads = int(req("num_attention_heads"))
        self.q_lora_rank = g("q_lora_rank")
        self.kv_lora_rank = int(req("kv_lora_rank"))
        self.qk_nope_head_dim = int(req("qk_nope_head_dim"))
        self.qk_rope_head_dim = int(req("qk_rope_head_dim"))
        self.v_head_dim = int(req("v_head_dim"))
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.scaling = self.qk_head_dim ** -0.5
        self.mla_use_output_gate = bool(g("mla_use_output_gate", False))
        if not g("mla_use_nope", False):
            raise RefError("config.json: mla_use_nope must be true")
        # MoE
        self.num_experts = int(req("num_experts"))
        self.num_experts_per_tok = int(req("num_experts_per_token"))
        self.n_shared_experts = int(g("num_shared_experts") or 0)
        self.moe_intermediate_size = int(req("moe_intermediate_size"))
        self.latent_size = int(req("routed_expert_hidden_size"))
        self.latent_use_norm = bool(g("latent_moe_use_norm", True))
        self.use_grouped_topk = bool(g("use_grouped_topk", True))
        self.n_group = int(g("num_expert_group", 1) or 1)
        self.topk_group = int(g("topk_group", 1) or 1)
        if self.n_group != 1:
            raise RefError("config.json: num_expert_group %d (K3 uses 1; grouping not implemented here)" % self.n_group)
        self.routed_scaling_factor = float(g("routed_scaling_factor", 1.0))
        self.moe_renormalize = bool(g("moe_renormalize", True))
        self.first_k_dense_replace = int(g("first_k_dense_replace", 1))
        self.moe_layer_freq = int(g("moe_layer_freq", 1))
        if g("moe_router_activation_func", "sigmoid") != "sigmoid":
            raise RefError("config.json: only moe_router_activation_func sigmoid is supported")
        if g("tie_word_embeddings", top.get("tie_word_embeddings", False)):
            raise RefError("config.json: K3 has an untied lm_head")
        q = g("quantization_config")
        if q is not None:
            grp = ((q.get("config_groups") or {}).get("group_0") or {}).get("weights") or {}
            if q.get("format") != "mxfp4-pack-quantized" or grp.get("group_size") != 32 or grp.get("num_bits") != 4:
                raise RefError("config.json: quantization_config is not mxfp4-pack-quantized, group 32, 4 bits")
        # KDA
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
        L = self.num_hidden_layers
        kda = set(int(x) for x in la["kda_layers"])
        full = set(int(x) for x in la.get("full_attn_layers") or [])
        bad = sorted(x for x in kda | full if not 1 <= x <= L)
        if bad or kda & full:
            raise RefError("config.json: kda_layers / full_attn_layers (1-based) out of range or overlapping")
        self.is_kda = [(i + 1) in kda for i in range(L)]
        self.is_moe = [self.num_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0
                       for i in range(L)]
        eos = top.get("eos_token_id", g("eos_token_id"))
        self.eos_token_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(x) for x in eos])
        self.tie_word_embeddings = False

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return cls(json.load(f))


def decode_mxfp4(packed, scale):
    """torch float32 [N, K] from U8 packed [N, K/2] and U8 scale [N, K/32] (exact)."""
    try:
        return torch.from_numpy(k3c.decode_mxfp4(packed, scale))
    except ValueError as e:
        raise RefError(str(e))


class Model(klr.Model):
    """K3 forward; KDA, MLA projections, RMSNorm, routing and the caches are
    kimi_linear_ref.Model's. self.cd is the compute dtype (float64 for fp32, see above)."""

    def __init__(self, model_dir, dtype="fp32", threads=1):
        if dtype not in ("fp32", "fp32-native", "bf16"):
            raise RefError("dtype must be fp32, fp32-native or bf16")
        if threads:
            torch.set_num_threads(threads)
        self.cfg = Config.load(model_dir)
        self.mode = "bf16" if dtype == "bf16" else "fp32"  # what kimi_linear_ref's _w reads
        self.cd = torch.float64 if dtype == "fp32" else torch.float32
        self.R = qr._bf16 if dtype == "bf16" else qr._ident
        self.ck = st.Checkpoint(model_dir)
        self.stats = {"min_router_margin": math.inf, "hf_mask_differs": 0, "bias_changed_selection": 0,
                      "moe_token_layers": 0}
        self._load()

    def _mx(self, name, N, K):
        """The routed expert weight `name` [N, K]: an MXFP4 pair when .weight_packed +
        .weight_scale exist (the K3 rule), else a plain .weight."""
        full = self.cfg.prefix + name
        if full + ".weight_packed" in self.ck and full + ".weight_scale" in self.ck:
            if K % 32:
                raise RefError("%s: MXFP4 K %d is not a multiple of 32" % (full, K))
            for suf, shape in ((".weight_packed", [N, K // 2]), (".weight_scale", [N, K // 32])):
                if self.ck.dtype(full + suf) != "U8" or self.ck.shape(full + suf) != shape:
                    raise RefError("%s%s: %s %s, expected U8 %s" % (full, suf, self.ck.dtype(full + suf),
                                                                    self.ck.shape(full + suf), shape))
            return decode_mxfp4(self.ck.array(full + ".weight_packed"),
                                self.ck.array(full + ".weight_scale")).to(self.cd)
        return self._w(name + ".weight", [N, K])

    def _w(self, name, shape=None, shapes=None):
        """Stored tensor widened exactly to the compute dtype."""
        return super()._w(name, shape, shapes).to(self.cd)

    def _load(self):
        c = self.cfg
        Hd, V, nh = c.hidden_size, c.vocab_size, c.num_attention_heads
        dn, dr, dv, L = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        kh, kd, W = c.kda_heads, c.kda_head_dim, c.conv_size
        P = kh * kd
        E, M, Z = c.num_experts, c.moe_intermediate_size, c.latent_size
        self.embed = self._w("model.embed_tokens.weight", [V, Hd])
        self.layers = []

        def glu(p, inter):
            return (self._w(p + "gate_proj.weight", [inter, Hd]), self._w(p + "up_proj.weight", [inter, Hd]),
                    self._w(p + "down_proj.weight", [Hd, inter]))

        def res(p):
            return (self._w(p + "_norm.weight", [Hd]), self._w(p + "_proj.weight", [1, Hd]).view(Hd))

        for i in range(c.num_hidden_layers):
            p = "model.layers.%d." % i
            a = p + "self_attn."
            Lw = {"in_norm": self._w(p + "input_layernorm.weight", [Hd]),
                  "post_norm": self._w(p + "post_attention_layernorm.weight", [Hd]),
                  "attn_res": res(p + "self_attention_res"), "mlp_res": res(p + "mlp_res")}
            if c.is_kda[i]:
                for x in "qkv":
                    Lw[x] = self._w(a + "%s_proj.weight" % x, [P, Hd])
                    Lw[x + "_conv"] = self._w(a + "%s_conv1d.weight" % x, [P, 1, W]).view(P, W)
                alog = self._w(a + "A_log", shapes=[lambda s: s == [1, 1, kh, 1],
                                                     lambda s: len(s) == 1 and s[0] >= kh])
                Lw["A_log"] = alog.reshape(-1)[:kh].clone()          # D0: per head
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
                Lw["router"] = self._w(m + "gate.weight", [E, Hd])
                Lw["bias"] = self._w(m + "gate.e_score_correction_bias", [E])
                Lw["lat_down"] = self._w(m + "routed_expert_down_proj.weight", [Z, Hd])
                Lw["lat_norm"] = self._w(m + "routed_expert_norm.weight", [Z]) if c.latent_use_norm else None
                Lw["lat_up"] = self._w(m + "routed_expert_up_proj.weight", [Hd, Z])
                Lw["experts"] = [(self._mx(m + "experts.%d.w1" % e, M, Z), self._mx(m + "experts.%d.w3" % e, M, Z),
                                  self._mx(m + "experts.%d.w2" % e, Z, M)) for e in range(E)]
                Lw["shared"] = glu(m + "shared_experts.", M * c.n_shared_experts) if c.n_shared_experts else None
            else:
                Lw["mlp"] = glu(p + "mlp.", c.intermediate_size)
            self.layers.append(Lw)
        self.norm = self._w("model.norm.weight", [Hd])
        self.out_res = res("model.output_attn_res")
        self.lm_head = self._w("lm_head.weight", [V, Hd])

    # --- K3 ops ---

    def mla(self, Lw, li, x, cache):
        """kimi_linear_ref.Model.mla with the softmax kept in the compute dtype (float64 in
        fp32 mode): NoPE, q_lora (q_a_layernorm eps 1e-6), kv_a_layernorm eps 1e-6, expanded
        K/V cache, causal softmax(Q K^T (dn + dr)^-0.5) V, sigmoid g_proj gate before o_proj."""
        c, R = self.cfg, self.R
        T = x.shape[0]
        nh, dn, dr, dv, L = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        if c.q_lora_rank:
            q = self.linear(self.rmsnorm(self.linear(x, Lw["q_a"]), Lw["q_a_norm"], klr.MLA_LORA_NORM_EPS), Lw["q_b"])
        else:
            q = self.linear(x, Lw["q"])
        q = q.view(T, nh, dn + dr).transpose(0, 1)  # [nh, T, dn+dr]
        ckv = self.linear(x, Lw["kv_a"])
        c_kv, k_rot = ckv[:, :L], ckv[:, L:]
        kv = self.linear(self.rmsnorm(c_kv, Lw["kv_a_norm"], klr.MLA_LORA_NORM_EPS), Lw["kv_b"])
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
        probs = R(torch.softmax(scores, dim=-1))
        out = R(probs @ v).transpose(0, 1).reshape(T, nh * dv)
        if c.mla_use_output_gate:
            out = R(out * R(torch.sigmoid(self.linear(x, Lw["g"]))))
        return self.linear(out, Lw["o"])

    def situ(self, g, u):
        """SiTU(g, u) = (beta tanh(g/beta)) sigmoid(g) * u', u' = beta_lin tanh(u/beta_lin)."""
        c = self.cfg
        b = c.situ_beta
        a = (b * torch.tanh(g / b)) * torch.sigmoid(g)
        if c.situ_linear_beta is not None:
            bl = c.situ_linear_beta
            u = bl * torch.tanh(u / bl)
        return self.R(a * u)

    def glu(self, x, wg, wu, wd):
        return self.linear(self.situ(self.linear(x, wg), self.linear(x, wu)), wd)

    def attn_res(self, blocks, prefix, res):
        """AttnResMix over [blocks..., prefix] (each [T, hidden]) with (norm.weight, proj.weight[0])."""
        eps = self.cfg.rms_norm_eps
        nw, pw = res
        w = nw * pw
        V = list(blocks) + [prefix]
        s = torch.stack([((v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)) * w).sum(-1) for v in V])
        p = torch.softmax(s, dim=0)  # [n_src, T]
        out = p[0][:, None] * V[0]
        for i in range(1, len(V)):
            out = out + p[i][:, None] * V[i]
        return self.R(out)

    def latent_moe(self, Lw, x):
        c, R = self.cfg, self.R
        T, K = x.shape[0], c.num_experts_per_tok
        idx, w = self.route(Lw, x)  # slots: descending score + bias, ties -> lower id
        # how often the correction bias changed the chosen set (a generator check)
        s = torch.sigmoid(x @ Lw["router"].t())
        un = torch.sort(s, dim=-1, descending=True, stable=True).indices[:, :K]
        for t in range(T):
            if set(un[t].tolist()) != set(idx[t].tolist()):
                self.stats["bias_changed_selection"] += 1
        self.stats["moe_token_layers"] += T
        z = self.linear(x, Lw["lat_down"])
        y = torch.zeros(T, K, c.latent_size, dtype=self.cd)
        for e in range(c.num_experts):
            rows, slots = torch.nonzero(idx == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            ye = self.glu(z[rows], *Lw["experts"][e])
            y[rows, slots] = ye * w[rows, slots][:, None]
        acc = y[:, 0].clone()
        for j in range(1, K):
            acc = acc + y[:, j]
        acc = R(acc)
        if Lw["lat_norm"] is not None:
            acc = self.rmsnorm(acc, Lw["lat_norm"])
        out = self.linear(acc, Lw["lat_up"])
        if Lw["shared"] is not None:
            out = R(out + self.glu(x, *Lw["shared"]))
        return out

    def forward(self, ids, cache=None):
        """ids appended after `cache` (None: a fresh sequence). Returns float32 logits [len(ids), vocab]."""
        c, R = self.cfg, self.R
        ids_t = torch.tensor(ids, dtype=torch.int64)
        if ids_t.numel() == 0:
            raise RefError("empty input")
        if int(ids_t.min()) < 0 or int(ids_t.max()) >= c.vocab_size:
            raise RefError("token id out of range 0..%d" % (c.vocab_size - 1))
        prefix = self.embed[ids_t]
        blocks = []
        for li, Lw in enumerate(self.layers):
            h = self.attn_res(blocks, prefix, Lw["attn_res"]) if blocks else prefix
            if li % c.block == 0:
                blocks.append(prefix)
                prefix = None
            n = self.rmsnorm(h, Lw["in_norm"])
            a = self.kda(Lw, li, n, cache) if c.is_kda[li] else self.mla(Lw, li, n, cache)
            prefix = a if prefix is None else R(prefix + a)
            h = self.attn_res(blocks, prefix, Lw["mlp_res"])
            n = self.rmsnorm(h, Lw["post_norm"])
            f = self.latent_moe(Lw, n) if c.is_moe[li] else self.glu(n, *Lw["mlp"])
            prefix = R(prefix + f)
        if cache is not None:
            cache.length += len(ids)
        h = self.attn_res(blocks, prefix, self.out_res)
        return self.linear(self.rmsnorm(h, self.norm), self.lm_head).to(torch.float32)

    def new_cache(self):
        return klr.Cache(self.cfg.num_hidden_layers)


def top5(row):
    v, i = torch.topk(row, 5)
    return [[int(a), float(b)] for a, b in zip(i, v)]


def main(argv=None):
    prog = "kimi_k3_ref"
    ap = argparse.ArgumentParser(prog=prog, description="Kimi K3 reference forward pass and greedy decoding.")
    ap.add_argument("--model", required=True, help="Hugging Face model folder (kimi_k3)")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--max-new", type=int, default=16, help="greedy tokens to generate (default 16)")
    ap.add_argument("--logits-out", help="write float32 LE [n_prompt, vocab] prompt logits here")
    ap.add_argument("--dtype", choices=["fp32", "fp32-native", "bf16"], default="fp32",
                    help="fp32: the engine's contract evaluated in float64 (default); fp32-native: in float32")
    ap.add_argument("--stop-eos", action="store_true")
    ap.add_argument("--no-cache", action="store_true", help="recompute the whole sequence at every step")
    ap.add_argument("--json", action="store_true", help="print a JSON object (ids, margins, step top-5)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    prompt = qr.parse_ids(a.prompt_ids)
    try:
        model = Model(a.model, a.dtype, a.threads)
        with torch.no_grad():
            ids, prompt_logits, steps = qr.generate(model, prompt, a.max_new, a.stop_eos, not a.no_cache)
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
        mrm = model.stats["min_router_margin"]
        print(json.dumps({"prompt_ids": prompt, "greedy_ids": ids, "dtype": a.dtype,
                          "min_top2_gap": min(qr.top2_gap(r) for r in rows),
                          "min_top2_gap_greedy": min(qr.top2_gap(r) for r in steps),
                          "min_router_margin": mrm if math.isfinite(mrm) else None,
                          "bias_changed_selection": model.stats["bias_changed_selection"],
                          "moe_token_layers": model.stats["moe_token_layers"],
                          "step_top5": [top5(r) for r in steps]}))
    else:
        print(",".join(str(i) for i in ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
