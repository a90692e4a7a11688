/* config/model_config.h — a model folder's config.json and generation_config.json.
 *
 * Owns: parsing and validating the Hugging Face config files of the supported families
 * into plain structs. Does not own: tensors (engine/safetensors.h) or the forward pass
 * (engine/model.h).
 *
 * Supported model_type values: "qwen3_moe" (the MoE target), "qwen3" (dense; the draft),
 * "deepseek_v3" and "kimi_k2" (Kimi K2 publishes the DeepSeek-V3 architecture under its own
 * model_type). Key semantics follow transformers' Qwen3MoeConfig / Qwen3Config /
 * DeepseekV3Config and modeling files (transformers/models/qwen3_moe/modeling_qwen3_moe.py,
 * qwen3/modeling_qwen3.py, deepseek_v3/modeling_deepseek_v3.py) and, where transformers
 * drops a key the published checkpoints carry (moe_layer_freq, topk_method, scoring_func),
 * the checkpoints' own modeling_deepseek.py.
 */
#ifndef DF_CONFIG_MODEL_CONFIG_H
#define DF_CONFIG_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DF_CFG_MAX_LAYERS 512
#define DF_CFG_MAX_EOS 8

typedef enum {
  DF_ARCH_QWEN3 = 1,     /* dense decoder: every layer has an MLP */
  DF_ARCH_QWEN3_MOE = 2, /* sparse MoE decoder: routed experts on the MoE layers */
  DF_ARCH_DEEPSEEK_V3 = 3, /* deepseek_v3 / kimi_k2: MLA attention, sigmoid group-limited
                              routing with correction bias, shared experts, dense first layers */
} df_arch;

/* How the router turns gate logits into expert weights. */
typedef enum {
  DF_ROUTER_SOFTMAX = 0,     /* qwen3_moe: softmax, top-k, optional renormalisation */
  DF_ROUTER_SIGMOID_NOAUX = 1, /* deepseek_v3 topk_method "noaux_tc": sigmoid scores, bias for
                                  selection only, group-limited top-k (DeepseekV3TopkRouter) */
} df_router_kind;

/* Stored-weight quantisation declared by config.json's quantization_config. */
typedef enum {
  DF_QUANT_NONE = 0,
  DF_QUANT_FP8_BLOCK = 1, /* quant_method "fp8", fmt "e4m3": F8_E4M3 linear weights with an F32
                             `<name>_scale_inv` of [ceil(N/block_n), ceil(K/block_k)] */
} df_quant_kind;

typedef enum {
  DF_ROPE_DEFAULT = 0, /* rope_scaling null or {"rope_type": "default"} */
  DF_ROPE_LINEAR = 1,  /* positions divided by factor */
  DF_ROPE_YARN = 2,    /* YaRN (Peng et al. 2023), transformers _compute_yarn_parameters */
} df_rope_type;

typedef struct df_rope_scaling {
  df_rope_type type;
  double factor;                            /* linear, yarn; 1.0 for default */
  int64_t original_max_position_embeddings; /* yarn; 0 = use max_position_embeddings */
  double beta_fast, beta_slow;              /* yarn; defaults 32, 1 */
  double attention_factor;                  /* yarn; 0 = derived: mscale ratio below, else
                                               0.1*ln(factor)+1 */
  double mscale, mscale_all_dim;            /* yarn, deepseek_v3 only; 0 = absent. cos/sin
                                               scale get_mscale(factor, mscale) /
                                               get_mscale(factor, mscale_all_dim) when both are
                                               set; the attention softmax scale is multiplied by
                                               get_mscale(factor, mscale_all_dim)^2 when
                                               mscale_all_dim is set (DeepseekV3Attention),
                                               get_mscale(s, m) = s <= 1 ? 1 : 0.1*m*ln(s)+1 */
} df_rope_scaling;

typedef struct df_model_config {
  df_arch arch;
  char model_type[32];               /* as in config.json */
  int64_t vocab_size;                /* tokens */
  int64_t hidden_size;               /* n_embd */
  int64_t num_hidden_layers;         /* n_layer, <= DF_CFG_MAX_LAYERS */
  int64_t num_attention_heads;       /* n_head (query heads) */
  int64_t num_key_value_heads;       /* n_head_kv; divides n_head (GQA) */
  int64_t head_dim;                  /* from config, else hidden_size / num_attention_heads;
                                        deepseek_v3: qk_rope_head_dim (the RoPE width, as
                                        DeepseekV3Config sets it) */
  int64_t intermediate_size;         /* dense MLP width (dense layers, qwen3 every layer);
                                        0 when absent and no layer is dense */
  int64_t moe_intermediate_size;     /* routed expert width; 0 for qwen3 */
  int64_t num_experts;               /* routed experts per MoE layer (deepseek_v3:
                                        n_routed_experts); 0 for qwen3 */
  int64_t num_experts_per_tok;       /* top-k; 0 for qwen3 */
  bool norm_topk_prob;               /* renormalise the top-k softmax weights to sum 1 */
  int64_t decoder_sparse_step;       /* layer i is MoE iff (i+1) % step == 0 and not mlp_only */
  bool is_moe_layer[DF_CFG_MAX_LAYERS]; /* qwen3_moe: from decoder_sparse_step +
                                           mlp_only_layers; deepseek_v3: i >=
                                           first_k_dense_replace && i % moe_layer_freq == 0 */
  df_router_kind router;             /* SOFTMAX for qwen3_moe, SIGMOID_NOAUX for deepseek_v3 */
  /* deepseek_v3 / kimi_k2 only (0 / false otherwise): */
  int64_t q_lora_rank;               /* 0 = no query compression (q_proj instead of q_a/q_b) */
  int64_t kv_lora_rank;              /* width of the cached latent c_kv */
  int64_t qk_nope_head_dim;          /* per-head query/key part without RoPE */
  int64_t qk_rope_head_dim;          /* per-head RoPE part (one shared key part per position) */
  int64_t v_head_dim;                /* per-head value width */
  int64_t n_shared_experts;          /* shared expert width = n_shared * moe_intermediate_size */
  int64_t first_k_dense_replace;     /* layers [0, k) use the dense MLP */
  int64_t moe_layer_freq;            /* MoE on layers with i % freq == 0 (after the dense ones) */
  int64_t n_group, topk_group;       /* expert groups; groups kept per token */
  double routed_scaling_factor;      /* multiplies the routed weights */
  bool rope_interleave;              /* RoPE pairs (2i, 2i+1) instead of (i, i + d/2) */
  df_quant_kind quant;               /* from quantization_config */
  int64_t quant_block_n, quant_block_k; /* weight_block_size [n, k] for DF_QUANT_FP8_BLOCK */
  double rms_norm_eps;
  double rope_theta;
  df_rope_scaling rope_scaling;
  int64_t max_position_embeddings;   /* tokens */
  bool tie_word_embeddings;          /* lm_head.weight absent: reuse model.embed_tokens.weight */
  bool attention_bias;               /* q/k/v/o_proj carry .bias tensors */
  char torch_dtype[16];              /* informational: "bfloat16", "float16", "float32" or "" */
  int64_t bos_token_id;              /* -1 when absent */
  int64_t eos_token_ids[DF_CFG_MAX_EOS]; /* config.json eos_token_id (int or list) */
  int n_eos;
} df_model_config;

/* Defaults of generation_config.json; absent keys keep the transformers defaults. */
typedef struct df_gen_config {
  bool do_sample;       /* false when absent */
  double temperature;   /* 1.0 when absent */
  double top_p;         /* 1.0 when absent */
  int64_t top_k;        /* 50 when absent (transformers default); 0 = off */
  int64_t bos_token_id; /* -1 when absent */
  int64_t eos_token_ids[DF_CFG_MAX_EOS]; /* falls back to config.json's list */
  int n_eos;
} df_gen_config;

/* Parse DIR/config.json into *out.
 * Required keys: model_type, vocab_size, hidden_size, num_hidden_layers,
 * num_attention_heads; qwen3: intermediate_size; qwen3_moe: num_experts (or
 * num_local_experts), and when num_experts > 0 num_experts_per_tok and
 * moe_intermediate_size; intermediate_size whenever some layer is dense (else 0 when absent).
 * Defaults for absent (or null) keys: num_key_value_heads = num_attention_heads,
 * head_dim = hidden_size / num_attention_heads (integer division), decoder_sparse_step 1,
 * mlp_only_layers [], norm_topk_prob false, rms_norm_eps 1e-6, rope_theta 10000,
 * rope_scaling null, max_position_embeddings 32768, tie_word_embeddings false,
 * attention_bias false, hidden_act "silu", use_sliding_window false, bos -1, no eos.
 * qwen3 leaves the MoE fields 0, decoder_sparse_step 1 and is_moe_layer all false.
 * Sizes must lie in 1..2^31-1; token ids in 0..vocab_size-1; mlp_only_layers entries in
 * 0..num_hidden_layers-1; rope factor >= 1; YaRN beta_fast >= beta_slow (an absent or 0
 * beta takes its default, as in transformers); YaRN mscale / mscale_all_dim (qwen3 families
 * only) and truncate=false are refused. transformers >= 5's rope_parameters object
 * (rope_type, rope_theta, ...) is read when rope_scaling / rope_theta are absent; "dtype" is
 * read when "torch_dtype" is absent. Keys not listed here are ignored.
 * deepseek_v3 / kimi_k2 (DeepseekV3Config): required kv_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim (even), v_head_dim, n_routed_experts, and when it is > 0
 * num_experts_per_tok and moe_intermediate_size; intermediate_size when a layer is dense.
 * Defaults (DeepseekV3Config's): q_lora_rank null (= 0, q_proj), n_shared_experts 1,
 * routed_scaling_factor 2.5, n_group 8, topk_group 4, first_k_dense_replace 3,
 * moe_layer_freq 1, norm_topk_prob true, rope_interleave true, topk_method "noaux_tc", scoring_func "sigmoid" (other values are
 * refused by name), quantization_config null. n_group must divide n_routed_experts into
 * groups of >= 2 experts, 1 <= topk_group <= n_group and top-k <= topk_group * group size.
 * quantization_config: quant_method "fp8" with fmt "e4m3" (or absent) and weight_block_size
 * [n, k] of positive integers; other methods or formats are refused. attention_bias true is
 * refused for this family. num_nextn_predict_layers (the MTP head) is ignored.
 * Errors (-1, one line in err naming the file and key): missing/unreadable file, JSON
 * syntax (with line:column), unknown model_type (message lists the supported ones),
 * missing required key, wrong JSON type, out-of-range value (non-positive sizes, heads not
 * divisible by kv heads, top-k > num_experts, more than DF_CFG_MAX_LAYERS layers),
 * unsupported rope_scaling type (lists supported ones), hidden_act other than "silu",
 * use_sliding_window true. On error *out is zeroed. */
int df_cfg_load(const char *dir, df_model_config *out, char *err, size_t errlen);

/* Same as df_cfg_load but from a JSON text in memory; `name` is used in messages. */
int df_cfg_parse(const char *json, size_t len, const char *name, df_model_config *out,
                 char *err, size_t errlen);

/* Parse DIR/generation_config.json (optional: a missing file gives the defaults, with
 * eos/bos taken from `mc`). Errors (-1): malformed JSON or wrong key types; also
 * temperature < 0, top_p outside (0, 1], top_k < 0, token ids outside 0..vocab_size-1 (no
 * upper bound when mc is NULL), more than DF_CFG_MAX_EOS eos ids. Absent or null bos/eos keys
 * fall back to mc's (mc may be NULL: bos -1, no eos). On error *out holds the defaults. */
int df_gen_cfg_load(const char *dir, const df_model_config *mc, df_gen_config *out,
                    char *err, size_t errlen);

/* Same as df_gen_cfg_load but from a JSON text in memory; `name` is used in messages. */
int df_gen_cfg_parse(const char *json, size_t len, const char *name, const df_model_config *mc,
                     df_gen_config *out, char *err, size_t errlen);

/* Human-readable arch name ("qwen3_moe"). Never NULL. */
const char *df_cfg_arch_name(df_arch a);

#endif
