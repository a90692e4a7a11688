/* engine/layers/moe.h — the routed mixture-of-experts channel mixer.
 *
 * Owns: one MoE layer's router, its routing policy, the grouping of (row, choice) pairs by
 * expert, the dispatch of the groups to the model's expert backend (local or remote nodes,
 * engine/experts/expert_backend.h) and the fp32 combine, plus optional shared experts:
 *   softmax top-k (transformers' Qwen3MoeSparseMoeBlock): weights = softmax(gate(xn)) of the
 *     top-k, renormalised when norm_topk_prob;
 *   sigmoid group-limited (DeepseekV3TopkRouter, topk_method "noaux_tc"): sigmoid scores,
 *     e_score_correction_bias for selection only, top topk_group of n_group groups, top-k
 *     within them, weights = unbiased scores (renormalised when norm_topk_prob) times
 *     routed_scaling_factor (kernels.h df_k_router_sigmoid_group);
 *   out = sum_j w_j * expert_j(xn) in the router's order of choices (fp32 axpy), then
 *     + the shared experts' SwiGLU (DeepseekV3MoE.forward) when present.
 * Latent MoE (Kimi K3's KimiSparseMoeBlock with routed_expert_hidden_size, docs/K3.md §3.7):
 * the router still reads xn, but the routed experts run in a narrower latent space:
 *   z = routed_expert_down_proj(xn)                     [R, Lat], once per row
 *   Y = sum_j w_j * expert_j(z)                           fp32, the router's order
 *   Y = RMSNorm(Y; routed_expert_norm, eps)               (when latent_moe_use_norm)
 *   out = routed_expert_up_proj(Y) + shared(xn)
 * The experts' (and shared experts') activation is the router's `act` (SiLU or SiTU).
 * The router's order is the canonical slot order of the combine: descending selection score
 * (score + correction bias for sigmoid routers), ties to the lower expert id — the same on
 * one machine, on nodes and in any batch, so the fp32 sum's bits never depend on placement.
 * Experts write unweighted rows; the weighting happens here, so the result does not depend
 * on which backend ran which expert. Routing counts per (layer, expert) go to the model's
 * heat. Does not own: the expert weights' execution (the backend), binding (engine/models/).
 */
#ifndef DF_ENGINE_LAYERS_MOE_H
#define DF_ENGINE_LAYERS_MOE_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* The routing policy of a MoE layer. */
typedef struct df_moe_router {
  df_router_kind kind;     /* DF_ROUTER_SOFTMAX or DF_ROUTER_SIGMOID_NOAUX */
  int64_t n_experts, top_k;
  bool norm_topk;          /* renormalise the chosen weights to sum 1 */
  int64_t n_group, topk_group; /* sigmoid: expert groups, groups kept per token */
  float routed_scaling;    /* sigmoid: multiplies the routed weights */
  df_k_act act;            /* the routed and shared experts' activation; zero = SiLU */
  float latent_eps;        /* routed_expert_norm's epsilon (latent MoE with a norm) */
} df_moe_router;

/* A layer's non-expert MoE weights (borrowed views). */
typedef struct df_moe_weights {
  const df_t_tensor *router;                 /* gate [E, H] */
  const df_t_tensor *router_bias;            /* e_score_correction_bias [E] F32, or NULL */
  const df_t_tensor *sh_gate, *sh_up, *sh_down; /* shared experts [S, H] x2, [H, S], or NULL */
  /* latent MoE, else NULL: routed_expert_down_proj [Lat, H], routed_expert_norm [Lat] (or
   * NULL: no norm), routed_expert_up_proj [H, Lat]; the experts are then [I, Lat] / [Lat, I] */
  const df_t_tensor *lat_down, *lat_norm, *lat_up;
} df_moe_weights;

/* A MoE mixer for decoder layer `layer` of hidden width H; its routed experts are set with
 * df_moe_set_expert before the first forward. Scratch from ws for env->max_rows rows. NULL +
 * message when out of memory. */
df_channel_mixer *df_moe_new(const df_layer_env *env, df_ws *ws, int64_t layer, int64_t H,
                             const df_moe_router *router, const df_moe_weights *w, char *err,
                             size_t errlen);

/* Routed expert e's weights: gate/up [I, W], down [W, I] (borrowed), W = H or the latent
 * width. */
void df_moe_set_expert(df_channel_mixer *cm, int64_t e, const df_t_tensor *gate,
                       const df_t_tensor *up, const df_t_tensor *down);

/* The host fp32 buffers [max_rows * top_k, H] a MoE layer gathers its routed rows into (xs)
 * and receives their expert outputs in (ys): the same ones every MoE layer of the model
 * uses, also lent to the torch compute path for its backend requests. top_k 0 counts as 1.
 * -1 + message when out of memory. */
int df_moe_io_buffers(df_ws *ws, int64_t max_rows, int64_t top_k, int64_t H, df_t_tensor **xs,
                      df_t_tensor **ys, char *err, size_t errlen);

#endif
