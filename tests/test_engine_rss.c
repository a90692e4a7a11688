/* tests/test_engine_rss.c — loading maps the checkpoint, it does not copy it: the resident
 * memory added by df_model_load stays far below the checkpoint's size (read from
 * /proc/self/status VmRSS). The ~200 MB checkpoint is written by the rss200m preset of
 * tests/reference/make_checkpoint.py (ctest fixture ckpt_rss200m). */
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

static void test_load_maps_not_copies(void **state) {
  (void)state;
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/ckpt/rss200m", DF_BINARY_DIR);
  long before = rss_kib();
  assert_true(before > 0);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 512, .max_rows = 64};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("%s", err);
  long after = rss_kib();
  df_model_bytes b = df_model_memory(m);
  long ckpt_kib = (long)(b.total / 1024);
  printf("# checkpoint %ld KiB, RSS %ld -> %ld KiB (+%ld KiB, planned buffers %llu KiB)\n",
         ckpt_kib, before, after, after - before, (unsigned long long)(b.buffers / 1024));
  assert_true(ckpt_kib > 150 * 1024);
  /* mapped, not read: the growth is the planned buffers, far below the checkpoint */
  assert_true(after - before < ckpt_kib / 10);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_load_maps_not_copies)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
