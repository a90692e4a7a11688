/* engine/layers/bind.c — checked tensor binding; see bind.h. */
#include "engine/layers/bind.h"

#include <stdio.h>
#include <stdlib.h>

void df_binder_free(df_binder *b) {
  for (size_t i = 0; i < b->n_handles; i++) df_t_destroy(&b->handles[i]);
  free(b->handles);
  b->handles = NULL;
  b->n_handles = b->cap_handles = 0;
}

int df_binder_track(df_binder *b, df_t_tensor *t) {
  if (b->n_handles == b->cap_handles) {
    size_t nc = b->cap_handles ? b->cap_handles * 2 : 256;
    df_t_tensor **nh = realloc(b->handles, nc * sizeof *nh);
    if (!nh) return -1;
    b->handles = nh;
    b->cap_handles = nc;
  }
  b->handles[b->n_handles++] = t;
  return 0;
}

static const char *file_of(const df_binder *b, const df_st_tensor *t) {
  return df_st_file_path(b->st, t->file_index);
}

/* Wrap `data` as a tracked handle; NULL + message on failure. */
static df_t_tensor *wrap(df_binder *b, const void *data, df_dtype dt, int ndim,
                         const int64_t *shape, char *err, size_t errlen) {
  df_t_tensor *h = df_t_wrap(data, dt, ndim, shape, err, errlen);
  if (!h) return NULL;
  if (df_binder_track(b, h) != 0) {
    df_t_destroy(&h);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  return h;
}

static void count(df_binder *b, uint64_t nbytes, bool is_expert) {
  b->total += nbytes;
  if (is_expert)
    b->experts += nbytes;
  else
    b->resident += nbytes;
}

const df_t_tensor *df_bind(df_binder *b, const char *name, int ndim, const int64_t *shape,
                           bool optional, bool is_expert, char *err, size_t errlen) {
  const df_st_tensor *t = df_st_find(b->st, name);
  if (!t) {
    if (!optional)
      snprintf(err, errlen, "%s: missing tensor '%s' (required by config.json: %s, %lld layers)",
               b->dir, name, b->cfg->model_type, (long long)b->cfg->num_hidden_layers);
    return NULL;
  }
  if (!df_dtype_is_supported(t->dtype)) {
    snprintf(err, errlen, "%s: tensor '%s' has dtype %s, which is recognised but not supported "
             "yet (supported: BF16, F16, F32)", file_of(b, t), name, df_dtype_name(t->dtype));
    return NULL;
  }
  bool same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char got[128] = "", want[128] = "";
    size_t o = 0;
    for (int i = 0; i < t->ndim; i++)
      o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    o = 0;
    for (int i = 0; i < ndim; i++)
      o += (size_t)snprintf(want + o, sizeof want - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(err, errlen, "%s: tensor '%s' has shape [%s] but config.json implies [%s]",
             file_of(b, t), name, got, want);
    return NULL;
  }
  df_t_tensor *h = wrap(b, t->data, t->dtype, ndim, shape, err, errlen);
  if (!h) return NULL;
  count(b, t->nbytes, is_expert);
  return h;
}

const df_t_tensor *df_bind_linear(df_binder *b, const char *name, int64_t N, int64_t K,
                                  bool is_expert, char *err, size_t errlen) {
  const df_model_config *c = b->cfg;
  const df_st_tensor *t = df_st_find(b->st, name);
  int64_t shape[2] = {N, K};
  if (!t || t->dtype != DF_DT_F8_E4M3) return df_bind(b, name, 2, shape, false, is_expert, err, errlen);
  const char *file = file_of(b, t);
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
  const df_st_tensor *st = df_st_find(b->st, sname);
  if (!st) {
    snprintf(err, errlen, "%s: missing tensor '%s' (the block scales of F8_E4M3 '%s')", b->dir,
             sname, name);
    return NULL;
  }
  if (st->dtype != DF_DT_F32 || st->ndim != 2 || st->shape[0] != gs[0] || st->shape[1] != gs[1]) {
    snprintf(err, errlen, "%s: tensor '%s' must be F32 [%lld, %lld] (weight [%lld, %lld] in "
             "weight_block_size [%lld, %lld] blocks)", file_of(b, st),
             sname, (long long)gs[0], (long long)gs[1], (long long)N, (long long)K,
             (long long)bn, (long long)bk);
    return NULL;
  }
  df_t_tensor *w = wrap(b, t->data, DF_DT_F8_E4M3, 2, shape, err, errlen);
  if (!w) return NULL;
  df_t_tensor *s = wrap(b, st->data, DF_DT_F32, 2, gs, err, errlen);
  if (!s) return NULL;
  if (df_t_set_block_scale(w, s, bn, bk, err, errlen) != 0) return NULL;
  count(b, t->nbytes + st->nbytes, is_expert);
  return w;
}
