/* tests/test_deepseek.c — the deepseek_v3 / kimi_k2 family against the PyTorch reference
 * (tests/reference/deepseek_ref.py) and its own invariants.
 *
 * Fixtures: tests/fixtures/tiny-ds-bf16 (deepseek_v3, bf16, q_proj, 4 expert groups keep 2,
 * YaRN mscale 1/1) and tests/fixtures/tiny-ds-fp8 (kimi_k2, F8_E4M3 weights in 32x32 blocks
 * with partial blocks and K % 8 tails, q_a/q_b, two shared experts, YaRN mscale 1/0.8).
 * Tolerance: the reference computes the published (expanded-head) attention, the engine the
 * absorbed form over the latent cache; both are fp32 over the same (de-quantised) weights,
 * so they differ by summation order only — measured max |dlogit| is printed (≈1e-5 on
 * logits of magnitude ~20); 1e-3 is allowed, and the 32 greedy ids must be identical
 * (golden min_top2_gap_greedy ≈ 0.03, router margins ≈ 1e-3 in sigmoid units).
 * Also: batch invariance (chunks 64 / 7 / 1, 5-row plans), scalar == AVX2 bit for bit, KV
 * rollback of the latent cache, several sequences in one forward, the FP8 and transposed
 * kernels against libtorch, the router, FP8 experts through the expert backend interface,
 * cache bytes per token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/golden.h"

#include "engine/kernels/kernels.h"
#include "engine/model.h"
#include "engine/tensor/torch_shim.h"

#define LOGIT_TOL 1e-3f

static const char *k_fixtures[] = {"tiny-ds-bf16", "tiny-ds-fp8"};

static df_model *load_fixture_model(const char *name, int64_t max_rows) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, name);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 256, .max_rows = max_rows};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static float max_diff(const float *a, const float *b, int64_t n, int64_t *where) {
  float md = 0;
  for (int64_t i = 0; i < n; i++) {
    float d = a[i] - b[i];
    d = d < 0 ? -d : d;
    if (d > md || d != d) {
      md = d;
      if (where) *where = i;
    }
  }
  return md;
}

/* Prompt logits within LOGIT_TOL of the reference; greedy decode reproduces greedy_ids and
 * the logits each id was chosen from. */
static void test_golden_fixtures(void **state) {
  (void)state;
  char err[1024];
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_fixture_model(k_fixtures[f], 64);
    int64_t V = g.vocab;
    assert_int_equal(df_model_cfg(m)->vocab_size, V);
    float *lg = prompt_logits(m, g.prompt, g.n_prompt, 64);
    int64_t w = 0;
    float d = max_diff(lg, g.logits, g.n_prompt * V, &w);
    printf("# %s: prompt max |logit - reference| = %.3g at position %lld\n", k_fixtures[f], d,
           (long long)(w / V));
    /* decode: one token per forward, compared with the step logits */
    df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
    float *row = malloc((size_t)V * sizeof(float));
    assert_int_equal(df_model_forward(m, kv, g.prompt, g.n_prompt, DF_LOGITS_LAST, row, err, sizeof err), 0);
    float ds = 0;
    for (int64_t i = 0; i < g.n_greedy; i++) {
      float di = max_diff(row, g.steps + i * V, V, NULL);
      ds = di > ds ? di : ds;
      int32_t t = argmax(row, V);
      if (t != g.greedy[i])
        fail_msg("%s: greedy token %lld is %d, reference %d", k_fixtures[f], (long long)i, t,
                 g.greedy[i]);
      assert_int_equal(df_model_forward(m, kv, &t, 1, DF_LOGITS_LAST, row, err, sizeof err), 0);
    }
    printf("# %s: decode steps max |logit - reference| = %.3g\n", k_fixtures[f], ds);
    if (d > LOGIT_TOL || ds > LOGIT_TOL)
      fail_msg("%s: logits differ from the reference by %g / %g > %g", k_fixtures[f], d, ds,
               LOGIT_TOL);
    free(row);
    df_kv_destroy(&kv);
    free(lg);
    golden_free(&g);
    df_model_destroy(&m);
  }
}

static void test_batch_invariance(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_fixture_model(k_fixtures[f], 64);
    size_t bytes = (size_t)(g.n_prompt * g.vocab) * sizeof(float);
    float *a = prompt_logits(m, g.prompt, g.n_prompt, 64);
    float *b = prompt_logits(m, g.prompt, g.n_prompt, 7);
    float *c = prompt_logits(m, g.prompt, g.n_prompt, 1);
    assert_memory_equal(a, b, bytes);
    assert_memory_equal(a, c, bytes);
    df_model_destroy(&m);
    m = load_fixture_model(k_fixtures[f], 5);
    float *d = prompt_logits(m, g.prompt, g.n_prompt, 64);
    assert_memory_equal(a, d, bytes);
    df_model_destroy(&m);
    free(a);
    free(b);
    free(c);
    free(d);
    golden_free(&g);
  }
}

static void test_isa_agreement(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX2) skip();
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_fixture_model(k_fixtures[f], 64);
    df_isa hw = df_k_set_isa(df_k_isa_hw());
    float *a = prompt_logits(m, g.prompt, 24, 24);
    for (int isa = DF_ISA_SCALAR; isa < (int)hw; isa++) {
      df_k_set_isa((df_isa)isa);
      float *b = prompt_logits(m, g.prompt, 24, 24);
      assert_memory_equal(a, b, (size_t)(24 * g.vocab) * sizeof(float));
      free(b);
    }
    df_k_set_isa(hw);
    free(a);
    golden_free(&g);
    df_model_destroy(&m);
  }
}

/* Truncating the latent cache and continuing equals never having gone further. */
static void test_kv_rollback(void **state) {
  (void)state;
  golden g;
  golden_load("tiny-ds-fp8", &g);
  df_model *m = load_fixture_model("tiny-ds-fp8", 64);
  char err[1024];
  int64_t V = g.vocab;
  float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err), *kv2 = df_model_kv_new(m, 0, err, sizeof err);
  assert_int_equal(kv->kv_lora_rank, df_model_cfg(m)->kv_lora_rank);
  assert_int_equal(df_model_forward(m, kv, g.prompt, 40, DF_LOGITS_NONE, NULL, err, sizeof err), 0);
  df_kv_truncate(kv, 17);
  assert_int_equal(df_model_forward(m, kv, g.prompt + 30, 3, DF_LOGITS_LAST, la, err, sizeof err), 0);
  assert_int_equal(df_model_forward(m, kv2, g.prompt, 17, DF_LOGITS_NONE, NULL, err, sizeof err), 0);
  assert_int_equal(df_model_forward(m, kv2, g.prompt + 30, 3, DF_LOGITS_LAST, lb, err, sizeof err), 0);
  assert_memory_equal(la, lb, (size_t)V * 4);
  assert_int_equal(kv->len, 20);
  free(la);
  free(lb);
  df_kv_destroy(&kv);
  df_kv_destroy(&kv2);
  golden_free(&g);
  df_model_destroy(&m);
}

/* Two sequences in one forward (chunk boundary inside a sequence) get their solo logits. */
static void test_multi_sequence_batch(void **state) {
  (void)state;
  golden g;
  golden_load("tiny-ds-bf16", &g);
  df_model *m = load_fixture_model("tiny-ds-bf16", 7);
  char err[1024];
  int64_t V = g.vocab;
  float *solo = malloc((size_t)(2 * V) * 4), *both = malloc((size_t)(2 * V) * 4);
  df_kv_cache *k1 = df_model_kv_new(m, 0, err, sizeof err), *k2 = df_model_kv_new(m, 0, err, sizeof err);
  assert_int_equal(df_model_forward(m, k1, g.prompt, 9, DF_LOGITS_LAST, solo, err, sizeof err), 0);
  assert_int_equal(df_model_forward(m, k2, g.prompt + 20, 12, DF_LOGITS_LAST, solo + V, err, sizeof err), 0);
  df_kv_truncate(k1, 0);
  df_kv_truncate(k2, 0);
  df_batch_seq b[2] = {{k1, g.prompt, 9, DF_LOGITS_LAST, both, NULL},
                       {k2, g.prompt + 20, 12, DF_LOGITS_LAST, both + V, NULL}};
  assert_int_equal(df_model_forward_batch(m, b, 2, err, sizeof err), 0);
  assert_memory_equal(solo, both, (size_t)(2 * V) * 4);
  df_kv_destroy(&k1);
  df_kv_destroy(&k2);
  free(solo);
  free(both);
  golden_free(&g);
  df_model_destroy(&m);
}

static uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* FP8 linear (128x128 blocks as published, partial blocks, K % 8 tail) against libtorch in
 * float64, and scalar == AVX2; the transposed linear against a direct double sum. */
static void test_fp8_kernels(void **state) {
  (void)state;
  char err[256];
  enum { M = 5, N = 200, K = 300 };
  int64_t bn = 128, bk = 128, gn = 2, gk = 3;
  uint8_t *w = malloc(N * K);
  float sc[2 * 3], *xv = malloc(M * K * sizeof(float));
  uint32_t s = 99;
  for (int i = 0; i < N * K; i++) {
    w[i] = (uint8_t)lcg(&s);
    if ((w[i] & 0x7f) == 0x7f) w[i] ^= 1; /* no NaN codes */
  }
  for (int i = 0; i < 6; i++) sc[i] = (float)(lcg(&s) % 1000 + 1) * 1e-5f;
  for (int i = 0; i < M * K; i++) xv[i] = (float)(lcg(&s) % 2001) / 1000.0f - 1.0f;
  int64_t ws[2] = {N, K}, ss[2] = {gn, gk}, xs[2] = {M, K}, ys[2] = {M, N};
  df_t_tensor *wt = df_t_wrap(w, DF_DT_F8_E4M3, 2, ws, err, sizeof err);
  df_t_tensor *st = df_t_wrap(sc, DF_DT_F32, 2, ss, err, sizeof err);
  assert_non_null(wt);
  assert_int_equal(df_t_set_block_scale(wt, st, bn, bk, err, sizeof err), 0);
  int64_t bad[2] = {gn, gk + 1};
  df_t_tensor *sbad = df_t_wrap(sc, DF_DT_F32, 2, bad, err, sizeof err);
  assert_int_equal(df_t_set_block_scale(wt, sbad, bn, bk, err, sizeof err), -1);
  assert_non_null(strstr(err, "block scales must be F32 [2, 3]"));
  df_t_tensor *x = df_t_new_f32(2, xs, err, sizeof err), *y = df_t_new_f32(2, ys, err, sizeof err);
  memcpy(df_t_f32(x), xv, M * K * sizeof(float));
  float *ref = malloc(M * N * sizeof(float)), *ya = malloc(M * N * sizeof(float));
  df_t_linear(x, 0, M, wt, NULL, y);
  assert_int_equal(df_t_ref_linear(x, M, wt, NULL, ref, err, sizeof err), 0);
  for (int i = 0; i < M * N; i++) assert_float_equal(df_t_f32(y)[i], ref[i], 1e-4);
  memcpy(ya, df_t_f32(y), M * N * sizeof(float));
  if (df_k_isa() >= DF_ISA_AVX2) {
    df_isa best = df_k_isa();
    df_k_set_isa(DF_ISA_SCALAR);
    df_t_linear(x, 0, M, wt, NULL, y);
    df_k_set_isa(best);
    assert_memory_equal(ya, df_t_f32(y), M * N * sizeof(float));
  }
  /* row subset with an offset into the scale grid */
  df_k_weight kw = df_t_kweight(wt);
  df_k_linear_w(xv, M, K, &kw, 120, 17, ya, 17);
  for (int m = 0; m < M; m++)
    for (int j = 0; j < 17; j++) assert_true(ya[m * 17 + j] == df_t_f32(y)[m * N + 120 + j]);
  /* transposed: y[m, j] = sum_{i < 70} x[m, i] W(130 + i, 5 + j) */
  float yt[5 * 40], yt2[5 * 40];
  df_k_linear_t(xv, M, 70, K, &kw, 130, 5, 40, yt, 40);
  for (int m = 0; m < M; m++)
    for (int j = 0; j < 40; j++) {
      double acc = 0;
      for (int i = 0; i < 70; i++)
        acc += (double)xv[m * K + i] * df_k_fp8_weight(w, sc, gk, bn, bk, K, 130 + i, 5 + j);
      assert_float_equal(yt[m * 40 + j], acc, 1e-4);
    }
  if (df_k_isa() >= DF_ISA_AVX2) {
    df_isa best = df_k_isa();
    df_k_set_isa(DF_ISA_SCALAR);
    df_k_linear_t(xv, M, 70, K, &kw, 130, 5, 40, yt2, 40);
    df_k_set_isa(best);
    assert_memory_equal(yt, yt2, sizeof yt);
  }
  /* every byte decodes to the E4M3FN value */
  assert_true(df_k_fp8_e4m3_to_f32(0x7e) == 448.0f && df_k_fp8_e4m3_to_f32(0xfe) == -448.0f);
  assert_true(df_k_fp8_e4m3_to_f32(0x01) == 0x1p-9f && df_k_fp8_e4m3_to_f32(0x08) == 0x1p-6f);
  assert_true(df_k_fp8_e4m3_to_f32(0x38) == 1.0f && df_k_fp8_e4m3_to_f32(0x80) == 0.0f);
  df_t_tensor *all[] = {wt, st, sbad, x, y};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) df_t_destroy(&all[i]);
  free(w);
  free(xv);
  free(ref);
  free(ya);
}

/* df_k_linear_multi with FP8 jobs (mixed with a BF16 one, as a layer's projections may be):
 * every element bitwise equal to df_k_linear_fp8 / df_k_linear computed alone, for row
 * counts 1..7 (decode and batch tiles), K with a tail, partial blocks and bk not a multiple
 * of 8, on the AVX2 and scalar paths. */
static void test_fp8_multi(void **state) {
  (void)state;
  enum { NJ = 6 };
  static const int64_t Ms[NJ] = {1, 2, 3, 5, 7, 4}, Ns[NJ] = {40, 96, 37, 130, 9, 64},
                       Ks[NJ] = {96, 40, 61, 300, 33, 72}, Bn[NJ] = {32, 32, 16, 128, 4, 1},
                       Bk[NJ] = {32, 32, 12, 128, 5, 64};
  uint32_t s = 7;
  uint8_t *w[NJ];
  float *sc[NJ], *x[NJ], *y[NJ], *ref[NJ];
  df_k_linear_job jobs[NJ + 1];
  for (int i = 0; i < NJ; i++) {
    int64_t gn = (Ns[i] + Bn[i] - 1) / Bn[i], gk = (Ks[i] + Bk[i] - 1) / Bk[i];
    w[i] = malloc((size_t)(Ns[i] * Ks[i]));
    sc[i] = malloc((size_t)(gn * gk) * sizeof(float));
    x[i] = malloc((size_t)(Ms[i] * Ks[i]) * sizeof(float));
    y[i] = malloc((size_t)(Ms[i] * Ns[i]) * sizeof(float));
    ref[i] = malloc((size_t)(Ms[i] * Ns[i]) * sizeof(float));
    for (int64_t k = 0; k < Ns[i] * Ks[i]; k++) {
      w[i][k] = (uint8_t)lcg(&s);
      if ((w[i][k] & 0x7f) == 0x7f) w[i][k] ^= 1;
    }
    for (int64_t k = 0; k < gn * gk; k++) sc[i][k] = (float)(lcg(&s) % 1000 + 1) * 1e-4f;
    for (int64_t k = 0; k < Ms[i] * Ks[i]; k++) x[i][k] = (float)(lcg(&s) % 2001) / 1000.0f - 1.0f;
    jobs[i] = (df_k_linear_job){x[i], Ms[i], Ks[i], Ks[i], w[i], DF_DT_F8_E4M3, Ns[i], NULL,
                                y[i], Ns[i], {sc[i]}, gk, Bn[i], Bk[i]};
  }
  /* a BF16 job in the same region: [3, 48] x [20, 48] */
  uint16_t wb[20 * 48];
  float xb[3 * 48], yb[3 * 20], rb[3 * 20];
  for (int k = 0; k < 20 * 48; k++) wb[k] = (uint16_t)(0x3c00 + lcg(&s) % 0x600);
  for (int k = 0; k < 3 * 48; k++) xb[k] = (float)(lcg(&s) % 2001) / 1000.0f - 1.0f;
  jobs[NJ] = (df_k_linear_job){xb, 3, 48, 48, wb, DF_DT_BF16, 20, NULL, yb, 20, {NULL}, 0, 0, 0};
  for (int isa = 0; isa <= (int)df_k_isa_hw(); isa++) {
    df_k_set_isa((df_isa)isa);
    for (int i = 0; i < NJ; i++)
      df_k_linear_fp8(x[i], Ms[i], Ks[i], Ks[i], w[i], sc[i], jobs[i].scale_ld, Bn[i], Bk[i], 0,
                      Ns[i], ref[i], Ns[i]);
    df_k_linear(xb, 3, 48, 48, wb, DF_DT_BF16, 20, NULL, rb, 20);
    df_k_linear_multi(jobs, NJ + 1);
    for (int i = 0; i < NJ; i++)
      if (memcmp(y[i], ref[i], (size_t)(Ms[i] * Ns[i]) * sizeof(float)))
        fail_msg("%s: FP8 job %d [%lld x %lld x %lld] differs from df_k_linear_fp8",
                 df_k_isa_name(df_k_isa()), i, (long long)Ms[i], (long long)Ns[i], (long long)Ks[i]);
    assert_memory_equal(yb, rb, sizeof yb);
    /* against the de-quantised weights in double: the kernel is a correct product */
    for (int64_t m = 0; m < Ms[3]; m++)
      for (int64_t n = 0; n < Ns[3]; n++) {
        double acc = 0, mag = 0;
        for (int64_t k = 0; k < Ks[3]; k++) {
          double t = (double)x[3][m * Ks[3] + k] *
                     df_k_fp8_weight(w[3], sc[3], jobs[3].scale_ld, Bn[3], Bk[3], Ks[3], n, k);
          acc += t, mag += fabs(t);
        }
        assert_true(fabs(y[3][m * Ns[3] + n] - acc) <= 1e-5 * mag + 1e-30);
      }
  }
  df_k_set_isa(df_k_isa_hw());
  for (int i = 0; i < NJ; i++) free(w[i]), free(sc[i]), free(x[i]), free(y[i]), free(ref[i]);
}

/* Group-limited sigmoid routing: a group with a single strong expert loses to groups whose
 * two best sum higher; the bias steers selection but not the weights. */
static void test_router(void **state) {
  (void)state;
  /* 8 experts, 4 groups of 2, keep 2 groups, top-2 */
  float logits[8] = {4.0f, -4.0f, 1.0f, 1.0f, 0.5f, 0.6f, -1.0f, 3.0f};
  float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float work[2 * 8 + 2 * 4];
  int32_t idx[2];
  float w[2];
  df_k_router_sigmoid_group(logits, 1, 8, bias, 4, 2, 2, true, 2.5f, work, idx, w);
  /* group sums: g0 .982+.018=1.0, g1 .731*2=1.462, g2 .622+.646=1.268, g3 .269+.953=1.222 */
  assert_int_equal(idx[0], 2); /* g1 kept; expert 0 (0.982) is in g0, dropped */
  assert_int_equal(idx[1], 3);
  assert_float_equal(w[0], 1.25f, 1e-6);
  assert_float_equal(w[1], 1.25f, 1e-6);
  /* a bias lifts expert 7's group and choice; its weight stays the unbiased sigmoid */
  bias[7] = 0.5f;
  df_k_router_sigmoid_group(logits, 1, 8, bias, 4, 2, 2, false, 1.0f, work, idx, w);
  assert_int_equal(idx[0], 7);
  assert_int_equal(idx[1], 2);
  assert_float_equal(w[0], 1.0f / (1.0f + expf(-3.0f)), 1e-6);
}

/* FP8 routed experts through the expert-backend path: df_model_expert_weights hands out
 * FP8 tensors with their scales, and df_t_swiglu_ffn on them equals the forward's result. */
static void test_fp8_experts(void **state) {
  (void)state;
  df_model *m = load_fixture_model("tiny-ds-fp8", 8);
  const df_model_config *c = df_model_cfg(m);
  const df_t_tensor *g, *u, *d;
  assert_int_equal(df_model_expert_weights(m, 0, 0, &g, &u, &d), -1); /* layer 0 is dense */
  assert_int_equal(df_model_expert_weights(m, 1, (int)c->num_experts, &g, &u, &d), -1);
  assert_int_equal(df_model_expert_weights(m, 1, 3, &g, &u, &d), 0);
  int64_t bn = 0, bk = 0;
  assert_int_equal(df_t_dtype(g), DF_DT_F8_E4M3);
  assert_non_null(df_t_block_scale(g, &bn, &bk));
  assert_int_equal(bn, 32);
  assert_int_equal(bk, 32);
  assert_non_null(df_t_block_scale(d, NULL, NULL));
  /* swiglu over 2 rows vs de-quantised double arithmetic */
  char err[256];
  int64_t H = c->hidden_size, I = c->moe_intermediate_size;
  int64_t xs[2] = {2, H}, is[2] = {2, I};
  df_t_tensor *x = df_t_new_f32(2, xs, err, sizeof err), *y = df_t_new_f32(2, xs, err, sizeof err);
  df_t_tensor *gb = df_t_new_f32(2, is, err, sizeof err), *ub = df_t_new_f32(2, is, err, sizeof err);
  for (int64_t i = 0; i < 2 * H; i++) df_t_f32(x)[i] = (float)((i * 37) % 19) / 19.0f - 0.5f;
  df_t_swiglu_ffn(x, 0, 2, g, u, d, gb, ub, y);
  df_k_weight kg = df_t_kweight(g), ku = df_t_kweight(u), kd = df_t_kweight(d);
  for (int r = 0; r < 2; r++)
    for (int64_t o = 0; o < H; o++) {
      double acc = 0;
      for (int64_t j = 0; j < I; j++) {
        double a = 0, b = 0;
        for (int64_t k = 0; k < H; k++) {
          double xv = df_t_f32(x)[r * H + k];
          a += xv * df_k_fp8_weight(kg.data, kg.scale, kg.scale_ld, 32, 32, H, j, k);
          b += xv * df_k_fp8_weight(ku.data, ku.scale, ku.scale_ld, 32, 32, H, j, k);
        }
        acc += a / (1 + exp(-a)) * b * df_k_fp8_weight(kd.data, kd.scale, kd.scale_ld, 32, 32, I, o, j);
      }
      assert_float_equal(df_t_f32(y)[r * H + o], acc, 1e-4);
    }
  df_t_tensor *all[] = {x, y, gb, ub};
  for (size_t i = 0; i < 4; i++) df_t_destroy(&all[i]);
  /* the memory plan counts FP8 bytes (+ scales), not widened ones */
  df_model_bytes b = df_model_memory(m);
  assert_true(b.experts > 0 && b.experts < (uint64_t)(2 * 8 * 3 * 40 * 96 * 1.1));
  df_model_destroy(&m);
}

static void test_cache_bytes(void **state) {
  (void)state;
  df_model *m = load_fixture_model("tiny-ds-bf16", 8);
  const df_model_config *c = df_model_cfg(m);
  char err[256];
  /* latent (32) + rope key (8) per layer, fp32: not expanded over 4 heads */
  assert_int_equal(df_model_kv_bytes_per_token(m), (uint64_t)(c->num_hidden_layers * (32 + 8) * 4));
  df_kv_cache *kv = df_model_kv_new(m, 100, err, sizeof err);
  assert_int_equal(df_kv_bytes(kv), 100 * df_model_kv_bytes_per_token(m));
  assert_int_equal(df_kv_bytes_per_token(kv), df_model_kv_bytes_per_token(m));
  df_kv_destroy(&kv);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp8_kernels),     cmocka_unit_test(test_fp8_multi),
      cmocka_unit_test(test_router),
      cmocka_unit_test(test_golden_fixtures), cmocka_unit_test(test_batch_invariance),
      cmocka_unit_test(test_isa_agreement),   cmocka_unit_test(test_kv_rollback),
      cmocka_unit_test(test_multi_sequence_batch), cmocka_unit_test(test_fp8_experts),
      cmocka_unit_test(test_cache_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
