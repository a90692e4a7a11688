/* tests/test_kv_snapshot.c — KV-cache snapshots (engine/kv_cache.h df_kv_snap): keep a
 * sequence's state at a length and continue from it later, past what truncation can reach
 * for recurrent (KDA) layers.
 *
 * Fixtures: tests/fixtures/tiny-kl-48b and tiny-kl-mixed (kimi_linear: KDA + NoPE MLA),
 * tiny-kl-k3gate (another KDA layout), tiny-moe-tied (qwen3_moe, GQA) and tiny-ds-bf16
 * (deepseek_v3, MLA). Models load with max_rows 16, so the KDA rollback log holds 64 rows
 * (engine/layers/kda.h df_kda_log_rows) and a continuation of 80 rows is out of truncation's
 * reach. Everything compares bitwise (memcmp) with a fresh cache fed the same ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine/kv_cache.h"
#include "engine/layers/kda.h"
#include "engine/layers/workspace.h"
#include "engine/model.h"
#include "tests/seq_invariants.h" /* kv_new, fwd */

enum { NA = 37, NB = 80, NC = 12, NB1 = 40 /* of B fed one row per forward */ };

static df_model *load_model(const char *name, int64_t max_rows) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, name);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 256, .max_rows = max_rows};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static df_kv_snap *take(const df_kv_cache *kv) {
  char err[1024];
  df_kv_snap *s = df_kv_snap_take(kv, err, sizeof err);
  if (!s) fail_msg("snapshot: %s", err);
  return s;
}

static void restore(df_kv_cache *kv, const df_kv_snap *s) {
  char err[1024];
  if (df_kv_snap_restore(kv, s, err, sizeof err) != 0) fail_msg("restore: %s", err);
}

/* n ids: (i * mul + add) % V */
static void make_ids(int32_t *ids, int64_t n, int64_t mul, int64_t add, int64_t V) {
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * mul + add) % V);
}

typedef struct seqs {
  int32_t a[NA], b[NB], c[NC], d[30];
} seqs;

static void make_seqs(seqs *q, int64_t V) {
  make_ids(q->a, NA, 37, 11, V);
  make_ids(q->b, NB, 53, 7, V);
  make_ids(q->c, NC, 29, 101, V);
  make_ids(q->d, 30, 71, 3, V);
}

/* B fed one row at a time, then the rest in one forward (chunks of max_rows). */
static void feed_b(df_model *m, df_kv_cache *kv, const seqs *q) {
  for (int i = 0; i < NB1; i++) fwd(m, kv, q->b + i, 1, DF_LOGITS_NONE, NULL);
  fwd(m, kv, q->b + NB1, NB - NB1, DF_LOGITS_NONE, NULL);
}

/* The logits [NC, V] of a fresh cache fed A then C. */
static float *fresh_ac(df_model *m, const seqs *q) {
  int64_t V = df_model_cfg(m)->vocab_size;
  float *lg = malloc((size_t)(NC * V) * sizeof(float));
  df_kv_cache *kv = kv_new(m);
  fwd(m, kv, q->a, NA, DF_LOGITS_NONE, NULL);
  fwd(m, kv, q->c, NC, DF_LOGITS_ALL, lg);
  df_kv_destroy(&kv);
  return lg;
}

/* Feed C into kv with every logit; equal to want bitwise. */
static void expect_c(df_model *m, df_kv_cache *kv, const seqs *q, const float *want,
                     const char *what) {
  int64_t V = df_model_cfg(m)->vocab_size;
  float *lg = malloc((size_t)(NC * V) * sizeof(float));
  fwd(m, kv, q->c, NC, DF_LOGITS_ALL, lg);
  if (memcmp(lg, want, (size_t)(NC * V) * sizeof(float)))
    fail_msg("%s: the logits of C differ from a fresh cache fed A then C", what);
  free(lg);
}

/* 1. Prefill A, snapshot, feed B (80 rows: beyond the 64-row log, so truncation back to |A|
 * is impossible), restore, feed C == fresh A + C. The snapshot restores again (it is not
 * consumed), into another cache fed A then other ids, into a cache of the same checkpoint
 * loaded with another max_rows (another log size), and outlives its cache. A cache holding
 * fewer positions than the snapshot is refused and left as it was. */
static void test_restore_past_window(void **state) {
  (void)state;
  static const char *fx[] = {"tiny-kl-48b", "tiny-kl-mixed"};
  char err[1024];
  for (size_t f = 0; f < 2; f++) {
    df_model *m = load_model(fx[f], 16);
    seqs q;
    make_seqs(&q, df_model_cfg(m)->vocab_size);
    float *want = fresh_ac(m, &q);
    df_kv_cache *kv = kv_new(m);
    assert_true(df_kv_has_rec(kv));
    fwd(m, kv, q.a, NA, DF_LOGITS_NONE, NULL);
    df_kv_snap *s = take(kv);
    assert_int_equal(df_kv_snap_len(s), NA);
    feed_b(m, kv, &q);
    assert_int_equal(kv->len, NA + NB);
    assert_false(df_kv_can_truncate(kv, NA));
    restore(kv, s);
    assert_int_equal(kv->len, NA);
    /* the history starts at the snapshot: its length and 0 only */
    assert_true(df_kv_can_truncate(kv, NA));
    assert_true(df_kv_can_truncate(kv, 0));
    assert_false(df_kv_can_truncate(kv, NA - 1));
    expect_c(m, kv, &q, want, fx[f]);
    /* again, straight after C (the snapshot is reusable) */
    restore(kv, s);
    expect_c(m, kv, &q, want, "second restore");

    /* another cache: A then 30 other ids, then the snapshot */
    df_kv_cache *k2 = kv_new(m);
    fwd(m, k2, q.a, 5, DF_LOGITS_NONE, NULL); /* A in other chunks: the same K/V bitwise */
    fwd(m, k2, q.a + 5, NA - 5, DF_LOGITS_NONE, NULL);
    fwd(m, k2, q.d, 30, DF_LOGITS_NONE, NULL);
    restore(k2, s);
    expect_c(m, k2, &q, want, "restore into another cache");

    /* too short: refused, unchanged */
    df_kv_cache *k3 = kv_new(m);
    fwd(m, k3, q.a, 20, DF_LOGITS_NONE, NULL);
    assert_int_equal(df_kv_snap_restore(k3, s, err, sizeof err), -1);
    assert_non_null(strstr(err, "holds 20 positions, fewer than the snapshot's 37"));
    assert_int_equal(k3->len, 20);
    fwd(m, k3, q.a + 20, NA - 20, DF_LOGITS_NONE, NULL); /* and it still continues normally */
    expect_c(m, k3, &q, want, "after a refused restore");

    /* the same checkpoint with max_rows 128 (log 128 rows): the snapshot outlives its cache */
    df_kv_destroy(&kv);
    df_model *m2 = load_model(fx[f], 128);
    df_kv_cache *k4 = kv_new(m2);
    fwd(m2, k4, q.a, NA, DF_LOGITS_NONE, NULL);
    fwd(m2, k4, q.b, NB, DF_LOGITS_NONE, NULL);
    restore(k4, s);
    expect_c(m2, k4, &q, want, "restore into another load of the checkpoint");

    df_kv_destroy(&k2);
    df_kv_destroy(&k3);
    df_kv_destroy(&k4);
    df_kv_snap_destroy(&s);
    assert_null(s);
    df_kv_snap_destroy(&s); /* NULL-safe */
    free(want);
    df_model_destroy(&m2);
    df_model_destroy(&m);
  }
}

/* 2. After a restore: a verify-sized forward (9 rows) truncated inside itself, greedy decode,
 * then 70 single rows (the log fills and folds) truncated back 60 rows, more decode: bitwise
 * a fresh cache fed the same ids. A snapshot taken after a 150-row prefill (folds mid-
 * prefill) and one at length 0 restore exactly too. */
static void test_restore_then_truncate(void **state) {
  (void)state;
  df_model *m = load_model("tiny-kl-48b", 16);
  int64_t V = df_model_cfg(m)->vocab_size;
  seqs q;
  make_seqs(&q, V);
  int32_t e[160];
  make_ids(e, 160, 13, 5, V);
  float *la = malloc((size_t)(4 * V) * sizeof(float)), *lb = malloc((size_t)(4 * V) * sizeof(float));
  df_kv_cache *kv = kv_new(m), *ref = kv_new(m);
  fwd(m, kv, q.a, NA, DF_LOGITS_NONE, NULL);
  df_kv_snap *s = take(kv);
  feed_b(m, kv, &q);
  restore(kv, s);
  fwd(m, kv, e, 9, DF_LOGITS_NONE, NULL); /* a speculative verify of 9 rows */
  assert_true(df_kv_can_truncate(kv, NA + 4));
  df_kv_truncate(kv, NA + 4);
  fwd(m, ref, q.a, NA, DF_LOGITS_NONE, NULL);
  fwd(m, ref, e, 4, DF_LOGITS_NONE, NULL);
  int32_t ta = e[100], tb = e[100];
  for (int i = 0; i < 5; i++) { /* greedy decode on both */
    fwd(m, kv, &ta, 1, DF_LOGITS_LAST, la);
    fwd(m, ref, &tb, 1, DF_LOGITS_LAST, lb);
    assert_memory_equal(la, lb, (size_t)V * sizeof(float));
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
      if (la[v] > la[best]) best = (int32_t)v;
    ta = tb = best;
  }
  /* 70 single rows, back 60 */
  int64_t L = kv->len;
  for (int i = 0; i < 70; i++) fwd(m, kv, e + 10 + i, 1, DF_LOGITS_NONE, NULL);
  assert_true(df_kv_can_truncate(kv, L + 10));
  assert_false(df_kv_can_truncate(kv, L + 5));
  df_kv_truncate(kv, L + 10);
  fwd(m, ref, e + 10, 10, DF_LOGITS_NONE, NULL);
  fwd(m, kv, e + 120, 4, DF_LOGITS_ALL, la);
  fwd(m, ref, e + 120, 4, DF_LOGITS_ALL, lb);
  assert_memory_equal(la, lb, (size_t)(4 * V) * sizeof(float));
  df_kv_snap_destroy(&s);

  /* a snapshot after a 150-row prefill, restored after more rows */
  df_kv_truncate(kv, 0);
  fwd(m, kv, e, 150, DF_LOGITS_NONE, NULL);
  s = take(kv);
  fwd(m, kv, q.b, NB, DF_LOGITS_NONE, NULL);
  restore(kv, s);
  fwd(m, kv, e + 150, 4, DF_LOGITS_ALL, la);
  df_kv_truncate(ref, 0);
  float *all = malloc((size_t)(154 * V) * sizeof(float));
  fwd(m, ref, e, 154, DF_LOGITS_ALL, all);
  assert_memory_equal(la, all + 150 * V, (size_t)(4 * V) * sizeof(float));
  free(all);
  df_kv_snap_destroy(&s);

  /* a snapshot of an empty cache: restoring it is a fresh sequence */
  df_kv_truncate(kv, 0);
  s = take(kv);
  assert_int_equal(df_kv_snap_len(s), 0);
  fwd(m, kv, q.b, NB, DF_LOGITS_NONE, NULL);
  restore(kv, s);
  assert_int_equal(kv->len, 0);
  float *want = fresh_ac(m, &q);
  fwd(m, kv, q.a, NA, DF_LOGITS_NONE, NULL);
  expect_c(m, kv, &q, want, "restore of an empty snapshot");
  free(want);
  df_kv_snap_destroy(&s);
  df_kv_destroy(&kv);
  df_kv_destroy(&ref);
  free(la);
  free(lb);
  df_model_destroy(&m);
}

/* 3. Caches without recurrent layers (GQA, MLA): the snapshot is the length (and layout);
 * restore after B then C == fresh A + C. */
static void test_non_recurrent(void **state) {
  (void)state;
  static const char *fx[] = {"tiny-moe-tied", "tiny-ds-bf16"};
  for (size_t f = 0; f < 2; f++) {
    df_model *m = load_model(fx[f], 16);
    seqs q;
    make_seqs(&q, df_model_cfg(m)->vocab_size);
    float *want = fresh_ac(m, &q);
    df_kv_cache *kv = kv_new(m);
    assert_false(df_kv_has_rec(kv));
    fwd(m, kv, q.a, NA, DF_LOGITS_NONE, NULL);
    df_kv_snap *s = take(kv);
    uint64_t b = df_kv_snap_bytes(s);
    printf("# %s: snapshot of %lld layers without recurrent state: %llu bytes\n", fx[f],
           (long long)kv->n_layers, (unsigned long long)b);
    assert_true(b > 0 && b <= 64 + 64 * (uint64_t)kv->n_layers);
    feed_b(m, kv, &q);
    restore(kv, s);
    assert_int_equal(kv->len, NA);
    expect_c(m, kv, &q, want, fx[f]);
    df_kv_snap_destroy(&s);
    df_kv_destroy(&kv);
    free(want);
    df_model_destroy(&m);
  }
}

/* 4. The snapshot holds each KDA layer's S and conv windows (not its base copy or log):
 * (H*D*D + 3*C*(W-1)) * 4 bytes per KDA layer plus a small header, well under the cache's
 * bytes_per_seq. */
static void test_bytes(void **state) {
  (void)state;
  static const char *fx[] = {"tiny-kl-48b", "tiny-kl-k3gate", "tiny-kl-mixed"};
  for (size_t f = 0; f < 3; f++) {
    df_model *m = load_model(fx[f], 16);
    const df_model_config *c = df_model_cfg(m);
    int64_t H = c->kda_heads, D = c->kda_head_dim, C = H * D, W = c->kda_conv, nk = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) nk += c->is_kda_layer[l] ? 1 : 0;
    df_kv_cache *kv = kv_new(m);
    int32_t ids[10];
    make_ids(ids, 10, 37, 11, c->vocab_size);
    fwd(m, kv, ids, 10, DF_LOGITS_NONE, NULL);
    df_kv_snap *s = take(kv);
    uint64_t rec = (uint64_t)(nk * (H * D * D + 3 * C * (W - 1))) * 4u, b = df_kv_snap_bytes(s);
    printf("# %s: %lld KDA layers, snapshot %llu bytes (states %llu), cache per sequence %llu\n",
           fx[f], (long long)nk, (unsigned long long)b, (unsigned long long)rec,
           (unsigned long long)kv->bytes_per_seq);
    assert_true(nk > 0);
    assert_true(b >= rec && b <= rec + 64 * (uint64_t)(kv->n_layers + 1));
    /* bytes_per_seq: state + base (2x) + the log + headers */
    assert_true(2 * rec <= kv->bytes_per_seq && b < kv->bytes_per_seq);
    df_kv_snap_destroy(&s);
    df_kv_destroy(&kv);
    df_model_destroy(&m);
  }
}

/* A single-layer KDA mixer of H heads x D with random weights (hidden 16, W 4), its weights'
 * backing (tensors and pool) returned for the caller to free. */
typedef struct kda_rig {
  df_ws *ws;
  df_token_mixer *tm;
  df_t_tensor *t[12];
  float *pool;
  df_model_config cfg;
  df_layer_env env;
} kda_rig;

static void rig_new(kda_rig *g, int64_t H, int64_t D) {
  char err[256];
  memset(g, 0, sizeof *g);
  int64_t C = H * D, Hd = 16, W = 4;
  g->cfg.hidden_size = Hd;
  g->env = (df_layer_env){.cfg = &g->cfg, .max_rows = 4, .max_ctx = 64};
  g->ws = df_ws_new();
  int64_t np = 8 * C * Hd + 8 * C;
  g->pool = malloc((size_t)np * sizeof(float));
  uint32_t seed = 5;
  for (int64_t i = 0; i < np; i++) {
    seed = seed * 1664525u + 1013904223u;
    g->pool[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  int64_t sq[2] = {C, Hd}, sd[2] = {D, Hd}, sb[2] = {H, Hd}, sf[2] = {C, D}, so[2] = {Hd, C},
          sc[3] = {C, 1, W}, sh[1] = {H}, sC[1] = {C}, sD[1] = {D};
  const int64_t *shp[12] = {sq, sq, sq, sc, sh, sC, sd, sf, sb, sq, sD, so};
  const int nd[12] = {2, 2, 2, 3, 1, 1, 2, 2, 2, 2, 1, 2};
  float *p = g->pool;
  for (int i = 0; i < 12; i++) {
    g->t[i] = df_t_wrap(p, DF_DT_F32, nd[i], shp[i], err, sizeof err);
    assert_non_null(g->t[i]);
    int64_t n = 1;
    for (int j = 0; j < nd[i]; j++) n *= shp[i][j];
    p += n;
  }
  df_kda_weights w = {.q = g->t[0], .k = g->t[1], .v = g->t[2], .q_conv = g->t[3],
                      .k_conv = g->t[3], .v_conv = g->t[3], .a_log = g->t[4],
                      .dt_bias = g->t[5], .f_a = g->t[6], .f_b = g->t[7], .b = g->t[8],
                      .g = g->t[9], .o_norm = g->t[10], .o = g->t[11]};
  df_kda_dims d = {.n_head = H, .head_dim = D, .conv_width = W, .norm_eps = 1e-5f};
  g->tm = df_kda_new(&g->env, g->ws, 0, &w, &d, err, sizeof err);
  if (!g->tm) fail_msg("kda: %s", err);
}

static df_kv_cache *rig_kv(const kda_rig *g, int64_t ctx) {
  char err[256];
  df_kv_cache *kv = df_kv_new_layers(1, ctx, 0, g->tm->ops->state_bytes_per_seq(g->tm), err,
                                     sizeof err);
  assert_non_null(kv);
  assert_int_equal(g->tm->ops->state_new(g->tm, kv, NULL, err, sizeof err), 0);
  return kv;
}

/* Feed the rig's mixer 4 rows (x: the first 4 x 16 floats of the pool, as the rows at
 * positions kv->len..) into kv; the mixer's output to out [4 x 16] when out is not NULL. */
static void rig_fwd(kda_rig *g, df_kv_cache *kv, float *out) {
  char err[256];
  int64_t xs[2] = {4, 16}, pos[4];
  int32_t seq[4] = {0};
  df_t_tensor *x = df_t_new_f32(2, xs, err, sizeof err), *o = df_t_new_f32(2, xs, err, sizeof err);
  assert_non_null(x);
  assert_non_null(o);
  memcpy(df_t_f32(x), g->pool, 64 * sizeof(float));
  for (int r = 0; r < 4; r++) pos[r] = kv->len + r;
  df_rows rows = {.R = 4, .pos = pos, .seq = seq, .kvs = &kv};
  g->tm->ops->forward(g->tm, &rows, x, o);
  kv->len += 4;
  if (out) memcpy(out, df_t_f32(o), 64 * sizeof(float));
  df_t_destroy(&x);
  df_t_destroy(&o);
}

static void rig_free(kda_rig *g) {
  g->tm->ops->destroy(g->tm);
  for (int i = 0; i < 12; i++) df_t_destroy(&g->t[i]);
  df_ws_destroy(&g->ws);
  free(g->pool);
}

/* 5. Another layout is refused with a message and the cache left as it was: another layer
 * count, a layer of another kind (KDA vs MLA), K/V of another width, a KDA state of another
 * shape. A cache of recurrent layers only takes a snapshot longer than it holds (no K/V to
 * miss) but not one longer than its ctx. */
static void test_layout_mismatch(void **state) {
  (void)state;
  char err[1024];
  df_model *kl = load_model("tiny-kl-48b", 16), *k3 = load_model("tiny-kl-k3gate", 16),
           *moe = load_model("tiny-moe-tied", 16), *dense = load_model("tiny-dense", 16);
  int32_t ids[40];
  make_ids(ids, 40, 37, 11, 256); /* every fixture's vocab >= 256 */
  df_kv_cache *ckl = kv_new(kl), *ck3 = kv_new(k3), *cmoe = kv_new(moe), *cd = kv_new(dense);
  fwd(kl, ckl, ids, 40, DF_LOGITS_NONE, NULL);
  fwd(k3, ck3, ids, 40, DF_LOGITS_NONE, NULL);
  fwd(moe, cmoe, ids, 40, DF_LOGITS_NONE, NULL);
  fwd(dense, cd, ids, 40, DF_LOGITS_NONE, NULL);
  df_kv_snap *skl = take(ckl), *smoe = take(cmoe);
  fwd(k3, ck3, ids, 5, DF_LOGITS_NONE, NULL);

  /* KDA layers 0, 1, 3 and MLA 2, 4 vs KDA 0, 1, 2 and MLA 3, 4 (the layer kinds are
   * compared before the KDA shapes, which differ too) */
  assert_int_equal(df_kv_snap_restore(ck3, skl, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "layer 2 holds K/V of 32 + 8 floats per position in the "
                              "snapshot, no K/V in the cache"));
  assert_int_equal(ck3->len, 45);
  /* 3 layers vs 5 */
  assert_int_equal(df_kv_snap_restore(ckl, smoe, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "the snapshot has 3 layers, the cache 5"));
  assert_int_equal(ckl->len, 40);
  /* qwen3_moe vs qwen3 dense: both 3 GQA layers, K/V of 2 heads x 16 vs 2 x 32 */
  assert_int_equal(df_kv_snap_restore(cd, smoe, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "layer 0 holds K/V of 32 + 32 floats per position in the "
                              "snapshot, K/V of 64 + 64 floats per position in the cache"));
  assert_int_equal(cd->len, 40);

  /* KDA states of another shape (single-layer caches of recurrent layers only) */
  kda_rig g8, g16, g8b;
  rig_new(&g8, 2, 8);
  rig_new(&g16, 2, 16);
  rig_new(&g8b, 2, 8);
  df_kv_cache *r8 = rig_kv(&g8, 64), *r16 = rig_kv(&g16, 64), *r8b = rig_kv(&g8b, 64),
              *tiny = rig_kv(&g8b, 8);
  for (int i = 0; i < 3; i++) rig_fwd(&g8, r8, NULL);
  df_kv_snap *s8 = take(r8);
  assert_int_equal(df_kv_snap_len(s8), 12);
  assert_true(df_kv_snap_bytes(s8) >= (uint64_t)(2 * 8 * 8 + 3 * 16 * 3) * 4u);
  assert_int_equal(df_kv_snap_restore(r16, s8, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "layer 0: KDA state of 2 heads x 8, conv width 4 in the "
                              "snapshot, 2 x 16, conv width 4 in the cache"));
  assert_int_equal(r16->len, 0);
  assert_int_equal(df_kv_snap_restore(tiny, s8, err, sizeof err), -1);
  assert_non_null(strstr(err, "the snapshot holds 12 positions, the cache only has room for 8"));
  /* the same shape (another mixer of the same weights): no K/V, so an empty cache takes it,
   * and both continue alike */
  assert_int_equal(df_kv_snap_restore(r8b, s8, err, sizeof err), 0);
  assert_int_equal(r8b->len, 12);
  float oa[64], ob[64];
  rig_fwd(&g8, r8, oa);
  rig_fwd(&g8b, r8b, ob);
  assert_memory_equal(oa, ob, sizeof oa);
  df_kv_destroy(&tiny);

  df_kv_snap_destroy(&s8);
  df_kv_destroy(&r8);
  df_kv_destroy(&r16);
  df_kv_destroy(&r8b);
  rig_free(&g8);
  rig_free(&g16);
  rig_free(&g8b);
  df_kv_snap_destroy(&skl);
  df_kv_snap_destroy(&smoe);
  df_kv_destroy(&ckl);
  df_kv_destroy(&ck3);
  df_kv_destroy(&cmoe);
  df_kv_destroy(&cd);
  df_model_destroy(&kl);
  df_model_destroy(&k3);
  df_model_destroy(&moe);
  df_model_destroy(&dense);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_restore_past_window), cmocka_unit_test(test_restore_then_truncate),
      cmocka_unit_test(test_non_recurrent),       cmocka_unit_test(test_bytes),
      cmocka_unit_test(test_layout_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
