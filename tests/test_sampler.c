/* tests/test_sampler.c — greedy, temperature, top-k, top-p semantics, seeded
 * reproducibility and the position-keyed draw of engine/sampler.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sampler.h"

static df_sampler *mk(double t, double p, int64_t k, uint64_t seed, int64_t n) {
  char err[256];
  df_sampler_params sp = {.temperature = t, .top_p = p, .top_k = k, .seed = seed};
  df_sampler *s = df_sampler_new(&sp, n, err, sizeof err);
  if (!s) fail_msg("%s", err);
  return s;
}

static void test_greedy_lowest_index_on_ties(void **state) {
  (void)state;
  float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
  df_sampler *s = mk(0, 1, 0, 1, 6);
  for (int i = 0; i < 5; i++) assert_int_equal(df_sampler_sample(s, l), 1);
  float p[6];
  df_sampler_probs(s, l, p);
  float want[6] = {0, 1, 0, 0, 0, 0};
  assert_memory_equal(p, want, sizeof want);
  df_sampler_destroy(&s);
  assert_null(s);
}

static void test_temperature_softmax(void **state) {
  (void)state;
  float l[3] = {1.0f, 2.0f, 3.0f}, p[3];
  df_sampler *s = mk(2.0, 1, 0, 1, 3);
  df_sampler_probs(s, l, p);
  double z = exp(0.5) + exp(1.0) + exp(1.5);
  assert_float_equal(p[0], exp(0.5) / z, 1e-6);
  assert_float_equal(p[1], exp(1.0) / z, 1e-6);
  assert_float_equal(p[2], exp(1.5) / z, 1e-6);
  df_sampler_destroy(&s);
}

static void test_top_k_keeps_ties_at_boundary(void **state) {
  (void)state;
  /* top-2 of {4, 1, 3, 3, 0}: the 2nd largest value is 3, and HF keeps every logit >= it */
  float l[5] = {4, 1, 3, 3, 0}, p[5];
  df_sampler *s = mk(1.0, 1, 2, 1, 5);
  df_sampler_probs(s, l, p);
  double z = exp(4) + 2 * exp(3);
  assert_float_equal(p[0], exp(4) / z, 1e-6);
  assert_float_equal(p[1], 0, 0);
  assert_float_equal(p[2], exp(3) / z, 1e-6);
  assert_float_equal(p[3], exp(3) / z, 1e-6);
  assert_float_equal(p[4], 0, 0);
  df_sampler_destroy(&s);
}

static void test_top_p_smallest_set(void **state) {
  (void)state;
  /* probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps {0.5, 0.3} (0.8 >= 0.75);
   * top_p 0.8 keeps the same two (cumulative ascending 0.05+0.15 = 0.2 <= 0.2 removed);
   * top_p 0.81 keeps three. */
  float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)}, p[4];
  df_sampler *s = mk(1.0, 0.75, 0, 1, 4);
  df_sampler_probs(s, l, p);
  assert_float_equal(p[0], 0.5 / 0.8, 1e-5);
  assert_float_equal(p[1], 0.3 / 0.8, 1e-5);
  assert_float_equal(p[2], 0, 0);
  assert_float_equal(p[3], 0, 0);
  df_sampler_destroy(&s);
  s = mk(1.0, 0.81, 0, 1, 4);
  df_sampler_probs(s, l, p);
  assert_float_equal(p[2], 0.15 / 0.95, 1e-5);
  assert_float_equal(p[3], 0, 0);
  df_sampler_destroy(&s);
  /* a tiny top_p keeps exactly the most probable token */
  s = mk(1.0, 1e-6, 0, 1, 4);
  df_sampler_probs(s, l, p);
  assert_float_equal(p[0], 1, 0);
  df_sampler_destroy(&s);
}

static void test_seeded_reproducible_and_distributed(void **state) {
  (void)state;
  float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  df_sampler *a = mk(1.0, 1, 0, 42, 4), *b = mk(1.0, 1, 0, 42, 4), *c = mk(1.0, 1, 0, 43, 4);
  int counts[4] = {0}, n = 40000, differ = 0;
  for (int i = 0; i < n; i++) {
    int32_t x = df_sampler_sample(a, l), y = df_sampler_sample(b, l), z = df_sampler_sample(c, l);
    assert_int_equal(x, y);
    differ += x != z;
    counts[x]++;
  }
  assert_true(differ > n / 4); /* another seed gives another stream */
  /* 40000 draws: standard error <= 0.0025; allow 4 sigma */
  double want[4] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; i++) assert_float_equal((double)counts[i] / n, want[i], 0.01);
  df_sampler_destroy(&a);
  df_sampler_destroy(&b);
  df_sampler_destroy(&c);
}

/* Every temperature in range behaves as its limit: at 1e-40 (logits / T overflows float, and
 * (float)1e-46 is 0) the distribution is greedy's, ties split evenly, never NaN. */
static void test_tiny_temperature_is_greedy(void **state) {
  (void)state;
  float l[5] = {0.5f, 3.0f, -1.0f, 2.999f, -INFINITY}, p[5];
  const double temps[] = {1e-40, 1e-46, 1e-300, 4.9e-324, 1e-30};
  for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
    df_sampler *s = mk(temps[t], 0.9, 0, 3, 5);
    df_sampler_probs(s, l, p);
    float want[5] = {0, 1, 0, 0, 0};
    assert_memory_equal(p, want, sizeof want);
    for (int i = 0; i < 20; i++) assert_int_equal(df_sampler_sample(s, l), 1);
    df_sampler_destroy(&s);
  }
  float tie[4] = {1.0f, 7.0f, 7.0f, -3.0f};
  df_sampler *s = mk(1e-40, 1, 2, 3, 4);
  df_sampler_probs(s, tie, p);
  float want[4] = {0, 0.5f, 0.5f, 0};
  assert_memory_equal(p, want, sizeof want);
  int seen[4] = {0};
  for (int i = 0; i < 200; i++) seen[df_sampler_sample(s, tie)]++;
  assert_true(seen[1] > 50 && seen[2] > 50 && seen[0] == 0 && seen[3] == 0);
  df_sampler_destroy(&s);
}

static void test_bad_params(void **state) {
  (void)state;
  char err[256];
  df_sampler_params p = {.temperature = -1, .top_p = 1};
  assert_null(df_sampler_new(&p, 10, err, sizeof err));
  assert_non_null(strstr(err, "temperature -1 must be a finite number >= 0"));
  p.temperature = 1;
  p.top_p = 0;
  assert_null(df_sampler_new(&p, 10, err, sizeof err));
  assert_non_null(strstr(err, "top_p 0 must be in (0, 1]"));
  p.top_p = 1;
  p.top_k = -3;
  assert_null(df_sampler_new(&p, 10, err, sizeof err));
  assert_non_null(strstr(err, "top_k -3 must be >= 0"));
}

/* df_sampler_sample_at: the token of a position depends on (seed, position, logits) only —
 * not on the order of the calls or on other draws — and the hash behind it is pinned (the same
 * bits on every machine: a change here changes every seeded generation). */
static void test_position_keyed(void **state) {
  (void)state;
  float flat[16] = {0};
  df_sampler *s = mk(1.0, 1, 0, 12345, 16), *t = mk(1.0, 1, 0, 12345, 16);
  static const int32_t pinned[24] = {15, 14, 3, 14, 12, 11, 7, 14, 5, 8, 15, 13,
                                     4, 8, 8, 1, 2, 14, 7, 2, 11, 8, 4, 11};
  for (int p = 0; p < 24; p++) assert_int_equal(df_sampler_sample_at(s, flat, p), pinned[p]);
  for (int p = 23; p >= 0; p--) { /* reverse order, other draws between */
    (void)df_sampler_sample(t, flat);
    assert_int_equal(df_sampler_sample_at(t, flat, p), pinned[p]);
  }
  df_sampler_destroy(&t);
  t = mk(1.0, 1, 0, (uint64_t)1 << 62, 16); /* large seeds and positions */
  static const int32_t far[24] = {10, 3, 1, 5, 14, 3, 12, 14, 13, 8, 12, 0,
                                  5, 8, 7, 7, 9, 2, 13, 10, 4, 1, 8, 12};
  for (int p = 0; p < 24; p++)
    assert_int_equal(df_sampler_sample_at(t, flat, (int64_t)1000000000000 + p), far[p]);
  df_sampler_destroy(&t);
  /* a skewed law: the race's winners, pinned */
  float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  t = mk(1.0, 1, 0, 7, 4);
  static const int32_t skew[24] = {0, 0, 0, 1, 2, 1, 0, 0, 0, 0, 0, 3,
                                   1, 0, 1, 0, 0, 0, 2, 0, 1, 1, 0, 0};
  for (int p = 0; p < 24; p++) assert_int_equal(df_sampler_sample_at(t, l, p), skew[p]);
  /* greedy ignores the position */
  df_sampler *g = mk(0, 1, 0, 7, 4);
  for (int p = 0; p < 8; p++) assert_int_equal(df_sampler_sample_at(g, l, p), 0);
  df_sampler_destroy(&g);
  df_sampler_destroy(&t);
  df_sampler_destroy(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy_lowest_index_on_ties), cmocka_unit_test(test_temperature_softmax),
      cmocka_unit_test(test_top_k_keeps_ties_at_boundary), cmocka_unit_test(test_top_p_smallest_set),
      cmocka_unit_test(test_seeded_reproducible_and_distributed), cmocka_unit_test(test_bad_params),
      cmocka_unit_test(test_tiny_temperature_is_greedy), cmocka_unit_test(test_position_keyed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
