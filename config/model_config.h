/* config/model_config.h — a model folder's config.json and generation_config.json.
 *
 * Owns: strict parsing and validation of the Hugging Face config files into plain structs:
 * the keys every family shares, generation_config.json, and the reader family parsers read
 * their own keys through. Does not own: which families exist or their keys (each family's
 * file in engine/models/, listed by engine/models/families.c, which offers df_cfg_load),
 * tensors (engine/safetensors.h) or the forward pass (engine/model.h).
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
  DF_ARCH_KIMI_LINEAR = 4, /* kimi_linear (and the kimi_k3 wrapper's text tower): KDA linear
                              attention + NoPE MLA, DeepSeek-V3-style MoE */
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
  DF_QUANT_MXFP4 = 2,     /* quant_method "compressed-tensors", format "mxfp4-pack-quantized"
                             (Kimi K3's routed experts): a linear weight stored as
                             `<base>.weight_packed` U8 [N, K/2] (E2M1 pairs) + `.weight_scale`
                             U8 [N, K/32] (E8M0); others stay BF16 (docs/K3.md §4) */
} df_quant_kind;

/* The activation of every gated MLP (config.json hidden_act). */
typedef enum {
  DF_ACT_SILU = 0, /* "silu": SwiGLU, silu(gate) * up */
  DF_ACT_SITU = 1, /* "situ" (Kimi K3): SiTU-GLU, docs/K3.md §3.6 (kernels.h df_k_act) */
} df_act_kind;

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

typedef struct df_cfg_family df_cfg_family;

typedef struct df_model_config {
  const df_cfg_family *family;       /* the family whose parser read it (engine/models/) */
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
  /* MLA, group-limited routing, shared experts and FP8 (deepseek_v3 / kimi_k2 today; any
   * family whose parser sets them; 0 / false otherwise): */
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
  char tensor_prefix[32];            /* prepended to every tensor name: "" or, for a wrapper
                                        config (kimi_k3's text_config), "language_model." */
  /* Kimi Linear (linear_attn_config, configuration_kimi.py; 0 / false otherwise): */
  bool is_kda_layer[DF_CFG_MAX_LAYERS]; /* (i + 1) in kda_layers; else i + 1 in full_attn_layers */
  int64_t kda_heads, kda_head_dim, kda_conv; /* num_heads, head_dim, short_conv_kernel_size */
  bool kda_lower_bound;              /* gate_lower_bound present: the sigmoid decay gate */
  double kda_gate_lb;                /* gate_lower_bound */
  bool kda_full_rank_gate;           /* use_full_rank_gate: g_proj instead of g_a/g_b_proj */
  bool mla_nope, mla_output_gate;    /* mla_use_nope, mla_use_output_gate */
  /* Kimi K3's switches of the kimi_linear text model (docs/K3.md §1.1; 0 / false otherwise): */
  df_act_kind hidden_act;            /* silu everywhere else */
  double situ_beta;                  /* activation_situ_beta (null: 1.0, the reference's
                                        `beta or 1.0`) */
  double situ_linear_beta;           /* activation_situ_linear_beta; 0 = null: the up branch
                                        passes unchanged */
  int64_t attn_res_block;            /* attn_res_block_size: Block Attention Residuals with a
                                        snapshot every this many layers; 0 = plain pre-norm */
  int64_t latent_dim;                /* routed_expert_hidden_size: routed experts run in this
                                        latent width; 0 = on the hidden width */
  bool latent_norm;                  /* latent_moe_use_norm: RMSNorm on the combined latent */
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

/* ---- families -----------------------------------------------------------------------
 * Each model family (engine/models/<family>.c) reads its own keys through a df_cfg_reader,
 * after the keys every family shares; the family table (engine/models/families.c) holds
 * them and offers df_cfg_load / df_cfg_parse over all of them. */

/* A config.json being read by a family's parser; its functions below report one line
 * naming the file and key (as every error here does) and return -1 on a fault. */
typedef struct df_cfg_reader df_cfg_reader;

/* Largest size a config key may give: products of two sizes stay within int64. */
#define DF_CFG_MAX_DIM INT32_MAX

/* The config half of a model family. */
struct df_cfg_family {
  const char *const *model_types; /* NULL-terminated model_type values it reads, in the
                                     order error messages list them */
  bool rope_mscale;               /* YaRN rope_scaling may carry mscale / mscale_all_dim */
  const char *const *wrapper_types; /* NULL-terminated model_type values whose text model is
                                       their "text_config" object (one of model_types), with
                                       tensors under "language_model."; NULL = none */
  bool situ;                      /* hidden_act may be "situ" (else only "silu") */
  /* Read the family's own keys into *m (arch, MoE map, router, ...) after the shared ones
   * are in *m; model_type is the one that matched. 0, or -1 with the message set. */
  int (*parse)(df_cfg_reader *r, const char *model_type, df_model_config *m);
};

/* Parse a config.json text (`name` in messages) for the first of families[0..n) whose
 * model_types holds its model_type: first the keys every family shares, then the family's.
 * Shared keys: required vocab_size, hidden_size, num_hidden_layers, num_attention_heads.
 * Defaults for absent (or null) keys: num_key_value_heads = num_attention_heads, head_dim =
 * hidden_size / num_attention_heads (integer division), rms_norm_eps 1e-6, rope_theta
 * 10000, rope_scaling null, max_position_embeddings 32768, tie_word_embeddings false,
 * attention_bias false, hidden_act "silu", use_sliding_window false, bos -1, no eos.
 * Sizes must lie in 1..2^31-1; token ids in 0..vocab_size-1; rope factor >= 1; YaRN
 * beta_fast >= beta_slow (an absent or 0 beta takes its default, as in transformers); YaRN
 * mscale / mscale_all_dim (unless the family's rope_mscale) and truncate=false are refused.
 * transformers >= 5's rope_parameters object (rope_type, rope_theta, ...) is read when
 * rope_scaling / rope_theta are absent; "dtype" is read when "torch_dtype" is absent. Keys
 * not read are ignored. Errors (-1, one line in err naming the file and key): JSON syntax
 * (with line:column), model_type absent or of no family (the message lists the supported
 * ones), missing required key, wrong JSON type, out-of-range value (non-positive sizes,
 * heads not divisible by kv heads, more than DF_CFG_MAX_LAYERS layers), unsupported
 * rope_scaling type (lists supported ones), hidden_act other than "silu" (or "situ" for a
 * family whose `situ` is set), use_sliding_window
 * true, and the family's own. On error *out is zeroed. */
int df_cfg_parse_for(const char *json, size_t len, const char *name,
                     const df_cfg_family *const *families, size_t n_families,
                     df_model_config *out, char *err, size_t errlen);

/* df_cfg_parse_for over DIR/config.json; also: missing or unreadable file. */
int df_cfg_load_for(const char *dir, const df_cfg_family *const *families, size_t n_families,
                    df_model_config *out, char *err, size_t errlen);

/* Report a fault: "<file>: <printf text>". */
void df_cfg_fail(df_cfg_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True when key is present and not null. */
bool df_cfg_has(df_cfg_reader *r, const char *key);
/* Integer key in [lo, hi]; absent: an error when required, else *out = def. */
int df_cfg_int(df_cfg_reader *r, const char *key, bool required, int64_t def, int64_t lo,
               int64_t hi, int64_t *out);
/* Number (integer or real) key; absent: *out = def. */
int df_cfg_num(df_cfg_reader *r, const char *key, double def, double *out);
/* true / false key; absent: *out = def. */
int df_cfg_bool(df_cfg_reader *r, const char *key, bool def, bool *out);
/* String key; absent: *out = def (may be NULL). The string lives as long as the reader. */
int df_cfg_str(df_cfg_reader *r, const char *key, const char *def, const char **out);
/* A list of layer indices in 0..n_layers-1 (e.g. mlp_only_layers): in_list[i] = i listed;
 * absent: none. */
int df_cfg_layer_list(df_cfg_reader *r, const char *key, int64_t n_layers, bool *in_list);
/* A list of 1-BASED layer numbers in 1..n_layers (Kimi Linear's kda_layers /
 * full_attn_layers): in_list[i] = (i + 1) listed; absent: none. */
int df_cfg_layer_list1(df_cfg_reader *r, const char *key, int64_t n_layers, bool *in_list);
/* Read the keys of the object `key` until df_cfg_leave (messages name them "key.sub").
 * 0 entered; 1 absent (not required); -1 missing when required, or not an object. */
int df_cfg_enter(df_cfg_reader *r, const char *key, bool required);
void df_cfg_leave(df_cfg_reader *r);
/* The object path keys are read under, e.g. "text_config." or "" (for messages). */
const char *df_cfg_prefix(const df_cfg_reader *r);
/* quantization_config: null or absent = DF_QUANT_NONE; quant_method "fp8" with fmt "e4m3"
 * (or absent) and weight_block_size [n, k] of positive integers = DF_QUANT_FP8_BLOCK; other
 * methods or formats are refused by name. */
int df_cfg_quant_fp8(df_cfg_reader *r, df_model_config *m);
/* quantization_config read where the reader stands (text_config for a wrapper): null or
 * absent = DF_QUANT_NONE; quant_method "compressed-tensors" with format
 * "mxfp4-pack-quantized" whose every config_groups entry has weights {num_bits 4,
 * group_size 32, type "float"} and no input_activations (weight-only) = DF_QUANT_MXFP4 (the
 * compressed-tensors layout of OCP MXFP4, docs/K3.md §1.3); anything else is refused naming
 * the key and what was expected. */
int df_cfg_quant_mxfp4(df_cfg_reader *r, df_model_config *m);

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


#endif
