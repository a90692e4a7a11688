/* engine/text/tokenizer_bpe.c — the byte-level BPE model: model.merges, the merge table, BPE of
 * one word, and the word cache.
 *
 * Owns: parsing model.merges ("a b" or ["a","b"]) into the merge table (left id, right id) ->
 * (rank, merged id) (its load errors included), the lowest-rank-first merge loop over a word's
 * byte ids (ignore_merges, unk_token), appending ids to an encode call's output, and the
 * tokenizer's word cache, read and filled only by the encode call that holds its lock. Does
 * not own: the vocabulary table and byte alphabet (engine/text/tokenizer.c) or how text is
 * cut into words (engine/text/tokenizer_pretok.c).
 */
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_utf8.h"

#include <stdlib.h>
#include <string.h>

#define DF_TOK_CACHE_MAX_WORD 128  /* longer words are not cached */

/* ---- merge table ------------------------------------------------------------------------ */

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static const merge_slot *merge_find(const df_tok *t, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->mcap - 1, i = (size_t)hash_u64(key) & mask;
  for (;;) {
    const merge_slot *m = &t->merges[i];
    if (m->key == key) return m;
    if (m->key == UINT64_MAX) return NULL;
    i = (i + 1) & mask;
  }
}

/* Later duplicates overwrite earlier ones, as a hash map built from the list does. */
static void merge_insert(df_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->mcap - 1, i = (size_t)hash_u64(key) & mask;
  while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key) i = (i + 1) & mask;
  t->merges[i].key = key;
  t->merges[i].rank = rank;
  t->merges[i].id = id;
}

/* Split a merge entry ("a b" or ["a","b"]) into its two pieces. */
static int merge_parts(load_ctx *L, json_t *m, size_t i, const char **a, size_t *alen,
                       const char **b, size_t *blen) {
  if (json_is_string(m)) {
    const char *s = json_string_value(m);
    size_t n = json_string_length(m);
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
      LERR(L, "model.merges[%zu]: \"%.80s\": expected two tokens separated by one space", i, s);
      return -1;
    }
    *a = s;
    *alen = (size_t)(sp - s);
    *b = sp + 1;
    *blen = n - *alen - 1;
    return 0;
  }
  if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
      json_is_string(json_array_get(m, 1))) {
    *a = json_string_value(json_array_get(m, 0));
    *alen = json_string_length(json_array_get(m, 0));
    *b = json_string_value(json_array_get(m, 1));
    *blen = json_string_length(json_array_get(m, 1));
    return 0;
  }
  LERR(L, "model.merges[%zu]: expected a string \"a b\" or an array [\"a\", \"b\"]", i);
  return -1;
}

int df_tok__merges_alloc(df_tok *t, size_t n) {
  t->mcap = df_tok__pow2_at_least(n * 2 + 1);
  t->merges = malloc(t->mcap * sizeof *t->merges);
  if (!t->merges) return -1;
  for (size_t i = 0; i < t->mcap; i++) t->merges[i].key = UINT64_MAX;
  return 0;
}

void df_tok__merge_add(df_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  merge_insert(t, a, b, rank, id);
}

int df_tok__load_merges(load_ctx *L, json_t *model) {
  df_tok *t = L->t;
  json_t *merges = json_object_get(model, "merges");
  if (!json_is_array(merges)) {
    LERR(L, "model.merges: expected an array");
    return -1;
  }
  size_t n = json_array_size(merges);
  t->mcap = df_tok__pow2_at_least(n * 2 + 1);
  t->merges = malloc(t->mcap * sizeof *t->merges);
  df_tok_buf cat = {0};
  int rc = -1;
  if (!t->merges) {
    LERR(L, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < t->mcap; i++) t->merges[i].key = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const char *a, *b;
    size_t alen, blen;
    if (merge_parts(L, json_array_get(merges, i), i, &a, &alen, &b, &blen) != 0) goto done;
    int32_t ia = df_tok__vocab_find(t, a, alen), ib = df_tok__vocab_find(t, b, blen);
    if (ia < 0 || ib < 0) {
      LERR(L, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", i,
           (int)(ia < 0 ? (alen > 60 ? 60 : alen) : (blen > 60 ? 60 : blen)), ia < 0 ? a : b);
      goto done;
    }
    cat.n = 0;
    if (df_tok__buf_put(&cat, a, alen) != 0 || df_tok__buf_put(&cat, b, blen) != 0) {
      LERR(L, "out of memory");
      goto done;
    }
    int32_t im = df_tok__vocab_find(t, cat.p, cat.n);
    if (im < 0) {
      LERR(L, "model.merges[%zu]: merged token \"%.60s\" is not in model.vocab", i, cat.p);
      goto done;
    }
    merge_insert(t, ia, ib, (uint32_t)i, im);
  }
  rc = 0;
done:
  df_tok__buf_free(&cat);
  return rc;
}

/* ---- BPE -------------------------------------------------------------------------------- */

int df_tok__emit(enc *e, int32_t id) {
  if (e->n == e->cap && df_tok__grow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids) != 0)
    return -1;
  e->ids[e->n++] = id;
  return 0;
}

static void heap_push(heap_ent *h, size_t *n, heap_ent v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].rank < v.rank || (h[p].rank == v.rank && h[p].pos < v.pos)) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
  heap_ent top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
      c++;
    if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos < h[c].pos)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

/* BPE of one word (raw bytes). Appends ids to e. Merges apply lowest rank first, leftmost
 * first among equal ranks — the reference library's order. */
static int bpe_word(enc *e, const uint8_t *w, size_t n, size_t *first_out) {
  const df_tok *t = e->t;
  *first_out = e->n;
  if (n == 0) return 0;
  if (t->ignore_merges && n > 1 && n <= t->max_piece_bytes) {
    /* the whole word first (tiktoken, and ignore_merges), however long */
    char stack[2 * 64], *tmp = n <= 64 ? stack : malloc(2 * n);
    if (!tmp) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += df_tok__cp_to_utf8(df_tok__byte_cp[w[i]], tmp + k);
    int32_t id = df_tok__vocab_find(t, tmp, k);
    if (tmp != stack) free(tmp);
    if (id >= 0) return df_tok__emit(e, id);
  }
  if (n == 1) {
    int32_t id = t->byte_id[w[0]];
    if (id < 0) id = t->unk_id;
    return id >= 0 ? df_tok__emit(e, id) : 0;
  }
  if (n > UINT32_MAX / 4) return -1;
  if (n > e->cap_sym) {
    size_t c = n < 64 ? 64 : n * 2;
    int32_t *a = realloc(e->sym, c * sizeof *a);
    if (a) e->sym = a;
    int32_t *b = realloc(e->nxt, c * sizeof *b);
    if (b) e->nxt = b;
    int32_t *d = realloc(e->prv, c * sizeof *d);
    if (d) e->prv = d;
    if (!a || !b || !d) return -1;
    e->cap_sym = c;
  }
  if (df_tok__grow((void **)&e->heap, &e->cap_heap, 3 * n, sizeof *e->heap) != 0) return -1;
  int32_t *sym = e->sym, *nxt = e->nxt, *prv = e->prv;
  heap_ent *h = e->heap;
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    sym[i] = t->byte_id[w[i]];
    nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    prv[i] = (int32_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    if (sym[i] < 0 || sym[i + 1] < 0) continue;
    const merge_slot *m = merge_find(t, sym[i], sym[i + 1]);
    if (m) heap_push(h, &hn, (heap_ent){m->rank, (uint32_t)i});
  }
  while (hn) {
    heap_ent top = heap_pop(h, &hn);
    int32_t p = (int32_t)top.pos, q = nxt[p];
    if (sym[p] < 0 || q < 0 || sym[q] < 0) continue;
    const merge_slot *m = merge_find(t, sym[p], sym[q]);
    if (!m || m->rank != top.rank) continue;
    sym[p] = m->id;
    sym[q] = -2; /* dead */
    nxt[p] = nxt[q];
    if (nxt[q] >= 0) prv[nxt[q]] = p;
    if (prv[p] >= 0 && sym[prv[p]] >= 0) {
      const merge_slot *ml = merge_find(t, sym[prv[p]], sym[p]);
      if (ml) heap_push(h, &hn, (heap_ent){ml->rank, (uint32_t)prv[p]});
    }
    if (nxt[p] >= 0 && sym[nxt[p]] >= 0) {
      const merge_slot *mr = merge_find(t, sym[p], sym[nxt[p]]);
      if (mr) heap_push(h, &hn, (heap_ent){mr->rank, (uint32_t)p});
    }
  }
  for (int32_t i = 0; i >= 0; i = nxt[i]) {
    int32_t id = sym[i];
    if (id == -1) id = t->unk_id;
    if (id >= 0 && df_tok__emit(e, id) != 0) return -1;
  }
  return 0;
}

/* ---- word cache ------------------------------------------------------------------------- */

/* Word cache (only while this call holds the cache lock). */
static int cache_lookup(enc *e, const uint8_t *w, size_t n, uint64_t hsh) {
  word_cache *c = (word_cache *)&e->t->cache;
  size_t mask = DF_TOK_CACHE_SLOTS - 1, i = (size_t)hsh & mask;
  for (;;) {
    wc_slot *s = &c->slots[i];
    if (!s->used) return 0;
    if (s->hash == hsh && s->klen == n && memcmp(c->keys.p + s->koff, w, n) == 0) {
      if (e->n + s->vlen > e->cap &&
          df_tok__grow((void **)&e->ids, &e->cap, e->n + s->vlen, sizeof *e->ids) != 0)
        return -1;
      memcpy(e->ids + e->n, c->vals + s->voff, s->vlen * sizeof *e->ids);
      e->n += s->vlen;
      return 1;
    }
    i = (i + 1) & mask;
  }
}

static void cache_clear(word_cache *c) {
  memset(c->slots, 0, DF_TOK_CACHE_SLOTS * sizeof *c->slots);
  c->count = 0;
  c->keys.n = 0;
  c->nvals = 0;
}

static void cache_store(enc *e, const uint8_t *w, size_t n, uint64_t hsh, const int32_t *ids,
                        size_t k) {
  word_cache *c = (word_cache *)&e->t->cache;
  if (c->count >= DF_TOK_CACHE_SLOTS / 2 || c->keys.n > (64u << 20)) cache_clear(c);
  if (df_tok__grow((void **)&c->vals, &c->capvals, c->nvals + k, sizeof *c->vals) != 0) return;
  if (df_tok__buf_put(&c->keys, w, n) != 0) return;
  size_t mask = DF_TOK_CACHE_SLOTS - 1, i = (size_t)hsh & mask;
  while (c->slots[i].used) i = (i + 1) & mask;
  c->slots[i] = (wc_slot){hsh, (uint32_t)(c->keys.n - n), (uint32_t)n, (uint32_t)c->nvals,
                          (uint32_t)k, true};
  memcpy(c->vals + c->nvals, ids, k * sizeof *ids);
  c->nvals += k;
  c->count++;
}

int df_tok__encode_word(enc *e, const uint8_t *w, size_t n) {
  if (n == 0) return 0;
  bool cacheable = e->cache_held && n <= DF_TOK_CACHE_MAX_WORD;
  uint64_t hsh = 0;
  if (cacheable) {
    hsh = df_tok__hash_bytes(w, n);
    int r = cache_lookup(e, w, n, hsh);
    if (r != 0) return r < 0 ? -1 : 0;
  }
  size_t first;
  if (bpe_word(e, w, n, &first) != 0) return -1;
  if (cacheable) cache_store(e, w, n, hsh, e->ids + first, e->n - first);
  return 0;
}
