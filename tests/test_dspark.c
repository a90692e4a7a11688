/* tests/test_dspark.c — the DSpark block drafter (engine/draft/dspark.c) and speculative
 * decoding with it (coordinator/generate/spec.c df_spec_attach_block).
 *
 * Reference agreement: for drafters made by tests/reference/dspark_ckpt.py over a Qwen3-MoE
 * target (models/demo-moe, a tied tiny one) and a DeepSeek-V3 one, tests/reference/
 * dspark_ref.py wrote the target's captured rows, the drafter's final logits z (Markov bias
 * included, float64) and its greedy proposals (ctest fixture dspark). The engine's captured
 * rows and z must agree to fp32 accuracy and its proposals exactly (the reference's smallest
 * top-2 gap is >= 0.04, far above the fp32 differences). Invariants: a proposal leaves the
 * context cache's length unchanged and repeats bit for bit; a context appended one row at a
 * time gives the same bytes as one append of all rows.
 * Generation: greedy ids with the block drafter equal the target alone on 20 prompts, with
 * forced rejections at every block position (df_spec_params.test_corrupt_at) and partial
 * acceptance of every length (test_oracle: the target's own continuation), adaptive and
 * fixed k; after each run the drafter's context holds exactly the target's rows of the
 * committed positions (compared byte for byte with a context built from scratch). The same on
 * a Kimi Linear target (KDA recurrent state rolled back beside the drafter's context).
 */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <poll.h>

#include "coordinator/generate/sched.h"
#include "coordinator/generate/spec.h"
#include "engine/draft/dspark.h"
#include "engine/kernels/kernels.h"
#include "engine/text/tokenizer.h"
#include "id_tokenizer.h"

static df_model *load_target(const char *dir) {
  char err[1024];
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 256, .max_rows = 16, .threads = 1};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static df_dspark *load_drafter(const char *dir, df_model *t) {
  char err[1024];
  df_dspark *d = NULL;
  if (df_dspark_load(dir, t, 0, &d, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return d;
}

static float *read_f32(const char *path, size_t want) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  float *b = malloc(want * sizeof *b + 1);
  size_t got = fread(b, sizeof *b, want + 1, f);
  fclose(f);
  if (got != want) fail_msg("%s holds %zu floats, expected %zu", path, got, want);
  return b;
}

/* Largest |a - b| over n values, and the largest |b|. */
static double max_diff(const float *a, const float *b, size_t n, double *scale) {
  double d = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
  }
  *scale = s;
  return d;
}

/* Target rows [n, W] of ids (from an empty cache), captured for d. */
static float *capture(df_model *t, df_dspark *d, const int32_t *ids, int64_t n) {
  char err[1024];
  int nc = 0;
  const int64_t *layers = df_dspark_capture_layers(d, &nc);
  if (df_model_set_capture(t, layers, nc, err, sizeof err) != 0) fail_msg("%s", err);
  int64_t W = df_dspark_row_width(d);
  float *rows = malloc((size_t)(n * W) * sizeof *rows);
  df_kv_cache *kv = df_model_kv_new(t, 0, err, sizeof err);
  assert_non_null(kv);
  df_batch_seq q = {.kv = kv, .ids = ids, .n = n, .mode = DF_LOGITS_NONE, .capture = rows};
  if (df_model_forward_batch(t, &q, 1, err, sizeof err) != 0) fail_msg("%s", err);
  df_kv_destroy(&kv);
  df_model_set_capture(t, NULL, 0, err, sizeof err);
  return rows;
}

static void reference_case(const char *target_dir, const char *name) {
  char dir[1024], path[1100], err[1024];
  snprintf(dir, sizeof dir, "%s/dspark/%s", DF_BINARY_DIR, name);
  snprintf(path, sizeof path, "%s/ref.json", dir);
  json_error_t je;
  json_t *ref = json_load_file(path, 0, &je);
  if (!ref) fail_msg("%s: %s", path, je.text);
  json_t *ctx_ids = json_object_get(ref, "context_ids"), *props = json_object_get(ref, "proposals");
  int64_t L = (int64_t)json_array_size(ctx_ids);
  int r = (int)json_array_size(props);
  int32_t anchor = (int32_t)json_integer_value(json_object_get(ref, "anchor"));
  int32_t ids[256];
  assert_true(L > 0 && L <= 256 && r > 0);
  for (int64_t i = 0; i < L; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ctx_ids, i));

  df_model *t = load_target(target_dir);
  snprintf(path, sizeof path, "%s/drafter", dir);
  df_dspark *d = load_drafter(path, t);
  assert_int_equal(df_dspark_block(d), r);
  int64_t W = df_dspark_row_width(d), V = df_model_cfg(t)->vocab_size;
  /* captured rows: the engine's fp32 target against the reference's fp32 target */
  float *rows = capture(t, d, ids, L);
  snprintf(path, sizeof path, "%s/ref.capture.f32", dir);
  float *want_rows = read_f32(path, (size_t)(L * W));
  double scale, diff = max_diff(rows, want_rows, (size_t)(L * W), &scale);
  print_message("# %s: captured rows differ by %.3g (largest %.3g)\n", name, diff, scale);
  assert_true(diff <= 1e-4 * (1 + scale));
  /* proposals and z */
  df_kv_cache *kv = df_dspark_kv_new(d, 0, err, sizeof err);
  assert_non_null(kv);
  if (df_dspark_append(d, kv, rows, L, err, sizeof err) != 0) fail_msg("%s", err);
  assert_int_equal(kv->len, L);
  int32_t got[DF_DSPARK_BLOCK_MAX], again[DF_DSPARK_BLOCK_MAX];
  float *z = malloc((size_t)(r * V) * sizeof *z), *z2 = malloc((size_t)(r * V) * sizeof *z2);
  if (df_dspark_propose(d, kv, anchor, r, NULL, NULL, got, z, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(kv->len, L);
  snprintf(path, sizeof path, "%s/ref.logits.f32", dir);
  float *want_z = read_f32(path, (size_t)(r * V));
  diff = max_diff(z, want_z, (size_t)(r * V), &scale);
  print_message("# %s: block logits differ by %.3g (largest %.3g); proposals", name, diff, scale);
  for (int k = 0; k < r; k++) print_message(" %d", got[k]);
  print_message("\n");
  assert_true(diff <= 1e-4 * (1 + scale));
  for (int k = 0; k < r; k++)
    assert_int_equal(got[k], (int32_t)json_integer_value(json_array_get(props, k)));
  /* the proposal changed nothing: the same call repeats bit for bit */
  if (df_dspark_propose(d, kv, anchor, r, NULL, NULL, again, z2, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_memory_equal(got, again, (size_t)r * sizeof *got);
  assert_memory_equal(z, z2, (size_t)(r * V) * sizeof *z);
  /* row-by-row appends give the same context, so the same block */
  df_kv_cache *kv1 = df_dspark_kv_new(d, 0, err, sizeof err);
  for (int64_t i = 0; i < L; i++)
    if (df_dspark_append(d, kv1, rows + i * W, 1, err, sizeof err) != 0) fail_msg("%s", err);
  if (df_dspark_propose(d, kv1, anchor, r, NULL, NULL, again, z2, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_memory_equal(z, z2, (size_t)(r * V) * sizeof *z);
  /* errors: no context, a block too long, an anchor outside the vocabulary */
  df_kv_cache *empty = df_dspark_kv_new(d, 0, err, sizeof err);
  assert_int_equal(df_dspark_propose(d, empty, anchor, r, NULL, NULL, got, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "context row"));
  assert_int_equal(df_dspark_propose(d, kv, anchor, r + 1, NULL, NULL, got, NULL, err, sizeof err), -1);
  assert_int_equal(df_dspark_propose(d, kv, (int32_t)V, r, NULL, NULL, got, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "anchor"));
  df_kv_destroy(&empty);
  df_kv_destroy(&kv1);
  df_kv_destroy(&kv);
  free(z);
  free(z2);
  free(want_z);
  free(rows);
  free(want_rows);
  df_dspark_destroy(&d);
  df_model_destroy(&t);
  json_decref(ref);
}

static void test_reference_demo(void **state) {
  (void)state;
  reference_case(DF_SOURCE_DIR "/models/demo-moe", "demo");
}
/* the shipped, trained drafter (models/demo-dspark): no embed_tokens in its folder */
static void test_reference_shipped(void **state) {
  (void)state;
  reference_case(DF_SOURCE_DIR "/models/demo-moe", "shipped");
}
static void test_reference_deepseek(void **state) {
  (void)state;
  reference_case(DF_FIXTURES "/tiny-ds-bf16", "ds");
}
static void test_reference_tied(void **state) {
  (void)state;
  reference_case(DF_FIXTURES "/tiny-moe-tied", "tied");
}

/* ---- generation ------------------------------------------------------------------------- */

#define N_NEW 32

/* N_NEW greedy ids after prompt (np ids) into out; with b, drafted by it under pp. Checks
 * that the drafter's context ends holding the target's rows of the committed positions. */
static df_spec_stats gen(df_model *t, df_dspark *b, df_spec_params pp, const int32_t *prompt,
                         int64_t np, int32_t *out) {
  char err[1024];
  df_sampler_params sp = {.temperature = 0, .top_p = 1};
  pp.quiet = true;
  df_spec *s = df_spec_new(t, NULL, &sp, &pp, 0, err, sizeof err);
  if (!s) fail_msg("%s", err);
  if (b && df_spec_attach_block(s, b, err, sizeof err) != 0) fail_msg("attach: %s", err);
  if (df_spec_prefill(s, prompt, np, NULL, err, sizeof err) != 0) fail_msg("%s", err);
  int n = 0;
  int32_t all[256];
  memcpy(all, prompt, (size_t)np * sizeof *prompt);
  while (n < N_NEW) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int got = df_spec_step(s, toks, err, sizeof err);
    if (got < 1) fail_msg("step: %s", err);
    for (int i = 0; i < got; i++) {
      if (n < N_NEW) out[n] = toks[i];
      all[np + n++] = toks[i];
    }
  }
  df_spec_stats st = df_spec_get_stats(s);
  if (b && st.drafting) { /* the context holds positions 0 .. len-2 (the last one is pending) */
    const df_kv_cache *ctx = df_spec_block_context(s);
    int64_t len = df_spec_len(s) - 1;
    assert_int_equal(ctx->len, len);
    float *rows = capture(t, b, all, len);
    df_kv_cache *fresh = df_dspark_kv_new(b, 0, err, sizeof err);
    if (df_dspark_append(b, fresh, rows, len, err, sizeof err) != 0) fail_msg("%s", err);
    for (int64_t l = 0; l < fresh->n_layers; l++) {
      assert_memory_equal(df_t_data(ctx->k[l]), df_t_data(fresh->k[l]),
                          (size_t)(len * df_t_size(fresh->k[l], 1)) * sizeof(float));
      assert_memory_equal(df_t_data(ctx->v[l]), df_t_data(fresh->v[l]),
                          (size_t)(len * df_t_size(fresh->v[l], 1)) * sizeof(float));
    }
    df_kv_destroy(&fresh);
    free(rows);
    /* capture was switched back on by the generator; capture() turned it off */
    int nc = 0;
    const int64_t *layers = df_dspark_capture_layers(b, &nc);
    df_model_set_capture(t, layers, nc, err, sizeof err);
  }
  df_spec_destroy(&s);
  return st;
}

/* n_prompts prompts of ids below id_max through target_dir with the drafter in drafter_dir:
 * greedy ids identical to the target alone, adaptive and fixed k, and (first four prompts)
 * every rejection position / acceptance length. */
static void greedy_identical(const char *target_dir, const char *drafter_dir, int n_prompts,
                             int32_t id_max) {
  df_model *t = load_target(target_dir);
  df_dspark *b = load_drafter(drafter_dir, t);
  int r = df_dspark_block(b);
  int64_t drafted = 0, accepted = 0;
  int hist[DF_DSPARK_BLOCK_MAX + 1] = {0};
  for (int p = 0; p < n_prompts; p++) {
    int32_t prompt[12];
    int64_t np = 3 + p % 9;
    for (int64_t i = 0; i < np; i++) prompt[i] = (int32_t)((p * 7919 + i * 104729) % id_max);
    int32_t want[N_NEW], got[N_NEW];
    int32_t oracle[256];
    gen(t, NULL, (df_spec_params){0}, prompt, np, want);
    memcpy(oracle, prompt, (size_t)np * sizeof *prompt);
    memcpy(oracle + np, want, sizeof want);
    /* the drafter's own proposals, adaptive and fixed k; then every rejection position,
     * each with the target's own tokens before it (acceptance of exactly pos - 1) */
    df_spec_params runs[3 + DF_DSPARK_BLOCK_MAX];
    int nr = 0;
    runs[nr++] = (df_spec_params){.adaptive = true};
    runs[nr++] = (df_spec_params){.k_init = r, .k_min = r, .k_max = r};
    for (int at = 1; p < 4 && at <= r + 1; at++) /* four prompts take every position */
      runs[nr++] = (df_spec_params){.k_init = r, .k_min = r, .k_max = r, .test_corrupt_at = at,
                                    .test_oracle = oracle, .n_oracle = np + N_NEW};
    for (int i = 0; i < nr; i++) {
      df_spec_stats st = gen(t, b, runs[i], prompt, np, got);
      if (memcmp(want, got, sizeof want) != 0) {
        for (int j = 0; j < N_NEW; j++)
          if (want[j] != got[j]) fail_msg("prompt %d run %d: token %d is %d, alone %d", p, i, j, got[j], want[j]);
      }
      assert_true(st.rounds > 0);
      drafted += st.drafted;
      accepted += st.accepted;
      if (runs[i].test_corrupt_at && runs[i].test_corrupt_at <= r && st.rounds > 2)
        hist[runs[i].test_corrupt_at - 1] += (int)(st.accepted >= (st.rounds - 2) * (runs[i].test_corrupt_at - 1));
    }
  }
  print_message("# %d prompts: %lld drafted, %lld accepted\n", n_prompts, (long long)drafted,
                (long long)accepted);
  for (int a = 0; a < r; a++) assert_true(hist[a] > 0); /* each acceptance length was reached */
  df_dspark_destroy(&b);
  df_model_destroy(&t);
}

static void test_greedy_identical(void **state) {
  (void)state;
  greedy_identical(DF_SOURCE_DIR "/models/demo-moe", DF_BINARY_DIR "/dspark/demo/drafter", 20,
                   151643);
}

/* A one-token prompt: the drafter has no context row until the target's first step, which
 * runs alone; drafting goes on from the second (it went off with "0 context rows + a block
 * of 4 do not fit" before) and the ids are the target's. */
static void test_one_token_prompt(void **state) {
  (void)state;
  df_model *t = load_target(DF_SOURCE_DIR "/models/demo-moe");
  df_dspark *b = load_drafter(DF_SOURCE_DIR "/models/demo-dspark", t);
  int r = df_dspark_block(b);
  const int32_t prompt[1] = {785}; /* "The" */
  int32_t want[N_NEW], got[N_NEW];
  gen(t, NULL, (df_spec_params){0}, prompt, 1, want);
  df_spec_stats st = gen(t, b, (df_spec_params){.k_init = r, .k_min = r, .k_max = r}, prompt, 1, got);
  assert_memory_equal(want, got, sizeof want);
  assert_true(st.drafting);
  assert_true(st.rounds > 0);
  assert_int_equal(st.k_hist[0], 1); /* the first step alone */
  df_dspark_destroy(&b);
  df_model_destroy(&t);
}

/* DeepSeek-V3 (MLA target, the tiny BF16 fixture): 20 prompts, the same guarantees. */
static void test_greedy_deepseek(void **state) {
  (void)state;
  greedy_identical(DF_FIXTURES "/tiny-ds-bf16", DF_BINARY_DIR "/dspark/ds/drafter", 20, 512);
}

/* Kimi Linear (KDA layers: the target's recurrent state rolls back by replaying its logged
 * rows after each partial acceptance, the drafter's context truncates beside it). */
static void test_greedy_kimi_linear(void **state) {
  (void)state;
  greedy_identical(DF_FIXTURES "/tiny-kl-mixed", DF_BINARY_DIR "/dspark/kl", 8, 512);
}


/* ---- the serving scheduler (coordinator/generate/sched.c) with a block drafter ---------- */

#define S_NEW 24
#define S_JOBS 6
#define S_TXT 4096

/* Two rounds of S_JOBS requests (np[j] ids of prompts[j]; job 4 sampled at temperature 0.8
 * with seed 7, the rest greedy; odd jobs are chat requests) through one scheduler of 3 slots
 * with a prefill budget of 7 ids, drafted by the block drafter b and the draft model dm
 * (NULL: none): the text of each into out[round][job]. The second round reuses the first's
 * prefixes (cached slots), whose drafter contexts must still match. */
static df_sched_stats sched_texts(df_model *t, const df_tok *tok, df_dspark *b,
                                  df_model *dm, int32_t (*prompts)[16], const int64_t *np,
                                  char (*out)[S_JOBS][S_TXT]) {
  char err[1024];
  df_sched_opts o = {.max_seqs = 3, .max_queue = S_JOBS, .ctx = 128, .prefill_budget = 7,
                     .block = b, .draft = dm, .draft_k = 6, .draft_max_seqs = 3};
  df_sched *s = NULL;
  if (df_sched_new(t, tok, &o, &s, err, sizeof err) != 0) fail_msg("sched: %s", err);
  for (int round = 0; round < 2; round++) {
    df_sched_job *jobs[S_JOBS];
    for (int j = 0; j < S_JOBS; j++) {
      df_sched_req r = {.prompt = prompts[j], .n_prompt = np[j], .max_tokens = S_NEW,
                        .sp = {.temperature = j == 4 ? 0.8 : 0, .top_p = 1, .seed = 7},
                        .ignore_eos = true, .chat = j % 2 == 1};
      int status;
      if (df_sched_submit(s, &r, &jobs[j], &status, err, sizeof err) != 0)
        fail_msg("submit: %d %s", status, err);
    }
    for (int j = 0; j < S_JOBS; j++) {
      char *got = out[round][j];
      size_t gl = 0;
      got[0] = '\0';
      df_sched_news news = {0};
      while (news.finish == DF_SCHED_RUNNING) {
        struct pollfd pf = {.fd = df_sched_job_fd(jobs[j]), .events = POLLIN};
        poll(&pf, 1, 1000);
        char *txt = NULL;
        size_t len = 0;
        df_sched_job_take(jobs[j], &txt, &len, &news);
        if (txt && gl + len < S_TXT) {
          memcpy(got + gl, txt, len);
          gl += len;
          got[gl] = '\0';
        }
        free(txt);
      }
      if (news.finish != DF_SCHED_LENGTH) fail_msg("job %d: finish %d %s", j, news.finish, news.error);
      df_sched_job_release(&jobs[j]);
    }
  }
  df_sched_stats st = df_sched_get_stats(s);
  df_sched_destroy(&s);
  return st;
}

/* The scheduler's text with the drafter in drafter_dir equals its text without one, request
 * by request and in both rounds; greedy requests were drafted (min_accepted of the drafted
 * tokens accepted at least). With a draft model in draft_dir too (NULL: none), the same
 * text again, chat requests drafted by the block drafter and the others by the model. */
static void sched_case(const char *target_dir, const char *drafter_dir, const char *draft_dir,
                       df_tok *tok, int32_t (*prompts)[16], const int64_t *np,
                       int64_t min_accepted) {
  df_model *t = load_target(target_dir);
  df_dspark *b = load_drafter(drafter_dir, t);
  static char want[2][S_JOBS][S_TXT], got[2][S_JOBS][S_TXT];
  df_sched_stats st0 = sched_texts(t, tok, NULL, NULL, prompts, np, want);
  df_sched_stats st = sched_texts(t, tok, b, NULL, prompts, np, got);
  for (int round = 0; round < 2; round++)
    for (int j = 0; j < S_JOBS; j++)
      if (strcmp(want[round][j], got[round][j]) != 0)
        fail_msg("%s round %d job %d: with the block drafter \"%s\", without \"%s\"", target_dir,
                 round, j, got[round][j], want[round][j]);
  assert_string_equal(want[0][4], want[1][4]); /* the sampled request: its seed decides */
  print_message("# scheduler, %s: %lld steps without, %lld with the block drafter; %lld rounds, "
                "%lld drafted, %lld accepted\n", target_dir, (long long)st0.steps,
                (long long)st.steps, (long long)st.draft_rounds, (long long)st.drafted,
                (long long)st.accepted);
  assert_false(st0.drafting);
  assert_true(st.drafting);
  assert_true(st.drafted > 0);
  assert_true(st.accepted >= min_accepted);
  assert_int_equal(st.block_drafted, st.drafted); /* the only drafter: chat or not */
  if (draft_dir) { /* both: chat requests (odd jobs) with the block drafter, the rest with the
                      draft model; the same text */
    df_model *dm = NULL;
    char err[1024];
    df_model_opts dmo = {.max_ctx = 256, .max_rows = DF_SCHED_K_MAX + 1, .threads = 1};
    if (df_model_load(draft_dir, &dmo, &dm, err, sizeof err) != 0) fail_msg("%s", err);
    st = sched_texts(t, tok, b, dm, prompts, np, got);
    for (int round = 0; round < 2; round++)
      for (int j = 0; j < S_JOBS; j++)
        if (strcmp(want[round][j], got[round][j]) != 0)
          fail_msg("%s round %d job %d: with both drafters \"%s\", without \"%s\"",
                   target_dir, round, j, got[round][j], want[round][j]);
    print_message("# both drafters: %lld drafted (%lld by the block drafter), %lld accepted "
                  "(%lld)\n", (long long)st.drafted, (long long)st.block_drafted,
                  (long long)st.accepted, (long long)st.block_accepted);
    assert_true(st.block_drafted > 0);
    assert_true(st.drafted > st.block_drafted);
    df_model_destroy(&dm);
  }
  df_dspark_destroy(&b);
  df_model_destroy(&t);
}

/* demo-moe with the shipped, trained drafter on English prompts: most drafts are accepted. */
static void test_scheduler_shipped(void **state) {
  (void)state;
  static const char *texts[S_JOBS] = {
      "The history of the county begins with", "In the morning the committee",
      "He said that the new school would", "The United States", "She looked at the",
      "It was the first time that the"};
  char err[512];
  df_tok *tok = NULL;
  if (df_tok_load(DF_SOURCE_DIR "/models/demo-moe", &tok, err, sizeof err) != 0)
    fail_msg("%s", err);
  int32_t prompts[S_JOBS][16];
  int64_t np[S_JOBS];
  for (int j = 0; j < S_JOBS; j++) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (df_tok_encode(tok, texts[j], strlen(texts[j]), 0, &ids, &n, err, sizeof err) != 0)
      fail_msg("%s", err);
    assert_true(n > 0 && n <= 16);
    memcpy(prompts[j], ids, n * sizeof *ids);
    np[j] = (int64_t)n;
    free(ids);
  }
  /* 180 of 264 drafted tokens are accepted over both rounds; when the second round's
   * sequences could not draft (a prefix copied into a slot without the drafter's context),
   * 71 were: at least 150 means they drafted from the first round's contexts */
  sched_case(DF_SOURCE_DIR "/models/demo-moe", DF_SOURCE_DIR "/models/demo-dspark",
             DF_SOURCE_DIR "/models/demo-draft", tok, prompts, np, 150);
  df_tok_destroy(&tok);
}

/* A Kimi Linear target (KDA state rolled back after every partial acceptance, slots reset
 * and restored from snapshots) with an untrained drafter that is mostly rejected. */
static void test_scheduler_kimi_linear(void **state) {
  (void)state;
  df_tok *tok = id_tokenizer("dspark-sched-tok");
  int32_t prompts[S_JOBS][16];
  int64_t np[S_JOBS];
  for (int j = 0; j < S_JOBS; j++) {
    np[j] = 3 + 2 * j;
    for (int64_t i = 0; i < np[j]; i++) prompts[j][i] = (int32_t)((j * 101 + i * 37 + 5) % 512);
  }
  sched_case(DF_FIXTURES "/tiny-kl-mixed", DF_BINARY_DIR "/dspark/kl", NULL, tok, prompts, np, 0);
  df_tok_destroy(&tok);
}

/* The two capture points on Kimi K3 (Attention Residuals): MIX after the last layer is what
 * the final norm reads, so the target's own norm and lm_head applied to it give the model's
 * logits bit for bit; PREFIX there is the raw running prefix, another row. On a plain
 * residual stream (Qwen3) the two are the same bytes. */
static void capture_both(df_model *t, const int64_t *layers, int nl, const int32_t *ids,
                         int64_t n, float *prefix, float *mix, float *logits) {
  char err[1024];
  for (int p = 0; p < 2; p++) {
    if (df_model_set_capture(t, layers, nl, err, sizeof err) != 0) fail_msg("%s", err);
    df_model_set_capture_point(t, p ? DF_CAPTURE_MIX : DF_CAPTURE_PREFIX);
    df_kv_cache *kv = df_model_kv_new(t, 0, err, sizeof err);
    df_batch_seq q = {.kv = kv, .ids = ids, .n = n, .mode = DF_LOGITS_ALL, .logits = logits,
                      .capture = p ? mix : prefix};
    if (df_model_forward_batch(t, &q, 1, err, sizeof err) != 0) fail_msg("%s", err);
    df_kv_destroy(&kv);
  }
  df_model_set_capture(t, NULL, 0, err, sizeof err);
  df_model_set_capture_point(t, DF_CAPTURE_PREFIX);
}

static void test_capture_points(void **state) {
  (void)state;
  int32_t ids[12] = {15, 52, 89, 126, 163, 200, 237, 274, 311, 348, 385, 422};
  df_model *t = load_target(DF_FIXTURES "/tiny-k3");
  const df_model_config *c = df_model_cfg(t);
  int64_t H = c->hidden_size, V = c->vocab_size, last = c->num_hidden_layers - 1;
  int64_t layers[2] = {2, last};
  float *prefix = malloc(sizeof(float) * 12 * 2 * H), *mix = malloc(sizeof(float) * 12 * 2 * H);
  float *logits = malloc(sizeof(float) * 12 * V), *mine = malloc(sizeof(float) * V);
  float *xn = malloc(sizeof(float) * H);
  capture_both(t, layers, 2, ids, 12, prefix, mix, logits);
  char nn[128], nh[128];
  snprintf(nn, sizeof nn, "%smodel.norm.weight", c->tensor_prefix);
  snprintf(nh, sizeof nh, "%slm_head.weight", c->tensor_prefix);
  const df_st_tensor *wn = df_st_find(df_model_tensors(t), nn), *wh = df_st_find(df_model_tensors(t), nh);
  assert_non_null(wn);
  assert_non_null(wh);
  for (int64_t i = 0; i < 12; i++) {
    df_k_rmsnorm(mix + (i * 2 + 1) * H, 1, H, wn->data, wn->dtype, (float)c->rms_norm_eps, xn);
    df_k_linear(xn, 1, H, H, wh->data, wh->dtype, V, NULL, mine, V);
    assert_memory_equal(mine, logits + i * V, (size_t)V * sizeof(float));
    assert_memory_not_equal(mix + (i * 2 + 1) * H, prefix + (i * 2 + 1) * H, (size_t)H * sizeof(float));
  }
  df_model_destroy(&t);
  /* a plain residual stream: one row whatever the point */
  t = load_target(DF_FIXTURES "/tiny-moe-tied");
  H = df_model_cfg(t)->hidden_size;
  V = df_model_cfg(t)->vocab_size;
  layers[1] = df_model_cfg(t)->num_hidden_layers - 1;
  float *logits2 = realloc(logits, sizeof(float) * 12 * V);
  capture_both(t, layers, 2, ids, 12, prefix, mix, logits2);
  assert_memory_equal(prefix, mix, sizeof(float) * 12 * 2 * (size_t)H);
  df_model_destroy(&t);
  free(prefix);
  free(mix);
  free(logits2);
  free(mine);
  free(xn);
}

/* A folder that is not a drafter, and a drafter whose shape does not fit the target. */
static void test_load_errors(void **state) {
  (void)state;
  char err[1024];
  df_model *t = load_target(DF_FIXTURES "/tiny-ds-bf16");
  df_dspark *d = NULL;
  assert_false(df_dspark_is_folder(DF_FIXTURES "/tiny-ds-bf16"));
  assert_true(df_dspark_is_folder(DF_BINARY_DIR "/dspark/demo/drafter"));
  assert_int_equal(df_dspark_load(DF_BINARY_DIR "/dspark/demo/drafter", t, 0, &d, err, sizeof err), -1);
  assert_null(d);
  print_message("# %s\n", err);
  assert_non_null(strstr(err, "config.json: \"mask_token_id\" must be an integer in 0..511"));
  assert_int_equal(df_dspark_load(DF_FIXTURES "/tiny-ds-bf16", t, 0, &d, err, sizeof err), -1);
  assert_non_null(strstr(err, "config.json"));
  df_model_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_demo),
      cmocka_unit_test(test_reference_shipped),
      cmocka_unit_test(test_reference_deepseek),
      cmocka_unit_test(test_reference_tied),
      cmocka_unit_test(test_greedy_identical),
      cmocka_unit_test(test_one_token_prompt),
      cmocka_unit_test(test_greedy_deepseek),
      cmocka_unit_test(test_greedy_kimi_linear),
      cmocka_unit_test(test_scheduler_shipped),
      cmocka_unit_test(test_scheduler_kimi_linear),
      cmocka_unit_test(test_capture_points),
      cmocka_unit_test(test_load_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
