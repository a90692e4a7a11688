/* engine/layers/rope.c — RoPE tables; see rope.h. */
#include "engine/layers/rope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* RoPE inverse frequencies per transformers' rope utils (default, linear, yarn). */
static void rope_inv_freq(const df_model_config *c, double *inv, float *attn_factor) {
  int64_t d = c->head_dim, h2 = d / 2;
  double base = c->rope_theta;
  const df_rope_scaling *rs = &c->rope_scaling;
  *attn_factor = 1.0f;
  for (int64_t i = 0; i < h2; i++) {
    float e = (float)(2 * i) / (float)d;         /* arange(0, d, 2).float() / d */
    float pf = powf((float)base, e);             /* base ** (...) in fp32 */
    inv[i] = 1.0f / pf;
    if (rs->type == DF_ROPE_LINEAR) inv[i] = (float)inv[i] / (float)rs->factor;
    if (rs->type == DF_ROPE_YARN) {
      double factor = rs->factor;
      int64_t omax = rs->original_max_position_embeddings > 0 ? rs->original_max_position_embeddings
                                                             : c->max_position_embeddings;
      /* find_correction_range(beta_fast, beta_slow, d, base, omax), truncated */
      double lo = floor(d * log((double)omax / (rs->beta_fast * 2 * M_PI)) / (2 * log(base)));
      double hi = ceil(d * log((double)omax / (rs->beta_slow * 2 * M_PI)) / (2 * log(base)));
      if (lo < 0) lo = 0;
      if (hi > d - 1) hi = d - 1;
      if (lo == hi) hi += 0.001;
      float ramp = ((float)i - (float)lo) / (float)(hi - lo);
      ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
      float extrap_factor = 1.0f - ramp;
      float inv_extrap = 1.0f / pf, inv_interp = 1.0f / ((float)factor * pf);
      inv[i] = inv_interp * (1.0f - extrap_factor) + inv_extrap * extrap_factor;
      *attn_factor = rs->attention_factor > 0
                         ? (float)rs->attention_factor
                         : (factor <= 1 ? 1.0f : (float)(0.1 * log(factor) + 1.0));
      if (rs->attention_factor <= 0 && rs->mscale > 0 && rs->mscale_all_dim > 0) {
        /* deepseek_v3: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) */
        double a = factor <= 1 ? 1.0 : 0.1 * rs->mscale * log(factor) + 1.0;
        double b = factor <= 1 ? 1.0 : 0.1 * rs->mscale_all_dim * log(factor) + 1.0;
        *attn_factor = (float)(a / b);
      }
    }
  }
}

int df_rope_tables_new(const df_model_config *c, int64_t max_ctx, df_t_tensor **cos_out,
                       df_t_tensor **sin_out, char *err, size_t errlen) {
  int64_t h2 = c->head_dim / 2, n = max_ctx;
  *cos_out = *sin_out = NULL;
  double *inv = calloc((size_t)h2, sizeof *inv);
  if (!inv) {
    snprintf(err, errlen, "out of memory building RoPE tables");
    return -1;
  }
  float af;
  rope_inv_freq(c, inv, &af);
  int64_t shape[2] = {n, h2};
  df_t_tensor *ct = df_t_new_f32(2, shape, err, errlen);
  df_t_tensor *st = ct ? df_t_new_f32(2, shape, err, errlen) : NULL;
  if (!st) {
    df_t_destroy(&ct);
    free(inv);
    return -1;
  }
  float *cs = df_t_f32(ct), *sn = df_t_f32(st);
  for (int64_t p = 0; p < n; p++)
    for (int64_t i = 0; i < h2; i++) {
      float ang = (float)p * (float)inv[i]; /* fp32 outer product, as HF */
      cs[p * h2 + i] = cosf(ang) * af;
      sn[p * h2 + i] = sinf(ang) * af;
    }
  free(inv);
  *cos_out = ct;
  *sin_out = st;
  return 0;
}

const char *df_rope_scaling_note(const df_model_config *c) {
  return c->rope_scaling.type == DF_ROPE_YARN     ? " (yarn)"
         : c->rope_scaling.type == DF_ROPE_LINEAR ? " (linear)"
                                                  : "";
}
