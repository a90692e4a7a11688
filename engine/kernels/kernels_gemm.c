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
 * 3 x 4 tile does 12 for 4 widening loads and 3 loads). The last block of a product whose rows
 * are not a multiple of 6 runs 4 or 2 rows (the same operations per row), not 6 with repeats.
 * While the blocks run, the next tile's weight rows are prefetched into L2, so its packing reads
 * them from the cache rather than memory; a tile of whole rows (8 columns, K a multiple of 8, no
 * bias) stores each row's 8 outputs as one vector.
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

static float *panel_of(size_t n) { return k_grow(&t_panel, &t_panel_cap, n); }

/* panel[(k / 8) * 64 + p * 16 + h * 8 + l] = w row (2p + h), column k + l, as fp32. */
static AVX2_FN void pack(const void *const *wr, df_dtype dt, int64_t K8, float *panel) {
  for (int64_t k = 0; k < K8; k += 8, panel += 64)
    for (int j = 0; j < 8; j++) _mm256_store_ps(panel + 8 * j, avx2_ld(wr[j], dt, k));
}

/* x broadcast: the 8 floats at p in both halves (AVX-512F: a 256-bit broadcast of 4 doubles
 * moves the same bits) */
#define BCAST(p) _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(p))))
/* One block: rows xr[0..R) (R = 2, 4 or 6) against the packed panel over K8 columns;
 * o[i * 8 + j] = the lane sum of row i with weight row j (before the tail), avx2_reduce's tree
 * 16 outputs at a time (avx512_reduce16: rows i and i + 1). [*pf, pf_end): bytes to bring into
 * L2 meanwhile (a hint), one cache line per 8 k; *pf advances past the lines requested. The
 * loops over i and c unroll (R is a constant at each call), so the 4R accumulators live in
 * registers. */
INLINE GEMM_FN void block_rx8(const int R, const float *const *xr, const float *panel,
                              int64_t K8, float *o, const char **pf, const char *pf_end) {
  const char *p = *pf;
  __m512 a[G_MR][4];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) a[i][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K8; k += 8, panel += 64) {
    __m512 w[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) w[c] = _mm512_load_ps(panel + 16 * c);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      __m512 xb = BCAST(xr[i] + k);
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) a[i][c] = _mm512_fmadd_ps(xb, w[c], a[i][c]);
    }
    if (p < pf_end) _mm_prefetch(p, _MM_HINT_T1), p += 64;
  }
  *pf = p;
  /* output i * 8 + j is in half j % 2 of a[i][j / 2] */
#pragma GCC unroll 3
  for (int i = 0; i < R; i += 2) avx512_reduce16(&a[i][0], o + i * DF_K_GEMM_NR);
}

static GEMM_FN void block6x8(const float *const *xr, const float *panel, int64_t K8, float *o,
                             const char **pf, const char *pf_end) {
  block_rx8(6, xr, panel, K8, o, pf, pf_end);
}
static GEMM_FN void block4x8(const float *const *xr, const float *panel, int64_t K8, float *o,
                             const char **pf, const char *pf_end) {
  block_rx8(4, xr, panel, K8, o, pf, pf_end);
}
static GEMM_FN void block2x8(const float *const *xr, const float *panel, int64_t K8, float *o,
                             const char **pf, const char *pf_end) {
  block_rx8(2, xr, panel, K8, o, pf, pf_end);
}
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
  /* the next tile's weight rows (the next 8 rows of w; past its end only a wasted hint) stream
   * into L2 while the blocks run, a cache line per 8 k, for its pack */
  const char *pf = (const char *)w + (size_t)(n0 + DF_K_GEMM_NR) * (size_t)K * esz;
  const char *pf_end = pf + (size_t)DF_K_GEMM_NR * (size_t)K * esz;
  float o[G_MR * DF_K_GEMM_NR];
  for (int64_t m0 = 0; m0 < M; m0 += G_MR) {
    int mr = (int)(M - m0 < G_MR ? M - m0 : G_MR);
    const float *xr[G_MR]; /* missing rows repeat the last, likewise */
    for (int i = 0; i < G_MR; i++) xr[i] = x + (m0 + (i < mr ? i : mr - 1)) * ldx;
    if (mr > 4) block6x8(xr, panel, K8, o, &pf, pf_end);
    else if (mr > 2) block4x8(xr, panel, K8, o, &pf, pf_end);
    else block2x8(xr, panel, K8, o, &pf, pf_end);
    if (K8 == K && !bias && nr == DF_K_GEMM_NR) { /* whole rows of the tile: no tail, no bias */
      for (int i = 0; i < mr; i++)
        memcpy(y + (m0 + i) * ldy + n0, o + i * DF_K_GEMM_NR, sizeof(float) * DF_K_GEMM_NR);
      continue;
    }
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
