/* engine/layers/gqa.c — the GQA token mixer; see gqa.h. */
#include "engine/layers/gqa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gqa {
  df_token_mixer base;
  df_gqa_weights w;
  const df_layer_env *env;
  int64_t nh, nkv, hd;
  float eps, scale;
  df_t_tensor *q, *k, *v, *att; /* [R, nh*hd], [R, nkv*hd] x2, [R, nh*hd] scratch */
} gqa;

static void gqa_forward(df_token_mixer *tm, const df_rows *rows, const df_t_tensor *xn,
                        df_t_tensor *out) {
  gqa *g = (gqa *)tm;
  const df_gqa_weights *w = &g->w;
  int64_t R = rows->R, nh = g->nh, nkv = g->nkv, hd = g->hd, l = tm->layer;
  df_t_linear_op qkv[3] = {{xn, 0, R, w->q, w->qb, g->q}, {xn, 0, R, w->k, w->kb, g->k},
                           {xn, 0, R, w->v, w->vb, g->v}};
  df_t_linear_multi(qkv, 3);
  df_t_rmsnorm(g->q, R * nh, w->q_norm, g->eps, g->q);
  df_t_rmsnorm(g->k, R * nkv, w->k_norm, g->eps, g->k);
  df_t_rope(g->q, R, nh, rows->pos, g->env->rope_cos, g->env->rope_sin);
  df_t_rope(g->k, R, nkv, rows->pos, g->env->rope_cos, g->env->rope_sin);
  /* append K/V to each row's own cache: layout [n_kv, ctx, hd] */
  const float *kr = df_t_f32(g->k), *vr = df_t_f32(g->v);
  for (int64_t r = 0; r < R; r++) {
    df_kv_cache *kv = rows->kvs[rows->seq[r]];
    float *kc = df_t_f32(kv->k[l]), *vc = df_t_f32(kv->v[l]);
    for (int64_t h = 0; h < nkv; h++) {
      memcpy(kc + (h * kv->ctx + rows->pos[r]) * hd, kr + (r * nkv + h) * hd, (size_t)hd * 4);
      memcpy(vc + (h * kv->ctx + rows->pos[r]) * hd, vr + (r * nkv + h) * hd, (size_t)hd * 4);
    }
  }
  /* attention per run of rows of one sequence, each over its own cache */
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = df_rows_run_end(rows, r0);
    df_kv_cache *kv = rows->kvs[rows->seq[r0]];
    df_t_attention_rows(g->q, r0, r1 - r0, rows->pos[r0], nh, kv->k[l], kv->v[l], g->scale,
                        g->att, g->env->att_scratch);
    r0 = r1;
  }
  df_t_linear(g->att, 0, R, w->o, w->ob, out);
}

static uint64_t gqa_bytes_per_token(const df_token_mixer *tm) {
  const gqa *g = (const gqa *)tm;
  return (uint64_t)(2 * g->nkv * g->hd) * 4u;
}

static uint64_t gqa_bytes_per_seq(const df_token_mixer *tm) { return 0; }

static int gqa_state_new(const df_token_mixer *tm, df_kv_cache *kv, const df_t_device *dev,
                         char *err, size_t errlen) {
  const gqa *g = (const gqa *)tm;
  int64_t shape[3] = {g->nkv, kv->ctx, g->hd};
  int64_t l = tm->layer;
  kv->k[l] = df_t_new_f32_on(dev, 3, shape, err, errlen);
  kv->v[l] = kv->k[l] ? df_t_new_f32_on(dev, 3, shape, err, errlen) : NULL;
  if (!kv->v[l]) return -1;
  kv->n_kv = g->nkv;
  kv->head_dim = g->hd;
  return 0;
}

static void gqa_describe(const df_token_mixer *tm, df_tm_desc *d, df_tm_layer *t) {
  const gqa *g = (const gqa *)tm;
  t->q = g->w.q;
  t->k = g->w.k;
  t->v = g->w.v;
  t->o = g->w.o;
  t->qb = g->w.qb;
  t->kb = g->w.kb;
  t->vb = g->w.vb;
  t->ob = g->w.ob;
  t->q_norm = g->w.q_norm;
  t->k_norm = g->w.k_norm;
}

static void gqa_destroy(df_token_mixer *tm) { free(tm); }

static const df_token_mixer_ops gqa_ops = {"gqa", "fp32 K and V", gqa_forward, gqa_bytes_per_token,
                                           gqa_bytes_per_seq, gqa_state_new, gqa_describe,
                                           gqa_destroy};

df_token_mixer *df_gqa_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_gqa_weights *w, int64_t n_head, int64_t n_kv,
                           int64_t head_dim, float eps, char *err, size_t errlen) {
  gqa *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  g->base.ops = &gqa_ops;
  g->base.layer = layer;
  g->w = *w;
  g->env = env;
  g->nh = n_head;
  g->nkv = n_kv;
  g->hd = head_dim;
  g->eps = eps;
  g->scale = 1.0f / sqrtf((float)head_dim);
  int64_t R = env->max_rows;
  if (!(g->q = df_ws_f32(ws, "gqa.q", R, n_head * head_dim, err, errlen)) ||
      !(g->k = df_ws_f32(ws, "gqa.k", R, n_kv * head_dim, err, errlen)) ||
      !(g->v = df_ws_f32(ws, "gqa.v", R, n_kv * head_dim, err, errlen)) ||
      !(g->att = df_ws_f32(ws, "gqa.att", R, n_head * head_dim, err, errlen))) {
    free(g);
    return NULL;
  }
  return &g->base;
}
