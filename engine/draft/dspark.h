/* engine/draft/dspark.h — DSpark, a block drafter that reads the target's hidden states
 * (Inferact's Kimi-K3-DSpark; docs/K3.md §6.2 writes its computation down, docs/DRAFTERS.md
 * how Deltafin uses it).
 *
 * Owns: loading a DSpark folder (config.json as published — `K3DSparkModel`, MLA layers with
 * YaRN RoPE, `target_layer_ids`, `mask_token_id`, `markov_rank` — plus the optional key
 * `block_size` and `capture_point`, and model.safetensors with the published tensor names) against a loaded
 * target, the drafter's context cache per sequence (one MLA latent cache per drafter layer
 * holding target-derived rows only), and one proposal round:
 *   context row t:  ctx_t = RMSNorm(context_proj(cat_t); context_norm), cat_t the target's
 *                   hidden states of position t after each capture layer, concatenated;
 *                   per drafter layer n: kv = kv_a_proj_with_mqa(ctx_t) -> c_kv =
 *                   RMSNorm(kv[:KL]; kv_a_layernorm), k_rope = RoPE(kv[KL:], t), cached at t
 *   block at L..L+r-1 (L = context rows cached): rows [embed(anchor), embed(mask) x (r-1)]
 *                   (the TARGET's embedding), r pre-norm decoder layers (MLA with RoPE on
 *                   interleaved pairs, attention over the context rows and every block row —
 *                   no causal mask inside the block —, dense SiLU-GLU MLP),
 *                   logits_k = target lm_head(RMSNorm(h_k; final_norm))
 *   Markov head:    prev = anchor; z_k = logits_k + markov_w2 . markov_w1[prev];
 *                   tok_k = pick(z_k); prev = tok_k      (k = 0 .. r-1)
 * The target's embedding and lm_head are used in place (never a second copy); the folder's
 * duplicate `embed_tokens.weight` is never read. The confidence head is not evaluated.
 * Numerics: fp32 activations, weights in their stored dtype, the engine's batch-invariant
 * kernels — a proposal depends only on the context rows, the anchor and r. A drafter never
 * decides an output token: the verifier does (coordinator/generate/spec.h).
 * Does not own: the target (borrowed; it must outlive the drafter), capturing its hidden
 * states (engine/model.h df_model_set_capture), acceptance.
 */
#ifndef DF_ENGINE_DRAFT_DSPARK_H
#define DF_ENGINE_DRAFT_DSPARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kv_cache.h"
#include "engine/model.h"

typedef struct df_dspark df_dspark;

/* Most rows in one proposal block. */
#define DF_DSPARK_BLOCK_MAX 16

/* The block size when config.json has no `block_size` (Kimi-K3-DSpark: anchor + 6 masks). */
#define DF_DSPARK_BLOCK_DEFAULT 7

/* Whether DIR/config.json names a DSpark drafter (architectures holds "K3DSparkModel" or
 * "DSparkModel"); false when it does not or cannot be read. */
bool df_dspark_is_folder(const char *dir);

/* Load the DSpark folder DIR for `target` (borrowed), for sequences of up to max_ctx tokens
 * (0 = the target's max_ctx; at most the drafter's max_position_embeddings). Validates
 * every config key it reads and every tensor's dtype (BF16/F16/F32) and shape against the
 * config and the target: hidden_size and draft_vocab_size must equal the target's,
 * target_layer_ids lie in the target's layers (num_target_layers of them, at most
 * DF_MODEL_MAX_CAPTURE), mask_token_id in the vocabulary, block_size in
 * 1..DF_DSPARK_BLOCK_MAX. The weights stay memory-mapped (no copy).
 * Errors (-1, *out NULL, one line naming the file and key or tensor, what it has and what
 * was expected): unreadable or malformed config.json, a missing or out-of-range key, a
 * rope_scaling other than null or YaRN, a missing or mis-shaped tensor, out of memory. */
int df_dspark_load(const char *dir, const df_model *target, int64_t max_ctx, df_dspark **out,
                   char *err, size_t errlen);

/* Free the drafter (not the target); NULLs *d; NULL-safe. */
void df_dspark_destroy(df_dspark **d);

/* The target layers whose output rows the drafter reads (0-based, config order), how many,
 * and the width of one context row (count x hidden), for df_model_set_capture and the
 * capture buffers of df_batch_seq. */
const int64_t *df_dspark_capture_layers(const df_dspark *d, int *n);
int64_t df_dspark_row_width(const df_dspark *d);

/* Which target row the drafter was trained on (config `capture_point`, Deltafin's key:
 * "prefix", the default, or "mix"; engine/model.h df_capture_point, docs/K3.md §7 D1). The
 * two differ only for targets with Attention Residuals. */
df_capture_point df_dspark_capture_point(const df_dspark *d);

/* Rows per proposal block (config block_size), the mask token, the drafter's max_ctx. */
int df_dspark_block(const df_dspark *d);
int32_t df_dspark_mask_id(const df_dspark *d);
int64_t df_dspark_max_ctx(const df_dspark *d);

/* Context-cache bytes one position takes over the drafter's layers ((kv_lora_rank +
 * qk_rope_head_dim) x 4 per layer). */
uint64_t df_dspark_kv_bytes_per_token(const df_dspark *d);

/* Bytes the drafter holds beyond its mapped weights: buffers and RoPE tables. */
uint64_t df_dspark_buffer_bytes(const df_dspark *d);
/* Bytes of its mapped weights that a forward reads (the duplicate embedding excluded). */
uint64_t df_dspark_weight_bytes(const df_dspark *d);

/* A context cache for one sequence of up to ctx tokens (0 = the drafter's max_ctx):
 * per drafter layer c_kv [ctx, kv_lora_rank] and k_rope [ctx, qk_rope_head_dim] fp32, len 0.
 * Free with df_kv_destroy; roll back with df_kv_rewind. NULL + message: ctx above max_ctx,
 * out of memory. */
df_kv_cache *df_dspark_kv_new(const df_dspark *d, int64_t ctx, char *err, size_t errlen);

/* Append n >= 1 context rows at positions kv->len .. kv->len+n-1 (kv->len += n).
 *   rows [n, df_dspark_row_width] fp32: the target's captured hidden states of those
 *        positions (engine/model.h df_batch_seq.capture), caller-owned
 * Errors (-1, message; kv unchanged): the cache would pass its ctx, a non-finite value. */
int df_dspark_append(df_dspark *d, df_kv_cache *kv, const float *rows, int64_t n, char *err,
                     size_t errlen);

/* Chooses block row k's draft token from z [V] fp32, the row's logits with the Markov bias
 * added (ctx: the caller's). Must return an id in [0, V). */
typedef int32_t (*df_dspark_pick_fn)(void *ctx, int k, const float *z, int64_t V);

/* One proposal round: r (1..df_dspark_block) draft tokens following `anchor` (the token the
 * target emitted last, not yet in the context) into out[0..r). pick NULL: greedy, the
 * highest z (ties: the lower id). z_out, when not NULL, receives the rows [r, V] fp32 that
 * were picked from. kv->len is unchanged (the block's rows are written past it and
 * dropped). Errors (-1, message): r out of range, kv->len + r above the cache's ctx, an
 * anchor outside the vocabulary, no context row yet (kv->len 0), a non-finite value. */
int df_dspark_propose(df_dspark *d, df_kv_cache *kv, int32_t anchor, int r, df_dspark_pick_fn pick,
                      void *pick_ctx, int32_t *out, float *z_out, char *err, size_t errlen);

#endif
