/* engine/layers/attn_res.c — Block Attention Residuals; see attn_res.h. */
#include "engine/layers/attn_res.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

typedef struct attn_res {
  df_residual base;
  int64_t H, block, n_layers, max_blocks, max_rows;
  float eps;
  float *fold;          /* [n_layers * 2 + 1, H] w = res_norm * res_proj[0]; last row: output */
  df_t_tensor *blocks;  /* [max_blocks * max_rows, H] snapshots, block b row r at b*max_rows+r */
  df_t_tensor *mixed;   /* [max_rows, H] the output mix before it replaces the stream */
  float *k;             /* [H] one normalised source */
  float *s;             /* [max_blocks + 1] scores, then probabilities */
  int64_t n_blocks;     /* snapshots taken in the current chunk */
  bool reset;           /* the stream was just snapshotted: the next attention output replaces it */
} attn_res;

/* out[r] = Mix(blocks[0..nb), x[r]; w) for r < R (out may not alias x or the blocks). */
static void mix(attn_res *a, int64_t R, const float *x, const float *w, float *out) {
  int64_t H = a->H, nb = a->n_blocks;
  const float *blk = df_t_f32(a->blocks);
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + r * H;
    float mx = -INFINITY;
    for (int64_t i = 0; i <= nb; i++) {
      const float *v = i < nb ? blk + (i * a->max_rows + r) * H : xr;
      float inv = 1.0f / sqrtf(df_k_dot(v, v, H) / (float)H + a->eps);
      for (int64_t d = 0; d < H; d++) a->k[d] = v[d] * inv;
      a->s[i] = df_k_dot(a->k, w, H);
      if (a->s[i] > mx) mx = a->s[i];
    }
    float sum = 0.0f;
    for (int64_t i = 0; i <= nb; i++) {
      a->s[i] = expf(a->s[i] - mx);
      sum += a->s[i];
    }
    float *o = out + r * H;
    memset(o, 0, (size_t)H * sizeof(float));
    for (int64_t i = 0; i <= nb; i++)
      df_k_axpy(o, a->s[i] / sum, i < nb ? blk + (i * a->max_rows + r) * H : xr, H);
  }
}

static void ar_in(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                  const df_t_tensor *x, df_t_tensor *xn) {
  attn_res *a = (attn_res *)rs;
  int64_t H = a->H;
  const float *xp = df_t_f32((df_t_tensor *)x);
  float *h = df_t_f32(xn);
  if (s == 0) {
    if (l == 0) a->n_blocks = 0; /* a new chunk: prefix = the embedding, no blocks */
    if (a->n_blocks > 0)
      mix(a, R, xp, a->fold + (l * 2) * H, h);
    else
      memcpy(h, xp, (size_t)(R * H) * sizeof(float));
    if (l % a->block == 0) { /* snapshot the raw prefix BEFORE attention, then reset it */
      float *b = df_t_f32(a->blocks) + a->n_blocks * a->max_rows * H;
      memcpy(b, xp, (size_t)(R * H) * sizeof(float));
      a->n_blocks++;
      a->reset = true;
    }
  } else {
    mix(a, R, xp, a->fold + (l * 2 + 1) * H, h);
  }
  df_t_rmsnorm(xn, R, L->norm[s], a->eps, xn);
}

static void ar_out(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                   df_t_tensor *x, const df_t_tensor *out) {
  attn_res *a = (attn_res *)rs;
  float *xp = df_t_f32(x);
  const float *o = df_t_f32((df_t_tensor *)out);
  if (s == 0 && a->reset) { /* prefix was None: it becomes this attention output */
    memcpy(xp, o, (size_t)(R * a->H) * sizeof(float));
    a->reset = false;
  } else {
    df_k_add(xp, o, R * a->H);
  }
}

static void ar_final(df_residual *rs, int64_t R, df_t_tensor *x) {
  attn_res *a = (attn_res *)rs;
  float *m = df_t_f32(a->mixed);
  mix(a, R, df_t_f32(x), a->fold + a->n_layers * 2 * a->H, m);
  memcpy(df_t_f32(x), m, (size_t)(R * a->H) * sizeof(float));
}

static void ar_destroy(df_residual *rs) {
  attn_res *a = (attn_res *)rs;
  free(a->fold);
  free(a->k);
  free(a->s);
  free(a);
}

/* Layer l+1's token-side mix (blocks before its own snapshot, as ar_in computes it) or, after
 * the last layer, the output mix; the stream itself while no block exists. */
static void ar_next_in(df_residual *rs, int64_t l, int64_t R, const df_t_tensor *x, float *out) {
  attn_res *a = (attn_res *)rs;
  const float *xp = df_t_f32((df_t_tensor *)x);
  if (a->n_blocks == 0)
    memcpy(out, xp, (size_t)(R * a->H) * sizeof(float));
  else
    mix(a, R, xp, a->fold + (l + 1 < a->n_layers ? (l + 1) * 2 : a->n_layers * 2) * a->H, out);
}

static const df_residual_ops attn_res_ops = {"attention residuals", ar_in, ar_out, ar_final,
                                             ar_destroy, ar_next_in};

/* fold[H] = norm * proj[0], each widened to fp32 (the reference's float32(norm.weight) *
 * float32(proj.weight[0])). */
static void fold_into(float *fold, const df_t_tensor *norm, const df_t_tensor *proj, int64_t H) {
  for (int64_t d = 0; d < H; d++)
    fold[d] = df_k_to_f32(df_t_data(norm), df_t_dtype(norm), d) *
              df_k_to_f32(df_t_data(proj), df_t_dtype(proj), d);
}

df_residual *df_residual_attn_res_new(const df_layer_env *env, df_ws *ws, const df_layer *layers,
                                      int64_t n_layers, int64_t block, float eps,
                                      const df_t_tensor *out_norm, const df_t_tensor *out_proj,
                                      char *err, size_t errlen) {
  int64_t H = env->cfg->hidden_size;
  attn_res *a = calloc(1, sizeof *a);
  if (!a) goto oom;
  a->base.ops = &attn_res_ops;
  a->H = H;
  a->block = block;
  a->n_layers = n_layers;
  a->eps = eps;
  a->max_rows = env->max_rows;
  a->max_blocks = (n_layers + block - 1) / block;
  a->fold = malloc((size_t)((n_layers * 2 + 1) * H) * sizeof(float));
  a->k = malloc((size_t)H * sizeof(float));
  a->s = malloc((size_t)(a->max_blocks + 1) * sizeof(float));
  if (!a->fold || !a->k || !a->s) goto oom;
  for (int64_t l = 0; l < n_layers; l++)
    for (int s = 0; s < 2; s++) {
      float *f = a->fold + (l * 2 + s) * H;
      if (l == 0 && s == 0) { /* never read: layer 0's attention reads the embedding */
        memset(f, 0, (size_t)H * sizeof(float));
        continue;
      }
      if (!layers[l].res_norm[s] || !layers[l].res_proj[s]) {
        snprintf(err, errlen, "attention residuals: layer %lld has no %s mix weights",
                 (long long)l, s ? "mlp_res" : "self_attention_res");
        goto fail;
      }
      fold_into(f, layers[l].res_norm[s], layers[l].res_proj[s], H);
    }
  fold_into(a->fold + n_layers * 2 * H, out_norm, out_proj, H);
  if (!(a->blocks = df_ws_f32(ws, "attn_res.blocks", a->max_blocks * a->max_rows, H, err,
                              errlen)) ||
      !(a->mixed = df_ws_f32(ws, "attn_res.mixed", a->max_rows, H, err, errlen)))
    goto fail;
  return &a->base;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  if (a) ar_destroy(&a->base);
  return NULL;
}
