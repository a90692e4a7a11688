/* tests/test_kimi_linear_spec.c — speculative decoding over a kimi_linear target
 * (coordinator/generate/spec.c): with deliberately wrong drafts — the tiny random qwen3
 * tests/fixtures/tiny-dense and another kimi_linear model (tiny-kl-mixed for tiny-kl-48b and
 * back; same 512-token vocabulary), which the target rejects nearly every round — greedy ids
 * are identical to the target alone at fixed k 1, 3, 6 and adaptive k; the target as its own
 * draft accepts every drafted token. So the KDA recurrent state (target and draft) rolls
 * back exactly at every rejection, and a draft state that cannot reach back is refilled.
 * The serving scheduler (coordinator/generate/sched.c) over the same targets: 6 greedy
 * requests on 3 slots (slots are reused: their states reset to 0), prompts fed in budgets of
 * 7 ids next to other sequences' decode steps, drafting with the other kimi_linear model or
 * the target itself, answer exactly the text of each prompt's greedy ids computed alone
 * (a tokenizer whose 512 tokens are the texts "<000>" .. "<511>"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "coordinator/generate/sched.h"
#include "coordinator/generate/spec.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"
#include "id_tokenizer.h"

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

#define S_NEW 24
#define S_JOBS 6

static void test_scheduler_identical_text(void **state) {
  (void)state;
  static const char *targets[] = {DF_FIXTURES "/tiny-kl-48b", DF_FIXTURES "/tiny-kl-k3gate"};
  static const char *others[] = {DF_FIXTURES "/tiny-kl-mixed", DF_FIXTURES "/tiny-kl-48b"};
  df_tok *tok = id_tokenizer("kl-sched-tok");
  char err[1024];
  for (size_t ti = 0; ti < 2; ti++) {
    df_model *t = load(targets[ti]), *other = load(others[ti]), *self = load(targets[ti]);
    int32_t prompts[S_JOBS][20];
    int64_t np[S_JOBS];
    char want[S_JOBS][S_NEW * 5 + 1];
    for (int j = 0; j < S_JOBS; j++) { /* the greedy ids of each prompt alone */
      np[j] = 3 + 3 * j;
      for (int64_t i = 0; i < np[j]; i++) prompts[j][i] = (int32_t)((j * 101 + i * 37 + 5) % 512);
      df_kv_cache *kv = df_model_kv_new(t, 0, err, sizeof err);
      float *row = malloc(512 * sizeof(float));
      assert_int_equal(df_model_forward(t, kv, prompts[j], np[j], DF_LOGITS_LAST, row, err,
                                        sizeof err), 0);
      for (int i = 0; i < S_NEW; i++) {
        int32_t x = df_argmax_f32(row, 512);
        snprintf(want[j] + 5 * i, 6, "<%03d>", x);
        assert_int_equal(df_model_forward(t, kv, &x, 1, DF_LOGITS_LAST, row, err, sizeof err), 0);
      }
      free(row);
      df_kv_destroy(&kv);
    }
    df_model *drafts[3] = {NULL, other, self};
    for (int dv = 0; dv < 3; dv++) {
      df_sched_opts o = {.max_seqs = 3, .max_queue = S_JOBS, .ctx = 96, .prefill_budget = 7,
                         .draft = drafts[dv], .draft_k = 3, .draft_max_seqs = 3};
      df_sched *s = NULL;
      if (df_sched_new(t, tok, &o, &s, err, sizeof err) != 0) fail_msg("sched: %s", err);
      df_sched_job *jobs[S_JOBS];
      for (int j = 0; j < S_JOBS; j++) {
        df_sched_req r = {.prompt = prompts[j], .n_prompt = np[j], .max_tokens = S_NEW,
                          .sp = {.temperature = 0, .top_p = 1}, .ignore_eos = true};
        int status;
        if (df_sched_submit(s, &r, &jobs[j], &status, err, sizeof err) != 0)
          fail_msg("submit: %d %s", status, err);
      }
      for (int j = 0; j < S_JOBS; j++) {
        char got[S_NEW * 5 + 64] = "";
        size_t gl = 0;
        df_sched_news news = {0};
        while (news.finish == DF_SCHED_RUNNING) {
          struct pollfd pf = {.fd = df_sched_job_fd(jobs[j]), .events = POLLIN};
          poll(&pf, 1, 1000);
          char *txt = NULL;
          size_t len = 0;
          df_sched_job_take(jobs[j], &txt, &len, &news);
          if (txt && gl + len < sizeof got) {
            memcpy(got + gl, txt, len);
            gl += len;
            got[gl] = '\0';
          }
          free(txt);
        }
        if (news.finish != DF_SCHED_LENGTH) fail_msg("job %d: finish %d %s", j, news.finish, news.error);
        if (strcmp(got, want[j]) != 0)
          fail_msg("%s, draft %d, job %d: scheduler text %s, alone %s", targets[ti], dv, j, got,
                   want[j]);
        df_sched_job_release(&jobs[j]);
      }
      df_sched_stats st = df_sched_get_stats(s);
      printf("# scheduler, %s, draft %d: %lld steps, %lld drafted, %lld accepted\n",
             targets[ti], dv, (long long)st.steps, (long long)st.drafted,
             (long long)st.accepted);
      if (dv > 0) assert_true(st.drafted > 0);
      if (dv == 2) assert_int_equal(st.accepted, st.drafted);
      df_sched_destroy(&s);
    }
    df_model_destroy(&t);
    df_model_destroy(&other);
    df_model_destroy(&self);
  }
  df_tok_destroy(&tok);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_wrong_drafts_identical_ids),
                                     cmocka_unit_test(test_scheduler_identical_text)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
