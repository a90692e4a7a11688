/* engine/model.h — a model of any supported family (qwen3_moe / qwen3, deepseek_v3 / kimi_k2):
 * load a Hugging Face folder, run forwards.
 *
 * Owns: the public face of a loaded model: loading (engine/model.c: the family file in
 * engine/models/ binds the checkpoint's tensors to the config and composes each layer from
 * the blocks of engine/layers/), the planned activation buffers, RoPE tables, each
 * sequence's state, and the forward pass (engine/forward.c: chunked prefill, decode, verify
 * batches). For qwen3_moe / qwen3 it follows transformers' modeling_qwen3_moe.py /
 * modeling_qwen3.py:
 *   x = embed(ids)
 *   per layer: h = x + o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n)))
 *              with n = input_layernorm(x);
 *              x = h + ffn(post_attention_layernorm(h)), ffn = MoE block or dense SwiGLU MLP
 *   logits = lm_head(norm(x))   (lm_head = embed_tokens when tie_word_embeddings)
 * MoE block: router logits = gate(n) [fp32], softmax, top-k, optional renormalisation,
 * routed experts run through an expert backend (engine/experts/expert_backend.h) and combined in fp32
 * in the router's order. Numerics: fp32 activations, weights in their stored dtype, every
 * kernel batch-invariant (engine/kernels/kernels.h), so a position's logits do not depend on how
 * the tokens were chunked.
 * deepseek_v3 / kimi_k2 (transformers' modeling_deepseek_v3.py; engine/models/deepseek_v3.c):
 * the same layer loop with multi-head latent attention (low-rank q and kv projections with
 * their RMSNorms, decoupled RoPE, a latent KV cache of c_kv + k_rope per position, attention
 * in the absorbed form for every row so prefill and decode agree bitwise), dense MLPs on the
 * first first_k_dense_replace layers, then MoE blocks with the sigmoid group-limited router
 * (e_score_correction_bias for selection only, routed_scaling_factor) plus shared experts
 * computed on the coordinator. F8_E4M3 weights with 128x128 (any) block scales are
 * de-quantised inside the kernels; no widened copy exists.
 * Does not own: the KV cache memory (engine/kv_cache.h, one per sequence), sampling
 * (engine/sampler.h), tokenization.
 */
#ifndef DF_ENGINE_MODEL_H
#define DF_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/model_config.h"
#include "engine/device/admission.h"
#include "engine/layers/profile.h"
#include "engine/experts/expert_backend.h"
#include "engine/kv_cache.h"
#include "engine/safetensors.h"
#include "engine/tensor/torch_shim.h"

typedef struct df_model df_model;

/* Progress of a long step, for a caller that shows it (deltafin run's bar): `done` of
 * `total` units so far (1 <= done <= total), on the thread doing the work, with the ctx the
 * caller registered. It must not call back into the model. */
typedef void (*df_model_progress_fn)(void *ctx, int64_t done, int64_t total);

typedef struct df_model_opts {
  int64_t max_ctx;  /* tokens a sequence may hold, <= max_position_embeddings;
                       0 = min(max_position_embeddings, 4096) */
  int64_t max_rows; /* rows per forward chunk (prefill chunk size); 0 = 64 */
  int threads;      /* compute threads; 0 = every online CPU */
  /* A loaded model (borrowed; it must outlive the one being loaded) whose identical tensors
   * are reused: this model's model.embed_tokens.weight and lm_head.weight are compared with
   * share_from's embed_tokens and lm_head (equal dtype, shape and bytes; both read with
   * pread, never through either mapping) and, when identical, bound to
   * share_from's mapping, so that table is resident once and this model's file pages for it
   * are never touched. NULL = no sharing. Typical use: a speculative-decoding draft that
   * ships the target's embedding table (DESIGN.md §5). */
  const struct df_model *share_from;
  /* Where to compute (docs/GPU.md). Zero = {DF_T_DEV_CPU}: the own batch-invariant kernels,
   * unchanged. CUDA / AUTO / TORCH_CPU: the device is resolved (df_t_device_resolve), memory
   * is admitted (engine/device/admission.h: reserve, resident + KV + draft + work charged first,
   * hottest experts in the rest) and the model is uploaded for the torch compute path.
   * Whatever fails there (no CUDA, admission refused, upload error) leaves the model on
   * the CPU, never an error; df_model_device_note says what happened. One exception: a
   * model with a layer kind the torch path does not run (KDA, NoPE MLA: kimi_linear) is an
   * error for CUDA / TORCH_CPU (naming the model type), and stays on the CPU under AUTO. */
  df_t_device device;
  int64_t device_seqs;       /* KV caches of max_ctx the caller will keep (0 = 1) */
  uint64_t device_extra;     /* further bytes charged first, e.g. a draft model (0 = none) */
  const uint64_t *expert_heat; /* [expert_heat_n] routing counts of earlier runs
                                  (layer-major), or NULL: lower (layer, expert) first */
  int64_t expert_heat_n;       /* must be n_layers * num_experts, else the heat is ignored */
  bool device_host_experts;  /* never upload routed experts (a --stream folder, whose expert
                                bytes are holes until its backend fetches them) */
  uint64_t device_free, device_total; /* memory figures to admit against instead of asking
                                  the device (tests; torch-cpu); 0 = ask (CUDA) or
                                  unlimited (torch-cpu) */
  /* Called by df_model_load once per layer bound (done = layers bound, total =
   * num_hidden_layers), with progress_ctx; NULL = not told. */
  df_model_progress_fn progress;
  void *progress_ctx;
} df_model_opts;

/* Memory plan of a loaded model, in bytes of the stored tensors. */
typedef struct df_model_bytes {
  uint64_t total;     /* every tensor of the checkpoint the model uses */
  uint64_t resident;  /* embeddings, attention, norms, routers, dense MLPs, lm_head */
  uint64_t experts;   /* routed experts */
  uint64_t active_per_token; /* resident + top-k experts of every MoE layer (decode traffic) */
  uint64_t buffers;   /* planned activation buffers (fp32) */
  uint64_t shared;    /* of `total`, bytes bound to opts.share_from's mapping (not this model's) */
  uint64_t shared_experts; /* of `resident`, the MoE layers' shared experts, all layers (read
                              on every forward; a cluster overlaps them with remote experts) */
} df_model_bytes;

/* Load DIR (config.json, generation_config.json, *.safetensors): validates every tensor's
 * presence, dtype (BF16/F16/F32; deepseek_v3 linear weights also F8_E4M3 with an F32
 * `_scale_inv` of the config's weight_block_size; other F8/INT uses are refused by name) and
 * shape against the config, wraps the mmap (no copy), plans buffers for opts->max_rows rows, builds RoPE
 * tables for max_ctx positions and a local expert backend. With opts->share_from, identical
 * embedding / lm_head tensors are reused from that model (see df_model_opts; a failed
 * comparison, e.g. an unreadable file, just means no sharing).
 * Errors (-1, one line in err naming the file and tensor): config errors, safetensors
 * errors, a missing tensor, a dtype or shape disagreeing with the config, out of memory. */
int df_model_load(const char *dir, const df_model_opts *opts, df_model **out, char *err,
                  size_t errlen);

/* Free the model and its local backend; NULLs *m; NULL-safe. */
void df_model_destroy(df_model **m);

const df_model_config *df_model_cfg(const df_model *m);
const df_gen_config *df_model_gen_cfg(const df_model *m);
const df_st_model *df_model_tensors(const df_model *m);
int64_t df_model_max_ctx(const df_model *m);
int64_t df_model_max_rows(const df_model *m);
df_model_bytes df_model_memory(const df_model *m);

/* Where the model computes after load: DF_T_DEV_CPU (own kernels), or the device of the
 * torch compute path (CUDA, TORCH_CPU). */
df_t_device df_model_device(const df_model *m);

/* The placement line of load: the admission figures when the torch path is used, or why
 * the CPU is used although another device was asked for; "" when the CPU was asked for. */
const char *df_model_device_note(const df_model *m);

/* Routed (layer, expert) pairs whose weights are on the device (0 on the CPU path). */
int64_t df_model_experts_on_device(const df_model *m);

/* Which routed pairs are on the device: [n_layers * num_experts] layer-major, 1 = device;
 * NULL on the CPU path. */
const uint8_t *df_model_expert_placement(const df_model *m);

/* The admission's figures (engine/device/admission.h) when a device was asked for and the
 * admission ran (zeroed otherwise): reserve, budget, charged bytes, experts placed. */
df_admit_plan df_model_device_plan(const df_model *m);

/* Routing counts since load, [n_layers * num_experts] layer-major (dense layers stay 0),
 * the heat admission uses; NULL for a model without routed experts. */
const uint64_t *df_model_route_counts(const df_model *m);

/* A KV cache sized for this model and `ctx` tokens (0 = the model's max_ctx). NULL + err
 * on failure. Free with df_kv_destroy. */
df_kv_cache *df_model_kv_new(const df_model *m, int64_t ctx, char *err, size_t errlen);

/* The family's lines on the model's attention and MoE shape (`deltafin inspect`), to f. */
void df_model_print_summary(const df_model *m, FILE *f);

/* What a sequence's state holds per token, as its token mixers say (e.g. "fp32 K and V";
 * layers of different kinds joined by " + "), written to buf (NUL-terminated). */
void df_model_state_kind(const df_model *m, char *buf, size_t cap);

/* KV-cache bytes one token takes over all layers: fp32 K and V per kv head (qwen3 families),
 * or the fp32 latent c_kv (kv_lora_rank) + shared RoPE key (qk_rope_head_dim) for MLA. */
uint64_t df_model_kv_bytes_per_token(const df_model *m);

/* State bytes of one sequence that do not grow with its length, over all layers: KDA's
 * recurrent state per sequence (engine/layers/kda.h: S, conv windows, their base copy and
 * the rollback log); 0 for models with KV caches only. */
uint64_t df_model_kv_bytes_per_seq(const df_model *m);

/* The checkpoint name of routed expert `expert`'s weight `part` (0 gate, 1 up, 2 down) on
 * `layer`, as the model's family binds it (engine/models/family.h expert_tensor_name), into
 * buf (cap bytes, truncated). Its FP8 block scale, when there is one, is that name +
 * "_scale_inv". */
void df_model_expert_tensor_name(const df_model *m, int layer, int expert, int part, char *buf,
                                 size_t cap);

/* The routed-expert weights of (layer, expert): gate_proj/up_proj [I, H], down_proj [H, I]
 * in their stored dtype; FP8 (F8_E4M3) weights carry their block scales (df_t_block_scale),
 * and df_t_swiglu_ffn de-quantises them inside its kernels. Returns -1 if the layer is not a
 * MoE layer or expert is out of range. */
int df_model_expert_weights(const df_model *m, int layer, int expert, const df_t_tensor **gate,
                            const df_t_tensor **up, const df_t_tensor **down);

/* A new in-process backend over this model's own routed experts (engine/experts/
 * expert_local.h; m borrowed: must outlive it), sized for a chunk of max_rows rows. The
 * caller owns it. NULL + message on allocation failure. */
df_expert_backend *df_model_local_experts(const df_model *m, char *err, size_t errlen);

/* Replace the expert backend (the model takes ownership; the previous one is destroyed).
 * NULL restores the local backend. */
void df_model_set_expert_backend(df_model *m, df_expert_backend *be);

/* Turn per-part timing on or off (off by default: it adds two clock reads per part) and
 * reset the counters. */
void df_model_profile_enable(df_model *m, bool on);
df_model_profile df_model_profile_get(const df_model *m);

typedef enum {
  DF_LOGITS_NONE = 0, /* only fill the KV cache */
  DF_LOGITS_LAST = 1, /* logits [vocab] of the last token */
  DF_LOGITS_ALL = 2,  /* logits [n, vocab] of every token */
} df_logits_mode;

/* Most sequences one df_model_forward_batch call takes. */
#define DF_MODEL_MAX_BATCH 64

/* One sequence's part of a batched forward. */
typedef struct df_batch_seq {
  df_kv_cache *kv;       /* the sequence's own cache; tokens go to kv->len .. kv->len+n-1 */
  const int32_t *ids;    /* [n] token ids */
  int64_t n;             /* >= 1 */
  df_logits_mode mode;   /* which logits this sequence wants */
  float *logits;         /* [vocab] (LAST) or [n, vocab] (ALL) or NULL (NONE), caller-owned */
  /* [n, n_capture * hidden] fp32, caller-owned, or NULL: row i receives the hidden state of
   * token i after each layer set by df_model_set_capture, concatenated in that order (what a
   * hidden-state drafter reads, engine/draft/dspark.h). Ignored when no layer is set. */
  float *capture;
} df_batch_seq;

/* Continuous batching: the rows of several sequences, each with its own KV cache, go
 * through every weight matrix together (rows concatenated in the order given, in chunks of
 * max_rows; attention runs per sequence over its own cache). Every kernel is
 * batch-invariant, so each sequence's logits are bitwise those it would get alone.
 * Errors (-1, message; every cache left at its length before the call): n_seqs outside
 * 1..DF_MODEL_MAX_BATCH, a sequence with no tokens, two sequences sharing a cache, an id out
 * of range, context overflow, an expert backend error. */
int df_model_forward_batch(df_model *m, df_batch_seq *seqs, int n_seqs, char *err,
                           size_t errlen);

/* Run n tokens at positions kv->len .. kv->len+n-1, in chunks of max_rows, appending their
 * keys/values to kv (kv->len += n on success).
 *   ids    [n] token ids, each in [0, vocab_size)
 *   logits fp32 [vocab] (LAST) or [n, vocab] (ALL) or NULL (NONE), caller-owned
 * Errors (-1, message): an id out of range, kv->len + n > kv->ctx (message gives the
 * numbers), an expert backend error (kv->len is left unchanged, so the call can be retried).
 */
int df_model_forward(df_model *m, df_kv_cache *kv, const int32_t *ids, int64_t n,
                     df_logits_mode mode, float *logits, char *err, size_t errlen);

/* From now on every df_model_forward / df_model_forward_batch call of m calls fn(ctx, done,
 * total) after each chunk of max_rows rows it completes (done = rows of the call finished,
 * total = the call's rows), e.g. to show a long prefill's progress; fn NULL stops it. The
 * caller keeps ctx alive while it is set. No error; allocates nothing. */
void df_model_set_progress(df_model *m, df_model_progress_fn fn, void *ctx);

/* Most layers df_model_set_capture takes. */
#define DF_MODEL_MAX_CAPTURE 16

/* From now on the forwards of m copy, for every row of a sequence whose df_batch_seq.capture
 * is set, the residual stream after each of layers[0..n) (0-based: the OUTPUT of layer i, the
 * row the next layer reads, before the final norm) into that buffer, concatenated in the
 * order given. For a model with Attention Residuals (Kimi K3) the row is the running prefix
 * the scheme keeps after the layer (docs/K3.md §7 D1, vLLM's convention). n = 0 turns it
 * off. The copy costs one row of hidden floats per captured layer and row; nothing is copied
 * for sequences that pass no buffer. Errors (-1, message): n outside 0..DF_MODEL_MAX_CAPTURE,
 * a layer outside 0..num_hidden_layers-1, a model computing on a device (the torch path
 * does not capture). */
int df_model_set_capture(df_model *m, const int64_t *layers, int n, char *err, size_t errlen);

/* Which row df_model_set_capture takes after a layer. PREFIX (the default): the residual
 * stream as it stands (for Attention Residuals the running prefix, vLLM's reading of
 * docs/K3.md §7 D1). MIX: what the next consumer reads before its norm — for Attention
 * Residuals the next layer's mix of the block snapshots and the prefix (the output mix after
 * the last layer), SGLang's reading; for every other model the same row as PREFIX. */
typedef enum { DF_CAPTURE_PREFIX = 0, DF_CAPTURE_MIX = 1 } df_capture_point;
void df_model_set_capture_point(df_model *m, df_capture_point p);

/* The host's available memory (MemAvailable of /proc/meminfo) in bytes, or -1 when it cannot
 * be read. */
int64_t df_host_mem_available(void);

/* The host's physical memory (MemTotal of /proc/meminfo) in bytes, or -1 when unreadable. */
int64_t df_host_mem_total(void);

/* Admission of a model computed on this host's CPU: its resident part (embeddings,
 * attention, norms, routers, shared experts, dense MLPs, lm_head: df_model_bytes.resident)
 * is read on every forward, so it must fit in physical memory (MemTotal); the routed experts
 * are memory-mapped and may page. 0 when it fits (or MemTotal is unreadable); -1 + a message
 * giving both sizes in GiB and the shortfall. */
int df_model_admit_host(const df_model *m, char *err, size_t errlen);

/* Bytes one sequence's state takes at ctx tokens (KV cache per token x ctx + the recurrent
 * state per sequence): what each of `deltafin serve --parallel N` slots allocates. */
uint64_t df_model_seq_state_bytes(const df_model *m, int64_t ctx);

#endif
