/* tests/test_admission.c — the device admission rule (engine/device/admission.h) on synthetic
 * numbers: reserve, all-or-nothing charging of resident + KV + draft + work, hottest-first
 * expert fill with deterministic ties, skipping an expert that does not fit, the CPU
 * fallback and its log line, invalid input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/device/admission.h"

#define GiB ((uint64_t)1 << 30)
#define MiB ((uint64_t)1 << 20)

static void test_reserve(void **state) {
  (void)state;
  assert_int_equal(df_admit_reserve(0), 2 * GiB);
  assert_int_equal(df_admit_reserve(16 * GiB), 2 * GiB);       /* 10% = 1.6 GiB < 2 */
  assert_int_equal(df_admit_reserve(20 * GiB), 2 * GiB);       /* exactly 2 GiB */
  assert_int_equal(df_admit_reserve(80 * GiB), 8 * GiB);       /* H100 80 GB */
  assert_int_equal(df_admit_reserve(141 * GiB), 141 * GiB / 10); /* H200 */
  assert_int_equal(df_admit_reserve(UINT64_MAX), UINT64_MAX / 100 * 10 + UINT64_MAX % 100 * 10 / 100);
}

/* 24 GiB card, 22 GiB free: reserve 2.4 GiB, budget 19.6 GiB. Resident 10 GiB, KV 2, draft
 * 1, work 0.5 -> 6.1 GiB left for experts of 1 GiB each: the 6 hottest go, ties by index. */
static void test_hottest_first(void **state) {
  (void)state;
  enum { N = 10 };
  uint64_t eb[N], heat[N] = {5, 90, 7, 90, 0, 3, 50, 50, 1, 2};
  for (int i = 0; i < N; i++) eb[i] = GiB;
  uint8_t on[N];
  df_admit_in in = {.device = "cuda:0", .free_bytes = 22 * GiB, .total_bytes = 24 * GiB,
                    .resident_bytes = 10 * GiB, .kv_bytes = 2 * GiB, .draft_bytes = GiB,
                    .work_bytes = GiB / 2, .n_experts = N, .expert_bytes = eb, .heat = heat};
  df_admit_plan p;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  assert_true(p.ok);
  assert_int_equal(p.reserve, 24 * GiB / 10);
  assert_int_equal(p.budget, 22 * GiB - 24 * GiB / 10);
  assert_int_equal(p.charged, 13 * GiB + GiB / 2);
  assert_int_equal(p.experts_on_device, 6);
  assert_int_equal(p.expert_bytes, 6 * GiB);
  /* order: 1 (90), 3 (90), 6 (50), 7 (50), 2 (7), 0 (5) */
  const uint8_t want[N] = {1, 1, 1, 1, 0, 0, 1, 1, 0, 0};
  assert_memory_equal(on, want, N);
  assert_non_null(strstr(p.line, "cuda:0"));
  assert_non_null(strstr(p.line, "experts on the device 6 of 10"));
}

/* No heat yet (NULL): lowest (layer, expert) index first. */
static void test_no_heat(void **state) {
  (void)state;
  enum { N = 6 };
  uint64_t eb[N] = {MiB, MiB, MiB, MiB, MiB, MiB};
  uint8_t on[N];
  df_admit_in in = {.free_bytes = 2 * GiB + 3 * MiB + MiB / 2, .total_bytes = 10 * GiB,
                    .n_experts = N, .expert_bytes = eb};
  df_admit_plan p;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  assert_true(p.ok);
  const uint8_t want[N] = {1, 1, 1, 0, 0, 0};
  assert_memory_equal(on, want, N);
  assert_int_equal(p.experts_on_device, 3);
}

/* An expert too big for what is left is skipped; a smaller, colder one still goes. */
static void test_skip_large(void **state) {
  (void)state;
  enum { N = 3 };
  uint64_t eb[N] = {3 * MiB, 5 * MiB, 2 * MiB}, heat[N] = {10, 9, 1};
  uint8_t on[N];
  df_admit_in in = {.free_bytes = 2 * GiB + 6 * MiB, .total_bytes = GiB, .n_experts = N,
                    .expert_bytes = eb, .heat = heat};
  df_admit_plan p;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  const uint8_t want[N] = {1, 0, 1};
  assert_memory_equal(on, want, N);
  assert_int_equal(p.expert_bytes, 5 * MiB);
}

/* Resident + KV + draft + work over the budget: nothing on the device, one clear line. */
/* A zero-byte slot (a dense layer's place in the layer-major array) is never placed nor
 * counted. */
static void test_zero_bytes(void **state) {
  (void)state;
  enum { N = 4 };
  uint64_t eb[N] = {0, MiB, 0, MiB}, heat[N] = {100, 1, 100, 2};
  uint8_t on[N];
  df_admit_in in = {.free_bytes = 4 * GiB, .total_bytes = GiB, .n_experts = N,
                    .expert_bytes = eb, .heat = heat};
  df_admit_plan p;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  const uint8_t want[N] = {0, 1, 0, 1};
  assert_memory_equal(on, want, N);
  assert_int_equal(p.experts_on_device, 2);
  assert_non_null(strstr(p.line, "experts on the device 2 of 2"));
}

static void test_fallback(void **state) {
  (void)state;
  enum { N = 4 };
  uint64_t eb[N] = {MiB, MiB, MiB, MiB};
  uint8_t on[N] = {9, 9, 9, 9};
  df_admit_in in = {.device = "cuda:1", .free_bytes = 8 * GiB, .total_bytes = 80 * GiB,
                    .resident_bytes = GiB, .n_experts = N, .expert_bytes = eb};
  df_admit_plan p;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0); /* reserve 8 GiB >= free */
  assert_false(p.ok);
  assert_int_equal(p.budget, 0);
  const uint8_t none[N] = {0, 0, 0, 0};
  assert_memory_equal(on, none, N);
  assert_non_null(strstr(p.line, "cuda:1"));
  assert_non_null(strstr(p.line, "running on the CPU"));
  assert_null(strchr(p.line, '\n'));
  /* exactly fitting charge is admitted, with no room for experts */
  in.free_bytes = 8 * GiB + GiB;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  assert_true(p.ok);
  assert_int_equal(p.experts_on_device, 0);
  /* one byte more charged is refused */
  in.work_bytes = 1;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  assert_false(p.ok);
  /* saturating sums: huge charges do not wrap into a small number */
  in.resident_bytes = UINT64_MAX;
  in.kv_bytes = UINT64_MAX;
  assert_int_equal(df_admit_plan_make(&in, on, &p), 0);
  assert_false(p.ok);
  assert_int_equal(p.charged, UINT64_MAX);
}

static void test_invalid(void **state) {
  (void)state;
  df_admit_plan p;
  df_admit_in in = {.free_bytes = GiB, .total_bytes = GiB, .n_experts = -1};
  assert_int_equal(df_admit_plan_make(&in, NULL, &p), -1);
  assert_false(p.ok);
  in.n_experts = 2; /* no per-expert bytes */
  uint8_t on[2];
  assert_int_equal(df_admit_plan_make(&in, on, &p), -1);
  assert_non_null(strstr(p.line, "invalid input"));
  in.n_experts = 0; /* a dense model: no experts, fine */
  in.free_bytes = 4 * GiB;
  assert_int_equal(df_admit_plan_make(&in, NULL, &p), 0);
  assert_true(p.ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reserve),     cmocka_unit_test(test_hottest_first),
      cmocka_unit_test(test_no_heat),     cmocka_unit_test(test_skip_large),
      cmocka_unit_test(test_zero_bytes),  cmocka_unit_test(test_fallback),
      cmocka_unit_test(test_invalid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
