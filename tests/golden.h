/* tests/golden.h — the golden fixtures of tests/reference/ (tests/fixtures/<name>/golden.json)
 * as the engine tests read them. Include after <cmocka.h> and <jansson.h>; the file is
 * header-only because each test is its own executable. DF_FIXTURES is the fixtures folder
 * (set by df_add_cmocka_test).
 *
 * golden.json: prompt_ids [n_prompt], greedy_ids [n_greedy], logits_shape [n_prompt, vocab],
 * logits_file (raw little-endian fp32 [n_prompt, vocab]: the reference's logits at every
 * prompt position) and, for fixtures that have it, step_logits_file (fp32 [n_greedy, vocab]:
 * the logits that chose each greedy token). Also the chunked prompt forward and argmax the
 * engine tests share. */
#ifndef DF_TESTS_GOLDEN_H
#define DF_TESTS_GOLDEN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/model.h"

typedef struct golden {
  int32_t prompt[256];
  int64_t n_prompt;
  int32_t greedy[256];
  int64_t n_greedy;
  float *logits; /* [n_prompt, vocab], owned */
  float *steps;  /* [n_greedy, vocab], owned; NULL when the fixture has no step_logits_file */
  int64_t vocab;
} golden;

/* Reads n fp32 values of DF_FIXTURES/name/file into a malloc'd buffer (caller frees); fails
 * the test when the file is missing or short. */
static inline float *golden_read_f32(const char *name, const char *file, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", DF_FIXTURES, name, file);
  float *p = malloc(n * sizeof(float));
  assert_non_null(p);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  assert_int_equal(fread(p, sizeof(float), n, f), n);
  fclose(f);
  return p;
}

/* Loads fixture `name` into *g (free with golden_free); fails the test on a missing or
 * inconsistent file (no prompt or greedy ids, more than 256 of either, logits_shape[0] not
 * the prompt length). */
static inline void golden_load(const char *name, golden *g) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/golden.json", DF_FIXTURES, name);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) fail_msg("%s: %s", path, je.text);
  json_t *p = json_object_get(root, "prompt_ids"), *gr = json_object_get(root, "greedy_ids");
  json_t *shape = json_object_get(root, "logits_shape");
  assert_non_null(p);
  assert_non_null(gr);
  assert_non_null(shape);
  g->n_prompt = (int64_t)json_array_size(p);
  g->n_greedy = (int64_t)json_array_size(gr);
  assert_true(g->n_prompt > 0 && g->n_prompt <= 256 && g->n_greedy > 0 && g->n_greedy <= 256);
  for (int64_t i = 0; i < g->n_prompt; i++)
    g->prompt[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
  for (int64_t i = 0; i < g->n_greedy; i++)
    g->greedy[i] = (int32_t)json_integer_value(json_array_get(gr, (size_t)i));
  assert_int_equal(json_integer_value(json_array_get(shape, 0)), g->n_prompt);
  g->vocab = json_integer_value(json_array_get(shape, 1));
  g->logits = golden_read_f32(name, json_string_value(json_object_get(root, "logits_file")),
                              (size_t)(g->n_prompt * g->vocab));
  const char *steps = json_string_value(json_object_get(root, "step_logits_file"));
  g->steps = steps ? golden_read_f32(name, steps, (size_t)(g->n_greedy * g->vocab)) : NULL;
  json_decref(root);
}

static inline void golden_free(golden *g) {
  free(g->logits);
  free(g->steps);
  g->logits = g->steps = NULL;
}

/* Logits of every prompt position, fed in chunks of `chunk` tokens per forward through a
 * fresh KV cache: ids [n] -> malloc'd fp32 [n, vocab] (caller frees); fails the test on a
 * KV-cache or forward error. Needs "engine/model.h". */
static inline float *prompt_logits(df_model *m, const int32_t *ids, int64_t n, int64_t chunk) {
  char err[1024];
  int64_t V = df_model_cfg(m)->vocab_size;
  float *out = malloc((size_t)(n * V) * sizeof(float));
  assert_non_null(out);
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  if (!kv) fail_msg("kv: %s", err);
  for (int64_t i = 0; i < n; i += chunk) {
    int64_t c = n - i < chunk ? n - i : chunk;
    if (df_model_forward(m, kv, ids + i, c, DF_LOGITS_ALL, out + i * V, err, sizeof err) != 0)
      fail_msg("forward: %s", err);
  }
  df_kv_destroy(&kv);
  return out;
}

/* Index of the first maximum of x [n] (the greedy token). */
static inline int32_t argmax(const float *x, int64_t n) {
  int32_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[b]) b = (int32_t)i;
  return b;
}

#endif
