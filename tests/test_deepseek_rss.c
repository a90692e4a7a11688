/* tests/test_deepseek_rss.c — FP8 weights stay FP8 in memory: after loading a ~60 MB
 * kimi_k2 checkpoint with F8_E4M3 128x128-block weights (preset rss-ds-fp8 of
 * tests/reference/make_checkpoint.py, ctest fixture ckpt_rss_ds_fp8) and running a prefill
 * that reads every resident weight and nearly every expert, the process's resident memory
 * has grown by about the checkpoint's FP8 bytes plus the planned buffers and the KV cache —
 * a widened bf16 copy of the FP8 weights would add twice their size, an fp32 copy four
 * times (read from /proc/self/status VmRSS). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/model.h"

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

static void test_fp8_resident_size(void **state) {
  (void)state;
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/ckpt/rss-ds-fp8", DF_BINARY_DIR);
  long before = rss_kib();
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 128, .max_rows = 64};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("%s", err);
  long loaded = rss_kib();
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  assert_non_null(kv);
  int32_t ids[64];
  for (int i = 0; i < 64; i++) ids[i] = (i * 7919) % 8000;
  float *lg = malloc(8000 * sizeof(float));
  assert_int_equal(df_model_forward(m, kv, ids, 64, DF_LOGITS_LAST, lg, err, sizeof err), 0);
  long after = rss_kib();
  df_model_bytes b = df_model_memory(m);
  long fp8_kib = (long)(b.total / 1024), extra_kib = (long)((b.buffers + df_kv_bytes(kv)) / 1024);
  printf("# FP8 checkpoint %ld KiB (experts %llu KiB); RSS %ld -> %ld after load -> %ld after a "
         "64-token prefill (+%ld KiB; buffers + KV cache %ld KiB)\n",
         fp8_kib, (unsigned long long)(b.experts / 1024), before, loaded, after, after - before,
         extra_kib);
  assert_true(fp8_kib > 50 * 1024);
  /* mapped, not read: buffers plus thread start-up (OpenMP stacks, libtorch) */
  assert_true(loaded - before < (long)(b.buffers / 1024) + 16 * 1024);
  /* every weight page read once: FP8 bytes + buffers + cache + the same slack. The FP8
   * linear weights are ~42 of the 59 MB: a bf16 copy of them would add >= 84 MB (> 100 MB
   * in all), an fp32 copy >= 168 MB. */
  assert_true(after - before < fp8_kib + extra_kib + 16 * 1024);
  free(lg);
  df_kv_destroy(&kv);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fp8_resident_size)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
