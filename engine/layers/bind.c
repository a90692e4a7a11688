/* engine/layers/bind.c — checked tensor binding; see bind.h. */
#include "engine/layers/bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

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

/* "d0, d1, ..." of a shape into buf. */
static const char *shape_str(const int64_t *shape, int ndim, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < ndim && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
  return buf;
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
    char got[128], want[128];
    snprintf(err, errlen, "%s: tensor '%s' has shape [%s] but config.json implies [%s]",
             file_of(b, t), name, shape_str(t->shape, t->ndim, got, sizeof got),
             shape_str(shape, ndim, want, sizeof want));
    return NULL;
  }
  df_t_tensor *h = wrap(b, t->data, t->dtype, ndim, shape, err, errlen);
  if (!h) return NULL;
  count(b, t->nbytes, is_expert);
  return h;
}

/* One part of an MXFP4 pair: U8 of exactly `want`, else the error line (what it is, what
 * config.json implies, and what the part is). */
static bool mx_part_ok(const df_binder *b, const df_st_tensor *t, const int64_t want[2],
                       const char *what, int64_t N, int64_t K, char *err, size_t errlen) {
  if (t->dtype == DF_DT_U8 && t->ndim == 2 && t->shape[0] == want[0] && t->shape[1] == want[1])
    return true;
  char got[128], exp[64];
  snprintf(err, errlen, "%s: tensor '%s' is %s [%s] but config.json implies U8 [%s] (%s of an "
           "MXFP4 [%lld, %lld] weight)", file_of(b, t), t->name, df_dtype_name(t->dtype),
           shape_str(t->shape, t->ndim, got, sizeof got), shape_str(want, 2, exp, sizeof exp),
           what, (long long)N, (long long)K);
  return false;
}

/* `<base>.weight_packed` + `<base>.weight_scale` bound as one F4 (MXFP4) weight of logical
 * shape [N, K]; see bind.h. */
static const df_t_tensor *bind_mxfp4(df_binder *b, const char *base, const df_st_tensor *pt,
                                     const df_st_tensor *st, int64_t N, int64_t K,
                                     bool is_expert, char *err, size_t errlen) {
  if (b->cfg->quant != DF_QUANT_MXFP4) {
    snprintf(err, errlen, "%s: tensor '%s' is an MXFP4 pair (weight_packed + weight_scale) but "
             "config.json's quantization_config does not declare compressed-tensors MXFP4 "
             "(format mxfp4-pack-quantized)", file_of(b, pt), pt->name);
    return NULL;
  }
  if (K % 32 != 0 || K <= 0) {
    snprintf(err, errlen, "%s: tensor '%s' is MXFP4 but config.json implies a [%lld, %lld] "
             "weight, whose row length is not a multiple of the MX block size 32", file_of(b, pt),
             pt->name, (long long)N, (long long)K);
    return NULL;
  }
  int64_t ps[2] = {N, K / 2}, ss[2] = {N, K / 32}, shape[2] = {N, K};
  if (!mx_part_ok(b, pt, ps, "the E2M1 pairs, low nibble = even column", N, K, err, errlen) ||
      !mx_part_ok(b, st, ss, "the E8M0 scales, one per 32 columns", N, K, err, errlen))
    return NULL;
  /* a routed expert's scales are scanned before its first use (df_expert_check_scales):
   * reading every expert's scales here would read ~85 GB of Kimi K3 at load */
  int64_t nan_at = is_expert ? -1 : df_k_mxfp4_find_nan_scale((const uint8_t *)st->data,
                                                              N * (K / 32));
  if (nan_at >= 0) {
    snprintf(err, errlen, "%s: tensor '%s' holds E8M0 255 (NaN) at row %lld, group %lld: an "
             "MXFP4 scale must be a finite power of two (OCP MX v1.0); the checkpoint is damaged",
             file_of(b, st), st->name, (long long)(nan_at / (K / 32)),
             (long long)(nan_at % (K / 32)));
    return NULL;
  }
  df_t_tensor *w = wrap(b, pt->data, DF_DT_F4, 2, shape, err, errlen);
  if (!w) return NULL;
  df_t_tensor *s = wrap(b, st->data, DF_DT_U8, 2, ss, err, errlen);
  if (!s) return NULL;
  if (df_t_set_mx_scale(w, s, err, errlen) != 0) {
    char m[256];
    snprintf(m, sizeof m, "%s", err);
    snprintf(err, errlen, "%s: MXFP4 weight '%s': %s", b->dir, base, m);
    return NULL;
  }
  count(b, pt->nbytes + st->nbytes, is_expert);
  return w;
}

const df_t_tensor *df_bind_linear(df_binder *b, const char *name, int64_t N, int64_t K,
                                  bool is_expert, char *err, size_t errlen) {
  const df_model_config *c = b->cfg;
  const df_st_tensor *t = df_st_find(b->st, name);
  int64_t shape[2] = {N, K};
  size_t nl = strlen(name);
  if (!t && nl > 7 && !strcmp(name + nl - 7, ".weight") && nl < 280) {
    char pn[300], sn[300];
    snprintf(pn, sizeof pn, "%s_packed", name);
    snprintf(sn, sizeof sn, "%s_scale", name);
    const df_st_tensor *pt = df_st_find(b->st, pn), *st = df_st_find(b->st, sn);
    if (pt && st) {
      char base[300];
      snprintf(base, sizeof base, "%.*s", (int)(nl - 7), name);
      return bind_mxfp4(b, base, pt, st, N, K, is_expert, err, errlen);
    }
    if (pt || st) {
      snprintf(err, errlen, "%s: missing tensor '%s' (tensor '%s' is there: an MXFP4 weight "
               "needs both '%s' and '%s')", b->dir, pt ? sn : pn, pt ? pn : sn, pn, sn);
      return NULL;
    }
  }
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
