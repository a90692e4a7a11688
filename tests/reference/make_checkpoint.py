#!/usr/bin/python3
"""tests/reference/make_checkpoint.py — deterministic random Qwen3 / Qwen3-MoE checkpoints.

Owns: the presets (tiny golden-fixture shapes, benchmark sizes; the deepseek_v3 / kimi_k2
presets are written by deepseek_ckpt.py, the kimi_linear ones by kimi_linear_ckpt.py; the kimi_k3
ones are defined and written by kimi_k3_ckpt.py and found here by name), the Hugging Face folder
layout they are written in (config.json, generation_config.json, model.safetensors or
model-0000i-of-0000n.safetensors + model.safetensors.index.json, real tensor names), and
the weight distributions. Does not own: the container format (safetensors_io.py) or the
forward pass (qwen3_ref.py).

Determinism: every tensor draws from its own numpy PCG64 stream seeded by
SeedSequence([seed, sha256(tensor name)]); only the raw 64-bit output of the bit generator is
used (stable across numpy versions), split into 16-bit words that index a 65536-entry table of
standard-normal quantiles. Everything after that is IEEE float32 arithmetic and
round-to-nearest-even to bf16, so the bytes are identical on every little-endian host, do not
depend on the torch version, and do not depend on the order tensors are written or on how
they are sharded. Each value costs one 16-bit word and one table lookup, done for a whole
tensor at once (a numpy gather into a per-scale bf16 table), which is what makes multi-GB
checkpoints take seconds.

Scales (std of N(0, s^2)), chosen so activations stay O(1) through the layers:
  q/k/v_proj, gate/up_proj, dense and expert        1/sqrt(hidden)
  o_proj                                            out_gain/sqrt(n_head*head_dim)
  down_proj                                         out_gain/sqrt(intermediate)
  mlp.gate (router)                                 router_scale/sqrt(hidden)  (logits std ~ router_scale)
  lm_head (untied)                                  logit_scale/sqrt(hidden)   (logits std ~ logit_scale)
  embed_tokens                                      1 untied; logit_scale/sqrt(hidden) tied
  every RMSNorm weight                              1 + norm_spread * N(0,1)
  attention biases (attention_bias true)            bias_scale
Knob defaults: logit_scale 6, router_scale 3, norm_spread 0.1, bias_scale 0.1, out_gain 1
(presets may override; see PRESETS).

Usage:
  make_checkpoint.py --preset NAME --out DIR [--shards N] [--seed S] [overrides...]
  make_checkpoint.py --list
"""

import argparse
import copy
import hashlib
import json
import os
import sys
import time
from statistics import NormalDist

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402

TRANSFORMERS_VERSION = "4.51.0"

# ---------------------------------------------------------------------------------------------
# presets: config keys (Hugging Face names) + generator knobs

_MOE_BASE = {
    "model_type": "qwen3_moe",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "moe_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
    "attention_bias": False,
}

# Kimi-Linear-48B-A3B-like tiny shape (tiny-kl-48b, tiny-kl-sharded)
_KL_48B = {
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 5, "intermediate_size": 96,
    "linear_attn_config": {"num_heads": 2, "head_dim": 24, "short_conv_kernel_size": 4,
                           "kda_layers": [1, 2, 4], "full_attn_layers": [3, 5]},
    "num_attention_heads": 4, "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16,
    "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 32,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "routed_scaling_factor": 2.446, "rms_norm_eps": 1e-5,
}

PRESETS = {
    # qwen3_moe, tied embeddings, 8 experts top-2, norm_topk_prob true
    # (out_gain 3: with tied embeddings the residual's own-token direction otherwise dominates
    # the final hidden state and greedy decoding just repeats the last token)
    "tiny-moe-tied": {"config": dict(_MOE_BASE), "seed": 1001, "shards": 1, "knobs": {"out_gain": 3.0}},
    # the same model (same seed, same bytes per tensor) split over two files + index
    "tiny-moe-sharded": {"config": dict(_MOE_BASE), "seed": 1001, "shards": 2, "knobs": {"out_gain": 3.0}},
    # untied; layer 0 dense (mlp_only_layers), then MoE on every 2nd layer; head_dim*heads != hidden; GQA
    "tiny-moe-sparse": {
        "config": dict(_MOE_BASE, **{
            "hidden_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
            "moe_intermediate_size": 48, "num_experts": 8, "num_experts_per_tok": 3,
            "norm_topk_prob": False, "decoder_sparse_step": 2, "mlp_only_layers": [0],
            "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        }),
        "seed": 2002, "shards": 1},
    # qwen3 dense (the draft family), untied, head_dim*heads != hidden, YaRN x4 from 64 positions
    "tiny-dense": {
        "config": {
            "model_type": "qwen3", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "intermediate_size": 192, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
            "max_position_embeddings": 256, "tie_word_embeddings": False, "attention_bias": False,
        },
        "seed": 3003, "shards": 1},
    # deepseek_v3 (deepseek_ckpt.py): MLA without q compression, 16 experts in 4 groups (keep
    # 2) top-3 + 1 shared expert, layer 0 dense, YaRN x4 with mscale = mscale_all_dim = 1 (as
    # DeepSeek-V3), interleaved RoPE, bf16 weights
    "tiny-ds-bf16": {
        "family": "deepseek",
        "config": {
            "model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 64,
            "num_hidden_layers": 3, "num_attention_heads": 4, "q_lora_rank": None,
            "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
            "n_routed_experts": 16, "num_experts_per_tok": 3, "n_shared_experts": 1,
            "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "routed_scaling_factor": 2.5, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "max_position_embeddings": 256,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        },
        "seed": 6006, "shards": 1, "knobs": {"margin_unit": 0.25}},
    # kimi_k2 (deepseek_ckpt.py) with FP8 E4M3 weights in 32x32 blocks (partial blocks and
    # K % 8 tails: hidden 96, q_lora 48, kv_lora 36, widths 40/80): q_a/q_b compression, 8
    # experts in one group top-2 + 2 shared experts, YaRN x4 with mscale 1 / mscale_all_dim 0.8
    "tiny-ds-fp8": {
        "family": "deepseek",
        "config": {
            "model_type": "kimi_k2", "vocab_size": 512, "hidden_size": 96,
            "num_hidden_layers": 3, "num_attention_heads": 4, "q_lora_rank": 48,
            "kv_lora_rank": 36, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 24, "intermediate_size": 80, "moe_intermediate_size": 40,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2,
            "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "routed_scaling_factor": 2.827, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
            "rope_theta": 50000.0, "max_position_embeddings": 256,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                             "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8},
            "fp8_block": [32, 32],
        },
        "seed": 7007, "shards": 1, "knobs": {"margin_unit": 0.25}},
    # ~60 MB kimi_k2 with FP8 128x128 blocks: memory test (resident memory stays near the FP8 size)
    "rss-ds-fp8": {
        "family": "deepseek",
        "config": {
            "model_type": "kimi_k2", "vocab_size": 8000, "hidden_size": 512,
            "num_hidden_layers": 4, "num_attention_heads": 8, "q_lora_rank": 256,
            "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
            "v_head_dim": 64, "intermediate_size": 1024, "moe_intermediate_size": 256,
            "n_routed_experts": 32, "num_experts_per_tok": 8, "n_shared_experts": 1,
            "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "routed_scaling_factor": 2.827, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
            "rope_theta": 50000.0, "max_position_embeddings": 4096, "rope_scaling": None,
            "fp8_block": [128, 128],
        },
        "seed": 8008, "shards": 1},
    # kimi_linear (kimi_linear_ckpt.py), shaped like Kimi-Linear-48B-A3B: softplus decay gate,
    # A_log [1,1,H,1], low-rank output gate g_a/g_b, conv weights and o_norm BF16; KDA 2 heads x
    # 24 (projection 48 != hidden 64, != MLA's 4 heads); layers 0,1,3 KDA, 2,4 MLA (1-based
    # kda_layers [1,2,4], full_attn_layers [3,5]); layer 0 dense; NoPE MLA with plain q_proj,
    # no output gate; 8 experts top-2 + 1 shared, routed_scaling_factor 2.446 (as the 48B)
    "tiny-kl-48b": {
        "family": "kimi_linear",
        "config": _KL_48B,
        "seed": 9101, "shards": 1, "knobs": {"margin_unit": 0.25, "router_scale": 1.5}},
    # tiny-kl-48b byte for byte, split over 2 files + index
    "tiny-kl-sharded": {
        "family": "kimi_linear",
        "config": _KL_48B,
        "seed": 9101, "shards": 2, "knobs": {"margin_unit": 0.25, "router_scale": 1.5}},
    # K3-style KDA/MLA switches under a kimi_k3 wrapper (text_config, tensors under
    # language_model.): gate_lower_bound -5 (sigmoid decay), use_full_rank_gate (g_proj),
    # A_log [8] for 4 heads (zero padded), F32 conv / o_norm; MLA with q_lora 48 and the
    # sigmoid output gate; layers 3, 4 consecutive MLA at the end; 2 shared experts
    "tiny-kl-k3gate": {
        "family": "kimi_linear",
        "config": {
            "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 5, "intermediate_size": 96,
            "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                                   "kda_layers": [1, 2, 3], "full_attn_layers": [4, 5],
                                   "gate_lower_bound": -5.0, "use_full_rank_gate": True},
            "num_attention_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_output_gate": True,
            "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 32,
            "num_shared_experts": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "routed_scaling_factor": 2.0, "rms_norm_eps": 1e-5,
        },
        "seed": 9202, "shards": 1,
        "knobs": {"margin_unit": 0.25, "router_scale": 1.5, "wrapper": True, "kda_f32": True, "a_log_layout": "flat",
                  "a_log_pad": 8, "a_log_mean": 0.5, "dt_mean": -3.0}},
    # mixed switches, bare kimi_linear: lower-bound gate with the low-rank output gate, A_log
    # [3] unpadded, KDA 3 heads x 24 (72 != hidden 96) vs MLA 6 heads with q_lora 40;
    # first_k_dense_replace 0 + moe_layer_freq 2 (layers 0, 2 MoE; 1, 3 dense); no shared
    # experts; 8 experts in 2 groups keep 1, top-2; no renormalisation; rms_norm_eps 1e-6
    "tiny-kl-mixed": {
        "family": "kimi_linear",
        "config": {
            "vocab_size": 512, "hidden_size": 96, "num_hidden_layers": 4, "intermediate_size": 80,
            "linear_attn_config": {"num_heads": 3, "head_dim": 24, "short_conv_kernel_size": 4,
                                   "kda_layers": [1, 3], "full_attn_layers": [2, 4],
                                   "gate_lower_bound": -5.0},
            "num_attention_heads": 6, "q_lora_rank": 40, "kv_lora_rank": 24, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 12, "mla_use_output_gate": False,
            "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 40,
            "num_shared_experts": 0, "first_k_dense_replace": 0, "moe_layer_freq": 2,
            "num_expert_group": 2, "topk_group": 1, "moe_renormalize": False,
            "routed_scaling_factor": 1.5, "rms_norm_eps": 1e-6,
        },
        "seed": 9303, "shards": 1,
        "knobs": {"margin_unit": 0.25, "router_scale": 1.5, "a_log_layout": "flat", "dt_mean": -3.0}},
    # ~1.9 GB: benchmark target (16 MoE layers x 64 experts x 3 x 1024 x 256)
    "bench2g": {
        "config": dict(_MOE_BASE, **{
            "vocab_size": 32000, "hidden_size": 1024, "num_hidden_layers": 16,
            "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 3072, "moe_intermediate_size": 256, "num_experts": 64,
            "num_experts_per_tok": 8, "max_position_embeddings": 32768,
            "tie_word_embeddings": False,
        }),
        "seed": 4004, "shards": 4},
    # ~1.9 GB: the kimi_linear benchmark model, bench2g's shape and active size (hidden 1024,
    # 16 layers, 64 experts top-8 of width 256, vocab 32000) with Kimi Linear's layer mix:
    # 12 KDA layers (8 heads x 128) and 4 NoPE MLA (every 4th, 16 heads, kv_lora 256)
    "bench-kl": {
        "family": "kimi_linear",
        "config": {
            "vocab_size": 32000, "hidden_size": 1024, "num_hidden_layers": 16,
            "intermediate_size": 3072,
            "linear_attn_config": {"num_heads": 8, "head_dim": 128, "short_conv_kernel_size": 4,
                                   "kda_layers": [i for i in range(1, 17) if i % 4],
                                   "full_attn_layers": [4, 8, 12, 16]},
            "num_attention_heads": 16, "q_lora_rank": None, "kv_lora_rank": 256,
            "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
            "num_experts": 64, "num_experts_per_token": 8, "moe_intermediate_size": 256,
            "num_shared_experts": 1, "first_k_dense_replace": 0, "moe_layer_freq": 1,
            "routed_scaling_factor": 2.446, "rms_norm_eps": 1e-5,
        },
        "seed": 9404, "shards": 4, "knobs": {"margin_unit": 0.25, "router_scale": 1.5}},
    # ~200 MB: memory / RSS tests
    "rss200m": {
        "config": dict(_MOE_BASE, **{
            "vocab_size": 20000, "hidden_size": 512, "num_hidden_layers": 6,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
            "intermediate_size": 1536, "moe_intermediate_size": 256, "num_experts": 32,
            "num_experts_per_tok": 4, "max_position_embeddings": 32768,
            "tie_word_embeddings": False,
        }),
        "seed": 5005, "shards": 1},
}

GEN_DEFAULTS = {"logit_scale": 6.0, "router_scale": 3.0, "norm_spread": 0.1, "bias_scale": 0.1, "out_gain": 1.0}

# ---------------------------------------------------------------------------------------------
# deterministic draws


_TABLE64 = None


def normal_table():
    """65536 standard-normal quantiles at (i + 0.5) / 65536, float64 (symmetric, |x| < 4.4)."""
    global _TABLE64
    if _TABLE64 is None:
        nd = NormalDist()
        _TABLE64 = np.array([nd.inv_cdf((i + 0.5) / 65536.0) for i in range(65536)], dtype=np.float64)
    return _TABLE64


def stream_words(seed, name, n):
    """n uint16 words from the PCG64 stream of (seed, tensor name)."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    words = [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]
    ss = np.random.SeedSequence([int(seed)] + words)
    raw = np.random.PCG64(ss).random_raw((n + 3) // 4)
    return raw.astype("<u8", copy=False).view("<u2")[:n]


_BF16_TABLES = {}


def _bf16_table(std):
    key = float(std)
    t = _BF16_TABLES.get(key)
    if t is None:
        t = st.f32_to_bf16((normal_table() * key).astype(np.float32))
        _BF16_TABLES[key] = t
    return t


def draw_normal(seed, name, n, std, dtype):
    """n draws of N(0, std^2) stored as `dtype` (BF16 -> uint16 bits, F16, F32)."""
    w = stream_words(seed, name, n)
    if dtype == "BF16":
        return _bf16_table(std)[w]
    x = (normal_table() * float(std)).astype(np.float32)[w]
    return x.astype(np.float16) if dtype == "F16" else x


def draw_around_one(seed, name, n, spread, dtype):
    """n draws of 1 + spread * N(0, 1) (norm weights)."""
    w = stream_words(seed, name, n)
    x = np.float32(1.0) + np.float32(spread) * normal_table().astype(np.float32)[w]
    if dtype == "BF16":
        return st.f32_to_bf16(x)
    return x.astype(np.float16) if dtype == "F16" else x.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# config files


def is_moe_layer(cfg, i):
    if cfg["model_type"] != "qwen3_moe":
        return False
    return (cfg.get("num_experts", 0) > 0 and i not in cfg.get("mlp_only_layers", [])
            and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)


def full_config(c, torch_dtype):
    """Complete config.json dict in the key set transformers writes for the family."""
    V = c["vocab_size"]
    bos, eos = V - 2, V - 1
    out = {
        "architectures": ["Qwen3MoeForCausalLM" if c["model_type"] == "qwen3_moe" else "Qwen3ForCausalLM"],
        "attention_bias": c["attention_bias"],
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "max_position_embeddings": c["max_position_embeddings"],
        "max_window_layers": c["num_hidden_layers"],
        "model_type": c["model_type"],
        "num_attention_heads": c["num_attention_heads"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_key_value_heads"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": c["rope_scaling"],
        "rope_theta": c["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": c["tie_word_embeddings"],
        "torch_dtype": torch_dtype,
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }
    if c["model_type"] == "qwen3_moe":
        out.update({
            "decoder_sparse_step": c["decoder_sparse_step"],
            "mlp_only_layers": list(c["mlp_only_layers"]),
            "moe_intermediate_size": c["moe_intermediate_size"],
            "norm_topk_prob": c["norm_topk_prob"],
            "num_experts": c["num_experts"],
            "num_experts_per_tok": c["num_experts_per_tok"],
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
        })
    return out


def generation_config(cfg):
    return {
        "bos_token_id": cfg["bos_token_id"],
        "do_sample": False,
        "eos_token_id": [cfg["eos_token_id"]],
        "pad_token_id": cfg["bos_token_id"],
        "transformers_version": TRANSFORMERS_VERSION,
    }


def validate(c):
    nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "intermediate_size"):
        if c[k] <= 0:
            raise SystemExit("make_checkpoint: %s must be positive, got %r" % (k, c[k]))
    if nh % kv:
        raise SystemExit("make_checkpoint: num_attention_heads %d not divisible by num_key_value_heads %d" % (nh, kv))
    if hd % 2:
        raise SystemExit("make_checkpoint: head_dim %d must be even (RoPE pairs)" % hd)
    if c["model_type"] == "qwen3_moe" and c["num_experts"] > 0:
        if not 0 < c["num_experts_per_tok"] <= c["num_experts"]:
            raise SystemExit("make_checkpoint: num_experts_per_tok %d not in 1..num_experts %d"
                             % (c["num_experts_per_tok"], c["num_experts"]))


# ---------------------------------------------------------------------------------------------
# tensors


def tensor_specs(c, seed, dtype="BF16", knobs=None):
    """TensorSpecs in model order, each generated when written."""
    k = dict(GEN_DEFAULTS, **(knobs or {}))
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    specs = []

    def normal(name, shape, std):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(name, dtype, shape, produce=lambda: draw_normal(seed, name, n, std, dtype)))

    def ones(name, shape):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(name, dtype, shape,
                                   produce=lambda: draw_around_one(seed, name, n, k["norm_spread"], dtype)))

    tied = c["tie_word_embeddings"]
    normal("model.embed_tokens.weight", [V, H], k["logit_scale"] / np.sqrt(H) if tied else 1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        ones(p + "input_layernorm.weight", [H])
        for proj, rows in (("q_proj", nh * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            normal(p + "self_attn.%s.weight" % proj, [rows, H], 1.0 / np.sqrt(H))
            if c["attention_bias"]:
                normal(p + "self_attn.%s.bias" % proj, [rows], k["bias_scale"])
        normal(p + "self_attn.o_proj.weight", [H, nh * hd], k["out_gain"] / np.sqrt(nh * hd))
        if c["attention_bias"]:
            normal(p + "self_attn.o_proj.bias", [H], k["bias_scale"])
        ones(p + "self_attn.q_norm.weight", [hd])
        ones(p + "self_attn.k_norm.weight", [hd])
        ones(p + "post_attention_layernorm.weight", [H])
        if is_moe_layer(c, i):
            E, I = c["num_experts"], c["moe_intermediate_size"]
            normal(p + "mlp.gate.weight", [E, H], k["router_scale"] / np.sqrt(H))
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                normal(q + "gate_proj.weight", [I, H], 1.0 / np.sqrt(H))
                normal(q + "up_proj.weight", [I, H], 1.0 / np.sqrt(H))
                normal(q + "down_proj.weight", [H, I], k["out_gain"] / np.sqrt(I))
        else:
            I = c["intermediate_size"]
            normal(p + "mlp.gate_proj.weight", [I, H], 1.0 / np.sqrt(H))
            normal(p + "mlp.up_proj.weight", [I, H], 1.0 / np.sqrt(H))
            normal(p + "mlp.down_proj.weight", [H, I], k["out_gain"] / np.sqrt(I))
    ones("model.norm.weight", [H])
    if not tied:
        normal("lm_head.weight", [V, H], k["logit_scale"] / np.sqrt(H))
    return specs


def _dump_json(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


TORCH_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def write_checkpoint(out, cfg_keys, seed, shards=1, dtype="BF16", knobs=None):
    """Write a complete model folder. Returns (config dict, list of files, total tensor bytes)."""
    validate(cfg_keys)
    cfg = full_config(cfg_keys, TORCH_DTYPE[dtype])
    specs = tensor_specs(cfg, seed, dtype, knobs)
    os.makedirs(out, exist_ok=True)
    # remove checkpoint files of an earlier layout so the folder is unambiguous
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))
    _dump_json(cfg, os.path.join(out, "config.json"))
    _dump_json(generation_config(cfg), os.path.join(out, "generation_config.json"))
    files = st.save_checkpoint(out, specs, n_shards=shards)
    return cfg, ["config.json", "generation_config.json"] + files, sum(s.nbytes for s in specs)


def write_preset(name, out):
    """Write preset `name` exactly as make_checkpoint.py --preset NAME --out OUT does."""
    p = preset_args(name)
    if p.get("family") == "deepseek":
        import deepseek_ckpt
        return deepseek_ckpt.write_checkpoint(out, p["config"], p["seed"], p["shards"], p.get("knobs"))
    if p.get("family") == "kimi_linear":
        import kimi_linear_ckpt
        return kimi_linear_ckpt.write_checkpoint(out, p["config"], p["seed"], p["shards"], p.get("knobs"))
    if p.get("family") == "kimi_k3":
        import kimi_k3_ckpt
        return kimi_k3_ckpt.write_checkpoint(out, p["config"], p["seed"], p["shards"], p.get("knobs"))
    return write_checkpoint(out, p["config"], p["seed"], p["shards"], "BF16", p.get("knobs"))


def _k3_presets():
    """The Kimi K3 presets (family kimi_k3) live in kimi_k3_ckpt.py."""
    import kimi_k3_ckpt
    return kimi_k3_ckpt.PRESETS


def preset_args(name):
    if name not in PRESETS and name in _k3_presets():
        return copy.deepcopy(_k3_presets()[name])
    if name not in PRESETS:
        raise SystemExit("make_checkpoint: unknown preset %r (known: %s)" % (name, ", ".join(sorted(PRESETS))))
    return copy.deepcopy(PRESETS[name])


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a deterministic random Qwen3/Qwen3-MoE checkpoint folder.")
    ap.add_argument("--preset", default="tiny-moe-tied", help="preset name (see --list)")
    ap.add_argument("--list", action="store_true", help="list presets and exit")
    ap.add_argument("--out", help="output folder (created)")
    ap.add_argument("--seed", type=int, help="RNG seed (default: the preset's)")
    ap.add_argument("--shards", type=int, help="number of safetensors files (default: the preset's)")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--dense", action="store_true", help="model_type qwen3 (no experts)")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--inter", type=int, help="intermediate_size (dense MLP)")
    ap.add_argument("--experts", type=int)
    ap.add_argument("--topk", type=int)
    ap.add_argument("--moe-inter", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--sparse-step", type=int)
    ap.add_argument("--mlp-only", help="comma-separated mlp_only_layers, '' for none")
    ap.add_argument("--norm-topk", choices=["true", "false"])
    ap.add_argument("--tied", choices=["true", "false"])
    ap.add_argument("--attention-bias", choices=["true", "false"])
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--rope-scaling", help="JSON object or 'null'")
    ap.add_argument("--max-pos", type=int)
    ap.add_argument("--eps", type=float, help="rms_norm_eps")
    ap.add_argument("--logit-scale", type=float)
    ap.add_argument("--router-scale", type=float)
    ap.add_argument("--norm-spread", type=float)
    ap.add_argument("--out-gain", type=float, help="multiplier on o_proj/down_proj std")
    a = ap.parse_args(argv)

    if a.list:
        for name, p in PRESETS.items():
            if p.get("family") == "deepseek":
                import deepseek_ckpt
                c = p["config"]
                size = sum(s.nbytes for s in deepseek_ckpt.tensor_specs(c, 0, knobs=p.get("knobs")))
            elif p.get("family") == "kimi_linear":
                import kimi_linear_ckpt
                c = dict(p["config"], model_type="kimi_linear")
                size = sum(s.nbytes for s in kimi_linear_ckpt.tensor_specs(p["config"], 0, knobs=p.get("knobs")))
            else:
                c = full_config(p["config"], "bfloat16")
                size = sum(s.nbytes for s in tensor_specs(c, 0, knobs=p.get("knobs")))
            print("%-18s %-11s %8.1f MB  seed %d  shards %d" % (name, c["model_type"], size / 1e6, p["seed"], p["shards"]))
        import kimi_k3_ckpt
        return kimi_k3_ckpt.main(["--list"])
    if not a.out:
        ap.error("--out is required")

    p = preset_args(a.preset)
    if p.get("family") == "kimi_k3":  # the Kimi K3 family (kimi_k3_ckpt.py) takes no overrides
        import kimi_k3_ckpt
        t0 = time.time()
        seed = p["seed"] if a.seed is None else a.seed
        cfg, files, nbytes = kimi_k3_ckpt.write_checkpoint(a.out, p["config"], seed, a.shards or p["shards"],
                                                           p.get("knobs"))
        print("wrote %s: %s, %.1f MB of tensors, %.2f s" % (a.out, cfg["model_type"], nbytes / 1e6, time.time() - t0),
              file=sys.stderr)
        return 0
    if p.get("family") == "kimi_linear":  # the Kimi Linear family takes no shape overrides
        import kimi_linear_ckpt
        t0 = time.time()
        seed = p["seed"] if a.seed is None else a.seed
        cfg, files, nbytes = kimi_linear_ckpt.write_checkpoint(a.out, p["config"], seed, a.shards or p["shards"],
                                                               p.get("knobs"))
        print("wrote %s: %s, %.1f MB of tensors, %.2f s" % (a.out, cfg["model_type"], nbytes / 1e6, time.time() - t0),
              file=sys.stderr)
        return 0
    if p.get("family") == "deepseek":  # the DeepSeek-V3 family takes no shape overrides
        import deepseek_ckpt
        t0 = time.time()
        seed = p["seed"] if a.seed is None else a.seed
        cfg, files, nbytes = deepseek_ckpt.write_checkpoint(a.out, p["config"], seed, a.shards or p["shards"],
                                                             p.get("knobs"))
        print("wrote %s: %s, %.1f MB of tensors, %.2f s" % (a.out, cfg["model_type"], nbytes / 1e6, time.time() - t0),
              file=sys.stderr)
        return 0
    c = p["config"]
    if a.dense:
        c["model_type"] = "qwen3"
    ov = {"hidden_size": a.hidden, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
          "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim, "intermediate_size": a.inter,
          "num_experts": a.experts, "num_experts_per_tok": a.topk, "moe_intermediate_size": a.moe_inter,
          "vocab_size": a.vocab, "decoder_sparse_step": a.sparse_step, "rope_theta": a.rope_theta,
          "max_position_embeddings": a.max_pos, "rms_norm_eps": a.eps}
    for key, v in ov.items():
        if v is not None:
            c[key] = v
    for key, v in (("norm_topk_prob", a.norm_topk), ("tie_word_embeddings", a.tied),
                   ("attention_bias", a.attention_bias)):
        if v is not None:
            c[key] = v == "true"
    if a.mlp_only is not None:
        c["mlp_only_layers"] = [int(x) for x in a.mlp_only.split(",") if x.strip()]
    if a.rope_scaling is not None:
        c["rope_scaling"] = json.loads(a.rope_scaling)
    c.setdefault("moe_intermediate_size", 0)
    knobs = dict(p.get("knobs", {}))
    for key, v in (("logit_scale", a.logit_scale), ("router_scale", a.router_scale), ("norm_spread", a.norm_spread),
                   ("out_gain", a.out_gain)):
        if v is not None:
            knobs[key] = v
    seed = p["seed"] if a.seed is None else a.seed
    shards = p["shards"] if a.shards is None else a.shards
    t0 = time.time()
    cfg, files, nbytes = write_checkpoint(a.out, c, seed, shards, a.dtype.upper(), knobs)
    dt = time.time() - t0
    print("wrote %s: %s, %d layers, %.1f MB of tensors in %d file(s), %.2f s"
          % (a.out, cfg["model_type"], cfg["num_hidden_layers"], nbytes / 1e6, shards, dt), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
