/* engine/layers/attn_res.h — Block Attention Residuals (Kimi K3), a residual scheme.
 *
 * Owns: the residual stream of a model whose sublayers read a learned softmax mix of earlier
 * block sums instead of the running sum (Attention Residuals, arXiv 2603.15031; the
 * `_forward_attn_residual` / `_apply_output_attn_res` of Moonshot's published
 * modeling_kimi_linear.py for Kimi K3, as docs/K3.md §3.2 writes it down):
 *   prefix = embedding; blocks = []
 *   per layer l:  h = l > 0 ? Mix(blocks, prefix; self_attention_res_l) : prefix
 *                 if l % block == 0: blocks.append(prefix); prefix = None
 *                 a = attn(RMSNorm(h; input_layernorm_l));  prefix = a if None else prefix + a
 *                 h = Mix(blocks, prefix; mlp_res_l);  f = ffn(RMSNorm(h; post_attention_
 *                 layernorm_l));  prefix = prefix + f
 *   end:          h = Mix(blocks, prefix; output_attn_res), then the final norm reads h.
 *   Mix(V_0..V_{n-1} = blocks, V_n = prefix; norm w_n, proj w_p), per row, fp32:
 *     k_i = V_i * (1 / sqrtf(mean(V_i^2) + eps))     (df_k_rmsnorm's sum order, no weight)
 *     s_i = dot(k_i, w) with w = w_n * w_p[0]        (fp32 product, folded once at load)
 *     p = softmax(s) (max, expf, sum ascending i);   out = sum_i p_i V_i  (fma, ascending i)
 * The stream is fp32 (DESIGN.md §4; the reference rounds it to BF16, docs/K3.md D5). Row r's
 * result depends only on row r (batch invariance); no state crosses positions.
 * Does not own: the sublayers, the norms' weights (df_layer), binding (engine/models/).
 */
#ifndef DF_ENGINE_LAYERS_ATTN_RES_H
#define DF_ENGINE_LAYERS_ATTN_RES_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* The Attention Residuals scheme over layers[0 .. n_layers) (each with res_norm[2] [H] and
 * res_proj[2] [1, H] bound, any float dtype; layer 0's token-side pair is never read and may
 * be NULL), a snapshot every `block` layers, the output mix's out_norm [H] / out_proj [1, H],
 * eps the scoring norm's epsilon (rms_norm_eps). Scratch for env->max_rows rows from ws
 * (ceil(n_layers / block) block snapshots [rows, H] fp32). NULL + message: out of memory, a
 * missing weight (names the layer). */
df_residual *df_residual_attn_res_new(const df_layer_env *env, df_ws *ws, const df_layer *layers,
                                      int64_t n_layers, int64_t block, float eps,
                                      const df_t_tensor *out_norm, const df_t_tensor *out_proj,
                                      char *err, size_t errlen);

#endif
