#!/usr/bin/python3
"""tests/reference/deepseek_ref.py — PyTorch reference forward pass of deepseek_v3 / kimi_k2.

Owns: the test oracle for the DeepSeek-V3 family (Kimi K2 publishes the same architecture
under model_type "kimi_k2"), written from the semantics of transformers'
models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention, DeepseekV3TopkRouter,
DeepseekV3MoE, DeepseekV3DecoderLayer, yarn_get_mscale) and modeling_rope_utils.py (YaRN).
Reuses qwen3_ref.py's RoPE parameters, greedy decoding and CLI conventions; does not own
file formats (safetensors_io.py) or checkpoint generation (deepseek_ckpt.py). model_for(dir)
also hands kimi_linear / kimi_k3 folders to kimi_linear_ref.py.

Numeric modes: as qwen3_ref.py. fp32 (the engine's contract): stored weights widened exactly
to float32 — FP8 E4M3 weights are decoded through a 256-entry table and multiplied, in
float32, by their weight_scale_inv block (one rounding per element, the product the engine's
kernel forms) — and every activation is float32. bf16 rounds op results where transformers
would materialise a bf16 tensor (documentation of the fp32-vs-bf16 gap only).

Forward per decoder layer (MoE iff n_routed_experts > 0, i >= first_k_dense_replace and
i % moe_layer_freq == 0; the published modeling_deepseek.py rule, which transformers reduces
to the first condition pair because every published moe_layer_freq is 1):
  n = input_layernorm(x)
  q = q_b_proj(q_a_layernorm(q_a_proj(n)))   (or q_proj(n) when q_lora_rank is null)
      viewed [T, heads, qk_nope + qk_rope], split into q_nope, q_rot
  c_kv, k_rot = split(kv_a_proj_with_mqa(n), [kv_lora_rank, qk_rope])
  k_nope, v = split(kv_b_proj(kv_a_layernorm(c_kv)) viewed [T, heads, qk_nope + v_head])
  q_rot, k_rot = RoPE (rope_interleave: first de-interleave pairs (2i, 2i+1) into halves,
                 as apply_rotary_pos_emb_interleave), one k_rot shared by every head
  attention over k = [k_nope, k_rot], softmax scale qk_head_dim^-0.5 * m^2 with
      m = yarn_get_mscale(factor, mscale_all_dim) when rope_scaling sets mscale_all_dim
  h = x + o_proj(attn)
  x = h + mlp(post_attention_layernorm(h)); mlp = dense SwiGLU or MoE:
MoE (DeepseekV3TopkRouter, topk_method noaux_tc): logits = gate(n) in fp32, s = sigmoid;
  choice = s + e_score_correction_bias (selection only); group score = sum of the top-2
  choices of each of n_group groups; keep topk_group groups; top-k experts among them by
  choice; weights = s of those experts, / (sum + 1e-20) when norm_topk_prob, times
  routed_scaling_factor. out = sum_k w_k * expert_k(n) (fp32, router order: descending
  choice, lower index first on ties) + shared_experts(n) (width moe_intermediate_size *
  n_shared_experts).
Experts of non-kept groups are excluded (as DeepSeek's inference/model.py and vLLM, which
mask with -inf); transformers masks them with 0.0, which agrees unless fewer than top-k
experts of the kept groups have a positive choice score — `stats["hf_mask_differs"]` counts
such tokens and the fixtures have none.

CLI: as qwen3_ref.py (deepseek_ref.py --model DIR --prompt-ids 1,2,3 [...]).
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

SUPPORTED_TYPES = ("deepseek_v3", "kimi_k2")
RefError = qr.RefError


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
        self.q_lora_rank = g("q_lora_rank")
        self.kv_lora_rank = int(d["kv_lora_rank"])
        self.qk_nope_head_dim = int(d["qk_nope_head_dim"])
        self.qk_rope_head_dim = int(d["qk_rope_head_dim"])
        self.v_head_dim = int(d["v_head_dim"])
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.head_dim = self.qk_rope_head_dim  # DeepseekV3Config: the RoPE width
        self.intermediate_size = int(g("intermediate_size") or 0)
        self.moe_intermediate_size = int(g("moe_intermediate_size") or 0)
        self.num_experts = int(d["n_routed_experts"] or 0)
        self.num_experts_per_tok = int(g("num_experts_per_tok") or 0)
        self.n_shared_experts = int(g("n_shared_experts", 1) or 0)
        self.n_group = int(g("n_group", 8))
        self.topk_group = int(g("topk_group", 4))
        self.routed_scaling_factor = float(g("routed_scaling_factor", 2.5))
        self.norm_topk_prob = bool(g("norm_topk_prob", True))
        self.first_k_dense_replace = int(g("first_k_dense_replace", 3))
        self.moe_layer_freq = int(g("moe_layer_freq", 1))
        self.rope_interleave = bool(g("rope_interleave", True))
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        self.rope_theta = float(g("rope_theta", 10000.0))
        self.rope_scaling = g("rope_scaling")
        self.max_position_embeddings = int(g("max_position_embeddings", 4096))
        self.tie_word_embeddings = bool(g("tie_word_embeddings", False))
        if g("topk_method", "noaux_tc") != "noaux_tc" or g("scoring_func", "sigmoid") != "sigmoid":
            raise RefError("config.json: only topk_method noaux_tc with scoring_func sigmoid is supported")
        if g("attention_bias", False):
            raise RefError("config.json: attention_bias true not supported")
        if g("hidden_act", "silu") != "silu":
            raise RefError("config.json: hidden_act must be silu")
        q = g("quantization_config")
        self.block = None
        if q:
            if q.get("quant_method") != "fp8" or q.get("fmt", "e4m3") != "e4m3":
                raise RefError("config.json: quantization_config must be fp8 e4m3")
            self.block = [int(x) for x in q["weight_block_size"]]
        eos = g("eos_token_id")
        self.eos_token_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(x) for x in eos])
        self.is_moe = [self.num_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0
                       for i in range(self.num_hidden_layers)]
        # softmax scale (DeepseekV3Attention.__init__)
        self.scaling = self.qk_head_dim ** -0.5
        rs = self.rope_scaling
        if rs is not None:
            mad = rs.get("mscale_all_dim", 0)
            if mad:
                m = yarn_get_mscale(rs["factor"], mad)
                self.scaling = self.scaling * m * m

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return cls(json.load(f))


def yarn_get_mscale(scale=1.0, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deinterleave(x):
    """[..., d] with RoPE pairs (2i, 2i+1) -> [..., d] with pairs (i, i + d/2)."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(*x.shape[:-1], d)


class KVCache:
    def __init__(self, n_layers):
        self.k = [None] * n_layers  # [heads, S, qk_head_dim]
        self.v = [None] * n_layers  # [heads, S, v_head_dim]
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
        self.inv_freq, self.attn_factor = qr.rope_parameters(self.cfg)
        self.stats = {"min_router_margin": math.inf, "hf_mask_differs": 0}
        self._load()

    def _w(self, name, shape, quant=False):
        """Tensor `name` as float32; FP8 weights are dequantised with their block scales."""
        if name not in self.ck:
            raise RefError("%s: tensor %s missing" % (self.ck.dir, name))
        if self.ck.shape(name) != list(shape):
            raise RefError("%s: tensor %s has shape %s, expected %s" % (self.ck.dir, name, self.ck.shape(name), list(shape)))
        dt = self.ck.dtype(name)
        a = np.array(self.ck.float32(name))
        if dt == "F8_E4M3":
            if not quant or self.cfg.block is None:
                raise RefError("%s: tensor %s is F8_E4M3 but is not a quantised linear weight" % (self.ck.dir, name))
            bn, bk = self.cfg.block
            sname = name + "_scale_inv"
            N, K = shape
            sshape = [(N + bn - 1) // bn, (K + bk - 1) // bk]
            if sname not in self.ck or self.ck.shape(sname) != sshape or self.ck.dtype(sname) != "F32":
                raise RefError("%s: %s needs an F32 %s of shape %s" % (self.ck.dir, name, sname, sshape))
            s = np.array(self.ck.float32(sname))
            full = np.repeat(np.repeat(s, bn, axis=0), bk, axis=1)[:N, :K]
            a = (a * full).astype(np.float32)  # one float32 rounding per element
        t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        if self.mode == "bf16":
            t = qr._bf16(t)
        return t

    def _load(self):
        c = self.cfg
        H, V, nh = c.hidden_size, c.vocab_size, c.num_attention_heads
        dn, dr, dv, L = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        self.embed = self._w("model.embed_tokens.weight", [V, H])
        self.layers = []

        def mlp(p, inter):
            return (self._w(p + "gate_proj.weight", [inter, H], True),
                    self._w(p + "up_proj.weight", [inter, H], True),
                    self._w(p + "down_proj.weight", [H, inter], True))

        for i in range(c.num_hidden_layers):
            p = "model.layers.%d." % i
            a = p + "self_attn."
            Lw = {"in_norm": self._w(p + "input_layernorm.weight", [H]),
                  "post_norm": self._w(p + "post_attention_layernorm.weight", [H])}
            if c.q_lora_rank:
                Lw["q_a"] = self._w(a + "q_a_proj.weight", [c.q_lora_rank, H], True)
                Lw["q_a_norm"] = self._w(a + "q_a_layernorm.weight", [c.q_lora_rank])
                Lw["q_b"] = self._w(a + "q_b_proj.weight", [nh * (dn + dr), c.q_lora_rank], True)
            else:
                Lw["q"] = self._w(a + "q_proj.weight", [nh * (dn + dr), H], True)
            Lw["kv_a"] = self._w(a + "kv_a_proj_with_mqa.weight", [L + dr, H], True)
            Lw["kv_a_norm"] = self._w(a + "kv_a_layernorm.weight", [L])
            Lw["kv_b"] = self._w(a + "kv_b_proj.weight", [nh * (dn + dv), L], True)
            Lw["o"] = self._w(a + "o_proj.weight", [H, nh * dv], True)
            if c.is_moe[i]:
                E = c.num_experts
                Lw["router"] = self._w(p + "mlp.gate.weight", [E, H])
                Lw["bias"] = self._w(p + "mlp.gate.e_score_correction_bias", [E])
                Lw["experts"] = [mlp(p + "mlp.experts.%d." % e, c.moe_intermediate_size) for e in range(E)]
                Lw["shared"] = (mlp(p + "mlp.shared_experts.", c.moe_intermediate_size * c.n_shared_experts)
                                if c.n_shared_experts > 0 else None)
            else:
                Lw["mlp"] = mlp(p + "mlp.", c.intermediate_size)
            self.layers.append(Lw)
        self.norm = self._w("model.norm.weight", [H])
        self.lm_head = self.embed if c.tie_word_embeddings else self._w("lm_head.weight", [V, H])

    # --- ops ---

    def linear(self, x, w):
        return self.R(x @ w.t())

    def rmsnorm(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        y = self.R(x * torch.rsqrt(var + self.cfg.rms_norm_eps))
        return self.R(w * y)

    def swiglu(self, x, wg, wu, wd):
        R = self.R
        return self.linear(R(R(torch.nn.functional.silu(self.linear(x, wg))) * self.linear(x, wu)), wd)

    def rope(self, x, positions):
        """x [..., T, dr] (T positions) rotated; rotate_half pairing after de-interleaving."""
        R = self.R
        if self.cfg.rope_interleave:
            x = deinterleave(x)
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = R(emb.cos() * self.attn_factor), R(emb.sin() * self.attn_factor)
        return R(R(x * cos) + R(qr.rotate_half(x) * sin))

    def attention(self, Lw, li, x, positions, cache):
        c, R = self.cfg, self.R
        T = x.shape[0]
        nh, dn, dr, dv, L = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        if c.q_lora_rank:
            q = self.linear(self.rmsnorm(self.linear(x, Lw["q_a"]), Lw["q_a_norm"]), Lw["q_b"])
        else:
            q = self.linear(x, Lw["q"])
        q = q.view(T, nh, dn + dr).transpose(0, 1)  # [nh, T, dn+dr]
        q_nope, q_rot = q[..., :dn], q[..., dn:]
        ckv = self.linear(x, Lw["kv_a"])
        c_kv, k_rot = ckv[:, :L], ckv[:, L:]
        kv = self.linear(self.rmsnorm(c_kv, Lw["kv_a_norm"]), Lw["kv_b"]).view(T, nh, dn + dv).transpose(0, 1)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        q_rot = self.rope(q_rot, positions)
        k_rot = self.rope(k_rot[None], positions).expand(nh, T, dr)
        q = torch.cat((q_nope, q_rot), dim=-1)
        k = torch.cat((k_nope, k_rot), dim=-1)
        past = 0
        if cache is not None:
            past = cache.length
            if cache.k[li] is not None:
                k = torch.cat((cache.k[li], k), dim=1)
                v = torch.cat((cache.v[li], v), dim=1)
            cache.k[li], cache.v[li] = k, v
        S = k.shape[1]
        scores = R(R(q @ k.transpose(1, 2)) * c.scaling)  # [nh, T, S]
        qpos = torch.arange(past, past + T)[:, None]
        kpos = torch.arange(S)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = R(torch.softmax(scores, dim=-1, dtype=torch.float32))
        out = R(probs @ v).transpose(0, 1).reshape(T, nh * dv)
        return self.linear(out, Lw["o"])

    def route(self, Lw, x):
        """(idx [T, k] long, weights [T, k] float32) per DeepseekV3TopkRouter."""
        c = self.cfg
        T, E, K = x.shape[0], c.num_experts, c.num_experts_per_tok
        G, TG = c.n_group, c.topk_group
        logits = x @ Lw["router"].t()  # fp32 router from the stored weights (DESIGN.md §4)
        scores = torch.sigmoid(logits)
        choice = scores + Lw["bias"][None, :]
        grouped = choice.view(T, G, E // G)
        top2 = torch.sort(grouped, dim=-1, descending=True, stable=True).values[..., :2]
        gscore = top2[..., 0] + top2[..., 1]
        gorder = torch.sort(gscore, dim=-1, descending=True, stable=True).indices
        keep = torch.zeros(T, G, dtype=torch.bool)
        keep.scatter_(1, gorder[:, :TG], True)
        emask = keep[:, :, None].expand(T, G, E // G).reshape(T, E)
        masked = choice.masked_fill(~emask, float("-inf"))
        order = torch.sort(masked, dim=-1, descending=True, stable=True).indices
        idx = order[:, :K]
        # margins: k-th vs (k+1)-th expert among the kept groups, topk_group-th vs next group
        sm = torch.gather(masked, 1, order)
        if K < TG * (E // G):
            self.stats["min_router_margin"] = min(self.stats["min_router_margin"], float((sm[:, K - 1] - sm[:, K]).min()))
        if TG < G:
            gs = torch.gather(gscore, 1, gorder)
            self.stats["min_router_margin"] = min(self.stats["min_router_margin"], float((gs[:, TG - 1] - gs[:, TG]).min()))
        # transformers fills excluded experts with 0.0 instead of -inf
        self.stats["hf_mask_differs"] += int((sm[:, K - 1] <= 0).sum())
        w = torch.gather(scores, 1, idx)
        if c.norm_topk_prob:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        return idx, w

    def moe(self, Lw, x):
        c, R = self.cfg, self.R
        T, K = x.shape[0], c.num_experts_per_tok
        idx, w = self.route(Lw, x)
        w = R(w)
        y = torch.zeros(T, K, c.hidden_size, dtype=torch.float32)
        for e in range(c.num_experts):
            rows, slots = torch.nonzero(idx == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            ye = self.swiglu(x[rows], *Lw["experts"][e])
            y[rows, slots] = R(ye * w[rows, slots][:, None])
        acc = y[:, 0].clone()
        for j in range(1, K):
            acc = R(acc + y[:, j])
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
        past = cache.length if cache is not None else 0
        positions = torch.arange(past, past + len(ids))
        x = self.embed[ids_t]
        for li, Lw in enumerate(self.layers):
            h = self.rmsnorm(x, Lw["in_norm"])
            x = R(x + self.attention(Lw, li, h, positions, cache))
            h = self.rmsnorm(x, Lw["post_norm"])
            x = R(x + (self.moe(Lw, h) if c.is_moe[li] else self.swiglu(h, *Lw["mlp"])))
        if cache is not None:
            cache.length += len(ids)
        return self.linear(self.rmsnorm(x, self.norm), self.lm_head)

    def new_cache(self):
        return KVCache(self.cfg.num_hidden_layers)


def model_for(model_dir, dtype="fp32", threads=1):
    """The reference Model of whichever family DIR/config.json declares."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type")
    if mt == "kimi_k3" and (cfg.get("text_config") or {}).get("attn_res_block_size"):
        import kimi_k3_ref  # K3's own switches (Attention Residuals, latent MoE, SiTU, MXFP4)
        return kimi_k3_ref.Model(model_dir, dtype, threads)
    if mt in ("kimi_linear", "kimi_k3"):
        import kimi_linear_ref
        return kimi_linear_ref.Model(model_dir, dtype, threads)
    return (Model if mt in SUPPORTED_TYPES else qr.Model)(model_dir, dtype, threads)


def main(argv=None):
    return qr.main(argv, model_cls=model_for, prog="deepseek_ref")


if __name__ == "__main__":
    sys.exit(main())
