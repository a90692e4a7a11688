/* tests/test_spec_mem.c — a draft's memory and its fallbacks (coordinator/generate/spec.c,
 * engine/model.c df_model_opts.share_from):
 *   - an embedding table byte-identical between draft and target is mapped once: resident
 *     memory after running target + draft grows by about one 16 MiB table, not two, and the
 *     draft's logits are bitwise those of an unshared copy;
 *   - memory headroom short (injected reserve, field or DF_DRAFT_MEM_RESERVE): drafting off,
 *     logged once, target-alone output;
 *   - draft load failure and a differing tokenizer: df_spec_draft_load refuses with a reason,
 *     a tokenizer.json that differs only in formatting is accepted.
 * Models come from tests/make_spec_drafts.py (ctest fixture spec_drafts).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/generate/spec.h"

#define TABLE_BYTES ((int64_t)32768 * 256 * 2) /* big-target / big-draft embedding, bf16 */
#define N_NEW 24

static void path(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/spec-drafts/%s", DF_BINARY_DIR, name);
}

static df_model *load(const char *dir, const df_model *share_from) {
  char err[1024];
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 128, .max_rows = 16, .threads = 1, .share_from = share_from};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static df_model *load_named(const char *name, const df_model *share_from) {
  char dir[1024];
  path(dir, sizeof dir, name);
  return load(dir, share_from);
}

/* VmRSS of this process in bytes. */
static int64_t rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  assert_non_null(f);
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
  fclose(f);
  assert_true(kb > 0);
  return (int64_t)kb * 1024;
}

static const int32_t prompt[] = {11, 2000, 31000, 7, 12345, 9, 30000, 5};   /* big models */
static const int32_t prompt_small[] = {400, 3, 77, 1, 0, 12, 5, 6};          /* vocab 512 */
#define NP ((int64_t)(sizeof prompt / sizeof prompt[0]))

/* Prefill the prompt on a fresh cache; last-position logits into out [vocab]. */
static void forward_prompt(df_model *m, float *out) {
  char err[1024];
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  assert_non_null(kv);
  if (df_model_forward(m, kv, prompt, NP, DF_LOGITS_LAST, out, err, sizeof err) != 0)
    fail_msg("%s", err);
  df_kv_destroy(&kv);
}

static df_spec_stats gen(df_model *t, df_model *d, int64_t reserve, bool quiet, int32_t *out) {
  char err[1024];
  df_sampler_params sp = {.temperature = 0, .top_p = 1};
  df_spec_params pp = {.k_init = 3, .k_min = 3, .k_max = 3, .quiet = quiet, .mem_reserve = reserve};
  df_spec *s = df_spec_new(t, d, &sp, &pp, 64, err, sizeof err);
  if (!s) fail_msg("%s", err);
  const int32_t *ids = df_model_cfg(t)->vocab_size > 512 ? prompt : prompt_small;
  if (df_spec_prefill(s, ids, NP, NULL, err, sizeof err) != 0) fail_msg("%s", err);
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

static void test_shared_embedding_resident_once(void **state) {
  (void)state;
  int64_t V = 32768;
  float *lt = malloc((size_t)V * 4), *ls = malloc((size_t)V * 4), *lu = malloc((size_t)V * 4);
  assert_true(lt && ls && lu);
  int64_t r0 = rss();
  df_model *t = load_named("big-target", NULL);
  forward_prompt(t, lt); /* tied: the lm_head reads the whole table */
  int64_t r1 = rss();
  df_model *ds = load_named("big-draft", t);
  assert_int_equal(df_model_memory(ds).shared, TABLE_BYTES);
  forward_prompt(ds, ls);
  int64_t r2 = rss();
  df_model *du = load_named("big-draft", NULL);
  assert_int_equal(df_model_memory(du).shared, 0);
  forward_prompt(du, lu);
  int64_t r3 = rss();
  printf("# resident memory: target +%.1f MiB, draft sharing the table +%.1f MiB, draft with its "
         "own copy +%.1f MiB (table %.1f MiB)\n", (r1 - r0) / 1048576.0, (r2 - r1) / 1048576.0,
         (r3 - r2) / 1048576.0, TABLE_BYTES / 1048576.0);
  assert_true(r1 - r0 > TABLE_BYTES * 9 / 10);
  assert_true(r2 - r1 < TABLE_BYTES / 2);
  assert_true(r3 - r2 > TABLE_BYTES * 9 / 10);
  /* outputs unchanged: bitwise the same logits from the shared and the unshared draft */
  assert_memory_equal(ls, lu, (size_t)V * 4);
  /* and greedy generation with the sharing draft equals the target alone */
  int32_t alone[N_NEW], with[N_NEW];
  gen(t, NULL, -1, true, alone);
  df_spec_stats st = gen(t, ds, -1, true, with);
  assert_memory_equal(alone, with, sizeof alone);
  assert_true(st.drafting && st.rounds > 0);
  df_model_destroy(&du);
  df_model_destroy(&ds);
  df_model_destroy(&t);
  free(lt);
  free(ls);
  free(lu);
}

static void test_share_only_identical(void **state) {
  (void)state;
  /* perturbed differs from tiny-moe-sparse only in o_proj / down_proj: embed and lm_head
   * (untied) are both shared; tiny-dense (other hidden size) shares nothing */
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse", NULL);
  df_model *p = load_named("perturbed", t);
  df_model *d = load(DF_FIXTURES "/tiny-dense", t);
  assert_int_equal(df_model_memory(p).shared, 2 * 512 * 96 * 2);
  assert_int_equal(df_model_memory(d).shared, 0);
  int32_t alone[N_NEW], with[N_NEW];
  gen(t, NULL, -1, true, alone);
  gen(t, p, -1, true, with);
  assert_memory_equal(alone, with, sizeof alone);
  df_model_destroy(&d);
  df_model_destroy(&p);
  df_model_destroy(&t);
}

/* Runs gen with stderr captured; returns the number of "drafting off" lines. */
static int gen_count_logs(df_model *t, df_model *d, int64_t reserve, int32_t *out,
                          df_spec_stats *st, char *first, size_t firstlen) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  *st = gen(t, d, reserve, false, out);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  char line[512];
  int n = 0;
  first[0] = 0;
  while (fgets(line, sizeof line, tmp))
    if (strstr(line, "drafting off")) {
      if (!n) snprintf(first, firstlen, "%s", line);
      n++;
    }
  fclose(tmp);
  return n;
}

static void test_memory_headroom(void **state) {
  (void)state;
  df_model *t = load(DF_FIXTURES "/tiny-moe-sparse", NULL);
  df_model *d = load_named("perturbed", t);
  int32_t alone[N_NEW], with[N_NEW];
  df_spec_stats st;
  char line[512];
  gen(t, NULL, -1, true, alone);
  /* the draft needs its KV cache, buffers and unshared weights */
  uint64_t need = df_spec_draft_need_bytes(d, 64);
  df_model_bytes b = df_model_memory(d);
  assert_true(need >= b.buffers + b.total - b.shared + df_model_kv_bytes_per_token(d) * 64);
  /* a reserve no machine has: off, one log line, target-alone ids */
  int logs = gen_count_logs(t, d, INT64_MAX / 4, with, &st, line, sizeof line);
  assert_memory_equal(alone, with, sizeof alone);
  assert_false(st.drafting);
  assert_int_equal(st.rounds, 0);
  assert_int_equal(logs, 1);
  assert_non_null(strstr(line, "memory headroom short"));
  assert_non_null(strstr(st.off_reason, "memory headroom short"));
  /* the same through the environment (reserve field 0) */
  setenv("DF_DRAFT_MEM_RESERVE", "4611686018427387904", 1);
  st = gen(t, d, 0, true, with);
  assert_false(st.drafting);
  assert_memory_equal(alone, with, sizeof alone);
  /* a reserve of 1 byte (or no check): drafting on */
  setenv("DF_DRAFT_MEM_RESERVE", "1", 1);
  st = gen(t, d, 0, true, with);
  assert_true(st.drafting && st.rounds > 0);
  assert_memory_equal(alone, with, sizeof alone);
  unsetenv("DF_DRAFT_MEM_RESERVE");
  st = gen(t, d, -1, true, with);
  assert_true(st.drafting && st.rounds > 0);
  df_model_destroy(&d);
  df_model_destroy(&t);
}

static void test_draft_load_fallbacks(void **state) {
  (void)state;
  char tdir[1024], ddir[1024], why[1024];
  path(tdir, sizeof tdir, "target-tok");
  df_model *t = load(tdir, NULL), *d = NULL;
  /* corrupt safetensors: refused with the loader's message */
  path(ddir, sizeof ddir, "corrupt");
  assert_int_equal(df_spec_draft_load(t, tdir, ddir, NULL, &d, why, sizeof why), -1);
  assert_null(d);
  printf("# corrupt: %s\n", why);
  assert_non_null(strstr(why, "model.safetensors"));
  /* missing folder */
  path(ddir, sizeof ddir, "no-such-draft");
  assert_int_equal(df_spec_draft_load(t, tdir, ddir, NULL, &d, why, sizeof why), -1);
  assert_null(d);
  /* a tokenizer with two ids swapped */
  path(ddir, sizeof ddir, "tok-diff");
  assert_int_equal(df_spec_draft_load(t, tdir, ddir, NULL, &d, why, sizeof why), -1);
  assert_null(d);
  printf("# tok-diff: %s\n", why);
  assert_non_null(strstr(why, "tokenizer differs from the target's (token id 256)"));
  /* the same tokenizer, other JSON formatting: accepted; the draft shares embed + lm_head */
  path(ddir, sizeof ddir, "tok-same");
  assert_int_equal(df_spec_draft_load(t, tdir, ddir, NULL, &d, why, sizeof why), 0);
  assert_non_null(d);
  assert_int_equal(df_model_memory(d).shared, 2 * 512 * 96 * 2);
  assert_int_equal(df_model_max_ctx(d), df_model_max_ctx(t));
  int32_t alone[N_NEW], with[N_NEW];
  gen(t, NULL, -1, true, alone);
  df_spec_stats st = gen(t, d, -1, true, with);
  assert_true(st.drafting && st.rounds > 0);
  assert_memory_equal(alone, with, sizeof alone);
  df_model_destroy(&d);
  df_model_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shared_embedding_resident_once), /* first: a clean RSS baseline */
      cmocka_unit_test(test_share_only_identical),
      cmocka_unit_test(test_memory_headroom),
      cmocka_unit_test(test_draft_load_fallbacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
