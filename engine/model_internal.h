/* engine/model_internal.h — the model struct that engine/model.c (loading, state,
 * accessors, device placement) and engine/forward.c (the layer loop) share. Not a public
 * header.
 *
 * Owns: the layout of a loaded model: its config, the tensor binder (every weight handle),
 * embeddings and head, the per-layer plan of composed blocks (engine/layers/layer.h), the
 * residual scheme, the workspace of planned buffers, the expert backend, the device
 * placement and the counters.
 */
#ifndef DF_ENGINE_MODEL_INTERNAL_H
#define DF_ENGINE_MODEL_INTERNAL_H

#include "engine/layers/bind.h"
#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"
#include "engine/model.h"
#include "engine/models/family.h"

struct df_model {
  char dir[1024];
  df_model_config cfg;
  df_gen_config gen;
  df_st_model *st;
  int64_t max_ctx, max_rows;
  df_binder bind;               /* every weight handle; the bound byte counts */
  const df_family *family;
  const df_t_tensor *embed, *final_norm, *lm_head;
  df_layer *layers;             /* [n_layers] the plan */
  df_residual *residual;
  df_layer_env env;             /* what the blocks share (points into this struct) */
  df_ws *ws;                    /* planned buffers, max_rows rows */
  df_t_tensor *rope_cos, *rope_sin; /* [max_ctx, head_dim/2] */
  df_t_tensor *x, *xn, *tmp;    /* [R, H] residual stream, sublayer input, sublayer output */
  df_t_tensor *logits;          /* [R, V] */
  df_t_tensor *scratch;         /* [threads, max_ctx] attention scores */
  df_t_tensor *xs, *ys;         /* [R*k, H] routed rows / expert outputs (the MoE blocks') */
  int64_t *pos;       /* [R] position of each row in its sequence */
  int32_t *row_seq;   /* [R] sequence of each row */
  int32_t *row_ids;   /* [R] token of each row */
  float **row_out;    /* [R] where each logits row goes */
  float **row_cap;    /* [R] where each row's captured hidden states go (NULL: nowhere) */
  int64_t capture[DF_MODEL_MAX_CAPTURE]; /* df_model_set_capture's layers, n_capture used */
  int n_capture;
  df_capture_point capture_point;
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
  df_model_progress_fn progress; /* df_model_set_progress: told after each forward chunk */
  void *progress_ctx;
};

#endif
