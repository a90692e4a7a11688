/* engine/layers/mla.h — multi-head latent attention (MLA, DeepSeek-V2/V3), absorbed form.
 *
 * Owns: the MLA token mixer of transformers' DeepseekV3Attention computed in the absorbed
 * form of the DeepSeek-V2 paper (§2.1.2): the low-rank query (q_a_proj, q_a_layernorm,
 * q_b_proj; or q_proj when q_lora_rank is 0), the compressed kv_a_proj_with_mqa whose first
 * kv_lora_rank columns are normed by kv_a_layernorm into the cached latent c_kv and whose
 * last qk_rope_head_dim columns are the RoPE key k_rope shared by all heads; a query head h
 * attends with
 *   score = scale * ((W_uk[h]^T q_nope[h]) . c_kv + q_rope[h] . k_rope)
 * and outputs o_proj over W_uv[h] (sum_t p_t c_kv[t]), W_uk / W_uv the key / value rows of
 * kv_b_proj. Every row (prefill, decode, verify) takes this path, so a position's logits do
 * not depend on chunking. scale = qk_head_dim^-0.5, times yarn_get_mscale(factor,
 * mscale_all_dim)^2 when rope_scaling sets mscale_all_dim. Its per-sequence state is the
 * latent cache: c_kv [ctx, kv_lora_rank] and k_rope [ctx, qk_rope_head_dim] fp32, never
 * expanded per head ((kv_lora_rank + qk_rope_head_dim) * 4 bytes per token). Any linear
 * weight may be F8_E4M3 with block scales. Kimi Linear's variant (dims.nope, weights.g):
 * the same path without RoPE, and an optional sigmoid output gate. Does not own: the kernels
 * (engine/kernels/kernels_deepseek.c, kernels_fp8.c), binding (engine/models/).
 */
#ifndef DF_ENGINE_LAYERS_MLA_H
#define DF_ENGINE_LAYERS_MLA_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* The weights of one MLA layer (borrowed views; must outlive the mixer). */
typedef struct df_mla_weights {
  const df_t_tensor *q;                     /* q_proj [nh*(dn+dr), H] when q_lora_rank is 0 */
  const df_t_tensor *q_a, *q_a_norm, *q_b;  /* [ql, H], [ql], [nh*(dn+dr), ql], or NULL */
  const df_t_tensor *kv_a, *kv_a_norm, *kv_b; /* [KL+dr, H], [KL], [nh*(dn+dv), KL] */
  const df_t_tensor *o;                     /* o_proj [H, nh*dv] */
  const df_t_tensor *g; /* output gate g_proj [nh*dv, H] (Kimi Linear mla_use_output_gate:
                           att *= sigmoid(g_proj x) before o_proj, docs/K3.md §3.5 step 7),
                           or NULL */
} df_mla_weights;

/* The MLA shape of a layer. */
typedef struct df_mla_dims {
  int64_t n_head, q_lora_rank, kv_lora_rank; /* q_lora_rank 0: q_proj */
  int64_t dn, dr, dv;     /* qk_nope_head_dim, qk_rope_head_dim, v_head_dim */
  bool rope_interleave;   /* RoPE pairs (2i, 2i+1) instead of (i, i + d/2) */
  bool nope;              /* no RoPE at all (Kimi Linear mla_use_nope): q_rope and the shared
                             k_rope enter the score unrotated (docs/K3.md §3.5) */
  float eps;              /* q_a / kv_a RMSNorm eps */
  float scale;            /* softmax scale (df_mla_scale) */
} df_mla_dims;

/* DeepseekV3Attention's softmax scale for config c: (qk_nope + qk_rope)^-0.5, times
 * yarn_get_mscale(rope factor, mscale_all_dim)^2 when rope_scaling sets mscale_all_dim. */
float df_mla_scale(const df_model_config *c);

/* An MLA mixer for decoder layer `layer`; scratch from ws for env->max_rows rows. env is
 * borrowed. NULL + message when out of memory. */
df_token_mixer *df_mla_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_mla_weights *w, const df_mla_dims *dims, char *err,
                           size_t errlen);

#endif
