/* engine/layers/gqa.h — grouped-query attention with RoPE and per-head q/k RMSNorm.
 *
 * Owns: the GQA token mixer of transformers' Qwen3MoeAttention / Qwen3Attention:
 *   q = q_norm(q_proj(xn)), k = k_norm(k_proj(xn)), v = v_proj(xn)   (optional biases)
 *   q, k rotated by RoPE (rotate_half pairs (i, i + d/2)); K/V of the new rows appended to
 *   each sequence's cache; out = o_proj(softmax(q k^T / sqrt(head_dim)) v) over the
 *   sequence's positions <= the row's own, n_head / n_kv query heads sharing each kv head.
 * Its per-sequence state is the K/V cache of its layer: fp32 [n_kv, ctx, head_dim] each
 * (2 * n_kv * head_dim * 4 bytes per token). Does not own: the kernels
 * (engine/kernels/kernels.h), binding (engine/models/).
 */
#ifndef DF_ENGINE_LAYERS_GQA_H
#define DF_ENGINE_LAYERS_GQA_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* The weights of one GQA layer (borrowed views; must outlive the mixer). */
typedef struct df_gqa_weights {
  const df_t_tensor *q, *k, *v, *o;     /* [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd] */
  const df_t_tensor *qb, *kb, *vb, *ob; /* biases [nh*hd], [nkv*hd] x2, [H], or NULL */
  const df_t_tensor *q_norm, *k_norm;   /* [hd] */
} df_gqa_weights;

/* A GQA mixer for decoder layer `layer` with n_head query heads, n_kv kv heads of width
 * head_dim (even), RMSNorm eps; scratch from ws for env->max_rows rows. env is borrowed.
 * NULL + message when out of memory. */
df_token_mixer *df_gqa_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_gqa_weights *w, int64_t n_head, int64_t n_kv,
                           int64_t head_dim, float eps, char *err, size_t errlen);

#endif
