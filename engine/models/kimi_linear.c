/* engine/models/kimi_linear.c — the kimi_linear family (moonshotai/Kimi-Linear-48B-A3B), and
 * the text tower of a K3-style kimi_k3 wrapper config (text_config, tensors under
 * "language_model."), as far as it is the same model.
 *
 * Semantics: Moonshot's modeling_kimi.py (KimiDecoderLayer, KimiDeltaAttention,
 * KimiMLAAttention, KimiMoEGate, KimiSparseMoeBlock) as docs/K3.md §3.4, §3.5 and §13 write
 * it down: plain pre-norm residual; the token mixer of layer i is KDA
 * (engine/layers/kda.h) when i + 1 is in linear_attn_config.kda_layers, else NoPE MLA
 * (engine/layers/mla.h with nope, optional sigmoid output gate, q_a / kv_a norm eps 1e-6,
 * softmax scale (qk_nope + qk_rope)^-0.5, latent cache); the channel mixer is a dense SiLU
 * MLP (mlp.{gate,up,down}_proj) or the DeepSeek-V3-style MoE (block_sparse_moe.gate with
 * e_score_correction_bias for selection only, UNBIASED sigmoid weights, renormalised when
 * moe_renormalize, times routed_scaling_factor; experts.<e>.w1/w3/w2 and shared_experts).
 * Tensors: model.layers.<l>.self_attn.{q,k,v}_proj, {q,k,v}_conv1d, A_log, dt_bias,
 * f_a_proj, f_b_proj, b_proj, g_proj | g_a_proj + g_b_proj, o_norm, o_proj (KDA);
 * q_proj | q_a_proj + q_a_layernorm + q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
 * kv_b_proj, g_proj (gate), o_proj (MLA).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/layers/attn_res.h"
#include "engine/layers/kda.h"
#include "engine/layers/mla.h"
#include "engine/models/family.h"
#include "engine/models/mla_moe.h"

/* ---- config.json: the family's own keys --------------------------------------------------
 * KimiLinearConfig (configuration_kimi.py) as the published 48B folder spells it:
 * linear_attn_config (required) {num_heads, head_dim, short_conv_kernel_size (required),
 * kda_layers, full_attn_layers (1-BASED lists: every layer in exactly one of them),
 * gate_lower_bound (optional, < 0: K3's sigmoid decay gate), use_full_rank_gate (default
 * false)}; kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim (required);
 * q_lora_rank (null = q_proj); mla_use_nope (must be true: the reference asserts it);
 * mla_use_output_gate (default false); num_experts (null = dense everywhere),
 * num_experts_per_token, moe_intermediate_size (required with experts), num_shared_experts
 * (default 0), first_k_dense_replace (0), moe_layer_freq (1), moe_renormalize (true),
 * routed_scaling_factor (1.0), num_expert_group (1), topk_group (1), use_grouped_topk
 * (true; false = one group), moe_router_activation_func ("sigmoid", others refused);
 * intermediate_size when a layer is dense. Layer i is MoE iff num_experts and i >=
 * first_k_dense_replace and i % moe_layer_freq == 0.
 * Kimi K3's switches (docs/K3.md §1.1, each absent in Kimi-Linear-48B): attn_res_block_size
 * (>= 1: Block Attention Residuals), routed_expert_hidden_size (latent MoE width, <= hidden)
 * with latent_moe_use_norm (default false), hidden_act "situ" with activation_situ_beta
 * (null: 1.0) and activation_situ_linear_beta (null: none; both > 0 when given), and
 * quantization_config (compressed-tensors MXFP4, config/model_config.h df_cfg_quant_mxfp4). */
static int k3_switches(df_cfg_reader *r, df_model_config *m) {
  const char *pf = df_cfg_prefix(r);
  double beta = 0, beta_lin = 0;
  if (df_cfg_int(r, "attn_res_block_size", false, 0, 1, DF_CFG_MAX_LAYERS, &m->attn_res_block) ||
      df_cfg_int(r, "routed_expert_hidden_size", false, 0, 1, m->hidden_size, &m->latent_dim) ||
      df_cfg_bool(r, "latent_moe_use_norm", false, &m->latent_norm) ||
      df_cfg_num(r, "activation_situ_beta", 0, &beta) ||
      df_cfg_num(r, "activation_situ_linear_beta", 0, &beta_lin) ||
      df_cfg_quant_mxfp4(r, m))
    return -1;
  if (beta < 0 || !isfinite(beta)) {
    df_cfg_fail(r, "key '%sactivation_situ_beta': %g is out of range (expected > 0 or null)", pf,
                beta);
    return -1;
  }
  if (!(beta_lin > 0) && df_cfg_has(r, "activation_situ_linear_beta")) {
    df_cfg_fail(r, "key '%sactivation_situ_linear_beta': %g is out of range (expected > 0 or "
                "null)", pf, beta_lin);
    return -1;
  }
  if ((beta > 0 && !((float)beta > 0 && isfinite((float)beta))) ||
      (beta_lin > 0 && !((float)beta_lin > 0 && isfinite((float)beta_lin)))) {
    df_cfg_fail(r, "key '%sactivation_situ_%sbeta': %g is not a positive finite fp32 value", pf,
                (beta > 0 && !((float)beta > 0 && isfinite((float)beta))) ? "" : "linear_",
                (beta > 0 && !((float)beta > 0 && isfinite((float)beta))) ? beta : beta_lin);
    return -1;
  }
  if (m->hidden_act != DF_ACT_SITU && (df_cfg_has(r, "activation_situ_beta") ||
                                       df_cfg_has(r, "activation_situ_linear_beta"))) {
    df_cfg_fail(r, "key '%sactivation_situ_beta': SiTU parameters given but hidden_act is not "
                "\"situ\"", pf);
    return -1;
  }
  m->situ_beta = beta > 0 ? beta : 1.0; /* the reference's `beta or 1.0` */
  m->situ_linear_beta = beta_lin;       /* 0: the up branch passes unchanged */
  if (m->latent_norm && m->latent_dim == 0) {
    df_cfg_fail(r, "key '%slatent_moe_use_norm': true needs routed_expert_hidden_size", pf);
    return -1;
  }
  return 0;
}

static int parse_config(df_cfg_reader *r, const char *model_type, df_model_config *m) {
  m->arch = DF_ARCH_KIMI_LINEAR;
  const char *pf = df_cfg_prefix(r);
  int64_t L = m->num_hidden_layers;
  if (k3_switches(r, m) != 0) return -1;
  if (m->attention_bias) {
    df_cfg_fail(r, "key '%sattention_bias': true is not supported for model type %s", pf,
                m->model_type);
    return -1;
  }
  /* linear_attn_config */
  if (df_cfg_enter(r, "linear_attn_config", true) != 0) return -1;
  bool kda[DF_CFG_MAX_LAYERS], full[DF_CFG_MAX_LAYERS];
  double lb = 0;
  int rc = df_cfg_int(r, "num_heads", true, 0, 1, DF_CFG_MAX_DIM, &m->kda_heads) ||
           df_cfg_int(r, "head_dim", true, 0, 1, 4096, &m->kda_head_dim) ||
           df_cfg_int(r, "short_conv_kernel_size", true, 0, 1, 64, &m->kda_conv) ||
           df_cfg_layer_list1(r, "kda_layers", L, kda) ||
           df_cfg_layer_list1(r, "full_attn_layers", L, full) ||
           df_cfg_bool(r, "use_full_rank_gate", false, &m->kda_full_rank_gate);
  m->kda_lower_bound = !rc && df_cfg_has(r, "gate_lower_bound");
  if (!rc && m->kda_lower_bound) rc = df_cfg_num(r, "gate_lower_bound", 0, &lb);
  if (!rc && m->kda_lower_bound && !(lb < 0)) {
    df_cfg_fail(r, "key '%sgate_lower_bound': %g is out of range (expected < 0)", pf, lb);
    rc = -1;
  }
  df_cfg_leave(r);
  if (rc) return -1;
  m->kda_gate_lb = lb;
  for (int64_t i = 0; i < L; i++) {
    if (kda[i] == full[i]) {
      df_cfg_fail(r, "key '%slinear_attn_config': layer %lld (1-based) is in %s of "
                  "kda_layers and full_attn_layers (expected exactly one)", pf,
                  (long long)(i + 1), kda[i] ? "both" : "neither");
      return -1;
    }
    m->is_kda_layer[i] = kda[i];
  }
  /* MLA */
  if (df_cfg_int(r, "q_lora_rank", false, 0, 1, DF_CFG_MAX_DIM, &m->q_lora_rank) ||
      df_cfg_int(r, "kv_lora_rank", true, 0, 1, DF_CFG_MAX_DIM, &m->kv_lora_rank) ||
      df_cfg_int(r, "qk_nope_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->qk_nope_head_dim) ||
      df_cfg_int(r, "qk_rope_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->qk_rope_head_dim) ||
      df_cfg_int(r, "v_head_dim", true, 0, 1, DF_CFG_MAX_DIM, &m->v_head_dim) ||
      df_cfg_bool(r, "mla_use_nope", false, &m->mla_nope) ||
      df_cfg_bool(r, "mla_use_output_gate", false, &m->mla_output_gate))
    return -1;
  if (!m->mla_nope) {
    df_cfg_fail(r, "key '%smla_use_nope': only true is supported for model type %s (the "
                "published modeling file asserts it)", pf, m->model_type);
    return -1;
  }
  /* MoE */
  bool grouped;
  const char *act;
  if (df_cfg_int(r, "num_experts", false, 0, 0, DF_CFG_MAX_DIM, &m->num_experts) ||
      df_cfg_int(r, "num_shared_experts", false, 0, 0, DF_CFG_MAX_DIM, &m->n_shared_experts) ||
      df_cfg_int(r, "first_k_dense_replace", false, 0, 0, DF_CFG_MAX_DIM,
                 &m->first_k_dense_replace) ||
      df_cfg_int(r, "moe_layer_freq", false, 1, 1, DF_CFG_MAX_DIM, &m->moe_layer_freq) ||
      df_cfg_bool(r, "moe_renormalize", true, &m->norm_topk_prob) ||
      df_cfg_num(r, "routed_scaling_factor", 1.0, &m->routed_scaling_factor) ||
      df_cfg_int(r, "num_expert_group", false, 1, 1, DF_CFG_MAX_DIM, &m->n_group) ||
      df_cfg_int(r, "topk_group", false, 1, 1, DF_CFG_MAX_DIM, &m->topk_group) ||
      df_cfg_bool(r, "use_grouped_topk", true, &grouped) ||
      df_cfg_str(r, "moe_router_activation_func", "sigmoid", &act))
    return -1;
  if (strcmp(act, "sigmoid") != 0) {
    df_cfg_fail(r, "key '%smoe_router_activation_func': unsupported '%.64s' (supported: "
                "sigmoid)", pf, act);
    return -1;
  }
  if (!grouped) m->n_group = m->topk_group = 1;
  if (!(m->routed_scaling_factor > 0.0)) {
    df_cfg_fail(r, "key '%srouted_scaling_factor': %g is out of range (expected > 0)", pf,
                m->routed_scaling_factor);
    return -1;
  }
  m->router = DF_ROUTER_SIGMOID_NOAUX;
  m->head_dim = m->qk_rope_head_dim; /* no RoPE; the loader's tables stay unused */
  if (m->head_dim % 2) m->head_dim++;
  m->decoder_sparse_step = 1;
  int64_t n_dense = 0;
  for (int64_t i = 0; i < L; i++) {
    m->is_moe_layer[i] =
        m->num_experts > 0 && i >= m->first_k_dense_replace && i % m->moe_layer_freq == 0;
    if (!m->is_moe_layer[i]) n_dense++;
  }
  if (m->num_experts > 0) {
    if (df_cfg_int(r, "num_experts_per_token", true, 0, 1, DF_CFG_MAX_DIM,
                   &m->num_experts_per_tok) ||
        df_cfg_int(r, "moe_intermediate_size", true, 0, 1, DF_CFG_MAX_DIM,
                   &m->moe_intermediate_size))
      return -1;
    if (m->num_experts % m->n_group != 0 ||
        (m->n_group > 1 && m->num_experts / m->n_group < 2)) {
      df_cfg_fail(r, "key '%snum_expert_group': %lld groups do not split %lld experts into "
                  "equal groups of at least 2", pf, (long long)m->n_group,
                  (long long)m->num_experts);
      return -1;
    }
    if (m->topk_group > m->n_group) {
      df_cfg_fail(r, "key '%stopk_group': %lld exceeds num_expert_group %lld", pf,
                  (long long)m->topk_group, (long long)m->n_group);
      return -1;
    }
    if (m->num_experts_per_tok > m->topk_group * (m->num_experts / m->n_group)) {
      df_cfg_fail(r, "key '%snum_experts_per_token': top-k %lld exceeds the %lld experts of "
                  "topk_group %lld groups", pf, (long long)m->num_experts_per_tok,
                  (long long)(m->topk_group * (m->num_experts / m->n_group)),
                  (long long)m->topk_group);
      return -1;
    }
  }
  return df_cfg_int(r, "intermediate_size", n_dense > 0, 0, 1, DF_CFG_MAX_DIM,
                    &m->intermediate_size);
}

#define NM(fmt, ...)                                                                          \
  (snprintf(nm, sizeof nm, "%smodel.layers.%lld." fmt, c->tensor_prefix, (long long)l,        \
            ##__VA_ARGS__),                                                                   \
   nm)
#define VEC(dst, name, n)                                                                     \
  do {                                                                                        \
    int64_t sh_[1] = {n};                                                                     \
    if (!((dst) = df_bind(b, name, 1, sh_, false, false, err, errlen))) return -1;            \
  } while (0)
#define LIN(dst, name, n, k, ex)                                                              \
  do {                                                                                        \
    if (!((dst) = df_bind_linear(b, name, n, k, ex, err, errlen))) return -1;                 \
  } while (0)

/* A_log as published: [H], (1, 1, H, 1) (Kimi-Linear-48B) or padded [>= H] (K3's [128] for
 * 96 heads, docs/K3.md §7 D0/D10); the kernel reads A_log[h] for h < H. */
static const df_t_tensor *bind_a_log(df_binder *b, const char *name, int64_t H, char *err,
                                     size_t errlen) {
  const df_st_tensor *t = df_st_find(b->st, name);
  if (t && t->ndim == 4 && t->shape[0] == 1 && t->shape[1] == 1 && t->shape[2] == H &&
      t->shape[3] == 1) {
    int64_t sh[4] = {1, 1, H, 1};
    return df_bind(b, name, 4, sh, false, false, err, errlen);
  }
  if (t && t->ndim == 1 && t->shape[0] >= H) {
    int64_t sh[1] = {t->shape[0]};
    return df_bind(b, name, 1, sh, false, false, err, errlen);
  }
  if (!t) return df_bind(b, name, 1, &H, false, false, err, errlen); /* the binder's message */
  snprintf(err, errlen, "%s: tensor '%s' has %d dims (expected [%lld], [1, 1, %lld, 1] or a "
           "padded [>= %lld] for linear_attn_config.num_heads %lld)", b->dir, name, t->ndim,
           (long long)H, (long long)H, (long long)H, (long long)H);
  return NULL;
}

static int build_kda(const df_family_ctx *fc, int64_t l, df_layer *L, char *err, size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t Hd = c->hidden_size, H = c->kda_heads, D = c->kda_head_dim, C = H * D,
          W = c->kda_conv;
  char nm[256];
  df_kda_weights w = {0};
  LIN(w.q, NM("self_attn.q_proj.weight"), C, Hd, false);
  LIN(w.k, NM("self_attn.k_proj.weight"), C, Hd, false);
  LIN(w.v, NM("self_attn.v_proj.weight"), C, Hd, false);
  int64_t cs[3] = {C, 1, W};
  if (!(w.q_conv = df_bind(b, NM("self_attn.q_conv1d.weight"), 3, cs, false, false, err, errlen)) ||
      !(w.k_conv = df_bind(b, NM("self_attn.k_conv1d.weight"), 3, cs, false, false, err, errlen)) ||
      !(w.v_conv = df_bind(b, NM("self_attn.v_conv1d.weight"), 3, cs, false, false, err, errlen)))
    return -1;
  if (!(w.a_log = bind_a_log(b, NM("self_attn.A_log"), H, err, errlen))) return -1;
  VEC(w.dt_bias, NM("self_attn.dt_bias"), C);
  LIN(w.f_a, NM("self_attn.f_a_proj.weight"), D, Hd, false);
  LIN(w.f_b, NM("self_attn.f_b_proj.weight"), C, D, false);
  LIN(w.b, NM("self_attn.b_proj.weight"), H, Hd, false);
  if (c->kda_full_rank_gate) {
    LIN(w.g, NM("self_attn.g_proj.weight"), C, Hd, false);
  } else {
    LIN(w.g_a, NM("self_attn.g_a_proj.weight"), D, Hd, false);
    LIN(w.g_b, NM("self_attn.g_b_proj.weight"), C, D, false);
  }
  VEC(w.o_norm, NM("self_attn.o_norm.weight"), D);
  LIN(w.o, NM("self_attn.o_proj.weight"), Hd, C, false);
  df_kda_dims d = {.n_head = H, .head_dim = D, .conv_width = W,
                   .lower_bound = c->kda_lower_bound, .lb = (float)c->kda_gate_lb,
                   .norm_eps = (float)c->rms_norm_eps};
  return (L->attn = df_kda_new(fc->env, fc->ws, l, &w, &d, err, errlen)) ? 0 : -1;
}

static int build_mla(const df_family_ctx *fc, int64_t l, df_layer *L, char *err, size_t errlen) {
  const df_model_config *c = fc->cfg;
  int64_t nh = c->num_attention_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim,
          dv = c->v_head_dim, KL = c->kv_lora_rank, ql = c->q_lora_rank;
  df_mla_weights a = {0};
  if (df_bind_mla_weights(fc, l, c->mla_output_gate, &a, err, errlen) != 0) return -1;
  /* q_a / kv_a norms: KimiRMSNorm's default eps 1e-6 (docs/K3.md §7 D2); no YaRN mscale */
  df_mla_dims dims = {.n_head = nh, .q_lora_rank = ql, .kv_lora_rank = KL, .dn = dn, .dr = dr,
                      .dv = dv, .nope = true, .eps = 1e-6f,
                      .scale = (float)(1.0 / sqrt((double)(dn + dr)))};
  return (L->attn = df_mla_new(fc->env, fc->ws, l, &a, &dims, err, errlen)) ? 0 : -1;
}

/* block_sparse_moe.experts.<e>.w1 (gate), w3 (up), w2 (down), under the config's prefix. */
static void expert_tensor_name(const df_model_config *c, int64_t l, int64_t e, int part,
                               char *buf, size_t cap) {
  static const char *const w[3] = {"w1", "w3", "w2"};
  snprintf(buf, cap, "%smodel.layers.%lld.block_sparse_moe.experts.%lld.%s.weight",
           c->tensor_prefix, (long long)l, (long long)e, w[part]);
}

static int build_layer(const df_family_ctx *fc, int64_t l, df_layer *L, char *err,
                       size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t Hd = c->hidden_size, ps[2] = {1, Hd};
  char nm[256];
  VEC(L->norm[0], NM("input_layernorm.weight"), Hd);
  VEC(L->norm[1], NM("post_attention_layernorm.weight"), Hd);
  if (c->attn_res_block > 0) { /* the mix weights; layer 0's attention side is never read */
    static const char *const side[2] = {"self_attention_res", "mlp_res"};
    for (int s = l == 0; s < 2; s++) {
      VEC(L->res_norm[s], NM("%s_norm.weight", side[s]), Hd);
      if (!(L->res_proj[s] = df_bind(b, NM("%s_proj.weight", side[s]), 2, ps, false, false, err,
                                     errlen)))
        return -1;
    }
  }
  if ((c->is_kda_layer[l] ? build_kda : build_mla)(fc, l, L, err, errlen) != 0) return -1;
  return df_build_mla_moe_ffn(fc, l, L, "block_sparse_moe", expert_tensor_name, err, errlen);
}

/* Plain pre-norm, or Kimi K3's Block Attention Residuals with the output mix's
 * model.output_attn_res_{norm,proj}.weight. */
static df_residual *residual_new(const df_family_ctx *fc, const df_layer *layers, char *err,
                                 size_t errlen) {
  const df_model_config *c = fc->cfg;
  int64_t Hd = c->hidden_size, ps[2] = {1, Hd};
  char nn[256], np[256];
  snprintf(nn, sizeof nn, "%smodel.output_attn_res_norm.weight", c->tensor_prefix);
  snprintf(np, sizeof np, "%smodel.output_attn_res_proj.weight", c->tensor_prefix);
  if (c->attn_res_block == 0) {
    if (df_st_find(fc->bind->st, nn)) { /* a K3 checkpoint whose config lost the switch */
      snprintf(err, errlen, "%s: the checkpoint has Attention Residuals' tensors ('%s', ...) but "
               "config.json sets no attn_res_block_size: the config does not describe these "
               "weights", fc->bind->dir, nn);
      return NULL;
    }
    return df_residual_prenorm_of(c, err, errlen);
  }
  const df_t_tensor *on = df_bind(fc->bind, nn, 1, &Hd, false, false, err, errlen);
  const df_t_tensor *op = on ? df_bind(fc->bind, np, 2, ps, false, false, err, errlen) : NULL;
  if (!op) return NULL;
  return df_residual_attn_res_new(fc->env, fc->ws, layers, c->num_hidden_layers,
                                  c->attn_res_block, (float)c->rms_norm_eps, on, op, err,
                                  errlen);
}

static void summary(const df_model_config *c, FILE *f) {
  int64_t n_kda = 0, n_moe = 0, L = c->num_hidden_layers;
  for (int64_t l = 0; l < L; l++) {
    n_kda += c->is_kda_layer[l];
    n_moe += c->is_moe_layer[l];
  }
  fprintf(f, "attention    KDA on %lld of %lld layers: %lld heads x %lld, conv %lld, %s decay "
          "gate, %s output gate\n", (long long)n_kda, (long long)L, (long long)c->kda_heads,
          (long long)c->kda_head_dim, (long long)c->kda_conv,
          c->kda_lower_bound ? "lower-bound sigmoid" : "softplus",
          c->kda_full_rank_gate ? "full-rank" : "low-rank");
  fprintf(f, "             NoPE MLA on %lld: %lld heads, q_lora_rank %lld, kv_lora_rank %lld, "
          "qk_nope %lld + qk_rope %lld (unrotated), v_head %lld%s\n", (long long)(L - n_kda),
          (long long)c->num_attention_heads, (long long)c->q_lora_rank,
          (long long)c->kv_lora_rank, (long long)c->qk_nope_head_dim,
          (long long)c->qk_rope_head_dim, (long long)c->v_head_dim,
          c->mla_output_gate ? ", sigmoid output gate" : "");
  uint64_t H = (uint64_t)c->kda_heads, D = (uint64_t)c->kda_head_dim, C = H * D,
           W = (uint64_t)(c->kda_conv - 1);
  fprintf(f, "kda state    per layer and sequence: S %llu B + conv windows %llu B, twice (the "
          "rollback base), + a log of max(chunk, 64) rows x %llu B\n",
          (unsigned long long)(H * D * D * 4), (unsigned long long)(3 * C * W * 4),
          (unsigned long long)((4 * C + H) * 4));
  if (n_moe > 0)
    fprintf(f, "moe          %lld of %lld layers, %lld experts in %lld groups (keep %lld), "
            "top-%lld, sigmoid + correction bias, %lld shared, expert width %lld, scaling %g%s\n",
            (long long)n_moe, (long long)L, (long long)c->num_experts, (long long)c->n_group,
            (long long)c->topk_group, (long long)c->num_experts_per_tok,
            (long long)c->n_shared_experts, (long long)c->moe_intermediate_size,
            c->routed_scaling_factor, c->norm_topk_prob ? "" : ", not renormalised");
  if (c->latent_dim > 0)
    fprintf(f, "latent moe   routed experts in a %lld-wide latent (down-projected once per "
            "token%s, up-projected after the combine)\n", (long long)c->latent_dim,
            c->latent_norm ? ", RMSNorm on the combined latent" : "");
  if (c->hidden_act == DF_ACT_SITU && c->situ_linear_beta > 0)
    fprintf(f, "activation   SiTU-GLU, beta %g, linear beta %g\n", c->situ_beta,
            c->situ_linear_beta);
  else if (c->hidden_act == DF_ACT_SITU)
    fprintf(f, "activation   SiTU-GLU, beta %g, no linear beta\n", c->situ_beta);
  if (c->quant == DF_QUANT_MXFP4)
    fprintf(f, "weights      routed experts MXFP4 (E2M1 + E8M0 per 32), de-quantised inside the "
            "kernels; everything else as stored\n");
  if (c->attn_res_block > 0)
    fprintf(f, "residual     Block Attention Residuals, a snapshot every %lld layers (%lld "
            "blocks + the running sum at the output)\n", (long long)c->attn_res_block,
            (long long)((c->num_hidden_layers + c->attn_res_block - 1) / c->attn_res_block));
}

static const char *const model_types[] = {"kimi_linear", NULL};
static const char *const wrapper_types[] = {"kimi_k3", NULL};

const df_family df_family_kimi_linear = {
    .config = {.model_types = model_types, .rope_mscale = false, .parse = parse_config,
               .wrapper_types = wrapper_types, .situ = true},
    .name = "kimi_linear",
    .build_layer = build_layer,
    .residual_new = residual_new,
    .summary = summary,
    .expert_tensor_name = expert_tensor_name,
};
