/* engine/layers/layer.h — a decoder layer as composed blocks: a token mixer, a channel mixer
 * and a residual scheme.
 *
 * Owns: the interfaces every block implements and the one forward loop (engine/forward.c)
 * calls, and what a block may see of the chunk it runs over (df_rows) and of the model
 * (df_layer_env). A layer of the plan is
 *   x = residual(x, token_mixer(norm_0(x)))      then   x = residual(x, channel_mixer(norm_1(x)))
 * where the residual scheme says how a sublayer's input is formed and how its output is
 * folded back into the stream (plain pre-norm today; room for Attention Residuals).
 * Token mixers: GQA with RoPE and q/k norm (gqa.h), MLA in the absorbed form with or without
 * RoPE and an output gate (mla.h), Kimi Delta Attention with a recurrent state (kda.h). Channel mixers: dense GLU (glu.h), routed MoE with its
 * router policy and optional shared experts (moe.h); room for latent MoE.
 * Each block owns its weights (views of the checkpoint's mmap, bound by its family file in
 * engine/models/), its scratch (from the model's workspace, engine/layers/workspace.h) and,
 * for token mixers, its per-sequence state in each sequence's df_kv_cache slot of its layer,
 * whose cost it states in bytes per token and per sequence. No block asks which family it
 * belongs to. Does not own: the layer loop, embeddings, lm_head (engine/forward.c), the
 * tensor binding (engine/layers/bind.h), kernels (engine/kernels/).
 */
#ifndef DF_ENGINE_LAYERS_LAYER_H
#define DF_ENGINE_LAYERS_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/model_config.h"
#include "engine/experts/expert_backend.h"
#include "engine/kv_cache.h"
#include "engine/layers/profile.h"
#include "engine/tensor/torch_shim.h"

/* The rows of one forward chunk, as every block sees them. Rows of one sequence are
 * consecutive and in position order. */
typedef struct df_rows {
  int64_t R;                /* rows in the chunk, 1 .. max_rows */
  const int64_t *pos;       /* [R] position of each row in its sequence */
  const int32_t *seq;       /* [R] index of each row's sequence into kvs */
  df_kv_cache *const *kvs;  /* [n_seqs] each sequence's state (borrowed) */
  /* false (every model): causal, row r sees its sequence's positions 0..pos[r]. true (a block
   * drafter's query block, engine/draft/dspark.h): every row of a sequence's run sees
   * positions 0..(the run's last position): no causal mask inside the block. Only the MLA
   * mixer reads it. */
  bool block_full;
} df_rows;

/* The end of the run of rows of one sequence that starts at row r0 (rows of a sequence are
 * consecutive): the first row after r0 of another sequence, or R. */
static inline int64_t df_rows_run_end(const df_rows *rows, int64_t r0) {
  int64_t r1 = r0 + 1;
  while (r1 < rows->R && rows->seq[r1] == rows->seq[r0]) r1++;
  return r1;
}

/* What the blocks of one model share, owned by the model (borrowed by every block). */
typedef struct df_layer_env {
  const df_model_config *cfg;
  int64_t max_rows, max_ctx;        /* rows per chunk, tokens per sequence */
  df_t_tensor *rope_cos, *rope_sin; /* [max_ctx, head_dim/2] fp32 (engine/layers/rope.h) */
  df_t_tensor *att_scratch;         /* [df_k_max_threads(), max_ctx] fp32 attention scores */
  df_expert_backend **backend;      /* the model's current routed-expert backend (replaceable) */
  uint64_t *route_counts;           /* [n_layers * num_experts] routing heat, or NULL */
  const bool *profiling;            /* profiling switch of the model */
  df_model_profile *prof;           /* counters the blocks add to while *profiling */
} df_layer_env;

/* ---- token mixers ------------------------------------------------------------------ */

typedef struct df_token_mixer df_token_mixer;

typedef struct df_token_mixer_ops {
  const char *name;       /* "gqa", "mla", "kda" */
  const char *state_kind; /* what its per-sequence state holds, e.g. "fp32 K and V" */
  /* out[r] = the mixer's output for row r, from the normed rows xn [R, hidden] fp32 and the
   * rows' sequences' state of this layer, which it first extends by the R new positions.
   * out [R, hidden] fp32 (written, must not alias xn). Never fails. */
  void (*forward)(df_token_mixer *tm, const df_rows *rows, const df_t_tensor *xn,
                  df_t_tensor *out);
  /* Bytes of per-sequence state one token adds to this layer (KV cache), and bytes per
   * sequence independent of its length (a recurrent state; 0 for KV caches). */
  uint64_t (*state_bytes_per_token)(const df_token_mixer *tm);
  uint64_t (*state_bytes_per_seq)(const df_token_mixer *tm);
  /* Allocate this layer's state in kv (slots kv->k[layer], kv->v[layer], zeroed, for
   * kv->ctx tokens; or a recurrent state in kv->rec[layer], engine/kv_cache.h df_kv_rec)
   * on device dev (NULL = host). -1 + message (the allocator's) on failure. */
  int (*state_new)(const df_token_mixer *tm, df_kv_cache *kv, const df_t_device *dev,
                   char *err, size_t errlen);
  /* The torch compute path's view: this layer's weights into *t and the mixer's global
   * fields into *d (engine/tensor/torch_shim.h df_tm_desc). NULL: the torch path does not
   * run this kind (engine/model.c refuses a named device, keeps `auto` on the CPU). */
  void (*describe)(const df_token_mixer *tm, df_tm_desc *d, df_tm_layer *t);
  void (*destroy)(df_token_mixer *tm); /* frees the mixer, not its weights or scratch */
} df_token_mixer_ops;

struct df_token_mixer {
  const df_token_mixer_ops *ops;
  int64_t layer; /* decoder layer index: its state slot in every df_kv_cache */
};

/* ---- channel mixers ---------------------------------------------------------------- */

typedef struct df_channel_mixer df_channel_mixer;

typedef struct df_channel_mixer_ops {
  const char *name; /* "glu", "moe" */
  /* out [R, hidden] fp32 = the mixer of the normed rows xn [R, hidden] fp32 (out must not
   * alias xn). -1 + message: the expert backend's error (routed mixers only). */
  int (*forward)(df_channel_mixer *cm, const df_rows *rows, const df_t_tensor *xn,
                 df_t_tensor *out, char *err, size_t errlen);
  /* Routed expert e's weights (gate/up [I, hidden], down [hidden, I], stored dtype); -1 when
   * the mixer has no routed experts or e is out of range. NULL = none routed. */
  int (*expert_weights)(const df_channel_mixer *cm, int64_t e, const df_t_tensor **gate,
                        const df_t_tensor **up, const df_t_tensor **down);
  void (*describe)(const df_channel_mixer *cm, df_tm_desc *d, df_tm_layer *t);
  void (*destroy)(df_channel_mixer *cm); /* frees the mixer, not its weights or scratch */
} df_channel_mixer_ops;

struct df_channel_mixer {
  const df_channel_mixer_ops *ops;
  int64_t layer;
};

/* ---- one decoder layer of the plan ----------------------------------------------------- */

typedef struct df_layer {
  const df_t_tensor *norm[2];  /* [hidden] RMSNorm weights of the token and channel sublayers
                                  (input_layernorm, post_attention_layernorm) */
  df_token_mixer *attn;
  df_channel_mixer *ffn;
  /* Attention Residuals (engine/layers/attn_res.h) only, else NULL: the mix weights of the
   * token and channel sublayers' inputs (self_attention_res_*, mlp_res_*): norm [hidden],
   * proj [1, hidden] */
  const df_t_tensor *res_norm[2], *res_proj[2];
} df_layer;

/* ---- residual schemes -------------------------------------------------------------- */

typedef struct df_residual df_residual;

typedef struct df_residual_ops {
  const char *name; /* "pre-norm" */
  /* xn [R, hidden] = the input of sublayer s (0 token, 1 channel mixer) of layer l (L). */
  void (*sublayer_in)(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                      const df_t_tensor *x, df_t_tensor *xn);
  /* Fold sublayer s's output out [R, hidden] into the stream x [R, hidden]. */
  void (*sublayer_out)(df_residual *rs, int64_t l, const df_layer *L, int s, int64_t R,
                       df_t_tensor *x, const df_t_tensor *out);
  /* After the last layer, before the final norm: x [R, hidden] becomes what the final norm
   * reads (a scheme that mixes earlier states, such as Attention Residuals, does it here).
   * NULL = x as it is. */
  void (*final)(df_residual *rs, int64_t R, df_t_tensor *x);
  void (*destroy)(df_residual *rs);
  /* After layer l's sublayer_out(1): out [R, hidden] = what the next consumer reads before
   * its norm — layer l+1's token-side input, or (l the last layer) what the final norm reads —
   * computed from x without changing any state. NULL = x itself (a plain residual stream).
   * Attention Residuals: the mix of the blocks and the running prefix with the consumer's
   * weights (a hidden-state drafter's "mix" capture point, docs/K3.md §7 D1). */
  void (*next_in)(df_residual *rs, int64_t l, int64_t R, const df_t_tensor *x, float *out);
} df_residual_ops;

struct df_residual {
  const df_residual_ops *ops;
};

/* The plain pre-norm residual of transformers' Qwen3MoeDecoderLayer / DeepseekV3DecoderLayer:
 * sublayer_in is RMSNorm(x) with the layer's norm[s] and eps (x * rsqrt(mean(x^2) + eps) * w,
 * fp32), sublayer_out is x += out. hidden: the row width. NULL + message out of memory. */
df_residual *df_residual_prenorm_new(int64_t hidden, float eps, char *err, size_t errlen);

/* df_residual_prenorm_new with config c's hidden_size and rms_norm_eps. */
df_residual *df_residual_prenorm_of(const df_model_config *c, char *err, size_t errlen);

/* Destroy a layer's blocks (NULL-safe) and zero it. */
void df_layer_clear(df_layer *L);

#endif
