/* engine/kernels/kernels_deepseek.c — kernels of the DeepSeek-V3 family (MLA, sigmoid routing);
 * see kernels.h.
 *
 * Owns: the transposed linear that absorbs kv_b_proj's key half into the query
 * (DeepSeek-V2 paper §2.1.2 "absorbed" MLA), attention over the compressed latent cache,
 * RoPE on strided head slices with optional pair interleaving, and the sigmoid
 * group-limited router of transformers' DeepseekV3TopkRouter. Like kernels.c, every output
 * element has a reduction order fixed by the reduction length alone, and the AVX2 and
 * scalar paths agree bit for bit.
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

/* ---- transposed linear ---------------------------------------------------------------- */

/* Weight (r, c) of the full matrix, widened to fp32 (FP8: times its block scale; MXFP4:
 * decoded with its E8M0 scale). */
static inline float wget(const df_k_weight *w, int64_t r, int64_t c) {
  if (w->dt == DF_DT_F8_E4M3)
    return df_k_fp8_weight((const uint8_t *)w->data, w->scale, w->scale_ld, w->bn, w->bk, w->K,
                           r, c);
  if (w->dt == DF_DT_F4)
    return df_k_mxfp4_weight((const uint8_t *)w->data, w->mx_scale, w->scale_ld, w->K, r, c);
  return df_k_to_f32(w->data, w->dt, r * w->K + c);
}

#if DF_HAVE_X86
/* Eight consecutive weights (r, c .. c+7) as fp32, bitwise what wget gives. */
static AVX2_FN __m256 wget8(const df_k_weight *w, int64_t r, int64_t c) {
  const char *base = (const char *)w->data;
  if (w->dt == DF_DT_BF16) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + r * w->K + c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (w->dt == DF_DT_F16)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + r * w->K + c)));
  if (w->dt == DF_DT_F32) return _mm256_loadu_ps((const float *)base + r * w->K + c);
  float v[8];
  for (int l = 0; l < 8; l++) v[l] = wget(w, r, c + l);
  return _mm256_loadu_ps(v);
}

static AVX2_FN void linear_t_avx2(const float *x, int64_t M, int64_t R, int64_t ldx,
                                  const df_k_weight *w, int64_t r0, int64_t c0, int64_t N,
                                  float *y, int64_t ldy, int64_t j0, int64_t j1) {
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * ldx;
    float *yr = y + m * ldy;
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t i = 0; i < R; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(xr[i]), wget8(w, r0 + i, c0 + j), acc);
      _mm256_storeu_ps(yr + j, acc);
    }
    for (; j < j1; j++) {
      float acc = 0.0f;
      for (int64_t i = 0; i < R; i++) acc = fmaf(xr[i], wget(w, r0 + i, c0 + j), acc);
      yr[j] = acc;
    }
  }
  (void)N;
}
#endif

void df_k_linear_t(const float *x, int64_t M, int64_t R, int64_t ldx, const df_k_weight *w,
                   int64_t r0, int64_t c0, int64_t N, float *y, int64_t ldy) {
  assert(M >= 0 && R > 0 && N > 0 && ldx >= R && ldy >= N && r0 >= 0 && c0 >= 0 &&
         c0 + N <= w->K);
  if (M == 0) return;
  /* column blocks of 64 outputs are independent; the order over i never changes */
  int64_t n_blk = (N + 63) / 64;
  bool par = M * N * R >= 65536 && n_blk > 1;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t b = 0; b < n_blk; b++) {
    int64_t j0 = b * 64, j1 = j0 + 64 < N ? j0 + 64 : N;
#if DF_HAVE_X86
    if (df_k_isa() >= DF_ISA_AVX2) {
      linear_t_avx2(x, M, R, ldx, w, r0, c0, N, y, ldy, j0, j1);
      continue;
    }
#endif
    for (int64_t m = 0; m < M; m++)
      for (int64_t j = j0; j < j1; j++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < R; i++) acc = fmaf(x[m * ldx + i], wget(w, r0 + i, c0 + j), acc);
        y[m * ldy + j] = acc;
      }
  }
}

void df_k_linear_w(const float *x, int64_t M, int64_t ldx, const df_k_weight *w, int64_t n0,
                   int64_t N, float *y, int64_t ldy) {
  if (w->dt == DF_DT_F8_E4M3) {
    df_k_linear_fp8(x, M, w->K, ldx, (const uint8_t *)w->data, w->scale, w->scale_ld, w->bn,
                    w->bk, n0, N, y, ldy);
    return;
  }
  if (w->dt == DF_DT_F4) {
    df_k_linear_mxfp4(x, M, w->K, ldx, (const uint8_t *)w->data, w->mx_scale, w->scale_ld, n0,
                      N, y, ldy);
    return;
  }
  const char *rows = (const char *)w->data + (size_t)n0 * (size_t)w->K * df_dtype_size(w->dt);
  df_k_linear(x, M, w->K, ldx, rows, w->dt, N, NULL, y, ldy);
}

/* ---- latent attention ----------------------------------------------------------------- */

void df_k_mla_attention(const float *q_lat, const float *q_rope, int64_t ld_rope,
                        int64_t ld_rope_head, int64_t M,
                        int64_t pos0, int64_t n_head, int64_t L, int64_t dr, int64_t ctx,
                        const float *ckv, const float *kpe, float scale, float *out,
                        float *scratch) {
  /* the blocked form (every head's rows against the latent rows read once), the same bits */
  if (df_k_mla_attention_gemm(q_lat, q_rope, ld_rope, ld_rope_head, M, pos0, n_head, L, dr, ckv,
                              kpe, scale, out))
    return;
  int64_t pairs = M * n_head;
  bool par = pairs > 1 && (pos0 + M) * (L + dr) * pairs >= 16384;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t pr = 0; pr < pairs; pr++) {
    int64_t m = pr / n_head, h = pr % n_head, n_pos = pos0 + m + 1;
    const float *ql = q_lat + (m * n_head + h) * L;
    const float *qr = q_rope + m * ld_rope + h * ld_rope_head;
    float *sc = scratch + (int64_t)omp_get_thread_num() * ctx;
    for (int64_t t = 0; t < n_pos; t++)
      sc[t] = df_k_dot(ql, ckv + t * L, L) + df_k_dot(qr, kpe + t * dr, dr);
    df_k_attn_softmax(sc, n_pos, scale);
    float *o = out + (m * n_head + h) * L;
    for (int64_t i = 0; i < L; i++) o[i] = 0.0f;
    for (int64_t t = 0; t < n_pos; t++) df_k_axpy(o, sc[t], ckv + t * L, L);
  }
}

/* ---- RoPE on slices ------------------------------------------------------------------- */

void df_k_rope_slices(float *x, int64_t M, int64_t ld_row, int64_t n_heads, int64_t ld_head,
                      int64_t d, bool interleave, const int64_t *pos, const float *cos_t,
                      const float *sin_t) {
  assert(d % 2 == 0 && d <= 1024);
  int64_t h2 = d / 2;
  float tmp[1024];
  for (int64_t m = 0; m < M; m++) {
    const float *c = cos_t + pos[m] * h2, *s = sin_t + pos[m] * h2;
    for (int64_t h = 0; h < n_heads; h++) {
      float *v = x + m * ld_row + h * ld_head;
      if (interleave) { /* pairs (2i, 2i+1) -> (i, i + d/2), as apply_rotary_pos_emb_interleave */
        for (int64_t i = 0; i < h2; i++) {
          tmp[i] = v[2 * i];
          tmp[i + h2] = v[2 * i + 1];
        }
        memcpy(v, tmp, (size_t)d * sizeof(float));
      }
      for (int64_t i = 0; i < h2; i++) {
        float a = v[i], b = v[i + h2];
        float p0 = a * c[i], p1 = b * s[i], p2 = b * c[i], p3 = a * s[i];
        v[i] = p0 - p1;
        v[i + h2] = p2 + p3;
      }
    }
  }
}

/* ---- sigmoid group-limited router ----------------------------------------------------- */

/* Is `a` (value va) ranked before `b` (value vb): larger first, lower index on ties. */
static inline bool before(float va, int64_t a, float vb, int64_t b) {
  return va > vb || (va == vb && a < b);
}

void df_k_router_sigmoid_group(const float *logits, int64_t R, int64_t E, const float *bias,
                               int64_t n_group, int64_t topk_group, int64_t k, bool norm,
                               float scaling, float *work, int32_t *idx, float *wts) {
  assert(E % n_group == 0 && E / n_group >= 2 && topk_group >= 1 && topk_group <= n_group);
  assert(k >= 1 && k <= topk_group * (E / n_group) && E <= 65536);
  int64_t gs = E / n_group;
  float *sig = work, *choice = work + E, *gscore = work + 2 * E;
  bool *keep = (bool *)(work + 2 * E + n_group);
  for (int64_t r = 0; r < R; r++) {
    const float *l = logits + r * E;
    for (int64_t e = 0; e < E; e++) {
      sig[e] = 1.0f / (1.0f + expf(-l[e]));
      choice[e] = sig[e] + bias[e];
    }
    for (int64_t g = 0; g < n_group; g++) { /* sum of the group's two best choices */
      const float *cg = choice + g * gs;
      int64_t b1 = 0, b2 = -1;
      for (int64_t i = 1; i < gs; i++) {
        if (before(cg[i], i, cg[b1], b1)) {
          b2 = b1;
          b1 = i;
        } else if (b2 < 0 || before(cg[i], i, cg[b2], b2)) {
          b2 = i;
        }
      }
      gscore[g] = cg[b1] + cg[b2];
      keep[g] = false;
    }
    for (int64_t j = 0; j < topk_group; j++) {
      int64_t best = -1;
      for (int64_t g = 0; g < n_group; g++)
        if (!keep[g] && (best < 0 || before(gscore[g], g, gscore[best], best))) best = g;
      keep[best] = true;
    }
    int32_t *ir = idx + r * k;
    float *wr = wts + r * k;
    for (int64_t j = 0; j < k; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; e++) {
        if (!keep[e / gs]) continue;
        bool taken = false;
        for (int64_t t = 0; t < j; t++) taken |= ir[t] == (int32_t)e;
        if (taken) continue;
        if (best < 0 || before(choice[e], e, choice[best], best)) best = e;
      }
      ir[j] = (int32_t)best;
      wr[j] = sig[best];
    }
    if (norm) {
      float s = 0.0f;
      for (int64_t j = 0; j < k; j++) s += wr[j];
      s += 1e-20f;
      for (int64_t j = 0; j < k; j++) wr[j] /= s;
    }
    for (int64_t j = 0; j < k; j++) wr[j] *= scaling;
  }
}
