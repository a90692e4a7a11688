/* engine/layers/residual.c — the plain pre-norm residual scheme, and layer teardown; see
 * layer.h. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/kernels/kernels.h"
#include "engine/layers/layer.h"

typedef struct prenorm {
  df_residual base;
  int64_t H;
  float eps;
} prenorm;

static void prenorm_in(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                       const df_t_tensor *x, df_t_tensor *xn) {
  const prenorm *p = (const prenorm *)rs;
  df_t_rmsnorm(x, R, L->norm[s], p->eps, xn);
}

static void prenorm_out(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                        df_t_tensor *x, const df_t_tensor *out) {
  const prenorm *p = (const prenorm *)rs;
  df_k_add(df_t_f32(x), df_t_f32((df_t_tensor *)out), R * p->H);
}

static void prenorm_destroy(df_residual *rs) { free(rs); }

static const df_residual_ops prenorm_ops = {"pre-norm", prenorm_in, prenorm_out, NULL,
                                            prenorm_destroy, NULL};

df_residual *df_residual_prenorm_new(int64_t hidden, float eps, char *err, size_t errlen) {
  prenorm *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  p->base.ops = &prenorm_ops;
  p->H = hidden;
  p->eps = eps;
  return &p->base;
}

df_residual *df_residual_prenorm_of(const df_model_config *c, char *err, size_t errlen) {
  return df_residual_prenorm_new(c->hidden_size, (float)c->rms_norm_eps, err, errlen);
}

void df_layer_clear(df_layer *L) {
  if (L->attn) L->attn->ops->destroy(L->attn);
  if (L->ffn) L->ffn->ops->destroy(L->ffn);
  L->attn = NULL;
  L->ffn = NULL;
  L->norm[0] = L->norm[1] = NULL;
  L->res_norm[0] = L->res_norm[1] = L->res_proj[0] = L->res_proj[1] = NULL;
}
