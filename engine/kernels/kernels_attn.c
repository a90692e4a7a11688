/* engine/kernels/kernels_attn.c — causal attention over the KV cache (GQA, and MLA's blocked
 * form); see kernels.h df_k_attention, df_k_attention_gemm and df_k_mla_attention_gemm.
 *
 * Owns: df_k_attention (one query row at a time: a df_k_dot per key, softmax, a df_k_axpy per
 * key; the scalar path) and its blocked form, taken wherever the ISA allows, which computes
 * every element with the same operations in the same order: the query rows of the heads that
 * share a KV head stacked into blocks, their scores through df_k_linear_serial's tiles (the
 * keys as F32 weights, read once per block; df_k_linear's lane order is df_k_dot's), the same
 * softmax function, and P V with several rows' probabilities against a run of value columns in
 * registers (each element the fma(p_t, v_t, o) chain of df_k_axpy). df_k_mla_attention
 * (kernels_deepseek.c) takes the blocked form from here too.
 */
#include "engine/kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DF_HAVE_X86 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f")))
#else
#define DF_HAVE_X86 0
#endif

#define INLINE static inline __attribute__((always_inline))

#include "engine/kernels/kernels_simd.h"

/* ---- causal attention over many query rows ------------------------------------------- */

#define ATT_RB 48 /* query rows per work item: the scores of 48 rows x the context fit in L2 */

#if DF_HAVE_X86
/* The calling thread's score buffer [ATT_RB, n] fp32: grown on demand, kept. */
static _Thread_local float *t_att;
static _Thread_local size_t t_att_cap;

/* pv_block: o[r][0 .. 16 NC) for the rows r < R of a block: p [R, stride lds] their
 * probabilities, v the value rows (stride ldv) at the block's first column; row r sums the
 * positions t < np[r] (np ascending). Each element is the fused multiply-add chain
 * o = fma(p_t, v_t, o) from +0 in ascending t: df_k_axpy's, per element. pv_block_avx2: the
 * same with 256-bit registers, NC vectors of 8 columns, R <= 2. */
#define DEF_PV_BLOCK(name, attr, VT, W, RMAX, zero, load, set1, fma, store)                   \
  INLINE attr void name(const int R, const int NC, const float *p, int64_t lds,               \
                        const float *v, int64_t ldv, const int64_t *np, float *const *o) {    \
    VT a[RMAX][4];                                                                           \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                      \
      _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) a[r][c] = zero();                 \
    int64_t t = 0;                                                                           \
    for (; t < np[0]; t++) { /* every row of the block */                                    \
      VT vv[4];                                                                              \
      _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) vv[c] = load(v + t * ldv + W * c); \
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                  \
        VT pb = set1(p[r * lds + t]);                                                        \
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) a[r][c] = fma(pb, vv[c], a[r][c]); \
      }                                                                                      \
    }                                                                                        \
    _Pragma("GCC unroll 4") for (int r = 1; r < R; r++) /* the later rows' own positions */  \
      for (int64_t u = t; u < np[r]; u++) {                                                  \
        VT pb = set1(p[r * lds + u]);                                                        \
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                                 \
          a[r][c] = fma(pb, load(v + u * ldv + W * c), a[r][c]);                             \
      }                                                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                      \
      _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) store(o[r] + W * c, a[r][c]);     \
  }
DEF_PV_BLOCK(pv_block, AVX512_FN, __m512, 16, 4, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps,
             _mm512_fmadd_ps, _mm512_storeu_ps)
DEF_PV_BLOCK(pv_block_avx2, AVX2_FN, __m256, 8, 2, _mm256_setzero_ps, _mm256_loadu_ps,
             _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps)
#undef DEF_PV_BLOCK

typedef void (*pv_fn)(const float *, int64_t, const float *, int64_t, const int64_t *,
                      float *const *);
#define DEF_PV(name, attr, blk, R, NC)                                                         \
  static attr void name(const float *p, int64_t lds, const float *v, int64_t ldv,             \
                        const int64_t *np, float *const *o) {                                 \
    blk(R, NC, p, lds, v, ldv, np, o);                                                        \
  }
DEF_PV(pv4x4, AVX512_FN, pv_block, 4, 4)
DEF_PV(pv4x1, AVX512_FN, pv_block, 4, 1)
DEF_PV(pv1x4, AVX512_FN, pv_block, 1, 4)
DEF_PV(pv1x1, AVX512_FN, pv_block, 1, 1)
DEF_PV(pv2x4_avx2, AVX2_FN, pv_block_avx2, 2, 4)
DEF_PV(pv2x2_avx2, AVX2_FN, pv_block_avx2, 2, 2)
DEF_PV(pv1x4_avx2, AVX2_FN, pv_block_avx2, 1, 4)
DEF_PV(pv1x2_avx2, AVX2_FN, pv_block_avx2, 1, 2)
#undef DEF_PV

/* One block of query rows that share their keys and values: the rows of the heads that read one
 * KV head (GQA's group; every MLA head), stacked position by position. Flattened row f of a
 * head set is position m = f / rpp's head (f % rpp); the block holds rows [f0, f0 + rows), row r
 * at position pos0 + (f0 + r) / rpp, attending to positions [0, that]. Its score is
 * (qa_r . ka_t [+ qb_r . kb_t]) * scale, each dot in df_k_dot's order; its output
 * o[r] = sum_t p_t v_t. */
typedef struct att_job {
  int64_t rows, rpp, f0, pos0;
  const float *qa, *ka; /* the block's query rows [rows, da], contiguous; keys [positions, da] */
  int64_t da;
  const float *qb, *kb; /* the second part (MLA's decoupled RoPE part) [rows, db], or qb NULL */
  int64_t db;
  const float *v; /* values [positions, dv] */
  int64_t dv;
  float *const *o; /* [rows] output rows of dv floats */
  float scale;
} att_job;

/* Positions row r of a block attends to. */
static inline int64_t att_np(const att_job *j, int64_t r) {
  return j->pos0 + (j->f0 + r) / j->rpp + 1;
}

/* Scores through df_k_linear's tiles (key tiles of 8, each from the first row that sees any of
 * its keys; the keys and values are read once for all the rows), softmax per row as
 * df_k_attention, then P V in blocks of 4 rows x 64 columns (AVX-512) or 2 rows x 32 columns
 * (AVX2), 16 columns at the end. s: [rows, att_np(rows - 1)] scratch. */
static void att_rows(const att_job *j, float *s) {
  int64_t lds = att_np(j, j->rows - 1);
  float sb[ATT_RB * DF_K_GEMM_NR];
  for (int64_t n0 = 0; n0 < lds; n0 += DF_K_GEMM_NR) {
    int nr = (int)(lds - n0 < DF_K_GEMM_NR ? lds - n0 : DF_K_GEMM_NR);
    int64_t r0 = (n0 - j->pos0) * j->rpp - j->f0; /* rows before r0 see none of these keys */
    if (r0 < 0) r0 = 0;
    df_k_linear_serial(j->qa + r0 * j->da, j->rows - r0, j->da, j->da, j->ka + n0 * j->da,
                       DF_DT_F32, nr, s + r0 * lds + n0, lds);
    if (j->qb) {
      df_k_linear_serial(j->qb + r0 * j->db, j->rows - r0, j->db, j->db, j->kb + n0 * j->db,
                         DF_DT_F32, nr, sb, DF_K_GEMM_NR);
      for (int64_t r = r0; r < j->rows; r++)
        for (int c = 0; c < nr; c++) s[r * lds + n0 + c] += sb[(r - r0) * DF_K_GEMM_NR + c];
    }
  }
  for (int64_t r = 0; r < j->rows; r++) df_k_attn_softmax(s + r * lds, att_np(j, r), j->scale);
  bool wide = df_k_isa() >= DF_ISA_AVX512;
  int rb = wide ? 4 : 2, cw = wide ? 64 : 32; /* a P V block: rows, columns */
  for (int64_t r = 0; r < j->rows;) {
    int R = j->rows - r >= rb ? rb : 1;
    int64_t np[4];
    float *o[4];
    for (int i = 0; i < R; i++) np[i] = att_np(j, r + i);
    for (int64_t c = 0; c < j->dv;) {
      bool full = j->dv - c >= cw;
      for (int i = 0; i < R; i++) o[i] = j->o[r + i] + c;
      pv_fn f = wide ? (R > 1 ? (full ? pv4x4 : pv4x1) : (full ? pv1x4 : pv1x1))
                     : (R > 1 ? (full ? pv2x4_avx2 : pv2x2_avx2) : (full ? pv1x4_avx2 : pv1x2_avx2));
      f(s + r * lds, lds, j->v + c, j->dv, np, o);
      c += full ? cw : 16;
    }
    r += R;
  }
}

/* A blocked attention: for each of n_kv KV heads, the M x rpp rows of its heads (head
 * h = kv * rpp + g of position m: query q + m * ldq + h * dq, optional second part
 * qb + m * ldqb + h * dqb, output out + m * ldo + h * dv) in blocks of at most ATT_RB rows
 * (at least as many blocks as threads when there are rows enough), shared out among the
 * threads; each block's queries are copied together into the thread's scratch. Keys and
 * values of KV head kv at ka / kb / v + kv * kv_h. False when a thread's scratch cannot be
 * allocated. */
typedef struct att_heads {
  int64_t M, pos0, n_kv, rpp;
  const float *q, *qb;
  int64_t ldq, dq, ldqb, dqb;
  const float *ka, *kb, *v;
  int64_t da, db, dv, kv_h;
  float *out;
  int64_t ldo;
  float scale;
} att_heads;

static bool att_run(const att_heads *a) {
  int64_t total = a->M * a->rpp, threads = df_k_max_threads();
  int64_t n_rb = (total + ATT_RB - 1) / ATT_RB;
  if (n_rb * a->n_kv < threads) n_rb = (threads + a->n_kv - 1) / a->n_kv;
  if (n_rb > total) n_rb = total;
  int64_t per = (total + n_rb - 1) / n_rb, items = a->n_kv * n_rb;
  /* threads only pay off above some work (as the per-row form); results do not depend on it */
  bool ok = true, par = items > 1 && a->n_kv * total * (a->pos0 + a->M) * (a->da + a->dv) >= 32768;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads()) \
    reduction(&& : ok)
  for (int64_t it = 0; it < items; it++) {
    int64_t kv = it / n_rb, f0 = (it % n_rb) * per, f1 = f0 + per < total ? f0 + per : total;
    if (f0 >= f1) continue;
    int64_t rows = f1 - f0, end = a->pos0 + (f1 - 1) / a->rpp + 1;
    float *s = k_grow(&t_att, &t_att_cap,
                      (size_t)rows * (size_t)(end + a->da + a->db) + 16);
    if (!s) {
      ok = false;
      continue;
    }
    float *qa = s + rows * end, *qb = qa + rows * a->da, *o[ATT_RB];
    for (int64_t r = 0; r < rows; r++) {
      int64_t m = (f0 + r) / a->rpp, h = kv * a->rpp + (f0 + r) % a->rpp;
      memcpy(qa + r * a->da, a->q + m * a->ldq + h * a->dq, sizeof(float) * (size_t)a->da);
      if (a->qb)
        memcpy(qb + r * a->db, a->qb + m * a->ldqb + h * a->dqb, sizeof(float) * (size_t)a->db);
      o[r] = a->out + m * a->ldo + h * a->dv;
    }
    att_job j = {.rows = rows, .rpp = a->rpp, .f0 = f0, .pos0 = a->pos0, .qa = qa,
                 .ka = a->ka + kv * a->kv_h, .da = a->da, .qb = a->qb ? qb : NULL, .kb = a->kb,
                 .db = a->db, .v = a->v + kv * a->kv_h, .dv = a->dv, .o = o, .scale = a->scale};
    att_rows(&j, s);
  }
  return ok;
}
#endif

bool df_k_attention_gemm(const float *q, int64_t M, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t d, int64_t ctx, const float *kc, const float *vc, float scale,
                         float *out) {
#if DF_HAVE_X86
  if (df_k_isa() < DF_ISA_AVX2 || d % 16 != 0 || M < 1) return false;
  att_heads a = {.M = M, .pos0 = pos0, .n_kv = n_kv, .rpp = n_head / n_kv, .q = q,
                 .ldq = n_head * d, .dq = d, .ka = kc, .v = vc, .da = d, .dv = d,
                 .kv_h = ctx * d, .out = out, .ldo = n_head * d, .scale = scale};
  return att_run(&a);
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
  att_heads a = {.M = M, .pos0 = pos0, .n_kv = 1, .rpp = n_head, .q = q_lat,
                 .qb = dr > 0 ? q_rope : NULL, .ldq = n_head * L, .dq = L, .ldqb = ld_rope,
                 .dqb = ld_rope_head, .ka = ckv, .kb = kpe, .v = ckv, .da = L, .db = dr,
                 .dv = L, .kv_h = 0, .out = out, .ldo = n_head * L, .scale = scale};
  return att_run(&a);
#else
  (void)q_lat, (void)q_rope, (void)ld_rope, (void)ld_rope_head, (void)M, (void)pos0;
  (void)n_head, (void)L, (void)dr, (void)ckv, (void)kpe, (void)scale, (void)out;
  return false;
#endif
}

void df_k_attn_softmax(float *s, int64_t n, float scale) {
  float mx = -INFINITY;
  for (int64_t t = 0; t < n; t++) {
    s[t] *= scale;
    if (s[t] > mx) mx = s[t];
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < n; t++) {
    s[t] = expf(s[t] - mx);
    sum += s[t];
  }
  float inv = 1.0f / sum;
  for (int64_t t = 0; t < n; t++) s[t] *= inv;
}

/* ---- one query row at a time ----------------------------------------------------------- */

void df_k_attention(const float *q, int64_t M, int64_t pos0, int64_t n_head, int64_t n_kv,
                    int64_t d, int64_t ctx, const float *kc, const float *vc, float scale,
                    float *out, float *scratch) {
  /* the blocked form, the same bits */
  if (df_k_attention_gemm(q, M, pos0, n_head, n_kv, d, ctx, kc, vc, scale, out))
    return;
  int64_t group = n_head / n_kv;
  int64_t pairs = M * n_head;
  bool par = pairs > 1 && (pos0 + M) * d * pairs >= 16384;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t pr = 0; pr < pairs; pr++) {
    int64_t m = pr / n_head, h = pr % n_head, kvh = h / group;
    int64_t n_pos = pos0 + m + 1;
    const float *qv = q + (m * n_head + h) * d;
    const float *kb = kc + kvh * ctx * d, *vb = vc + kvh * ctx * d;
    float *sc = scratch + (int64_t)omp_get_thread_num() * ctx;
    for (int64_t t = 0; t < n_pos; t++) sc[t] = df_k_dot(qv, kb + t * d, d);
    df_k_attn_softmax(sc, n_pos, scale);
    float *o = out + (m * n_head + h) * d;
    for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
    for (int64_t t = 0; t < n_pos; t++) df_k_axpy(o, sc[t], vb + t * d, d);
  }
}
