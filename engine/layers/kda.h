/* engine/layers/kda.h — Kimi Delta Attention (KDA), the linear-attention token mixer of the
 * Kimi Linear family, with its recurrent per-sequence state and exact rollback.
 *
 * Owns: the KDA mixer of Moonshot's modeling_kimi.py (KimiDeltaAttention) as docs/K3.md §3.4
 * writes it down, in the engine's fp32 numerics (weights widened exactly; activations and
 * every accumulation fp32; fixed reduction orders of engine/kernels/kernels.h). For each row
 * x [hidden] of a sequence, with H heads of width D (K = V = D) and C = H*D channels
 * (channel c = h*D + d):
 *   q~, k~, v~ = q_proj x, k_proj x, v_proj x                          [C] each
 *   q, k, v    = silu(causal depthwise conv of width W over the last W pre-conv rows)
 *                (taps oldest to newest, the window of earlier rows zero at the start)
 *   g_raw      = f_b_proj(f_a_proj x)                                  [C]
 *   g          = -exp(A_log[h]) * softplus(g_raw + dt_bias)  (softplus threshold 20), or
 *                lb * sigmoid(exp(A_log[h]) * (g_raw + dt_bias)) with gate_lower_bound lb
 *   beta       = sigmoid(b_proj x)                                     [H]
 *   q^ = q / sqrt(sum q^2 + 1e-6) * D^-0.5,  k^ = k / sqrt(sum k^2 + 1e-6)   (per head)
 *   per head, S [D(key), D(value)] fp32:  S = S * exp(g)[:, None];  u = v - S^T k^;
 *                                         S = S + beta * k^ (x) u;   o = S^T q^
 *   o' = o * rsqrt(mean(o^2) + eps) * o_norm * sigmoid(gate)           (per head)
 *        gate = g_proj x (full rank) or g_b_proj(g_a_proj x)
 *   out = o_proj concat_h o'_h
 * Rows are fed one by one in position order in every mode, so prefill of n rows equals n
 * single-row decodes bitwise and a row never depends on another sequence in the batch;
 * heads run in parallel (they share nothing).
 * Per-sequence state (a df_kv_rec in the sequence's df_kv_cache slot of the layer,
 * bytes_per_token 0): S per head, the conv windows (last W-1 pre-conv rows of q, k, v per
 * channel), a base copy of both, and a ring log of the last `cap` rows' recurrence inputs
 * (pre-conv q, k, v rows, g, beta). Rollback to n in [base, len] restores the base and
 * replays the logged rows up to n with the same row step (bitwise equal to the first run);
 * when the log is full the oldest row is folded into the base. A snapshot of the state
 * (kv_cache.h df_kv_snap) copies S and the conv windows only, (H*D*D + 3*C*(W-1)) * 4 bytes;
 * its restore makes that copy both the state and the base at its length, with an empty log
 * (rollback then reaches back only to that length, or 0). Does not own: binding
 * (engine/models/kimi_linear.c), the kernels (engine/kernels/).
 */
#ifndef DF_ENGINE_LAYERS_KDA_H
#define DF_ENGINE_LAYERS_KDA_H

#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* The weights of one KDA layer (borrowed views of the checkpoint; must outlive the mixer).
 * Linear weights [out, in] in their stored dtype; C = n_head * head_dim, W = conv width. */
typedef struct df_kda_weights {
  const df_t_tensor *q, *k, *v;          /* [C, hidden] */
  const df_t_tensor *q_conv, *k_conv, *v_conv; /* [C, 1, W] any float dtype */
  const df_t_tensor *a_log;              /* [H], (1,1,H,1) or [>= H]: the first H are used */
  const df_t_tensor *dt_bias;            /* [C] */
  const df_t_tensor *f_a, *f_b;          /* [D, hidden], [C, D] */
  const df_t_tensor *b;                  /* [H, hidden] */
  const df_t_tensor *g;                  /* [C, hidden] full-rank output gate, or NULL */
  const df_t_tensor *g_a, *g_b;          /* [D, hidden], [C, D] low-rank gate (g NULL) */
  const df_t_tensor *o_norm;             /* [D] */
  const df_t_tensor *o;                  /* [hidden, C] */
} df_kda_weights;

/* The KDA shape of a layer. */
typedef struct df_kda_dims {
  int64_t n_head, head_dim, conv_width; /* H, D, W (W >= 1) */
  bool lower_bound;  /* the sigmoid "safe" decay gate (gate_lower_bound) instead of softplus */
  float lb;          /* gate_lower_bound (< 0) when lower_bound */
  float norm_eps;    /* o_norm eps (rms_norm_eps) */
} df_kda_dims;

/* A KDA mixer for decoder layer `layer`; scratch from ws for env->max_rows rows; the small
 * per-channel parameters (conv taps, exp(A_log), dt_bias, o_norm) are widened to fp32 once
 * here. env is borrowed. NULL + message when out of memory. */
df_token_mixer *df_kda_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_kda_weights *w, const df_kda_dims *dims, char *err,
                           size_t errlen);

/* Rows of the rollback log of every KDA state of a model whose chunks have max_rows rows:
 * max(max_rows, 64), so a speculative verify (at most 9 rows) and a whole chunk can always
 * be rolled back. */
int64_t df_kda_log_rows(int64_t max_rows);

#endif
