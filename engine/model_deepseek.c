/* engine/model_deepseek.c — the deepseek_v3 / kimi_k2 parts of the model: tensor binding
 * (FP8 weights with their block scales), MLA buffers and the MLA attention block.
 *
 * Semantics: transformers' models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention)
 * computed in the absorbed form of the DeepSeek-V2 paper (§2.1.2): the cache keeps per
 * position the normalised latent c_kv = kv_a_layernorm(kv_a_proj_with_mqa(x)[:L]) and the
 * rotated RoPE key k_rope shared by all heads; a query head h attends with
 *   score = scale * ((W_uk[h]^T q_nope[h]) . c_kv + q_rope[h] . k_rope)
 * and its output is W_uv[h] (sum_t p_t c_kv[t]), W_uk / W_uv the key / value rows of
 * kv_b_proj. Every row (prefill, decode, verify) takes this path, so a position's logits do
 * not depend on chunking. Does not own: the layer loop, the MoE block (engine/model.c) or the
 * kernels (engine/kernels/kernels_deepseek.c, engine/kernels/kernels_fp8.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/model_internal.h"

/* A linear weight [N, K]: BF16/F16/F32 through df_model_bind, or F8_E4M3 plus its F32
 * `<name>_scale_inv` [ceil(N/bn), ceil(K/bk)] when the config declares FP8 blocks. */
static const df_t_tensor *bind_linear(df_model *m, const char *name, int64_t N, int64_t K,
                                      bool is_expert, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  const df_st_tensor *t = df_st_find(m->st, name);
  int64_t shape[2] = {N, K};
  if (!t || t->dtype != DF_DT_F8_E4M3)
    return df_model_bind(m, name, 2, shape, false, is_expert, err, errlen);
  const char *file = df_st_file_path(m->st, t->file_index);
  if (c->quant != DF_QUANT_FP8_BLOCK) {
    snprintf(err, errlen, "%s: tensor '%s' is F8_E4M3 but config.json declares no fp8 "
             "quantization_config", file, name);
    return NULL;
  }
  if (t->ndim != 2 || t->shape[0] != N || t->shape[1] != K) {
    snprintf(err, errlen, "%s: tensor '%s' has rank %d shape [%lld, %lld] but config.json "
             "implies [%lld, %lld]", file, name, t->ndim, (long long)(t->ndim > 0 ? t->shape[0] : 0),
             (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)N, (long long)K);
    return NULL;
  }
  int64_t bn = c->quant_block_n, bk = c->quant_block_k;
  int64_t gs[2] = {(N + bn - 1) / bn, (K + bk - 1) / bk};
  char sname[300];
  snprintf(sname, sizeof sname, "%s_scale_inv", name);
  const df_st_tensor *st = df_st_find(m->st, sname);
  if (!st) {
    snprintf(err, errlen, "%s: missing tensor '%s' (the block scales of F8_E4M3 '%s')", m->dir,
             sname, name);
    return NULL;
  }
  if (st->dtype != DF_DT_F32 || st->ndim != 2 || st->shape[0] != gs[0] || st->shape[1] != gs[1]) {
    snprintf(err, errlen, "%s: tensor '%s' must be F32 [%lld, %lld] (weight [%lld, %lld] in "
             "weight_block_size [%lld, %lld] blocks)", df_st_file_path(m->st, st->file_index),
             sname, (long long)gs[0], (long long)gs[1], (long long)N, (long long)K,
             (long long)bn, (long long)bk);
    return NULL;
  }
  df_t_tensor *w = df_t_wrap(t->data, DF_DT_F8_E4M3, 2, shape, err, errlen);
  if (!w) return NULL;
  if (df_model_track(m, w) != 0) {
    df_t_destroy(&w);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  df_t_tensor *s = df_t_wrap(st->data, DF_DT_F32, 2, gs, err, errlen);
  if (!s) return NULL;
  if (df_model_track(m, s) != 0) {
    df_t_destroy(&s);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (df_t_set_block_scale(w, s, bn, bk, err, errlen) != 0) return NULL;
  const df_t_tensor *wt = w;
  uint64_t nb = t->nbytes + st->nbytes;
  m->bytes.total += nb;
  if (is_expert)
    m->bytes.experts += nb;
  else
    m->bytes.resident += nb;
  return wt;
}

int df_ds_bind_layer(df_model *m, int64_t l, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  layer_w *L = &m->layers[l];
  int64_t H = c->hidden_size, nh = c->num_attention_heads, dn = c->qk_nope_head_dim,
          dr = c->qk_rope_head_dim, dv = c->v_head_dim, KL = c->kv_lora_rank,
          ql = c->q_lora_rank;
  char nm[256];
#define NM(fmt, ...) (snprintf(nm, sizeof nm, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), nm)
#define VEC(dst, name, n)                                                                     \
  do {                                                                                        \
    int64_t sh_[1] = {n};                                                                     \
    if (!((dst) = df_model_bind(m, name, 1, sh_, false, false, err, errlen))) return -1;      \
  } while (0)
#define LIN(dst, name, n, k, ex)                                                              \
  do {                                                                                        \
    if (!((dst) = bind_linear(m, name, n, k, ex, err, errlen))) return -1;                    \
  } while (0)
  VEC(L->in_norm, NM("input_layernorm.weight"), H);
  VEC(L->post_norm, NM("post_attention_layernorm.weight"), H);
  if (ql > 0) {
    LIN(L->q_a, NM("self_attn.q_a_proj.weight"), ql, H, false);
    VEC(L->q_a_norm, NM("self_attn.q_a_layernorm.weight"), ql);
    LIN(L->q_b, NM("self_attn.q_b_proj.weight"), nh * (dn + dr), ql, false);
  } else {
    LIN(L->q, NM("self_attn.q_proj.weight"), nh * (dn + dr), H, false);
  }
  LIN(L->kv_a, NM("self_attn.kv_a_proj_with_mqa.weight"), KL + dr, H, false);
  VEC(L->kv_a_norm, NM("self_attn.kv_a_layernorm.weight"), KL);
  LIN(L->kv_b, NM("self_attn.kv_b_proj.weight"), nh * (dn + dv), KL, false);
  LIN(L->o, NM("self_attn.o_proj.weight"), H, nh * dv, false);
  L->moe = c->is_moe_layer[l];
  if (!L->moe) {
    int64_t I = c->intermediate_size;
    LIN(L->mlp_gate, NM("mlp.gate_proj.weight"), I, H, false);
    LIN(L->mlp_up, NM("mlp.up_proj.weight"), I, H, false);
    LIN(L->mlp_down, NM("mlp.down_proj.weight"), H, I, false);
    return 0;
  }
  int64_t E = c->num_experts, I = c->moe_intermediate_size, S = I * c->n_shared_experts;
  int64_t rs[2] = {E, H};
  if (!(L->router = df_model_bind(m, NM("mlp.gate.weight"), 2, rs, false, false, err, errlen)))
    return -1;
  VEC(L->router_bias, NM("mlp.gate.e_score_correction_bias"), E);
  if (df_t_dtype(L->router_bias) != DF_DT_F32) {
    snprintf(err, errlen, "%s: tensor '%s' has dtype %s (expected F32)", m->dir, nm,
             df_dtype_name(df_t_dtype(L->router_bias)));
    return -1;
  }
  if (S > 0) {
    LIN(L->sh_gate, NM("mlp.shared_experts.gate_proj.weight"), S, H, false);
    LIN(L->sh_up, NM("mlp.shared_experts.up_proj.weight"), S, H, false);
    LIN(L->sh_down, NM("mlp.shared_experts.down_proj.weight"), H, S, false);
  }
  L->ex_gate = calloc((size_t)E, sizeof *L->ex_gate);
  L->ex_up = calloc((size_t)E, sizeof *L->ex_up);
  L->ex_down = calloc((size_t)E, sizeof *L->ex_down);
  if (!L->ex_gate || !L->ex_up || !L->ex_down) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int64_t e = 0; e < E; e++) {
    LIN(L->ex_gate[e], NM("mlp.experts.%lld.gate_proj.weight", (long long)e), I, H, true);
    LIN(L->ex_up[e], NM("mlp.experts.%lld.up_proj.weight", (long long)e), I, H, true);
    LIN(L->ex_down[e], NM("mlp.experts.%lld.down_proj.weight", (long long)e), H, I, true);
  }
#undef NM
#undef VEC
#undef LIN
  return 0;
}

static double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

int df_ds_plan(df_model *m, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t R = m->max_rows, nh = c->num_attention_heads, dn = c->qk_nope_head_dim,
          dr = c->qk_rope_head_dim, dv = c->v_head_dim, KL = c->kv_lora_rank,
          ql = c->q_lora_rank > 0 ? c->q_lora_rank : 1;
  int64_t s_q[2] = {R, nh * (dn + dr)}, s_qa[2] = {R, ql}, s_ckv[2] = {R, KL + dr},
          s_lat[2] = {R, nh * KL}, s_att[2] = {R, nh * dv};
  if (!(m->ds_q = df_t_new_f32(2, s_q, err, errlen)) ||
      !(m->ds_qa = df_t_new_f32(2, s_qa, err, errlen)) ||
      !(m->ds_ckv = df_t_new_f32(2, s_ckv, err, errlen)) ||
      !(m->ds_qabs = df_t_new_f32(2, s_lat, err, errlen)) ||
      !(m->ds_lat = df_t_new_f32(2, s_lat, err, errlen)) ||
      !(m->ds_att = df_t_new_f32(2, s_att, err, errlen)))
    return -1;
  m->router_work = calloc((size_t)(2 * c->num_experts + 2 * c->n_group + 2), sizeof(float));
  if (!m->router_work) {
    snprintf(err, errlen, "out of memory planning buffers");
    return -1;
  }
  m->bytes.buffers += (uint64_t)4 * (uint64_t)(R * (nh * (dn + dr) + ql + KL + dr + 2 * nh * KL +
                                                    nh * dv) +
                                               2 * c->num_experts + 2 * c->n_group + 2);
  /* DeepseekV3Attention: qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2
   * when rope_scaling sets mscale_all_dim */
  double scale = 1.0 / sqrt((double)(dn + dr));
  const df_rope_scaling *rs = &c->rope_scaling;
  if (rs->type != DF_ROPE_DEFAULT && rs->mscale_all_dim > 0) {
    double ms = yarn_mscale(rs->factor, rs->mscale_all_dim);
    scale = scale * ms * ms;
  }
  m->mla_scale = (float)scale;
  return 0;
}

void df_ds_free(df_model *m) {
  df_t_tensor **bufs[] = {&m->ds_q, &m->ds_qa, &m->ds_ckv, &m->ds_qabs, &m->ds_lat, &m->ds_att};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_t_destroy(bufs[i]);
  free(m->router_work);
  m->router_work = NULL;
}

void df_ds_attention(df_model *m, int64_t l, df_kv_cache **kvs, const int32_t *row_seq,
                     int64_t R) {
  const df_model_config *c = &m->cfg;
  const layer_w *L = &m->layers[l];
  int64_t nh = c->num_attention_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim,
          dv = c->v_head_dim, KL = c->kv_lora_rank;
  float eps = (float)c->rms_norm_eps;
  df_t_rmsnorm(m->x, R, L->in_norm, eps, m->xn);
  if (L->q_a) {
    df_t_linear(m->xn, 0, R, L->q_a, NULL, m->ds_qa);
    df_t_rmsnorm(m->ds_qa, R, L->q_a_norm, eps, m->ds_qa);
    df_t_linear(m->ds_qa, 0, R, L->q_b, NULL, m->ds_q);
  } else {
    df_t_linear(m->xn, 0, R, L->q, NULL, m->ds_q);
  }
  df_t_linear(m->xn, 0, R, L->kv_a, NULL, m->ds_ckv);
  float *ckv = df_t_f32(m->ds_ckv), *q = df_t_f32(m->ds_q);
  for (int64_t r = 0; r < R; r++) /* kv_a_layernorm on the latent part of each row */
    df_k_rmsnorm(ckv + r * (KL + dr), 1, KL, df_t_data(L->kv_a_norm), df_t_dtype(L->kv_a_norm),
                 eps, ckv + r * (KL + dr));
  const float *cs = df_t_f32(m->rope_cos), *sn = df_t_f32(m->rope_sin);
  df_k_rope_slices(q + dn, R, nh * (dn + dr), nh, dn + dr, dr, c->rope_interleave, m->pos, cs, sn);
  df_k_rope_slices(ckv + KL, R, KL + dr, 1, 0, dr, c->rope_interleave, m->pos, cs, sn);
  /* append each row's latent and RoPE key to its own sequence's cache */
  for (int64_t r = 0; r < R; r++) {
    df_kv_cache *kv = kvs[row_seq[r]];
    memcpy(df_t_f32(kv->k[l]) + m->pos[r] * KL, ckv + r * (KL + dr), (size_t)KL * sizeof(float));
    memcpy(df_t_f32(kv->v[l]) + m->pos[r] * dr, ckv + r * (KL + dr) + KL, (size_t)dr * sizeof(float));
  }
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = r0 + 1;
    while (r1 < R && row_seq[r1] == row_seq[r0]) r1++;
    df_kv_cache *kv = kvs[row_seq[r0]];
    df_t_mla_attention(m->ds_q, r0, r1 - r0, m->pos[r0], nh, dn, dr, dv, L->kv_b, kv->k[l],
                       kv->v[l], m->mla_scale, m->ds_qabs, m->ds_lat, m->scratch, m->ds_att);
    r0 = r1;
  }
  df_t_linear(m->ds_att, 0, R, L->o, NULL, m->tmp);
}
