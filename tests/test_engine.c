/* tests/test_engine.c — the forward pass against the PyTorch reference's golden fixtures,
 * batch invariance, KV rollback, kernel ISA agreement, the libtorch oracles, and thread counts
 * (1, 3, the default) on a generating thread other than the loading one, and each layer's
 * share of a sequence's state.
 *
 * Fixtures: tests/fixtures/tiny-NAME/ (checkpoint + golden.json + golden_logits.f32), made by
 * tests/reference/make_fixtures.sh with tests/reference/qwen3_ref.py in fp32 mode.
 * Tolerance: the engine and the reference both compute with fp32 activations over the same
 * bf16 weights, so logits differ only by fp32 summation order (observed max ~2e-5 on logits
 * of magnitude ~30); we allow 1e-3 absolute. The greedy continuation must be identical.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/golden.h"

#include "engine/kernels/kernels.h"
#include "engine/model.h"
#include "engine/tensor/torch_shim.h"

#define LOGIT_TOL 1e-3f

static const char *k_fixtures[] = {"tiny-moe-tied", "tiny-moe-sparse", "tiny-dense",
                                   "tiny-moe-sharded"};

static df_model *load_fixture_model(const char *name, int64_t max_rows) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, name);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 256, .max_rows = max_rows};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

/* Greedy: prefill, then one token per forward. */
static void greedy(df_model *m, df_kv_cache *kv, const int32_t *prompt, int64_t n_prompt,
                   int64_t n_new, int32_t *out) {
  char err[1024];
  int64_t V = df_model_cfg(m)->vocab_size;
  float *lg = malloc((size_t)V * sizeof(float));
  if (n_prompt > 0 && df_model_forward(m, kv, prompt, n_prompt, DF_LOGITS_LAST, lg, err, sizeof err))
    fail_msg("prefill: %s", err);
  for (int64_t i = 0; i < n_new; i++) {
    out[i] = argmax(lg, V);
    if (df_model_forward(m, kv, &out[i], 1, DF_LOGITS_LAST, lg, err, sizeof err))
      fail_msg("decode: %s", err);
  }
  free(lg);
}

static void test_golden_fixtures(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_fixture_model(k_fixtures[f], 64);
    assert_int_equal(df_model_cfg(m)->vocab_size, g.vocab);
    float *lg = prompt_logits(m, g.prompt, g.n_prompt, 64);
    float maxd = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < g.n_prompt * g.vocab; i++) {
      float d = lg[i] - g.logits[i];
      d = d < 0 ? -d : d;
      if (d > maxd) {
        maxd = d;
        worst = i;
      }
    }
    printf("# %s: max |logit - reference| = %.3g at position %lld\n", k_fixtures[f], maxd,
           (long long)(worst / g.vocab));
    if (maxd > LOGIT_TOL)
      fail_msg("%s: logits differ from the reference by %g > %g at position %lld token %lld",
               k_fixtures[f], maxd, LOGIT_TOL, (long long)(worst / g.vocab),
               (long long)(worst % g.vocab));
    char err[1024];
    df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
    int32_t out[256];
    greedy(m, kv, g.prompt, g.n_prompt, g.n_greedy, out);
    for (int64_t i = 0; i < g.n_greedy; i++)
      if (out[i] != g.greedy[i])
        fail_msg("%s: greedy token %lld is %d, reference %d", k_fixtures[f], (long long)i, out[i],
                 g.greedy[i]);
    df_kv_destroy(&kv);
    free(lg);
    golden_free(&g);
    df_model_destroy(&m);
  }
}

/* Each position's logits are bitwise identical whether computed in one 64-token prefill,
 * in chunks of 7, or one token at a time — and whatever the planned chunk size. */
static void test_batch_invariance(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_fixture_model(k_fixtures[f], 64);
    size_t bytes = (size_t)(g.n_prompt * g.vocab) * sizeof(float);
    float *a = prompt_logits(m, g.prompt, g.n_prompt, 64);
    float *b = prompt_logits(m, g.prompt, g.n_prompt, 7);
    float *c = prompt_logits(m, g.prompt, g.n_prompt, 1);
    assert_memory_equal(a, b, bytes);
    assert_memory_equal(a, c, bytes);
    df_model_destroy(&m);
    /* planned chunk of 5 rows: a 64-token forward runs as 13 chunks internally */
    m = load_fixture_model(k_fixtures[f], 5);
    float *d = prompt_logits(m, g.prompt, g.n_prompt, 64);
    assert_memory_equal(a, d, bytes);
    df_model_destroy(&m);
    free(a);
    free(b);
    free(c);
    free(d);
    golden_free(&g);
  }
}

/* The scalar and AVX2 kernels reproduce the CPU's best ISA bit for bit. */
static void test_isa_agreement(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX2) skip();
  golden g;
  golden_load("tiny-moe-sparse", &g);
  df_model *m = load_fixture_model("tiny-moe-sparse", 64);
  df_isa hw = df_k_set_isa(df_k_isa_hw());
  float *a = prompt_logits(m, g.prompt, g.n_prompt, 64);
  for (int isa = DF_ISA_SCALAR; isa < (int)hw; isa++) {
    df_k_set_isa((df_isa)isa);
    float *b = prompt_logits(m, g.prompt, g.n_prompt, 64);
    assert_memory_equal(a, b, (size_t)(g.n_prompt * g.vocab) * sizeof(float));
    free(b);
  }
  df_k_set_isa(hw);
  free(a);
  golden_free(&g);
  df_model_destroy(&m);
}

/* Generate 40, truncate to 25, regenerate: identical to a run that never went past 25. */
static void test_kv_rollback(void **state) {
  (void)state;
  golden g;
  golden_load("tiny-moe-sparse", &g);
  df_model *m = load_fixture_model("tiny-moe-sparse", 64);
  char err[1024];
  int64_t np = 8;
  int32_t long_run[40], short_run[40], regen[40];
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  greedy(m, kv, g.prompt, np, 40, long_run);
  /* greedy() feeds every generated token, so the cache holds prompt + 40 */
  assert_int_equal(kv->len, np + 40);
  df_kv_truncate(kv, np + 25);
  /* continue from token 25 (already known: long_run[25] was produced after 25 tokens) */
  greedy(m, kv, &long_run[25], 1, 14, &regen[26]);
  df_kv_cache *kv2 = df_model_kv_new(m, 0, err, sizeof err);
  greedy(m, kv2, g.prompt, np, 25, short_run);
  greedy(m, kv2, &long_run[25], 1, 14, &short_run[26]);
  for (int i = 26; i < 40; i++) {
    assert_int_equal(regen[i], short_run[i]);
    assert_int_equal(regen[i], long_run[i]);
  }
  /* and the logits after the rollback are bitwise those of the fresh run */
  int64_t V = df_model_cfg(m)->vocab_size;
  float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
  df_kv_truncate(kv, np + 10);
  df_kv_truncate(kv2, np + 10);
  int32_t t = 7;
  assert_int_equal(df_model_forward(m, kv, &t, 1, DF_LOGITS_LAST, la, err, sizeof err), 0);
  assert_int_equal(df_model_forward(m, kv2, &t, 1, DF_LOGITS_LAST, lb, err, sizeof err), 0);
  assert_memory_equal(la, lb, (size_t)V * 4);
  free(la);
  free(lb);
  df_kv_destroy(&kv);
  df_kv_destroy(&kv2);
  golden_free(&g);
  df_model_destroy(&m);
}

/* Continuous batching: sequences at different positions, joining at different times, with
 * chunk boundaries splitting sequences, get bitwise the logits they get alone. */
static void test_multi_sequence_batch(void **state) {
  (void)state;
  golden g;
  golden_load("tiny-moe-sparse", &g);
  df_model *m = load_fixture_model("tiny-moe-sparse", 7);
  char err[1024];
  int64_t V = df_model_cfg(m)->vocab_size;
  enum { NS = 3, STEPS = 12 };
  int64_t plen[NS] = {9, 20, 4}, join[NS] = {0, 0, 5}; /* step at which each sequence starts */
  const int32_t *prompt[NS] = {g.prompt, g.prompt + 9, g.prompt + 40};
  /* alone: prefill then greedy decode; record the logits of every step */
  float *solo = malloc((size_t)(NS * STEPS * V) * sizeof(float));
  for (int s = 0; s < NS; s++) {
    df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
    float *lg = solo + (int64_t)s * STEPS * V;
    assert_int_equal(df_model_forward(m, kv, prompt[s], plen[s], DF_LOGITS_LAST, lg, err, sizeof err), 0);
    for (int t = 1; t < STEPS; t++) {
      int32_t tok = argmax(lg + (t - 1) * V, V);
      assert_int_equal(df_model_forward(m, kv, &tok, 1, DF_LOGITS_LAST, lg + t * V, err, sizeof err), 0);
    }
    df_kv_destroy(&kv);
  }
  /* together */
  df_kv_cache *kvs[NS];
  float *lg = malloc((size_t)(NS * STEPS * V) * sizeof(float));
  int32_t next[NS];
  for (int s = 0; s < NS; s++) kvs[s] = df_model_kv_new(m, 0, err, sizeof err);
  for (int step = 0; step < STEPS + 5; step++) {
    df_batch_seq b[NS];
    int nb = 0, who[NS];
    for (int s = 0; s < NS; s++) {
      int64_t t = step - join[s];
      if (t < 0 || t >= STEPS) continue;
      float *out = lg + ((int64_t)s * STEPS + t) * V;
      if (t == 0)
        b[nb] = (df_batch_seq){kvs[s], prompt[s], plen[s], DF_LOGITS_LAST, out, NULL};
      else {
        next[s] = argmax(out - V, V);
        b[nb] = (df_batch_seq){kvs[s], &next[s], 1, DF_LOGITS_LAST, out, NULL};
      }
      who[nb++] = s;
    }
    (void)who;
    if (nb == 0) continue;
    if (df_model_forward_batch(m, b, nb, err, sizeof err) != 0) fail_msg("%s", err);
  }
  assert_memory_equal(solo, lg, (size_t)(NS * STEPS * V) * sizeof(float));
  /* errors leave every cache as it was */
  int32_t bad = 100000, ok = 1;
  int64_t len0 = kvs[0]->len, len1 = kvs[1]->len;
  df_batch_seq eb[2] = {{kvs[0], &ok, 1, DF_LOGITS_NONE, NULL, NULL}, {kvs[1], &bad, 1, DF_LOGITS_NONE, NULL, NULL}};
  assert_int_equal(df_model_forward_batch(m, eb, 2, err, sizeof err), -1);
  assert_non_null(strstr(err, "token id 100000"));
  eb[1].kv = kvs[0];
  eb[1].ids = &ok;
  assert_int_equal(df_model_forward_batch(m, eb, 2, err, sizeof err), -1);
  assert_non_null(strstr(err, "share a KV cache"));
  assert_int_equal(kvs[0]->len, len0);
  assert_int_equal(kvs[1]->len, len1);
  for (int s = 0; s < NS; s++) df_kv_destroy(&kvs[s]);
  free(solo);
  free(lg);
  golden_free(&g);
  df_model_destroy(&m);
}

/* Forward errors leave the cache untouched; the message names the numbers. */
static void test_forward_errors(void **state) {
  (void)state;
  df_model *m = load_fixture_model("tiny-dense", 64);
  char err[1024];
  df_kv_cache *kv = df_model_kv_new(m, 16, err, sizeof err);
  int32_t ids[20] = {0};
  float *lg = malloc((size_t)df_model_cfg(m)->vocab_size * 4);
  assert_int_equal(df_model_forward(m, kv, ids, 20, DF_LOGITS_LAST, lg, err, sizeof err), -1);
  assert_non_null(strstr(err, "context overflow: 0 cached + 20 new tokens > context 16"));
  ids[3] = 100000;
  assert_int_equal(df_model_forward(m, kv, ids, 5, DF_LOGITS_LAST, lg, err, sizeof err), -1);
  assert_non_null(strstr(err, "token id 100000 at index 3 out of range [0, 512)"));
  assert_int_equal(kv->len, 0);
  free(lg);
  df_kv_destroy(&kv);
  df_model_destroy(&m);
}

/* The kernels against libtorch in float64: linear over every stored dtype, attention. */
static void test_kernels_vs_libtorch(void **state) {
  (void)state;
  char err[256];
  int64_t M = 5, K = 37, N = 11; /* K not a multiple of 8: exercises the tail */
  uint16_t wb[11 * 37];
  float wf[11 * 37], xv[5 * 37];
  uint32_t s = 12345;
  for (int i = 0; i < N * K; i++) {
    s = s * 1664525u + 1013904223u;
    wf[i] = ((float)(s >> 8) / 16777216.0f - 0.5f);
    uint32_t u;
    memcpy(&u, &wf[i], 4);
    wb[i] = (uint16_t)(u >> 16);
  }
  for (int i = 0; i < M * K; i++) xv[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
  int64_t ws[2] = {N, K}, xs[2] = {M, K}, ys[2] = {M, N};
  df_t_tensor *wt16 = df_t_wrap(wb, DF_DT_BF16, 2, ws, err, sizeof err);
  df_t_tensor *wt32 = df_t_wrap(wf, DF_DT_F32, 2, ws, err, sizeof err);
  df_t_tensor *x = df_t_new_f32(2, xs, err, sizeof err), *y = df_t_new_f32(2, ys, err, sizeof err);
  memcpy(df_t_f32(x), xv, sizeof xv);
  float ref[5 * 11];
  df_t_tensor *ws_[2] = {wt16, wt32};
  for (int w = 0; w < 2; w++) {
    df_t_linear(x, 0, M, ws_[w], NULL, y);
    assert_int_equal(df_t_ref_linear(x, M, ws_[w], NULL, ref, err, sizeof err), 0);
    for (int i = 0; i < M * N; i++) assert_float_equal(df_t_f32(y)[i], ref[i], 1e-5);
  }
  /* attention: 3 query rows at positions 4..6 over a 7-position cache, GQA 4:2 */
  int64_t nh = 4, nkv = 2, d = 16, ctx = 8, R = 3, p0 = 4;
  int64_t qs[3] = {R, nh, d}, cs[3] = {nkv, ctx, d}, ss[2] = {df_k_max_threads(), ctx};
  df_t_tensor *q = df_t_new_f32(3, qs, err, sizeof err), *o = df_t_new_f32(3, qs, err, sizeof err);
  df_t_tensor *kc = df_t_new_f32(3, cs, err, sizeof err), *vc = df_t_new_f32(3, cs, err, sizeof err);
  df_t_tensor *sc = df_t_new_f32(2, ss, err, sizeof err);
  for (int64_t i = 0; i < R * nh * d; i++) df_t_f32(q)[i] = (float)((i * 31) % 17) / 17.0f - 0.5f;
  for (int64_t i = 0; i < nkv * ctx * d; i++) {
    df_t_f32(kc)[i] = (float)((i * 13) % 23) / 23.0f - 0.5f;
    df_t_f32(vc)[i] = (float)((i * 7) % 19) / 19.0f - 0.5f;
  }
  float aref[3 * 4 * 16];
  df_t_attention(q, R, p0, nh, kc, vc, 0.25f, o, sc);
  assert_int_equal(df_t_ref_attention(q, R, p0, nh, kc, vc, 0.25f, aref, err, sizeof err), 0);
  for (int64_t i = 0; i < R * nh * d; i++) assert_float_equal(df_t_f32(o)[i], aref[i], 1e-5);
  df_t_tensor *all[] = {wt16, wt32, x, y, q, o, kc, vc, sc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) df_t_destroy(&all[i]);
}

/* One generation as `deltafin serve` runs it: on a thread other than the one that loaded the
 * model (the scheduler's). No cmocka calls here: they must stay on the test's thread. */
typedef struct thread_gen {
  df_model *m;
  const golden *g;
  float *logits;     /* [n_prompt, vocab]: every prompt position, one prefill */
  int32_t ids[256];  /* greedy continuation */
  int kernel_threads; /* df_k_max_threads() seen on the generating thread */
  char err[1024];    /* empty on success */
} thread_gen;

static void *thread_gen_main(void *arg) {
  thread_gen *j = arg;
  const golden *g = j->g;
  int64_t V = df_model_cfg(j->m)->vocab_size;
  j->kernel_threads = df_k_max_threads();
  j->logits = malloc((size_t)(g->n_prompt * V) * sizeof(float));
  float *lg = malloc((size_t)V * sizeof(float));
  df_kv_cache *kv = df_model_kv_new(j->m, 0, j->err, sizeof j->err);
  if (!j->logits || !lg || !kv) goto done;
  if (df_model_forward(j->m, kv, g->prompt, g->n_prompt, DF_LOGITS_ALL, j->logits, j->err,
                       sizeof j->err) != 0)
    goto done;
  memcpy(lg, j->logits + (g->n_prompt - 1) * V, (size_t)V * sizeof(float));
  for (int64_t i = 0; i < g->n_greedy; i++) {
    j->ids[i] = argmax(lg, V);
    if (df_model_forward(j->m, kv, &j->ids[i], 1, DF_LOGITS_LAST, lg, j->err, sizeof j->err))
      goto done;
  }
  j->err[0] = 0;
done:
  if (!kv && !j->err[0]) snprintf(j->err, sizeof j->err, "out of memory");
  df_kv_destroy(&kv);
  free(lg);
  return NULL;
}

/* The configured thread count holds for kernels on every thread: a model loaded with 1 or 3
 * threads (fewer or more than the cores) generates on another thread (as the server does)
 * with exactly that many kernel threads — scratch sized for it — and the same prompt logits,
 * bit for bit, and greedy ids as with the default count (the kernels are thread-invariant). */
static void test_thread_counts(void **state) {
  (void)state;
  static const char *names[] = {"tiny-moe-sparse", "tiny-ds-fp8"};
  static const int counts[] = {0, 1, 3};
  for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
    golden g;
    golden_load(names[f], &g);
    float *base = NULL;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      char dir[1024], err[1024];
      snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, names[f]);
      df_model *m = NULL;
      df_model_opts o = {.max_ctx = 256, .max_rows = 64, .threads = counts[c]};
      if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
      thread_gen j = {.m = m, .g = &g};
      pthread_t th;
      assert_int_equal(pthread_create(&th, NULL, thread_gen_main, &j), 0);
      assert_int_equal(pthread_join(th, NULL), 0);
      if (j.err[0]) fail_msg("%s --threads %d: %s", names[f], counts[c], j.err);
      printf("# %s threads %d: %d kernel threads on the generating thread\n", names[f],
             counts[c], j.kernel_threads);
      if (counts[c] > 0) assert_int_equal(j.kernel_threads, counts[c]);
      for (int64_t i = 0; i < g.n_greedy; i++)
        if (j.ids[i] != g.greedy[i])
          fail_msg("%s threads %d: greedy token %lld is %d, reference %d", names[f], counts[c],
                   (long long)i, j.ids[i], g.greedy[i]);
      size_t nb = (size_t)(g.n_prompt * g.vocab) * sizeof(float);
      if (!base)
        base = j.logits;
      else {
        assert_memory_equal(j.logits, base, nb);
        free(j.logits);
      }
      df_model_destroy(&m);
    }
    free(base);
    golden_free(&g);
  }
}

/* Each layer's token mixer allocates its own state: every layer's K and V slots exist with
 * shape [n_kv, ctx, head_dim], the cache costs exactly 2 * n_kv * head_dim * 4 bytes per
 * token and layer, as the model and the cache both say. */
static void test_sequence_state(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof k_fixtures / sizeof *k_fixtures; f++) {
    df_model *m = load_fixture_model(k_fixtures[f], 16);
    const df_model_config *c = df_model_cfg(m);
    char err[256];
    df_kv_cache *kv = df_model_kv_new(m, 100, err, sizeof err);
    assert_non_null(kv);
    uint64_t per_token = (uint64_t)(2 * c->num_hidden_layers * c->num_key_value_heads * c->head_dim) * 4;
    assert_int_equal(df_model_kv_bytes_per_token(m), per_token);
    assert_int_equal(df_kv_bytes_per_token(kv), per_token);
    assert_int_equal(df_kv_bytes(kv), 100 * per_token);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
      assert_int_equal(df_t_size(kv->k[l], 0), c->num_key_value_heads);
      assert_int_equal(df_t_size(kv->k[l], 1), 100);
      assert_int_equal(df_t_size(kv->v[l], 2), c->head_dim);
    }
    char kind[64];
    df_model_state_kind(m, kind, sizeof kind);
    assert_string_equal(kind, "fp32 K and V");
    df_kv_destroy(&kv);
    df_model_destroy(&m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_vs_libtorch), cmocka_unit_test(test_golden_fixtures),
      cmocka_unit_test(test_batch_invariance),    cmocka_unit_test(test_isa_agreement),
      cmocka_unit_test(test_kv_rollback),         cmocka_unit_test(test_forward_errors),
      cmocka_unit_test(test_multi_sequence_batch), cmocka_unit_test(test_thread_counts),
      cmocka_unit_test(test_sequence_state),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
