/* engine/layers/glu.c — the dense gated-MLP channel mixer; see glu.h. */
#include "engine/layers/glu.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct glu {
  df_channel_mixer base;
  const df_t_tensor *gate, *up, *down;
  df_k_act act;
  const df_layer_env *env;
  df_t_tensor *g, *u; /* [R, I] */
} glu;

static int glu_forward(df_channel_mixer *cm, const df_rows *rows, const df_t_tensor *xn,
                       df_t_tensor *out, char *err, size_t errlen) {
  glu *f = (glu *)cm;
  bool on = *f->env->profiling;
  double t0 = on ? df_prof_now() : 0;
  df_t_glu_ffn(xn, 0, rows->R, f->gate, f->up, f->down, &f->act, f->g, f->u, out);
  df_prof_lap(on, &f->env->prof->dense_mlp, &t0);
  return 0;
}

static void glu_describe(const df_channel_mixer *cm, df_tm_desc *d, df_tm_layer *t) {
  const glu *f = (const glu *)cm;
  t->mlp_gate = f->gate;
  t->mlp_up = f->up;
  t->mlp_down = f->down;
}

static void glu_destroy(df_channel_mixer *cm) { free(cm); }

static const df_channel_mixer_ops glu_ops = {"glu", glu_forward, NULL, glu_describe,
                                             glu_destroy};

df_channel_mixer *df_glu_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                             const df_t_tensor *gate, const df_t_tensor *up,
                             const df_t_tensor *down, const df_k_act *act, char *err,
                             size_t errlen) {
  glu *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  f->base.ops = &glu_ops;
  f->base.layer = layer;
  f->gate = gate;
  f->up = up;
  f->down = down;
  if (act) f->act = *act; /* else zero: SiLU */
  f->env = env;
  int64_t I = df_t_size(gate, 0);
  if (!(f->g = df_ws_f32(ws, "glu.g", env->max_rows, I, err, errlen)) ||
      !(f->u = df_ws_f32(ws, "glu.u", env->max_rows, I, err, errlen))) {
    free(f);
    return NULL;
  }
  return &f->base;
}
