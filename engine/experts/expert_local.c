/* engine/experts/expert_local.c — in-process expert backend; see expert_local.h. */
#include "engine/experts/expert_local.h"

#include <stdio.h>
#include <stdlib.h>


typedef struct local_be {
  df_expert_backend base;
  df_expert_weights_fn weights;
  const void *owner;
  df_t_tensor *g, *u; /* [max_rows * top_k, moe_intermediate] fp32 scratch */
} local_be;

int df_expert_check_scales(int layer, int expert, const df_t_tensor *gate,
                           const df_t_tensor *up, const df_t_tensor *down, char *err,
                           size_t errlen) {
  const df_t_tensor *w[3] = {gate, up, down};
  static const char *const part[3] = {"gate (w1)", "up (w3)", "down (w2)"};
  for (int i = 0; i < 3; i++) {
    int64_t row = 0, group = 0;
    if (df_t_mx_scale_check(w[i], &row, &group) == 0) continue;
    snprintf(err, errlen, "layer %d expert %d: the %s weight's E8M0 scales hold 255 (NaN) at "
             "row %lld, group %lld: an MXFP4 scale must be a finite power of two; the "
             "checkpoint is damaged (deltafin verify --deep names the tensor)", layer, expert,
             part[i], (long long)row, (long long)group);
    return -1;
  }
  return 0;
}

static int local_run(df_expert_backend *be, const df_expert_request *req, char *err,
                     size_t errlen) {
  local_be *lb = (local_be *)be;
  const df_t_tensor *gate[128], *up[128], *down[128];
  if (req->n_groups > 128) {
    snprintf(err, errlen, "local experts: %d groups exceed 128", req->n_groups);
    return -1;
  }
  if (req->offsets[req->n_groups] > df_t_size(lb->g, 0)) {
    snprintf(err, errlen, "local experts: %lld rows exceed the planned %lld",
             (long long)req->offsets[req->n_groups], (long long)df_t_size(lb->g, 0));
    return -1;
  }
  for (int gi = 0; gi < req->n_groups; gi++)
  {
    if (lb->weights(lb->owner, req->layer, req->experts[gi], &gate[gi], &up[gi], &down[gi]) !=
        0) {
      snprintf(err, errlen, "local experts: layer %d expert %d does not exist", req->layer,
               req->experts[gi]);
      return -1;
    }
    if (df_expert_check_scales(req->layer, req->experts[gi], gate[gi], up[gi], down[gi], err,
                               errlen) != 0)
      return -1;
  }
  /* every group's experts in two parallel regions (gate+up, then down) */
  df_t_glu_ffn_groups(req->x, req->n_groups, req->offsets, gate, up, down, req->act, lb->g,
                      lb->u, req->y);
  return 0;
}

static void local_destroy(df_expert_backend *be) {
  local_be *lb = (local_be *)be;
  df_t_destroy(&lb->g);
  df_t_destroy(&lb->u);
  free(lb);
}

static const df_expert_backend_ops local_ops = {"local", local_run, local_destroy};

df_expert_backend *df_expert_local_new(df_expert_weights_fn weights, const void *owner,
                                       int64_t max_rows, int64_t I, char *err, size_t errlen) {
  local_be *lb = calloc(1, sizeof *lb);
  if (!lb) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  lb->base.ops = &local_ops;
  lb->base.impl = lb;
  lb->weights = weights;
  lb->owner = owner;
  int64_t shape[2] = {max_rows, I}; /* every routed row of a chunk */
  lb->g = df_t_new_f32(2, shape, err, errlen);
  lb->u = lb->g ? df_t_new_f32(2, shape, err, errlen) : NULL;
  if (!lb->u) {
    local_destroy(&lb->base);
    return NULL;
  }
  return &lb->base;
}
