/* engine/kernels/kernels.h — batch-invariant CPU kernels (AVX2+FMA with an identical scalar path).
 *
 * Owns: the numeric inner loops of the CPU forward pass. Every kernel here computes each
 * output element with a reduction order that depends only on the reduction length, never
 * on how many rows are processed together, how the work is tiled or how many threads run.
 * So a position's logits are bitwise identical whether it is computed alone (decode), in a
 * verify batch, in a prefill chunk or next to another request's rows (DESIGN.md §4).
 *
 * The fixed order of every dot product of length K: eight fp32 lanes, lane l accumulating
 * x[k]*w[k] for k ≡ l (mod 8) over k < K - K%8 in ascending k with fused multiply-add;
 * then lanes reduced as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); then the K%8 tail added in
 * ascending k with fused multiply-add. The scalar path reproduces this bit for bit (fmaf),
 * so AVX2 and scalar builds agree exactly.
 *
 * Activations are fp32; weights are read in their stored dtype (BF16, F16 or F32; F8_E4M3
 * with block scales in kernels_fp8.c; MXFP4 = packed E2M1 + E8M0 scales in kernels_mxfp4.c)
 * and widened to fp32 inside the kernel — no converted copy exists anywhere.
 * Threads: OpenMP, over output columns (linear) or (row, head) pairs (attention).
 * Does not own: memory (callers pass planned buffers), shapes (callers validate).
 */
#ifndef DF_ENGINE_KERNELS_H
#define DF_ENGINE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/kernels/dispatch.h"
#include "engine/safetensors.h"

/* y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]); the fixed dot order above, bias added last.
 *   x    [M, K] fp32, row stride ldx (elements, >= K)
 *   w    [N, K] in wdt (BF16/F16/F32), contiguous rows — typically a view of the mmap
 *   bias [N] in wdt, or NULL
 *   y    [M, N] fp32, row stride ldy (elements, >= N); must not alias x
 * Row m of y depends only on row m of x (batch invariance). Asserts on bad dtype. */
void df_k_linear(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,
                 df_dtype wdt, int64_t N, const void *bias, float *y, int64_t ldy);

/* One matrix product of a df_k_linear_multi call; fields as df_k_linear's arguments.
 * FP8 weights (wdt F8_E4M3): w is the matrix [N, K] of E4M3 bytes and scale its block scales
 * [ceil(N/bn), scale_ld = ceil(K/bk)] fp32, as df_k_linear_fp8 with n0 = 0; bias NULL.
 * MXFP4 weights (wdt F4): w is the packed matrix [N, K/2] bytes of the logical [N, K]
 * (K % 32 == 0) and mx_scale its E8M0 bytes [N, scale_ld >= K/32], as df_k_linear_mxfp4 with
 * n0 = 0; bias NULL; bn, bk unused.
 * Other dtypes leave scale NULL (the zero-initialised tail of the struct). */
typedef struct df_k_linear_job {
  const float *x;
  int64_t M, K, ldx;
  const void *w;
  df_dtype wdt;
  int64_t N;
  const void *bias;
  float *y;
  int64_t ldy;
  union {
    const float *scale;        /* FP8 only */
    const uint8_t *mx_scale;   /* MXFP4 (F4) only */
  };
  int64_t scale_ld, bn, bk;    /* scale_ld: FP8 and MXFP4; bn, bk: FP8 only */
} df_k_linear_job;

/* df_k_linear without bias computed by the calling thread alone (no parallel region): for a
 * caller that already shares out its own work among threads. Same values as df_k_linear. */
void df_k_linear_serial(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,
                        df_dtype wdt, int64_t N, float *y, int64_t ldy);

/* Several independent products in ONE parallel region (their column tiles are shared out
 * among the threads together): small matrices such as a MoE layer's experts pay one
 * fork/join instead of one each. BF16/F16/F32 jobs compute each output element exactly as
 * df_k_linear, FP8 jobs exactly as df_k_linear_fp8 (same decode, scale rounding and lane
 * order; the tiles are df_k_linear_fp8_cols), MXFP4 jobs exactly as df_k_linear_mxfp4 (tiles
 * df_k_linear_mxfp4_cols). Jobs of different dtypes may be mixed.
 * Outputs must not alias each other or any input. */
void df_k_linear_multi(const df_k_linear_job *jobs, int n_jobs);

/* RMSNorm (Zhang & Sennrich 2019) as transformers' Qwen3RMSNorm computes it in fp32:
 *   y[r, :] = w * (x[r, :] * (1 / sqrtf(mean(x[r, :]^2) + eps)))
 *   x, y [R, D] fp32 contiguous (y may equal x); w [D] in wdt. */
void df_k_rmsnorm(const float *x, int64_t R, int64_t D, const void *w, df_dtype wdt, float eps,
                  float *y);

/* Rotary position embedding (Su et al. 2021), rotate_half convention of transformers'
 * apply_rotary_pos_emb: for i < d/2, with c = cos[pos, i], s = sin[pos, i]:
 *   x'[i] = x[i]*c - x[i+d/2]*s;  x'[i+d/2] = x[i+d/2]*c + x[i]*s.
 *   x   [M, n_heads, d] fp32, in place
 *   pos [M] token positions (>= 0, < table rows)
 *   cos_t, sin_t [n_pos, d/2] fp32 (attention scaling already folded in, as HF does). */
void df_k_rope(float *x, int64_t M, int64_t n_heads, int64_t d, const int64_t *pos,
               const float *cos_t, const float *sin_t);

/* Causal GQA attention over a KV cache, softmax in fp32:
 *   q     [M, n_head, d] fp32 (already normed + rotated); row m is at position pos0 + m
 *         and attends to cache positions 0..pos0+m inclusive
 *   kc,vc [n_kv, ctx, d] fp32 cache (positions < pos0+M filled)
 *   out   [M, n_head, d] fp32
 *   scratch [n_threads, ctx] fp32 where n_threads = df_k_max_threads()
 * Query head h uses kv head h / (n_head / n_kv). scores = scale * q·k (fixed dot order);
 * p = exp(s - max) / sum (sum in ascending position); out = sum_t p_t * v_t ascending t. */
void df_k_attention(const float *q, int64_t M, int64_t pos0, int64_t n_head, int64_t n_kv,
                    int64_t d, int64_t ctx, const float *kc, const float *vc, float scale,
                    float *out, float *scratch);

/* The softmax of df_k_attention in place over s [n] fp32: s[t] *= scale, the max over t < n,
 * s[t] = expf(s[t] - max) with their sum in ascending t, then s[t] *= 1 / sum. Every attention
 * path (per row, blocked, MLA) takes its probabilities from here. n >= 1. */
void df_k_attn_softmax(float *s, int64_t n, float scale);

/* df_k_attention in blocks on AVX2 and AVX-512, bit for bit (df_k_attention takes it for every
 * call it can): the query rows of the heads that share a KV head, stacked position by position
 * in blocks of up to 48 rows; their scores through df_k_linear_serial (F32 "weights" = the
 * cached keys, read once per block; the same lane order as df_k_dot), skipping key tiles of 8
 * that no row of the block sees; df_k_attn_softmax; then P V with the probabilities of 4 rows
 * against 64 value columns in registers (2 x 32 on AVX2; per element df_k_axpy's chain).
 * Arguments as df_k_attention, no scratch (a per-thread buffer of about 48 x (pos0 + M + d)
 * floats, kept). Returns false, with out unspecified, when the ISA is below AVX2, d is not a
 * multiple of 16 or the buffer cannot be allocated: the caller computes the product the other
 * way. */
bool df_k_attention_gemm(const float *q, int64_t M, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t d, int64_t ctx, const float *kc, const float *vc, float scale,
                         float *out);

/* Router: probabilities = softmax(logits[r, :]) in fp32, then the top-k by probability
 * (ties: lower expert index first), optionally renormalised to sum 1 (norm_topk_prob),
 * as transformers' Qwen3MoeSparseMoeBlock.
 *   logits [R, E] fp32; idx [R, k] int32 (descending probability); wts [R, k] fp32. */
void df_k_router_softmax_topk(const float *logits, int64_t R, int64_t E, int64_t k, bool norm,
                              int32_t *idx, float *wts);

/* SwiGLU gate (Shazeer 2020): g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + exp(-x)).
 *   g, u [n] fp32; result in g. */
void df_k_silu_mul(float *g, const float *u, int64_t n);

/* The activation of a gated MLP: SwiGLU (kind DF_K_ACT_SILU, df_k_silu_mul) or SiTU-GLU (Kimi
 * K3's `SituAndMul`, published modeling_kimi_linear.py; docs/K3.md §3.6). */
enum { DF_K_ACT_SILU = 0, DF_K_ACT_SITU = 1 };
typedef struct df_k_act {
  int kind;       /* DF_K_ACT_SILU or DF_K_ACT_SITU */
  float beta;     /* SiTU gate-branch beta (> 0) */
  float beta_lin; /* SiTU up-branch soft cap (> 0), or 0: the up branch passes unchanged */
} df_k_act;

/* Gated activation in place: g[i] = act(g[i], u[i]) for i < n. act NULL or SILU: as
 * df_k_silu_mul. SITU, in fp32 with the operation order of the reference:
 *   a = (beta * tanhf(g / beta)) * (1 / (1 + expf(-g)));   u' = beta_lin * tanhf(u / beta_lin)
 *   g[i] = a * u'           (u' = u when beta_lin == 0)
 * Divisions, not multiplications by 1/beta (1/25 is inexact). tanhf and expf are the C
 * library's on every ISA and code path, so the result never depends on which one ran. */
void df_k_glu_act(float *g, const float *u, int64_t n, const df_k_act *act);

/* df_k_glu_act on `rows` rows: g[r * ld + i] = act(g[r * ld + i], u[r * ld + i]) for r < rows,
 * i < n (ld >= n). The rows are cut into chunks of 512 elements shared among the kernel
 * threads when there are at least 4,096 elements; every element's result is the serial one
 * (elements are independent). g, u fp32, caller-owned; no errors. */
void df_k_glu_act_rows(float *g, const float *u, int64_t rows, int64_t n, int64_t ld,
                       const df_k_act *act);

/* Rows of a GLU's gate and up products that df_k_glu_ffn_multi activates: g [rows, n] (row
 * stride ld) becomes act(g) * up'(u) in place, as df_k_glu_act_rows. */
typedef struct df_k_glu_span {
  float *g;
  const float *u;
  int64_t rows, n, ld;
} df_k_glu_span;

/* A set of gated feed-forward networks (a MoE layer's experts) in ONE parallel region: the
 * products gate_up[0..n_gu) (df_k_linear_multi), then the activation of spans[0..n_spans)
 * (df_k_glu_act_rows), then the products down[0..n_down), each phase shared out among the
 * threads and ended by a barrier. The caller wires them (the down jobs read the activated g).
 * Every element is computed exactly as by those three calls in turn, so the results are
 * theirs bit for bit; what changes is one fork/join instead of three, which matters where the
 * threads have gone to sleep between calls (a df-node request after a network wait). At most
 * 256 jobs / spans each; outputs of a phase must not alias its inputs. No errors. */
void df_k_glu_ffn_multi(const df_k_linear_job *gate_up, int n_gu, const df_k_glu_span *spans,
                        int n_spans, const df_k_act *act, const df_k_linear_job *down,
                        int n_down);

/* Embedding lookup: y[i, :] = table[ids[i], :] widened to fp32.
 *   table [V, D] in dt; ids [n] (caller checked 0 <= id < V); y [n, D] fp32. */
void df_k_embed(const int32_t *ids, int64_t n, const void *table, df_dtype dt, int64_t D,
                float *y);

/* y[i] += x[i] for i < n. */
void df_k_add(float *y, const float *x, int64_t n);

/* y[i] += a * x[i] for i < n (fused multiply-add per element). */
void df_k_axpy(float *y, float a, const float *x, int64_t n);

/* Dot product of two fp32 vectors of length n in the fixed order above. */
float df_k_dot(const float *a, const float *b, int64_t n);

/* Widen one value of a stored dtype to fp32 (BF16, F16, F32). */
float df_k_to_f32(const void *p, df_dtype dt, int64_t i);


/* ---- FP8 block-scaled weights (engine/kernels/kernels_fp8.c) ----------------------------------- */

/* The exact value of an OCP E4M3FN byte (bias 7, subnormals; the NaN codes 0x7F/0xFF decode
 * as +-480, see kernels_fp8.c). */
float df_k_fp8_e4m3_to_f32(uint8_t b);

/* Weight (n, k) of an FP8 block-scaled matrix as the kernels use it: e4m3(w[n*K + k]) *
 * scale[(n / bn) * scale_ld + k / bk], the exact product rounded once to fp32. */
float df_k_fp8_weight(const uint8_t *w, const float *scale, int64_t scale_ld, int64_t bn,
                      int64_t bk, int64_t K, int64_t n, int64_t k);

/* y[m, j] = sum_k x[m, k] * W(n0 + j, k) for j < N, W(n, k) = df_k_fp8_weight(...): rows
 * n0 .. n0+N-1 of an F8_E4M3 matrix [N_total, K] with block scales (DeepSeek-V3's
 * `weight_scale_inv`, F32 [ceil(N_total/bn), scale_ld = ceil(K/bk)]), de-quantised inside
 * the kernel — no widened copy exists. Same lane order as df_k_linear; AVX2 (+F16C) and
 * scalar agree bit for bit; row m of y depends only on row m of x.
 *   x [M, K] fp32, row stride ldx; w the matrix's first byte; y [M, N], row stride ldy. */
void df_k_linear_fp8(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w,
                     const float *scale, int64_t scale_ld, int64_t bn, int64_t bk, int64_t n0,
                     int64_t N, float *y, int64_t ldy);

/* Rows of a product at which df_k_linear and df_k_linear_multi compute BF16 / F16 / F32 weights
 * with df_k_linear_gemm_cols (where the CPU has AVX-512), and its tile width in weight rows.
 * Below it the 8 x 6 blocks of the few-row path are as fast (Zen 5, 2 threads, warm caches:
 * 2048 x 1024 BF16 at 16-20 rows 255-315 GFLOP/s either way; 24 rows 343 against 334; 1024 x 256,
 * an expert's down projection, at 24-32 rows 178-246 against 169-184); both give the same bits. */
#define DF_K_GEMM_MIN_ROWS 24
#define DF_K_GEMM_NR 8

/* Columns [n0, n0 + nr) of y = x w^T (+ bias) for all M rows, nr <= DF_K_GEMM_NR: the prefill
 * tile of df_k_linear for BF16 / F16 / F32 weights w [N, K] (bias [N] in the same dtype or
 * NULL), x [M, K] fp32 (row stride ldx), y [M, ldy] fp32 (the tile's columns are written at
 * y + n0). A register-blocked GEMM (kernels_gemm.c) whose every element is computed with the
 * operations of df_k_linear's lane order, so the values are df_k_linear's bit for bit. Uses a
 * per-thread buffer of 32 K bytes. Returns false, writing nothing, when the ISA in use is below
 * AVX-512 or the buffer cannot be allocated: the caller computes the tile another way. */
bool df_k_linear_gemm_cols(df_dtype dt, const float *x, int64_t M, int64_t K, int64_t ldx,
                           const void *w, int64_t n0, int nr, const void *bias, float *y,
                           int64_t ldy);

/* Columns [0, nr) of y = weight rows n0 .. n0+nr-1 of df_k_linear_fp8 for all M rows, nr <= 4:
 * the unit of work df_k_linear_fp8 and df_k_linear_multi share out. Each element is
 * computed by the same instructions whatever the tile, so results equal df_k_linear_fp8's
 * bit for bit. Arguments as df_k_linear_fp8; y points at the tile's first column. */
void df_k_linear_fp8_cols(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w,
                          const float *scale, int64_t scale_ld, int64_t bn, int64_t bk,
                          int64_t n0, int nr, float *y, int64_t ldy);

/* ---- MXFP4 weights (engine/kernels/kernels_mxfp4.c) -------------------------------------------
 * OCP Microscaling Formats (MX) Specification v1.0, MXFP4 (E2M1 elements, one E8M0 scale per 32),
 * in the layout of compressed-tensors' "mxfp4-pack-quantized" packer (Kimi K3's routed experts;
 * docs/K3.md §4). A logical weight W [N, K], K % 32 == 0, is stored as
 *   packed [N, K/2] U8: byte (n, i) holds column 2i in bits 0-3 and column 2i+1 in bits 4-7;
 *   scale  [N, scale_ld >= K/32] U8 (E8M0): byte (n, g) scales columns 32g .. 32g+31.
 * Nibble c: sign = bit 3, magnitude T[c & 7], T = {0, 0.5, 1, 1.5, 2, 3, 4, 6} (code 8 is
 * -0.0, sign kept); scale byte s: 2^(s - 127) (s = 0: the subnormal 2^-127).
 *   W(n, k) = (-1)^sign * (T[mag] * 2^(s - 127))
 * with the product rounded once to fp32: it is exact (the value itself) for every s <= 252,
 * subnormal products included (no FTZ/DAZ anywhere); for s = 253, 254 a magnitude >= 2^128
 * rounds to +-inf, as any fp32 conversion of it would. s = 255 is NaN in MX: a loader must
 * refuse it (df_k_mxfp4_find_nan_scale); the kernels assume it absent. */

/* W(n, k) of an MXFP4 matrix as the kernels use it (formula above).
 *   packed [.., K/2] U8, scale [.., scale_ld] U8 (E8M0); K % 32 == 0; 0 <= k < K. */
float df_k_mxfp4_weight(const uint8_t *packed, const uint8_t *scale, int64_t scale_ld, int64_t K,
                        int64_t n, int64_t k);

/* Index of the first E8M0 NaN byte (255) among scale[0 .. n), or -1 when there is none. */
int64_t df_k_mxfp4_find_nan_scale(const uint8_t *scale, int64_t n);

/* y[m, j] = sum_k x[m, k] * W(n0 + j, k) for j < N, W(n, k) = df_k_mxfp4_weight(...): rows
 * n0 .. n0+N-1 of an MXFP4 matrix [N_total, K], de-quantised inside the kernel (the packed
 * bytes are read once per tile, never widened into memory). Order of the sum (its own, not
 * df_k_linear's 8 lanes): 32 chains, s_c = the fused multiply-add chain from +0 over the
 * columns k = c, c + 32, c + 64, ... in increasing k (c = column within its scale group);
 * then r_l = s_l + s_(l+16), t_l = r_l + r_(l+8) (l < 8), y = ((t0 + t4) + (t2 + t6)) +
 * ((t1 + t5) + (t3 + t7)). It depends only on K, so AVX-512, AVX2 and scalar agree bit for
 * bit, at any thread count and batch shape; row m of y depends only on row m of x. (Versus
 * df_k_linear over an F32 copy of the de-quantised matrix: the same sum in another order.)
 * Threads: OpenMP over tiles of 4 weight rows.
 *   x [M, K] fp32, row stride ldx >= K; packed, scale the matrix's first bytes (row stride
 *   K/2 and scale_ld >= K/32); y [M, N] fp32, row stride ldy >= N, not aliasing x. */
void df_k_linear_mxfp4(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *packed,
                       const uint8_t *scale, int64_t scale_ld, int64_t n0, int64_t N, float *y,
                       int64_t ldy);

/* Columns [0, nr) of y = weight rows n0 .. n0+nr-1 of df_k_linear_mxfp4 for all M rows,
 * nr <= 4: the unit of work df_k_linear_mxfp4 and df_k_linear_multi share out (each element
 * is computed by the same instructions whatever the tile). Arguments as df_k_linear_mxfp4;
 * y points at the tile's first column. */
void df_k_linear_mxfp4_cols(const float *x, int64_t M, int64_t K, int64_t ldx,
                            const uint8_t *packed, const uint8_t *scale, int64_t scale_ld,
                            int64_t n0, int nr, float *y, int64_t ldy);

/* ---- DeepSeek-V3 family (engine/kernels/kernels_deepseek.c) ------------------------------------ */

/* A weight matrix [N_total, K] in its stored dtype, for kernels that address sub-blocks.
 * FP8 (dt F8_E4M3): scale [ceil(N_total/bn), scale_ld] fp32 block scales; NULL otherwise.
 * MXFP4 (dt F4): data the packed bytes [N_total, K/2] of the logical [N_total, K], mx_scale
 * the E8M0 bytes [N_total, scale_ld] (bn = 1, bk = 32; see kernels_mxfp4.c below). */
typedef struct df_k_weight {
  const void *data;
  df_dtype dt; /* BF16, F16, F32, F8_E4M3 or F4 (MXFP4) */
  int64_t K;   /* logical row length */
  union {
    const float *scale;      /* FP8 */
    const uint8_t *mx_scale; /* MXFP4 */
  };
  int64_t scale_ld, bn, bk;
} df_k_weight;

/* y[m, j] = sum_k x[m, k] * W(n0 + j, k), j < N: rows n0.. of any df_k_weight, through
 * df_k_linear (contiguous rows), df_k_linear_fp8 or df_k_linear_mxfp4. */
void df_k_linear_w(const float *x, int64_t M, int64_t ldx, const df_k_weight *w, int64_t n0,
                   int64_t N, float *y, int64_t ldy);

/* Transposed linear: y[m, j] = sum_{i < R} x[m, i] * W(r0 + i, c0 + j) for j < N — the
 * reduction runs down R rows of W (MLA absorbs kv_b_proj's key rows into the query with it).
 * Fixed order: acc = 0, then acc = fma(x[m, i], W, acc) for ascending i (depends only on R).
 *   x [M, R] fp32, row stride ldx; y [M, N] fp32, row stride ldy; c0 + N <= w->K. */
void df_k_linear_t(const float *x, int64_t M, int64_t R, int64_t ldx, const df_k_weight *w,
                   int64_t r0, int64_t c0, int64_t N, float *y, int64_t ldy);

/* MLA attention over a compressed (latent) cache, absorbed form (DeepSeek-V2 paper §2.1.2;
 * equal in exact arithmetic to transformers' DeepseekV3Attention, which expands keys and
 * values per head): for query row m (position pos0 + m) and head h,
 *   s_t = (dot(q_lat[m, h], ckv[t]) + dot(q_rope[m, h], kpe[t])) * scale,  t <= pos0 + m
 *   out[m, h] = sum_t softmax(s)_t * ckv[t]   (the latent; kv_b_proj's value rows follow)
 * dots in df_k_dot order, softmax as df_k_attention (max, exp, sum ascending t), output
 * accumulated by df_k_axpy in ascending t.
 *   q_lat [M, n_head, L]; q_rope: head h of row m at q_rope + m*ld_rope + h*ld_rope_head;
 *   ckv [ctx, L], kpe [ctx, dr] (positions < pos0 + M filled); out [M, n_head, L];
 *   scratch [df_k_max_threads(), ctx]. */
void df_k_mla_attention(const float *q_lat, const float *q_rope, int64_t ld_rope,
                        int64_t ld_rope_head, int64_t M,
                        int64_t pos0, int64_t n_head, int64_t L, int64_t dr, int64_t ctx,
                        const float *ckv, const float *kpe, float scale, float *out,
                        float *scratch);

/* df_k_mla_attention in blocks on AVX2 and AVX-512, bit for bit, as df_k_attention_gemm with
 * every head's rows stacked against the one latent cache: the two score dots through
 * df_k_linear's tiles (latent against ckv, RoPE part against kpe), added, then scaled; P V
 * against the latent rows. Arguments as df_k_mla_attention, no scratch. Returns false, with out
 * unspecified, when the ISA is below AVX2, L is not a multiple of 16 or the per-thread buffer
 * cannot be allocated. */
bool df_k_mla_attention_gemm(const float *q_lat, const float *q_rope, int64_t ld_rope,
                             int64_t ld_rope_head, int64_t M, int64_t pos0, int64_t n_head,
                             int64_t L, int64_t dr, const float *ckv, const float *kpe,
                             float scale, float *out);

/* RoPE (df_k_rope's formula) on slices: head h of row m is the d floats at
 * x + m*ld_row + h*ld_head. interleave: the slice's pairs (2i, 2i+1) are first moved to
 * (i, i + d/2) (transformers' apply_rotary_pos_emb_interleave), and the slice keeps that
 * order. d even, <= 1024. cos_t, sin_t [n_pos, d/2]. */
void df_k_rope_slices(float *x, int64_t M, int64_t ld_row, int64_t n_heads, int64_t ld_head,
                      int64_t d, bool interleave, const int64_t *pos, const float *cos_t,
                      const float *sin_t);

/* Router of transformers' DeepseekV3TopkRouter (topk_method noaux_tc), in fp32:
 *   s = sigmoid(logits[r]) = 1 / (1 + expf(-l)); choice = s + bias (selection only);
 *   group score = sum of the two best choices in each of n_group equal groups; the
 *   topk_group best groups are kept; idx = the k best choices among their experts
 *   (descending; ties: lower index, for groups and experts); w = s[idx], divided by
 *   (sum_j w_j + 1e-20) when norm, times `scaling` (routed_scaling_factor).
 * Experts of dropped groups are never chosen (DeepSeek's inference code masks them with
 * -inf; transformers' 0.0 gives the same choice whenever the k-th choice is positive).
 *   logits [R, E]; bias [E] fp32; work [2E + 2 n_group] fp32 scratch;
 *   idx, wts [R, k] (router order: descending choice). */
void df_k_router_sigmoid_group(const float *logits, int64_t R, int64_t E, const float *bias,
                               int64_t n_group, int64_t topk_group, int64_t k, bool norm,
                               float scaling, float *work, int32_t *idx, float *wts);

#endif
