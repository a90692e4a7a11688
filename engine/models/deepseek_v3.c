/* engine/models/deepseek_v3.c — the deepseek_v3 family (DeepSeek-V3 and Kimi K2, which
 * publishes the same architecture under model_type kimi_k2).
 *
 * Semantics: transformers' models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3DecoderLayer):
 * pre-norm residual around multi-head latent attention (engine/layers/mla.h, absorbed form,
 * decoupled RoPE, latent KV cache), a dense SwiGLU MLP on the first first_k_dense_replace
 * layers (and wherever moe_layer_freq says), then MoE blocks with the sigmoid group-limited
 * router (e_score_correction_bias for selection only, routed_scaling_factor) plus shared
 * experts. Linear weights are BF16/F16/F32 or F8_E4M3 with F32 `_scale_inv` block scales
 * (quantization_config weight_block_size), used as stored. Tensors:
 * model.layers.<l>.self_attn.{q_a_proj, q_a_layernorm, q_b_proj | q_proj, kv_a_proj_with_mqa,
 * kv_a_layernorm, kv_b_proj, o_proj}, mlp.gate.{weight, e_score_correction_bias},
 * mlp.shared_experts.*, mlp.experts.<e>.*, or mlp.{gate,up,down}_proj.
 */
#include <stdio.h>
#include <string.h>

#include "engine/layers/mla.h"
#include "engine/layers/rope.h"
#include "engine/models/family.h"
#include "engine/models/mla_moe.h"

/* ---- config.json: the family's own keys --------------------------------------------------
 * DeepseekV3Config, with moe_layer_freq, topk_method and scoring_func as the checkpoints'
 * own modeling_deepseek.py reads them (transformers drops them): required kv_lora_rank,
 * qk_nope_head_dim, qk_rope_head_dim (even), v_head_dim, n_routed_experts, and when it is > 0
 * num_experts_per_tok and moe_intermediate_size; intermediate_size when a layer is dense.
 * Defaults (DeepseekV3Config's): q_lora_rank null (= 0, q_proj), n_shared_experts 1,
 * routed_scaling_factor 2.5, n_group 8, topk_group 4, first_k_dense_replace 3,
 * moe_layer_freq 1, norm_topk_prob true, rope_interleave true, topk_method "noaux_tc",
 * scoring_func "sigmoid" (other values are refused by name), quantization_config null
 * (df_cfg_quant_fp8). n_group must divide n_routed_experts into groups of >= 2 experts,
 * 1 <= topk_group <= n_group and top-k <= topk_group * group size. attention_bias true is
 * refused. num_nextn_predict_layers (the MTP head) is ignored. head_dim becomes
 * qk_rope_head_dim (DeepseekV3Config.head_dim: the RoPE width); layer i is a MoE layer iff
 * n_routed_experts > 0 && i >= first_k_dense_replace && i % moe_layer_freq == 0. */
static int parse_config(df_cfg_reader *r, const char *model_type, df_model_config *m) {
  m->arch = DF_ARCH_DEEPSEEK_V3;
  int64_t n_layers = m->num_hidden_layers;
  if (m->attention_bias) {
    df_cfg_fail(r, "key 'attention_bias': true is not supported for model type %s", m->model_type);
    return -1;
  }
  if (df_cfg_int(r, "q_lora_rank", false, 0, 1, DF_CFG_MAX_DIM, &m->q_lora_rank) ||
      df_cfg_int(r, "kv_lora_rank", true, 0, 1, DF_CFG_MAX_DIM, &m->kv_lora_rank) ||
      df_cfg_int(r, "qk_nope_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->qk_nope_head_dim) ||
      df_cfg_int(r, "qk_rope_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->qk_rope_head_dim) ||
      df_cfg_int(r, "v_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->v_head_dim) ||
      df_cfg_int(r, "n_routed_experts", true, 0, 0, DF_CFG_MAX_DIM, &m->num_experts) ||
      df_cfg_int(r, "n_shared_experts", false, 1, 0, DF_CFG_MAX_DIM, &m->n_shared_experts) ||
      df_cfg_num(r, "routed_scaling_factor", 2.5, &m->routed_scaling_factor) ||
      df_cfg_int(r, "n_group", false, 8, 1, DF_CFG_MAX_DIM, &m->n_group) ||
      df_cfg_int(r, "topk_group", false, 4, 1, DF_CFG_MAX_DIM, &m->topk_group) ||
      df_cfg_int(r, "first_k_dense_replace", false, 3, 0, DF_CFG_MAX_DIM,
                 &m->first_k_dense_replace) ||
      df_cfg_int(r, "moe_layer_freq", false, 1, 1, DF_CFG_MAX_DIM, &m->moe_layer_freq) ||
      df_cfg_bool(r, "norm_topk_prob", true, &m->norm_topk_prob) ||
      df_cfg_bool(r, "rope_interleave", true, &m->rope_interleave))
    return -1;
  if (m->qk_rope_head_dim % 2 != 0) {
    df_cfg_fail(r, "key 'qk_rope_head_dim': %lld must be even (RoPE pairs)",
                (long long)m->qk_rope_head_dim);
    return -1;
  }
  if (!(m->routed_scaling_factor > 0.0)) {
    df_cfg_fail(r, "key 'routed_scaling_factor': %g is out of range (expected > 0)",
                m->routed_scaling_factor);
    return -1;
  }
  const char *method, *scoring;
  if (df_cfg_str(r, "topk_method", "noaux_tc", &method) ||
      df_cfg_str(r, "scoring_func", "sigmoid", &scoring))
    return -1;
  if (strcmp(method, "noaux_tc") != 0) {
    df_cfg_fail(r, "key 'topk_method': unsupported routing '%.64s' (supported: noaux_tc)", method);
    return -1;
  }
  if (strcmp(scoring, "sigmoid") != 0) {
    df_cfg_fail(r, "key 'scoring_func': unsupported scoring '%.64s' (supported: sigmoid)", scoring);
    return -1;
  }
  m->router = DF_ROUTER_SIGMOID_NOAUX;
  m->head_dim = m->qk_rope_head_dim; /* DeepseekV3Config.head_dim: the RoPE width */
  m->decoder_sparse_step = 1;
  int64_t n_dense = 0;
  for (int64_t i = 0; i < n_layers; i++) {
    m->is_moe_layer[i] =
        m->num_experts > 0 && i >= m->first_k_dense_replace && i % m->moe_layer_freq == 0;
    if (!m->is_moe_layer[i]) n_dense++;
  }
  if (m->num_experts > 0) {
    if (df_cfg_int(r, "num_experts_per_tok", true, 0, 1, DF_CFG_MAX_DIM, &m->num_experts_per_tok) ||
        df_cfg_int(r, "moe_intermediate_size", true, 0, 1, DF_CFG_MAX_DIM,
                   &m->moe_intermediate_size))
      return -1;
    if (m->num_experts % m->n_group != 0 || m->num_experts / m->n_group < 2) {
      df_cfg_fail(r,
                  "key 'n_group': %lld groups do not split %lld experts into equal groups of at "
                  "least 2",
                  (long long)m->n_group, (long long)m->num_experts);
      return -1;
    }
    if (m->topk_group > m->n_group) {
      df_cfg_fail(r, "key 'topk_group': %lld exceeds n_group %lld", (long long)m->topk_group,
                  (long long)m->n_group);
      return -1;
    }
    if (m->num_experts_per_tok > m->topk_group * (m->num_experts / m->n_group)) {
      df_cfg_fail(
          r,
          "key 'num_experts_per_tok': top-k %lld exceeds the %lld experts of topk_group %lld "
          "groups",
          (long long)m->num_experts_per_tok,
          (long long)(m->topk_group * (m->num_experts / m->n_group)), (long long)m->topk_group);
      return -1;
    }
  }
  if (df_cfg_quant_fp8(r, m)) return -1;
  return df_cfg_int(r, "intermediate_size", n_dense > 0, 0, 1, DF_CFG_MAX_DIM,
                    &m->intermediate_size);
}
#define NM(fmt, ...) (snprintf(nm, sizeof nm, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), nm)
#define VEC(dst, name, n)                                                                     \
  do {                                                                                        \
    int64_t sh_[1] = {n};                                                                     \
    if (!((dst) = df_bind(b, name, 1, sh_, false, false, err, errlen))) return -1;            \
  } while (0)

static int build_layer(const df_family_ctx *fc, int64_t l, df_layer *L, char *err,
                       size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t H = c->hidden_size, nh = c->num_attention_heads, dn = c->qk_nope_head_dim,
          dr = c->qk_rope_head_dim, dv = c->v_head_dim, KL = c->kv_lora_rank,
          ql = c->q_lora_rank;
  char nm[256];
  df_mla_weights a = {0};
  VEC(L->norm[0], NM("input_layernorm.weight"), H);
  VEC(L->norm[1], NM("post_attention_layernorm.weight"), H);
  if (df_bind_mla_weights(fc, l, false, &a, err, errlen) != 0) return -1;
  df_mla_dims dims = {.n_head = nh, .q_lora_rank = ql, .kv_lora_rank = KL, .dn = dn, .dr = dr,
                      .dv = dv, .rope_interleave = c->rope_interleave,
                      .eps = (float)c->rms_norm_eps, .scale = df_mla_scale(c)};
  if (!(L->attn = df_mla_new(fc->env, fc->ws, l, &a, &dims, err, errlen))) return -1;
  return df_build_mla_moe_ffn(fc, l, L, "mlp", NULL, err, errlen);
}

static void summary(const df_model_config *c, FILE *f) {
  const char *rope_kind = df_rope_scaling_note(c);
  fprintf(f, "attention    MLA, %lld heads, q_lora_rank %lld, kv_lora_rank %lld, qk_nope %lld + "
          "qk_rope %lld, v_head %lld, rope_theta %g%s\n",
          (long long)c->num_attention_heads, (long long)c->q_lora_rank,
          (long long)c->kv_lora_rank, (long long)c->qk_nope_head_dim,
          (long long)c->qk_rope_head_dim, (long long)c->v_head_dim, c->rope_theta, rope_kind);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l];
  if (n_moe > 0)
    fprintf(f, "moe          %lld of %lld layers, %lld experts in %lld groups (keep %lld), "
            "top-%lld, sigmoid + correction bias, %lld shared, expert width %lld, scaling %g\n",
            (long long)n_moe, (long long)c->num_hidden_layers, (long long)c->num_experts,
            (long long)c->n_group, (long long)c->topk_group, (long long)c->num_experts_per_tok,
            (long long)c->n_shared_experts, (long long)c->moe_intermediate_size,
            c->routed_scaling_factor);
}

static const char *const model_types[] = {"deepseek_v3", "kimi_k2", NULL};

/* The plain pre-norm residual. */
static df_residual *residual_new(const df_family_ctx *fc, const df_layer *layers, char *err,
                                 size_t errlen) {
  (void)layers;
  return df_residual_prenorm_of(fc->cfg, err, errlen);
}

const df_family df_family_deepseek_v3 = {
    .config = {.model_types = model_types, .rope_mscale = true, .parse = parse_config},
    .name = "deepseek_v3",
    .build_layer = build_layer,
    .residual_new = residual_new,
    .summary = summary,
};
