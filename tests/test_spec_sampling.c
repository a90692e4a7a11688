/* tests/test_spec_sampling.c — speculative sampling gives the target alone's ids for the same
 * seed (drafter-invariant: coordinator/generate/spec.h), and the sampler's position-keyed
 * race draws from the target's distribution (engine/sampler.h).
 *
 * A 16-token-vocabulary pair (make_spec_drafts.py: v16-target, a qwen3_moe, and v16-draft, a
 * qwen3 dense model with other weights, so q is far from p) generates the first two tokens
 * after a fixed prompt once per seed, N_RUNS seeds per configuration.
 *
 * Exactness: with every drafter (a draft model at k = 1 and k = 3, a DSpark block drafter, a
 * draft with its own tokenizer) the two ids equal the target alone's for the same seed, on
 * every seed, while the drafter's proposals are both accepted and rejected often.
 *
 * Law: the exact target distributions come from the target's own logits through the same
 * sampler filter (df_sampler_probs): p0(x1) after the prompt and p1(x2 | x1) after prompt +
 * x1, so the bigram law is p0(x1) p1(x2 | x1). Pearson's chi-square compares the target
 * alone's first-token counts (16 cells) and bigram counts (256 cells; cells expecting fewer
 * than 5 are pooled) with N_RUNS times those laws. The critical value is the chi-square
 * quantile at ALPHA = 1e-4 (Wilson-Hilferty approximation, exact to a few tenths here), so
 * each check false-alarms with probability ~1e-4; the seeds are fixed, so the test is
 * deterministic. Power: the same counts against the laws at another temperature must fail.
 * Every run prints its figures ("# ..." lines).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/generate/spec.h"
#include "coordinator/generate/text_draft.h"
#include "engine/text/tokenizer.h"

#define V 16
#define N_RUNS 2500
#define ALPHA_Z 3.7190 /* standard normal upper quantile of ALPHA = 1e-4 */

static const int32_t prompt[] = {1, 2, 3, 4, 5};
#define NP ((int64_t)(sizeof prompt / sizeof prompt[0]))

static df_model *load_ctx(const char *name, int64_t ctx) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/spec-drafts/%s", DF_BINARY_DIR, name);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = ctx, .max_rows = 16, .threads = 1};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  assert_int_equal(df_model_cfg(m)->vocab_size, V);
  return m;
}

static df_model *load(const char *name) { return load_ctx(name, 32); }

/* Exact first-token law p0 [V] and conditional second-token laws p1 [V][V] (row x1). */
static void exact_laws(df_model *t, const df_sampler_params *sp, double *p0, double *p1) {
  char err[1024];
  df_sampler *smp = df_sampler_new(sp, V, err, sizeof err);
  df_kv_cache *kv = df_model_kv_new(t, 0, err, sizeof err);
  assert_non_null(smp);
  assert_non_null(kv);
  float logits[V], probs[V];
  assert_int_equal(df_model_forward(t, kv, prompt, NP, DF_LOGITS_LAST, logits, err, sizeof err), 0);
  df_sampler_probs(smp, logits, probs);
  for (int i = 0; i < V; i++) p0[i] = probs[i];
  for (int32_t x = 0; x < V; x++) {
    df_kv_truncate(kv, NP);
    assert_int_equal(df_model_forward(t, kv, &x, 1, DF_LOGITS_LAST, logits, err, sizeof err), 0);
    df_sampler_probs(smp, logits, probs);
    for (int i = 0; i < V; i++) p1[x * V + i] = probs[i];
  }
  df_kv_destroy(&kv);
  df_sampler_destroy(&smp);
}

/* Pearson's chi-square of counts [n] against n_runs * law [n], pooling the cells that expect
 * fewer than 5 into one; *dof gets the degrees of freedom (cells - 1). */
static double chi_square(const long *counts, const double *law, int n, long n_runs, int *dof) {
  double chi = 0, pool_e = 0, pool_o = 0;
  int cells = 0;
  for (int i = 0; i < n; i++) {
    double e = law[i] * (double)n_runs;
    if (e < 5) {
      pool_e += e;
      pool_o += (double)counts[i];
      continue;
    }
    chi += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
    cells++;
  }
  if (pool_e > 0 || pool_o > 0) {
    /* an observation where the law puts no mass at all is an outright failure */
    double e = pool_e > 1e-9 ? pool_e : 1e-9;
    chi += (pool_o - pool_e) * (pool_o - pool_e) / e;
    cells++;
  }
  *dof = cells - 1;
  return chi;
}

/* Chi-square upper quantile for `dof` degrees of freedom at ALPHA (Wilson-Hilferty). */
static double chi_crit(int dof) {
  double d = dof, a = 2.0 / (9.0 * d);
  double c = 1 - a + ALPHA_Z * sqrt(a);
  return d * c * c * c;
}

typedef struct result {
  double chi_uni, chi_bi, crit_uni, crit_bi;
  double acceptance;
} result;

/* With both set, run_config's draft d drafts through text (df_spec_attach_text). */
static df_tok *g_text_t, *g_text_d;

/* N_RUNS seeded generations of two tokens: counts against the laws p0/p1, the acceptance, and
 * the ids of each run in ids [N_RUNS][2] (NULL: not kept). */
static result run_config(df_model *t, df_model *d, df_dspark *b, const df_sampler_params *sp0,
                         int k, const double *p0, const double *p1, const char *label,
                         int32_t (*ids)[2]) {
  static long uni[V], bi[V * V];
  memset(uni, 0, sizeof uni);
  memset(bi, 0, sizeof bi);
  char err[1024];
  int64_t drafted = 0, accepted = 0;
  for (long r = 0; r < N_RUNS; r++) {
    df_sampler_params sp = *sp0;
    sp.seed = 1000003u * (uint64_t)r + 17u;
    df_spec_params pp = {.k_init = k, .k_min = k, .k_max = k, .quiet = true, .mem_reserve = -1};
    df_spec *s = df_spec_new(t, g_text_d ? NULL : d, &sp, &pp, 0, err, sizeof err);
    if (!s) fail_msg("%s", err);
    if (b && df_spec_attach_block(s, b, err, sizeof err) != 0) fail_msg("attach: %s", err);
    if (g_text_d && df_spec_attach_text(s, d, g_text_d, g_text_t, err, sizeof err) != 0)
      fail_msg("attach text: %s", err);
    if (df_spec_prefill(s, prompt, NP, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    int32_t got[2], n = 0;
    while (n < 2) {
      int32_t toks[DF_SPEC_K_MAX + 1];
      int m = df_spec_step(s, toks, err, sizeof err);
      if (m < 1) fail_msg("step: %s", err);
      for (int i = 0; i < m && n < 2; i++) got[n++] = toks[i];
    }
    df_spec_stats st = df_spec_get_stats(s);
    drafted += st.drafted;
    accepted += st.accepted;
    df_spec_destroy(&s);
    uni[got[0]]++;
    bi[got[0] * V + got[1]]++;
    if (ids) memcpy(ids[r], got, sizeof got);
  }
  double law_bi[V * V];
  for (int a = 0; a < V; a++)
    for (int b = 0; b < V; b++) law_bi[a * V + b] = p0[a] * p1[a * V + b];
  result res;
  int du, db;
  res.chi_uni = chi_square(uni, p0, V, N_RUNS, &du);
  res.chi_bi = chi_square(bi, law_bi, V * V, N_RUNS, &db);
  res.crit_uni = chi_crit(du);
  res.crit_bi = chi_crit(db);
  res.acceptance = drafted ? (double)accepted / (double)drafted : 0;
  printf("# %-34s unigram chi2 %8.1f (dof %3d, crit %6.1f)  bigram chi2 %8.1f (dof %3d, crit "
         "%6.1f)  acceptance %.3f\n", label, res.chi_uni, du, res.crit_uni, res.chi_bi, db,
         res.crit_bi, res.acceptance);
  return res;
}

static int32_t g_alone[N_RUNS][2], g_with[N_RUNS][2];

/* The target alone's ids for sp into g_alone (and its law checked). */
static void alone_ids(df_model *t, const df_sampler_params *sp) {
  double p0[V], p1[V * V];
  exact_laws(t, sp, p0, p1);
  result r = run_config(t, NULL, NULL, sp, 1, p0, p1, "target alone", g_alone);
  assert_true(r.chi_uni < r.crit_uni);
  assert_true(r.chi_bi < r.crit_bi);
}

/* With drafter (d, or b) at k: every seed's ids equal g_alone's; proposals both accepted and
 * rejected often (acceptance in (lo, hi)). */
static void check_same_ids(df_model *t, df_model *d, df_dspark *b, const df_sampler_params *sp,
                           int k, double lo, double hi, const char *label) {
  double p0[V], p1[V * V];
  exact_laws(t, sp, p0, p1);
  result r = run_config(t, d, b, sp, k, p0, p1, label, g_with);
  long differ = 0;
  for (long i = 0; i < N_RUNS; i++) differ += memcmp(g_with[i], g_alone[i], sizeof g_with[i]) != 0;
  printf("# %-34s %ld of %d seeds give other ids than the target alone\n", label, differ, N_RUNS);
  assert_int_equal(differ, 0);
  assert_true(r.acceptance > lo && r.acceptance < hi);
}

static void check_config(const df_sampler_params *sp, int k, const char *name) {
  df_model *t = load("v16-target"), *d = load("v16-draft");
  alone_ids(t, sp);
  /* the draft is far from the target: both acceptance and rejection are frequent */
  check_same_ids(t, d, NULL, sp, k, 0.1, 0.9, name);
  df_model_destroy(&t);
  df_model_destroy(&d);
}

static void test_k1_temperature1(void **state) {
  (void)state;
  df_sampler_params sp = {.temperature = 1.0, .top_p = 1.0};
  check_config(&sp, 1, "k=1, T=1");
}

static void test_k3_filtered(void **state) {
  (void)state;
  df_sampler_params sp = {.temperature = 1.5, .top_p = 0.95, .top_k = 6};
  check_config(&sp, 3, "k=3, T=1.5 top-k 6 top-p 0.95");
}

/* The race's law: the target alone's counts pass against its own laws and fail against the
 * laws at another temperature (the statistics have the power to see a wrong law). */
static void test_target_alone_law(void **state) {
  (void)state;
  df_model *t = load("v16-target");
  df_sampler_params sp = {.temperature = 1.0, .top_p = 1.0}, other = sp;
  other.temperature = 1.3;
  double p0[V], p1[V * V];
  exact_laws(t, &sp, p0, p1);
  result r = run_config(t, NULL, NULL, &sp, 1, p0, p1, "target alone, T=1", NULL);
  assert_true(r.chi_uni < r.crit_uni);
  assert_true(r.chi_bi < r.crit_bi);
  exact_laws(t, &other, p0, p1);
  result bad = run_config(t, NULL, NULL, &sp, 1, p0, p1, "target alone, T=1 vs T=1.3 law", NULL);
  assert_true(bad.chi_uni > bad.crit_uni || bad.chi_bi > bad.crit_bi);
  df_model_destroy(&t);
}

/* The block drafter (a DSpark over v16-target, tests/dspark.cmake, block 3): each proposal is
 * its row's position-keyed choice given the proposals before it (the Markov head makes row k
 * depend on proposal k-1). */
static void test_block_drafter(void **state) {
  (void)state;
  df_model *t = load("v16-target");
  char err[1024];
  df_dspark *b = NULL;
  if (df_dspark_load(DF_BINARY_DIR "/dspark/v16", t, 0, &b, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(df_dspark_block(b), 3);
  df_sampler_params sp = {.temperature = 1.5, .top_p = 0.95, .top_k = 6};
  alone_ids(t, &sp);
  check_same_ids(t, NULL, b, &sp, 3, 0.05, 0.9, "block k=3");
  df_dspark_destroy(&b);
  df_model_destroy(&t);
}

/* A tokenizer.json of 16 one-letter tokens: letter 'a' + i has id (mul * i + add) mod 16; each
 * character is a piece of its own. Loaded from DF_BINARY_DIR/spec-text-v16-NAME.json. */
static df_tok *letter_tokenizer(const char *name, int mul, int add) {
  char path[700], err[512];
  snprintf(path, sizeof path, "%s/spec-text-v16-%s.json", DF_BINARY_DIR, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {", f);
  for (int i = 0; i < V; i++) fprintf(f, "%s\"%c\": %d", i ? ", " : "", 'a' + i, (mul * i + add) % V);
  fputs("}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
        "{\"type\": \"Split\", \"pattern\": {\"Regex\": \".\"}, \"behavior\": \"Isolated\", "
        "\"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
        "\"use_regex\": false}]}, \"decoder\": {\"type\": \"ByteLevel\"}}", f);
  fclose(f);
  df_tok *t = NULL;
  if (df_tok_load(path, &t, err, sizeof err) != 0) fail_msg("tokenizer: %s", err);
  return t;
}

/* The text draft: its proposals are the draft's greedy text, kept when they are the target's
 * own choice (with probability p(d)). */
static void test_text_draft(void **state) {
  (void)state;
  df_model *t = load("v16-target"), *d = load_ctx("v16-relabeled", DF_TEXT_DRAFT_MIN_CTX);
  df_sampler_params sp = {.temperature = 1.5, .top_p = 0.95, .top_k = 6};
  alone_ids(t, &sp);
  g_text_t = letter_tokenizer("target", 1, 0);
  g_text_d = letter_tokenizer("draft", 5, 3);
  check_same_ids(t, d, NULL, &sp, 3, 0.05, 0.95, "text k=3");
  df_tok_destroy(&g_text_t);
  df_tok_destroy(&g_text_d);
  df_model_destroy(&t);
  df_model_destroy(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_target_alone_law),
      cmocka_unit_test(test_k1_temperature1),
      cmocka_unit_test(test_k3_filtered),
      cmocka_unit_test(test_block_drafter),
      cmocka_unit_test(test_text_draft),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
