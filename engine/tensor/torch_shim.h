/* engine/tensor/torch_shim.h — the tensor layer: libtorch tensors behind a small C API of
 * meaningful ops (linear, RMSNorm, RoPE, attention over a KV cache, router softmax + top-k,
 * SwiGLU expert FFN over a group of rows, embedding, argmax).
 *
 * Owns: tensor handles (an at::Tensor inside, so a tensor can later live on a CUDA device)
 * and the dispatch of each op. On the CPU every op runs the batch-invariant kernels of
 * engine/kernels/kernels.h on the tensors' memory: libtorch 1.13's own CPU bf16 matmul runs at
 * ~1 GFLOP/s on AVX2 machines and its fp32 GEMM gives a row different bits depending on
 * how many rows share the call, which would break DESIGN.md §4's batch invariance.
 * libtorch is also the independent oracle the kernel tests compare against
 * (df_t_ref_* below).
 *
 * Conventions: activations are fp32 and contiguous; an activation tensor is a planned
 * buffer of shape [max_rows, ...] and each op works on its first `rows` rows (or a row
 * range), so nothing is allocated per token. Weights keep their stored dtype (BF16, F16,
 * F32, F8_E4M3 with block scales, MXFP4 = F4 with E8M0 scales) and wrap the checkpoint's mmap
 * without a copy. No C++ exception crosses this
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

#include "engine/kernels/kernels.h"

typedef struct df_t_tensor df_t_tensor;

/* Set the threads every op uses (libtorch intra-op and the OpenMP kernels); n <= 0 means
 * the online CPUs. libtorch otherwise picks its own default (1 on some builds) on first use.
 * Process-wide: it holds for ops called from any thread, not only the caller (kernels.h
 * df_k_set_threads). Returns the count now in effect (>= 1); no errors. */
int df_t_set_threads(int n);

/* Wrap existing memory (typically a safetensors mmap) as a tensor without copying.
 * `data` must stay valid and unchanged for the tensor's lifetime; the tensor never writes
 * to it. dtype BF16/F16/F32/I32/U8, or F8_E4M3 (held as raw bytes; a linear weight needs
 * df_t_set_block_scale before use), or F4: an MXFP4 weight, ndim 2 and `shape` its LOGICAL
 * [N, K] (K even; df_t_size(t, 1) == K, df_t_numel == N*K) over data = the packed bytes
 * [N, K/2] (low nibble = even column, kernels.h "MXFP4 weights"), never widened; it needs
 * df_t_set_mx_scale before use. ndim 1..8. Returns NULL (message in err) on a bad dtype or
 * shape. Free with df_t_destroy (frees only the handle). */
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

/* Attach E8M0 scales to an F4 (MXFP4) weight w of logical shape [N, K] (compressed-tensors'
 * `weight_scale` next to `weight_packed`): scale U8 [N, K/32], byte (n, g) = 2^(s - 127) for
 * columns 32g .. 32g+31 (OCP MX v1.0; value formula in kernels.h df_k_mxfp4_weight). `scale`
 * is not owned and must outlive w; its bytes are not read here (a loader refuses the NaN
 * byte 255 itself, kernels.h df_k_mxfp4_find_nan_scale). Every op taking a weight then
 * decodes inside its kernel. Errors (-1, message): w not a 2-D F4 tensor, K % 32 != 0, scale
 * not U8 [N, K/32]. */
int df_t_set_mx_scale(df_t_tensor *w, const df_t_tensor *scale, char *err, size_t errlen);

/* Whether an F4 (MXFP4) weight's E8M0 scales are free of the NaN byte 255, scanned on the
 * first call and remembered in the handle (a loader of a 1.5 TB checkpoint must not read
 * every expert's scales up front; the expert backends call this before a weight's first
 * use). 0: not F4, or no 255; -1: *row and *group (may be NULL) give the first 255. Not
 * thread-safe for one handle (the forward thread owns it). */
int df_t_mx_scale_check(const df_t_tensor *w, int64_t *row, int64_t *group);

/* The scales of a quantised weight (NULL for other weights) and their block sizes (may be
 * NULL): FP8's F32 block scales and their [block_n, block_k]; MXFP4's U8 E8M0 scales with
 * block [1, 32]. What a remote expert holder needs besides the weight bytes. */
const df_t_tensor *df_t_block_scale(const df_t_tensor *w, int64_t *block_n, int64_t *block_k);

/* Bytes of a tensor as stored, its scales included: numel * bits / 8 (F4: N*K/2 packed
 * bytes) plus the attached FP8 (F32) or MXFP4 (U8) scale tensor's bytes. */
uint64_t df_t_stored_bytes(const df_t_tensor *w);

/* The kernels' view of a 2-D weight (data, dtype, row length, FP8 or MXFP4 scales). */
df_k_weight df_t_kweight(const df_t_tensor *w);

/* A new zero-filled fp32 tensor of the given shape on the CPU; NULL on allocation failure
 * (message names the byte count). From 1 MiB up its memory is anonymous pages (mmap), zero
 * and resident only once written: a KV cache sized for the whole context costs the memory of
 * the positions it holds. */
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
 *   (de-quantised in the kernel, df_k_linear_fp8), or F4 (MXFP4) with E8M0 scales
 *   (df_k_linear_mxfp4); bias [N] same dtype or NULL (none for FP8 and MXFP4);
 *   y [>= row0+rows, N] fp32, distinct from x. */
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
 * cos_t, sin_t [n_pos, d/2] fp32 tables (engine/layers/rope.h df_rope_tables_new builds them). */
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

/* df_t_swiglu_ffn with the gated activation `act` (kernels.h df_k_glu_act; NULL = SiLU):
 * y = down(act(gate(x), up(x))). SiTU-GLU is Kimi K3's dense, shared and routed expert MLP
 * (docs/K3.md §3.6). Same shapes; every element bitwise equal whichever of the two functions
 * (and whichever group split) computed it. */
void df_t_glu_ffn(const df_t_tensor *x, int64_t row0, int64_t rows, const df_t_tensor *gate_w,
                  const df_t_tensor *up_w, const df_t_tensor *down_w, const df_k_act *act,
                  df_t_tensor *g, df_t_tensor *u, df_t_tensor *y);
void df_t_glu_ffn_groups(const df_t_tensor *x, int n, const int64_t *offsets,
                         const df_t_tensor *const *gate, const df_t_tensor *const *up,
                         const df_t_tensor *const *down, const df_k_act *act, df_t_tensor *g,
                         df_t_tensor *u, df_t_tensor *y);

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

/* ---- devices ----------------------------------------------------------------------------
 * Where a model computes (docs/GPU.md). DF_T_DEV_CPU is the engine's own batch-invariant
 * kernels above and the default; the other kinds run the "torch compute path" (df_tm_*
 * below): the same forward in libtorch operators on an at::Device. */
typedef enum df_t_device_kind {
  DF_T_DEV_CPU = 0,       /* own kernels on the host (default) */
  DF_T_DEV_CUDA = 1,      /* torch path on CUDA device `index` (needs a CUDA libtorch) */
  DF_T_DEV_AUTO = 2,      /* parse result only: CUDA device 0 if usable, else the CPU */
  DF_T_DEV_TORCH_CPU = 3, /* torch path with at::kCPU: the tests' stand-in for a device */
} df_t_device_kind;

typedef struct df_t_device {
  df_t_device_kind kind;
  int index; /* CUDA device ordinal, 0.. ; 0 for the others */
} df_t_device;

/* Parse a --device value: "cpu", "cuda", "cuda:N" (0 <= N < 64), "auto", "torch-cpu".
 * Syntax only (no device is touched). -1 with a message listing the accepted values. */
int df_t_device_parse(const char *s, df_t_device *out, char *err, size_t errlen);

/* "cpu", "cuda:0", "torch-cpu", "auto" into buf (>= 16 bytes); returns buf. */
const char *df_t_device_name(const df_t_device *d, char *buf, size_t cap);

/* Whether this process's libtorch can run on CUDA (torch::cuda::is_available(): a CUDA
 * build of libtorch, a driver and a device), and how many devices it sees. CPU-only
 * libtorch (Debian's 1.13) answers false / 0. */
bool df_t_cuda_available(void);
int df_t_cuda_device_count(void);

/* What `want` means on this machine: AUTO becomes CUDA 0 when df_t_cuda_available(), else
 * CPU; CUDA whose libtorch has no CUDA, or whose index is not a device, becomes CPU.
 * *got receives the result; when it differs from what was asked, one line saying why and
 * that the CPU is used goes to note (note[0] = 0 otherwise). Never fails. */
void df_t_device_resolve(const df_t_device *want, df_t_device *got, char *note, size_t cap);

/* A zero-filled fp32 tensor on device `dev` (NULL or DF_T_DEV_CPU / TORCH_CPU: host
 * memory, as df_t_new_f32). Device tensors are for the torch path only: df_t_f32 and
 * df_t_data return device pointers for them. NULL + message (bytes, device) on failure. */
df_t_tensor *df_t_new_f32_on(const df_t_device *dev, int ndim, const int64_t *shape, char *err,
                             size_t errlen);

/* ---- the torch compute path ----------------------------------------------------------
 * The qwen3 / qwen3_moe forward of engine/forward.c in libtorch operators on one at::Device,
 * for the GPU (and, as DF_T_DEV_TORCH_CPU, for tests on any machine). Numerics: the weights
 * are uploaded as stored (BF16 / F16 / F32 bytes, no re-encoding) and widened to fp32 per
 * op; activations, router, attention softmax, norms and logits are fp32 (DESIGN.md §4);
 * TF32 is switched off for cuBLAS. Routing (softmax + top-k, ties to the lower id) runs on
 * the host with the CPU path's own kernel over the device's fp32 router logits, so the
 * discrete choice follows the same rule. Unlike the CPU path, results are not bitwise
 * batch-invariant (cuBLAS picks algorithms by shape): logits agree within the tolerance
 * docs/GPU.md gives. Routed experts not uploaded (admission) run through the model's expert
 * backend (host kernels or cluster nodes) and are combined in the router's order. */

typedef struct df_tm df_tm;
struct df_kv_cache;
struct df_expert_backend;

/* One decoder layer's weights, host handles the blocks of engine/layers/ describe (stored dtype). */
typedef struct df_tm_layer {
  const df_t_tensor *in_norm, *post_norm;           /* [H] */
  const df_t_tensor *q, *k, *v, *o;                 /* [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd] */
  const df_t_tensor *qb, *kb, *vb, *ob;             /* biases or NULL */
  const df_t_tensor *q_norm, *k_norm;               /* [hd] */
  const df_t_tensor *router;                        /* [E, H]; NULL: dense layer */
  const df_t_tensor *const *ex_gate, *const *ex_up, *const *ex_down; /* [E] each */
  const df_t_tensor *mlp_gate, *mlp_up, *mlp_down;  /* dense SwiGLU [I, H], [I, H], [H, I] */
  /* deepseek_v3 / kimi_k2 (desc.mla): MLA weights (`q` is q_proj when q_lora_rank is 0, `o`
   * is o_proj [H, nh*dv]); any linear may be F8_E4M3 with block scales attached */
  const df_t_tensor *q_a, *q_a_norm, *q_b;          /* [ql, H], [ql], [nh*(dn+dr), ql] */
  const df_t_tensor *kv_a, *kv_a_norm, *kv_b;       /* [L+dr, H], [L], [nh*(dn+dv), L] */
  const df_t_tensor *router_bias;                   /* e_score_correction_bias [E] F32 */
  const df_t_tensor *sh_gate, *sh_up, *sh_down;     /* shared experts [S, H] x2, [H, S] */
} df_tm_layer;

typedef struct df_tm_desc {
  int64_t n_layers, hidden, n_head, n_kv, head_dim, vocab;
  int64_t n_experts, top_k;  /* 0 for a dense model */
  bool norm_topk;            /* renormalise the top-k weights */
  float eps;                 /* rms_norm_eps */
  const df_t_tensor *embed, *final_norm, *lm_head; /* [V, H], [H], [V, H] */
  const df_t_tensor *rope_cos, *rope_sin;          /* [max_ctx, hd/2] fp32 host tables */
  const df_tm_layer *layers;                       /* [n_layers] */
  const uint8_t *expert_on_device; /* [n_layers * n_experts]: 1 = upload (layer-major);
                                      NULL = every expert */
  /* deepseek_v3 / kimi_k2 (DeepseekV3Attention, absorbed MLA over a latent cache made with
   * df_kv_new_mla_on; DeepseekV3TopkRouter, kernels.h df_k_router_sigmoid_group) */
  bool mla;
  int64_t q_lora_rank, kv_lora_rank, dn, dr, dv; /* qk_nope / qk_rope / v head dims */
  bool rope_interleave;      /* rope_tables [max_ctx, dr/2]; pairs (2i, 2i+1) de-interleaved */
  float mla_scale;           /* softmax scale: qk_head_dim^-0.5 * yarn mscale^2 */
  int64_t n_group, topk_group;
  float routed_scaling;      /* routed_scaling_factor */
} df_tm_desc;

/* Upload what `d` says to device `dev` (CUDA or TORCH_CPU; TORCH_CPU uses the host tensors
 * without a copy). CUDA uploads go through engine/device/cuda_rt.h's pinned staging buffers on a
 * copy stream when the build has DF_CUDA, else through libtorch's pageable copy. Borrowed:
 * `d`'s tensors must outlive the result (host experts are read through them). Errors (NULL +
 * message): a weight dtype other than BF16/F16/F32, or F8_E4M3 with block scales (kept as
 * stored, widened per op as df_tx does), device out of memory or any libtorch error. */
df_tm *df_tm_new(const df_tm_desc *d, const df_t_device *dev, char *err, size_t errlen);

/* Free the device copies; NULLs *tm; NULL-safe. */
void df_tm_destroy(df_tm **tm);

/* Bytes held on the device by uploaded weights. */
uint64_t df_tm_device_bytes(const df_tm *tm);

/* One forward chunk of R rows (engine/forward.c's forward_chunk + lm_head on the device):
 *   ids     [R] token ids (checked by the caller), pos [R] positions, row_seq [R] sequence
 *           index of each row; rows of one sequence consecutive and in position order
 *   kvs     [n_seqs] caches made with df_t_new_f32_on(this device); K/V of row r are
 *           written at pos[r] of kvs[row_seq[r]] (the caller advances len)
 *   row_out [R] fp32 [vocab] host destination of row r's logits, or NULL for none
 *   be      backend for experts not on the device; xs, ys host fp32 [>= R*top_k, H] buffers
 *           for its requests
 *   route_counts [n_layers * n_experts] routing counts incremented per chosen (layer,
 *           expert) (heat for admission), or NULL
 * Errors (-1, message): the expert backend's, or a libtorch error (e.g. device OOM). The
 * caches' contents past their len are then unspecified (as on the CPU path). */
int df_tm_forward(df_tm *tm, int64_t R, const int32_t *ids, const int64_t *pos,
                  const int32_t *row_seq, struct df_kv_cache *const *kvs,
                  float *const *row_out, struct df_expert_backend *be, df_t_tensor *xs,
                  df_t_tensor *ys, uint64_t *route_counts, char *err, size_t errlen);

/* ---- routed experts on a device, for df-node ----------------------------------------
 * A df-node started with --device keeps the experts it serves on the device, uploaded on
 * first use (the coordinator routes the hottest experts most often, so they arrive first)
 * while the admitted byte budget lasts; experts past the budget run on the host exactly as
 * before (df_t_swiglu_ffn). Same numerics as the torch compute path: weights as stored
 * (BF16/F16/F32, or F8_E4M3 bytes + F32 block scales, charged at 1 byte per weight plus the
 * scales), widened to fp32 per op (FP8: e4m3 * block scale rounded once, the CPU kernels'
 * value, kernels.h df_k_fp8_weight), fp32 activations. */
typedef struct df_tx df_tx;

/* dev: CUDA or TORCH_CPU (a host "device" for tests); budget: bytes of expert weights that
 * may be uploaded (what admission left, engine/device/admission.h). NULL + message on a libtorch
 * error or a CPU device. Free with df_tx_destroy. */
df_tx *df_tx_new(const df_t_device *dev, uint64_t budget, char *err, size_t errlen);

/* Free the device copies; NULLs *tx; NULL-safe. */
void df_tx_destroy(df_tx **tx);

/* df_t_swiglu_ffn's contract (rows [row0, row0 + rows) of host fp32 x into the same rows of
 * host fp32 y; g, u host scratch used only on the host path), run on the device when the
 * expert (identified by its gate tensor handle, which must stay valid while tx lives) is
 * there or fits in what is left of the budget. Returns 1 when it ran on the device, 0 on the
 * host, -1 + message on a libtorch error (y unspecified; the caller may retry on the host). */
int df_tx_swiglu_ffn(df_tx *tx, const df_t_tensor *x, int64_t row0, int64_t rows,
                     const df_t_tensor *gate_w, const df_t_tensor *up_w,
                     const df_t_tensor *down_w, df_t_tensor *g, df_t_tensor *u, df_t_tensor *y,
                     char *err, size_t errlen);

/* Forget every expert (their handles are about to be freed, e.g. a new assignment) and
 * release their device memory; the budget is whole again. */
void df_tx_clear(df_tx *tx);

/* Experts held on the device, and their bytes. */
int64_t df_tx_experts(const df_tx *tx);
uint64_t df_tx_bytes(const df_tx *tx);

/* ---- libtorch oracles (tests): the same ops computed with at:: operators in float64 and
 * rounded to fp32. Return 0, or -1 with a message if libtorch throws. ---- */

/* out [rows, N] fp32 host buffer. FP8 weights: each weight de-quantised to fp32 as the kernel
 * does (e4m3 * scale, rounded once), then the float64 matmul; MXFP4: df_k_mxfp4_weight. */
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
