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

bool df_kv_has_rec(const df_kv_cache *kv) {
  if (!kv->rec) return false;
  for (int64_t l = 0; l < kv->n_layers; l++)
    if (kv->rec[l]) return true;
  return false;
}

/* ---- snapshots ------------------------------------------------------------------------ */

/* One layer of a snapshot: its layout in the cache it was taken from, and its state copy. */
typedef struct snap_layer {
  int64_t k_per_tok, v_per_tok; /* floats per position of k[l], v[l]; -1 when absent */
  const df_kv_rec_ops *ops;     /* kind of its recurrent state, or NULL */
  df_kv_rec_snap *rec;          /* its copy (owned), or NULL */
} snap_layer;

struct df_kv_snap {
  int64_t len, n_layers;
  uint64_t bytes;
  snap_layer layer[]; /* [n_layers] */
};

/* Floats per position of a layer's K/V tensor t (numel / ctx), -1 when the slot is empty. */
static int64_t per_tok(const df_t_tensor *t, int64_t ctx) {
  return t ? df_t_numel(t) / ctx : -1;
}

/* "K/V of k + v floats per position", or "no K/V". */
static void kv_width(char *buf, size_t cap, int64_t k, int64_t v) {
  if (k < 0 && v < 0)
    snprintf(buf, cap, "no K/V");
  else
    snprintf(buf, cap, "K/V of %lld + %lld floats per position", (long long)(k < 0 ? 0 : k),
             (long long)(v < 0 ? 0 : v));
}

static bool has_kv(const df_kv_cache *kv) {
  for (int64_t l = 0; l < kv->n_layers; l++)
    if (kv->k[l] || kv->v[l]) return true;
  return false;
}

df_kv_snap *df_kv_snap_take(const df_kv_cache *kv, char *err, size_t errlen) {
  size_t hb = sizeof(df_kv_snap) + (size_t)kv->n_layers * sizeof(snap_layer);
  df_kv_snap *s = calloc(1, hb);
  if (!s) {
    snprintf(err, errlen, "KV snapshot: out of memory (%zu bytes)", hb);
    return NULL;
  }
  s->len = kv->len;
  s->n_layers = kv->n_layers;
  s->bytes = hb;
  for (int64_t l = 0; l < kv->n_layers; l++) {
    snap_layer *sl = &s->layer[l];
    sl->k_per_tok = per_tok(kv->k[l], kv->ctx);
    sl->v_per_tok = per_tok(kv->v[l], kv->ctx);
    const df_kv_rec *r = kv->rec ? kv->rec[l] : NULL;
    if (!r) continue;
    sl->ops = r->ops;
    uint64_t b = 0;
    char inner[256];
    sl->rec = r->ops->snap_take(r, kv->len, &b, inner, sizeof inner);
    if (!sl->rec) {
      snprintf(err, errlen, "KV snapshot of layer %lld: %s", (long long)l, inner);
      df_kv_snap_destroy(&s);
      return NULL;
    }
    s->bytes += b;
  }
  return s;
}

int df_kv_snap_restore(df_kv_cache *kv, const df_kv_snap *s, char *err, size_t errlen) {
  if (s->n_layers != kv->n_layers) {
    snprintf(err, errlen, "KV snapshot restore: the snapshot has %lld layers, the cache %lld",
             (long long)s->n_layers, (long long)kv->n_layers);
    return -1;
  }
  for (int64_t l = 0; l < kv->n_layers; l++) {
    const snap_layer *sl = &s->layer[l];
    int64_t kt = per_tok(kv->k[l], kv->ctx), vt = per_tok(kv->v[l], kv->ctx);
    if (sl->k_per_tok != kt || sl->v_per_tok != vt) {
      char a[96], b[96];
      kv_width(a, sizeof a, sl->k_per_tok, sl->v_per_tok);
      kv_width(b, sizeof b, kt, vt);
      snprintf(err, errlen, "KV snapshot restore: layer %lld holds %s in the snapshot, %s in the "
               "cache", (long long)l, a, b);
      return -1;
    }
    const df_kv_rec *r = kv->rec ? kv->rec[l] : NULL;
    if ((r ? r->ops : NULL) != sl->ops) {
      snprintf(err, errlen, "KV snapshot restore: layer %lld has %s recurrent state in the "
               "snapshot, %s in the cache", (long long)l, sl->ops ? "a" : "no",
               !r ? "none" : sl->ops ? "one of another kind" : "one");
      return -1;
    }
  }
  for (int64_t l = 0; l < kv->n_layers; l++) { /* the layer kinds agree: now their shapes */
    const df_kv_rec *r = kv->rec ? kv->rec[l] : NULL;
    char inner[256];
    if (r && !r->ops->snap_fits(r, s->layer[l].rec, inner, sizeof inner)) {
      snprintf(err, errlen, "KV snapshot restore: layer %lld: %s", (long long)l, inner);
      return -1;
    }
  }
  if (s->len > kv->ctx) {
    snprintf(err, errlen, "KV snapshot restore: the snapshot holds %lld positions, the cache "
             "only has room for %lld", (long long)s->len, (long long)kv->ctx);
    return -1;
  }
  if (has_kv(kv) && kv->len < s->len) {
    snprintf(err, errlen, "KV snapshot restore: the cache holds %lld positions, fewer than the "
             "snapshot's %lld (its attention K/V of positions %lld.. are not there)",
             (long long)kv->len, (long long)s->len, (long long)kv->len);
    return -1;
  }
  for (int64_t l = 0; l < kv->n_layers; l++)
    if (s->layer[l].rec) kv->rec[l]->ops->snap_restore(kv->rec[l], s->layer[l].rec);
  kv->len = s->len;
  return 0;
}

int64_t df_kv_snap_len(const df_kv_snap *s) { return s->len; }

uint64_t df_kv_snap_bytes(const df_kv_snap *s) { return s->bytes; }

void df_kv_snap_destroy(df_kv_snap **sp) {
  if (!sp || !*sp) return;
  df_kv_snap *s = *sp;
  for (int64_t l = 0; l < s->n_layers; l++)
    if (s->layer[l].rec) s->layer[l].ops->snap_free(s->layer[l].rec);
  free(s);
  *sp = NULL;
}
