/* tests/test_mxfp4.c — MXFP4 (OCP MX v1.0: E2M1 elements + one E8M0 scale per 32) linear weights
 * as Kimi K3's routed experts store them (compressed-tensors "mxfp4-pack-quantized": U8
 * `weight_packed` [N, K/2], low nibble = even column, U8 `weight_scale` [N, K/32];
 * docs/K3.md §4), de-quantised inside the matmul kernels (engine/kernels/kernels_mxfp4.c).
 *
 * What is checked, all by exact (bitwise) equality, no tolerance:
 *  - decode: all 16 codes x scale bytes {0, 1, 100, 127, 200, 252, 253, 254} against the
 *    formula evaluated independently in double (ldexp) and rounded to fp32 (the value itself
 *    below 2^128; +-inf above), -0.0 kept (signbit);
 *  - the real-weight vector of docs/K3.md §4 (layer 1, expert 0, w1, row 0, columns 0..15,
 *    scale byte 121) from its stored bytes;
 *  - df_k_linear_mxfp4 == df_k_linear over an F32 copy of the de-quantised matrix (decoded here
 *    with the test's own ldexp decoder), for M in {1,2,3,5,8,17}, K in {32, 64, 96, 224, 3584},
 *    N not a multiple of the tile, scale bytes over 0..254 (subnormal weights and products
 *    included), on the scalar and AVX2 paths and 1 and 2 threads; row ranges (n0) and strides;
 *  - df_k_linear_multi mixing BF16 and MXFP4 jobs == the separate calls;
 *  - df_t_linear / df_t_linear_multi / df_t_swiglu_ffn / df_t_swiglu_ffn_groups over MXFP4
 *    handles == the same over F32 handles of the de-quantised weights (and the libtorch
 *    float64 oracle within 1e-5 relative);
 *  - df_bind_linear on a safetensors file written here: the pair bound as one F4 weight of
 *    logical shape [N, K] over the mmap, its scale attached, bytes counted; and its errors
 *    (shape, dtype, a missing half, K % 32, an E8M0 255 byte in a resident weight) name the
 *    tensor; an expert's 255 is found by df_t_mx_scale_check (before its first use).
 * DF_MXFP4_BENCH=1 in the environment also prints a decode-speed figure (no assertion).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/model_config.h"
#include "engine/kernels/kernels.h"
#include "engine/layers/bind.h"
#include "engine/safetensors.h"
#include "engine/tensor/torch_shim.h"

static uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* The test's own decoder: (-1)^sign * T[mag] * 2^(s - 127) in double, rounded to fp32. */
static float ref_decode(unsigned c, unsigned s) {
  static const double T[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  double v = ldexp(T[c & 7], (int)s - 127);
  return (float)((c & 8) ? -v : v);
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Random MXFP4 matrix [N, K]: packed [N, K/2], scales [N, K/32] drawn from [lo, hi] (255
 * excluded); groups with s >= 253 keep magnitudes whose value stays finite. */
static void fill_mx(uint8_t *packed, uint8_t *scale, int64_t N, int64_t K, unsigned lo,
                    unsigned hi, uint32_t *seed) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t g = 0; g < K / 32; g++) {
      unsigned s = lo + lcg(seed) % (hi - lo + 1);
      scale[n * (K / 32) + g] = (uint8_t)s;
      unsigned lim = s == 254 ? 4 : s == 253 ? 6 : 8; /* T[mag] * 2^(s-127) < 2^128 */
      for (int i = 0; i < 16; i++) {
        unsigned a = lcg(seed), b = lcg(seed);
        unsigned c0 = (a & 8) | ((a & 7) % lim), c1 = (b & 8) | ((b & 7) % lim);
        packed[n * (K / 2) + g * 16 + i] = (uint8_t)(c0 | (c1 << 4));
      }
    }
}

/* The de-quantised F32 copy, decoded with ref_decode from the stored bytes. */
static void dequant(const uint8_t *packed, const uint8_t *scale, int64_t N, int64_t K,
                    float *wf) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      uint8_t b = packed[n * (K / 2) + k / 2];
      wf[n * K + k] = ref_decode((k & 1) ? b >> 4 : b & 15u, scale[n * (K / 32) + k / 32]);
    }
}

/* The product in the order kernels.h gives MXFP4 (independent of the kernels' code): 32
 * chains per output, chain c = column within its scale group, each a fused multiply-add
 * chain over the groups in order from +0; then r_l = s_l + s_(l+16), t_l = r_l + r_(l+8),
 * ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7)). wf is the de-quantised [N, K] matrix. */
static void ref_linear32(const float *x, int64_t M, int64_t K, int64_t ldx, const float *wf,
                         int64_t N, float *y, int64_t ldy) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float c[32] = {0}, t[8];
      for (int64_t k = 0; k < K; k++) c[k % 32] = fmaf(x[m * ldx + k], wf[n * K + k], c[k % 32]);
      for (int l = 0; l < 8; l++) t[l] = (c[l] + c[l + 16]) + (c[l + 8] + c[l + 24]);
      y[m * ldy + n] = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
    }
}

/* ---- (a) decode table, (b) the real-weight vector --------------------------------------- */

static void test_decode_table(void **state) {
  (void)state;
  static const uint8_t scales[] = {0, 1, 100, 127, 200, 252, 253, 254};
  uint8_t packed[16], sc[1];
  for (size_t si = 0; si < sizeof scales; si++) {
    sc[0] = scales[si];
    for (int i = 0; i < 16; i++) packed[i] = (uint8_t)((2 * i) | ((2 * i + 1) << 4));
    /* K = 32: column k holds code k % 16 */
    for (int k = 0; k < 32; k++) {
      unsigned c = (unsigned)k % 16;
      float got = df_k_mxfp4_weight(packed, sc, 1, 32, 0, k), want = ref_decode(c, sc[0]);
      if (!same_bits(got, want))
        fail_msg("code %u scale %u: got %a, want %a", c, sc[0], (double)got, (double)want);
      if (c == 8) assert_true(got == 0.0f && signbit(got));
      if (c == 0) assert_true(got == 0.0f && !signbit(got));
    }
  }
  /* exact subnormals: 0.5 * 2^-127 = 2^-128 and 1.5 * 2^-127 */
  packed[0] = 0x31; /* columns 0, 1: codes 1 (0.5), 3 (1.5) */
  sc[0] = 0;
  assert_true(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 0) == 0x1p-128f);
  assert_true(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 1) == 0x3p-128f);
  sc[0] = 1;
  assert_true(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 0) == 0x1p-127f);
  /* the largest finite and the first overflowing magnitudes */
  packed[0] = 0x73; /* 1.5, 6 */
  sc[0] = 254;
  assert_true(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 0) == 0x1.8p127f);
  assert_true(isinf(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 1)));
  /* the scan */
  uint8_t s[100] = {0};
  assert_int_equal(df_k_mxfp4_find_nan_scale(s, 100), -1);
  s[77] = 255;
  s[90] = 255;
  assert_int_equal(df_k_mxfp4_find_nan_scale(s, 100), 77);
  assert_int_equal(df_k_mxfp4_find_nan_scale(s, 77), -1);
  assert_int_equal(df_k_mxfp4_find_nan_scale(s, 0), -1);
}

static void test_real_vector(void **state) {
  (void)state;
  /* docs/K3.md §4: layer 1, expert 0, w1, row 0, columns 0..15 (scale byte 121 = 2^-6) */
  static const float want[16] = {0.0625f,     0.0078125f,  -0.0078125f, -0.0234375f,
                                 -0.0625f,    -0.03125f,   0.0234375f,  0.015625f,
                                 0.046875f,   -0.0f,       -0.0234375f, -0.015625f,
                                 -0.0234375f, -0.0078125f, 0.015625f,   -0.015625f};
  /* the stored bytes: byte i = code(2i) | code(2i+1) << 4 (codes 6 1 9 11 14 12 3 2 5 8 11 10
   * 11 9 2 10); the rest of the 32-column group zero */
  uint8_t packed[16] = {0x16, 0xB9, 0xCE, 0x23, 0x85, 0xAB, 0x9B, 0xA2}, sc[1] = {121};
  for (int k = 0; k < 16; k++) {
    float got = df_k_mxfp4_weight(packed, sc, 1, 32, 0, k);
    if (!same_bits(got, want[k])) fail_msg("column %d: got %a, want %a", k, (double)got, (double)want[k]);
  }
  assert_true(signbit(df_k_mxfp4_weight(packed, sc, 1, 32, 0, 9)));
  /* the same through the kernel: x = e_k picks column k (y = 0 + ... exact) */
  float x[16 * 32] = {0}, y[16];
  for (int k = 0; k < 16; k++) x[k * 32 + k] = 1.0f;
  for (int isa = 0; isa <= (int)df_k_isa_hw(); isa++) {
    df_k_set_isa((df_isa)isa);
    df_k_linear_mxfp4(x, 16, 32, 32, packed, sc, 1, 0, 1, y, 1);
    for (int k = 0; k < 16; k++) assert_true(y[k] == want[k]);
  }
  df_k_set_isa(df_k_isa_hw());
}

/* ---- (c) linear == the 32-chain product over the de-quantised matrix, bit for bit ------- */

static void check_linear(int64_t M, int64_t K, int64_t N, unsigned lo, unsigned hi, float xmag,
                         uint32_t seed) {
  uint8_t *pk = malloc((size_t)(N * K / 2)), *sc = malloc((size_t)(N * K / 32));
  float *wf = malloc((size_t)(N * K) * sizeof(float));
  int64_t ldx = K + 3, ldy = N + 5;
  float *x = malloc((size_t)(M * ldx) * sizeof(float));
  float *y = malloc((size_t)(M * ldy) * sizeof(float)), *r = malloc((size_t)(M * ldy) * sizeof(float));
  float *first = malloc((size_t)(M * ldy) * sizeof(float));
  assert_true(pk && sc && wf && x && y && r && first);
  fill_mx(pk, sc, N, K, lo, hi, &seed);
  dequant(pk, sc, N, K, wf);
  for (int64_t i = 0; i < M * ldx; i++)
    x[i] = ((float)(lcg(&seed) % 2001) / 1000.0f - 1.0f) * xmag;
  bool have_first = false;
  for (int isa = 0; isa <= (int)df_k_isa_hw(); isa++) {
    df_k_set_isa((df_isa)isa);
    for (int th = 1; th <= 2; th++) {
      df_k_set_threads(th);
      memset(y, 0, (size_t)(M * ldy) * sizeof(float));
      memset(r, 0, (size_t)(M * ldy) * sizeof(float));
      df_k_linear_mxfp4(x, M, K, ldx, pk, sc, K / 32, 0, N, y, ldy);
      ref_linear32(x, M, K, ldx, wf, N, r, ldy);
      for (int64_t m = 0; m < M; m++)
        if (memcmp(y + m * ldy, r + m * ldy, (size_t)N * sizeof(float)))
          fail_msg("%s, %d threads, M %lld K %lld N %lld scales %u..%u: row %lld differs from "
                   "the 32-chain product over the de-quantised matrix",
                   df_k_isa_name(df_k_isa()), th, (long long)M, (long long)K, (long long)N, lo,
                   hi, (long long)m);
      if (!have_first) {
        memcpy(first, y, (size_t)(M * ldy) * sizeof(float));
        have_first = true;
      } else {
        for (int64_t m = 0; m < M; m++)
          assert_memory_equal(first + m * ldy, y + m * ldy, (size_t)N * sizeof(float));
      }
      /* a row range n0.. of the matrix equals those columns of the whole */
      int64_t n0 = N / 3, nn = N - n0 > 6 ? 6 : N - n0;
      float sub[17 * 6];
      df_k_linear_mxfp4(x, M, K, ldx, pk, sc, K / 32, n0, nn, sub, nn);
      for (int64_t m = 0; m < M; m++)
        assert_memory_equal(sub + m * nn, y + m * ldy + n0, (size_t)nn * sizeof(float));
    }
  }
  df_k_set_isa(df_k_isa_hw());
  df_k_set_threads(0);
  free(pk), free(sc), free(wf), free(x), free(y), free(r), free(first);
}

static void test_linear_bitwise(void **state) {
  (void)state;
  static const int64_t Ms[] = {1, 2, 3, 5, 8, 17}, Ks[] = {32, 64, 96, 224, 3584};
  static const int64_t Ns[] = {1, 7, 13};
  uint32_t seed = 1;
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
      for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
        int64_t M = Ms[mi], K = Ks[ki], N = Ns[ni];
        /* ordinary weights (K3's scales sit near 2^-6), subnormal weights and products,
         * and the full 0..254 range under small activations (no overflow) */
        check_linear(M, K, N, 110, 135, 1.0f, seed++);
        check_linear(M, K, N, 0, 12, 1.0f, seed++);
        check_linear(M, K, N, 0, 254, 0x1p-40f, seed++);
      }
  check_linear(3, 3584, 37, 100, 140, 1.0f, seed++); /* N = 9 tiles + 1 */
}

/* ---- (d) df_k_linear_multi with BF16 and MXFP4 jobs -------------------------------------- */

static void test_multi_mixed(void **state) {
  (void)state;
  enum { NJ = 5 };
  static const int64_t Ms[NJ] = {1, 3, 5, 2, 8}, Ns[NJ] = {13, 40, 7, 21, 9},
                       Ks[NJ] = {64, 224, 96, 48, 32};
  static const bool mx[NJ] = {true, true, false, false, true};
  uint32_t s = 7;
  void *w[NJ];
  uint8_t *sc[NJ];
  float *x[NJ], *y[NJ], *ref[NJ];
  df_k_linear_job jobs[NJ];
  for (int i = 0; i < NJ; i++) {
    int64_t M = Ms[i], N = Ns[i], K = Ks[i];
    x[i] = malloc((size_t)(M * K) * sizeof(float));
    y[i] = malloc((size_t)(M * N) * sizeof(float));
    ref[i] = malloc((size_t)(M * N) * sizeof(float));
    for (int64_t k = 0; k < M * K; k++) x[i][k] = (float)(lcg(&s) % 2001) / 1000.0f - 1.0f;
    if (mx[i]) {
      w[i] = malloc((size_t)(N * K / 2));
      sc[i] = malloc((size_t)(N * K / 32));
      fill_mx(w[i], sc[i], N, K, 100, 140, &s);
      jobs[i] = (df_k_linear_job){x[i], M, K, K, w[i], DF_DT_F4, N, NULL, y[i], N, {NULL}, K / 32,
                                  0, 0};
      jobs[i].mx_scale = sc[i];
    } else {
      uint16_t *wb = malloc((size_t)(N * K) * 2);
      for (int64_t k = 0; k < N * K; k++) wb[k] = (uint16_t)(0x3c00 + lcg(&s) % 0x600);
      w[i] = wb;
      sc[i] = NULL;
      jobs[i] = (df_k_linear_job){x[i], M, K, K, wb, DF_DT_BF16, N, NULL, y[i], N, {NULL}, 0, 0, 0};
    }
  }
  for (int isa = 0; isa <= (int)df_k_isa_hw(); isa++) {
    df_k_set_isa((df_isa)isa);
    for (int th = 1; th <= 2; th++) {
      df_k_set_threads(th);
      for (int i = 0; i < NJ; i++) {
        if (mx[i])
          df_k_linear_mxfp4(x[i], Ms[i], Ks[i], Ks[i], w[i], sc[i], Ks[i] / 32, 0, Ns[i], ref[i],
                            Ns[i]);
        else
          df_k_linear(x[i], Ms[i], Ks[i], Ks[i], w[i], DF_DT_BF16, Ns[i], NULL, ref[i], Ns[i]);
      }
      df_k_linear_multi(jobs, NJ);
      for (int i = 0; i < NJ; i++)
        if (memcmp(y[i], ref[i], (size_t)(Ms[i] * Ns[i]) * sizeof(float)))
          fail_msg("%s, %d threads: job %d (%s) differs from its own call",
                   df_k_isa_name(df_k_isa()), th, i, mx[i] ? "MXFP4" : "BF16");
    }
  }
  df_k_set_isa(df_k_isa_hw());
  df_k_set_threads(0);
  for (int i = 0; i < NJ; i++) free(w[i]), free(sc[i]), free(x[i]), free(y[i]), free(ref[i]);
}

/* ---- (e) the tensor layer: linear, linear_multi, SwiGLU FFN (single and grouped) ---------- */

typedef struct {
  uint8_t *pk, *sc;
  float *wf;
  df_t_tensor *mx, *mxs, *f32; /* MXFP4 handle (+ its scale handle) and the F32 copy's */
} mx_weight;

static void mx_weight_new(mx_weight *w, int64_t N, int64_t K, uint32_t *seed) {
  char err[256];
  w->pk = malloc((size_t)(N * K / 2));
  w->sc = malloc((size_t)(N * K / 32));
  w->wf = malloc((size_t)(N * K) * sizeof(float));
  fill_mx(w->pk, w->sc, N, K, 118, 127, seed);
  dequant(w->pk, w->sc, N, K, w->wf);
  int64_t ls[2] = {N, K}, ss[2] = {N, K / 32};
  w->mx = df_t_wrap(w->pk, DF_DT_F4, 2, ls, err, sizeof err);
  w->mxs = df_t_wrap(w->sc, DF_DT_U8, 2, ss, err, sizeof err);
  w->f32 = df_t_wrap(w->wf, DF_DT_F32, 2, ls, err, sizeof err);
  assert_true(w->mx && w->mxs && w->f32);
  assert_int_equal(df_t_set_mx_scale(w->mx, w->mxs, err, sizeof err), 0);
}

static void mx_weight_free(mx_weight *w) {
  df_t_destroy(&w->mx), df_t_destroy(&w->mxs), df_t_destroy(&w->f32);
  free(w->pk), free(w->sc), free(w->wf);
}

static df_t_tensor *f32_new(int64_t r, int64_t c) {
  char err[256];
  int64_t s[2] = {r, c};
  df_t_tensor *t = df_t_new_f32(2, s, err, sizeof err);
  assert_non_null(t);
  return t;
}

static void test_tensor_ops(void **state) {
  (void)state;
  char err[256];
  uint32_t seed = 11;
  enum { H = 96, I = 64, E = 3, R = 7 };
  /* the handle: logical shape, packed bytes, scale, stored bytes */
  mx_weight lw;
  mx_weight_new(&lw, 40, H, &seed);
  assert_int_equal(df_t_dtype(lw.mx), DF_DT_F4);
  assert_int_equal(df_t_ndim(lw.mx), 2);
  assert_int_equal(df_t_size(lw.mx, 0), 40);
  assert_int_equal(df_t_size(lw.mx, 1), H);
  assert_int_equal(df_t_numel(lw.mx), 40 * H);
  assert_ptr_equal(df_t_data(lw.mx), lw.pk);
  int64_t bn = 0, bk = 0;
  assert_ptr_equal(df_t_block_scale(lw.mx, &bn, &bk), lw.mxs);
  assert_int_equal(bn, 1);
  assert_int_equal(bk, 32);
  assert_int_equal(df_t_stored_bytes(lw.mx), 40 * H / 2 + 40 * H / 32);
  assert_int_equal(df_t_stored_bytes(lw.f32), 40 * H * 4);
  df_k_weight kw = df_t_kweight(lw.mx);
  assert_true(kw.dt == DF_DT_F4 && kw.K == H && kw.mx_scale == lw.sc && kw.scale_ld == H / 32);
  /* wrap / scale errors */
  int64_t odd[2] = {4, 7}, three[3] = {2, 2, 2}, bad[2] = {40, H / 32 + 1};
  assert_null(df_t_wrap(lw.pk, DF_DT_F4, 2, odd, err, sizeof err));
  assert_non_null(strstr(err, "F4 (MXFP4)"));
  assert_null(df_t_wrap(lw.pk, DF_DT_F4, 3, three, err, sizeof err));
  df_t_tensor *sbad = df_t_wrap(lw.sc, DF_DT_U8, 2, bad, err, sizeof err);
  assert_int_equal(df_t_set_mx_scale(lw.mx, sbad, err, sizeof err), -1);
  assert_non_null(strstr(err, "must be U8 [40, 3] for a [40, 96] MXFP4 weight"));
  assert_int_equal(df_t_set_mx_scale(lw.f32, lw.mxs, err, sizeof err), -1);
  int64_t k48[2] = {4, 48};
  df_t_tensor *w48 = df_t_wrap(lw.pk, DF_DT_F4, 2, k48, err, sizeof err);
  assert_int_equal(df_t_set_mx_scale(w48, lw.mxs, err, sizeof err), -1);
  assert_non_null(strstr(err, "multiple of 32"));
  df_t_destroy(&sbad), df_t_destroy(&w48);

  /* linear and linear_multi over MXFP4 handles: the 32-chain product of the de-quantised
   * values (F32 handles of the same values run df_k_linear's 8-lane order: close, not equal) */
  df_t_tensor *x = f32_new(R, H), *y1 = f32_new(R, 40), *y2 = f32_new(R, 40);
  for (int64_t i = 0; i < R * H; i++) df_t_f32(x)[i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
  float want[R * 40];
  ref_linear32(df_t_f32(x), R, H, H, lw.wf, 40, want, 40);
  df_t_linear(x, 2, 4, lw.mx, NULL, y1);
  assert_memory_equal(df_t_f32(y1) + 2 * 40, want + 2 * 40, 4 * 40 * sizeof(float));
  float ref[R * 40];
  assert_int_equal(df_t_ref_linear(x, R, lw.mx, NULL, ref, err, sizeof err), 0);
  df_t_linear(x, 0, R, lw.mx, NULL, y1);
  for (int i = 0; i < R * 40; i++)
    assert_float_equal(df_t_f32(y1)[i], ref[i], 1e-5 * (fabs(ref[i]) + 1));
  df_t_linear_op ops[2] = {{x, 0, R, lw.mx, NULL, y1}, {x, 0, R, lw.f32, NULL, y2}};
  df_t_linear_multi(ops, 2);
  assert_memory_equal(df_t_f32(y1), want, R * 40 * sizeof(float));
  float f32ref[R * 40];
  df_k_linear(df_t_f32(x), R, H, H, lw.wf, DF_DT_F32, 40, NULL, f32ref, 40);
  assert_memory_equal(df_t_f32(y2), f32ref, R * 40 * sizeof(float));
  for (int i = 0; i < R * 40; i++) /* the two orders of one sum */
    assert_float_equal(want[i], f32ref[i], 1e-5 * (fabs(f32ref[i]) + 1));

  /* SwiGLU experts: E experts, rows split 3 / 0 / 4 */
  mx_weight gw[E], uw[E], dw[E];
  const df_t_tensor *gm[E], *um[E], *dm[E], *gf[E], *uf[E], *df[E];
  for (int e = 0; e < E; e++) {
    mx_weight_new(&gw[e], I, H, &seed);
    mx_weight_new(&uw[e], I, H, &seed);
    mx_weight_new(&dw[e], H, I, &seed);
    gm[e] = gw[e].mx, um[e] = uw[e].mx, dm[e] = dw[e].mx;
    gf[e] = gw[e].f32, uf[e] = uw[e].f32, df[e] = dw[e].f32;
  }
  int64_t off[E + 1] = {0, 3, 3, R};
  df_t_tensor *g = f32_new(R, I), *u = f32_new(R, I), *ym = f32_new(R, H), *yf = f32_new(R, H);
  df_t_tensor *ys = f32_new(R, H);
  float first[R * H];
  for (int isa = 0; isa <= (int)df_k_isa_hw(); isa++) {
    df_k_set_isa((df_isa)isa);
    df_t_swiglu_ffn_groups(x, E, off, gm, um, dm, g, u, ym);
    if (isa == 0) /* every ISA: the same bits */
      memcpy(first, df_t_f32(ym), sizeof first);
    else
      assert_memory_equal(df_t_f32(ym), first, sizeof first);
    df_t_swiglu_ffn_groups(x, E, off, gf, uf, df, g, u, yf); /* the F32 values: close */
    for (int i = 0; i < R * H; i++)
      assert_float_equal(df_t_f32(ym)[i], df_t_f32(yf)[i], 1e-5 * (fabs(df_t_f32(yf)[i]) + 1));
    for (int e = 0; e < E; e++)
      if (off[e + 1] > off[e]) /* one expert alone over its rows */
        df_t_swiglu_ffn(x, off[e], off[e + 1] - off[e], gm[e], um[e], dm[e], g, u, ys);
    assert_memory_equal(df_t_f32(ym), df_t_f32(ys), R * H * sizeof(float));
  }
  df_k_set_isa(df_k_isa_hw());
  for (int e = 0; e < E; e++) mx_weight_free(&gw[e]), mx_weight_free(&uw[e]), mx_weight_free(&dw[e]);
  df_t_tensor *all[] = {x, y1, y2, g, u, ym, yf, ys};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) df_t_destroy(&all[i]);
  mx_weight_free(&lw);
}

/* ---- (f) binding from a safetensors file ------------------------------------------------- */

typedef struct {
  const char *name, *dtype;
  int64_t r, c;
  const uint8_t *data; /* r * c bytes (1-byte dtypes only here) */
} st_entry;

static void write_st(const char *path, const st_entry *t, int n) {
  char hdr[4096];
  size_t o = 0, off = 0;
  o += (size_t)snprintf(hdr, sizeof hdr, "{");
  for (int i = 0; i < n; i++) {
    size_t nb = (size_t)(t[i].r * t[i].c);
    o += (size_t)snprintf(hdr + o, sizeof hdr - o,
                          "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                          i ? "," : "", t[i].name, t[i].dtype, (long long)t[i].r,
                          (long long)t[i].c, off, off + nb);
    off += nb;
  }
  hdr[o++] = '}';
  while (o % 8) hdr[o++] = ' ';
  assert_true(o < sizeof hdr);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)o >> (8 * i));
  assert_int_equal(fwrite(len, 1, 8, f), 8);
  assert_int_equal(fwrite(hdr, 1, o, f), o);
  for (int i = 0; i < n; i++)
    assert_int_equal(fwrite(t[i].data, 1, (size_t)(t[i].r * t[i].c), f), (size_t)(t[i].r * t[i].c));
  assert_int_equal(fclose(f), 0);
}

static void test_bind(void **state) {
  (void)state;
  enum { N = 8, K = 64 };
  char dir[] = "/tmp/df_mxfp4_XXXXXX", path[256], err[512];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  uint32_t seed = 5;
  uint8_t pk[N * K / 2], sc[N * K / 32], nan_sc[N * K / 32], wide[N * 33];
  fill_mx(pk, sc, N, K, 110, 130, &seed);
  memcpy(nan_sc, sc, sizeof sc);
  nan_sc[5 * (K / 32) + 1] = 255; /* row 5, group 1 */
  memset(wide, 0, sizeof wide);
  const st_entry t[] = {
      {"m.experts.0.w1.weight_packed", "U8", N, K / 2, pk},
      {"m.experts.0.w1.weight_scale", "U8", N, K / 32, sc},
      {"shape.weight_packed", "U8", N, 33, wide},
      {"shape.weight_scale", "U8", N, K / 32, sc},
      {"dtype.weight_packed", "U8", N, K / 2, pk},
      {"dtype.weight_scale", "I8", N, K / 32, sc},
      {"nan.weight_packed", "U8", N, K / 2, pk},
      {"nan.weight_scale", "U8", N, K / 32, nan_sc},
      {"lonely.weight_packed", "U8", N, K / 2, pk},
      {"k48.weight_packed", "U8", N, 24, pk},
      {"k48.weight_scale", "U8", N, 1, sc},
  };
  write_st(path, t, (int)(sizeof t / sizeof t[0]));
  df_st_model *st = NULL;
  assert_int_equal(df_st_open(dir, &st, err, sizeof err), 0);
  df_model_config cfg;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.model_type, sizeof cfg.model_type, "kimi_linear");
  cfg.quant = DF_QUANT_MXFP4;
  df_binder b = {.dir = dir, .st = st, .cfg = &cfg};

  const df_t_tensor *w = df_bind_linear(&b, "m.experts.0.w1.weight", N, K, true, err, sizeof err);
  if (!w) fail_msg("bind: %s", err);
  assert_int_equal(df_t_dtype(w), DF_DT_F4);
  assert_int_equal(df_t_size(w, 0), N);
  assert_int_equal(df_t_size(w, 1), K);
  assert_ptr_equal(df_t_data(w), df_st_find(st, "m.experts.0.w1.weight_packed")->data);
  int64_t bn, bk;
  const df_t_tensor *s = df_t_block_scale(w, &bn, &bk);
  assert_non_null(s);
  assert_ptr_equal(df_t_data(s), df_st_find(st, "m.experts.0.w1.weight_scale")->data);
  assert_int_equal(df_t_dtype(s), DF_DT_U8);
  assert_true(bn == 1 && bk == 32);
  assert_int_equal(b.experts, N * K / 2 + N * K / 32);
  assert_int_equal(b.resident, 0);
  assert_int_equal(df_t_stored_bytes(w), N * K / 2 + N * K / 32);
  /* the bound weight computes as its de-quantised values */
  float wf[N * K], x[2 * K], y[2 * N], r[2 * N];
  dequant(pk, sc, N, K, wf);
  for (int i = 0; i < 2 * K; i++) x[i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
  df_k_weight kw = df_t_kweight(w);
  df_k_linear_w(x, 2, K, &kw, 0, N, y, N);
  ref_linear32(x, 2, K, K, wf, N, r, N);
  assert_memory_equal(y, r, sizeof y);
  /* as a resident weight its bytes count there */
  assert_non_null(df_bind_linear(&b, "m.experts.0.w1.weight", N, K, false, err, sizeof err));
  assert_int_equal(b.resident, N * K / 2 + N * K / 32);

  struct {
    const char *name;
    int64_t k;
    const char *want;
  } bad[] = {
      {"shape.weight", K, "tensor 'shape.weight_packed' is U8 [8, 33] but config.json implies U8 [8, 32]"},
      {"dtype.weight", K, "tensor 'dtype.weight_scale' is I8 [8, 2] but config.json implies U8 [8, 2]"},
      {"lonely.weight", K, "missing tensor 'lonely.weight_scale'"},
      {"k48.weight", 48, "tensor 'k48.weight_packed' is MXFP4 but config.json implies a [8, 48] weight"},
      {"m.experts.0.w1.weight", 96, "tensor 'm.experts.0.w1.weight_packed' is U8 [8, 32] but "
                                    "config.json implies U8 [8, 48]"},
      {"absent.weight", K, "missing tensor 'absent.weight'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    assert_null(df_bind_linear(&b, bad[i].name, N, bad[i].k, true, err, sizeof err));
    if (!strstr(err, bad[i].want) || !strstr(err, dir))
      fail_msg("%s: error '%s' lacks '%s' or the folder", bad[i].name, err, bad[i].want);
  }
  /* the NaN byte: a resident weight is refused at bind; a routed expert binds and is refused
   * before its first use (the scan of ~85 GB of Kimi K3 expert scales is not paid at load) */
  assert_null(df_bind_linear(&b, "nan.weight", N, K, false, err, sizeof err));
  if (!strstr(err, "tensor 'nan.weight_scale' holds E8M0 255 (NaN) at row 5, group 1") ||
      !strstr(err, dir))
    fail_msg("NaN scale: error '%s'", err);
  const df_t_tensor *wn = df_bind_linear(&b, "nan.weight", N, K, true, err, sizeof err);
  assert_non_null(wn);
  int64_t row = -1, group = -1;
  assert_int_equal(df_t_mx_scale_check(wn, &row, &group), -1);
  assert_true(row == 5 && group == 1);
  assert_int_equal(df_t_mx_scale_check(w, &row, &group), 0);
  df_binder_free(&b);
  df_st_close(&st);
  unlink(path);
  rmdir(dir);
}

/* ---- decode speed (DF_MXFP4_BENCH=1; printed, never asserted) ------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_bench(void **state) {
  (void)state;
  const char *e = getenv("DF_MXFP4_BENCH");
  if (!e || strcmp(e, "1")) skip();
  /* K3's w1/w3 shape; 16 experts' worth of distinct matrices so the bytes come from memory */
  enum { N = 3072, K = 3584, NM = 16, REPS = 20 };
  size_t pb = (size_t)N * K / 2, sb = (size_t)N * K / 32;
  uint8_t *pk = malloc(pb * NM), *sc = malloc(sb * NM), *dst = malloc(pb * NM);
  float *x = malloc(8 * K * sizeof(float)), *y = malloc(8 * N * sizeof(float));
  uint32_t seed = 3;
  for (int m = 0; m < NM; m++) fill_mx(pk + m * pb, sc + m * sb, N, K, 110, 130, &seed);
  memcpy(dst, pk, pb * NM);
  for (int i = 0; i < 8 * K; i++) x[i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
  for (int run = 0; run < 2 * ((int)df_k_isa_hw() - DF_ISA_AVX2 + 1); run++) { /* ISA x threads */
    int th = 1 + run % 2;
    df_k_set_isa((df_isa)(DF_ISA_AVX2 + run / 2));
    df_k_set_threads(th);
    static const int Mset[] = {1, 4, 8};
    for (size_t mi = 0; mi < 3; mi++) {
      int M = Mset[mi];
      double t0 = now_s();
      for (int r = 0; r < REPS; r++)
        for (int m = 0; m < NM; m++)
          df_k_linear_mxfp4(x, M, K, K, pk + m * pb, sc + m * sb, K / 32, 0, N, y, N);
      double dt = now_s() - t0;
      double gb = (double)(pb + sb) * NM * REPS / dt / 1e9;
      printf("mxfp4 %s, %d thread%s, M=%d N=%d K=%d: %.2f GB/s of packed+scale bytes "
             "(%.3f ms per matrix)\n", df_k_isa_name(df_k_isa()), th, th > 1 ? "s" : "", M, N, K,
             gb, dt / (NM * REPS) * 1e3);
    }
  }
  /* the same matrices' values as BF16 through df_k_linear, M = 1 (4x the bytes) */
  df_k_set_threads(1);
  uint16_t *wb = malloc((size_t)N * K * 2 * 4);
  for (size_t i = 0; i < (size_t)N * K * 4; i++) wb[i] = (uint16_t)(0x3c00 + lcg(&seed) % 0x600);
  double tb = now_s();
  for (int r = 0; r < REPS; r++)
    for (int m = 0; m < 4; m++) df_k_linear(x, 1, K, K, wb + (size_t)m * N * K, DF_DT_BF16, N, NULL, y, N);
  tb = now_s() - tb;
  printf("bf16 df_k_linear, 1 thread, M=1 N=%d K=%d: %.2f GB/s of bf16 bytes (%.3f ms per "
         "matrix)\n", N, K, (double)N * K * 2 * 4 * REPS / tb / 1e9, tb / (4 * REPS) * 1e3);
  free(wb);
  df_k_set_threads(0);
  double t0 = now_s();
  for (int r = 0; r < REPS; r++) memcpy(dst, pk, pb * NM);
  double dt = now_s() - t0;
  printf("memcpy (1 thread): %.2f GB/s read (%.2f GB/s read+write)\n",
         (double)pb * NM * REPS / dt / 1e9, 2.0 * (double)pb * NM * REPS / dt / 1e9);
  /* plain reading: a sum of the same bytes as 64-bit words, 1 and 2 threads */
  uint64_t sum = 0;
  int64_t nw = (int64_t)(pb * NM / 8);
  for (int th = 1; th <= 2; th++) {
    t0 = now_s();
    for (int r = 0; r < REPS; r++) {
      uint64_t part = 0;
#pragma omp parallel for reduction(+ : part) num_threads(th) schedule(static)
      for (int64_t i = 0; i < nw; i++) {
        uint64_t v;
        memcpy(&v, pk + 8 * i, 8);
        part += v;
      }
      sum += part;
    }
    dt = now_s() - t0;
    printf("read-only sum (%d thread%s): %.2f GB/s\n", th, th > 1 ? "s" : "",
           (double)pb * NM * REPS / dt / 1e9);
  }
  volatile float sink = y[0] + (float)dst[7] + (float)sum;
  (void)sink;
  free(pk), free(sc), free(dst), free(x), free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_table), cmocka_unit_test(test_real_vector),
      cmocka_unit_test(test_linear_bitwise), cmocka_unit_test(test_multi_mixed),
      cmocka_unit_test(test_tensor_ops), cmocka_unit_test(test_bind),
      cmocka_unit_test(test_bench),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
