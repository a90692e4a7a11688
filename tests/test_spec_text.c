/* tests/test_spec_text.c — cross-tokenizer drafting (coordinator/generate/text_draft.h through
 * df_spec_attach_text): a draft with its own tokenizer proposes text, the target verifies the
 * target ids of it.
 *
 * Pairs:
 *  - DeepSeek-V3 family: spec-drafts/ds-target-tok (tiny-ds-bf16 with a 512-token byte-level
 *    BPE tokenizer) and spec-drafts/ds-relabeled (the same weights with the embedding and
 *    lm_head rows permuted, and the tokenizer's ids permuted alike: a draft that writes the
 *    target's greedy text under other ids; tests/make_spec_drafts.py);
 *  - Qwen3 family: models/demo-moe with models/demo-xdraft (a draft trained with its own
 *    4k-token tokenizer, tools/train/train_xdraft.py), and with spec-drafts/demo-swapped
 *    (demo-draft under a tokenizer whose ids 150000 and 150001 are swapped), which writes
 *    the text demo-draft writes.
 * Shows: greedy ids identical to the target alone on 20 prompts per pair (fixed k 4 and
 * adaptive k), and with a rejection forced at every draft position (on 5 and 2 prompts);
 * drafted ids accepted and
 * draft tokens reused across rounds; committed text that ends inside a UTF-8 character;
 * df_tok_encode_stable's piece count; token healing; a draft context shorter than the generation (the draft
 * re-reads a window of recent text); refusals at load (a context too short, no tokenizer.json
 * with another vocabulary).
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
#include "coordinator/generate/text_draft.h"
#include "engine/text/tokenizer.h"

#include "demo_prompts.h"


typedef struct pair {
  df_model *t, *d;
  df_tok *ttok, *dtok;
} pair;

/* draft_ctx: the draft's context is twice this in its own tokens (0: twice the target's) */
static pair load_pair_ctx(const char *tdir, const char *ddir, int64_t draft_ctx) {
  char err[1024];
  pair p = {0};
  df_model_opts o = {.max_ctx = 256, .threads = 1};
  if (df_model_load(tdir, &o, &p.t, err, sizeof err) != 0) fail_msg("%s: %s", tdir, err);
  if (df_tok_load(tdir, &p.ttok, err, sizeof err) != 0) fail_msg("%s", err);
  df_model_opts dop = {.max_rows = 64, .threads = 1, .max_ctx = draft_ctx};
  if (df_spec_draft_load_any(p.t, tdir, ddir, &dop, &p.d, &p.dtok, err, sizeof err) != 0)
    fail_msg("draft %s: %s", ddir, err);
  if (!p.dtok) fail_msg("%s: loaded as a same-tokenizer draft", ddir);
  return p;
}

static pair load_pair(const char *tdir, const char *ddir) { return load_pair_ctx(tdir, ddir, 0); }

static void free_pair(pair *p) {
  df_model_destroy(&p->d);
  df_model_destroy(&p->t);
  df_tok_destroy(&p->ttok);
  df_tok_destroy(&p->dtok);
}

typedef struct totals {
  int64_t rounds, drafted, accepted, reused, empty, windows, healed;
} totals;

/* n_new greedy ids after ids[0..n): target alone (text draft off) or with the text draft
 * (k fixed, or adaptive), corrupt_at as df_spec_params.test_corrupt_at. */
static void gen(pair *p, bool draft, int k, bool adaptive, int corrupt_at, const int32_t *ids,
                int64_t n, int n_new, int32_t *out, totals *tot) {
  char err[1024];
  df_sampler_params sp = {.temperature = 0, .top_p = 1};
  df_spec_params pp = {.k_init = k, .k_min = adaptive ? 0 : k, .k_max = adaptive ? 0 : k,
                       .adaptive = adaptive, .quiet = true, .mem_reserve = -1,
                       .test_corrupt_at = corrupt_at};
  df_spec *s = df_spec_new(p->t, NULL, &sp, &pp, 0, err, sizeof err);
  if (!s) fail_msg("%s", err);
  if (draft && df_spec_attach_text(s, p->d, p->dtok, p->ttok, err, sizeof err) != 0)
    fail_msg("attach: %s", err);
  if (df_spec_prefill(s, ids, n, NULL, err, sizeof err) != 0) fail_msg("%s", err);
  int got = 0;
  while (got < n_new) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int m = df_spec_step(s, toks, err, sizeof err);
    if (m < 1) fail_msg("step: %s", err);
    for (int i = 0; i < m && got < n_new; i++) out[got++] = toks[i];
  }
  df_spec_stats st = df_spec_get_stats(s);
  if (draft && !st.drafting && !st.off_not_paying) fail_msg("drafting went off: %s", st.off_reason);
  if (tot) {
    df_text_draft_stats xs = df_text_draft_get_stats(df_spec_text_draft(s));
    tot->rounds += st.rounds;
    tot->drafted += st.drafted;
    tot->accepted += st.accepted;
    tot->reused += xs.reused_tokens;
    tot->empty += xs.empty_rounds;
    tot->windows += xs.windows;
    tot->healed += xs.healed;
  }
  df_spec_destroy(&s);
}

/* 20 prompts x n_new greedy ids, alone and with the text draft at fixed k 4 (adaptive k on
 * the first four), then a rejection forced at each position 1..4 on the first n_forced. */
static totals identical_on_prompts(pair *p, int n_new, int n_forced, const char *label) {
  char err[1024];
  totals tot = {0}, forced = {0};
  int32_t *alone = malloc((size_t)n_new * sizeof *alone);
  int32_t *with = malloc((size_t)n_new * sizeof *with);
  for (int q = 0; q < 20; q++) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (df_tok_encode(p->ttok, demo_prompts[q], strlen(demo_prompts[q]), 0, &ids, &n, err,
                      sizeof err) != 0)
      fail_msg("%s", err);
    gen(p, false, 1, false, 0, ids, (int64_t)n, n_new, alone, NULL);
    gen(p, true, 4, false, 0, ids, (int64_t)n, n_new, with, &tot);
    if (memcmp(alone, with, (size_t)n_new * sizeof *alone) != 0)
      fail_msg("%s: prompt %d: ids differ with the text draft", label, q);
    if (q < 4) {
      gen(p, true, 4, true, 0, ids, (int64_t)n, n_new, with, NULL);
      if (memcmp(alone, with, (size_t)n_new * sizeof *alone) != 0)
        fail_msg("%s: prompt %d: ids differ with the text draft, adaptive k", label, q);
    }
    for (int at = 1; q < n_forced && at <= 4; at++) {
      gen(p, true, 4, false, at, ids, (int64_t)n, n_new, with, &forced);
      if (memcmp(alone, with, (size_t)n_new * sizeof *alone) != 0)
        fail_msg("%s: prompt %d: ids differ with a rejection forced at draft position %d", label,
                 q, at);
    }
    free(ids);
  }
  printf("# %s: 20 prompts x %d ids identical; %lld rounds, %lld of %lld proposed ids accepted "
         "(%.3f), mean accepted length %.2f, %lld draft tokens reused, %lld rounds with nothing "
         "to propose, %lld healed; forced rejections: %lld rounds, %lld accepted\n", label, n_new,
         (long long)tot.rounds, (long long)tot.accepted, (long long)tot.drafted,
         tot.drafted ? (double)tot.accepted / (double)tot.drafted : 0.0,
         tot.rounds ? (double)tot.accepted / (double)tot.rounds : 0.0, (long long)tot.reused,
         (long long)tot.empty, (long long)tot.healed, (long long)forced.rounds, (long long)forced.accepted);
  assert_true(forced.rounds > 0);
  free(alone);
  free(with);
  return tot;
}

static void test_deepseek_relabeled(void **state) {
  (void)state;
  pair p = load_pair(DF_BINARY_DIR "/spec-drafts/ds-target-tok",
                     DF_BINARY_DIR "/spec-drafts/ds-relabeled");
  totals t = identical_on_prompts(&p, 48, 5, "tiny-ds-bf16 + its relabeled self");
  /* the draft writes the target's text: many proposals are the target's ids, and the text of
   * proposals the target wrote is kept by the draft for the next round. (Fewer than half since
   * token healing: this random target writes letter soup in token paths no tokenizer would
   * give, so the draft, re-reading the text in its tokenizer's own pieces, often reads the last
   * one as the start of a longer piece; 0.67 of the proposals without healing, 0.44 with.) */
  assert_true(t.rounds > 100);
  assert_true(t.accepted * 3 > t.drafted);
  assert_true(t.reused > 0);
  assert_true(t.healed > 0);
  free_pair(&p);
}

/* models/demo-draft under a tokenizer with two ids swapped (the weights linked;
 * make_spec_drafts.py) */
#define DEMO_SWAPPED DF_BINARY_DIR "/spec-drafts/demo-swapped"

static void test_demo_swapped_tokenizer(void **state) {
  (void)state;
  pair p = load_pair(DF_SOURCE_DIR "/models/demo-moe", DEMO_SWAPPED);
  totals t = identical_on_prompts(&p, 32, 2, "demo-moe + demo-draft under swapped ids");
  assert_true(t.accepted * 2 > t.drafted);
  assert_true(t.reused > 0);
  free_pair(&p);
}

static void test_demo_xdraft(void **state) {
  (void)state;
  pair p = load_pair(DF_SOURCE_DIR "/models/demo-moe", DF_SOURCE_DIR "/models/demo-xdraft");
  assert_true(df_tok_vocab_size(p.dtok) < 10000); /* its own small vocabulary */
  totals t = identical_on_prompts(&p, 32, 2, "demo-moe + demo-xdraft (own 4k tokenizer)");
  assert_true(t.accepted > 0);
  free_pair(&p);
}

/* A draft context shorter than the generation (128 draft tokens, 200 target ids): the draft
 * re-reads a window of recent text each time it fills, keeps proposing after that, and the ids
 * stay the target's */
static void test_window(void **state) {
  (void)state;
  pair p = load_pair_ctx(DF_SOURCE_DIR "/models/demo-moe", DF_SOURCE_DIR "/models/demo-xdraft", 64);
  assert_int_equal(df_model_max_ctx(p.d), 128);
  enum { N_NEW = 200 };
  int32_t alone[N_NEW], with[N_NEW];
  totals before = {0}, tot = {0};
  char err[512];
  for (int q = 0; q < 3; q++) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (df_tok_encode(p.ttok, demo_prompts[q], strlen(demo_prompts[q]), 0, &ids, &n, err,
                      sizeof err) != 0)
      fail_msg("%s", err);
    gen(&p, false, 1, false, 0, ids, (int64_t)n, N_NEW, alone, NULL);
    gen(&p, true, 4, false, 0, ids, (int64_t)n, 40, with, &before); /* before any window */
    gen(&p, true, 4, false, 0, ids, (int64_t)n, N_NEW, with, &tot);
    if (memcmp(alone, with, sizeof alone) != 0) fail_msg("prompt %d: ids differ", q);
    free(ids);
  }
  printf("# draft context 128: %lld windows; %lld of %lld proposed ids accepted (%lld in the "
         "first 40 ids)\n", (long long)tot.windows, (long long)tot.accepted,
         (long long)tot.drafted, (long long)before.accepted);
  assert_int_equal(before.windows, 0);
  assert_true(tot.windows >= 3);
  /* proposals accepted after the windows too, not only before the first one */
  assert_true(tot.accepted > before.accepted + 50);
  free_pair(&p);
}

/* Token healing: demo-moe writes " 1960," over and over, as the tokens " ", "1", "9", "6",
 * "0", ","; after a committed " " the draft's own encoding ends with a token it would not
 * write there (it writes ", 1" or " 19" as one piece), so it re-writes those bytes and
 * proposes the digits; reading the lone end as it is, it proposed "urt". */
static void test_heal(void **state) {
  (void)state;
  pair p = load_pair(DF_SOURCE_DIR "/models/demo-moe", DF_SOURCE_DIR "/models/demo-xdraft");
  char err[512];
  df_text_draft *x = NULL;
  assert_int_equal(df_text_draft_new(p.d, p.dtok, p.ttok, df_model_cfg(p.t)->vocab_size, &x, err,
                                     sizeof err), 0);
  /* "London, Feb. 9 -- Vital secrets of Britain's" and the target's greedy continuation */
  const int32_t prompt[] = {39572, 11, 13498, 13, 220, 24, 1177, 54271, 23594, 315, 13224, 594};
  const int32_t period[] = {220, 16, 24, 21, 15, 11}, want[] = {16, 24, 21, 15};
  assert_int_equal(df_text_draft_commit(x, prompt, 12, err, sizeof err), 0);
  for (int r = 0; r < 8; r++) assert_int_equal(df_text_draft_commit(x, period, 6, err, sizeof err), 0);
  assert_int_equal(df_text_draft_commit(x, period, 1, err, sizeof err), 0);
  int32_t out[8];
  assert_int_equal(df_text_draft_propose(x, 4, out, err, sizeof err), 4);
  assert_memory_equal(out, want, sizeof want);
  assert_int_equal(df_text_draft_get_stats(x).healed, 1);
  df_text_draft_destroy(&x);
  free_pair(&p);
}

/* Refused at load, with the reason: a text draft whose context cannot hold a window and a
 * round; a draft without a tokenizer.json whose vocabulary is not the target's */
static void test_refused_at_load(void **state) {
  (void)state;
  char err[1024];
  df_model *t = NULL, *d = NULL;
  df_tok *dtok = NULL;
  df_model_opts o = {.max_ctx = 256, .threads = 1};
  if (df_model_load(DF_SOURCE_DIR "/models/demo-moe", &o, &t, err, sizeof err) != 0)
    fail_msg("%s", err);
  df_model_opts dop = {.max_rows = 64, .threads = 1};
  /* demo-xdraft's weights, with a config of 64 positions, then without a tokenizer.json */
  char dir[] = "/tmp/df-xdraft-XXXXXX", a[512], b[512];
  assert_non_null(mkdtemp(dir));
  const char *files[] = {"model.safetensors", "tokenizer.json", "config.json"};
  for (int i = 0; i < 2; i++) {
    snprintf(a, sizeof a, "%s/models/demo-xdraft/%s", DF_SOURCE_DIR, files[i]);
    snprintf(b, sizeof b, "%s/%s", dir, files[i]);
    assert_int_equal(symlink(a, b), 0);
  }
  snprintf(a, sizeof a, "%s/models/demo-xdraft/config.json", DF_SOURCE_DIR);
  FILE *f = fopen(a, "rb");
  assert_non_null(f);
  char cfg[4096];
  size_t cn = fread(cfg, 1, sizeof cfg - 1, f);
  fclose(f);
  cfg[cn] = 0;
  char *at = strstr(cfg, "\"max_position_embeddings\": 1024");
  assert_non_null(at);
  memcpy(at + strlen("\"max_position_embeddings\": "), "  64", 4);
  snprintf(b, sizeof b, "%s/config.json", dir);
  f = fopen(b, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(cfg, 1, cn, f), cn);
  fclose(f);
  assert_int_equal(df_spec_draft_load_any(t, DF_SOURCE_DIR "/models/demo-moe", dir, &dop, &d,
                                          &dtok, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "its context (config.json max_position_embeddings 64) is too "
                              "short to draft text: at least 96 tokens"));
  assert_null(d);
  assert_null(dtok);
  snprintf(b, sizeof b, "%s/tokenizer.json", dir);
  unlink(b);
  assert_int_equal(df_spec_draft_load_any(t, DF_SOURCE_DIR "/models/demo-moe", dir, &dop, &d,
                                          &dtok, err, sizeof err), -1);
  printf("# %s\n", err);
  assert_non_null(strstr(err, "has no tokenizer.json and its vocabulary (config.json vocab_size "
                              "4096) differs from the target's (151936)"));
  for (int i = 0; i < 3; i++) {
    snprintf(b, sizeof b, "%s/%s", dir, files[i]);
    unlink(b);
  }
  rmdir(dir);
  df_model_destroy(&t);
}

/* Committed text that ends inside a character: the draft reads up to the last complete one,
 * and the proposal must spell the rest of it */
static void test_split_character(void **state) {
  (void)state;
  pair p = load_pair(DF_SOURCE_DIR "/models/demo-moe", DEMO_SWAPPED);
  char err[512];
  df_text_draft *x = NULL;
  assert_int_equal(df_text_draft_new(p.d, p.dtok, p.ttok, df_model_cfg(p.t)->vocab_size, &x, err,
                                     sizeof err), 0);
  int32_t *ids = NULL;
  size_t n = 0;
  assert_int_equal(df_tok_encode(p.ttok, "We went to the caf", 18, 0, &ids, &n, err, sizeof err), 0);
  assert_int_equal(df_text_draft_commit(x, ids, (int64_t)n, err, sizeof err), 0);
  /* "é" = C3 A9: the byte-level tokens of each byte alone */
  int32_t c3 = df_tok_token_to_id(p.ttok, "\xc3\x83", 2), a9 = df_tok_token_to_id(p.ttok, "\xc2\xa9", 2);
  assert_true(c3 >= 0 && a9 >= 0);
  assert_int_equal(df_text_draft_commit(x, &c3, 1, err, sizeof err), 0);
  assert_int_equal(df_text_draft_text_len(x), 19);
  int32_t out[8];
  int m = df_text_draft_propose(x, 4, out, err, sizeof err);
  assert_true(m >= 0);
  int64_t cached = df_text_draft_cached(x);
  assert_true(cached > 0);
  assert_int_equal(df_text_draft_commit(x, &a9, 1, err, sizeof err), 0);
  m = df_text_draft_propose(x, 4, out, err, sizeof err);
  assert_true(m >= 0);
  printf("# after \"caf\" + C3 A9: %d proposed ids", m);
  for (int i = 0; i < m; i++) {
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(p.ttok, out[i], &bl);
    printf(" %d '%.*s'", out[i], (int)bl, (const char *)b);
  }
  printf("\n");
  free(ids);
  df_text_draft_destroy(&x);
  free_pair(&p);
}

static void test_encode_stable(void **state) {
  (void)state;
  df_tok *t = NULL;
  char err[512];
  if (df_tok_load(DF_SOURCE_DIR "/models/demo-moe", &t, err, sizeof err) != 0) fail_msg("%s", err);
  struct {
    const char *text;
    size_t want_stable_of; /* ids of this prefix are the stable ones */
    const char *prefix;
  } cases[] = {
      {"The history of the county", 0, "The history of the"},
      {"The history of the count", 0, "The history of the"},
      {"The end.", 0, "The end"},
      {"Two<|im_end|>", 0, "Two"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t *ids = NULL, *pre = NULL;
    size_t n = 0, stable = 0, np = 0;
    assert_int_equal(df_tok_encode_stable(t, cases[c].text, strlen(cases[c].text), 0, &ids, &n,
                                          &stable, err, sizeof err), 0);
    assert_int_equal(df_tok_encode(t, cases[c].prefix, strlen(cases[c].prefix), 0, &pre, &np,
                                   err, sizeof err), 0);
    printf("# \"%s\": %zu ids, %zu stable\n", cases[c].text, n, stable);
    assert_int_equal(stable, np);
    assert_memory_equal(ids, pre, np * sizeof *ids);
    free(ids);
    free(pre);
  }
  int32_t *ids = NULL;
  size_t n = 0, stable = 0;
  assert_int_equal(df_tok_encode_stable(t, "x", 1, DF_TOK_ADD_SPECIAL, &ids, &n, &stable, err,
                                        sizeof err), -1);
  assert_null(ids);
  df_tok_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_stable),
      cmocka_unit_test(test_deepseek_relabeled),
      cmocka_unit_test(test_demo_swapped_tokenizer),
      cmocka_unit_test(test_split_character),
      cmocka_unit_test(test_demo_xdraft),
      cmocka_unit_test(test_window),
      cmocka_unit_test(test_heal),
      cmocka_unit_test(test_refused_at_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
