/* engine/layers/mla.c — the MLA token mixer; see mla.h. */
#include "engine/layers/mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

typedef struct mla {
  df_token_mixer base;
  df_mla_weights w;
  df_mla_dims d;
  const df_layer_env *env;
  df_t_tensor *q;    /* [R, nh*(dn+dr)] */
  df_t_tensor *qa;   /* [R, q_lora_rank] */
  df_t_tensor *ckv;  /* [R, KL+dr] latent + RoPE key of the new rows */
  df_t_tensor *qabs; /* [R, nh*KL] absorbed queries */
  df_t_tensor *lat;  /* [R, nh*KL] attention output in latent space */
  df_t_tensor *att;  /* [R, nh*dv] */
  df_t_tensor *gate; /* [R, nh*dv] output gate logits, when w.g */
} mla;

static double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

float df_mla_scale(const df_model_config *c) {
  double scale = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
  const df_rope_scaling *rs = &c->rope_scaling;
  if (rs->type != DF_ROPE_DEFAULT && rs->mscale_all_dim > 0) {
    double ms = yarn_mscale(rs->factor, rs->mscale_all_dim);
    scale = scale * ms * ms;
  }
  return (float)scale;
}

static void mla_forward(df_token_mixer *tm, const df_rows *rows, const df_t_tensor *xn,
                        df_t_tensor *out) {
  mla *a = (mla *)tm;
  const df_mla_weights *w = &a->w;
  int64_t R = rows->R, l = tm->layer, nh = a->d.n_head, dn = a->d.dn, dr = a->d.dr,
          dv = a->d.dv, KL = a->d.kv_lora_rank;
  float eps = a->d.eps;
  if (w->q_a) {
    df_t_linear(xn, 0, R, w->q_a, NULL, a->qa);
    df_t_rmsnorm(a->qa, R, w->q_a_norm, eps, a->qa);
    df_t_linear(a->qa, 0, R, w->q_b, NULL, a->q);
  } else {
    df_t_linear(xn, 0, R, w->q, NULL, a->q);
  }
  df_t_linear(xn, 0, R, w->kv_a, NULL, a->ckv);
  float *ckv = df_t_f32(a->ckv), *q = df_t_f32(a->q);
  for (int64_t r = 0; r < R; r++) /* kv_a_layernorm on the latent part of each row */
    df_k_rmsnorm(ckv + r * (KL + dr), 1, KL, df_t_data(w->kv_a_norm), df_t_dtype(w->kv_a_norm),
                 eps, ckv + r * (KL + dr));
  if (!a->d.nope) {
    const float *cs = df_t_f32(a->env->rope_cos), *sn = df_t_f32(a->env->rope_sin);
    df_k_rope_slices(q + dn, R, nh * (dn + dr), nh, dn + dr, dr, a->d.rope_interleave,
                     rows->pos, cs, sn);
    df_k_rope_slices(ckv + KL, R, KL + dr, 1, 0, dr, a->d.rope_interleave, rows->pos, cs, sn);
  }
  /* append each row's latent and RoPE key to its own sequence's cache */
  for (int64_t r = 0; r < R; r++) {
    df_kv_cache *kv = rows->kvs[rows->seq[r]];
    memcpy(df_t_f32(kv->k[l]) + rows->pos[r] * KL, ckv + r * (KL + dr), (size_t)KL * sizeof(float));
    memcpy(df_t_f32(kv->v[l]) + rows->pos[r] * dr, ckv + r * (KL + dr) + KL,
           (size_t)dr * sizeof(float));
  }
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = df_rows_run_end(rows, r0);
    df_kv_cache *kv = rows->kvs[rows->seq[r0]];
    if (rows->block_full) { /* each row sees the whole run: one call per row at its end */
      for (int64_t r = r0; r < r1; r++)
        df_t_mla_attention(a->q, r, 1, rows->pos[r1 - 1], nh, dn, dr, dv, w->kv_b, kv->k[l],
                           kv->v[l], a->d.scale, a->qabs, a->lat, a->env->att_scratch, a->att);
    } else {
      df_t_mla_attention(a->q, r0, r1 - r0, rows->pos[r0], nh, dn, dr, dv, w->kv_b, kv->k[l],
                         kv->v[l], a->d.scale, a->qabs, a->lat, a->env->att_scratch, a->att);
    }
    r0 = r1;
  }
  if (w->g) { /* att *= sigmoid(g_proj xn), after the heads' concat, before o_proj */
    df_t_linear(xn, 0, R, w->g, NULL, a->gate);
    float *at = df_t_f32(a->att);
    const float *gt = df_t_f32(a->gate);
    for (int64_t i = 0; i < R * nh * dv; i++) at[i] = at[i] * (1.0f / (1.0f + expf(-gt[i])));
  }
  df_t_linear(a->att, 0, R, w->o, NULL, out);
}

static uint64_t mla_bytes_per_token(const df_token_mixer *tm) {
  const mla *a = (const mla *)tm;
  return (uint64_t)(a->d.kv_lora_rank + a->d.dr) * 4u;
}

static uint64_t mla_bytes_per_seq(const df_token_mixer *tm) { return 0; }

static int mla_state_new(const df_token_mixer *tm, df_kv_cache *kv, const df_t_device *dev,
                         char *err, size_t errlen) {
  const mla *a = (const mla *)tm;
  int64_t sc[2] = {kv->ctx, a->d.kv_lora_rank}, sr[2] = {kv->ctx, a->d.dr}, l = tm->layer;
  kv->k[l] = df_t_new_f32_on(dev, 2, sc, err, errlen);
  kv->v[l] = kv->k[l] ? df_t_new_f32_on(dev, 2, sr, err, errlen) : NULL;
  if (!kv->v[l]) return -1;
  kv->head_dim = a->d.dr;
  kv->kv_lora_rank = a->d.kv_lora_rank;
  return 0;
}

static void mla_describe(const df_token_mixer *tm, df_tm_desc *d, df_tm_layer *t) {
  const mla *a = (const mla *)tm;
  t->q = a->w.q;
  t->q_a = a->w.q_a;
  t->q_a_norm = a->w.q_a_norm;
  t->q_b = a->w.q_b;
  t->kv_a = a->w.kv_a;
  t->kv_a_norm = a->w.kv_a_norm;
  t->kv_b = a->w.kv_b;
  t->o = a->w.o;
  d->mla = true;
  d->q_lora_rank = a->d.q_lora_rank;
  d->kv_lora_rank = a->d.kv_lora_rank;
  d->dn = a->d.dn;
  d->dr = a->d.dr;
  d->dv = a->d.dv;
  d->rope_interleave = a->d.rope_interleave;
  d->mla_scale = a->d.scale;
}

static void mla_destroy(df_token_mixer *tm) { free(tm); }

static const df_token_mixer_ops mla_ops = {"mla", "fp32 latent c_kv + shared k_rope, MLA",
                                           mla_forward, mla_bytes_per_token,
                                           mla_bytes_per_seq, mla_state_new, mla_describe,
                                           mla_destroy};

/* NoPE / gated MLA: describe NULL, the torch compute path does not run it yet. */
static const df_token_mixer_ops mla_nope_ops = {"mla", "fp32 latent c_kv + shared k, NoPE MLA",
                                                mla_forward, mla_bytes_per_token,
                                                mla_bytes_per_seq, mla_state_new, NULL,
                                                mla_destroy};

df_token_mixer *df_mla_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_mla_weights *w, const df_mla_dims *dims, char *err,
                           size_t errlen) {
  mla *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  a->base.ops = dims->nope || w->g ? &mla_nope_ops : &mla_ops;
  a->base.layer = layer;
  a->w = *w;
  a->d = *dims;
  a->env = env;
  int64_t R = env->max_rows, nh = dims->n_head, dn = dims->dn, dr = dims->dr, dv = dims->dv,
          KL = dims->kv_lora_rank, ql = dims->q_lora_rank > 0 ? dims->q_lora_rank : 1;
  if (!(a->q = df_ws_f32(ws, "mla.q", R, nh * (dn + dr), err, errlen)) ||
      !(a->qa = df_ws_f32(ws, "mla.qa", R, ql, err, errlen)) ||
      !(a->ckv = df_ws_f32(ws, "mla.ckv", R, KL + dr, err, errlen)) ||
      !(a->qabs = df_ws_f32(ws, "mla.qabs", R, nh * KL, err, errlen)) ||
      !(a->lat = df_ws_f32(ws, "mla.lat", R, nh * KL, err, errlen)) ||
      !(a->att = df_ws_f32(ws, "mla.att", R, nh * dv, err, errlen)) ||
      (w->g && !(a->gate = df_ws_f32(ws, "mla.gate", R, nh * dv, err, errlen)))) {
    free(a);
    return NULL;
  }
  return &a->base;
}
