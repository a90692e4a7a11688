/* engine/models/mla_moe.c — the MLA and MoE blocks of the DeepSeek-V3 layout; see mla_moe.h. */
#include "engine/models/mla_moe.h"

#include <stdio.h>
#include <string.h>

#include "engine/layers/glu.h"
#include "engine/layers/moe.h"

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

int df_bind_mla_weights(const df_family_ctx *fc, int64_t l, bool output_gate,
                        df_mla_weights *a, char *err, size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t H = c->hidden_size, nh = c->num_attention_heads, dn = c->qk_nope_head_dim,
          dr = c->qk_rope_head_dim, dv = c->v_head_dim, KL = c->kv_lora_rank,
          ql = c->q_lora_rank;
  char nm[256];
  if (ql > 0) {
    LIN(a->q_a, NM("self_attn.q_a_proj.weight"), ql, H, false);
    VEC(a->q_a_norm, NM("self_attn.q_a_layernorm.weight"), ql);
    LIN(a->q_b, NM("self_attn.q_b_proj.weight"), nh * (dn + dr), ql, false);
  } else {
    LIN(a->q, NM("self_attn.q_proj.weight"), nh * (dn + dr), H, false);
  }
  LIN(a->kv_a, NM("self_attn.kv_a_proj_with_mqa.weight"), KL + dr, H, false);
  VEC(a->kv_a_norm, NM("self_attn.kv_a_layernorm.weight"), KL);
  LIN(a->kv_b, NM("self_attn.kv_b_proj.weight"), nh * (dn + dv), KL, false);
  LIN(a->o, NM("self_attn.o_proj.weight"), H, nh * dv, false);
  if (output_gate) LIN(a->g, NM("self_attn.g_proj.weight"), nh * dv, H, false);
  return 0;
}

static void default_expert_name(const df_model_config *c, int64_t l, int64_t e, int part,
                                char *buf, size_t cap) {
  static const char *const parts[3] = {"gate_proj", "up_proj", "down_proj"};
  snprintf(buf, cap, "%smodel.layers.%lld.mlp.experts.%lld.%s.weight", c->tensor_prefix,
           (long long)l, (long long)e, parts[part]);
}

int df_build_mla_moe_ffn(const df_family_ctx *fc, int64_t l, df_layer *L, const char *moe_block,
                         void (*expert_name)(const df_model_config *c, int64_t l, int64_t e,
                                             int part, char *buf, size_t cap),
                         char *err, size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t H = c->hidden_size;
  char nm[256];
  df_k_act act = {0}; /* SiLU */
  if (c->hidden_act == DF_ACT_SITU)
    act = (df_k_act){.kind = DF_K_ACT_SITU, .beta = (float)c->situ_beta,
                     .beta_lin = (float)c->situ_linear_beta};
  if (!c->is_moe_layer[l]) {
    int64_t I = c->intermediate_size;
    const df_t_tensor *g, *u, *d;
    LIN(g, NM("mlp.gate_proj.weight"), I, H, false);
    LIN(u, NM("mlp.up_proj.weight"), I, H, false);
    LIN(d, NM("mlp.down_proj.weight"), H, I, false);
    return (L->ffn = df_glu_new(fc->env, fc->ws, l, g, u, d, &act, err, errlen)) ? 0 : -1;
  }
  if (!expert_name) expert_name = default_expert_name;
  int64_t E = c->num_experts, I = c->moe_intermediate_size, S = I * c->n_shared_experts;
  int64_t rs[2] = {E, H};
  df_moe_weights w = {0};
  if (!(w.router = df_bind(b, NM("%s.gate.weight", moe_block), 2, rs, false, false, err,
                           errlen)))
    return -1;
  VEC(w.router_bias, NM("%s.gate.e_score_correction_bias", moe_block), E);
  if (df_t_dtype(w.router_bias) != DF_DT_F32) {
    snprintf(err, errlen, "%s: tensor '%s' has dtype %s (expected F32)", b->dir, nm,
             df_dtype_name(df_t_dtype(w.router_bias)));
    return -1;
  }
  if (S > 0) {
    LIN(w.sh_gate, NM("%s.shared_experts.gate_proj.weight", moe_block), S, H, false);
    LIN(w.sh_up, NM("%s.shared_experts.up_proj.weight", moe_block), S, H, false);
    LIN(w.sh_down, NM("%s.shared_experts.down_proj.weight", moe_block), H, S, false);
  }
  int64_t W = H; /* the width the routed experts run in */
  /* tensors of a latent MoE that the config does not switch on: refuse, never ignore */
  static const char *const lat_part[2] = {"routed_expert_down_proj", "routed_expert_norm"};
  for (int i = 0; i < 2; i++)
    if ((i == 0 ? c->latent_dim == 0 : !c->latent_norm) &&
        df_st_find(b->st, NM("%s.%s.weight", moe_block, lat_part[i]))) {
      snprintf(err, errlen, "%s: the checkpoint has '%s' but config.json sets no %s: the config "
               "does not describe these weights", b->dir, nm,
               i == 0 ? "routed_expert_hidden_size" : "latent_moe_use_norm true");
      return -1;
    }
  if (c->latent_dim > 0) { /* Kimi K3's latent MoE (docs/K3.md §3.7) */
    W = c->latent_dim;
    LIN(w.lat_down, NM("%s.routed_expert_down_proj.weight", moe_block), W, H, false);
    if (c->latent_norm) VEC(w.lat_norm, NM("%s.routed_expert_norm.weight", moe_block), W);
    LIN(w.lat_up, NM("%s.routed_expert_up_proj.weight", moe_block), H, W, false);
  }
  df_moe_router rt = {.kind = DF_ROUTER_SIGMOID_NOAUX, .n_experts = E,
                      .top_k = c->num_experts_per_tok, .norm_topk = c->norm_topk_prob,
                      .n_group = c->n_group, .topk_group = c->topk_group,
                      .routed_scaling = (float)c->routed_scaling_factor, .act = act,
                      .latent_eps = (float)c->rms_norm_eps};
  if (!(L->ffn = df_moe_new(fc->env, fc->ws, l, H, &rt, &w, err, errlen))) return -1;
  for (int64_t e = 0; e < E; e++) {
    const df_t_tensor *g, *u, *d;
    expert_name(c, l, e, 0, nm, sizeof nm);
    LIN(g, nm, I, W, true);
    expert_name(c, l, e, 1, nm, sizeof nm);
    LIN(u, nm, I, W, true);
    expert_name(c, l, e, 2, nm, sizeof nm);
    LIN(d, nm, W, I, true);
    df_moe_set_expert(L->ffn, e, g, u, d);
  }
  return 0;
}
