/* engine/layers/moe.c — the routed MoE channel mixer; see moe.h. */
#include "engine/layers/moe.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

typedef struct moe {
  df_channel_mixer base;
  df_moe_router rt;
  df_moe_weights w;
  const df_t_tensor **ex_gate, **ex_up, **ex_down; /* [E] each, owned arrays */
  const df_layer_env *env;
  int64_t H, W;               /* hidden width; width the experts run in (H or latent) */
  df_t_tensor *router_logits; /* [R, E] */
  df_t_tensor *xs, *ys;       /* [R*k, W] gathered rows, expert outputs */
  df_t_tensor *z, *comb;      /* [R, W] latent input, latent combine (latent MoE only) */
  df_t_tensor *sh_y;          /* [R, H] shared-expert output (models with shared experts) */
  df_t_tensor *g, *u;         /* [R, S] shared-expert scratch, or NULL */
  int32_t *top_idx;           /* [R, k] */
  float *top_w;               /* [R, k] */
  int64_t *slot;              /* [R, k] row in xs/ys of (r, j) */
  int64_t *counts;            /* [E + 1] */
  int32_t *experts;           /* [E] */
  int64_t *offsets;           /* [E + 1] */
  float *router_work;         /* [2E + 2 n_group + 2] */
} moe;

/* The shared experts of one forward (DeepseekV3MoE.forward's shared_experts(identity)), run
 * once: by an expert backend while remote experts are in flight (df_expert_request.overlap),
 * or by moe_forward after the routed combine. Their output waits in sh_y until it is added in
 * the same place either way, so the values never depend on who ran it. */
typedef struct shared_job {
  moe *m;
  const df_t_tensor *xn;
  int64_t R;
  bool done;
} shared_job;

static void shared_run(void *ctx) {
  shared_job *j = ctx;
  if (j->done) return;
  moe *m = j->m;
  df_t_glu_ffn(j->xn, 0, j->R, m->w.sh_gate, m->w.sh_up, m->w.sh_down, &m->rt.act, m->g, m->u,
               m->sh_y);
  j->done = true;
}

static int moe_forward(df_channel_mixer *cm, const df_rows *rows, const df_t_tensor *xn,
                       df_t_tensor *out_t, char *err, size_t errlen) {
  moe *m = (moe *)cm;
  const df_moe_router *rt = &m->rt;
  const df_layer_env *env = m->env;
  int64_t E = rt->n_experts, k = rt->top_k, H = m->H, W = m->W, R = rows->R;
  int layer = (int)cm->layer;
  bool on = *env->profiling;
  double t0 = on ? df_prof_now() : 0;
  df_t_linear(xn, 0, R, m->w.router, NULL, m->router_logits);
  if (rt->kind == DF_ROUTER_SIGMOID_NOAUX)
    df_k_router_sigmoid_group(df_t_f32(m->router_logits), R, E, df_t_data(m->w.router_bias),
                              rt->n_group, rt->topk_group, k, rt->norm_topk, rt->routed_scaling,
                              m->router_work, m->top_idx, m->top_w);
  else
    df_t_router_topk(m->router_logits, R, k, rt->norm_topk, m->top_idx, m->top_w);
  /* group (row, choice) pairs by expert id, ascending; rows ascending within a group */
  memset(m->counts, 0, (size_t)(E + 1) * sizeof *m->counts);
  for (int64_t i = 0; i < R * k; i++) m->counts[m->top_idx[i]]++;
  if (env->route_counts)
    for (int64_t e = 0; e < E; e++)
      env->route_counts[(int64_t)layer * E + e] += (uint64_t)m->counts[e];
  int n_groups = 0;
  int64_t off = 0;
  for (int64_t e = 0; e < E; e++) {
    if (!m->counts[e]) continue;
    m->experts[n_groups] = (int32_t)e;
    m->offsets[n_groups++] = off;
    int64_t cnt = m->counts[e];
    m->counts[e] = off; /* becomes the fill cursor */
    off += cnt;
  }
  m->offsets[n_groups] = off;
  if (m->w.lat_down) df_t_linear(xn, 0, R, m->w.lat_down, NULL, m->z); /* into the latent */
  const float *x = df_t_f32(m->w.lat_down ? m->z : (df_t_tensor *)xn);
  float *xs = df_t_f32(m->xs);
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < k; j++) {
      int64_t s = m->counts[m->top_idx[r * k + j]]++;
      m->slot[r * k + j] = s;
      memcpy(xs + s * W, x + r * W, (size_t)W * sizeof(float));
    }
  shared_job sj = {.m = m, .xn = xn, .R = R};
  df_expert_request req = {.layer = layer, .n_groups = n_groups, .experts = m->experts,
                           .offsets = m->offsets, .x = m->xs, .y = m->ys,
                           .act = rt->act.kind == DF_K_ACT_SILU ? NULL : &rt->act,
                           .overlap = m->w.sh_gate ? shared_run : NULL, .overlap_ctx = &sj};
  df_prof_lap(on, &env->prof->router, &t0);
  if (df_expert_backend_run(*env->backend, &req, err, errlen) != 0) return -1;
  df_prof_lap(on, &env->prof->experts, &t0);
  const float *ys = df_t_f32(m->ys);
  float *out = df_t_f32(out_t), *comb = m->w.lat_down ? df_t_f32(m->comb) : out;
  for (int64_t r = 0; r < R; r++) { /* fp32, in the router's (canonical) order */
    float *o = comb + r * W;
    memset(o, 0, (size_t)W * sizeof(float));
    for (int64_t j = 0; j < k; j++) df_k_axpy(o, m->top_w[r * k + j], ys + m->slot[r * k + j] * W, W);
  }
  if (m->w.lat_down) { /* latent norm, then back to the hidden width */
    if (m->w.lat_norm) df_t_rmsnorm(m->comb, R, m->w.lat_norm, rt->latent_eps, m->comb);
    df_t_linear(m->comb, 0, R, m->w.lat_up, NULL, out_t);
  }
  df_prof_lap(on, &env->prof->combine, &t0);
  if (m->w.sh_gate) { /* routed sum + shared experts (DeepseekV3MoE.forward) */
    shared_run(&sj);
    df_k_add(out, df_t_f32(m->sh_y), R * H);
    df_prof_lap(on, &env->prof->dense_mlp, &t0);
  }
  return 0;
}

static int moe_expert_weights(const df_channel_mixer *cm, int64_t e, const df_t_tensor **gate,
                              const df_t_tensor **up, const df_t_tensor **down) {
  const moe *m = (const moe *)cm;
  if (e < 0 || e >= m->rt.n_experts) return -1;
  *gate = m->ex_gate[e];
  *up = m->ex_up[e];
  *down = m->ex_down[e];
  return 0;
}

static void moe_describe(const df_channel_mixer *cm, df_tm_desc *d, df_tm_layer *t) {
  const moe *m = (const moe *)cm;
  t->router = m->w.router;
  t->router_bias = m->w.router_bias;
  t->ex_gate = m->ex_gate;
  t->ex_up = m->ex_up;
  t->ex_down = m->ex_down;
  t->sh_gate = m->w.sh_gate;
  t->sh_up = m->w.sh_up;
  t->sh_down = m->w.sh_down;
}

static void moe_destroy(df_channel_mixer *cm) {
  moe *m = (moe *)cm;
  free(m->ex_gate);
  free(m->ex_up);
  free(m->ex_down);
  free(m);
}

static const df_channel_mixer_ops moe_ops = {"moe", moe_forward, moe_expert_weights,
                                             moe_describe, moe_destroy};

int df_moe_io_buffers(df_ws *ws, int64_t max_rows, int64_t top_k, int64_t H, df_t_tensor **xs,
                      df_t_tensor **ys, char *err, size_t errlen) {
  int64_t k = top_k > 0 ? top_k : 1;
  if (!(*xs = df_ws_f32(ws, "moe.xs", max_rows * k, H, err, errlen)) ||
      !(*ys = df_ws_f32(ws, "moe.ys", max_rows * k, H, err, errlen)))
    return -1;
  return 0;
}

df_channel_mixer *df_moe_new(const df_layer_env *env, df_ws *ws, int64_t layer, int64_t H,
                             const df_moe_router *router, const df_moe_weights *w, char *err,
                             size_t errlen) {
  moe *m = calloc(1, sizeof *m);
  int64_t E = router->n_experts, k = router->top_k, R = env->max_rows;
  if (!m) goto oom;
  m->base.ops = &moe_ops;
  m->base.layer = layer;
  m->rt = *router;
  m->w = *w;
  m->env = env;
  m->H = H;
  m->W = w->lat_down ? df_t_size(w->lat_down, 0) : H;
  m->ex_gate = calloc((size_t)E, sizeof *m->ex_gate);
  m->ex_up = calloc((size_t)E, sizeof *m->ex_up);
  m->ex_down = calloc((size_t)E, sizeof *m->ex_down);
  if (!m->ex_gate || !m->ex_up || !m->ex_down) goto oom;
  if (w->lat_down &&
      (!(m->xs = df_ws_f32(ws, "moe.latent_xs", R * k, m->W, err, errlen)) ||
       !(m->ys = df_ws_f32(ws, "moe.latent_ys", R * k, m->W, err, errlen)) ||
       !(m->z = df_ws_f32(ws, "moe.latent_z", R, m->W, err, errlen)) ||
       !(m->comb = df_ws_f32(ws, "moe.latent_comb", R, m->W, err, errlen))))
    goto fail;
  if (!(m->router_logits = df_ws_f32(ws, "moe.router_logits", R, E, err, errlen)) ||
      (!w->lat_down && df_moe_io_buffers(ws, R, k, H, &m->xs, &m->ys, err, errlen) != 0) ||
      !(m->top_idx = df_ws_array(ws, "moe.top_idx", R * k, sizeof *m->top_idx, err, errlen)) ||
      !(m->top_w = df_ws_array(ws, "moe.top_w", R * k, sizeof *m->top_w, err, errlen)) ||
      !(m->slot = df_ws_array(ws, "moe.slot", R * k, sizeof *m->slot, err, errlen)) ||
      !(m->counts = df_ws_array(ws, "moe.counts", E + 1, sizeof *m->counts, err, errlen)) ||
      !(m->experts = df_ws_array(ws, "moe.experts", E, sizeof *m->experts, err, errlen)) ||
      !(m->offsets = df_ws_array(ws, "moe.offsets", E + 1, sizeof *m->offsets, err, errlen)))
    goto fail;
  if (router->kind == DF_ROUTER_SIGMOID_NOAUX &&
      !(m->router_work = df_ws_array(ws, "moe.router_work", 2 * E + 2 * router->n_group + 2,
                                     sizeof(float), err, errlen)))
    goto fail;
  if (w->sh_gate) {
    int64_t S = df_t_size(w->sh_gate, 0);
    if (!(m->g = df_ws_f32(ws, "moe.shared_g", R, S, err, errlen)) ||
        !(m->u = df_ws_f32(ws, "moe.shared_u", R, S, err, errlen)) ||
        !(m->sh_y = df_ws_f32(ws, "moe.shared_y", R, H, err, errlen)))
      goto fail;
  }
  return &m->base;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  if (m) moe_destroy(&m->base);
  return NULL;
}

void df_moe_set_expert(df_channel_mixer *cm, int64_t e, const df_t_tensor *gate,
                       const df_t_tensor *up, const df_t_tensor *down) {
  moe *m = (moe *)cm;
  m->ex_gate[e] = gate;
  m->ex_up[e] = up;
  m->ex_down[e] = down;
}
