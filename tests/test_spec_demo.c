/* tests/test_spec_demo.c — speculative decoding on the bundled demo pair (models/demo-moe
 * target, models/demo-draft draft): for 20 text prompts (tokenized with the target's
 * tokenizer) 128 greedy tokens are identical with and without the draft, at fixed k 2 and 4
 * (alternating prompts) and with adaptive k on a few; the draft, loaded as `deltafin run`
 * loads it (df_spec_draft_load), shares the target's embedding table. Prints the acceptance
 * rate and mean accepted length per k (docs/SPEC.md quotes them).
 * The target-alone ids come from the fixture spec_demo_alone (this program's --write-alone
 * mode, run once per ctest run for this test and tests/test_spec_cluster.c; the file named by
 * DF_SPEC_DEMO_ALONE, tests/spec_demo_alone.h); without that file, from a second instance of
 * the target on its own thread, computed while the main thread runs the draft (each on one
 * compute thread; compared once both are done).
 *   test_spec_demo --write-alone FILE   write the target-alone ids of the 20 prompts to FILE
 * The models folder is DF_DEMO_MODELS when set, else models/ of the source tree; while the
 * pair is missing the test exits 77 (ctest: skipped).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
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
#include "engine/text/tokenizer.h"
#include "demo_prompts.h"
#include "spec_demo_alone.h"

#define N_NEW 128

static char g_target[1024], g_draft[1024];


typedef struct acc {
  int64_t rounds, drafted, accepted, emitted;
} acc;

/* N_NEW greedy ids of t (with draft d when not NULL); 0, or -1 with err set. Thread-safe:
 * fails nothing itself (cmocka's fail_msg belongs to the test's own thread). */
static int gen_ids(df_model *t, df_model *d, int k, bool adaptive, const int32_t *ids, int64_t n,
                   int32_t *out, acc *a, char *err, size_t errlen) {
  df_sampler_params sp = {.temperature = 0, .top_p = 1};
  df_spec_params pp = {.k_init = k, .k_min = adaptive ? 0 : k, .k_max = adaptive ? 0 : k,
                       .adaptive = adaptive, .quiet = true, .mem_reserve = -1};
  df_spec *s = df_spec_new(t, d, &sp, &pp, n + N_NEW + DF_SPEC_K_MAX + 1, err, errlen);
  if (!s) return -1;
  if (df_spec_prefill(s, ids, n, NULL, err, errlen) != 0) {
    df_spec_destroy(&s);
    return -1;
  }
  int got_n = 0;
  while (got_n < N_NEW) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int got = df_spec_step(s, toks, err, errlen);
    if (got < 1) {
      df_spec_destroy(&s);
      return -1;
    }
    for (int i = 0; i < got && got_n < N_NEW; i++) out[got_n++] = toks[i];
  }
  df_spec_stats st = df_spec_get_stats(s);
  if (a) {
    a->rounds += st.rounds;
    a->drafted += st.drafted;
    a->accepted += st.accepted;
    a->emitted += st.emitted;
  }
  df_spec_destroy(&s);
  if (d && st.rounds <= 0) {
    snprintf(err, errlen, "no drafting round");
    return -1;
  }
  return 0;
}

static void gen(df_model *t, df_model *d, int k, bool adaptive, const int32_t *ids, int64_t n,
                int32_t *out, acc *a) {
  char err[1024];
  if (gen_ids(t, d, k, adaptive, ids, n, out, a, err, sizeof err) != 0) fail_msg("%s", err);
}

/* The target-alone ids of every prompt, on a model instance of its own. */
typedef struct alone_job {
  int np;
  int32_t **ids;
  const size_t *n;
  int32_t (*out)[N_NEW];
  char err[1024]; /* empty: done */
} alone_job;

static void *alone_run(void *arg) {
  alone_job *j = arg;
  df_model *t = NULL;
  df_model_opts o = {.max_ctx = 512, .threads = 1};
  if (df_model_load(g_target, &o, &t, j->err, sizeof j->err) != 0) return NULL;
  for (int p = 0; p < j->np; p++)
    if (gen_ids(t, NULL, 1, false, j->ids[p], (int64_t)j->n[p], j->out[p], NULL, j->err,
                sizeof j->err) != 0)
      break;
  df_model_destroy(&t);
  return NULL;
}

static void test_demo_pair_greedy_identical(void **state) {
  (void)state;
  char err[1024];
  df_model *t = NULL, *d = NULL;
  /* one compute thread: on a busy machine a second one mostly waits at barriers */
  df_model_opts o = {.max_ctx = 512, .threads = 1};
  if (df_model_load(g_target, &o, &t, err, sizeof err) != 0) fail_msg("%s", err);
  df_model_opts dopt = {.max_ctx = 512, .max_rows = DF_SPEC_K_MAX + 1, .threads = 1};
  if (df_spec_draft_load(t, g_target, g_draft, &dopt, &d, err, sizeof err) != 0)
    fail_msg("draft: %s", err);
  df_model_bytes db = df_model_memory(d);
  printf("# draft shares %.1f MiB of %.1f MiB with the target\n", db.shared / 1048576.0,
         db.total / 1048576.0);
  assert_true(db.shared > 0);
  df_tok *tok = NULL;
  if (df_tok_load(g_target, &tok, err, sizeof err) != 0) fail_msg("%s", err);
  acc by_k[DF_SPEC_K_MAX + 1] = {{0}}, adapt = {0};
  /* static: the other thread reads them, and a failure here leaves this frame at once */
  static int32_t *ids[20];
  static size_t n[20];
  for (int p = 0; p < 20; p++)
    if (df_tok_encode(tok, demo_prompts[p], strlen(demo_prompts[p]), DF_TOK_ADD_SPECIAL, &ids[p],
                      &n[p], err, sizeof err) != 0)
      fail_msg("%s", err);
  static int32_t alone[20][N_NEW], with[20][N_NEW], with_adaptive[4][N_NEW];
  static alone_job job;
  /* the fixture's ids when it wrote every prompt's, else our own on a thread */
  const char *file = getenv("DF_SPEC_DEMO_ALONE");
  bool have = true;
  for (int p = 0; p < 20 && have; p++)
    have = spec_demo_alone_find(file, demo_prompts[p], ids[p], n[p], N_NEW, alone[p]);
  printf("# target-alone ids: %s\n", have ? file : "computed here");
  job = (alone_job){.np = have ? 0 : 20, .ids = ids, .n = n, .out = alone};
  pthread_t th;
  if (!have && pthread_create(&th, NULL, alone_run, &job) != 0) fail_msg("cannot start a thread");
  for (int p = 0; p < 20; p++) {
    int k = p % 2 ? 2 : 4;
    gen(t, d, k, false, ids[p], (int64_t)n[p], with[p], &by_k[k]);
    if (p < 4) gen(t, d, 4, true, ids[p], (int64_t)n[p], with_adaptive[p], &adapt);
  }
  if (!have) pthread_join(th, NULL);
  if (job.err[0]) fail_msg("target alone: %s", job.err);
  for (int p = 0; p < 20; p++) {
    if (memcmp(alone[p], with[p], sizeof alone[p]) != 0)
      fail_msg("prompt %d, k=%d: ids differ", p, p % 2 ? 2 : 4);
    if (p < 4 && memcmp(alone[p], with_adaptive[p], sizeof alone[p]) != 0)
      fail_msg("prompt %d, adaptive k: ids differ", p);
    free(ids[p]);
  }
  for (int k = 2; k <= 4; k += 2)
    printf("# k=%d: %lld rounds, acceptance %.3f, mean accepted length %.2f, %.2f tokens per "
           "target forward\n", k, (long long)by_k[k].rounds,
           (double)by_k[k].accepted / (double)by_k[k].drafted,
           (double)by_k[k].accepted / (double)by_k[k].rounds,
           (double)by_k[k].emitted / (double)by_k[k].rounds);
  printf("# adaptive k (4 prompts): %lld rounds, acceptance %.3f\n", (long long)adapt.rounds,
         adapt.drafted ? (double)adapt.accepted / (double)adapt.drafted : 0.0);
  df_tok_destroy(&tok);
  df_model_destroy(&d);
  df_model_destroy(&t);
}

/* --write-alone FILE: the target-alone ids of every prompt, for spec_demo_alone.h's readers. */
static int write_alone(const char *path) {
  char err[1024];
  df_tok *tok = NULL;
  if (df_tok_load(g_target, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "tokenizer: %s\n", err);
    return 1;
  }
  static int32_t *ids[20];
  static size_t n[20];
  static int32_t alone[20][N_NEW];
  for (int p = 0; p < 20; p++)
    if (df_tok_encode(tok, demo_prompts[p], strlen(demo_prompts[p]), DF_TOK_ADD_SPECIAL, &ids[p],
                      &n[p], err, sizeof err) != 0) {
      fprintf(stderr, "tokenize: %s\n", err);
      return 1;
    }
  df_tok_destroy(&tok);
  remove(path); /* no earlier run's file survives a failure here */
  alone_job job = {.np = 20, .ids = ids, .n = n, .out = alone};
  alone_run(&job);
  if (job.err[0]) {
    fprintf(stderr, "target alone: %s\n", job.err);
    return 1;
  }
  if (spec_demo_alone_write(path, 20, demo_prompts, ids, n, &alone[0][0], N_NEW, N_NEW) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  for (int p = 0; p < 20; p++) free(ids[p]);
  printf("wrote the target-alone ids of 20 prompts x %d tokens to %s\n", N_NEW, path);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = getenv("DF_DEMO_MODELS");
  char def[1024];
  if (!dir || !*dir) {
    snprintf(def, sizeof def, "%s/models", DF_SOURCE_DIR);
    dir = def;
  }
  snprintf(g_target, sizeof g_target, "%.900s/demo-moe", dir);
  snprintf(g_draft, sizeof g_draft, "%.900s/demo-draft", dir);
  char c1[1100], c2[1100];
  snprintf(c1, sizeof c1, "%s/config.json", g_target);
  snprintf(c2, sizeof c2, "%s/config.json", g_draft);
  if (access(c1, R_OK) != 0 || access(c2, R_OK) != 0) {
    printf("skipped: the demo pair %s, %s is missing\n", g_target, g_draft);
    return 77;
  }
  if (argc == 3 && !strcmp(argv[1], "--write-alone")) return write_alone(argv[2]);
  if (argc != 1) {
    fprintf(stderr, "usage: test_spec_demo [--write-alone FILE]\n");
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_demo_pair_greedy_identical),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
