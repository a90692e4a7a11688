/* engine/kernels/kernels_gemm.c — prefill's linear products (many rows) as a register-blocked
 * GEMM on AVX-512; see kernels.h df_k_linear_gemm_cols.
 *
 * Owns: y = x w^T for M >= DF_K_GEMM_MIN_ROWS rows and BF16 / F16 / F32 weights, computing each
 * output element exactly as df_k_linear's other paths do (kernels.h: eight fp32 lanes k = l mod
 * 8 accumulated in ascending k with fused multiply-adds, the lane tree of kernels_simd.h, then
 * the K % 8 tail in ascending k, then the bias), so results are bitwise those of the AVX2 and
 * scalar paths on every shape, thread count and batch.
 *
 * How: a column tile is 8 weight rows. Its weights are widened to fp32 once (exactly: bf16 is a
 * shift, f16 the F16C conversion) into a panel laid out per 8 k as four 16-float vectors, each
 * the 8 lanes of two weight rows side by side; the panel (32 K bytes) then serves every block
 * of 6 activation rows from the cache. A 512-bit accumulator holds the 8 lanes of two outputs
 * (row i with weight rows 2p and 2p+1), and the 8 activations x[i][k..k+8) are broadcast to
 * both halves, so every lane sees the same multiply-add sequence as a 256-bit accumulator of one
 * output; the wider register only computes two outputs at once. 6 x 4 accumulators stay in
 * registers: per 8 k, 24 fused multiply-adds for 4 panel loads and 6 broadcasts (the 256-bit
 * 3 x 4 tile does 12 for 4 widening loads and 3 loads).
 */
#include "engine/kernels/kernels.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DF_HAVE_X86 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define GEMM_FN __attribute__((target("avx2,fma,f16c,avx512f")))
#else
#define DF_HAVE_X86 0
#endif

#define INLINE static inline __attribute__((always_inline))

#include "engine/kernels/kernels_simd.h"

#define G_MR 6 /* activation rows of a register block */

#if DF_HAVE_X86
/* The calling thread's panel: grown on demand, kept for the thread's next tile. */
static _Thread_local float *t_panel;
static _Thread_local size_t t_panel_cap;

static float *panel_of(size_t n) {
  if (n > t_panel_cap) {
    free(t_panel);
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    t_panel = aligned_alloc(64, bytes);
    t_panel_cap = t_panel ? n : 0;
  }
  return t_panel;
}

/* panel[(k / 8) * 64 + p * 16 + h * 8 + l] = w row (2p + h), column k + l, as fp32. */
static AVX2_FN void pack(const void *const *wr, df_dtype dt, int64_t K8, float *panel) {
  for (int64_t k = 0; k < K8; k += 8, panel += 64)
    for (int j = 0; j < 8; j++) _mm256_store_ps(panel + 8 * j, avx2_ld(wr[j], dt, k));
}

/* x broadcast: the 8 floats at p in both halves (AVX-512F: a 256-bit broadcast of 4 doubles
 * moves the same bits) */
#define BCAST(p) _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(p))))
#define FMA4(i)                                                                                \
  do {                                                                                         \
    __m512 xb = BCAST(xr[i] + k);                                                              \
    a##i##0 = _mm512_fmadd_ps(xb, w0, a##i##0);                                                \
    a##i##1 = _mm512_fmadd_ps(xb, w1, a##i##1);                                                \
    a##i##2 = _mm512_fmadd_ps(xb, w2, a##i##2);                                                \
    a##i##3 = _mm512_fmadd_ps(xb, w3, a##i##3);                                                \
  } while (0)

/* One block: rows xr[0..6) against the packed panel over K8 columns; o[i * 8 + j] = the lane
 * sum of row i with weight row j (before the tail), avx2_reduce's tree 16 outputs at a time
 * (avx512_reduce16). */
static GEMM_FN void block6x8(const float *const *xr, const float *panel, int64_t K8, float *o) {
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
         a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00,
         a32 = a00, a33 = a00, a40 = a00, a41 = a00, a42 = a00, a43 = a00, a50 = a00, a51 = a00,
         a52 = a00, a53 = a00;
  for (int64_t k = 0; k < K8; k += 8, panel += 64) {
    __m512 w0 = _mm512_load_ps(panel), w1 = _mm512_load_ps(panel + 16),
           w2 = _mm512_load_ps(panel + 32), w3 = _mm512_load_ps(panel + 48);
    FMA4(0);
    FMA4(1);
    FMA4(2);
    FMA4(3);
    FMA4(4);
    FMA4(5);
  }
  /* output i * 8 + j is in half j % 2 of a{i}{j / 2}: register n / 2 of this order */
  const __m512 z[24] = {a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23,
                        a30, a31, a32, a33, a40, a41, a42, a43, a50, a51, a52, a53};
  avx512_reduce16(z, o);
  avx512_reduce16(z + 8, o + 16);
  avx512_reduce16(z + 16, o + 32);
}
#undef FMA4
#undef BCAST
#endif

bool df_k_linear_gemm_cols(df_dtype dt, const float *x, int64_t M, int64_t K, int64_t ldx,
                           const void *w, int64_t n0, int nr, const void *bias, float *y,
                           int64_t ldy) {
  assert(nr >= 1 && nr <= DF_K_GEMM_NR && M >= 1);
  assert(dt == DF_DT_BF16 || dt == DF_DT_F16 || dt == DF_DT_F32);
#if DF_HAVE_X86
  if (df_k_isa() < DF_ISA_AVX512) return false;
  int64_t K8 = K & ~(int64_t)7;
  float *panel = panel_of((size_t)K8 * DF_K_GEMM_NR + 16);
  if (!panel) return false; /* out of memory: the caller's tiles compute the same values */
  size_t esz = df_dtype_size(dt);
  const void *wr[DF_K_GEMM_NR]; /* missing weight rows repeat the last: computed, discarded */
  for (int j = 0; j < DF_K_GEMM_NR; j++)
    wr[j] = (const char *)w + (size_t)(n0 + (j < nr ? j : nr - 1)) * (size_t)K * esz;
  pack(wr, dt, K8, panel);
  float o[G_MR * DF_K_GEMM_NR];
  for (int64_t m0 = 0; m0 < M; m0 += G_MR) {
    int mr = (int)(M - m0 < G_MR ? M - m0 : G_MR);
    const float *xr[G_MR]; /* missing rows repeat the last, likewise */
    for (int i = 0; i < G_MR; i++) xr[i] = x + (m0 + (i < mr ? i : mr - 1)) * ldx;
    block6x8(xr, panel, K8, o);
    for (int i = 0; i < mr; i++)
      for (int j = 0; j < nr; j++) {
        float s = o[i * DF_K_GEMM_NR + j];
        for (int64_t t = K8; t < K; t++) s = fmaf(xr[i][t], k_to_f32(wr[j], dt, t), s);
        y[(m0 + i) * ldy + n0 + j] = bias ? s + k_to_f32(bias, dt, n0 + j) : s;
      }
  }
  return true;
#else
  (void)x, (void)K, (void)ldx, (void)w, (void)n0, (void)bias, (void)y, (void)ldy;
  return false;
#endif
}
