/* engine/torch_shim.h — the tensor layer: libtorch tensors behind a small C API of
 * meaningful ops (linear, RMSNorm, RoPE, attention over a KV cache, router softmax + top-k,
 * SwiGLU expert FFN over a group of rows, embedding, argmax).
 *
 * Owns: tensor handles (an at::Tensor inside, so a tensor can later live on a CUDA device)
 * and the dispatch of each op. On the CPU every op runs the batch-invariant kernels of
 * engine/kernels.h on the tensors' memory: libtorch 1.13's own CPU bf16 matmul runs at
 * ~1 GFLOP/s on AVX2 machines and its fp32 GEMM gives a row different bits depending on
 * how many rows share the call, which would break DESIGN.md §4's batch invariance.
 * libtorch is also the independent oracle the kernel tests compare against
 * (df_t_ref_* below).
 *
 * Conventions: activations are fp32 and contiguous; an activation tensor is a planned
 * buffer of shape [max_rows, ...] and each op works on its first `rows` rows (or a row
 * range), so nothing is allocated per token. Weights keep their stored dtype (BF16, F16,
 * F32, F8_E4M3 with block scales) and wrap the checkpoint's mmap without a copy. No C++ exception crosses this
 * boundary: functions that can fail return NULL/-1 with a message.
 */
#ifndef DF_ENGINE_TORCH_SHIM_H
#define DF_ENGINE_TORCH_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "engine/kernels.h"

typedef struct df_t_tensor df_t_tensor;

/* Set the threads every op uses (libtorch intra-op and the OpenMP kernels); n <= 0 means
 * the online CPUs. libtorch otherwise picks its own default (1 on some builds) on first use.
 * Returns the count now in effect. */
int df_t_set_threads(int n);

/* Wrap existing memory (typically a safetensors mmap) as a tensor without copying.
 * `data` must stay valid and unchanged for the tensor's lifetime; the tensor never writes
 * to it. dtype BF16/F16/F32/I32, or F8_E4M3 (held as raw bytes; a linear weight needs
 * df_t_set_block_scale before use); ndim 1..8. Returns NULL (message in err) on a bad dtype
 * or shape. Free with df_t_destroy (frees only the handle). */
df_t_tensor *df_t_wrap(const void *data, df_dtype dt, int ndim, const int64_t *shape,
                       char *err, size_t errlen);

/* Attach block scales to an F8_E4M3 weight w [N, K] (DeepSeek-V3's `weight_scale_inv`):
 * scale F32 [ceil(N/block_n), ceil(K/block_k)]; the weight's value at (n, k) is
 * e4m3(w[n, k]) * scale[n / block_n, k / block_k] (kernels.h df_k_fp8_weight). `scale` is
 * not owned and must outlive w. Every op taking a weight then de-quantises inside its kernel.
 * Errors (-1, message): w not a 2-D F8_E4M3 tensor, scale not F32 of that shape, block sizes
 * < 1. */
int df_t_set_block_scale(df_t_tensor *w, const df_t_tensor *scale, int64_t block_n,
                         int64_t block_k, char *err, size_t errlen);

/* The block scales of an FP8 weight (NULL for other weights) and their block sizes (may be
 * NULL). What a remote expert holder needs besides the weight bytes. */
const df_t_tensor *df_t_block_scale(const df_t_tensor *w, int64_t *block_n, int64_t *block_k);

/* The kernels' view of a 2-D weight (data, dtype, row length, FP8 scales). */
df_k_weight df_t_kweight(const df_t_tensor *w);

/* A new zero-filled fp32 tensor of the given shape on the CPU; NULL on allocation failure
 * (message names the byte count). */
df_t_tensor *df_t_new_f32(int ndim, const int64_t *shape, char *err, size_t errlen);

/* Free the handle (and memory the shim allocated); sets *t to NULL; NULL-safe. */
void df_t_destroy(df_t_tensor **t);

df_dtype df_t_dtype(const df_t_tensor *t);
int df_t_ndim(const df_t_tensor *t);
int64_t df_t_size(const df_t_tensor *t, int dim); /* dim < ndim */
int64_t df_t_numel(const df_t_tensor *t);
/* Host pointer to the data (CPU tensors). Writable only for shim-allocated tensors. */
const void *df_t_data(const df_t_tensor *t);
float *df_t_f32(df_t_tensor *t); /* fp32 tensors the shim allocated; asserts otherwise */

/* y[r, :] = x[r, :] @ w^T (+ bias) for row0 <= r < row0 + rows (same rows of x and y).
 *   x [>= row0+rows, K] fp32; w [N, K] BF16/F16/F32, or F8_E4M3 with block scales
 *   (de-quantised in the kernel, df_k_linear_fp8); bias [N] same dtype or NULL (none for
 *   FP8); y [>= row0+rows, N] fp32, distinct from x. */
void df_t_linear(const df_t_tensor *x, int64_t row0, int64_t rows, const df_t_tensor *w,
                 const df_t_tensor *bias, df_t_tensor *y);

/* One product of df_t_linear_multi: rows [row0, row0 + rows) of x through w into the same
 * rows of y (as df_t_linear). */
typedef struct df_t_linear_op {
  const df_t_tensor *x;
  int64_t row0, rows;
  const df_t_tensor *w, *bias; /* bias may be NULL */
  df_t_tensor *y;
} df_t_linear_op;

/* Several independent linears in one parallel region (e.g. q/k/v projections); each output
 * bitwise equal to its df_t_linear. n <= 256; outputs distinct from every input. */
void df_t_linear_multi(const df_t_linear_op *ops, int n);

/* RMSNorm over vectors of length D = numel(w): x and y viewed as [n_vec, D], n_vec vectors
 * normalised (q_norm/k_norm pass rows*heads). y may equal x. Formula in kernels.h. */
void df_t_rmsnorm(const df_t_tensor *x, int64_t n_vec, const df_t_tensor *w, float eps,
                  df_t_tensor *y);

/* In-place RoPE on x viewed as [rows, n_heads, d]; pos [rows] positions;
 * cos_t, sin_t [n_pos, d/2] fp32 tables (df_rope_tables in engine/model.c builds them). */
void df_t_rope(df_t_tensor *x, int64_t rows, int64_t n_heads, const int64_t *pos,
               const df_t_tensor *cos_t, const df_t_tensor *sin_t);

/* Causal GQA attention: q [>= rows, n_head, d] (row r at position pos0 + r) over the layer's
 * cache kc, vc [n_kv, ctx, d]; out [>= rows, n_head, d]; scratch [n_threads, ctx] fp32.
 * Semantics in kernels.h (df_k_attention). */
void df_t_attention(const df_t_tensor *q, int64_t rows, int64_t pos0, int64_t n_head,
                    const df_t_tensor *kc, const df_t_tensor *vc, float scale, df_t_tensor *out,
                    df_t_tensor *scratch);

/* Same over rows [row0, row0 + rows) of q and out (rows of one sequence in a batch). */
void df_t_attention_rows(const df_t_tensor *q, int64_t row0, int64_t rows, int64_t pos0,
                         int64_t n_head, const df_t_tensor *kc, const df_t_tensor *vc,
                         float scale, df_t_tensor *out, df_t_tensor *scratch);

/* Router: softmax over logits [>= rows, E] in fp32, top-k (ties: lower index), optional
 * renormalisation. idx [rows, k] int32 and wts [rows, k] fp32 are host arrays. */
void df_t_router_topk(const df_t_tensor *logits, int64_t rows, int64_t k, bool norm,
                      int32_t *idx, float *wts);

/* SwiGLU FFN (transformers' Qwen3MoeMLP): y = down(silu(gate(x)) * up(x)) over rows
 * [row0, row0 + rows) of x and y.
 *   x, y [>= row0+rows, H] fp32; gate_w, up_w [I, H]; down_w [H, I] (stored dtype);
 *   g, u scratch [>= rows, I] fp32 (rows from 0). */
void df_t_swiglu_ffn(const df_t_tensor *x, int64_t row0, int64_t rows, const df_t_tensor *gate_w,
                     const df_t_tensor *up_w, const df_t_tensor *down_w, df_t_tensor *g,
                     df_t_tensor *u, df_t_tensor *y);

/* The SwiGLU FFN of several routed experts at once: group i runs rows
 * [offsets[i], offsets[i+1]) of x through expert (gate[i], up[i], down[i]) into the same rows
 * of y. Two parallel regions in all (gate+up of every group, then down of every group),
 * each element bitwise equal to df_t_swiglu_ffn's.
 *   x, y [>= offsets[n], H] fp32; g, u scratch [>= offsets[n], I] fp32 (same rows as x).
 * n <= 128. */
void df_t_swiglu_ffn_groups(const df_t_tensor *x, int n, const int64_t *offsets,
                            const df_t_tensor *const *gate, const df_t_tensor *const *up,
                            const df_t_tensor *const *down, df_t_tensor *g, df_t_tensor *u,
                            df_t_tensor *y);

/* MLA attention for rows [row0, row0 + rows) of one sequence (row r at position pos0 + r -
 * row0), absorbed form (kernels.h df_k_mla_attention), as DeepseekV3Attention:
 *   q      [>= row0+rows, n_head * (dn + dr)] fp32: per head the no-RoPE part then the
 *          RoPE part (already rotated)
 *   kv_b   kv_b_proj.weight [n_head * (dn + dv), L] (stored dtype, FP8 with scales): per head
 *          dn key rows then dv value rows
 *   ckv, kpe  the layer's latent cache [ctx, L] and shared RoPE keys [ctx, dr] fp32
 *   q_abs, lat scratch [>= rows, n_head * L] fp32 (rows from 0)
 *   scratch [df_k_max_threads(), ctx] fp32
 *   out    [>= row0+rows, n_head * dv] fp32 (the input of o_proj)
 * Steps: q_abs[h] = W_uk[h]^T q_nope[h] (df_k_linear_t, reduction over dn); latent
 * attention; out[h] = W_uv[h] lat[h] (df_k_linear_w). */
void df_t_mla_attention(const df_t_tensor *q, int64_t row0, int64_t rows, int64_t pos0,
                        int64_t n_head, int64_t dn, int64_t dr, int64_t dv,
                        const df_t_tensor *kv_b, const df_t_tensor *ckv, const df_t_tensor *kpe,
                        float scale, df_t_tensor *q_abs, df_t_tensor *lat, df_t_tensor *scratch,
                        df_t_tensor *out);

/* Embedding: y[i, :] = table[ids[i], :] as fp32; table [V, H]; caller checked ids < V. */
void df_t_embed(const int32_t *ids, int64_t n, const df_t_tensor *table, df_t_tensor *y);

/* Index of the largest value of row `row` of x [>= row+1, N] (lowest index on ties). */
int64_t df_t_argmax(const df_t_tensor *x, int64_t row);

/* ---- libtorch oracles (tests): the same ops computed with at:: operators in float64 and
 * rounded to fp32. Return 0, or -1 with a message if libtorch throws. ---- */

/* out [rows, N] fp32 host buffer. FP8 weights: each weight de-quantised to fp32 as the kernel
 * does (e4m3 * scale, rounded once), then the float64 matmul. */
int df_t_ref_linear(const df_t_tensor *x, int64_t rows, const df_t_tensor *w,
                    const df_t_tensor *bias, float *out, char *err, size_t errlen);
/* out [rows, n_head, d] fp32 host buffer; same arguments as df_t_attention. */
int df_t_ref_attention(const df_t_tensor *q, int64_t rows, int64_t pos0, int64_t n_head,
                       const df_t_tensor *kc, const df_t_tensor *vc, float scale, float *out,
                       char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
