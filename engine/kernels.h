/* engine/kernels.h — batch-invariant CPU kernels (AVX2+FMA with an identical scalar path).
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
 * Activations are fp32; weights are read in their stored dtype (BF16, F16 or F32) and
 * widened to fp32 inside the kernel — no converted copy exists anywhere.
 * Threads: OpenMP, over output columns (linear) or (row, head) pairs (attention).
 * Does not own: memory (callers pass planned buffers), shapes (callers validate).
 */
#ifndef DF_ENGINE_KERNELS_H
#define DF_ENGINE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/safetensors.h"

/* Instruction set used by the kernels. */
typedef enum { DF_ISA_SCALAR = 0, DF_ISA_AVX2 = 1 } df_isa;

/* The ISA chosen at first use: AVX2 when the CPU has AVX2+FMA+F16C, else scalar. */
df_isa df_k_isa(void);
/* Force an ISA (tests compare paths). Requesting AVX2 on a CPU without it keeps scalar.
 * Returns the ISA now in effect. Not thread-safe: call before running kernels. */
df_isa df_k_set_isa(df_isa isa);
const char *df_k_isa_name(df_isa isa);

/* y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]); the fixed dot order above, bias added last.
 *   x    [M, K] fp32, row stride ldx (elements, >= K)
 *   w    [N, K] in wdt (BF16/F16/F32), contiguous rows — typically a view of the mmap
 *   bias [N] in wdt, or NULL
 *   y    [M, N] fp32, row stride ldy (elements, >= N); must not alias x
 * Row m of y depends only on row m of x (batch invariance). Asserts on bad dtype. */
void df_k_linear(const float *x, int64_t M, int64_t K, int64_t ldx, const void *w,
                 df_dtype wdt, int64_t N, const void *bias, float *y, int64_t ldy);

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

/* Router: probabilities = softmax(logits[r, :]) in fp32, then the top-k by probability
 * (ties: lower expert index first), optionally renormalised to sum 1 (norm_topk_prob),
 * as transformers' Qwen3MoeSparseMoeBlock.
 *   logits [R, E] fp32; idx [R, k] int32 (descending probability); wts [R, k] fp32. */
void df_k_router_softmax_topk(const float *logits, int64_t R, int64_t E, int64_t k, bool norm,
                              int32_t *idx, float *wts);

/* SwiGLU gate (Shazeer 2020): g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + exp(-x)).
 *   g, u [n] fp32; result in g. */
void df_k_silu_mul(float *g, const float *u, int64_t n);

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

/* Upper bound on OpenMP threads the kernels use (sizes attention scratch). */
int df_k_max_threads(void);

#endif
