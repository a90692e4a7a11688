/* coordinator/generate/sched_slots.c — sequence slots and the prefix cache; see
 * sched_slots.h. */
#define _GNU_SOURCE
#include "coordinator/generate/sched_slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/generate/sched.h"

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void df_slot_pool_init(df_slot_pool *p, df_model *m, int64_t ctx, int working, int64_t budget,
                       bool reuse) {
  memset(p, 0, sizeof *p);
  p->m = m;
  p->ctx = ctx;
  p->V = df_model_cfg(m)->vocab_size;
  p->working = working;
  p->budget = budget;
  p->reuse = reuse;
  p->recurrent = df_model_kv_bytes_per_seq(m) > 0;
  p->host = df_model_device(m).kind == DF_T_DEV_CPU;
}

/* Copy positions [0, n) of every layer's K/V from src into dst (same model, host fp32
 * tensors: [n_kv, ctx, head_dim] per head, or MLA's [ctx, width]) and set dst->len = n.
 * Recurrent layer states are not copied: the caller restores a snapshot of length n. */
static void copy_prefix(df_kv_cache *dst, const df_kv_cache *src, int64_t n) {
  for (int64_t l = 0; l < src->n_layers; l++) {
    df_t_tensor *pair[2][2] = {{dst->k[l], src->k[l]}, {dst->v[l], src->v[l]}};
    for (int t = 0; t < 2; t++) {
      df_t_tensor *d = pair[t][0], *s = pair[t][1];
      if (!d || !s) continue;
      int nd = df_t_ndim(s);
      int64_t heads = nd == 3 ? df_t_size(s, 0) : 1, ctx = df_t_size(s, nd - 2),
              w = df_t_size(s, nd - 1);
      float *dp = df_t_f32(d);
      const float *sp = df_t_data(s);
      for (int64_t h = 0; h < heads; h++)
        memcpy(dp + h * ctx * w, sp + h * ctx * w, (size_t)(n * w) * sizeof(float));
    }
  }
  dst->len = n;
}

static void slot_free(df_slot *sl) {
  df_kv_destroy(&sl->kv);
  df_kv_destroy(&sl->dkv);
  df_kv_snap_destroy(&sl->snap);
  free(sl->logits);
  free(sl->vlogits);
  free(sl->dlogits);
  free(sl->ids);
  memset(sl, 0, sizeof *sl);
}

void df_slot_pool_free(df_slot_pool *p) {
  for (int i = 0; i < DF_SLOTS_MAX; i++) slot_free(&p->slots[i]);
}

static uint64_t slot_bytes(const df_slot_pool *p, const df_slot *sl) {
  uint64_t b = df_kv_bytes(sl->kv) + (uint64_t)p->ctx * sizeof(int32_t) +
               (uint64_t)p->V * sizeof(float);
  if (sl->dkv) b += df_kv_bytes(sl->dkv) + (uint64_t)(DF_SCHED_K_MAX + 2) * p->V * sizeof(float);
  if (sl->snap) b += df_kv_snap_bytes(sl->snap);
  return b;
}

/* How many ids of prompt[0..n) slot sl can start from, and whether that needs its snapshot. */
static int64_t usable_prefix(const df_slot *sl, const int32_t *prompt, int64_t n, bool *restore) {
  *restore = false;
  if (!sl->kv || !sl->ids) return 0;
  int64_t lim = sl->kv->len < n - 1 ? sl->kv->len : n - 1, c = 0;
  while (c < lim && sl->ids[c] == prompt[c]) c++;
  if (c > 0 && df_kv_can_truncate(sl->kv, c)) return c;
  if (sl->snap && df_kv_snap_len(sl->snap) <= c && df_kv_snap_len(sl->snap) > 0) {
    *restore = true;
    return df_kv_snap_len(sl->snap);
  }
  return 0;
}

/* Allocate what slot sl lacks (cache, logits, ids). */
static int slot_alloc(df_slot_pool *p, df_slot *sl, char *err, size_t errlen) {
  if (!sl->kv && !(sl->kv = df_model_kv_new(p->m, p->ctx, err, errlen))) return -1;
  if (!sl->logits) sl->logits = malloc((size_t)p->V * sizeof(float));
  if (!sl->ids) sl->ids = malloc((size_t)p->ctx * sizeof(int32_t));
  if (!sl->logits || !sl->ids) {
    snprintf(err, errlen, "out of memory for the logits of a sequence");
    return -1;
  }
  return 0;
}

int df_slot_take(df_slot_pool *p, const int32_t *prompt, int64_t n, int64_t *reused, char *err,
                 size_t errlen) {
  *reused = 0;
  int best = -1, fresh = -1, alloc = 0;
  int64_t best_r = 0;
  uint64_t per = 0;
  bool best_restore = false;
  for (int i = 0; i < DF_SLOTS_MAX; i++) {
    df_slot *sl = &p->slots[i];
    if (!sl->kv) {
      if (fresh < 0) fresh = i;
      continue;
    }
    alloc++;
    uint64_t b = slot_bytes(p, sl);
    if (b > per) per = b;
    if (sl->busy) continue;
    bool restore = false;
    int64_t r = p->reuse ? usable_prefix(sl, prompt, n, &restore) : 0;
    if (r > best_r || (r == best_r && r > 0 && sl->used > p->slots[best].used)) {
      best = i;
      best_r = r;
      best_restore = restore;
    }
  }
  /* the slot a cold start (or a copied prefix) takes: a new one while the working set and the
   * budget allow one more (the idle ones keep their prefixes), else the least recently used
   * idle one other than `best` */
  int extra = alloc + 1 - p->working, lru = -1;
  bool grow = fresh >= 0 && (extra <= 0 || (p->budget > 0 && (uint64_t)extra * per <= (uint64_t)p->budget));
  for (int i = 0; i < DF_SLOTS_MAX; i++) {
    df_slot *sl = &p->slots[i];
    if (sl->kv && !sl->busy && i != best && (lru < 0 || sl->used < p->slots[lru].used)) lru = i;
  }
  int cold = grow ? fresh : lru >= 0 ? lru : fresh;
  if (best >= 0) {
    df_slot *src = &p->slots[best];
    bool copyable = p->host && (!p->recurrent || best_restore);
    if (src->kv->len - best_r > DF_SLOTS_KEEP_TAIL && copyable && cold >= 0) {
      /* keep the other conversation: copy the shared prefix into the cold slot */
      df_slot *dst = &p->slots[cold];
      if (slot_alloc(p, dst, err, errlen) != 0) {
        /* no memory for one more cache: cut the best slot instead */
        slot_free(dst);
        goto take_best;
      }
      df_kv_snap_destroy(&dst->snap);
      copy_prefix(dst->kv, src->kv, best_r);
      if (best_restore && df_kv_snap_restore(dst->kv, src->snap, err, errlen) != 0) {
        best_r = 0; /* a snapshot of the same model: cannot happen; start cold */
        df_kv_truncate(dst->kv, 0);
      }
      memcpy(dst->ids, src->ids, (size_t)best_r * sizeof *dst->ids);
      if (src->dkv && src->dkv->len >= best_r && best_r > 0 && p->draft_init &&
          (!dst->dkv || dst->dkind != src->dkind))
        p->draft_init(p->draft_ctx, dst, src->dkind);
      if (dst->dkv) {
        if (best_r > 0 && src->dkv && src->dkind == dst->dkind && src->dkv->len >= best_r &&
            !df_kv_has_rec(src->dkv))
          copy_prefix(dst->dkv, src->dkv, best_r);
        else
          df_kv_truncate(dst->dkv, 0);
      }
      dst->busy = true;
      *reused = best_r;
      p->reused_tokens += best_r;
      return cold;
    }
  } else {
    best = cold;
    if (best >= 0 && !p->slots[best].kv && lru >= 0 &&
        slot_alloc(p, &p->slots[best], err, errlen) != 0) {
      slot_free(&p->slots[best]); /* no memory for one more cache: reuse an idle one */
      best = lru;
    }
  }
take_best:
  if (best < 0) {
    snprintf(err, errlen, "no free slot");
    return -1;
  }
  df_slot *sl = &p->slots[best];
  if (slot_alloc(p, sl, err, errlen) != 0) return -1;
  if (best_r > 0 && best_restore && df_kv_snap_restore(sl->kv, sl->snap, err, errlen) != 0)
    best_r = 0; /* cannot happen for a snapshot of this very cache; start cold */
  if (best_r > 0 && !best_restore) df_kv_truncate(sl->kv, best_r);
  if (best_r == 0) df_kv_truncate(sl->kv, 0);
  if (sl->snap && df_kv_snap_len(sl->snap) > best_r) df_kv_snap_destroy(&sl->snap);
  if (sl->dkv && sl->dkv->len > best_r) df_kv_truncate_or_reset(sl->dkv, best_r);
  sl->busy = true;
  *reused = best_r;
  p->reused_tokens += best_r;
  return best;
}

void df_slot_prompt_done(df_slot_pool *p, int i) {
  df_slot *sl = &p->slots[i];
  if (!p->recurrent || !p->reuse) return;
  char err[256];
  df_kv_snap_destroy(&sl->snap);
  sl->snap = df_kv_snap_take(sl->kv, err, sizeof err);
}

void df_slot_release(df_slot_pool *p, int i, const int32_t *seq, int64_t n) {
  df_slot *sl = &p->slots[i];
  sl->busy = false;
  sl->used = mono_s();
  int64_t keep = sl->kv ? sl->kv->len : 0;
  if (keep > n) keep = n; /* cannot happen: the cache holds committed ids only */
  if (sl->ids && keep > 0) memcpy(sl->ids, seq, (size_t)keep * sizeof *seq);
  if (sl->kv && keep == 0) df_kv_truncate(sl->kv, 0); /* also after a failed forward */
  else if (sl->kv && keep < sl->kv->len) df_kv_truncate_or_reset(sl->kv, keep);
  if (sl->snap && df_kv_snap_len(sl->snap) > (sl->kv ? sl->kv->len : 0)) df_kv_snap_destroy(&sl->snap);
  /* idle slots past the working set, least recently used first, while over the budget */
  for (;;) {
    int alloc = 0, lru = -1;
    uint64_t per = 0;
    for (int k = 0; k < DF_SLOTS_MAX; k++) {
      df_slot *s = &p->slots[k];
      if (!s->kv) continue;
      alloc++;
      uint64_t b = slot_bytes(p, s);
      if (b > per) per = b;
      if (!s->busy && (lru < 0 || s->used < p->slots[lru].used)) lru = k;
    }
    int extra = alloc - p->working;
    if (extra <= 0 || lru < 0) return;
    if (p->budget > 0 && (uint64_t)extra * per <= (uint64_t)p->budget && alloc < DF_SLOTS_MAX)
      return;
    slot_free(&p->slots[lru]);
    p->evictions++;
  }
}
