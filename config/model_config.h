/* config/model_config.h — a model folder's config.json and generation_config.json.
 *
 * Owns: parsing and validating the Hugging Face config files of the supported families
 * into plain structs. Does not own: tensors (engine/safetensors.h) or the forward pass
 * (engine/model.h).
 *
 * Supported model_type values: "qwen3_moe" (the MoE target) and "qwen3" (dense; the draft).
 * Key semantics follow transformers' Qwen3MoeConfig / Qwen3Config and modeling files
 * (transformers/models/qwen3_moe/modeling_qwen3_moe.py, qwen3/modeling_qwen3.py).
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
} df_arch;

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
  double attention_factor;                  /* yarn; 0 = derived 0.1*ln(factor)+1 */
} df_rope_scaling;

typedef struct df_model_config {
  df_arch arch;
  char model_type[32];               /* as in config.json */
  int64_t vocab_size;                /* tokens */
  int64_t hidden_size;               /* n_embd */
  int64_t num_hidden_layers;         /* n_layer, <= DF_CFG_MAX_LAYERS */
  int64_t num_attention_heads;       /* n_head (query heads) */
  int64_t num_key_value_heads;       /* n_head_kv; divides n_head (GQA) */
  int64_t head_dim;                  /* from config, else hidden_size / num_attention_heads */
  int64_t intermediate_size;         /* dense MLP width (dense layers, qwen3 every layer);
                                        0 when absent and no layer is dense */
  int64_t moe_intermediate_size;     /* routed expert width; 0 for qwen3 */
  int64_t num_experts;               /* routed experts per MoE layer; 0 for qwen3 */
  int64_t num_experts_per_tok;       /* top-k; 0 for qwen3 */
  bool norm_topk_prob;               /* renormalise the top-k softmax weights to sum 1 */
  int64_t decoder_sparse_step;       /* layer i is MoE iff (i+1) % step == 0 and not mlp_only */
  bool is_moe_layer[DF_CFG_MAX_LAYERS]; /* derived from decoder_sparse_step + mlp_only_layers */
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
 * beta takes its default, as in transformers); YaRN mscale / mscale_all_dim and
 * truncate=false are refused. transformers >= 5's rope_parameters object (rope_type,
 * rope_theta, ...) is read when rope_scaling / rope_theta are absent; "dtype" is read when
 * "torch_dtype" is absent. Keys not listed here are ignored.
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
