/* tests/test_gemm.c — the prefill GEMM tiles (engine/kernels/kernels_gemm.c) against the other
 * paths of df_k_linear, bit for bit.
 *
 * For BF16, F16 and F32 weights, with and without bias, over shapes that exercise every edge
 * (rows not a multiple of the 6-row block, columns not a multiple of the 8-column tile, K with
 * and without a K % 8 tail, K below 8): df_k_linear at M >= DF_K_GEMM_MIN_ROWS on AVX-512 (the
 * GEMM) equals the same call on AVX2 and on the scalar path, and each row equals a one-row
 * product of that row alone (batch invariance); df_k_linear_multi mixing GEMM-sized and small
 * jobs equals the jobs one by one; 1 to 4 threads give the same bytes; and the values are a
 * correct product (against double precision, to a bound of K * 2^-22 relative). Skipped where
 * the CPU has no AVX-512 (the GEMM never runs there). test_avx2_rows covers the AVX2 tile
 * that every batch shape of 2 rows or more runs through on AVX2, and on an AVX-512 CPU its
 * 512-bit form (4 x 6 blocks, 2..15 rows) against it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "engine/kernels/dispatch.h"
#include "engine/kernels/kernels.h"

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* A random weight of dtype dt at w[i] (finite, in about [-2, 2]); its fp32 value returned. */
static float put_w(void *w, df_dtype dt, int64_t i, uint64_t *s) {
  float v = (float)((int64_t)(lcg(s) % 4001) - 2000) / 1000.0f;
  if (dt == DF_DT_F32) {
    ((float *)w)[i] = v;
  } else if (dt == DF_DT_BF16) {
    uint32_t u;
    memcpy(&u, &v, 4);
    ((uint16_t *)w)[i] = (uint16_t)(u >> 16);
  } else { /* F16: a normal half near v */
    int e = (int)(lcg(s) % 6), m = (int)(lcg(s) % 1024);
    ((uint16_t *)w)[i] = (uint16_t)((lcg(s) & 1) << 15 | (uint16_t)(12 + e) << 10 | (uint16_t)m);
  }
  return df_k_to_f32(w, dt, i);
}

typedef struct shape {
  int64_t M, N, K;
} shape;

/* One random product: w [N, K] and bias [N] of dtype dt, x [M, K] fp32, outputs ya, yb [M, N]. */
typedef struct prod {
  void *w, *bias;
  float *x, *ya, *yb;
} prod;

static prod prod_new(df_dtype dt, int64_t M, int64_t N, int64_t K, uint64_t *s) {
  size_t es = df_dtype_size(dt);
  prod p = {malloc((size_t)(N * K) * es), malloc((size_t)N * es), malloc((size_t)(M * K) * sizeof(float)),
            malloc((size_t)(M * N) * sizeof(float)), malloc((size_t)(M * N) * sizeof(float))};
  assert_non_null(p.w);
  assert_non_null(p.bias);
  assert_non_null(p.x);
  assert_non_null(p.ya);
  assert_non_null(p.yb);
  for (int64_t i = 0; i < N * K; i++) put_w(p.w, dt, i, s);
  for (int64_t i = 0; i < N; i++) put_w(p.bias, dt, i, s);
  for (int64_t i = 0; i < M * K; i++) p.x[i] = (float)((int64_t)(lcg(s) % 2001) - 1000) / 997.0f;
  return p;
}

static void prod_free(prod *p) {
  free(p->w);
  free(p->bias);
  free(p->x);
  free(p->ya);
  free(p->yb);
}

static void check_dtype(df_dtype dt) {
  static const shape shapes[] = {{16, 8, 64},  {17, 9, 13},  {23, 33, 100}, {64, 20, 1029},
                                 {100, 7, 8},  {16, 1, 5},   {31, 16, 256}, {48, 41, 77},
                                 {26, 16, 64}, {45, 10, 24}}; /* M % 6: every remainder */
  uint64_t s = 12345 + (uint64_t)dt;
  df_isa hw = df_k_isa_hw();
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    int64_t M = shapes[c].M, N = shapes[c].N, K = shapes[c].K;
    prod p = prod_new(dt, M, N, K, &s);
    void *w = p.w, *bias = p.bias;
    float *x = p.x, *ya = p.ya, *yb = p.yb;
    for (int b = 0; b < 2; b++) {
      const void *bb = b ? bias : NULL;
      df_k_set_isa(DF_ISA_AVX512);
      df_k_set_threads(2);
      df_k_linear(x, M, K, K, w, dt, N, bb, ya, N);
      /* the GEMM tiles really ran: one called directly writes the same columns */
      float *yc = calloc((size_t)(M * N), sizeof(float));
      int nr = N < DF_K_GEMM_NR ? (int)N : DF_K_GEMM_NR;
      assert_true(df_k_linear_gemm_cols(dt, x, M, K, K, w, 0, nr, bb, yc, N));
      for (int64_t m = 0; m < M; m++)
        assert_memory_equal(yc + m * N, ya + m * N, (size_t)nr * sizeof(float));
      free(yc);
      for (int isa = DF_ISA_SCALAR; isa < (int)DF_ISA_AVX512; isa++) {
        df_k_set_isa((df_isa)isa);
        df_k_linear(x, M, K, K, w, dt, N, bb, yb, N);
        if (memcmp(ya, yb, (size_t)(M * N) * sizeof(float)))
          fail_msg("dtype %d [%lld x %lld x %lld] bias %d: GEMM differs from %s", (int)dt,
                   (long long)M, (long long)N, (long long)K, b, df_k_isa_name((df_isa)isa));
      }
      df_k_set_isa(DF_ISA_AVX512);
      for (int t = 1; t <= 4; t++) {
        df_k_set_threads(t);
        df_k_linear(x, M, K, K, w, dt, N, bb, yb, N);
        assert_memory_equal(ya, yb, (size_t)(M * N) * sizeof(float));
      }
      for (int64_t m = 0; m < M; m += 5) { /* a row alone: the decode path */
        df_k_linear(x + m * K, 1, K, K, w, dt, N, bb, yb, N);
        assert_memory_equal(ya + m * N, yb, (size_t)N * sizeof(float));
      }
      for (int64_t m = 0; m < M; m++) /* a correct product */
        for (int64_t n = 0; n < N; n++) {
          double r = bb ? df_k_to_f32(bias, dt, n) : 0, mag = fabs(r);
          for (int64_t k = 0; k < K; k++) {
            double p = (double)x[m * K + k] * df_k_to_f32(w, dt, n * K + k);
            r += p;
            mag += fabs(p);
          }
          if (fabs(ya[m * N + n] - r) > mag * (double)K * 0x1p-22 + 1e-30)
            fail_msg("[%lld, %lld]: %g, double %g", (long long)m, (long long)n, ya[m * N + n], r);
        }
    }
    prod_free(&p);
  }
  df_k_set_isa(hw);
  df_k_set_threads(0);
}

static void test_bf16(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX512) skip();
  check_dtype(DF_DT_BF16);
}

static void test_f16(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX512) skip();
  check_dtype(DF_DT_F16);
}

static void test_f32(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX512) skip();
  check_dtype(DF_DT_F32);
}

/* One region with GEMM-sized and small jobs equals the jobs one at a time. */
static void test_multi(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX512) skip();
  uint64_t s = 99;
  enum { NJ = 4 };
  const int64_t Ms[NJ] = {40, 3, 16, 1}, Ns[NJ] = {24, 12, 9, 30}, Ks[NJ] = {96, 96, 37, 64};
  uint16_t *w[NJ];
  float *x[NJ], *y[NJ], *r[NJ];
  df_k_linear_job jobs[NJ];
  for (int i = 0; i < NJ; i++) {
    w[i] = malloc((size_t)(Ns[i] * Ks[i]) * 2);
    x[i] = malloc((size_t)(Ms[i] * Ks[i]) * 4);
    y[i] = malloc((size_t)(Ms[i] * Ns[i]) * 4);
    r[i] = malloc((size_t)(Ms[i] * Ns[i]) * 4);
    for (int64_t k = 0; k < Ns[i] * Ks[i]; k++) put_w(w[i], DF_DT_BF16, k, &s);
    for (int64_t k = 0; k < Ms[i] * Ks[i]; k++) x[i][k] = (float)(lcg(&s) % 1001) / 500.0f - 1.0f;
    jobs[i] = (df_k_linear_job){x[i], Ms[i], Ks[i], Ks[i], w[i], DF_DT_BF16, Ns[i], NULL, y[i],
                                Ns[i], {NULL}, 0, 0, 0};
    df_k_linear(x[i], Ms[i], Ks[i], Ks[i], w[i], DF_DT_BF16, Ns[i], NULL, r[i], Ns[i]);
  }
  df_k_linear_multi(jobs, NJ);
  for (int i = 0; i < NJ; i++) {
    assert_memory_equal(y[i], r[i], (size_t)(Ms[i] * Ns[i]) * 4);
    free(w[i]);
    free(x[i]);
    free(y[i]);
    free(r[i]);
  }
}

/* The AVX2 multi-row tile (kernels.c fewtile_avx2: blocks of 4 rows x 3 columns over tiles of
 * 12 columns, a short last block repeating its last row) for every batch shape from 2 rows up:
 * bitwise the scalar path's values, each row a one-row product of itself (the decode kernel),
 * 1 to 3 threads the same bytes; BF16, F16 and F32 weights, with and without bias, columns not a
 * multiple of 3 or 12, K with and without a K % 8 tail. Skipped without AVX2. */
static void test_avx2_rows(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX2) skip();
  static const int64_t Ns[] = {1, 11, 12, 13, 40}, Ks[] = {5, 64, 77};
  const df_dtype dts[] = {DF_DT_BF16, DF_DT_F16, DF_DT_F32};
  uint64_t s = 4242;
  df_isa hw = df_k_isa_hw();
  for (int d = 0; d < 3; d++)
    for (int64_t M = 2; M <= 17; M++)
      for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++) {
          int64_t N = Ns[a], K = Ks[b];
          df_dtype dt = dts[d];
          prod p = prod_new(dt, M, N, K, &s);
          void *w = p.w, *bias = p.bias;
          float *x = p.x, *ya = p.ya, *yb = p.yb;
          const void *bb = (M + N) % 2 ? bias : NULL;
          df_k_set_isa(DF_ISA_AVX2);
          df_k_set_threads(2);
          df_k_linear(x, M, K, K, w, dt, N, bb, ya, N);
          df_k_set_isa(DF_ISA_SCALAR);
          df_k_linear(x, M, K, K, w, dt, N, bb, yb, N);
          if (memcmp(ya, yb, (size_t)(M * N) * sizeof(float)))
            fail_msg("dtype %d [%lld x %lld x %lld]: AVX2 rows differ from scalar", (int)dt, (long long)M,
                     (long long)N, (long long)K);
          if (hw >= DF_ISA_AVX512) { /* the 8 x 6 and 4 x 6 blocks in 512-bit registers (M < 16), the
                                      * GEMM above: the same bytes */
            df_k_set_isa(DF_ISA_AVX512);
            df_k_linear(x, M, K, K, w, dt, N, bb, yb, N);
            if (memcmp(ya, yb, (size_t)(M * N) * sizeof(float)))
              fail_msg("dtype %d [%lld x %lld x %lld]: AVX-512 rows differ from AVX2", (int)dt,
                       (long long)M, (long long)N, (long long)K);
          }
          df_k_set_isa(DF_ISA_AVX2);
          for (int64_t m = 0; m < M; m++) { /* a row alone: the decode kernel */
            df_k_linear(x + m * K, 1, K, K, w, dt, N, bb, yb, N);
            assert_memory_equal(ya + m * N, yb, (size_t)N * sizeof(float));
          }
          for (int t = 1; t <= 3; t++) {
            df_k_set_threads(t);
            df_k_linear(x, M, K, K, w, dt, N, bb, yb, N);
            assert_memory_equal(ya, yb, (size_t)(M * N) * sizeof(float));
          }
          prod_free(&p);
        }
  df_k_set_isa(hw);
  df_k_set_threads(0);
}

/* Causal attention in blocks (df_k_attention_gemm: the rows of the heads that share a KV head,
 * stacked, on AVX2 and AVX-512) against each row alone (M = 1 at its position: decode), every
 * lower ISA (the scalar path is the per-row form: a dot and an AXPY per key) and 1-3 threads,
 * bit for bit; and a correct softmax-weighted sum against double
 * precision. Shapes: d 16, 48, 64 and 128 (value columns in 64s and 16s), GQA groups 1, 3 and 8,
 * fresh prefill, chunks after cached positions and single decode rows, rows across several
 * 48-row blocks with remainders of 1-3 after the 4-row P V blocks. Skipped without AVX2. */
static void test_attention(void **state) {
  (void)state;
  df_isa top = df_k_isa_hw();
  if (top < DF_ISA_AVX2) skip();
  struct { int64_t M, pos0, n_head, n_kv, d; } cs[] = {
      {16, 0, 2, 2, 64}, {70, 0, 3, 1, 128}, {53, 13, 4, 2, 64}, {97, 5, 2, 1, 128},
      {30, 100, 2, 2, 64}, {21, 3, 2, 1, 48}, {1, 40, 6, 2, 64}, {5, 9, 8, 1, 16},
      {20, 0, 8, 1, 32}};
  uint64_t s = 777;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t M = cs[c].M, pos0 = cs[c].pos0, nh = cs[c].n_head, nkv = cs[c].n_kv, d = cs[c].d;
    int64_t ctx = pos0 + M + 3;
    float *q = malloc(sizeof(float) * (size_t)(M * nh * d));
    float *kc = malloc(sizeof(float) * (size_t)(nkv * ctx * d));
    float *vc = malloc(sizeof(float) * (size_t)(nkv * ctx * d));
    float *oa = malloc(sizeof(float) * (size_t)(M * nh * d)), *ob = malloc(sizeof(float) * (size_t)(M * nh * d));
    float *scratch = malloc(sizeof(float) * (size_t)(8 * ctx));
    for (int64_t i = 0; i < M * nh * d; i++) q[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 400.0f;
    for (int64_t i = 0; i < nkv * ctx * d; i++) {
      kc[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 700.0f;
      vc[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 300.0f;
    }
    float scale = 1.0f / sqrtf((float)d);
    size_t bytes = sizeof(float) * (size_t)(M * nh * d);
    /* a decoy call before each checked one leaves other scores in the per-thread scratch, so a
     * block that skips computing some would show */
    float *qd = malloc(bytes), *od = malloc(bytes);
    for (int64_t i = 0; i < M * nh * d; i++) qd[i] = -1.5f * q[i];
#define DECOY() df_k_attention(qd, M, pos0, nh, nkv, d, ctx, kc, vc, scale, od, scratch)
    df_k_set_isa(top);
    df_k_set_threads(2);
    DECOY();
    df_k_attention(q, M, pos0, nh, nkv, d, ctx, kc, vc, scale, oa, scratch);
    memset(ob, 0xff, bytes);
    DECOY(); /* the blocked form really runs: called directly, the same bytes */
    assert_true(df_k_attention_gemm(q, M, pos0, nh, nkv, d, ctx, kc, vc, scale, ob));
    assert_memory_equal(oa, ob, bytes);
    DECOY();
    for (int64_t m = 0; m < M; m++) /* each row alone at its position */
      df_k_attention(q + m * nh * d, 1, pos0 + m, nh, nkv, d, ctx, kc, vc, scale, ob + m * nh * d,
                     scratch);
    if (memcmp(oa, ob, bytes)) fail_msg("case %zu: blocked rows differ from rows alone", c);
    for (int isa = DF_ISA_SCALAR; isa < (int)top; isa++) {
      df_k_set_isa((df_isa)isa);
      DECOY();
      df_k_attention(q, M, pos0, nh, nkv, d, ctx, kc, vc, scale, ob, scratch);
      if (memcmp(oa, ob, bytes))
        fail_msg("case %zu: %s attention differs from %s", c, df_k_isa_name(top), df_k_isa_name((df_isa)isa));
    }
    df_k_set_isa(top);
    for (int t = 1; t <= 3; t++) {
      df_k_set_threads(t);
      DECOY();
      df_k_attention(q, M, pos0, nh, nkv, d, ctx, kc, vc, scale, ob, scratch);
      assert_memory_equal(oa, ob, bytes);
    }
    for (int64_t m = 0; m < M; m++) /* a correct attention */
      for (int64_t h = 0; h < nh; h++) {
        const float *qv = q + (m * nh + h) * d;
        int64_t kvh = h / (nh / nkv), n = pos0 + m + 1;
        double *sc = malloc(sizeof(double) * (size_t)n), mx = -1e300, sum = 0;
        for (int64_t t = 0; t < n; t++) {
          double a = 0;
          for (int64_t i = 0; i < d; i++) a += (double)qv[i] * kc[(kvh * ctx + t) * d + i];
          sc[t] = a * scale;
          mx = sc[t] > mx ? sc[t] : mx;
        }
        for (int64_t t = 0; t < n; t++) sum += (sc[t] = exp(sc[t] - mx));
        for (int64_t i = 0; i < d; i++) {
          double r = 0;
          for (int64_t t = 0; t < n; t++) r += sc[t] / sum * vc[(kvh * ctx + t) * d + i];
          if (fabs(oa[(m * nh + h) * d + i] - r) > 1e-4)
            fail_msg("case %zu [%lld, %lld, %lld]: %g, double %g", c, (long long)m, (long long)h,
                     (long long)i, oa[(m * nh + h) * d + i], r);
        }
        free(sc);
      }
#undef DECOY
    free(q), free(kc), free(vc), free(oa), free(ob), free(scratch), free(qd), free(od);
  }
  df_k_set_isa(df_k_isa_hw());
  df_k_set_threads(0);
}

/* MLA attention over many rows (df_k_mla_attention_gemm) against rows alone, every lower ISA and
 * 1-3 threads, bit for bit, and against double precision: latent L 64, 48, 32 and 16, RoPE parts
 * of 8, 4 and 3 floats (a K % 8 tail), a padded RoPE row stride, fresh prefill, a later chunk, a
 * single decode row, and 50 heads (one position's rows across two blocks) in a prefill. */
static void test_mla_attention(void **state) {
  (void)state;
  df_isa top = df_k_isa_hw();
  if (top < DF_ISA_AVX2) skip();
  struct { int64_t M, pos0, nh, L, dr; } cs[] = {
      {40, 0, 3, 64, 8}, {57, 9, 2, 48, 3}, {3, 20, 50, 32, 8}, {1, 37, 7, 16, 4},
      {12, 0, 50, 32, 8}};
  uint64_t s = 31337;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t M = cs[c].M, pos0 = cs[c].pos0, nh = cs[c].nh, L = cs[c].L, dr = cs[c].dr;
    int64_t ctx = pos0 + M + 2, ldr = nh * dr + 5;
    float *ql = malloc(sizeof(float) * (size_t)(M * nh * L)), *qr = malloc(sizeof(float) * (size_t)(M * ldr));
    float *ckv = malloc(sizeof(float) * (size_t)(ctx * L)), *kpe = malloc(sizeof(float) * (size_t)(ctx * dr));
    size_t bytes = sizeof(float) * (size_t)(M * nh * L);
    float *oa = malloc(bytes), *ob = malloc(bytes), *scratch = malloc(sizeof(float) * (size_t)(8 * ctx));
    for (int64_t i = 0; i < M * nh * L; i++) ql[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 500.0f;
    for (int64_t i = 0; i < M * ldr; i++) qr[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 300.0f;
    for (int64_t i = 0; i < ctx * L; i++) ckv[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 600.0f;
    for (int64_t i = 0; i < ctx * dr; i++) kpe[i] = (float)((int64_t)(lcg(&s) % 2001) - 1000) / 250.0f;
    float scale = 0.125f;
    float *qd = malloc(sizeof(float) * (size_t)(M * nh * L)), *od = malloc(bytes); /* decoys */
    for (int64_t i = 0; i < M * nh * L; i++) qd[i] = -1.5f * ql[i];
#define DECOY() df_k_mla_attention(qd, qr, ldr, dr, M, pos0, nh, L, dr, ctx, ckv, kpe, scale, od, scratch)
    df_k_set_isa(top);
    df_k_set_threads(2);
    DECOY();
    df_k_mla_attention(ql, qr, ldr, dr, M, pos0, nh, L, dr, ctx, ckv, kpe, scale, oa, scratch);
    memset(ob, 0xff, bytes);
    DECOY();
    assert_true(df_k_mla_attention_gemm(ql, qr, ldr, dr, M, pos0, nh, L, dr, ckv, kpe, scale, ob));
    assert_memory_equal(oa, ob, bytes);
    DECOY();
    for (int64_t m = 0; m < M; m++)
      df_k_mla_attention(ql + m * nh * L, qr + m * ldr, ldr, dr, 1, pos0 + m, nh, L, dr, ctx, ckv,
                         kpe, scale, ob + m * nh * L, scratch);
    if (memcmp(oa, ob, bytes)) fail_msg("case %zu: blocked MLA rows differ from rows alone", c);
    for (int isa = DF_ISA_SCALAR; isa < (int)top; isa++) {
      df_k_set_isa((df_isa)isa);
      DECOY();
      df_k_mla_attention(ql, qr, ldr, dr, M, pos0, nh, L, dr, ctx, ckv, kpe, scale, ob, scratch);
      if (memcmp(oa, ob, bytes))
        fail_msg("case %zu: %s MLA differs from %s", c, df_k_isa_name(top), df_k_isa_name((df_isa)isa));
    }
    df_k_set_isa(top);
    for (int t = 1; t <= 3; t++) {
      df_k_set_threads(t);
      DECOY();
      df_k_mla_attention(ql, qr, ldr, dr, M, pos0, nh, L, dr, ctx, ckv, kpe, scale, ob, scratch);
      assert_memory_equal(oa, ob, bytes);
    }
    for (int64_t m = 0; m < M; m++)
      for (int64_t h = 0; h < nh; h++) {
        int64_t n = pos0 + m + 1;
        double *sc = malloc(sizeof(double) * (size_t)n), mx = -1e300, sum = 0;
        for (int64_t t = 0; t < n; t++) {
          double a = 0;
          for (int64_t i = 0; i < L; i++) a += (double)ql[(m * nh + h) * L + i] * ckv[t * L + i];
          for (int64_t i = 0; i < dr; i++) a += (double)qr[m * ldr + h * dr + i] * kpe[t * dr + i];
          sc[t] = a * scale;
          mx = sc[t] > mx ? sc[t] : mx;
        }
        for (int64_t t = 0; t < n; t++) sum += (sc[t] = exp(sc[t] - mx));
        for (int64_t i = 0; i < L; i++) {
          double r = 0;
          for (int64_t t = 0; t < n; t++) r += sc[t] / sum * ckv[t * L + i];
          if (fabs(oa[(m * nh + h) * L + i] - r) > 1e-4)
            fail_msg("MLA case %zu [%lld, %lld, %lld]: %g, double %g", c, (long long)m,
                     (long long)h, (long long)i, oa[(m * nh + h) * L + i], r);
        }
        free(sc);
      }
#undef DECOY
    free(ql), free(qr), free(ckv), free(kpe), free(oa), free(ob), free(scratch), free(qd), free(od);
  }
  df_k_set_isa(df_k_isa_hw());
  df_k_set_threads(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_avx2_rows),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_f16),
      cmocka_unit_test(test_f32),
      cmocka_unit_test(test_multi),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_mla_attention),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
