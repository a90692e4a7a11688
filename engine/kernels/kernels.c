/* engine/kernels/kernels.c — batch-invariant CPU kernels; see kernels.h for the reduction order.
 *
 * Owns: AVX2+FMA and scalar implementations of linear, RMSNorm, RoPE, router
 * softmax/top-k, SwiGLU and small vector ops. The scalar path reproduces the AVX2 path bit
 * for bit (same lane structure, fmaf). The ISA and thread count come from dispatch.c.
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

#include "engine/kernels/kernels_simd.h"

/* ---- scalar helpers ------------------------------------------------------------------ */

float df_k_to_f32(const void *p, df_dtype dt, int64_t i) { return k_to_f32(p, dt, i); }


/* ---- dot ----------------------------------------------------------------------------- */

static float dot_scalar(const float *a, const float *b, int64_t n) {
  float acc[8] = {0};
  int64_t n8 = n & ~(int64_t)7, k;
  for (k = 0; k < n8; k += 8)
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[k + l], b[k + l], acc[l]);
  float s = lanes_reduce(acc);
  for (; k < n; k++) s = fmaf(a[k], b[k], s);
  return s;
}

#if DF_HAVE_X86
static AVX2_FN float dot_avx2(const float *a, const float *b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t n8 = n & ~(int64_t)7, k;
  for (k = 0; k < n8; k += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  float s = avx2_reduce(acc);
  for (; k < n; k++) s = fmaf(a[k], b[k], s);
  return s;
}
#endif

float df_k_dot(const float *a, const float *b, int64_t n) {
#if DF_HAVE_X86
  if (df_k_isa() >= DF_ISA_AVX2) return dot_avx2(a, b, n);
#endif
  return dot_scalar(a, b, n);
}

/* ---- linear -------------------------------------------------------------------------- */

#define MR_MAX 3
#define NR 4
#define FEW_NR 12 /* columns of a multi-row AVX2 tile (fewtile_avx2): four 4 x 3 blocks */

/* One MR x NR tile: y[i, j] for i < mr, j < nr. w points at the tile's first weight row. */
INLINE void tile_scalar(df_dtype dt, int mr, int nr, const float *x, int64_t ldx, const void *w,
                        int64_t K, const void *bias, int64_t n0, float *y, int64_t ldy) {
  for (int i = 0; i < mr; i++) {
    for (int j = 0; j < nr; j++) {
      const float *xr = x + i * ldx;
      int64_t wo = (int64_t)j * K;
      float acc[8] = {0};
      int64_t K8 = K & ~(int64_t)7, k;
      for (k = 0; k < K8; k += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(xr[k + l], df_k_to_f32(w, dt, wo + k + l), acc[l]);
      float s = lanes_reduce(acc);
      for (; k < K; k++) s = fmaf(xr[k], df_k_to_f32(w, dt, wo + k), s);
      if (bias) s += df_k_to_f32(bias, dt, n0 + j);
      y[i * ldy + j] = s;
    }
  }
}

#if DF_HAVE_X86
/* Register-blocked AVX2 microkernels with explicit accumulators (so they stay in registers):
 * 1 row x 8 columns for decode (eight weight streams in flight) and 4 rows x 3 columns for
 * batches (below). Missing rows/columns of an edge tile point at a valid row/column and their
 * results are discarded, so every element is computed by the same instruction sequence.
 * While a tile runs, the same bytes of the next tile's rows (8 or 12 rows further, the next
 * columns of y) are prefetched into L2, one line per row every 64 bytes of weights: the
 * hardware prefetcher follows the tile's own rows but not the jump to the next tile, and the
 * second set of streams doubles the DRAM reads in flight (decode of a 2.3 GB bf16 lm_head
 * went from ~40 to ~57 GB/s on 2 threads; the arithmetic, hence every bit, is unchanged). A
 * prefetch past the matrix's end is harmless: a hint never faults. */
#define LANE_TAIL(acc, xr, wr, dt)                                                             \
  ({                                                                                           \
    float s_ = avx2_reduce(acc);                                                               \
    for (int64_t t_ = K8; t_ < K; t_++) s_ = fmaf((xr)[t_], df_k_to_f32(wr, dt, t_), s_);      \
    s_;                                                                                        \
  })

#define DEF_MICRO(sfx, DT)                                                                     \
  static AVX2_FN void k1x8_##sfx(const float *x, const void *const *w, int64_t K, float *o,   \
                                 const char *pfb, size_t pfs) {                                \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,     \
           a7 = a0;                                                                            \
    int64_t K8 = K & ~(int64_t)7;                                                              \
    for (int64_t k = 0; k < K8; k += 8) {                                                      \
      __m256 xv = _mm256_loadu_ps(x + k);                                                      \
      if ((k & (PF_STEP_##sfx - 1)) == 0)                                                      \
        for (int j_ = 0; j_ < 8; j_++)                                                         \
          _mm_prefetch(pfb + (size_t)j_ * pfs + (size_t)k * sizeof(DT_T_##sfx), _MM_HINT_T1);  \
      a0 = _mm256_fmadd_ps(xv, avx2_ld(w[0], DT, k), a0);                                      \
      a1 = _mm256_fmadd_ps(xv, avx2_ld(w[1], DT, k), a1);                                      \
      a2 = _mm256_fmadd_ps(xv, avx2_ld(w[2], DT, k), a2);                                      \
      a3 = _mm256_fmadd_ps(xv, avx2_ld(w[3], DT, k), a3);                                      \
      a4 = _mm256_fmadd_ps(xv, avx2_ld(w[4], DT, k), a4);                                      \
      a5 = _mm256_fmadd_ps(xv, avx2_ld(w[5], DT, k), a5);                                      \
      a6 = _mm256_fmadd_ps(xv, avx2_ld(w[6], DT, k), a6);                                      \
      a7 = _mm256_fmadd_ps(xv, avx2_ld(w[7], DT, k), a7);                                      \
    }                                                                                          \
    o[0] = LANE_TAIL(a0, x, w[0], DT);                                                         \
    o[1] = LANE_TAIL(a1, x, w[1], DT);                                                         \
    o[2] = LANE_TAIL(a2, x, w[2], DT);                                                         \
    o[3] = LANE_TAIL(a3, x, w[3], DT);                                                         \
    o[4] = LANE_TAIL(a4, x, w[4], DT);                                                         \
    o[5] = LANE_TAIL(a5, x, w[5], DT);                                                         \
    o[6] = LANE_TAIL(a6, x, w[6], DT);                                                         \
    o[7] = LANE_TAIL(a7, x, w[7], DT);                                                         \
  }

/* element type and elements per 64-byte line of each weight dtype (prefetch stride) */
typedef uint16_t DT_T_bf16;
typedef uint16_t DT_T_f16;
typedef float DT_T_f32;
enum { PF_STEP_bf16 = 32, PF_STEP_f16 = 32, PF_STEP_f32 = 16 };
DEF_MICRO(bf16, DF_DT_BF16)
DEF_MICRO(f16, DF_DT_F16)
DEF_MICRO(f32, DF_DT_F32)

/* Multi-row blocks: 4 rows x 3 columns, 12 accumulators (one output each, the lane order of
 * every kernel here), the three widened weight vectors and one activation vector in the 16
 * registers: per 8 k, 12 fused multiply-adds for 3 widening loads and 4 loads. Widening is
 * what costs on AVX2 (two vector operations per 8 weights), so every batch shape runs in
 * blocks of 4 rows (a short last block repeats its last row; results discarded): on a 2-core
 * Zen 3 a 16 MB product ran at ~150 GFLOP/s for 8 to 128 rows (0.75 of the fp32 FMA peak;
 * the earlier 3 x 4 tile: 70-100), and 2 to 4 rows cost one row's memory time. `pf` > 0:
 * while the block runs, the same bytes `pf` further on of each of its weight rows are
 * prefetched into L2 (the next column tile); 0: none (a tile's later row blocks, whose
 * weights are cached). Written with arrays the compiler unrolls into registers: spelled out
 * with twelve named accumulators, GCC spilled one of them, and the loop ran at half speed on
 * that accumulator's store/load chain. */
#define DEF_4X3(sfx, DT)                                                                       \
  static AVX2_FN void k4x3_##sfx(const float *const *x, const void *const *w, int64_t K,       \
                                 float *o /* [4][3] */, size_t pf) {                           \
    __m256 a[4][3];                                                                            \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                        \
      _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++) a[i][j] = _mm256_setzero_ps();       \
    int64_t K8 = K & ~(int64_t)7;                                                              \
    for (int64_t k = 0; k < K8; k += 8) {                                                      \
      if (pf && (k & (PF_STEP_##sfx - 1)) == 0)                                                \
        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                                    \
          _mm_prefetch((const char *)w[j] + pf + (size_t)k * sizeof(DT_T_##sfx), _MM_HINT_T1); \
      __m256 wv[3];                                                                            \
      _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++) wv[j] = avx2_ld(w[j], DT, k);        \
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                    \
        __m256 xv = _mm256_loadu_ps(x[i] + k);                                                 \
        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                                    \
          a[i][j] = _mm256_fmadd_ps(xv, wv[j], a[i][j]);                                       \
      }                                                                                        \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                        \
      _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                                      \
        o[i * 3 + j] = LANE_TAIL(a[i][j], x[i], w[j], DT);                                     \
  }
DEF_4X3(bf16, DF_DT_BF16)
DEF_4X3(f16, DF_DT_F16)
DEF_4X3(f32, DF_DT_F32)

/* The same blocks with 512-bit registers: R rows (4 or 8) x 6 columns, R x 3 accumulators
 * each holding two columns' 8-lane accumulators (column 2p in the low half, 2p + 1 in the
 * high half), so every output's lanes see exactly the fused multiply-adds of the 4 x 3
 * kernel in the same order and its reduction (LANE_TAIL on each half) is the same: bitwise
 * the AVX2 outputs with half the FMA instructions and one broadcast x row per 6 columns. A
 * pair of weight rows is widened in one 512-bit operation (avx512_ld2: the two rows' 8
 * elements side by side, then one zero-extension or conversion for all 16). 8 rows keep 24
 * accumulators, the 3 weight vectors and one x row in the 32 registers and widen each weight
 * once for 8 rows: on the Zen 5 machine an 8-row product ran at 0.72 of one core's FMA peak
 * against 0.55 for two 4-row blocks with 256-bit widening. AVX-512F only (the 16-bit
 * zero-extension and the half conversion of 512-bit registers are AVX-512F). */
#define AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f")))
INLINE AVX512_FN __m512 avx512_ld2(const void *b0, const void *b1, df_dtype dt, int64_t i) {
  if (dt == DF_DT_F32)
    return _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castpd256_pd512(_mm256_loadu_pd((const double *)((const float *)b0 + i))),
        _mm256_loadu_pd((const double *)((const float *)b1 + i)), 1));
  __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((const uint16_t *)b0 + i))),
      _mm_loadu_si128((const __m128i *)((const uint16_t *)b1 + i)), 1);
  if (dt == DF_DT_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* o[i * 6 + j] = LANE_TAIL of row i, column j for an R x 6 block's accumulators a (R x 3,
 * column 2p in the low half of a[i][p], 2p + 1 in the high half: output n = i * 6 + j in half
 * n % 2 of a[n / 2]): avx512_reduce16 per 16 outputs, then the K % 8 tail of each. */
INLINE AVX512_FN void rx6_reduce(const int R, const __m512 *a, const float *const *x,
                                 const void *const *w, int64_t K, int64_t K8, df_dtype dt,
                                 float *o) {
  for (int g = 0; g + 8 <= R * 3; g += 8) avx512_reduce16(a + g, o + 2 * g);
  const int rem = R * 3 % 8, g0 = R * 3 - rem;
  if (rem) { /* R = 2 or 4: the last 6 or 4 registers, padded */
    __m512 z[8];
    float t[16];
    for (int k = 0; k < 8; k++) z[k] = k < rem ? a[g0 + k] : _mm512_setzero_ps();
    avx512_reduce16(z, t);
    memcpy(o + 2 * g0, t, 2 * (size_t)rem * sizeof(float));
  }
  if (K8 < K)
    for (int n = 0; n < R * 6; n++)
      for (int64_t t = K8; t < K; t++)
        o[n] = fmaf(x[n / 6][t], df_k_to_f32(w[n % 6], dt, t), o[n]);
}
#define DEF_RX6(R, sfx, DT)                                                                    \
  static AVX512_FN void k##R##x6_##sfx(const float *const *x, const void *const *w, int64_t K, \
                                       float *o /* [R][6] */, size_t pf) {                     \
    __m512 a[R][3];                                                                            \
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)                                        \
      _Pragma("GCC unroll 3") for (int p = 0; p < 3; p++) a[i][p] = _mm512_setzero_ps();       \
    int64_t K8 = K & ~(int64_t)7;                                                              \
    for (int64_t k = 0; k < K8; k += 8) {                                                      \
      if (pf && (k & (PF_STEP_##sfx - 1)) == 0)                                                \
        _Pragma("GCC unroll 6") for (int j = 0; j < 6; j++)                                    \
          _mm_prefetch((const char *)w[j] + pf + (size_t)k * sizeof(DT_T_##sfx), _MM_HINT_T1); \
      __m512 wv[3];                                                                            \
      _Pragma("GCC unroll 3") for (int p = 0; p < 3; p++)                                      \
        wv[p] = avx512_ld2(w[2 * p], w[2 * p + 1], DT, k);                                     \
      _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                    \
        __m512 xv = _mm512_castpd_ps(                                                          \
            _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x[i] + k))));              \
        _Pragma("GCC unroll 3") for (int p = 0; p < 3; p++)                                    \
          a[i][p] = _mm512_fmadd_ps(xv, wv[p], a[i][p]);                                       \
      }                                                                                        \
    }                                                                                          \
    rx6_reduce(R, &a[0][0], x, w, K, K8, DT, o);                                               \
  }
DEF_RX6(2, bf16, DF_DT_BF16)
DEF_RX6(2, f16, DF_DT_F16)
DEF_RX6(2, f32, DF_DT_F32)
DEF_RX6(4, bf16, DF_DT_BF16)
DEF_RX6(4, f16, DF_DT_F16)
DEF_RX6(4, f32, DF_DT_F32)
DEF_RX6(8, bf16, DF_DT_BF16)
DEF_RX6(8, f16, DF_DT_F16)
DEF_RX6(8, f32, DF_DT_F32)

typedef void (*k1x8_fn)(const float *, const void *const *, int64_t, float *, const char *,
                        size_t);

/* Set by multi_for while the calling thread runs the last tile of a job and its next tile is
 * the first of another one-row job: that job's first weight row and row stride, for the 1 x 8
 * kernel to prefetch instead of the bytes past its matrix's end (a hint: no result changes).
 * NULL otherwise. */
static _Thread_local const char *t_next_rows;
static _Thread_local size_t t_next_stride;
typedef void (*k4x3_fn)(const float *const *, const void *const *, int64_t, float *, size_t);

/* Columns [n0, n0 + nr) of y for M >= 2 rows, nr <= FEW_NR: blocks of 4 rows, the 4 x 3
 * kernel four times across the tile (AVX-512: blocks of 8 rows while more than 4 are left,
 * then 4, or 2 when at most 2 are left, the 8 x 6 / 4 x 6 / 2 x 6 kernels twice across it);
 * the weights stream from memory in the first block (with the next tile's prefetch) and later
 * blocks read them from the cache. */
static void fewtile_avx2(df_dtype dt, const float *x, int64_t M, int64_t K, int64_t ldx,
                         const void *w, int64_t n0, int nr, const void *bias, float *y,
                         int64_t ldy) {
  size_t esz = df_dtype_size(dt);
  const void *wr[FEW_NR]; /* missing columns repeat the last: computed, discarded */
  for (int j = 0; j < FEW_NR; j++)
    wr[j] = (const char *)w + (size_t)(n0 + (j < nr ? j : nr - 1)) * (size_t)K * esz;
  size_t pf = (size_t)FEW_NR * (size_t)K * esz; /* the next tile's rows */
  /* 4 x 3 blocks, or with 512-bit registers 8 x 6, 4 x 6 and 2 x 6 (the same bits) */
  bool wide = df_k_isa() >= DF_ISA_AVX512;
  int nc = wide ? 6 : 3;
  k4x3_fn f4 = wide ? (dt == DF_DT_BF16 ? k4x6_bf16 : dt == DF_DT_F16 ? k4x6_f16 : k4x6_f32)
                    : (dt == DF_DT_BF16 ? k4x3_bf16 : dt == DF_DT_F16 ? k4x3_f16 : k4x3_f32);
  k4x3_fn f8 = dt == DF_DT_BF16 ? k8x6_bf16 : dt == DF_DT_F16 ? k8x6_f16 : k8x6_f32;
  k4x3_fn f2 = dt == DF_DT_BF16 ? k2x6_bf16 : dt == DF_DT_F16 ? k2x6_f16 : k2x6_f32;
  float o[48];
  for (int64_t m0 = 0; m0 < M;) {
    /* more than 4 rows left: a block of 8, 1 or 2 left: a block of 2 (512-bit only; missing
     * rows repeat the last) */
    int rb = wide && M - m0 > 4 ? 8 : wide && M - m0 <= 2 ? 2 : 4;
    int mr = (int)(M - m0 < rb ? M - m0 : rb);
    const float *xr[8]; /* missing rows repeat the last, likewise */
    for (int i = 0; i < rb; i++) xr[i] = x + (m0 + (i < mr ? i : mr - 1)) * ldx;
    for (int c0 = 0; c0 < nr; c0 += nc) {
      (rb == 8 ? f8 : rb == 2 ? f2 : f4)(xr, wr + c0, K, o, m0 ? 0 : pf);
      for (int i = 0; i < mr; i++)
        for (int j = c0; j < nr && j < c0 + nc; j++)
          y[(m0 + i) * ldy + n0 + j] =
              bias ? o[i * nc + j - c0] + df_k_to_f32(bias, dt, n0 + j) : o[i * nc + j - c0];
    }
    m0 += mr;
  }
}

/* Columns [n0, n0 + nr) of y for M rows: one row through the 1 x 8 kernel (nr <= 8), more
 * through fewtile_avx2 (nr <= FEW_NR). */
static void coltile_avx2(df_dtype dt, const float *x, int64_t M, int64_t K, int64_t ldx,
                         const void *w, int64_t n0, int nr, const void *bias, float *y,
                         int64_t ldy) {
  if (M > 1) {
    fewtile_avx2(dt, x, M, K, ldx, w, n0, nr, bias, y, ldy);
    return;
  }
  size_t esz = df_dtype_size(dt);
  const void *wr[8];
  for (int j = 0; j < 8; j++)
    wr[j] = (const char *)w + (size_t)(n0 + (j < nr ? j : nr - 1)) * (size_t)K * esz;
  float o[8];
  k1x8_fn f = dt == DF_DT_BF16 ? k1x8_bf16 : dt == DF_DT_F16 ? k1x8_f16 : k1x8_f32;
  /* the next tile's rows: the next 8 rows of this matrix, or the next job's first rows */
  const char *pfb = (const char *)wr[0] + (size_t)8 * (size_t)K * esz;
  size_t pfs = (size_t)K * esz;
  if (t_next_rows) pfb = t_next_rows, pfs = t_next_stride;
  f(x, wr, K, o, pfb, pfs);
  for (int j = 0; j < nr; j++) y[n0 + j] = bias ? o[j] + df_k_to_f32(bias, dt, n0 + j) : o[j];
}
#endif

/* Expands a tile function for every (mr, nr) so each call site has constant bounds. */
#define TILE_SWITCH(fn, dt, mr, nr, ...)                                                       \
  switch ((mr) * 8 + (nr)) {                                                                 \
  case 1 * 8 + 1: fn(dt, 1, 1, __VA_ARGS__); break;                                          \
  case 1 * 8 + 2: fn(dt, 1, 2, __VA_ARGS__); break;                                          \
  case 1 * 8 + 3: fn(dt, 1, 3, __VA_ARGS__); break;                                          \
  case 1 * 8 + 4: fn(dt, 1, 4, __VA_ARGS__); break;                                          \
  case 2 * 8 + 1: fn(dt, 2, 1, __VA_ARGS__); break;                                          \
  case 2 * 8 + 2: fn(dt, 2, 2, __VA_ARGS__); break;                                          \
  case 2 * 8 + 3: fn(dt, 2, 3, __VA_ARGS__); break;                                          \
  case 2 * 8 + 4: fn(dt, 2, 4, __VA_ARGS__); break;                                          \
  case 3 * 8 + 1: fn(dt, 3, 1, __VA_ARGS__); break;                                          \
  case 3 * 8 + 2: fn(dt, 3, 2, __VA_ARGS__); break;                                          \
  case 3 * 8 + 3: fn(dt, 3, 3, __VA_ARGS__); break;                                          \
  case 3 * 8 + 4: fn(dt, 3, 4, __VA_ARGS__); break;                                          \
  default: assert(!"tile shape"); }

/* Column tile of NR outputs for all M rows: weights of the tile stay in L1 across rows. */
#define DEF_COLTILE(name, tilefn, attr, dtc)                                                  \
  static attr void name(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,    \
                        int64_t n0, int nr, const void *bias, float *y, int64_t ldy) {       \
    const void *wt = (const char *)w + (size_t)n0 * (size_t)K * df_dtype_size(dtc);          \
    for (int64_t m0 = 0; m0 < M; m0 += MR_MAX) {                                             \
      int mr = (int)(M - m0 < MR_MAX ? M - m0 : MR_MAX);                                     \
      TILE_SWITCH(tilefn, dtc, mr, nr, x + m0 * ldx, ldx, wt, K, bias, n0, y + m0 * ldy + n0, \
                  ldy)                                                                       \
    }                                                                                        \
  }

DEF_COLTILE(coltile_scalar_bf16, tile_scalar, , DF_DT_BF16)
DEF_COLTILE(coltile_scalar_f16, tile_scalar, , DF_DT_F16)
DEF_COLTILE(coltile_scalar_f32, tile_scalar, , DF_DT_F32)

typedef void (*coltile_fn)(const float *, int64_t, int64_t, int64_t, const void *, int64_t, int,
                           const void *, float *, int64_t);

/* Column tile `t` of a job: on AVX2, tiles of 8 columns for one row (decode), else FEW_NR;
 * the scalar path and FP8 and MXFP4 jobs 4 (df_k_linear_fp8_cols, df_k_linear_mxfp4_cols). */
/* Prefill-sized products of BF16 / F16 / F32 weights go to the GEMM tiles (AVX2 or AVX-512). */
static bool job_gemm(const df_k_linear_job *j) {
  return j->M >= DF_K_GEMM_MIN_ROWS && df_k_isa() >= DF_ISA_AVX512 &&
         (j->wdt == DF_DT_BF16 || j->wdt == DF_DT_F16 || j->wdt == DF_DT_F32);
}

static int64_t job_tiles(const df_k_linear_job *j) {
  if (job_gemm(j)) return (j->N + DF_K_GEMM_NR - 1) / DF_K_GEMM_NR;
  bool quant = j->wdt == DF_DT_F8_E4M3 || j->wdt == DF_DT_F4;
  int nr_max = df_k_isa() >= DF_ISA_AVX2 && !quant ? (j->M == 1 ? 8 : FEW_NR) : 4;
  return j->M > 0 ? (j->N + nr_max - 1) / nr_max : 0;
}

static void job_tile(const df_k_linear_job *j, int64_t t) {
  if (job_gemm(j)) {
    int64_t n0 = t * DF_K_GEMM_NR;
    int nr = (int)(j->N - n0 < DF_K_GEMM_NR ? j->N - n0 : DF_K_GEMM_NR);
    if (df_k_linear_gemm_cols(j->wdt, j->x, j->M, j->K, j->ldx, j->w, n0, nr, j->bias, j->y,
                              j->ldy))
      return;
#if DF_HAVE_X86
    /* the same values through the AVX2 multi-row tile (DF_K_GEMM_NR <= FEW_NR columns) */
    coltile_avx2(j->wdt, j->x, j->M, j->K, j->ldx, j->w, n0, nr, j->bias, j->y, j->ldy);
#endif
    return;
  }
  if (j->wdt == DF_DT_F8_E4M3) {
    int64_t n0 = t * 4;
    int nr = (int)(j->N - n0 < 4 ? j->N - n0 : 4);
    df_k_linear_fp8_cols(j->x, j->M, j->K, j->ldx, j->w, j->scale, j->scale_ld, j->bn, j->bk,
                         n0, nr, j->y + n0, j->ldy);
    return;
  }
  if (j->wdt == DF_DT_F4) {
    int64_t n0 = t * 4;
    int nr = (int)(j->N - n0 < 4 ? j->N - n0 : 4);
    df_k_linear_mxfp4_cols(j->x, j->M, j->K, j->ldx, j->w, j->mx_scale, j->scale_ld, n0, nr,
                           j->y + n0, j->ldy);
    return;
  }
#if DF_HAVE_X86
  if (df_k_isa() >= DF_ISA_AVX2) {
    int nr_max = j->M == 1 ? 8 : FEW_NR;
    int64_t n0 = t * nr_max;
    int nr = (int)(j->N - n0 < nr_max ? j->N - n0 : nr_max);
    coltile_avx2(j->wdt, j->x, j->M, j->K, j->ldx, j->w, n0, nr, j->bias, j->y, j->ldy);
    return;
  }
#endif
  coltile_fn fn = j->wdt == DF_DT_BF16 ? coltile_scalar_bf16
                  : j->wdt == DF_DT_F16 ? coltile_scalar_f16 : coltile_scalar_f32;
  int64_t n0 = t * NR;
  int nr = (int)(j->N - n0 < NR ? j->N - n0 : NR);
  fn(j->x, j->M, j->K, j->ldx, j->w, n0, nr, j->bias, j->y, j->ldy);
}

#define MULTI_MAX 256

/* first[0..n_jobs]: each job's first tile in the jobs' joint tile numbering; returns the
 * multiply-adds of all jobs (checking each job's arguments). */
static int64_t multi_plan(const df_k_linear_job *jobs, int n_jobs, int64_t *first) {
  int64_t work = 0;
  first[0] = 0;
  for (int i = 0; i < n_jobs; i++) {
    const df_k_linear_job *j = &jobs[i];
    assert(j->M >= 0 && j->K > 0 && j->N > 0 && j->ldx >= j->K && j->ldy >= j->N);
    assert(j->wdt == DF_DT_BF16 || j->wdt == DF_DT_F16 || j->wdt == DF_DT_F32 ||
           (j->wdt == DF_DT_F8_E4M3 && j->scale && !j->bias && j->bn > 0 && j->bk > 0 &&
            j->scale_ld == (j->K + j->bk - 1) / j->bk) ||
           (j->wdt == DF_DT_F4 && j->mx_scale && !j->bias && j->K % 32 == 0 &&
            j->scale_ld >= j->K / 32));
    first[i + 1] = first[i] + job_tiles(j);
    work += j->M * j->N * j->K;
  }
  return work;
}

/* The tiles of a multi_plan'd set shared out among the threads of the enclosing parallel
 * region (a work-sharing loop with its barrier at the end; serial outside a region). */
static void multi_for(const df_k_linear_job *jobs, int n_jobs, const int64_t *first) {
  int64_t total = first[n_jobs];
  int job = 0;
#pragma omp for schedule(static)
  for (int64_t t = 0; t < total; t++) {
    while (t >= first[job + 1]) job++;
    while (t < first[job]) job--;
    const df_k_linear_job *nx = t + 1 == first[job + 1] && job + 1 < n_jobs ? &jobs[job + 1] : NULL;
    t_next_rows = nx && nx->M == 1 && (nx->wdt == DF_DT_BF16 || nx->wdt == DF_DT_F16 ||
                                       nx->wdt == DF_DT_F32) ? (const char *)nx->w : NULL;
    t_next_stride = nx ? (size_t)nx->K * df_dtype_size(nx->wdt) : 0;
    job_tile(&jobs[job], t - first[job]);
  }
  t_next_rows = NULL;
}

void df_k_linear_serial(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,
                        df_dtype wdt, int64_t N, float *y, int64_t ldy) {
  assert(wdt == DF_DT_BF16 || wdt == DF_DT_F16 || wdt == DF_DT_F32);
  df_k_linear_job j = {x, M, K, ldx, w, wdt, N, NULL, y, ldy, {NULL}, 0, 0, 0};
  int64_t first[2];
  multi_plan(&j, 1, first);
  for (int64_t t = 0; t < first[1]; t++) job_tile(&j, t);
}

void df_k_linear_multi(const df_k_linear_job *jobs, int n_jobs) {
  assert(n_jobs >= 0 && n_jobs <= MULTI_MAX);
  int64_t first[MULTI_MAX + 1];
  /* Threads only pay off above a few hundred kFLOP; results do not depend on it. */
  bool par = multi_plan(jobs, n_jobs, first) >= 65536;
#pragma omp parallel if (par) num_threads(df_k_max_threads())
  multi_for(jobs, n_jobs, first);
}

void df_k_glu_ffn_multi(const df_k_linear_job *gate_up, int n_gu, const df_k_glu_span *spans,
                        int n_spans, const df_k_act *act, const df_k_linear_job *down,
                        int n_down) {
  assert(n_gu >= 0 && n_gu <= MULTI_MAX && n_down >= 0 && n_down <= MULTI_MAX);
  assert(n_spans >= 0 && n_spans <= MULTI_MAX);
  enum { CHUNK = 512 }; /* as df_k_glu_act_rows */
  int64_t first_gu[MULTI_MAX + 1], first_dn[MULTI_MAX + 1], first_sp[MULTI_MAX + 1];
  int64_t work = multi_plan(gate_up, n_gu, first_gu) + multi_plan(down, n_down, first_dn);
  first_sp[0] = 0;
  for (int i = 0; i < n_spans; i++)
    first_sp[i + 1] = first_sp[i] + spans[i].rows * ((spans[i].n + CHUNK - 1) / CHUNK);
  bool par = work >= 65536;
#pragma omp parallel if (par) num_threads(df_k_max_threads())
  {
    multi_for(gate_up, n_gu, first_gu);
    int sp = 0;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < first_sp[n_spans]; c++) {
      while (c >= first_sp[sp + 1]) sp++;
      while (c < first_sp[sp]) sp--;
      const df_k_glu_span *s = &spans[sp];
      int64_t per_row = (s->n + CHUNK - 1) / CHUNK, k = c - first_sp[sp];
      int64_t r = k / per_row, i0 = (k % per_row) * CHUNK;
      int64_t len = s->n - i0 < CHUNK ? s->n - i0 : CHUNK;
      df_k_glu_act(s->g + r * s->ld + i0, s->u + r * s->ld + i0, len, act);
    }
    multi_for(down, n_down, first_dn);
  }
}

void df_k_linear(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,
                 df_dtype wdt, int64_t N, const void *bias, float *y, int64_t ldy) {
  /* FP8 and MXFP4 need their scales: df_k_linear_fp8, df_k_linear_mxfp4 */
  assert(wdt != DF_DT_F8_E4M3 && wdt != DF_DT_F4);
  df_k_linear_job j = {x, M, K, ldx, w, wdt, N, bias, y, ldy, {NULL}, 0, 0, 0};
  df_k_linear_multi(&j, 1);
}

/* ---- RMSNorm, RoPE ------------------------------------------------------------------- */

void df_k_rmsnorm(const float *x, int64_t R, int64_t D, const void *w, df_dtype wdt, float eps,
                  float *y) {
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + r * D;
    float *yr = y + r * D;
    float ss = df_k_dot(xr, xr, D);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    if (wdt == DF_DT_BF16) { /* the same products, in a loop the compiler vectorises */
      const uint16_t *wb = w;
      for (int64_t i = 0; i < D; i++) yr[i] = bf16_to_f32(wb[i]) * (xr[i] * inv);
    } else if (wdt == DF_DT_F32) {
      const float *wf = w;
      for (int64_t i = 0; i < D; i++) yr[i] = wf[i] * (xr[i] * inv);
    } else {
      for (int64_t i = 0; i < D; i++) yr[i] = k_to_f32(w, wdt, i) * (xr[i] * inv);
    }
  }
}

void df_k_rope(float *x, int64_t M, int64_t n_heads, int64_t d, const int64_t *pos,
               const float *cos_t, const float *sin_t) {
  int64_t h2 = d / 2;
  for (int64_t m = 0; m < M; m++) {
    const float *c = cos_t + pos[m] * h2, *s = sin_t + pos[m] * h2;
    for (int64_t h = 0; h < n_heads; h++) {
      float *v = x + (m * n_heads + h) * d;
      for (int64_t i = 0; i < h2; i++) {
        float a = v[i], b = v[i + h2];
        float p0 = a * c[i], p1 = b * s[i], p2 = b * c[i], p3 = a * s[i];
        v[i] = p0 - p1;
        v[i + h2] = p2 + p3;
      }
    }
  }
}

/* ---- router, SwiGLU, small ops ------------------------------------------------------- */

void df_k_router_softmax_topk(const float *logits, int64_t R, int64_t E, int64_t k, bool norm,
                              int32_t *idx, float *wts) {
  assert(k >= 1 && k <= E && E <= 65536);
  for (int64_t r = 0; r < R; r++) {
    const float *l = logits + r * E;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += expf(l[e] - mx);
    int32_t *ir = idx + r * k;
    float *wr = wts + r * k;
    /* Selection by repeated max: E and k are small (<= a few hundred, <= 16). */
    for (int64_t j = 0; j < k; j++) {
      int32_t best = -1;
      for (int64_t e = 0; e < E; e++) {
        bool taken = false;
        for (int64_t t = 0; t < j; t++) taken |= ir[t] == (int32_t)e;
        if (taken) continue;
        if (best < 0 || l[e] > l[best]) best = (int32_t)e;
      }
      ir[j] = best;
      wr[j] = expf(l[best] - mx) / sum;
    }
    if (norm) {
      float s = 0.0f;
      for (int64_t j = 0; j < k; j++) s += wr[j];
      for (int64_t j = 0; j < k; j++) wr[j] /= s;
    }
  }
}

void df_k_silu_mul(float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float a = g[i];
    g[i] = (a / (1.0f + expf(-a))) * u[i];
  }
}

void df_k_glu_act(float *g, const float *u, int64_t n, const df_k_act *act) {
  if (!act || act->kind == DF_K_ACT_SILU) {
    df_k_silu_mul(g, u, n);
    return;
  }
  float b = act->beta, bl = act->beta_lin;
  for (int64_t i = 0; i < n; i++) {
    float x = g[i];
    float a = (b * tanhf(x / b)) * (1.0f / (1.0f + expf(-x)));
    float v = bl != 0.0f ? bl * tanhf(u[i] / bl) : u[i];
    g[i] = a * v;
  }
}

void df_k_glu_act_rows(float *g, const float *u, int64_t rows, int64_t n, int64_t ld,
                       const df_k_act *act) {
  enum { CHUNK = 512 };
  int64_t per_row = (n + CHUNK - 1) / CHUNK, chunks = rows * per_row;
  bool par = rows * n >= 4096;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t c = 0; c < chunks; c++) {
    int64_t r = c / per_row, i0 = (c % per_row) * CHUNK;
    int64_t len = n - i0 < CHUNK ? n - i0 : CHUNK;
    df_k_glu_act(g + r * ld + i0, u + r * ld + i0, len, act);
  }
}

void df_k_embed(const int32_t *ids, int64_t n, const void *table, df_dtype dt, int64_t D,
                float *y) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < D; j++) y[i * D + j] = df_k_to_f32(table, dt, (int64_t)ids[i] * D + j);
}

void df_k_add(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

#if DF_HAVE_X86
static AVX2_FN void axpy_avx2(float *y, float a, const float *x, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}
#endif

void df_k_axpy(float *y, float a, const float *x, int64_t n) {
#if DF_HAVE_X86
  if (df_k_isa() >= DF_ISA_AVX2) {
    axpy_avx2(y, a, x, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}
