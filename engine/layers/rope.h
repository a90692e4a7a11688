/* engine/layers/rope.h — the rotary position embedding tables (RoPE) of a model.
 *
 * Owns: the cos/sin tables every RoPE-using token mixer reads, built once at load from the
 * config's rope_theta and rope_scaling (default, linear, YaRN with DeepSeek-V3's mscale),
 * following transformers' modeling_rope_utils.py (_compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_yarn_parameters) in its fp32 order.
 * Does not own: applying them (engine/kernels/ df_k_rope, df_k_rope_slices).
 */
#ifndef DF_ENGINE_LAYERS_ROPE_H
#define DF_ENGINE_LAYERS_ROPE_H

#include <stddef.h>
#include <stdint.h>

#include "config/model_config.h"
#include "engine/tensor/torch_shim.h"

/* cos/sin tables [max_ctx, head_dim/2] fp32, each entry cos(p * inv_freq[i]) * attention
 * factor (YaRN) for positions p < max_ctx; head_dim is the RoPE width (c->head_dim, even).
 * The caller owns both (df_t_destroy). -1 + message when out of memory. */
int df_rope_tables_new(const df_model_config *c, int64_t max_ctx, df_t_tensor **cos_out,
                       df_t_tensor **sin_out, char *err, size_t errlen);

/* " (yarn)", " (linear)" or "" for the config's rope_scaling: the note `deltafin inspect`
 * adds after rope_theta. */
const char *df_rope_scaling_note(const df_model_config *c);

#endif
