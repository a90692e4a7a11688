/* engine/models/qwen3_moe.c — the qwen3_moe family (and its dense sibling qwen3).
 *
 * Semantics: transformers' models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeDecoderLayer)
 * and models/qwen3/modeling_qwen3.py: pre-norm residual around GQA attention with RoPE and
 * per-head q/k RMSNorm (optional q/k/v/o biases), then a routed MoE block (softmax top-k,
 * optional renormalisation; no shared experts) on the layers config.json marks sparse
 * (decoder_sparse_step, mlp_only_layers) and a dense SwiGLU MLP elsewhere (qwen3: every
 * layer). Tensors: model.layers.<l>.{input_layernorm, post_attention_layernorm}.weight,
 * self_attn.{q,k,v,o}_proj.{weight,bias}, self_attn.{q,k}_norm.weight, mlp.gate.weight,
 * mlp.experts.<e>.{gate,up,down}_proj.weight or mlp.{gate,up,down}_proj.weight, in BF16,
 * F16 or F32.
 */
#include <stdio.h>
#include <string.h>

#include "engine/layers/glu.h"
#include "engine/layers/gqa.h"
#include "engine/layers/moe.h"
#include "engine/layers/rope.h"
#include "engine/models/family.h"

/* ---- config.json: the family's own keys (Qwen3MoeConfig / Qwen3Config) ------------------
 * qwen3: required intermediate_size; MoE fields 0, decoder_sparse_step 1, no MoE layer.
 * qwen3_moe: num_experts (or num_local_experts) required, and when > 0 num_experts_per_tok
 * (<= num_experts) and moe_intermediate_size; decoder_sparse_step (default 1),
 * mlp_only_layers (default [], entries in 0..num_hidden_layers-1), norm_topk_prob (default
 * false); layer i is a sparse MoE layer iff num_experts > 0 && i not in mlp_only_layers &&
 * (i + 1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer.__init__); intermediate_size is
 * required whenever some layer is dense (else 0 when absent). Router: softmax top-k. */
static int parse_config(df_cfg_reader *r, const char *model_type, df_model_config *m) {
  int64_t n_layers = m->num_hidden_layers;
  if (strcmp(model_type, "qwen3") == 0) {
    m->arch = DF_ARCH_QWEN3;
    m->decoder_sparse_step = 1;
    return df_cfg_int(r, "intermediate_size", true, 0, 1, DF_CFG_MAX_DIM, &m->intermediate_size);
  }
  m->arch = DF_ARCH_QWEN3_MOE;
  const char *ne_key = df_cfg_has(r, "num_experts") ? "num_experts" : "num_local_experts";
  if (df_cfg_int(r, ne_key, false, -1, 0, DF_CFG_MAX_DIM, &m->num_experts)) return -1;
  if (m->num_experts < 0) {
    df_cfg_fail(r, "missing required key 'num_experts'");
    return -1;
  }
  if (df_cfg_int(r, "decoder_sparse_step", false, 1, 1, DF_CFG_MAX_DIM,
                 &m->decoder_sparse_step) ||
      df_cfg_bool(r, "norm_topk_prob", false, &m->norm_topk_prob))
    return -1;
  bool mlp_only[DF_CFG_MAX_LAYERS];
  if (df_cfg_layer_list(r, "mlp_only_layers", n_layers, mlp_only)) return -1;
  int64_t n_dense = 0;
  for (int64_t i = 0; i < n_layers; i++) {
    m->is_moe_layer[i] =
        m->num_experts > 0 && !mlp_only[i] && (i + 1) % m->decoder_sparse_step == 0;
    if (!m->is_moe_layer[i]) n_dense++;
  }
  if (m->num_experts > 0) {
    if (df_cfg_int(r, "num_experts_per_tok", true, 0, 1, DF_CFG_MAX_DIM,
                   &m->num_experts_per_tok) ||
        df_cfg_int(r, "moe_intermediate_size", true, 0, 1, DF_CFG_MAX_DIM,
                   &m->moe_intermediate_size))
      return -1;
    if (m->num_experts_per_tok > m->num_experts) {
      df_cfg_fail(r, "key 'num_experts_per_tok': top-k %lld exceeds num_experts %lld",
                  (long long)m->num_experts_per_tok, (long long)m->num_experts);
      return -1;
    }
  }
  /* The dense MLP width matters only when some layer is dense; then it is required. */
  return df_cfg_int(r, "intermediate_size", n_dense > 0, 0, 1, DF_CFG_MAX_DIM,
                    &m->intermediate_size);
}

#define NM(fmt, ...) (snprintf(nm, sizeof nm, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), nm)
#define BIND(dst, name, nd, ...)                                                              \
  do {                                                                                        \
    int64_t sh_[] = {__VA_ARGS__};                                                            \
    if (!((dst) = df_bind(b, name, nd, sh_, false, false, err, errlen))) return -1;           \
  } while (0)

static int build_layer(const df_family_ctx *fc, int64_t l, df_layer *L, char *err,
                       size_t errlen) {
  const df_model_config *c = fc->cfg;
  df_binder *b = fc->bind;
  int64_t H = c->hidden_size, hd = c->head_dim, nh = c->num_attention_heads,
          nkv = c->num_key_value_heads;
  char nm[256];
  df_gqa_weights a = {0};
  BIND(L->norm[0], NM("input_layernorm.weight"), 1, H);
  BIND(L->norm[1], NM("post_attention_layernorm.weight"), 1, H);
  BIND(a.q, NM("self_attn.q_proj.weight"), 2, nh * hd, H);
  BIND(a.k, NM("self_attn.k_proj.weight"), 2, nkv * hd, H);
  BIND(a.v, NM("self_attn.v_proj.weight"), 2, nkv * hd, H);
  BIND(a.o, NM("self_attn.o_proj.weight"), 2, H, nh * hd);
  if (c->attention_bias) {
    BIND(a.qb, NM("self_attn.q_proj.bias"), 1, nh * hd);
    BIND(a.kb, NM("self_attn.k_proj.bias"), 1, nkv * hd);
    BIND(a.vb, NM("self_attn.v_proj.bias"), 1, nkv * hd);
    BIND(a.ob, NM("self_attn.o_proj.bias"), 1, H);
  }
  BIND(a.q_norm, NM("self_attn.q_norm.weight"), 1, hd);
  BIND(a.k_norm, NM("self_attn.k_norm.weight"), 1, hd);
  if (!(L->attn = df_gqa_new(fc->env, fc->ws, l, &a, nh, nkv, hd, (float)c->rms_norm_eps, err,
                             errlen)))
    return -1;
  if (c->arch == DF_ARCH_QWEN3_MOE && c->is_moe_layer[l]) {
    int64_t E = c->num_experts, I = c->moe_intermediate_size;
    df_moe_weights w = {0};
    BIND(w.router, NM("mlp.gate.weight"), 2, E, H);
    df_moe_router rt = {.kind = DF_ROUTER_SOFTMAX, .n_experts = E,
                        .top_k = c->num_experts_per_tok, .norm_topk = c->norm_topk_prob};
    if (!(L->ffn = df_moe_new(fc->env, fc->ws, l, H, &rt, &w, err, errlen))) return -1;
    for (int64_t e = 0; e < E; e++) {
      int64_t s_gu[2] = {I, H}, s_d[2] = {H, I};
      const df_t_tensor *g, *u, *d;
      if (!(g = df_bind(b, NM("mlp.experts.%lld.gate_proj.weight", (long long)e), 2, s_gu, false,
                        true, err, errlen)) ||
          !(u = df_bind(b, NM("mlp.experts.%lld.up_proj.weight", (long long)e), 2, s_gu, false,
                        true, err, errlen)) ||
          !(d = df_bind(b, NM("mlp.experts.%lld.down_proj.weight", (long long)e), 2, s_d, false,
                        true, err, errlen)))
        return -1;
      df_moe_set_expert(L->ffn, e, g, u, d);
    }
    return 0;
  }
  int64_t I = c->intermediate_size;
  const df_t_tensor *g, *u, *d;
  BIND(g, NM("mlp.gate_proj.weight"), 2, I, H);
  BIND(u, NM("mlp.up_proj.weight"), 2, I, H);
  BIND(d, NM("mlp.down_proj.weight"), 2, H, I);
  if (!(L->ffn = df_glu_new(fc->env, fc->ws, l, g, u, d, NULL, err, errlen))) return -1;
  return 0;
}

static void summary(const df_model_config *c, FILE *f) {
  const char *rope_kind = df_rope_scaling_note(c);
  fprintf(f, "attention    %lld query heads, %lld kv heads, head_dim %lld, rope_theta %g%s\n",
          (long long)c->num_attention_heads, (long long)c->num_key_value_heads,
          (long long)c->head_dim, c->rope_theta, rope_kind);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l];
  if (c->arch == DF_ARCH_QWEN3_MOE)
    fprintf(f, "moe          %lld of %lld layers, %lld experts, top-%lld, expert width %lld, "
            "norm_topk_prob %s\n", (long long)n_moe, (long long)c->num_hidden_layers,
            (long long)c->num_experts, (long long)c->num_experts_per_tok,
            (long long)c->moe_intermediate_size, c->norm_topk_prob ? "true" : "false");
}

static const char *const model_types[] = {"qwen3_moe", "qwen3", NULL};

/* The plain pre-norm residual. */
static df_residual *residual_new(const df_family_ctx *fc, const df_layer *layers, char *err,
                                 size_t errlen) {
  (void)layers;
  return df_residual_prenorm_of(fc->cfg, err, errlen);
}

const df_family df_family_qwen3_moe = {
    .config = {.model_types = model_types, .rope_mscale = false, .parse = parse_config},
    .name = "qwen3_moe",
    .build_layer = build_layer,
    .residual_new = residual_new,
    .summary = summary,
};
