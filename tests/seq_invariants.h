/* tests/seq_invariants.h — the sequence-state invariants every recurrent family's test
 * asserts (test_kimi_linear.c, test_kimi_k3.c): the helpers to run a model, and the checks
 * that a sequence's logits do not depend on the ISA or on another sequence in its batch.
 * Header-only (static inline functions, so a test may use some of them) for cmocka tests. */
#ifndef DF_TESTS_SEQ_INVARIANTS_H
#define DF_TESTS_SEQ_INVARIANTS_H

#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/model.h"
#include "tests/golden.h"

static inline df_kv_cache *kv_new(df_model *m) {
  char err[1024];
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  if (!kv) fail_msg("kv: %s", err);
  return kv;
}

static inline void fwd(df_model *m, df_kv_cache *kv, const int32_t *ids, int64_t n, df_logits_mode mode,
                float *out) {
  char err[1024];
  if (df_model_forward(m, kv, ids, n, mode, out, err, sizeof err) != 0)
    fail_msg("forward: %s", err);
}

/* The deterministic prompt of n tokens the reference setup tests use as well. */
static inline void make_prompt(int32_t *ids, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
}

/* A 40-token prompt's logits on every lower ISA (scalar, AVX2 below AVX-512) equal the CPU's
 * best ISA's bit for bit (the caller skips where the CPU has no AVX2). */
static inline void inv_isa_agreement(df_model *m, const char *name) {
  int64_t V = df_model_cfg(m)->vocab_size;
  int32_t ids[40];
  make_prompt(ids, 40, V);
  df_isa hw = df_k_set_isa(df_k_isa_hw());
  float *a = prompt_logits(m, ids, 40, 40);
  for (int isa = DF_ISA_SCALAR; isa < (int)hw; isa++) {
    df_k_set_isa((df_isa)isa);
    float *b = prompt_logits(m, ids, 40, 40);
    if (memcmp(a, b, (size_t)(40 * V) * sizeof(float)))
      fail_msg("%s: %s != %s", name, df_k_isa_name((df_isa)isa), df_k_isa_name(hw));
    free(b);
  }
  df_k_set_isa(hw);
  free(a);
}

/* Two sequences in one forward (m loaded with max_rows 7: a chunk boundary inside a
 * sequence) get their solo logits, and a sequence's decode step next to another's prefill is
 * its solo step, bit for bit. */
static inline void inv_alone_equals_batched(df_model *m, const char *name) {
  char err[1024];
  int64_t V = df_model_cfg(m)->vocab_size;
  int32_t ids[40];
  make_prompt(ids, 40, V);
  float *solo = malloc((size_t)(3 * V) * 4), *both = malloc((size_t)(3 * V) * 4);
  df_kv_cache *k1 = kv_new(m), *k2 = kv_new(m);
  fwd(m, k1, ids, 9, DF_LOGITS_LAST, solo);
  fwd(m, k2, ids + 20, 12, DF_LOGITS_LAST, solo + V);
  fwd(m, k1, ids + 30, 1, DF_LOGITS_LAST, solo + 2 * V);
  df_kv_truncate(k1, 0);
  df_kv_truncate(k2, 0);
  df_batch_seq b[2] = {{k1, ids, 9, DF_LOGITS_LAST, both, NULL},
                       {k2, ids + 20, 12, DF_LOGITS_LAST, both + V, NULL}};
  if (df_model_forward_batch(m, b, 2, err, sizeof err) != 0) fail_msg("batch: %s", err);
  df_kv_truncate(k2, 0);
  df_batch_seq c[2] = {{k2, ids + 20, 12, DF_LOGITS_LAST, both + V, NULL},
                       {k1, ids + 30, 1, DF_LOGITS_LAST, both + 2 * V, NULL}};
  if (df_model_forward_batch(m, c, 2, err, sizeof err) != 0) fail_msg("batch: %s", err);
  if (memcmp(solo, both, (size_t)(3 * V) * 4))
    fail_msg("%s: a sequence batched with another differs from it alone", name);
  df_kv_destroy(&k1);
  df_kv_destroy(&k2);
  free(solo);
  free(both);
}

#endif
