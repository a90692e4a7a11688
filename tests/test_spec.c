/* tests/test_spec.c — speculative decoding (coordinator/generate/spec.c): greedy output identical
 * with and without a draft at every fixed k and with adaptive k; a draft identical to the
 * target accepts everything; a partially agreeing draft exercises acceptance and rollback;
 * fallbacks (vocabulary mismatch) give target-alone output; seeded sampling with a draft is
 * reproducible. Drafts are written by tests/make_spec_drafts.py (ctest fixture spec_drafts). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/generate/spec.h"

#define N_NEW 64

static df_model *load(const char *dir) {
  char err[1024];
  df_model *m = NULL;
  /* one thread: on a busy machine a second one mostly waits at barriers */
  df_model_opts o = {.max_ctx = 256, .max_rows = 16, .threads = 1};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

/* Generate exactly N_NEW tokens (EOS ignored) into out; returns the final stats. */
static df_spec_stats gen(df_model *t, df_model *d, const df_sampler_params *sp, int k,
                         bool adaptive, const int32_t *prompt, int64_t np, int32_t *out) {
  char err[1024];
  df_spec_params pp = {.k_init = k, .k_min = adaptive ? 0 : k, .k_max = adaptive ? 0 : k,
                       .adaptive = adaptive, .quiet = true};
  df_spec *s = df_spec_new(t, d, sp, &pp, 0, err, sizeof err);
  if (!s) fail_msg("%s", err);
  if (df_spec_prefill(s, prompt, np, NULL, err, sizeof err) != 0) fail_msg("%s", err);
  int n = 0;
  while (n < N_NEW) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int got = df_spec_step(s, toks, err, sizeof err);
    if (got < 1) fail_msg("step: %s", err);
    for (int i = 0; i < got && n < N_NEW; i++) out[n++] = toks[i];
  }
  df_spec_stats st = df_spec_get_stats(s);
  df_spec_destroy(&s);
  return st;
}

static const int32_t prompts[][6] = {{5, 6, 7, 8, 9, 10}, {400, 3, 77, 1, 0, 12},
                                     {100, 101, 102, 103, 104, 105}, {7, 7, 7, 7, 7, 7},
                                     {311, 42, 500, 2, 260, 99}};

static void test_greedy_identical(void **state) {
  (void)state;
  char dir[1024];
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse");
  snprintf(dir, sizeof dir, "%s/spec-drafts/perturbed", DF_BINARY_DIR);
  df_model *pert = load(dir);
  df_model *self = load(DF_FIXTURES "/tiny-moe-sparse");
  df_model *dense = load(DF_FIXTURES "/tiny-dense");
  df_sampler_params greedy = {.temperature = 0, .top_p = 1};
  int64_t acc = 0, drafted = 0;
  for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
    int32_t alone[N_NEW], with[N_NEW];
    gen(t, NULL, &greedy, 4, false, prompts[p], 6, alone);
    int ks[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
      df_spec_stats st = gen(t, pert, &greedy, ks[i], false, prompts[p], 6, with);
      assert_memory_equal(alone, with, sizeof alone);
      assert_int_equal(st.k_hist[ks[i]], st.rounds);
      acc += st.accepted;
      drafted += st.drafted;
      st = gen(t, self, &greedy, ks[i], false, prompts[p], 6, with);
      assert_memory_equal(alone, with, sizeof alone);
      assert_int_equal(st.accepted, st.drafted); /* a draft equal to the target: all accepted */
      st = gen(t, dense, &greedy, ks[i], false, prompts[p], 6, with);
      assert_memory_equal(alone, with, sizeof alone);
    }
    gen(t, pert, &greedy, 4, true, prompts[p], 6, with);
    assert_memory_equal(alone, with, sizeof alone);
  }
  /* the perturbed draft agrees sometimes, not always: both accept and reject paths ran */
  printf("# perturbed draft: %lld of %lld drafted tokens accepted\n", (long long)acc,
         (long long)drafted);
  assert_true(acc > 0 && acc < drafted);
  df_model_destroy(&t);
  df_model_destroy(&pert);
  df_model_destroy(&self);
  df_model_destroy(&dense);
}

/* Drafting measured as not paying (every round waits 30 ms) rests: the target alone for 64
 * tokens, then drafting is measured again (k back at its first value), then rests 128 tokens;
 * the ids stay the target's */
static void test_rest_and_measure_again(void **state) {
  (void)state;
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/spec-drafts/perturbed", DF_BINARY_DIR);
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse"), *d = load(dir);
  df_sampler_params greedy = {.temperature = 0, .top_p = 1};
  enum { N = 200 };
  int32_t alone[N], with[N];
  df_spec_stats st[2];
  for (int run = 0; run < 2; run++) {
    df_spec_params pp = {.k_init = 3, .adaptive = true, .quiet = true,
                         .test_draft_delay_ms = run ? 30 : 0};
    df_spec *s = df_spec_new(t, run ? d : NULL, &greedy, &pp, 0, err, sizeof err);
    if (!s) fail_msg("%s", err);
    if (df_spec_prefill(s, prompts[1], 6, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    int32_t *out = run ? with : alone;
    for (int n = 0; n < N;) {
      int32_t toks[DF_SPEC_K_MAX + 1];
      int got = df_spec_step(s, toks, err, sizeof err);
      if (got < 1) fail_msg("step: %s", err);
      for (int i = 0; i < got && n < N; i++) out[n++] = toks[i];
    }
    st[run] = df_spec_get_stats(s);
    df_spec_destroy(&s);
  }
  assert_memory_equal(alone, with, sizeof alone);
  const df_spec_stats *w = &st[1];
  printf("# rests %d, k over time:", w->rests);
  for (int i = 0; i < w->n_k_trace; i++)
    printf(" %lld:%d", (long long)w->k_trace[i].at, w->k_trace[i].k);
  printf("\n");
  assert_int_equal(w->rests, 2);
  /* off, back at k 3 at least 64 tokens later, off again */
  int i0 = -1, i1 = -1;
  for (int i = 0; i < w->n_k_trace; i++)
    if (w->k_trace[i].k == 0 && i0 < 0) i0 = i;
    else if (i0 >= 0 && w->k_trace[i].k == 3 && i1 < 0) i1 = i;
  assert_true(i0 >= 0 && i1 > i0);
  assert_true(w->k_trace[i1].at - w->k_trace[i0].at >= 64);
  assert_true(w->off_not_paying);
  assert_false(w->drafting); /* resting at the end: 200 tokens end inside the second rest */
  assert_non_null(strstr(w->off_reason, "it does not pay"));
  df_model_destroy(&t);
  df_model_destroy(&d);
}

static void test_vocab_mismatch_falls_back(void **state) {
  (void)state;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/spec-drafts/vocab256", DF_BINARY_DIR);
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse"), *d = load(dir);
  df_sampler_params greedy = {.temperature = 0, .top_p = 1};
  int32_t alone[N_NEW], with[N_NEW];
  gen(t, NULL, &greedy, 4, false, prompts[0], 6, alone);
  df_spec_stats st = gen(t, d, &greedy, 4, false, prompts[0], 6, with);
  assert_memory_equal(alone, with, sizeof alone);
  assert_false(st.drafting);
  assert_int_equal(st.rounds, 0);
  assert_non_null(strstr(st.off_reason, "vocabulary (256 tokens) differs from the target's (512)"));
  df_model_destroy(&t);
  df_model_destroy(&d);
}

static void test_sampling_reproducible(void **state) {
  (void)state;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/spec-drafts/perturbed", DF_BINARY_DIR);
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse"), *d = load(dir);
  df_sampler_params sp = {.temperature = 0.8, .top_p = 0.95, .top_k = 40, .seed = 11};
  int32_t a[N_NEW], b[N_NEW], c[N_NEW];
  gen(t, d, &sp, 4, false, prompts[1], 6, a);
  gen(t, d, &sp, 4, false, prompts[1], 6, b);
  sp.seed = 12;
  gen(t, d, &sp, 4, false, prompts[1], 6, c);
  assert_memory_equal(a, b, sizeof a);
  assert_true(memcmp(a, c, sizeof a) != 0);
  df_model_destroy(&t);
  df_model_destroy(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy_identical),
      cmocka_unit_test(test_vocab_mismatch_falls_back),
      cmocka_unit_test(test_rest_and_measure_again),
      cmocka_unit_test(test_sampling_reproducible),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
