/* tests/test_progress.c — run's progress bar (coordinator/cli/progress.h) on a simulated
 * clock, the process clock, and the engine hooks that feed the bar:
 *   - nothing is drawn before DF_PROGRESS_DELAY_S; then one "\r" line with the label, the
 *     bar, the percentage, DONE/TOTAL UNIT and the ETA (elapsed x left / done); redraws at
 *     most every DF_PROGRESS_REDRAW_S; the end overwrites the line with blanks and returns
 *     the cursor; a bar with no stream draws nothing; a long label is cut to the width;
 *   - DF_PROGRESS=1 / 0 / unset decide df_progress_wanted on a stream that is no terminal;
 *   - df_pull_fmt_eta's shapes;
 *   - df_proc_age counts from the process's creation and advances with the clock;
 *   - df_model_opts.progress is called once per layer bound, df_model_set_progress after
 *     each forward chunk (and no more once cleared).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coordinator/cli/progress.h"
#include "coordinator/hub/pull_util.h"
#include "engine/model.h"

/* Everything written to a memstream so far (NUL-terminated). */
typedef struct {
  FILE *f;
  char *buf;
  size_t len;
} mem;

static void mem_open(mem *m) {
  m->buf = NULL;
  m->len = 0;
  m->f = open_memstream(&m->buf, &m->len);
  assert_non_null(m->f);
}

static void mem_close(mem *m) {
  fclose(m->f);
  free(m->buf);
}

static void test_bar_timing_and_text(void **state) {
  (void)state;
  mem m;
  mem_open(&m);
  df_progress p;
  df_progress_begin(&p, m.f, "load demo-moe", "layers", 100.0);
  df_progress_update(&p, 1, 6, 100.5); /* before the delay: nothing */
  fflush(m.f);
  assert_int_equal(m.len, 0);
  df_progress_update(&p, 3, 6, 100.0 + DF_PROGRESS_DELAY_S + 0.2);
  fflush(m.f);
  assert_true(m.len > 0);
  assert_int_equal(m.buf[0], '\r');
  assert_null(strchr(m.buf, '\n'));
  assert_non_null(strstr(m.buf, "load demo-moe ["));
  assert_non_null(strstr(m.buf, " 50%"));
  assert_non_null(strstr(m.buf, "3/6 layers"));
  assert_non_null(strstr(m.buf, "ETA 0:01")); /* 1.2 s for 3 of 6: 1.2 s left */
  size_t drawn = m.len;
  df_progress_update(&p, 4, 6, 100.0 + DF_PROGRESS_DELAY_S + 0.25); /* too soon to redraw */
  fflush(m.f);
  assert_int_equal(m.len, drawn);
  df_progress_update(&p, 6, 6, 100.0 + DF_PROGRESS_DELAY_S + 0.4);
  fflush(m.f);
  assert_true(m.len > drawn);
  assert_non_null(strstr(m.buf + drawn, "100%"));
  assert_non_null(strstr(m.buf + drawn, "ETA 0:00"));
  drawn = m.len;
  df_progress_end(&p);
  fflush(m.f);
  /* cleared: "\r", blanks as wide as the widest line, "\r" */
  assert_true(m.len > drawn + 2);
  assert_int_equal(m.buf[drawn], '\r');
  assert_int_equal(m.buf[m.len - 1], '\r');
  for (size_t i = drawn + 1; i < m.len - 1; i++) assert_int_equal(m.buf[i], ' ');
  size_t cleared = m.len;
  df_progress_end(&p); /* again: nothing */
  fflush(m.f);
  assert_int_equal(m.len, cleared);
  mem_close(&m);
}

static void test_bar_off_and_narrow(void **state) {
  (void)state;
  df_progress p;
  df_progress_begin(&p, NULL, "prefill", "tokens", 0);
  df_progress_update(&p, 5, 10, 50.0); /* no stream: nothing, no crash */
  df_progress_end(&p);
  mem m;
  mem_open(&m);
  char label[200];
  memset(label, 'x', sizeof label - 1);
  label[sizeof label - 1] = 0;
  df_progress_begin(&p, m.f, label, "tokens", 0);
  df_progress_update(&p, 0, 10, 5.0); /* nothing done yet: ETA unknown */
  fflush(m.f);
  assert_true(m.len > 1 && m.len <= 80); /* "\r" + at most 79 characters (not a terminal) */
  assert_int_equal(strspn(m.buf + 1, "x"), 47); /* the label is cut to 47 bytes */
  df_progress_end(&p);
  mem_close(&m);
  mem_open(&m);
  df_progress_begin(&p, m.f, "prefill", "tokens", 0);
  df_progress_update(&p, 0, 10, 5.0);
  fflush(m.f);
  assert_non_null(strstr(m.buf, "ETA --:--"));
  assert_non_null(strstr(m.buf, "  0%"));
  df_progress_end(&p);
  mem_close(&m);
}

static void test_wanted(void **state) {
  (void)state;
  mem m;
  mem_open(&m);
  unsetenv("DF_PROGRESS");
  assert_false(df_progress_wanted(m.f)); /* not a terminal */
  setenv("DF_PROGRESS", "1", 1);
  assert_true(df_progress_wanted(m.f));
  setenv("DF_PROGRESS", "0", 1);
  assert_false(df_progress_wanted(m.f));
  unsetenv("DF_PROGRESS");
  mem_close(&m);
}

static void test_fmt_eta(void **state) {
  (void)state;
  char b[16];
  assert_string_equal(df_pull_fmt_eta(0, b, sizeof b), "0:00");
  assert_string_equal(df_pull_fmt_eta(59.6, b, sizeof b), "1:00");
  assert_string_equal(df_pull_fmt_eta(754, b, sizeof b), "12:34");
  assert_string_equal(df_pull_fmt_eta(3600, b, sizeof b), "1:00:00");
  assert_string_equal(df_pull_fmt_eta(-1, b, sizeof b), "--:--");
  assert_string_equal(df_pull_fmt_eta(1e9, b, sizeof b), "--:--");
}

static void test_proc_age(void **state) {
  (void)state;
  double a = df_proc_age();
  assert_true(a >= 0 && a < 600); /* this process was created moments ago */
  struct timespec d = {0, 200 * 1000 * 1000};
  nanosleep(&d, NULL);
  double b = df_proc_age();
  assert_true(b - a > 0.17 && b - a < 1.0); /* advances with the clock (10 ms ticks) */
}

typedef struct {
  int calls;
  int64_t done[64], total[64];
} seen;

static void record(void *ctx, int64_t done, int64_t total) {
  seen *s = ctx;
  if (s->calls < 64) {
    s->done[s->calls] = done;
    s->total[s->calls] = total;
  }
  s->calls++;
}

static void test_engine_hooks(void **state) {
  (void)state;
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/tiny-moe-sparse", DF_FIXTURES);
  seen ld = {0};
  df_model_opts o = {.max_ctx = 64, .max_rows = 4, .progress = record, .progress_ctx = &ld};
  df_model *m = NULL;
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  int64_t L = df_model_cfg(m)->num_hidden_layers;
  assert_int_equal(ld.calls, L);
  for (int i = 0; i < ld.calls; i++) {
    assert_int_equal(ld.done[i], i + 1);
    assert_int_equal(ld.total[i], L);
  }
  df_kv_cache *kv = df_model_kv_new(m, 64, err, sizeof err);
  assert_non_null(kv);
  int32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  seen fw = {0};
  df_model_set_progress(m, record, &fw);
  assert_int_equal(df_model_forward(m, kv, ids, 10, DF_LOGITS_NONE, NULL, err, sizeof err), 0);
  assert_int_equal(fw.calls, 3); /* chunks of 4, 4 and 2 rows */
  assert_int_equal(fw.done[0], 4);
  assert_int_equal(fw.done[1], 8);
  assert_int_equal(fw.done[2], 10);
  assert_int_equal(fw.total[2], 10);
  df_model_set_progress(m, NULL, NULL);
  assert_int_equal(df_model_forward(m, kv, ids, 3, DF_LOGITS_NONE, NULL, err, sizeof err), 0);
  assert_int_equal(fw.calls, 3);
  df_kv_destroy(&kv);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bar_timing_and_text), cmocka_unit_test(test_bar_off_and_narrow),
      cmocka_unit_test(test_wanted),              cmocka_unit_test(test_fmt_eta),
      cmocka_unit_test(test_proc_age),            cmocka_unit_test(test_engine_hooks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
