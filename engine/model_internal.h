/* engine/model_internal.h — what engine/model.c and engine/model_deepseek.c share: the
 * model struct, per-layer weights and the tensor binder. Not a public header.
 */
#ifndef DF_ENGINE_MODEL_INTERNAL_H
#define DF_ENGINE_MODEL_INTERNAL_H

#include "engine/model.h"

typedef struct layer_w {
  const df_t_tensor *in_norm, *post_norm;           /* [H] */
  const df_t_tensor *q, *k, *v, *o;                 /* [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd] */
  const df_t_tensor *qb, *kb, *vb, *ob;             /* biases or NULL */
  const df_t_tensor *q_norm, *k_norm;               /* [hd] */
  bool moe;
  const df_t_tensor *router;                        /* [E, H] */
  const df_t_tensor **ex_gate, **ex_up, **ex_down;  /* [E] each [I, H], [I, H], [H, I] */
  const df_t_tensor *mlp_gate, *mlp_up, *mlp_down;  /* dense */
  /* deepseek_v3 (MLA; `q` above is q_proj when q_lora_rank is 0, `o` is o_proj [H, nh*dv]) */
  const df_t_tensor *q_a, *q_a_norm, *q_b;          /* [ql, H], [ql], [nh*(dn+dr), ql] */
  const df_t_tensor *kv_a, *kv_a_norm, *kv_b;       /* [L+dr, H], [L], [nh*(dn+dv), L] */
  const df_t_tensor *router_bias;                   /* e_score_correction_bias [E] F32 */
  const df_t_tensor *sh_gate, *sh_up, *sh_down;     /* shared experts [S, H] x2, [H, S] */
} layer_w;

struct df_model {
  char dir[1024];
  df_model_config cfg;
  df_gen_config gen;
  df_st_model *st;
  int64_t max_ctx, max_rows;
  /* every handle created (weights), freed at destroy */
  df_t_tensor **handles;
  size_t n_handles, cap_handles;
  const df_t_tensor *embed, *final_norm, *lm_head;
  layer_w *layers;
  df_t_tensor *rope_cos, *rope_sin; /* [max_ctx, hd/2] */
  /* planned buffers, max_rows rows */
  df_t_tensor *x, *xn, *tmp, *q, *k, *v, *att, *router_logits, *xs, *ys, *g, *u, *logits,
      *scratch;
  /* deepseek_v3 buffers, max_rows rows (NULL otherwise) */
  df_t_tensor *ds_q;     /* [R, nh*(dn+dr)] */
  df_t_tensor *ds_qa;    /* [R, q_lora_rank] */
  df_t_tensor *ds_ckv;   /* [R, L+dr] latent + RoPE key of the new rows */
  df_t_tensor *ds_qabs;  /* [R, nh*L] absorbed queries */
  df_t_tensor *ds_lat;   /* [R, nh*L] attention output in latent space */
  df_t_tensor *ds_att;   /* [R, nh*dv] */
  float *router_work;    /* [2E + 2 n_group] */
  float mla_scale;       /* softmax scale: qk_head_dim^-0.5 * mscale^2 */
  int32_t *top_idx;   /* [R, k] */
  float *top_w;       /* [R, k] */
  int64_t *slot;      /* [R, k] row in xs/ys of (r, j) */
  int64_t *counts;    /* [E + 1] */
  int32_t *experts;   /* [E] */
  int64_t *offsets;   /* [E + 1] */
  int64_t *pos;       /* [R] position of each row in its sequence */
  int32_t *row_seq;   /* [R] sequence of each row */
  int32_t *row_ids;   /* [R] token of each row */
  float **row_out;    /* [R] where each logits row goes */
  df_expert_backend *backend;
  /* device placement (docs/GPU.md); tm NULL = own kernels on the CPU */
  df_tm *tm;
  df_t_device device;          /* DF_T_DEV_CPU, or tm's device */
  char device_note[400];
  int64_t experts_on_device;
  uint8_t *expert_on_device;   /* [n_layers * E] 1 = on the device; NULL on the CPU path */
  df_admit_plan device_plan;   /* the admission's figures (zero when none ran) */
  uint64_t *route_counts;      /* [n_layers * E] or NULL (no routed experts) */
  df_model_bytes bytes;
  bool profiling;
  df_model_profile prof;
};

/* Bind tensor `name` with the expected shape (BF16/F16/F32); see model.c. */
const df_t_tensor *df_model_bind(df_model *m, const char *name, int ndim, const int64_t *shape,
                                 bool optional, bool is_expert, char *err, size_t errlen);

/* Keep a handle the model created (freed at destroy). 0, or -1 out of memory. */
int df_model_track(df_model *m, df_t_tensor *t);

/* deepseek_v3 / kimi_k2 (engine/model_deepseek.c) */

/* Bind layer l's MLA attention, router bias and shared experts, and its MLP (dense or routed
 * experts, through bind_linear so FP8 weights get their scales). -1 + message on error. */
int df_ds_bind_layer(df_model *m, int64_t l, char *err, size_t errlen);

/* Allocate the MLA buffers for max_rows rows and the softmax scale; adds to bytes.buffers. */
int df_ds_plan(df_model *m, char *err, size_t errlen);

/* Free what df_ds_plan allocated. */
void df_ds_free(df_model *m);

/* Attention block of layer l over rows [0, R) of m->x (input_layernorm included): result
 * (o_proj output) in m->tmp; appends the rows' latents to their sequences' caches. */
void df_ds_attention(df_model *m, int64_t l, df_kv_cache **kvs, const int32_t *row_seq, int64_t R);

#endif
