"""tests/reference/deepseek_ckpt.py — deterministic random deepseek_v3 / kimi_k2 checkpoints.

Owns: the Hugging Face layout of the DeepSeek-V3 family (config.json keys as the published
DeepSeek-V3 / Kimi-K2 folders write them, tensor names of their safetensors files) and the
FP8 block quantisation of generated weights. make_checkpoint.py registers the presets and
calls write_checkpoint for them; draws use its per-tensor streams (same determinism: bytes
depend only on seed and tensor name).

Tensors per layer i (prefix model.layers.i.):
  input_layernorm.weight, post_attention_layernorm.weight               [H]
  self_attn.q_proj.weight [nh*(dn+dr), H]   (q_lora_rank null) or
  self_attn.q_a_proj.weight [q_lora, H], q_a_layernorm.weight [q_lora], q_b_proj.weight [nh*(dn+dr), q_lora]
  self_attn.kv_a_proj_with_mqa.weight [kv_lora+dr, H], kv_a_layernorm.weight [kv_lora]
  self_attn.kv_b_proj.weight [nh*(dn+dv), kv_lora], self_attn.o_proj.weight [H, nh*dv]
  dense layers: mlp.{gate,up}_proj.weight [I, H], mlp.down_proj.weight [H, I]
  MoE layers:   mlp.gate.weight [E, H] (BF16), mlp.gate.e_score_correction_bias [E] (F32),
                mlp.experts.e.{gate,up,down}_proj.weight, mlp.shared_experts.{gate,up,down}_proj.weight
                (width moe_intermediate_size * n_shared_experts)
FP8 checkpoints (quantization_config fp8, weight_block_size [bn, bk]) store every linear
weight above except the router as F8_E4M3 plus `<name>_scale_inv` F32
[ceil(N/bn), ceil(K/bk)]; embeddings, norms, the router, its bias and lm_head stay BF16/F32,
as in the published DeepSeek-V3 and Kimi K2 checkpoints. Quantisation of a block: scale =
amax(|W_block|) / 448 in float32, bytes = E4M3(W / scale) rounded to nearest even,
weight_scale_inv = scale, so the weight the model computes with is e4m3(byte) * scale.

Scales as make_checkpoint.py: projections 1/sqrt(fan_in) (o_proj/down_proj times out_gain),
router router_scale/sqrt(H) (sigmoid inputs of std ~router_scale), correction bias
N(0, bias_scale^2), lm_head logit_scale/sqrt(H), untied embedding 1, norms 1 + spread*N(0,1).
"""

import numpy as np

import make_checkpoint as mc
import safetensors_io as st

DS_TYPES = ("deepseek_v3", "kimi_k2")


def is_moe_layer(c, i):
    return (c.get("n_routed_experts") or 0) > 0 and i >= c["first_k_dense_replace"] \
        and i % c.get("moe_layer_freq", 1) == 0


def full_config(c, torch_dtype):
    """config.json dict in the key set of the published DeepSeek-V3 / Kimi-K2 folders."""
    V = c["vocab_size"]
    out = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": V - 2,
        "eos_token_id": V - 1,
        "ep_size": 1,
        "first_k_dense_replace": c["first_k_dense_replace"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "kv_lora_rank": c["kv_lora_rank"],
        "max_position_embeddings": c["max_position_embeddings"],
        "model_type": c["model_type"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "moe_layer_freq": c.get("moe_layer_freq", 1),
        "n_group": c["n_group"],
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": c["n_shared_experts"],
        "norm_topk_prob": c["norm_topk_prob"],
        "num_attention_heads": c["num_attention_heads"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_attention_heads"],
        "num_nextn_predict_layers": 0,
        "pretraining_tp": 1,
        "q_lora_rank": c["q_lora_rank"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": c["rope_scaling"],
        "rope_theta": c["rope_theta"],
        "routed_scaling_factor": c["routed_scaling_factor"],
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": c["topk_group"],
        "topk_method": "noaux_tc",
        "torch_dtype": torch_dtype,
        "transformers_version": "4.48.3",
        "use_cache": True,
        "v_head_dim": c["v_head_dim"],
        "vocab_size": V,
    }
    if "rope_interleave" in c:  # published configs leave it out (true)
        out["rope_interleave"] = c["rope_interleave"]
    if c.get("fp8_block"):
        out["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": list(c["fp8_block"])}
    return out


def quantize_blocks(w, bn, bk):
    """float32 [N, K] -> (uint8 E4M3 bytes [N, K], float32 scale_inv [ceil(N/bn), ceil(K/bk)])."""
    N, K = w.shape
    gn, gk = (N + bn - 1) // bn, (K + bk - 1) // bk
    scale = np.zeros((gn, gk), dtype=np.float32)
    for i in range(gn):
        for j in range(gk):
            blk = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            amax = np.float32(np.abs(blk).max())
            scale[i, j] = amax / np.float32(448.0) if amax > 0 else np.float32(1.0)
    full = np.repeat(np.repeat(scale, bn, axis=0), bk, axis=1)[:N, :K]
    return st.f32_to_e4m3((w / full).astype(np.float32)), scale


def tensor_specs(c, seed, knobs=None):
    k = dict(mc.GEN_DEFAULTS)
    k["bias_scale"] = 0.05
    k.update(knobs or {})
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, dn, dr, dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kvl, ql = c["kv_lora_rank"], c["q_lora_rank"]
    block = c.get("fp8_block")
    specs = []

    def normal(name, shape, std, dtype="BF16"):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(name, dtype, shape, produce=lambda: mc.draw_normal(seed, name, n, std, dtype)))

    def ones(name, shape):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(name, "BF16", shape,
                                   produce=lambda: mc.draw_around_one(seed, name, n, k["norm_spread"], "BF16")))

    def linear(name, shape, std):
        """A linear weight: BF16, or F8_E4M3 + F32 _scale_inv in an FP8 checkpoint."""
        if not block:
            normal(name, shape, std)
            return
        memo = {}

        def both():
            if not memo:
                w = mc.draw_normal(seed, name, int(np.prod(shape)), std, "F32").reshape(shape)
                memo["q"], memo["s"] = quantize_blocks(w, block[0], block[1])
            return memo["q"], memo["s"]

        gs = [(shape[0] + block[0] - 1) // block[0], (shape[1] + block[1] - 1) // block[1]]
        specs.append(st.TensorSpec(name, "F8_E4M3", shape, produce=lambda: both()[0]))
        specs.append(st.TensorSpec(name + "_scale_inv", "F32", gs, produce=lambda: both()[1]))

    def mlp(p, inter):
        linear(p + "gate_proj.weight", [inter, H], 1.0 / np.sqrt(H))
        linear(p + "up_proj.weight", [inter, H], 1.0 / np.sqrt(H))
        linear(p + "down_proj.weight", [H, inter], k["out_gain"] / np.sqrt(inter))

    normal("model.embed_tokens.weight", [V, H], 1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        ones(p + "input_layernorm.weight", [H])
        if ql:
            linear(a + "q_a_proj.weight", [ql, H], 1.0 / np.sqrt(H))
            ones(a + "q_a_layernorm.weight", [ql])
            linear(a + "q_b_proj.weight", [nh * (dn + dr), ql], 1.0 / np.sqrt(ql))
        else:
            linear(a + "q_proj.weight", [nh * (dn + dr), H], 1.0 / np.sqrt(H))
        linear(a + "kv_a_proj_with_mqa.weight", [kvl + dr, H], 1.0 / np.sqrt(H))
        ones(a + "kv_a_layernorm.weight", [kvl])
        linear(a + "kv_b_proj.weight", [nh * (dn + dv), kvl], 1.0 / np.sqrt(kvl))
        linear(a + "o_proj.weight", [H, nh * dv], k["out_gain"] / np.sqrt(nh * dv))
        ones(p + "post_attention_layernorm.weight", [H])
        if is_moe_layer(c, i):
            E, I = c["n_routed_experts"], c["moe_intermediate_size"]
            normal(p + "mlp.gate.weight", [E, H], k["router_scale"] / np.sqrt(H))
            normal(p + "mlp.gate.e_score_correction_bias", [E], k["bias_scale"], "F32")
            for e in range(E):
                mlp(p + "mlp.experts.%d." % e, I)
            if c["n_shared_experts"] > 0:
                mlp(p + "mlp.shared_experts.", I * c["n_shared_experts"])
        else:
            mlp(p + "mlp.", c["intermediate_size"])
    ones("model.norm.weight", [H])
    normal("lm_head.weight", [V, H], k["logit_scale"] / np.sqrt(H))
    return specs


def write_checkpoint(out, cfg_keys, seed, shards=1, knobs=None):
    """Write a complete model folder. Returns (config dict, list of files, total tensor bytes)."""
    import os
    cfg = full_config(cfg_keys, "bfloat16")
    specs = tensor_specs(cfg_keys, seed, knobs)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    mc._dump_json(mc.generation_config(cfg), os.path.join(out, "generation_config.json"))
    files = st.save_checkpoint(out, specs, n_shards=shards)
    return cfg, ["config.json", "generation_config.json"] + files, sum(s.nbytes for s in specs)
