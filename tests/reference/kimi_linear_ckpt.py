#!/usr/bin/python3
"""tests/reference/kimi_linear_ckpt.py — deterministic random Kimi Linear checkpoints.

Owns: the Hugging Face layout of the Kimi Linear family (model_type "kimi_linear",
moonshotai/Kimi-Linear-48B-A3B-Instruct; and the K3-style wrapper, model_type "kimi_k3" with
the text model under "text_config" and every tensor under "language_model."): config.json
keys as the published configuration_kimi.py / config.json write them, tensor names of the
published modeling_kimi.py (KimiDeltaAttention, KimiMLAAttention, KimiSparseMoeBlock,
KimiMoEGate, KimiBlockSparseMLP, KimiMLP). make_checkpoint.py registers the presets and calls
write_checkpoint for them; draws use its per-tensor streams (bytes depend only on the seed and
the tensor name without the wrapper prefix, never on write order or sharding). Also writes a header-only copy of the
real Kimi-Linear-48B-A3B folder (--header-only) for `deltafin inspect`.

Layer schedule (configuration_kimi.py is_kda_layer): layer i (0-based) is KDA iff (i + 1) is
in linear_attn_config.kda_layers (a 1-BASED list), otherwise MLA (full_attn_layers, also
1-based, lists the rest). Layer i has a MoE block iff num_experts is set, i >=
first_k_dense_replace and i % moe_layer_freq == 0; otherwise a dense MLP of
intermediate_size.

Tensors (P = linear_attn_config.num_heads * head_dim, D = head_dim, H = num_heads,
prefix model.layers.i.; K3-style wrappers put "language_model." in front of every name):
  input_layernorm.weight, post_attention_layernorm.weight                     [hidden]
  KDA  self_attn.{q,k,v}_proj.weight [P, hidden]
       self_attn.{q,k,v}_conv1d.weight [P, 1, short_conv_kernel_size]  (no bias)
       self_attn.A_log  F32 [1, 1, H, 1] (48B layout) or [>= H] (K3 layout, zero padded)
       self_attn.dt_bias F32 [P]
       self_attn.f_a_proj.weight [D, hidden], f_b_proj.weight [P, D]
       self_attn.b_proj.weight [H, hidden]
       self_attn.g_a_proj.weight [D, hidden], g_b_proj.weight [P, D]   (low-rank output gate)
         or self_attn.g_proj.weight [P, hidden]                          (use_full_rank_gate)
       self_attn.o_norm.weight [D]
       self_attn.o_proj.weight [hidden, P]
  MLA  self_attn.q_proj.weight [nh*(dn+dr), hidden]   (q_lora_rank null) or
       self_attn.q_a_proj.weight [q_lora, hidden], q_a_layernorm.weight [q_lora],
       self_attn.q_b_proj.weight [nh*(dn+dr), q_lora]
       self_attn.kv_a_proj_with_mqa.weight [kv_lora + dr, hidden], kv_a_layernorm.weight [kv_lora]
       self_attn.kv_b_proj.weight [nh*(dn+dv), kv_lora]
       self_attn.g_proj.weight [nh*dv, hidden]     (mla_use_output_gate true only)
       self_attn.o_proj.weight [hidden, nh*dv]
  dense  mlp.{gate,up}_proj.weight [inter, hidden], mlp.down_proj.weight [hidden, inter]
  MoE    block_sparse_moe.gate.weight [E, hidden], block_sparse_moe.gate.e_score_correction_bias F32 [E]
         block_sparse_moe.experts.e.w1.weight (gate) / w3.weight (up) [moe_inter, hidden],
         block_sparse_moe.experts.e.w2.weight (down) [hidden, moe_inter]
         block_sparse_moe.shared_experts.{gate,up,down}_proj.weight (width moe_inter *
         num_shared_experts; absent when num_shared_experts is 0)
  model.embed_tokens.weight [V, hidden], model.norm.weight [hidden], lm_head.weight [V, hidden]
Dtypes: BF16 except A_log, dt_bias and the correction bias (F32). The 48B layout keeps the
conv weights and o_norm in BF16; the K3 layout (knob kda_f32: true) stores them F32.

Scales: projections 1/sqrt(fan_in) (o_proj/down_proj times out_gain), conv taps
1/sqrt(kernel), router router_scale/sqrt(hidden), correction bias N(0, bias_scale^2),
lm_head logit_scale/sqrt(hidden), embedding 1, norms 1 + spread*N(0,1).
A_log = a_log_mean + a_log_std*N(0,1) and dt_bias = dt_mean + dt_std*N(0,1) (float32),
chosen per preset so the per-step decay exp(g) stays mostly in (0.5, 1): the state keeps
several tokens of memory, as a trained model's does.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_checkpoint as mc  # noqa: E402
import safetensors_io as st  # noqa: E402

KL_TYPES = ("kimi_linear", "kimi_k3")

# Defaults of this family's generator knobs (make_checkpoint.GEN_DEFAULTS are underneath).
KL_DEFAULTS = {"bias_scale": 0.05, "a_log_mean": 0.0, "a_log_std": 0.5, "dt_mean": -2.0, "dt_std": 1.0,
               "conv_std": 0.5, "kda_f32": False, "a_log_layout": "48b", "a_log_pad": 0,
               "wrapper": False}


def is_kda_layer(c, i):
    la = c.get("linear_attn_config")
    return la is not None and (i + 1) in la["kda_layers"]


def is_moe_layer(c, i):
    return c.get("num_experts") is not None and i >= c.get("first_k_dense_replace", 0) \
        and i % c.get("moe_layer_freq", 1) == 0


def text_config(c, torch_dtype):
    """The kimi_linear config.json dict (key set of the published Kimi-Linear-48B-A3B folder)."""
    V = c["vocab_size"]
    la = dict(c["linear_attn_config"])
    la["kda_layers"] = list(la["kda_layers"])
    la["full_attn_layers"] = list(la["full_attn_layers"])
    out = {
        "architectures": ["KimiLinearForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_kimi.KimiLinearConfig",
                     "AutoModel": "modeling_kimi.KimiLinearModel",
                     "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM"},
        "bos_token_id": c.get("bos_token_id", V - 2),
        "eos_token_id": c.get("eos_token_id", V - 1),
        "pad_token_id": c.get("pad_token_id", V - 2),
        "first_k_dense_replace": c["first_k_dense_replace"],
        "head_dim": c["hidden_size"] // c["num_attention_heads"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "kv_lora_rank": c["kv_lora_rank"],
        "linear_attn_config": la,
        "mla_use_nope": True,
        "model_max_length": c.get("model_max_length", 1048576),
        "model_type": "kimi_linear",
        "moe_intermediate_size": c["moe_intermediate_size"],
        "moe_layer_freq": c.get("moe_layer_freq", 1),
        "moe_renormalize": c.get("moe_renormalize", True),
        "moe_router_activation_func": "sigmoid",
        "num_attention_heads": c["num_attention_heads"],
        "num_expert_group": c.get("num_expert_group", 1),
        "num_experts": c["num_experts"],
        "num_experts_per_token": c["num_experts_per_token"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_attention_heads"],
        "num_nextn_predict_layers": 0,
        "num_shared_experts": c["num_shared_experts"],
        "q_lora_rank": c.get("q_lora_rank"),
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "routed_scaling_factor": c["routed_scaling_factor"],
        "tie_word_embeddings": False,
        "topk_group": c.get("topk_group", 1),
        "torch_dtype": torch_dtype,
        "transformers_version": "4.56.0",
        "use_cache": True,
        "use_grouped_topk": c.get("use_grouped_topk", True),
        "v_head_dim": c["v_head_dim"],
        "vocab_size": V,
    }
    if "mla_use_output_gate" in c:
        out["mla_use_output_gate"] = c["mla_use_output_gate"]
    return out


def full_config(c, torch_dtype="bfloat16", wrapper=False):
    """config.json: the bare kimi_linear dict, or a K3-style kimi_k3 wrapper around it."""
    tc = text_config(c, torch_dtype)
    if not wrapper:
        return tc
    tc = dict(tc)
    for k in ("architectures", "auto_map"):
        tc.pop(k)
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "bos_token_id": tc["bos_token_id"],
        "eos_token_id": tc["eos_token_id"],
        "model_type": "kimi_k3",
        "pad_token_id": tc["pad_token_id"],
        "text_config": tc,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "transformers_version": "4.56.2",
    }


def draw_affine(seed, name, n, mean, std):
    """n float32 draws of mean + std * N(0, 1)."""
    w = mc.stream_words(seed, name, n)
    return (np.float32(mean) + np.float32(std) * mc.normal_table().astype(np.float32)[w]).astype(np.float32)


def tensor_specs(c, seed, knobs=None):
    k = dict(mc.GEN_DEFAULTS)
    k.update(KL_DEFAULTS)
    k.update(knobs or {})
    pre = "language_model." if k["wrapper"] else ""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    la = c["linear_attn_config"]
    kh, kd, ks = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
    P = kh * kd
    nh, dn, dr, dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kvl, ql = c["kv_lora_rank"], c.get("q_lora_rank")
    kdt = "F32" if k["kda_f32"] else "BF16"
    specs = []

    # streams are keyed by the name without the wrapper prefix: a kimi_k3-wrapped folder holds
    # the same values as the bare kimi_linear one
    def normal(name, shape, std, dtype="BF16"):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(pre + name, dtype, shape, produce=lambda: mc.draw_normal(seed, name, n, std, dtype)))

    def ones(name, shape, dtype="BF16"):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(pre + name, dtype, shape,
                                   produce=lambda: mc.draw_around_one(seed, name, n, k["norm_spread"], dtype)))

    def affine(name, shape, n_drawn, mean, std):
        """F32 tensor whose first n_drawn entries are drawn, the rest exactly 0 (padding).
        The stream is keyed by the name only, so a padded and an unpadded A_log agree."""
        n = int(np.prod(shape))

        def produce():
            a = np.zeros(n, dtype=np.float32)
            a[:n_drawn] = draw_affine(seed, name, n_drawn, mean, std)
            return a
        specs.append(st.TensorSpec(pre + name, "F32", shape, produce=produce))

    def mlp(p, inter, names=("gate_proj", "up_proj", "down_proj")):
        normal(p + names[0] + ".weight", [inter, H], 1.0 / np.sqrt(H))
        normal(p + names[1] + ".weight", [inter, H], 1.0 / np.sqrt(H))
        normal(p + names[2] + ".weight", [H, inter], k["out_gain"] / np.sqrt(inter))

    normal("model.embed_tokens.weight", [V, H], 1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        ones(p + "input_layernorm.weight", [H])
        if is_kda_layer(c, i):
            for x in "qkv":
                normal(a + "%s_proj.weight" % x, [P, H], 1.0 / np.sqrt(H))
            for x in "qkv":
                normal(a + "%s_conv1d.weight" % x, [P, 1, ks], k["conv_std"], kdt)
            if k["a_log_layout"] == "48b":
                affine(a + "A_log", [1, 1, kh, 1], kh, k["a_log_mean"], k["a_log_std"])
            else:
                affine(a + "A_log", [max(kh, k["a_log_pad"])], kh, k["a_log_mean"], k["a_log_std"])
            normal(a + "f_a_proj.weight", [kd, H], 1.0 / np.sqrt(H))
            normal(a + "f_b_proj.weight", [P, kd], 1.0 / np.sqrt(kd))
            affine(a + "dt_bias", [P], P, k["dt_mean"], k["dt_std"])
            normal(a + "b_proj.weight", [kh, H], 1.0 / np.sqrt(H))
            if la.get("use_full_rank_gate"):
                normal(a + "g_proj.weight", [P, H], 1.0 / np.sqrt(H))
            else:
                normal(a + "g_a_proj.weight", [kd, H], 1.0 / np.sqrt(H))
                normal(a + "g_b_proj.weight", [P, kd], 1.0 / np.sqrt(kd))
            ones(a + "o_norm.weight", [kd], kdt)
            normal(a + "o_proj.weight", [H, P], k["out_gain"] / np.sqrt(P))
        else:
            if ql:
                normal(a + "q_a_proj.weight", [ql, H], 1.0 / np.sqrt(H))
                ones(a + "q_a_layernorm.weight", [ql])
                normal(a + "q_b_proj.weight", [nh * (dn + dr), ql], 1.0 / np.sqrt(ql))
            else:
                normal(a + "q_proj.weight", [nh * (dn + dr), H], 1.0 / np.sqrt(H))
            normal(a + "kv_a_proj_with_mqa.weight", [kvl + dr, H], 1.0 / np.sqrt(H))
            ones(a + "kv_a_layernorm.weight", [kvl])
            normal(a + "kv_b_proj.weight", [nh * (dn + dv), kvl], 1.0 / np.sqrt(kvl))
            if c.get("mla_use_output_gate"):
                normal(a + "g_proj.weight", [nh * dv, H], 1.0 / np.sqrt(H))
            normal(a + "o_proj.weight", [H, nh * dv], k["out_gain"] / np.sqrt(nh * dv))
        ones(p + "post_attention_layernorm.weight", [H])
        if is_moe_layer(c, i):
            m = p + "block_sparse_moe."
            E, I = c["num_experts"], c["moe_intermediate_size"]
            normal(m + "gate.weight", [E, H], k["router_scale"] / np.sqrt(H))
            normal(m + "gate.e_score_correction_bias", [E], k["bias_scale"], "F32")
            for e in range(E):
                mlp(m + "experts.%d." % e, I, ("w1", "w3", "w2"))
            if c["num_shared_experts"]:
                mlp(m + "shared_experts.", I * c["num_shared_experts"])
        else:
            mlp(p + "mlp.", c["intermediate_size"])
    ones("model.norm.weight", [H])
    normal("lm_head.weight", [V, H], k["logit_scale"] / np.sqrt(H))
    return specs


def write_checkpoint(out, cfg_keys, seed, shards=1, knobs=None):
    """Write a complete model folder. Returns (config dict, list of files, total tensor bytes)."""
    kk = dict(KL_DEFAULTS, **(knobs or {}))
    cfg = full_config(cfg_keys, "bfloat16", kk["wrapper"])
    specs = tensor_specs(cfg_keys, seed, knobs)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    mc._dump_json(mc.generation_config(cfg), os.path.join(out, "generation_config.json"))
    files = st.save_checkpoint(out, specs, n_shards=shards)
    return cfg, ["config.json", "generation_config.json"] + files, sum(s.nbytes for s in specs)


# ---------------------------------------------------------------------------------------------
# header-only copy of the real moonshotai/Kimi-Linear-48B-A3B-Instruct folder (for `inspect`)

# The published config.json values. Sources (stored copies of the published file, read in
# this repository's reference work): a Swift MLX port's test fixture `kimiConfig` (quoting the
# HF config.json: bos 163584, eos 163586, pad 163839, head_dim 72, rms_norm_eps 1e-05,
# model_max_length 1048576, transformers 4.57.1 after conversion), the Megatron-Bridge
# kimi_linear_bridge unit test ("the official Kimi-Linear-48B-A3B architecture truncated to
# four layers": hidden 2304, intermediate 9216, 32 heads / 32 kv heads, kv_lora 512, q_lora
# null, 128/64/128, KDA 32 x 128, conv 4, 256 experts top-8, moe_intermediate 1024, 1 shared,
# routed_scaling_factor 2.446, first_k_dense_replace 1) and a Rust loader's
# resolve_model_config_reports_supported_kimi_linear test (the 27-layer kda_layers /
# full_attn_layers lists). vLLM's KimiLinearConfig / kimi_linear.py read the same keys.
KIMI_LINEAR_48B = {
    "vocab_size": 163840, "hidden_size": 2304, "num_hidden_layers": 27, "intermediate_size": 9216,
    "linear_attn_config": {"num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4,
                           "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19,
                                          21, 22, 23, 25, 26],
                           "full_attn_layers": [4, 8, 12, 16, 20, 24, 27]},
    "num_attention_heads": 32, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128,
    "num_experts": 256, "num_experts_per_token": 8, "moe_intermediate_size": 1024,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "routed_scaling_factor": 2.446, "rms_norm_eps": 1e-5,
    "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
}


def write_header_only(out, shards=20, cfg_keys=None):
    """config.json, generation_config.json, model.safetensors.index.json and `shards`
    .safetensors files that hold only their headers (8-byte length + JSON; data_offsets
    describe the full tensors, the weight bytes are absent). The shard count of the published
    folder is not verified; shapes and dtypes follow the tensor list above (48B layout)."""
    c = dict(KIMI_LINEAR_48B if cfg_keys is None else cfg_keys)
    cfg = full_config(c, "bfloat16")
    specs = tensor_specs(c, 0, None)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    mc._dump_json(mc.generation_config(cfg), os.path.join(out, "generation_config.json"))
    weight_map, total = {}, 0
    for i, gr in enumerate(st.split_shards(specs, shards)):
        name = st.shard_file_name(i, shards)
        _, head = st.header_bytes(gr, {"format": "pt"})
        with open(os.path.join(out, name), "wb") as f:
            f.write(head)
        for s in gr:
            weight_map[s.name] = name
            total += s.nbytes
    mc._dump_json({"metadata": {"total_size": total}, "weight_map": weight_map}, os.path.join(out, st.INDEX_NAME))
    return cfg, len(specs), total


def main(argv=None):
    ap = argparse.ArgumentParser(description="Kimi Linear checkpoints (presets: make_checkpoint.py --preset).")
    ap.add_argument("--header-only", action="store_true",
                    help="write the real Kimi-Linear-48B-A3B folder's config, index and header-only shards")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, default=20)
    a = ap.parse_args(argv)
    if not a.header_only:
        ap.error("only --header-only is handled here; presets are written by make_checkpoint.py --preset")
    t0 = time.time()
    cfg, n, total = write_header_only(a.out, a.shards)
    print("wrote %s: kimi_linear header-only, %d tensors, %.2f GB described, %d shards, %.1f s"
          % (a.out, n, total / 1e9, a.shards, time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
