/* engine/kv_cache.c — preallocated, truncatable KV cache (MHA or MLA latent); see
 * kv_cache.h. */
#include "engine/kv_cache.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

df_kv_cache *df_kv_new(int64_t n_layers, int64_t n_kv, int64_t head_dim, int64_t ctx, char *err,
                       size_t errlen) {
  return df_kv_new_on(NULL, n_layers, n_kv, head_dim, ctx, err, errlen);
}

/* Fill every layer slot of an empty cache with a zeroed k [k_shape] and v [v_shape] on
 * dev; on failure the cache is destroyed and err says how many bytes the whole took. */
static df_kv_cache *fill_layers(df_kv_cache *kv, const df_t_device *dev, int ndim,
                                const int64_t *k_shape, const int64_t *v_shape,
                                const char *what, char *err, size_t errlen) {
  for (int64_t l = 0; l < kv->n_layers; l++) {
    kv->k[l] = df_t_new_f32_on(dev, ndim, k_shape, err, errlen);
    kv->v[l] = kv->k[l] ? df_t_new_f32_on(dev, ndim, v_shape, err, errlen) : NULL;
    if (!kv->v[l]) {
      char inner[256];
      snprintf(inner, sizeof inner, "%s", err);
      snprintf(err, errlen, "%s of %llu bytes (ctx %lld tokens): %s", what,
               (unsigned long long)df_kv_bytes(kv), (long long)kv->ctx, inner);
      df_kv_destroy(&kv);
      return NULL;
    }
  }
  return kv;
}

df_kv_cache *df_kv_new_on(const df_t_device *dev, int64_t n_layers, int64_t n_kv,
                          int64_t head_dim, int64_t ctx, char *err, size_t errlen) {
  if (n_layers <= 0 || n_kv <= 0 || head_dim <= 0 || ctx <= 0) {
    snprintf(err, errlen, "KV cache: sizes must be positive (layers %lld, kv heads %lld, "
             "head_dim %lld, ctx %lld)", (long long)n_layers, (long long)n_kv,
             (long long)head_dim, (long long)ctx);
    return NULL;
  }
  if (n_kv > INT64_MAX / head_dim / ctx / 8 / n_layers) {
    snprintf(err, errlen, "KV cache: size overflows");
    return NULL;
  }
  df_kv_cache *kv = df_kv_new_layers(n_layers, ctx, (uint64_t)(2 * n_layers * n_kv * head_dim) * 4u,
                                     0, err, errlen);
  if (!kv) return NULL;
  kv->n_kv = n_kv;
  kv->head_dim = head_dim;
  int64_t shape[3] = {n_kv, ctx, head_dim};
  return fill_layers(kv, dev, 3, shape, shape, "KV cache", err, errlen);
}

df_kv_cache *df_kv_new_mla(int64_t n_layers, int64_t kv_lora_rank, int64_t rope_dim, int64_t ctx,
                           char *err, size_t errlen) {
  return df_kv_new_mla_on(NULL, n_layers, kv_lora_rank, rope_dim, ctx, err, errlen);
}

df_kv_cache *df_kv_new_mla_on(const df_t_device *dev, int64_t n_layers, int64_t kv_lora_rank,
                              int64_t rope_dim, int64_t ctx, char *err, size_t errlen) {
  if (n_layers <= 0 || kv_lora_rank <= 0 || rope_dim <= 0 || ctx <= 0) {
    snprintf(err, errlen, "KV cache: sizes must be positive (layers %lld, kv_lora_rank %lld, "
             "rope_dim %lld, ctx %lld)", (long long)n_layers, (long long)kv_lora_rank,
             (long long)rope_dim, (long long)ctx);
    return NULL;
  }
  if (kv_lora_rank + rope_dim > INT64_MAX / ctx / 8 / n_layers) {
    snprintf(err, errlen, "KV cache: size overflows");
    return NULL;
  }
  df_kv_cache *kv = df_kv_new_layers(
      n_layers, ctx, (uint64_t)(n_layers * (kv_lora_rank + rope_dim)) * 4u, 0, err, errlen);
  if (!kv) return NULL;
  kv->head_dim = rope_dim;
  kv->kv_lora_rank = kv_lora_rank;
  int64_t sc[2] = {ctx, kv_lora_rank}, sr[2] = {ctx, rope_dim};
  return fill_layers(kv, dev, 2, sc, sr, "MLA cache", err, errlen);
}

void df_kv_destroy(df_kv_cache **kvp) {
  if (!kvp || !*kvp) return;
  df_kv_cache *kv = *kvp;
  for (int64_t l = 0; l < kv->n_layers; l++) {
    if (kv->k) df_t_destroy(&kv->k[l]);
    if (kv->v) df_t_destroy(&kv->v[l]);
  }
  if (kv->rec)
    for (int64_t l = 0; l < kv->n_layers; l++)
      if (kv->rec[l]) kv->rec[l]->ops->destroy(kv->rec[l]);
  free(kv->rec);
  free(kv->k);
  free(kv->v);
  free(kv);
  *kvp = NULL;
}

static bool recs_can(const df_kv_cache *kv, int64_t n) {
  for (int64_t l = 0; l < kv->n_layers; l++)
    if (kv->rec[l] && !kv->rec[l]->ops->can_rollback(kv->rec[l], n)) return false;
  return true;
}

static void recs_rollback(df_kv_cache *kv, int64_t n) {
  for (int64_t l = 0; l < kv->n_layers; l++)
    if (kv->rec[l]) kv->rec[l]->ops->rollback(kv->rec[l], n);
}

bool df_kv_can_truncate(const df_kv_cache *kv, int64_t n) {
  return n >= 0 && n <= kv->len && recs_can(kv, n);
}

void df_kv_truncate(df_kv_cache *kv, int64_t n) {
  assert(n >= 0 && n <= kv->len);
  if (!recs_can(kv, n)) {
    fprintf(stderr, "df_kv_truncate: a recurrent state cannot be rolled back from %lld to %lld "
            "positions (only to 0 or within its logged rows)\n", (long long)kv->len,
            (long long)n);
    abort();
  }
  if (n < kv->len) recs_rollback(kv, n);
  kv->len = n;
}

int64_t df_kv_truncate_or_reset(df_kv_cache *kv, int64_t n) {
  if (!df_kv_can_truncate(kv, n)) n = 0;
  df_kv_truncate(kv, n);
  return n;
}

int64_t df_kv_rewind(df_kv_cache *kv, int64_t n) {
  if (n < 0) n = 0;
  if (!recs_can(kv, n)) n = 0;
  recs_rollback(kv, n);
  kv->len = n;
  return n;
}

uint64_t df_kv_bytes_per_token(const df_kv_cache *kv) { return kv->bytes_per_token; }

uint64_t df_kv_bytes(const df_kv_cache *kv) {
  return kv->bytes_per_token * (uint64_t)kv->ctx + kv->bytes_per_seq;
}

df_kv_cache *df_kv_new_layers(int64_t n_layers, int64_t ctx, uint64_t bytes_per_token,
                              uint64_t bytes_per_seq, char *err, size_t errlen) {
  if (n_layers <= 0 || ctx <= 0) {
    snprintf(err, errlen, "KV cache: sizes must be positive (layers %lld, ctx %lld)",
             (long long)n_layers, (long long)ctx);
    return NULL;
  }
  if (bytes_per_token > (uint64_t)INT64_MAX / (uint64_t)ctx ||
      bytes_per_seq > (uint64_t)INT64_MAX - bytes_per_token * (uint64_t)ctx) {
    snprintf(err, errlen, "KV cache: size overflows");
    return NULL;
  }
  df_kv_cache *kv = calloc(1, sizeof *kv);
  if (!kv) goto oom;
  kv->n_layers = n_layers;
  kv->ctx = ctx;
  kv->bytes_per_token = bytes_per_token;
  kv->bytes_per_seq = bytes_per_seq;
  kv->k = calloc((size_t)n_layers, sizeof *kv->k);
  kv->v = calloc((size_t)n_layers, sizeof *kv->v);
  kv->rec = calloc((size_t)n_layers, sizeof *kv->rec);
  if (!kv->k || !kv->v || !kv->rec) goto oom;
  return kv;
oom:
  snprintf(err, errlen, "KV cache: out of memory");
  df_kv_destroy(&kv);
  return NULL;
}
