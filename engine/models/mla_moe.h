/* engine/models/mla_moe.h — binding the blocks the DeepSeek-V3 layout shares with its
 * descendants (deepseek_v3 / kimi_k2, kimi_linear): the MLA projections and the FFN (a dense
 * SwiGLU, or the sigmoid-routed MoE with its correction bias, shared experts and routed
 * experts). Private to engine/models/.
 *
 * Owns: the tensor names and shapes of those blocks under "<tensor_prefix>model.layers.<l>."
 * (modeling_deepseek.py, modeling_kimi.py), checked against the config by the binder. Does not
 * own: the blocks (engine/layers/mla.h, moe.h, glu.h), the attention dims or the layer plan.
 */
#ifndef DF_ENGINE_MODELS_MLA_MOE_H
#define DF_ENGINE_MODELS_MLA_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/layers/mla.h"
#include "engine/models/family.h"

/* Layer l's MLA weights into *a: q_a_proj + q_a_layernorm + q_b_proj when q_lora_rank > 0,
 * else q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; and g_proj (the output
 * gate, [n_head * v_head_dim, hidden]) when output_gate. 0, or -1 + the binder's message. */
int df_bind_mla_weights(const df_family_ctx *fc, int64_t l, bool output_gate,
                        df_mla_weights *a, char *err, size_t errlen);

/* Layer l's channel mixer into L->ffn: when the config says layer l is dense, the SwiGLU of
 * "mlp.{gate,up,down}_proj" (intermediate_size); else the MoE block named moe_block ("mlp"
 * for DeepSeek-V3, "block_sparse_moe" for Kimi Linear): "<moe_block>.gate.weight" [E, hidden],
 * its F32 "e_score_correction_bias" [E] (selection only: the weights are the unbiased
 * sigmoid scores, renormalised when norm_topk_prob, times routed_scaling_factor), shared
 * experts "<moe_block>.shared_experts.*" of width moe_intermediate_size x n_shared_experts,
 * and the routed experts named by expert_name (the family's df_family.expert_tensor_name;
 * NULL: "mlp.experts.<e>.{gate,up,down}_proj.weight"). Kimi K3's switches (config
 * hidden_act situ, latent_dim, latent_norm): SiTU-GLU for the dense, shared and routed MLPs,
 * and the latent MoE's "<moe_block>.routed_expert_{down_proj,norm,up_proj}" with the routed
 * experts [I, latent] / [latent, I] (MXFP4 pairs bind through df_bind_linear). 0, or -1 +
 * the binder's or the block's message. */
int df_build_mla_moe_ffn(const df_family_ctx *fc, int64_t l, df_layer *L, const char *moe_block,
                         void (*expert_name)(const df_model_config *c, int64_t l, int64_t e,
                                             int part, char *buf, size_t cap),
                         char *err, size_t errlen);

#endif
