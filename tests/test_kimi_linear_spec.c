/* tests/test_kimi_linear_spec.c — speculative decoding over a kimi_linear target
 * (coordinator/generate/spec.c): with deliberately wrong drafts — the tiny random qwen3
 * tests/fixtures/tiny-dense and another kimi_linear model (tiny-kl-mixed for tiny-kl-48b and
 * back; same 512-token vocabulary), which the target rejects nearly every round — greedy ids
 * are identical to the target alone at fixed k 1, 3, 6 and adaptive k; the target as its own
 * draft accepts every drafted token. So the KDA recurrent state (target and draft) rolls
 * back exactly at every rejection, and a draft state that cannot reach back is refilled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/generate/spec.h"

#define N_NEW 40

static df_model *load(const char *dir) {
  char err[1024];
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 128, .max_rows = 16};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static df_spec_stats gen(df_model *t, df_model *d, int k, bool adaptive, const int32_t *prompt,
                         int64_t np, int32_t *out) {
  char err[1024];
  df_sampler_params greedy = {.temperature = 0, .top_p = 1};
  df_spec_params pp = {.k_init = k, .k_min = adaptive ? 0 : k, .k_max = adaptive ? 0 : k,
                       .adaptive = adaptive, .quiet = true};
  df_spec *s = df_spec_new(t, d, &greedy, &pp, 0, err, sizeof err);
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

static void test_wrong_drafts_identical_ids(void **state) {
  (void)state;
  static const char *targets[] = {DF_FIXTURES "/tiny-kl-48b", DF_FIXTURES "/tiny-kl-k3gate",
                                  DF_FIXTURES "/tiny-kl-mixed"};
  static const char *others[] = {DF_FIXTURES "/tiny-kl-mixed", DF_FIXTURES "/tiny-kl-48b",
                                 DF_FIXTURES "/tiny-kl-48b"};
  static const int32_t prompts[][6] = {{5, 6, 7, 8, 9, 10}, {400, 3, 77, 1, 0, 12}};
  df_model *dense = load(DF_FIXTURES "/tiny-dense");
  for (size_t ti = 0; ti < 3; ti++) {
    df_model *t = load(targets[ti]), *self = load(targets[ti]), *other = load(others[ti]);
    for (size_t p = 0; p < 2; p++) {
      int32_t alone[N_NEW], with[N_NEW];
      gen(t, NULL, 4, false, prompts[p], 6, alone);
      int ks[] = {1, 3, 6};
      for (size_t i = 0; i < 3; i++) {
        df_spec_stats st = gen(t, dense, ks[i], false, prompts[p], 6, with);
        assert_memory_equal(alone, with, sizeof alone);
        printf("# %s, k %d, qwen3 draft: %lld of %lld drafted accepted\n", targets[ti], ks[i],
               (long long)st.accepted, (long long)st.drafted);
        st = gen(t, other, ks[i], false, prompts[p], 6, with);
        assert_memory_equal(alone, with, sizeof alone);
        assert_true(st.accepted < st.drafted);
        st = gen(t, self, ks[i], false, prompts[p], 6, with);
        assert_memory_equal(alone, with, sizeof alone);
        assert_int_equal(st.accepted, st.drafted);
      }
      gen(t, dense, 4, true, prompts[p], 6, with);
      assert_memory_equal(alone, with, sizeof alone);
      gen(t, other, 4, true, prompts[p], 6, with);
      assert_memory_equal(alone, with, sizeof alone);
    }
    df_model_destroy(&t);
    df_model_destroy(&self);
    df_model_destroy(&other);
  }
  df_model_destroy(&dense);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_wrong_drafts_identical_ids)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
