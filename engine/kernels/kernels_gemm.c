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

/* ---- causal attention over many query rows ------------------------------------------- */

#define ATT_RB 48 /* query rows per work item: the scores of 48 rows x the context fit in L2 */

#if DF_HAVE_X86
/* The calling thread's score buffer [ATT_RB, n] fp32: grown on demand, kept. */
static _Thread_local float *t_att;
static _Thread_local size_t t_att_cap;

static float *att_scores_of(size_t n) {
  if (n > t_att_cap) {
    free(t_att);
    t_att = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    t_att_cap = t_att ? n : 0;
  }
  return t_att;
}

/* o[r][0 .. 16 NC) for the rows r < R of a block: p [R, stride lds] their probabilities, v the
 * value rows (stride ldv) at the block's first column; row r sums the positions t < np[r] (np
 * ascending). Each element is the fused multiply-add chain o = fma(p_t, v_t, o) from +0 in
 * ascending t: df_k_axpy's, per element. */
INLINE GEMM_FN void pv_block(const int R, const int NC, const float *p, int64_t lds,
                             const float *v, int64_t ldv, const int64_t *np, float *const *o) {
  __m512 a[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) a[r][c] = _mm512_setzero_ps();
  int64_t t = 0;
  for (; t < np[0]; t++) { /* every row of the block */
    const float *vt = v + t * ldv;
    __m512 vv[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) vv[c] = _mm512_loadu_ps(vt + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      __m512 pb = _mm512_set1_ps(p[r * lds + t]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; c++) a[r][c] = _mm512_fmadd_ps(pb, vv[c], a[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 1; r < R; r++) /* the later rows' own positions */
    for (int64_t u = t; u < np[r]; u++) {
      __m512 pb = _mm512_set1_ps(p[r * lds + u]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; c++)
        a[r][c] = _mm512_fmadd_ps(pb, _mm512_loadu_ps(v + u * ldv + 16 * c), a[r][c]);
    }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(o[r] + 16 * c, a[r][c]);
}

/* The same with 256-bit registers (AVX2): R rows x NC vectors of 8 columns (16 registers). */
INLINE AVX2_FN void pv_block_avx2(const int R, const int NC, const float *p, int64_t lds,
                                  const float *v, int64_t ldv, const int64_t *np,
                                  float *const *o) {
  __m256 a[2][4];
#pragma GCC unroll 2
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) a[r][c] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t < np[0]; t++) {
    const float *vt = v + t * ldv;
    __m256 vv[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) vv[c] = _mm256_loadu_ps(vt + 8 * c);
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
      __m256 pb = _mm256_set1_ps(p[r * lds + t]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; c++) a[r][c] = _mm256_fmadd_ps(pb, vv[c], a[r][c]);
    }
  }
#pragma GCC unroll 2
  for (int r = 1; r < R; r++)
    for (int64_t u = t; u < np[r]; u++) {
      __m256 pb = _mm256_set1_ps(p[r * lds + u]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; c++)
        a[r][c] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + u * ldv + 8 * c), a[r][c]);
    }
#pragma GCC unroll 2
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(o[r] + 8 * c, a[r][c]);
}

typedef void (*pv_fn)(const float *, int64_t, const float *, int64_t, const int64_t *,
                      float *const *);
#define DEF_PV(name, attr, blk, R, NC)                                                         \
  static attr void name(const float *p, int64_t lds, const float *v, int64_t ldv,             \
                        const int64_t *np, float *const *o) {                                 \
    blk(R, NC, p, lds, v, ldv, np, o);                                                        \
  }
DEF_PV(pv4x4, GEMM_FN, pv_block, 4, 4)
DEF_PV(pv4x1, GEMM_FN, pv_block, 4, 1)
DEF_PV(pv1x4, GEMM_FN, pv_block, 1, 4)
DEF_PV(pv1x1, GEMM_FN, pv_block, 1, 1)
DEF_PV(pv2x4_avx2, AVX2_FN, pv_block_avx2, 2, 4)
DEF_PV(pv2x2_avx2, AVX2_FN, pv_block_avx2, 2, 2)
DEF_PV(pv1x4_avx2, AVX2_FN, pv_block_avx2, 1, 4)
DEF_PV(pv1x2_avx2, AVX2_FN, pv_block_avx2, 1, 2)
#undef DEF_PV

/* One query row block of one head: row r (< rows) is at position pos0 + r and attends to
 * positions [0, pos0 + r]. Its score is (qa_r . ka_t [+ qb_r . kb_t]) * scale, each dot in
 * df_k_dot's order; its output o_r = sum_t p_t v_t. */
typedef struct att_job {
  int64_t rows, pos0;
  const float *qa, *ka; /* q rows (stride lda), keys (stride da): the first score part */
  int64_t lda, da;
  const float *qb, *kb; /* the second part (MLA's decoupled RoPE part), or qb NULL */
  int64_t ldb, db;
  const float *v; /* values [positions, dv] */
  int64_t dv;
  float *o; /* out rows (stride ldo) */
  int64_t ldo;
  float scale;
} att_job;

/* Scores through df_k_linear's tiles (key tiles of 8, each from the first row that sees any of
 * its keys), softmax per row as df_k_attention, then P V in blocks of 4 rows x 64 columns
 * (AVX-512) or 2 rows x 32 columns (AVX2), 16 columns at the end. s: [rows, pos0 + rows]
 * scratch. */
static void att_rows(const att_job *j, float *s) {
  int64_t lds = j->pos0 + j->rows;
  float sb[ATT_RB * DF_K_GEMM_NR];
  for (int64_t n0 = 0; n0 < lds; n0 += DF_K_GEMM_NR) {
    int nr = (int)(lds - n0 < DF_K_GEMM_NR ? lds - n0 : DF_K_GEMM_NR);
    int64_t r0 = n0 - j->pos0; /* rows before r0 see none of these keys */
    if (r0 < 0) r0 = 0;
    df_k_linear_serial(j->qa + r0 * j->lda, j->rows - r0, j->da, j->lda, j->ka + n0 * j->da,
                       DF_DT_F32, nr, s + r0 * lds + n0, lds);
    if (j->qb) {
      df_k_linear_serial(j->qb + r0 * j->ldb, j->rows - r0, j->db, j->ldb, j->kb + n0 * j->db,
                         DF_DT_F32, nr, sb, DF_K_GEMM_NR);
      for (int64_t r = r0; r < j->rows; r++)
        for (int c = 0; c < nr; c++) s[r * lds + n0 + c] += sb[(r - r0) * DF_K_GEMM_NR + c];
    }
  }
  for (int64_t r = 0; r < j->rows; r++) { /* df_k_attention's softmax, row by row */
    float *sr = s + r * lds, mx = -INFINITY;
    int64_t n_pos = j->pos0 + r + 1;
    for (int64_t t = 0; t < n_pos; t++) {
      sr[t] *= j->scale;
      if (sr[t] > mx) mx = sr[t];
    }
    float sum = 0.0f;
    for (int64_t t = 0; t < n_pos; t++) {
      sr[t] = expf(sr[t] - mx);
      sum += sr[t];
    }
    float inv = 1.0f / sum;
    for (int64_t t = 0; t < n_pos; t++) sr[t] *= inv;
  }
  bool wide = df_k_isa() >= DF_ISA_AVX512;
  int rb = wide ? 4 : 2, cw = wide ? 64 : 32; /* a P V block: rows, columns */
  for (int64_t r = 0; r < j->rows;) {
    int R = j->rows - r >= rb ? rb : 1;
    int64_t np[4];
    float *o[4];
    for (int i = 0; i < R; i++) np[i] = j->pos0 + r + i + 1;
    for (int64_t c = 0; c < j->dv;) {
      bool full = j->dv - c >= cw;
      for (int i = 0; i < R; i++) o[i] = j->o + (r + i) * j->ldo + c;
      pv_fn f = wide ? (R > 1 ? (full ? pv4x4 : pv4x1) : (full ? pv1x4 : pv1x1))
                     : (R > 1 ? (full ? pv2x4_avx2 : pv2x2_avx2) : (full ? pv1x4_avx2 : pv1x2_avx2));
      f(s + r * lds, lds, j->v + c, j->dv, np, o);
      c += full ? cw : 16;
    }
    r += R;
  }
}

/* The calling thread's scratch for a job of `rows` rows ending at position `end`, or NULL. */
static float *att_scratch(int64_t rows, int64_t end) {
  return att_scores_of((size_t)rows * (size_t)end + 16);
}
#endif

bool df_k_attention_gemm(const float *q, int64_t M, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t d, int64_t ctx, const float *kc, const float *vc, float scale,
                         float *out) {
#if DF_HAVE_X86
  if (df_k_isa() < DF_ISA_AVX2 || d % 16 != 0 || M < 1) return false;
  int64_t group = n_head / n_kv, n_rb = (M + ATT_RB - 1) / ATT_RB, items = n_head * n_rb;
  bool ok = true;
#pragma omp parallel for schedule(static) num_threads(df_k_max_threads()) reduction(&& : ok)
  for (int64_t it = 0; it < items; it++) {
    int64_t h = it / n_rb, m0 = (it % n_rb) * ATT_RB, m1 = m0 + ATT_RB < M ? m0 + ATT_RB : M;
    float *s = att_scratch(m1 - m0, pos0 + m1);
    if (!s) {
      ok = false;
      continue;
    }
    int64_t kvh = h / group;
    att_job j = {.rows = m1 - m0, .pos0 = pos0 + m0, .qa = q + (m0 * n_head + h) * d,
                 .ka = kc + kvh * ctx * d, .lda = n_head * d, .da = d, .v = vc + kvh * ctx * d,
                 .dv = d, .o = out + (m0 * n_head + h) * d, .ldo = n_head * d, .scale = scale};
    att_rows(&j, s);
  }
  return ok;
#else
  (void)q, (void)M, (void)pos0, (void)n_head, (void)n_kv, (void)d, (void)ctx, (void)kc;
  (void)vc, (void)scale, (void)out;
  return false;
#endif
}

bool df_k_mla_attention_gemm(const float *q_lat, const float *q_rope, int64_t ld_rope,
                             int64_t ld_rope_head, int64_t M, int64_t pos0, int64_t n_head,
                             int64_t L, int64_t dr, const float *ckv, const float *kpe,
                             float scale, float *out) {
#if DF_HAVE_X86
  if (df_k_isa() < DF_ISA_AVX2 || L % 16 != 0 || M < 1) return false;
  int64_t n_rb = (M + ATT_RB - 1) / ATT_RB, items = n_head * n_rb;
  bool ok = true;
#pragma omp parallel for schedule(static) num_threads(df_k_max_threads()) reduction(&& : ok)
  for (int64_t it = 0; it < items; it++) {
    int64_t h = it / n_rb, m0 = (it % n_rb) * ATT_RB, m1 = m0 + ATT_RB < M ? m0 + ATT_RB : M;
    float *s = att_scratch(m1 - m0, pos0 + m1);
    if (!s) {
      ok = false;
      continue;
    }
    att_job j = {.rows = m1 - m0, .pos0 = pos0 + m0, .qa = q_lat + (m0 * n_head + h) * L,
                 .ka = ckv, .lda = n_head * L, .da = L,
                 .qb = dr > 0 ? q_rope + m0 * ld_rope + h * ld_rope_head : NULL, .kb = kpe,
                 .ldb = ld_rope, .db = dr, .v = ckv, .dv = L,
                 .o = out + (m0 * n_head + h) * L, .ldo = n_head * L, .scale = scale};
    att_rows(&j, s);
  }
  return ok;
#else
  (void)q_lat, (void)q_rope, (void)ld_rope, (void)ld_rope_head, (void)M, (void)pos0;
  (void)n_head, (void)L, (void)dr, (void)ckv, (void)kpe, (void)scale, (void)out;
  return false;
#endif
}
