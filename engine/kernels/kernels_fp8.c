/* engine/kernels/kernels_fp8.c — linear over FP8 E4M3 weights with block scales; see kernels.h.
 *
 * Owns: the de-quantisation of F8_E4M3 weights inside the matmul (DeepSeek-V3 / Kimi K2
 * checkpoints: `weight` F8_E4M3 [N, K] + `weight_scale_inv` F32 [ceil(N/bn), ceil(K/bk)]),
 * in an AVX2+F16C path and a scalar path that agree bit for bit. No widened copy of a weight
 * exists: each weight is decoded into a register, multiplied by its block's scale (one fp32
 * rounding: the exact product e4m3(b) * s rounded to nearest) and fed to the same fused
 * multiply-add lane order as df_k_linear (eight lanes k = l mod 8, lane tree
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the K % 8 tail in ascending k).
 *
 * Decoding: E4M3FN byte S.EEEE.MMM placed at bits 15 and 13..7 of an IEEE half gives the half
 * S.0EEEE.MMM0000000 whose value is the E4M3 value times 2^-8 for normal and subnormal codes
 * alike (both formats' subnormals scale by the same power of two). The half widens exactly
 * (F16C or the scalar widening) and the 2^8 is folded into the scale (s * 256, exact), so
 * w = half(b) * (256 s) is the exact product e4m3(b) * s rounded once. The NaN codes 0x7F/0xFF
 * decode as +-480 on both paths (quantisers saturate at +-448; published weights hold no NaN).
 */
#include "engine/kernels/kernels.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DF_HAVE_X86 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#else
#define DF_HAVE_X86 0
#endif

#define INLINE static inline __attribute__((always_inline))

#define FP8_MR 3 /* rows of an AVX2 tile */
#define FP8_NR 4 /* weight rows (output columns) of a tile */

static inline float half_bits_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {
      int e = -1;
      do {
        man <<= 1;
        e++;
      } while (!(man & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13); /* exp < 31: bit 14 is always 0 */
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t e4m3_half_bits(uint8_t b) {
  return (uint16_t)(((uint16_t)(b & 0x80) << 8) | ((uint16_t)(b & 0x7f) << 7));
}

float df_k_fp8_e4m3_to_f32(uint8_t b) { return half_bits_to_f32(e4m3_half_bits(b)) * 256.0f; }

float df_k_fp8_weight(const uint8_t *w, const float *scale, int64_t scale_ld, int64_t bn,
                      int64_t bk, int64_t K, int64_t n, int64_t k) {
  float s256 = scale[(n / bn) * scale_ld + k / bk] * 256.0f;
  return half_bits_to_f32(e4m3_half_bits(w[n * K + k])) * s256;
}

/* ---- scalar ------------------------------------------------------------------------- */

/* One output: row n of W against x, the df_k_linear lane order. */
static float dot_row_scalar(const float *x, const uint8_t *wr, const float *srow, int64_t bk,
                            int64_t K) {
  float acc[8] = {0};
  int64_t K8 = K & ~(int64_t)7, k;
  for (k = 0; k < K8; k += 8)
    for (int l = 0; l < 8; l++) {
      float w = half_bits_to_f32(e4m3_half_bits(wr[k + l])) * (srow[(k + l) / bk] * 256.0f);
      acc[l] = fmaf(x[k + l], w, acc[l]);
    }
  float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
  float s = (a0 + a2) + (a1 + a3);
  for (; k < K; k++)
    s = fmaf(x[k], half_bits_to_f32(e4m3_half_bits(wr[k])) * (srow[k / bk] * 256.0f), s);
  return s;
}

/* ---- AVX2 --------------------------------------------------------------------------- */
#if DF_HAVE_X86
INLINE AVX2_FN __m256 fp8x8(const uint8_t *p) {
  __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
  __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
  __m128i mag = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7);
  return _mm256_cvtph_ps(_mm_or_si128(sign, mag));
}

/* Scales of the eight weights k .. k+7 of a row (times 256). */
INLINE AVX2_FN __m256 scale8(const float *srow, int64_t bk, int64_t k) {
  if (k / bk == (k + 7) / bk) return _mm256_set1_ps(srow[k / bk] * 256.0f);
  float s[8];
  for (int l = 0; l < 8; l++) s[l] = srow[(k + l) / bk] * 256.0f;
  return _mm256_loadu_ps(s);
}

INLINE AVX2_FN float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}


/* Tile of mr rows x nr weight rows; weights decoded once per k-chunk and reused over rows. */
static AVX2_FN void tile_avx2(int mr, int nr, const float *x, int64_t ldx, const uint8_t *const *wr,
                              const float *const *srow, int64_t bk, int64_t K, float *y,
                              int64_t ldy) {
  __m256 acc[FP8_MR][FP8_NR];
  for (int i = 0; i < FP8_MR; i++)
    for (int j = 0; j < FP8_NR; j++) acc[i][j] = _mm256_setzero_ps();
  int64_t K8 = K & ~(int64_t)7, k;
  for (k = 0; k < K8; k += 8) {
    if ((k & 63) == 0) /* the next tile's rows (FP8_NR further), as kernels.c's micro-kernels */
      for (int j = 0; j < nr; j++) _mm_prefetch((const char *)wr[j] + FP8_NR * K + k, _MM_HINT_T1);
    for (int j = 0; j < nr; j++) {
      __m256 wv = _mm256_mul_ps(fp8x8(wr[j] + k), scale8(srow[j], bk, k));
      for (int i = 0; i < mr; i++)
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + k), wv, acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float s = reduce8(acc[i][j]);
      for (int64_t t = K8; t < K; t++)
        s = fmaf(x[i * ldx + t],
                 half_bits_to_f32(e4m3_half_bits(wr[j][t])) * (srow[j][t / bk] * 256.0f), s);
      y[i * ldy + j] = s;
    }
}
#endif

void df_k_linear_fp8_cols(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w,
                          const float *scale, int64_t scale_ld, int64_t bn, int64_t bk,
                          int64_t n0, int nr, float *y, int64_t ldy) {
  assert(nr >= 1 && nr <= FP8_NR);
#if DF_HAVE_X86
  if (df_k_isa() >= DF_ISA_AVX2) {
    const uint8_t *wr[FP8_NR];
    const float *sr[FP8_NR];
    for (int j = 0; j < nr; j++) {
      int64_t n = n0 + j;
      wr[j] = w + n * K;
      sr[j] = scale + (n / bn) * scale_ld;
    }
    for (int64_t m0 = 0; m0 < M; m0 += FP8_MR) {
      int mr = (int)(M - m0 < FP8_MR ? M - m0 : FP8_MR);
      tile_avx2(mr, nr, x + m0 * ldx, ldx, wr, sr, bk, K, y + m0 * ldy, ldy);
    }
    return;
  }
#endif
  for (int j = 0; j < nr; j++) {
    int64_t n = n0 + j;
    const uint8_t *wr = w + n * K;
    const float *sr = scale + (n / bn) * scale_ld;
    for (int64_t m = 0; m < M; m++) y[m * ldy + j] = dot_row_scalar(x + m * ldx, wr, sr, bk, K);
  }
}

void df_k_linear_fp8(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w,
                     const float *scale, int64_t scale_ld, int64_t bn, int64_t bk, int64_t n0,
                     int64_t N, float *y, int64_t ldy) {
  assert(M >= 0 && K > 0 && N > 0 && n0 >= 0 && ldx >= K && ldy >= N && bn > 0 && bk > 0);
  assert(scale_ld == (K + bk - 1) / bk);
  if (M == 0) return;
  bool par = M * N * K >= 65536;
  int64_t n_tiles = (N + FP8_NR - 1) / FP8_NR;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t t = 0; t < n_tiles; t++) {
    int64_t j0 = t * FP8_NR;
    int nr = (int)(N - j0 < FP8_NR ? N - j0 : FP8_NR);
    df_k_linear_fp8_cols(x, M, K, ldx, w, scale, scale_ld, bn, bk, n0 + j0, nr, y + j0, ldy);
  }
}
