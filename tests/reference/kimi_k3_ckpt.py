#!/usr/bin/python3
"""tests/reference/kimi_k3_ckpt.py — deterministic random Kimi K3 checkpoints (text tower).

Owns: the published Hugging Face layout of moonshotai/Kimi-K3 (docs: /work/shared/K3.md §1,
§2, §4, §10; in the repository docs/K3.md): the kimi_k3 wrapper config.json (architectures
["KimiK3ForConditionalGeneration"], the text model under "text_config" with model_type
kimi_linear, quantization_config and linear_attn_config nested there), every text tensor
under "language_model." with the §2 names and dtypes, the routed experts ONLY as MXFP4
(experts.{e}.w{1,3,2}.weight_packed U8 [N, K/2] + .weight_scale U8 [N, K/32]), a dummy
vision_tower. / mm_projector. tensor that a text engine must ignore, generation_config.json;
the K3 presets (PRESETS below; make_checkpoint.py --preset NAME and make_golden.py find
them here); and the header-only copy of the REAL K3 folder (--header-only): the §1 config
with the released values, model.safetensors.index.json and 96 shards whose headers list all
497,220 tensors (82,432 experts x 6 + 2,460 text non-expert + 168 vision) with their names,
dtypes, shapes and offsets, each shard extended to its described size as a sparse file (no
data written), metadata.total_size 1,560,860,324,864. Does not own the container format
(safetensors_io.py; this module registers the U8 dtype with it) or the forward pass
(kimi_k3_ref.py).

Tensors (prefix language_model.model.layers.{l}.; P = KDA heads x head_dim, D = KDA head_dim,
H = KDA heads; nh/dn/dr/dv MLA heads and head dims; E experts, M moe_intermediate_size,
Z routed_expert_hidden_size (the latent), S = M x num_shared_experts):
  every layer  input_layernorm / post_attention_layernorm / self_attention_res_norm /
               mlp_res_norm .weight [hidden]; self_attention_res_proj / mlp_res_proj .weight
               [1, hidden]   (layer 0's self_attention_res_* are present but dead: drawn large)
  KDA          self_attn.{q,k,v}_proj.weight [P, hidden]; {q,k,v}_conv1d.weight F32 [P, 1, 4];
               A_log F32 [a_log_pad >= H] zero padded (K3: [128] for 96 heads) or [H];
               dt_bias F32 [P]; f_a_proj [D, hidden]; f_b_proj [P, D]; b_proj [H, hidden];
               g_proj [P, hidden]; o_norm.weight F32 [D]; o_proj [hidden, P]
  MLA          self_attn.q_a_proj [q_lora, hidden], q_a_layernorm [q_lora],
               q_b_proj [nh(dn+dr), q_lora], kv_a_proj_with_mqa [kv_lora+dr, hidden],
               kv_a_layernorm [kv_lora], kv_b_proj [nh(dn+dv), kv_lora], g_proj [nh dv, hidden],
               o_proj [hidden, nh dv]
  layer 0      mlp.{gate,up}_proj [intermediate, hidden], mlp.down_proj [hidden, intermediate]
  MoE (l >= 1) block_sparse_moe.gate.weight [E, hidden], gate.e_score_correction_bias F32 [E],
               routed_expert_down_proj [Z, hidden], routed_expert_norm [Z],
               routed_expert_up_proj [hidden, Z], shared_experts.{gate,up}_proj [S, hidden],
               shared_experts.down_proj [hidden, S],
               experts.{e}.w1 / w3 (gate / up, logical [M, Z]) and w2 (down, logical [Z, M]) as
               .weight_packed U8 [N, K/2] + .weight_scale U8 [N, K/32]
  globals      model.embed_tokens [V, hidden], model.norm [hidden], model.output_attn_res_norm
               [hidden], model.output_attn_res_proj [1, hidden], lm_head [V, hidden]
  ignored      vision_tower.* and mm_projector.* (no language_model. prefix)
Dtypes: BF16 except the six F32 kinds (q/k/v_conv1d, A_log, dt_bias, o_norm,
e_score_correction_bias) and the U8 MXFP4 pairs.

MXFP4 (K3.md §4): byte packed[r, i] holds column 2i in its low nibble and 2i+1 in its high
nibble; nibble c = sign bit 3, magnitude T[c & 7], T = {0, .5, 1, 1.5, 2, 3, 4, 6} (code 8 is
-0.0); scale byte s gives 2^(s - 127) for columns 32j..32j+31 of row r. The generator draws
every nibble uniformly from 0..15 (so codes 8, 7 and 15 all occur) and every scale exponent
as clip(rint(centre + mx_spread * N(0,1)), mx_lo, mx_hi), centre = log2(1 / (2.93 sqrt(K)))
(2.93 = rms of the uniform code magnitudes, so a row has about unit gain) clipped into the
range; scale[0, 0] is forced to mx_lo and scale[N-1, K/32-1] to mx_hi so every expert tensor
spans the preset's whole exponent range.

Determinism: as make_checkpoint.py (per-tensor PCG64 streams seeded by (seed, sha256(full
tensor name)), 16-bit words into a normal-quantile table, float32 arithmetic,
round-to-nearest-even bf16). Tensors are written layer by layer, each layer's experts after
its other tensors in a shuffled (deterministic) order, never by id; a tiny sharded preset
instead deals batches from one shuffle of all (layer, expert) pairs, so every shard holds
experts of several layers out of order. The six tensors of one expert are always adjacent in
one file.

Scales: projections 1/sqrt(fan_in) (o_proj / down_proj / routed_expert_up_proj times
out_gain), conv taps conv_std, router router_scale/sqrt(hidden), correction bias
N(0, bias_scale^2), lm_head logit_scale/sqrt(hidden), embedding 1, norms 1 +
norm_spread*N(0,1); AttnRes proj res_scale/sqrt(hidden) (the mix logits then spread by about
res_scale across sources); layer 0's dead self_attention_res_norm 1 + 10 N(0,1) and
self_attention_res_proj 30/sqrt(hidden); A_log = a_log_mean + a_log_std N(0,1), dt_bias =
dt_mean + dt_std N(0,1) (float32), vision dummies N(0, 1).

Usage:
  kimi_k3_ckpt.py --preset NAME --out DIR [--vocab N]   (also: make_checkpoint.py --preset NAME)
  kimi_k3_ckpt.py --header-only --out DIR [--no-extend]
  kimi_k3_ckpt.py --list
"""

import argparse
import copy
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_checkpoint as mc  # noqa: E402
import safetensors_io as st  # noqa: E402

# U8 (the MXFP4 pairs) for safetensors_io's writer and reader: one byte per element, read as
# raw uint8 (safetensors_io.to_float32 does not widen it; kimi_k3_ref.py decodes the pairs).
st.DTYPE_SIZE.setdefault("U8", 1)
st.NP_DTYPE.setdefault("U8", np.dtype("u1"))

PREFIX = "language_model."
MX_T = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
MX_CODE_RMS = float(np.sqrt(np.mean(np.square(MX_T))))  # 2.926...: rms of uniform magnitudes

# Generator knob defaults of this family (make_checkpoint.GEN_DEFAULTS are underneath).
K3_DEFAULTS = {"router_scale": 1.5, "bias_scale": 0.1, "margin_unit": 0.25,
               "a_log_mean": 0.5, "a_log_std": 0.5, "dt_mean": -3.0, "dt_std": 1.0,
               "conv_std": 0.5, "a_log_pad": 0, "res_scale": 1.5, "res0_norm_spread": 10.0,
               "res0_scale": 30.0, "mx_lo": -9, "mx_hi": -3, "mx_spread": 1.0}

QUANTIZATION_CONFIG = {
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None, "block_structure": None, "dynamic": False,
                "group_size": 32, "num_bits": 4, "observer": "minmax", "observer_kwargs": {},
                "scale_dtype": "torch.uint8", "strategy": "group", "symmetric": True,
                "type": "float", "zp_dtype": None,
            },
        }
    },
    "format": "mxfp4-pack-quantized",
    "global_compression_ratio": None,
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
               "re:.*vision_tower.*", "re:.*mm_projector.*"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}

# ---------------------------------------------------------------------------------------------
# presets (config keys of text_config that differ per preset + generator knobs)


def _kda_lists(n_layers, mla0):
    """1-based (kda_layers, full_attn_layers) for the 0-based MLA layer set mla0."""
    kda = [i + 1 for i in range(n_layers) if i not in mla0]
    full = [i + 1 for i in sorted(mla0)]
    return kda, full


_TINY_K3 = {  # K3.md §10, vocab 512
    "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 7, "intermediate_size": 256,
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
    "num_attention_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 24,
    "num_experts": 8, "num_experts_per_token": 3, "num_shared_experts": 2,
    "moe_intermediate_size": 64, "routed_expert_hidden_size": 96,
    "routed_scaling_factor": 1.0, "attn_res_block_size": 3,
    "linear_attn_config": {"num_heads": 3, "head_dim": 32, "short_conv_kernel_size": 4,
                           "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                           "kda_layers": [1, 2, 3, 5], "full_attn_layers": [4, 6, 7]},
}

PRESETS = {
    # K3.md §10: 7 layers, block 3 (writes at 0, 3, 6: an MLA write layer and the last layer),
    # KDA {0,1,2,4} 3 heads x 32 (P 96 != hidden 128), MLA {3,5,6} 4 heads (v 24 != nope 16),
    # A_log F32[32] zero padded; 8 experts top-3 + 2 shared, latent 96 (3 scale groups per
    # w1/w3 row), moe width 64 (2 per w2 row); scales 2^-9..2^-3
    "tiny-k3": {"family": "kimi_k3", "config": _TINY_K3, "seed": 9501, "shards": 1,
                "knobs": {"a_log_pad": 32}},
    # A_log F32[H] unpadded, routed_scaling_factor 2.5, activation_situ_linear_beta null,
    # activation_situ_beta 2.0; hidden 80 (not a multiple of 32), 5 layers, block 2 (writes at
    # 0, 2, 4: the last layer, a KDA write after an MLA), KDA {0,2,3} 2 heads x 24 (P 48),
    # MLA {1,4} 3 heads (q_lora 32, kv_lora 16, 8 + 8 / v 16); 6 experts top-2 + 1 shared,
    # latent 64, moe width 96 (3 groups per w2 row)
    "tiny-k3-unpadded": {
        "family": "kimi_k3",
        "config": {
            "vocab_size": 512, "hidden_size": 80, "num_hidden_layers": 5, "intermediate_size": 160,
            "activation_situ_beta": 2.0, "activation_situ_linear_beta": None, "rms_norm_eps": 1e-5,
            "num_attention_heads": 3, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 16,
            "num_experts": 6, "num_experts_per_token": 2, "num_shared_experts": 1,
            "moe_intermediate_size": 96, "routed_expert_hidden_size": 64,
            "routed_scaling_factor": 2.5, "attn_res_block_size": 2,
            "linear_attn_config": {"num_heads": 2, "head_dim": 24, "short_conv_kernel_size": 4,
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                                   "kda_layers": [1, 3, 4], "full_attn_layers": [2, 5]},
        },
        "seed": 9502, "shards": 1, "knobs": {"a_log_pad": 0}},
    # deeper: 10 layers, block 4 (writes at 0, 4, 8; final stack [emb, S(0..3), S(4..7)] +
    # S(8..9)), MLA {3, 8, 9} (8 is a write layer; 8, 9 consecutive at the end like K3's 91,
    # 92), KDA 4 heads x 16 (P = hidden 64), MLA 2 heads (q_lora 24, kv_lora 16, 16 + 16 /
    # v 32); activation_situ_beta null (beta 1.0); 16 experts top-4 + 1 shared, latent 64,
    # moe width 32 (1 scale group per w2 row); A_log F32[8] padded
    "tiny-k3-deep": {
        "family": "kimi_k3",
        "config": {
            "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 10, "intermediate_size": 128,
            "activation_situ_beta": None, "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
            "num_attention_heads": 2, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 16, "v_head_dim": 32,
            "num_experts": 16, "num_experts_per_token": 4, "num_shared_experts": 1,
            "moe_intermediate_size": 32, "routed_expert_hidden_size": 64,
            "routed_scaling_factor": 1.0, "attn_res_block_size": 4,
            "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                                   "kda_layers": [1, 2, 3, 5, 6, 7, 8], "full_attn_layers": [4, 9, 10]},
        },
        "seed": 9503, "shards": 1, "knobs": {"a_log_pad": 8}},
    # sharded: 4 files + index, experts shuffled across all layers and files (never id
    # order), MXFP4 scales 2^-20..2^-1 (subnormal-free but 19 binades apart); hidden 96,
    # 6 layers, block 3, MLA {2, 5}, KDA 4 heads x 16 (P 64), MLA 4 heads (q_lora 32,
    # kv_lora 32, 8 + 8 / v 16); 12 experts top-3 + 2 shared, latent 64, moe width 64,
    # routed_scaling_factor 1.5; A_log F32[16] padded
    "tiny-k3-sharded": {
        "family": "kimi_k3",
        "config": {
            "vocab_size": 512, "hidden_size": 96, "num_hidden_layers": 6, "intermediate_size": 192,
            "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
            "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 16,
            "num_experts": 12, "num_experts_per_token": 3, "num_shared_experts": 2,
            "moe_intermediate_size": 64, "routed_expert_hidden_size": 64,
            "routed_scaling_factor": 1.5, "attn_res_block_size": 3,
            "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                                   "kda_layers": [1, 2, 4, 5], "full_attn_layers": [3, 6]},
        },
        "seed": 9504, "shards": 4,
        "knobs": {"a_log_pad": 16, "mx_lo": -20, "mx_hi": -1, "mx_spread": 3.0}},
    # the benchmark's K3-shaped model (tools/bench: df-bench-engine --model bench-k3): hidden
    # 1024, K3's proportions at ~0.6 GB — 12 layers, block 4, MLA every 4th layer and the
    # last two (3, 7, 10, 11), KDA 8 heads x 128 (P = hidden), MLA 8 heads, dense layer 0;
    # 64 experts top-8 + 2 shared in a 512-wide latent (hidden / 2, as K3's 3584 of 7168),
    # expert width 384, MXFP4 routed experts; vocab 32000
    "bench-k3": {
        "family": "kimi_k3",
        "config": {
            "vocab_size": 32000, "hidden_size": 1024, "num_hidden_layers": 12,
            "intermediate_size": 2816, "activation_situ_beta": 4.0,
            "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
            "num_attention_heads": 8, "q_lora_rank": 192, "kv_lora_rank": 64,
            "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
            "num_experts": 64, "num_experts_per_token": 8, "num_shared_experts": 2,
            "moe_intermediate_size": 384, "routed_expert_hidden_size": 512,
            "routed_scaling_factor": 1.0, "attn_res_block_size": 4,
            "linear_attn_config": {"num_heads": 8, "head_dim": 128, "short_conv_kernel_size": 4,
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                                   "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10],
                                   "full_attn_layers": [4, 8, 11, 12]},
        },
        "seed": 9505, "shards": 2, "knobs": {"a_log_pad": 0}},
}

for _p in PRESETS.values():  # every knob explicit (make_golden.py reads router_scale / margin_unit)
    _p["knobs"] = dict(K3_DEFAULTS, **_p.get("knobs", {}))

# The released config (K3.md §1.1, §1.2, §1.3) for --header-only.
_K3_MLA0 = set(range(3, 92, 4)) | {92}
K3_REAL = {
    "vocab_size": 163840, "hidden_size": 7168, "num_hidden_layers": 93, "intermediate_size": 33792,
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
    "num_attention_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128,
    "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2,
    "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584,
    "routed_scaling_factor": 1.0, "attn_res_block_size": 12, "max_position_embeddings": 1048576,
    "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
    "linear_attn_config": {"num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4,
                           "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                           "kda_layers": _kda_lists(93, _K3_MLA0)[0],
                           "full_attn_layers": _kda_lists(93, _K3_MLA0)[1]},
}
K3_REAL_A_LOG_PAD = 128
K3_REAL_SHARDS = 96
K3_REAL_TENSORS = 497220
K3_REAL_TOTAL_SIZE = 1560860324864

# ---------------------------------------------------------------------------------------------
# config files


def is_kda_layer(c, i):
    return (i + 1) in c["linear_attn_config"]["kda_layers"]


def is_moe_layer(c, i):
    return i >= c.get("first_k_dense_replace", 1) and i % c.get("moe_layer_freq", 1) == 0


def text_config(c):
    """text_config: every key K3.md §10 lists (+ the §1.1 bookkeeping keys)."""
    V = c["vocab_size"]
    la = copy.deepcopy(c["linear_attn_config"])
    out = {
        "model_type": "kimi_linear",
        "vocab_size": V,
        "hidden_size": c["hidden_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "intermediate_size": c["intermediate_size"],
        "hidden_act": "situ",
        "activation_situ_beta": c["activation_situ_beta"],
        "activation_situ_linear_beta": c["activation_situ_linear_beta"],
        "rms_norm_eps": c["rms_norm_eps"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_attention_heads"],
        "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": c["kv_lora_rank"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "v_head_dim": c["v_head_dim"],
        "head_dim": c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": c["num_experts"],
        "num_experts_per_token": c["num_experts_per_token"],
        "num_shared_experts": c["num_shared_experts"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "routed_expert_hidden_size": c["routed_expert_hidden_size"],
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "topk_method": "noaux_tc",
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "moe_renormalize": True,
        "routed_scaling_factor": c["routed_scaling_factor"],
        "attn_res_block_size": c["attn_res_block_size"],
        "num_nextn_predict_layers": 0,
        "max_position_embeddings": c.get("max_position_embeddings", 4096),
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": c.get("bos_token_id", V - 2),
        "eos_token_id": c.get("eos_token_id", V - 1),
        "pad_token_id": c.get("pad_token_id", V - 2),
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "initializer_range": 0.02,
        "model_max_length": c.get("max_position_embeddings", 4096),
        "torch_dtype": "bfloat16",
        "quantization_config": copy.deepcopy(QUANTIZATION_CONFIG),
        "linear_attn_config": la,
    }
    return out


VISION_CONFIG = {  # MoonViT3d (K3.md §1.1 gives patch 14, hidden 1152, 27 layers, 16 heads)
    "model_type": "moonvit3d", "patch_size": 14, "vt_hidden_size": 1152, "vt_intermediate_size": 4304,
    "vt_num_attention_heads": 16, "vt_num_hidden_layers": 27, "merge_kernel_size": [2, 2],
    "init_pos_emb_height": 64, "init_pos_emb_width": 64, "mm_hidden_size": 1152,
    "text_hidden_size": 7168, "torch_dtype": "bfloat16",
}


def full_config(c):
    tc = text_config(c)
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k3.KimiK3Config",
                     "AutoModel": "modeling_kimi_k3.KimiK3ForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_kimi_k3.KimiK3ForConditionalGeneration"},
        "model_type": "kimi_k3",
        "bos_token_id": tc["bos_token_id"],
        "eos_token_id": tc["eos_token_id"],
        "pad_token_id": tc["pad_token_id"],
        "media_placeholder_token_id": 163605 if tc["vocab_size"] > 163605 else tc["pad_token_id"],
        "ignore_index": -100,
        "image_placeholder": "<|media_pad|>",
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "transformers_version": "4.56.2",
        "text_config": tc,
        "vision_config": copy.deepcopy(VISION_CONFIG),
    }


def generation_config(cfg):
    return {"bos_token_id": cfg["bos_token_id"], "do_sample": False,
            "eos_token_id": [cfg["eos_token_id"]], "pad_token_id": cfg["pad_token_id"],
            "transformers_version": "4.56.2"}


# ---------------------------------------------------------------------------------------------
# draws


def _table32():
    return mc.normal_table().astype(np.float32)


def draw_affine(seed, name, n, mean, std):
    w = mc.stream_words(seed, name, n)
    return (np.float32(mean) + np.float32(std) * _table32()[w]).astype(np.float32)


def mx_centre(K, lo, hi, gain=1.0):
    c = int(np.rint(np.log2(gain / (MX_CODE_RMS * np.sqrt(K)))))
    return min(max(c, lo), hi)


def draw_mxfp4(seed, name, N, K, lo, hi, spread):
    """(packed U8 [N, K/2], scale U8 [N, K/32]) for the MXFP4 weight `name` (without the
    .weight_packed / .weight_scale suffix)."""
    codes = (mc.stream_words(seed, name + ".weight_packed", N * K) & 15).astype(np.uint8).reshape(N, K)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    G = K // 32
    w = mc.stream_words(seed, name + ".weight_scale", N * G)
    e = np.rint(mx_centre(K, lo, hi) + spread * mc.normal_table()[w])
    e = np.clip(e, lo, hi).astype(np.int64).reshape(N, G)
    if N * G >= 2:
        e[0, 0], e[N - 1, G - 1] = lo, hi
    return packed, (e + 127).astype(np.uint8)


def decode_mxfp4(packed, scale):
    """Exact float32 [N, K] of an MXFP4 pair (K3.md §4); raises on a 255 (NaN) scale."""
    packed = np.asarray(packed, dtype=np.uint8)
    scale = np.asarray(scale, dtype=np.uint8)
    N, K2 = packed.shape
    K = 2 * K2
    if scale.shape != (N, K // 32):
        raise ValueError("MXFP4 scale shape %s, expected %s" % (list(scale.shape), [N, K // 32]))
    if (scale == 255).any():
        raise ValueError("MXFP4 scale byte 255 (NaN)")
    codes = np.empty((N, K), dtype=np.uint8)
    codes[:, 0::2] = packed & 15
    codes[:, 1::2] = packed >> 4
    mag = np.array(MX_T, dtype=np.float32)[codes & 7]
    val = np.where(codes & 8, -mag, mag).astype(np.float32)
    exp = np.repeat(scale.astype(np.int32) - 127, 32, axis=1)
    return np.ldexp(val, exp).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# tensors


class _Units:
    """TensorSpecs grouped in write units: a unit (one expert's six tensors, or one
    non-expert tensor) never straddles a shard."""

    def __init__(self):
        self.units = []

    def add(self, specs):
        self.units.append(list(specs))

    def specs(self):
        return [s for u in self.units for s in u]


def tensor_specs(c, seed, knobs=None, header_only=False):
    """(non-expert units, {layer: [expert units in id order]}, vision units). header_only:
    the specs carry no data (their produce raises)."""
    k = dict(mc.GEN_DEFAULTS)
    k.update(K3_DEFAULTS)
    k.update(knobs or {})
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    la = c["linear_attn_config"]
    kh, kd, ks = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
    P = kh * kd
    nh, dn, dr, dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kvl, ql = c["kv_lora_rank"], c["q_lora_rank"]
    E, M, Z = c["num_experts"], c["moe_intermediate_size"], c["routed_expert_hidden_size"]
    S = M * c["num_shared_experts"]
    base = _Units()
    experts = {}

    def none():
        raise RuntimeError("header-only spec has no data")

    def spec(name, dtype, shape, produce):
        return st.TensorSpec(name, dtype, shape, produce=none if header_only else produce)

    def normal(name, shape, std, dtype="BF16"):
        full = PREFIX + name
        n = int(np.prod(shape))
        base.add([spec(full, dtype, shape, lambda: mc.draw_normal(seed, full, n, std, dtype))])

    def ones(name, shape, spread=None, dtype="BF16"):
        full = PREFIX + name
        n = int(np.prod(shape))
        sp = k["norm_spread"] if spread is None else spread
        base.add([spec(full, dtype, shape, lambda: mc.draw_around_one(seed, full, n, sp, dtype))])

    def affine(name, shape, n_drawn, mean, std):
        full = PREFIX + name
        n = int(np.prod(shape))

        def produce():
            a = np.zeros(n, dtype=np.float32)
            a[:n_drawn] = draw_affine(seed, full, n_drawn, mean, std)
            return a
        base.add([spec(full, "F32", shape, produce)])

    def glu(p, inter):
        normal(p + "gate_proj.weight", [inter, H], 1.0 / np.sqrt(H))
        normal(p + "up_proj.weight", [inter, H], 1.0 / np.sqrt(H))
        normal(p + "down_proj.weight", [H, inter], k["out_gain"] / np.sqrt(inter))

    def mx_pair(name, N, K):
        full = PREFIX + name
        cache = {}

        def get():
            if "v" not in cache:
                cache["v"] = draw_mxfp4(seed, full, N, K, k["mx_lo"], k["mx_hi"], k["mx_spread"])
            return cache["v"]

        def packed():
            return get()[0]

        def scale():
            v = get()[1]
            cache.clear()
            return v
        return [spec(full + ".weight_packed", "U8", [N, K // 2], packed),
                spec(full + ".weight_scale", "U8", [N, K // 32], scale)]

    normal("model.embed_tokens.weight", [V, H], 1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        ones(p + "input_layernorm.weight", [H])
        ones(p + "post_attention_layernorm.weight", [H])
        ones(p + "self_attention_res_norm.weight", [H], k["res0_norm_spread"] if i == 0 else None)
        normal(p + "self_attention_res_proj.weight", [1, H], (k["res0_scale"] if i == 0 else k["res_scale"]) / np.sqrt(H))
        ones(p + "mlp_res_norm.weight", [H])
        normal(p + "mlp_res_proj.weight", [1, H], k["res_scale"] / np.sqrt(H))
        if is_kda_layer(c, i):
            for x in "qkv":
                normal(a + "%s_proj.weight" % x, [P, H], 1.0 / np.sqrt(H))
            for x in "qkv":
                normal(a + "%s_conv1d.weight" % x, [P, 1, ks], k["conv_std"], "F32")
            affine(a + "A_log", [max(kh, k["a_log_pad"])], kh, k["a_log_mean"], k["a_log_std"])
            affine(a + "dt_bias", [P], P, k["dt_mean"], k["dt_std"])
            normal(a + "f_a_proj.weight", [kd, H], 1.0 / np.sqrt(H))
            normal(a + "f_b_proj.weight", [P, kd], 1.0 / np.sqrt(kd))
            normal(a + "b_proj.weight", [kh, H], 1.0 / np.sqrt(H))
            normal(a + "g_proj.weight", [P, H], 1.0 / np.sqrt(H))
            ones(a + "o_norm.weight", [kd], dtype="F32")
            normal(a + "o_proj.weight", [H, P], k["out_gain"] / np.sqrt(P))
        else:
            normal(a + "q_a_proj.weight", [ql, H], 1.0 / np.sqrt(H))
            ones(a + "q_a_layernorm.weight", [ql])
            normal(a + "q_b_proj.weight", [nh * (dn + dr), ql], 1.0 / np.sqrt(ql))
            normal(a + "kv_a_proj_with_mqa.weight", [kvl + dr, H], 1.0 / np.sqrt(H))
            ones(a + "kv_a_layernorm.weight", [kvl])
            normal(a + "kv_b_proj.weight", [nh * (dn + dv), kvl], 1.0 / np.sqrt(kvl))
            normal(a + "g_proj.weight", [nh * dv, H], 1.0 / np.sqrt(H))
            normal(a + "o_proj.weight", [H, nh * dv], k["out_gain"] / np.sqrt(nh * dv))
        if is_moe_layer(c, i):
            m = p + "block_sparse_moe."
            normal(m + "gate.weight", [E, H], k["router_scale"] / np.sqrt(H))
            normal(m + "gate.e_score_correction_bias", [E], k["bias_scale"], "F32")
            normal(m + "routed_expert_down_proj.weight", [Z, H], 1.0 / np.sqrt(H))
            ones(m + "routed_expert_norm.weight", [Z])
            normal(m + "routed_expert_up_proj.weight", [H, Z], k["out_gain"] / np.sqrt(Z))
            glu(m + "shared_experts.", S)
            experts[i] = [mx_pair(m + "experts.%d.w1" % e, M, Z) + mx_pair(m + "experts.%d.w2" % e, Z, M)
                          + mx_pair(m + "experts.%d.w3" % e, M, Z) for e in range(E)]
        else:
            glu(p + "mlp.", c["intermediate_size"])
    ones("model.norm.weight", [H])
    ones("model.output_attn_res_norm.weight", [H])
    normal("model.output_attn_res_proj.weight", [1, H], k["res_scale"] / np.sqrt(H))
    normal("lm_head.weight", [V, H], k["logit_scale"] / np.sqrt(H))
    return base, experts


def vision_units(seed, real, header_only=False):
    """The vision tensors: a 2-tensor dummy for tiny folders; for the real folder 165
    vision_tower.* + 3 mm_projector.* BF16 tensors of 894,717,952 bytes in all (K3.md §1.5
    gives only the counts and the byte total: the names and shapes here are invented, MoonViT
    shaped)."""
    out = []

    def add(name, shape):
        n = int(np.prod(shape))

        def produce():
            return mc.draw_normal(seed, name, n, 1.0, "BF16")
        out.append([st.TensorSpec(name, "BF16", shape,
                                  produce=(lambda: (_ for _ in ()).throw(RuntimeError("header only")))
                                  if header_only else produce)])
    if not real:
        add("vision_tower.patch_embed.proj.weight", [8, 3, 2, 2])
        add("mm_projector.proj.0.weight", [16, 8])
        return out
    Hv, W = 1152, 3840
    add("vision_tower.patch_embed.proj.weight", [Hv, 3, 14, 14])
    for i in range(27):
        b = "vision_tower.encoder.blocks.%d." % i
        add(b + "norm0.weight", [Hv])
        add(b + "wqkv.weight", [3 * Hv, Hv])
        add(b + "wo.weight", [Hv, Hv])
        add(b + "norm1.weight", [Hv])
        add(b + "mlp.fc0.weight", [W, Hv])
        add(b + "mlp.fc1.weight", [Hv, W])
    add("vision_tower.encoder.final_layernorm.weight", [Hv])
    add("mm_projector.pre_norm.weight", [Hv])
    add("mm_projector.proj.0.weight", [4 * Hv, 4 * Hv])
    add("mm_projector.proj.2.weight", [7168, 4 * Hv])
    used = sum(u[0].nbytes for u in out)
    rem = 894717952 - used
    assert rem > 0 and rem % (2 * 512) == 0, rem
    add("vision_tower.patch_embed.pos_emb.weight", [rem // (2 * 512), 512])
    return out


def _perm(seed, name, n):
    """A deterministic permutation of range(n) from the (seed, name) stream."""
    w = mc.stream_words(seed, name, 4 * n).astype(np.uint64).reshape(n, 4)
    key = (w[:, 0] << np.uint64(48)) | (w[:, 1] << np.uint64(32)) | (w[:, 2] << np.uint64(16)) | w[:, 3]
    return [int(x) for x in np.argsort(key, kind="stable")]


def ordered_units(c, seed, knobs, shards, header_only=False, scatter=None):
    """Every write unit in file order, layer by layer: the embedding, then per layer its
    non-expert tensors followed by a batch of experts, then the final globals and vision.
    The experts after layer l are layer l's own in a shuffled order, or (scatter, the default
    for tiny sharded folders) equal-sized batches dealt from one shuffle of every (layer,
    expert) pair, so each file holds experts of several layers in no id order."""
    base, experts = tensor_specs(c, seed, knobs, header_only)
    if scatter is None:
        scatter = shards > 1 and not header_only
    by_layer, head, tail = {}, [], []
    for u in base.units:
        parts = u[0].name.split(".layers.")
        if len(parts) == 2:
            by_layer.setdefault(int(parts[1].split(".")[0]), []).append(u)
        elif by_layer:
            tail.append(u)
        else:
            head.append(u)
    moe = sorted(experts)
    if scatter:
        pairs = [(l, e) for l in moe for e in range(len(experts[l]))]
        dealt = [experts[pairs[j][0]][pairs[j][1]] for j in _perm(seed, "expert-order", len(pairs))]
        n = len(dealt)
        batches = {l: dealt[i * n // len(moe):(i + 1) * n // len(moe)] for i, l in enumerate(moe)}
    else:
        batches = {l: [experts[l][e] for e in _perm(seed, "expert-order/%d" % l, len(experts[l]))] for l in moe}
    units = list(head)
    for l in sorted(by_layer):
        units += by_layer[l] + batches.get(l, [])
    units += tail
    units += vision_units(seed, real=header_only and c is K3_REAL, header_only=header_only)
    return units


def split_units(units, n_shards):
    """Contiguous groups of about equal byte size, never splitting a unit."""
    if not 1 <= n_shards <= len(units):
        raise ValueError("cannot split %d units into %d shards" % (len(units), n_shards))
    sizes = [sum(s.nbytes for s in u) for u in units]
    total = sum(sizes)
    groups = [[] for _ in range(n_shards)]
    g, acc = 0, 0
    for i, u in enumerate(units):
        if g < n_shards - 1 and groups[g] and (acc >= total * (g + 1) / n_shards
                                               or len(units) - i <= n_shards - 1 - g):
            g += 1
        groups[g].append(u)
        acc += sizes[i]
    if any(not gr for gr in groups):
        raise ValueError("empty shard")
    return [[s for u in gr for s in u] for gr in groups]


def _clean(out):
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))


def write_checkpoint(out, cfg_keys, seed, shards=1, knobs=None):
    """Write a complete tiny K3 folder. Returns (config dict, list of files, total tensor bytes)."""
    cfg = full_config(cfg_keys)
    units = ordered_units(cfg_keys, seed, knobs, shards)
    _clean(out)
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    mc._dump_json(generation_config(cfg), os.path.join(out, "generation_config.json"))
    meta = {"format": "pt"}
    files, total = [], 0
    if shards == 1:
        st.write_file(os.path.join(out, st.SINGLE_NAME), [s for u in units for s in u], meta)
        files.append(st.SINGLE_NAME)
        total = sum(s.nbytes for u in units for s in u)
    else:
        weight_map = {}
        for i, gr in enumerate(split_units(units, shards)):
            name = st.shard_file_name(i, shards)
            st.write_file(os.path.join(out, name), gr, meta)
            files.append(name)
            for s in gr:
                weight_map[s.name] = name
                total += s.nbytes
        mc._dump_json({"metadata": {"total_size": total}, "weight_map": weight_map},
                      os.path.join(out, st.INDEX_NAME))
        files.append(st.INDEX_NAME)
    return cfg, ["config.json", "generation_config.json"] + files, total


def write_preset(name, out, vocab=None):
    """Preset `name` into out; vocab overrides vocab_size (bos / eos then vocab - 2 / - 1)."""
    p = PRESETS[name]
    c = dict(p["config"], vocab_size=vocab) if vocab else p["config"]
    return write_checkpoint(out, c, p["seed"], p["shards"], p.get("knobs"))


# ---------------------------------------------------------------------------------------------
# header-only copy of the real moonshotai/Kimi-K3 folder


def write_header_only(out, extend=True):
    """config.json (K3.md §1 values), generation_config.json, model.safetensors.index.json and
    96 shards holding only their headers; with extend, each shard is then truncated up to its
    described size (a sparse file: the data reads as zeros, no blocks are written).
    Returns (config, tensor count, total bytes)."""
    c = K3_REAL
    knobs = {"a_log_pad": K3_REAL_A_LOG_PAD}
    cfg = full_config(c)
    units = ordered_units(c, 0, knobs, K3_REAL_SHARDS, header_only=True)
    n = sum(len(u) for u in units)
    _clean(out)
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    mc._dump_json(generation_config(cfg), os.path.join(out, "generation_config.json"))
    weight_map, total = {}, 0
    for i, gr in enumerate(split_units(units, K3_REAL_SHARDS)):
        name = st.shard_file_name(i, K3_REAL_SHARDS)
        _, head = st.header_bytes(gr, {"format": "pt"})
        data = sum(s.nbytes for s in gr)
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(head)
        if extend:
            os.truncate(path, len(head) + data)
        for s in gr:
            weight_map[s.name] = name
        total += data
    with open(os.path.join(out, st.INDEX_NAME), "w") as f:
        f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                           indent=2, sort_keys=True) + "\n")
    if n != K3_REAL_TENSORS or total != K3_REAL_TOTAL_SIZE:
        raise SystemExit("kimi_k3_ckpt: header-only inventory is %d tensors / %d bytes, K3.md §1.5 says %d / %d"
                         % (n, total, K3_REAL_TENSORS, K3_REAL_TOTAL_SIZE))
    return cfg, n, total


def main(argv=None):
    ap = argparse.ArgumentParser(description="Kimi K3 checkpoints: tiny presets, or the real folder's headers.")
    ap.add_argument("--preset", help="preset name (see --list)")
    ap.add_argument("--header-only", action="store_true",
                    help="write the real Kimi-K3 folder's config, index and 96 header-only (sparse) shards")
    ap.add_argument("--no-extend", action="store_true", help="with --header-only: leave the shards header-sized")
    ap.add_argument("--vocab", type=int, help="with --preset: override vocab_size (e.g. to "
                    "pair the model with a tokenizer of that size)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.list:
        for name, p in PRESETS.items():
            base, ex = tensor_specs(p["config"], 0, p.get("knobs"), header_only=True)
            size = sum(s.nbytes for s in base.specs()) + sum(s.nbytes for l in ex.values() for u in l for s in u)
            print("%-18s kimi_k3  %8.2f MB  seed %d  shards %d" % (name, size / 1e6, p["seed"], p["shards"]))
        return 0
    if not a.out:
        ap.error("--out is required")
    t0 = time.time()
    if a.header_only:
        cfg, n, total = write_header_only(a.out, not a.no_extend)
        print("wrote %s: kimi_k3 header-only, %d tensors, %d bytes described, %d shards, %.1f s"
              % (a.out, n, total, K3_REAL_SHARDS, time.time() - t0), file=sys.stderr)
        return 0
    if a.preset not in PRESETS:
        ap.error("unknown preset %r (known: %s)" % (a.preset, ", ".join(PRESETS)))
    cfg, files, nbytes = write_preset(a.preset, a.out, a.vocab)
    print("wrote %s: kimi_k3, %.2f MB of tensors in %d file(s), %.2f s"
          % (a.out, nbytes / 1e6, len([f for f in files if f.endswith(".safetensors")]), time.time() - t0),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
