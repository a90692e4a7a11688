/* engine/layers/glu.h — the dense gated MLP (SwiGLU).
 *
 * Owns: the dense channel mixer of transformers' Qwen3MoeMLP / Qwen3MLP / DeepseekV3MLP,
 * out = down_proj(silu(gate_proj(xn)) * up_proj(xn)), or Kimi K3's SiTU-GLU (the activation
 * is a parameter), fp32 activations, weights in their stored dtype (F8_E4M3 with block
 * scales too). Does not own: the kernels, binding.
 */
#ifndef DF_ENGINE_LAYERS_GLU_H
#define DF_ENGINE_LAYERS_GLU_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* A dense gated-MLP mixer for decoder layer `layer`: gate/up [I, H], down [H, I] (borrowed);
 * act: its activation (kernels.h df_k_glu_act, copied; NULL = SiLU, SwiGLU); scratch
 * [env->max_rows, I] x2 from ws. NULL + message when out of memory. */
df_channel_mixer *df_glu_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                             const df_t_tensor *gate, const df_t_tensor *up,
                             const df_t_tensor *down, const df_k_act *act, char *err,
                             size_t errlen);

#endif
