/* engine/draft/dspark.c — the DSpark block drafter; see dspark.h. */
#include "engine/draft/dspark.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/layers/bind.h"
#include "engine/layers/glu.h"
#include "engine/layers/mla.h"
#include "engine/layers/rope.h"
#include "engine/model_internal.h"
#include "engine/sampler.h"

struct df_dspark {
  char dir[1024];
  df_model_config cfg;        /* the drafter's shape in the engine's config terms */
  const df_model *target;     /* borrowed */
  df_st_model *st;
  df_binder bind;
  int64_t H, V, C;            /* hidden, vocabulary, capture layers */
  int64_t cap[DF_MODEL_MAX_CAPTURE];
  int32_t mask_id;
  int block;
  df_capture_point capture_point; /* config capture_point: "prefix" (default) or "mix" */
  int64_t rank;               /* markov_rank */
  int64_t max_ctx, max_rows;
  const df_t_tensor *ctx_proj, *ctx_norm, *final_norm, *mk_w1, *mk_w2;
  const df_t_tensor **kv_a, **kv_a_norm; /* [layers] for the context rows */
  df_layer *layers;
  df_residual *residual;
  df_layer_env env;
  df_ws *ws;
  df_t_tensor *rope_cos, *rope_sin, *scratch;
  df_t_tensor *x, *xn, *tmp, *logits; /* [R, H] x3, [block, V] */
  float *ctx_rows, *kvrow, *mk, *bias; /* [R, H], [R, KL+dr], [rank], [V] */
  int64_t *pos;
  int32_t *row_seq;
  int32_t *ids;
  bool profiling;             /* never on: the blocks' counters need somewhere to go */
  df_model_profile prof;
};

/* ---- config ----------------------------------------------------------------------------- */

typedef struct {
  const char *file;
  json_t *o;
  char *err;
  size_t errlen;
} cfgr;

static int cfg_int(cfgr *r, const char *key, bool required, int64_t def, int64_t lo, int64_t hi,
                   int64_t *out) {
  json_t *v = json_object_get(r->o, key);
  if (!v || json_is_null(v)) {
    if (required) {
      snprintf(r->err, r->errlen, "%s: missing key \"%s\"", r->file, key);
      return -1;
    }
    *out = def;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
    snprintf(r->err, r->errlen, "%s: \"%s\" must be an integer in %lld..%lld", r->file, key,
             (long long)lo, (long long)hi);
    return -1;
  }
  *out = json_integer_value(v);
  return 0;
}

static int cfg_num(cfgr *r, json_t *o, const char *key, double def, double lo, double *out) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_number(v) || json_number_value(v) < lo || !isfinite(json_number_value(v))) {
    snprintf(r->err, r->errlen, "%s: \"%s\" must be a number >= %g", r->file, key, lo);
    return -1;
  }
  *out = json_number_value(v);
  return 0;
}

static int cfg_false(cfgr *r, const char *key) {
  json_t *v = json_object_get(r->o, key);
  if (v && !json_is_null(v) && !json_is_false(v)) {
    snprintf(r->err, r->errlen, "%s: \"%s\" must be false (this drafter kind has RoPE and no "
             "output gate)", r->file, key);
    return -1;
  }
  return 0;
}

/* rope_scaling: null or a YaRN object (DeepSeek-V3's keys). */
static int cfg_rope(cfgr *r, df_model_config *c) {
  json_t *rs = json_object_get(r->o, "rope_scaling");
  c->rope_scaling.type = DF_ROPE_DEFAULT;
  c->rope_scaling.factor = 1.0;
  if (!rs || json_is_null(rs)) return 0;
  const char *t = NULL;
  json_t *tv = json_object_get(rs, "rope_type");
  if (!tv) tv = json_object_get(rs, "type");
  if (json_is_string(tv)) t = json_string_value(tv);
  if (!json_is_object(rs) || !t || strcmp(t, "yarn") != 0) {
    snprintf(r->err, r->errlen, "%s: \"rope_scaling\" must be null or a YaRN object "
             "(rope_type \"yarn\")", r->file);
    return -1;
  }
  df_rope_scaling *y = &c->rope_scaling;
  double omp = 0;
  y->type = DF_ROPE_YARN;
  if (cfg_num(r, rs, "factor", 1.0, 1.0, &y->factor) != 0 ||
      cfg_num(r, rs, "original_max_position_embeddings", 0, 0, &omp) != 0 ||
      cfg_num(r, rs, "beta_fast", 32, 0, &y->beta_fast) != 0 ||
      cfg_num(r, rs, "beta_slow", 1, 0, &y->beta_slow) != 0 ||
      cfg_num(r, rs, "mscale", 0, 0, &y->mscale) != 0 ||
      cfg_num(r, rs, "mscale_all_dim", 0, 0, &y->mscale_all_dim) != 0)
    return -1;
  if (y->beta_fast == 0) y->beta_fast = 32;
  if (y->beta_slow == 0) y->beta_slow = 1;
  if (y->beta_fast < y->beta_slow) {
    snprintf(r->err, r->errlen, "%s: rope_scaling.beta_fast must be >= beta_slow", r->file);
    return -1;
  }
  y->original_max_position_embeddings = (int64_t)omp;
  return 0;
}

static int parse_config(df_dspark *d, const df_model_config *tc, char *err, size_t errlen) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", d->dir);
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  if (!o || !json_is_object(o)) {
    snprintf(err, errlen, "%s: %s (line %d:%d)", path, o ? "not a JSON object" : je.text,
             je.line, je.column);
    json_decref(o);
    return -1;
  }
  cfgr r = {path, o, err, errlen};
  df_model_config *c = &d->cfg;
  int64_t v = 0, nl = 0, nh = 0, nkv = 0, ql = 0, KL = 0, dn = 0, dr = 0, dv = 0, I = 0,
          mp = 0, nt = 0, mask = 0, block = 0;
  const int64_t big = DF_CFG_MAX_DIM;
  int rc = -1;
  if (cfg_int(&r, "hidden_size", true, 0, 1, big, &c->hidden_size) != 0 ||
      cfg_int(&r, "draft_vocab_size", false, tc->vocab_size, 1, big, &v) != 0 ||
      cfg_int(&r, "num_hidden_layers", true, 0, 1, 64, &nl) != 0 ||
      cfg_int(&r, "num_attention_heads", true, 0, 1, 4096, &nh) != 0 ||
      cfg_int(&r, "num_key_value_heads", false, nh, 1, 4096, &nkv) != 0 ||
      cfg_int(&r, "q_lora_rank", false, 0, 0, big, &ql) != 0 ||
      cfg_int(&r, "kv_lora_rank", true, 0, 1, big, &KL) != 0 ||
      cfg_int(&r, "qk_nope_head_dim", true, 0, 1, big, &dn) != 0 ||
      cfg_int(&r, "qk_rope_head_dim", true, 0, 2, 1024, &dr) != 0 ||
      cfg_int(&r, "v_head_dim", true, 0, 1, big, &dv) != 0 ||
      cfg_int(&r, "intermediate_size", true, 0, 1, big, &I) != 0 ||
      cfg_int(&r, "max_position_embeddings", false, tc->max_position_embeddings, 1, big, &mp) != 0 ||
      cfg_int(&r, "mask_token_id", true, 0, 0, tc->vocab_size - 1, &mask) != 0 ||
      cfg_int(&r, "markov_rank", true, 0, 1, big, &d->rank) != 0 ||
      cfg_int(&r, "block_size", false, DF_DSPARK_BLOCK_DEFAULT, 1, DF_DSPARK_BLOCK_MAX, &block) != 0 ||
      cfg_false(&r, "mla_use_nope") != 0 || cfg_false(&r, "mla_use_output_gate") != 0 ||
      cfg_num(&r, o, "rms_norm_eps", 1e-6, 0, &c->rms_norm_eps) != 0 ||
      cfg_num(&r, o, "rope_theta", 10000, 1e-9, &c->rope_theta) != 0 || cfg_rope(&r, c) != 0)
    goto done;
  if (dr % 2) {
    snprintf(err, errlen, "%s: \"qk_rope_head_dim\" %lld must be even for RoPE", path, (long long)dr);
    goto done;
  }
  if (nkv != nh) {
    snprintf(err, errlen, "%s: \"num_key_value_heads\" %lld must equal num_attention_heads %lld "
             "(MLA)", path, (long long)nkv, (long long)nh);
    goto done;
  }
  if (c->hidden_size != tc->hidden_size || v != tc->vocab_size) {
    snprintf(err, errlen, "%s: hidden_size %lld and draft_vocab_size %lld must equal the "
             "target's (%lld and %lld)", path, (long long)c->hidden_size, (long long)v,
             (long long)tc->hidden_size, (long long)tc->vocab_size);
    goto done;
  }
  json_t *ids = json_object_get(o, "target_layer_ids");
  if (!json_is_array(ids) || json_array_size(ids) == 0 ||
      json_array_size(ids) > DF_MODEL_MAX_CAPTURE) {
    snprintf(err, errlen, "%s: \"target_layer_ids\" must be a list of 1..%d target layers",
             path, DF_MODEL_MAX_CAPTURE);
    goto done;
  }
  d->C = (int64_t)json_array_size(ids);
  for (int64_t i = 0; i < d->C; i++) {
    json_t *e = json_array_get(ids, (size_t)i);
    if (!json_is_integer(e) || json_integer_value(e) < 0 ||
        json_integer_value(e) >= tc->num_hidden_layers) {
      snprintf(err, errlen, "%s: \"target_layer_ids\"[%lld] must be a target layer in 0..%lld",
               path, (long long)i, (long long)tc->num_hidden_layers - 1);
      goto done;
    }
    d->cap[i] = json_integer_value(e);
  }
  if (cfg_int(&r, "num_target_layers", false, d->C, d->C, d->C, &nt) != 0) goto done;
  json_t *cp = json_object_get(o, "capture_point");
  if (cp && !json_is_null(cp)) {
    const char *v = json_string_value(cp);
    if (!v || (strcmp(v, "prefix") && strcmp(v, "mix"))) {
      snprintf(err, errlen, "%s: \"capture_point\" must be \"prefix\" or \"mix\"", path);
      goto done;
    }
    d->capture_point = strcmp(v, "mix") ? DF_CAPTURE_PREFIX : DF_CAPTURE_MIX;
  }
  c->vocab_size = v;
  c->num_hidden_layers = nl;
  c->num_attention_heads = c->num_key_value_heads = nh;
  c->head_dim = dr; /* the RoPE tables' width */
  c->q_lora_rank = ql;
  c->kv_lora_rank = KL;
  c->qk_nope_head_dim = dn;
  c->qk_rope_head_dim = dr;
  c->v_head_dim = dv;
  c->intermediate_size = I;
  c->max_position_embeddings = mp;
  c->rope_interleave = true;
  c->hidden_act = DF_ACT_SILU;
  snprintf(c->model_type, sizeof c->model_type, "dspark");
  d->H = c->hidden_size;
  d->V = v;
  d->mask_id = (int32_t)mask;
  d->block = (int)block;
  rc = 0;
done:
  json_decref(o);
  return rc;
}

bool df_dspark_is_folder(const char *dir) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_t *o = json_load_file(path, 0, NULL);
  bool yes = false;
  json_t *a = o ? json_object_get(o, "architectures") : NULL;
  for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++) {
    const char *s = json_string_value(json_array_get(a, i));
    if (s && (!strcmp(s, "K3DSparkModel") || !strcmp(s, "DSparkModel"))) yes = true;
  }
  json_decref(o);
  return yes;
}

/* ---- load ------------------------------------------------------------------------------- */

#define NM(...) (snprintf(name, sizeof name, __VA_ARGS__), name)

static int bind_layer(df_dspark *d, int64_t l, char *err, size_t errlen) {
  const df_model_config *c = &d->cfg;
  df_binder *b = &d->bind;
  char name[160];
  int64_t H = d->H, nh = c->num_attention_heads, dn = c->qk_nope_head_dim,
          dr = c->qk_rope_head_dim, dv = c->v_head_dim, KL = c->kv_lora_rank,
          ql = c->q_lora_rank, I = c->intermediate_size, sH[1] = {H}, sql[1] = {ql},
          sKL[1] = {KL};
  df_layer *L = &d->layers[l];
  df_mla_weights w = {0};
  if (!(L->norm[0] = df_bind(b, NM("layers.%lld.input_layernorm.weight", (long long)l), 1, sH,
                             false, false, err, errlen)) ||
      !(L->norm[1] = df_bind(b, NM("layers.%lld.post_attention_layernorm.weight", (long long)l),
                             1, sH, false, false, err, errlen)))
    return -1;
  if (ql > 0) {
    if (!(w.q_a = df_bind_linear(b, NM("layers.%lld.self_attn.q_a_proj.weight", (long long)l),
                                 ql, H, false, err, errlen)) ||
        !(w.q_a_norm = df_bind(b, NM("layers.%lld.self_attn.q_a_layernorm.weight", (long long)l),
                               1, sql, false, false, err, errlen)) ||
        !(w.q_b = df_bind_linear(b, NM("layers.%lld.self_attn.q_b_proj.weight", (long long)l),
                                 nh * (dn + dr), ql, false, err, errlen)))
      return -1;
  } else if (!(w.q = df_bind_linear(b, NM("layers.%lld.self_attn.q_proj.weight", (long long)l),
                                    nh * (dn + dr), H, false, err, errlen))) {
    return -1;
  }
  if (!(w.kv_a = df_bind_linear(b, NM("layers.%lld.self_attn.kv_a_proj_with_mqa.weight",
                                      (long long)l), KL + dr, H, false, err, errlen)) ||
      !(w.kv_a_norm = df_bind(b, NM("layers.%lld.self_attn.kv_a_layernorm.weight", (long long)l),
                              1, sKL, false, false, err, errlen)) ||
      !(w.kv_b = df_bind_linear(b, NM("layers.%lld.self_attn.kv_b_proj.weight", (long long)l),
                                nh * (dn + dv), KL, false, err, errlen)) ||
      !(w.o = df_bind_linear(b, NM("layers.%lld.self_attn.o_proj.weight", (long long)l), H,
                             nh * dv, false, err, errlen)))
    return -1;
  d->kv_a[l] = w.kv_a;
  d->kv_a_norm[l] = w.kv_a_norm;
  df_mla_dims dims = {.n_head = nh, .q_lora_rank = ql, .kv_lora_rank = KL, .dn = dn, .dr = dr,
                      .dv = dv, .rope_interleave = true, .eps = (float)c->rms_norm_eps,
                      .scale = df_mla_scale(c)};
  if (!(L->attn = df_mla_new(&d->env, d->ws, l, &w, &dims, err, errlen))) return -1;
  const df_t_tensor *g, *u, *dw;
  if (!(g = df_bind_linear(b, NM("layers.%lld.mlp.gate_proj.weight", (long long)l), I, H, false,
                           err, errlen)) ||
      !(u = df_bind_linear(b, NM("layers.%lld.mlp.up_proj.weight", (long long)l), I, H, false,
                           err, errlen)) ||
      !(dw = df_bind_linear(b, NM("layers.%lld.mlp.down_proj.weight", (long long)l), H, I, false,
                            err, errlen)))
    return -1;
  return (L->ffn = df_glu_new(&d->env, d->ws, l, g, u, dw, NULL, err, errlen)) ? 0 : -1;
}

static int plan(df_dspark *d, char *err, size_t errlen) {
  const df_model_config *c = &d->cfg;
  int64_t R = d->max_rows, H = d->H;
  df_ws *ws = d->ws;
  if (df_rope_tables_new(c, d->max_ctx, &d->rope_cos, &d->rope_sin, err, errlen) != 0 ||
      !(d->scratch = df_ws_f32(ws, "dspark.att_scratch", df_k_max_threads(), d->max_ctx, err,
                               errlen)) ||
      !(d->x = df_ws_f32(ws, "dspark.x", R, H, err, errlen)) ||
      !(d->xn = df_ws_f32(ws, "dspark.xn", R, H, err, errlen)) ||
      !(d->tmp = df_ws_f32(ws, "dspark.tmp", R, H, err, errlen)) ||
      !(d->logits = df_ws_f32(ws, "dspark.logits", d->block, d->V, err, errlen)) ||
      !(d->ctx_rows = df_ws_array(ws, "dspark.ctx", R * H, sizeof(float), err, errlen)) ||
      !(d->kvrow = df_ws_array(ws, "dspark.kv", R * (c->kv_lora_rank + c->qk_rope_head_dim),
                               sizeof(float), err, errlen)) ||
      !(d->mk = df_ws_array(ws, "dspark.markov", d->rank, sizeof(float), err, errlen)) ||
      !(d->bias = df_ws_array(ws, "dspark.bias", d->V, sizeof(float), err, errlen)) ||
      !(d->pos = df_ws_array(ws, "dspark.pos", R, sizeof *d->pos, err, errlen)) ||
      !(d->row_seq = df_ws_array(ws, "dspark.row_seq", R, sizeof *d->row_seq, err, errlen)) ||
      !(d->ids = df_ws_array(ws, "dspark.ids", R, sizeof *d->ids, err, errlen)))
    return -1;
  d->env.rope_cos = d->rope_cos;
  d->env.rope_sin = d->rope_sin;
  d->env.att_scratch = d->scratch;
  return 0;
}

int df_dspark_load(const char *dir, const df_model *target, int64_t max_ctx, df_dspark **out,
                   char *err, size_t errlen) {
  *out = NULL;
  df_dspark *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  d->target = target;
  const df_model_config *tc = df_model_cfg(target);
  if (parse_config(d, tc, err, errlen) != 0) goto fail;
  const df_model_config *c = &d->cfg;
  d->max_ctx = max_ctx > 0 ? max_ctx : df_model_max_ctx(target);
  if (d->max_ctx > c->max_position_embeddings) {
    snprintf(err, errlen, "%s/config.json: a context of %lld tokens exceeds the drafter's "
             "max_position_embeddings %lld", dir, (long long)d->max_ctx,
             (long long)c->max_position_embeddings);
    goto fail;
  }
  d->max_rows = 64 > d->block ? 64 : d->block;
  if (df_st_open(dir, &d->st, err, errlen) != 0) goto fail;
  d->bind = (df_binder){.dir = d->dir, .st = d->st, .cfg = &d->cfg};
  if (!(d->ws = df_ws_new())) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  d->env = (df_layer_env){.cfg = &d->cfg, .max_rows = d->max_rows, .max_ctx = d->max_ctx,
                          .profiling = &d->profiling, .prof = &d->prof};
  int64_t H = d->H, sH[1] = {H}, sm[2] = {d->V, d->rank};
  int64_t nl = c->num_hidden_layers;
  if (!(d->ctx_proj = df_bind_linear(&d->bind, "context_proj.weight", H, d->C * H, false, err,
                                     errlen)) ||
      !(d->ctx_norm = df_bind(&d->bind, "context_norm.weight", 1, sH, false, false, err, errlen)) ||
      !(d->final_norm = df_bind(&d->bind, "final_norm.weight", 1, sH, false, false, err, errlen)) ||
      !(d->mk_w1 = df_bind(&d->bind, "markov_head.markov_w1.weight", 2, sm, false, false, err,
                           errlen)) ||
      !(d->mk_w2 = df_bind(&d->bind, "markov_head.markov_w2.weight", 2, sm, false, false, err,
                           errlen)))
    goto fail;
  d->layers = calloc((size_t)nl, sizeof *d->layers);
  d->kv_a = calloc((size_t)nl, sizeof *d->kv_a);
  d->kv_a_norm = calloc((size_t)nl, sizeof *d->kv_a_norm);
  if (!d->layers || !d->kv_a || !d->kv_a_norm) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  for (int64_t l = 0; l < nl; l++)
    if (bind_layer(d, l, err, errlen) != 0) goto fail;
  if (!(d->residual = df_residual_prenorm_new(H, (float)c->rms_norm_eps, err, errlen)) ||
      plan(d, err, errlen) != 0)
    goto fail;
  *out = d;
  return 0;
fail:
  df_dspark_destroy(&d);
  return -1;
}

void df_dspark_destroy(df_dspark **dp) {
  if (!dp || !*dp) return;
  df_dspark *d = *dp;
  for (int64_t l = 0; d->layers && l < d->cfg.num_hidden_layers; l++) df_layer_clear(&d->layers[l]);
  free(d->layers);
  free(d->kv_a);
  free(d->kv_a_norm);
  if (d->residual) d->residual->ops->destroy(d->residual);
  df_t_destroy(&d->rope_cos);
  df_t_destroy(&d->rope_sin);
  df_ws_destroy(&d->ws);
  df_binder_free(&d->bind);
  df_st_close(&d->st);
  free(d);
  *dp = NULL;
}

const int64_t *df_dspark_capture_layers(const df_dspark *d, int *n) {
  *n = (int)d->C;
  return d->cap;
}
int64_t df_dspark_row_width(const df_dspark *d) { return d->C * d->H; }
int df_dspark_block(const df_dspark *d) { return d->block; }
df_capture_point df_dspark_capture_point(const df_dspark *d) { return d->capture_point; }
int32_t df_dspark_mask_id(const df_dspark *d) { return d->mask_id; }
int64_t df_dspark_max_ctx(const df_dspark *d) { return d->max_ctx; }
uint64_t df_dspark_buffer_bytes(const df_dspark *d) {
  return df_ws_bytes(d->ws) + 2u * (uint64_t)d->max_ctx * (uint64_t)(d->cfg.head_dim / 2) * 4u;
}
uint64_t df_dspark_weight_bytes(const df_dspark *d) { return d->bind.total; }

uint64_t df_dspark_kv_bytes_per_token(const df_dspark *d) {
  return (uint64_t)d->cfg.num_hidden_layers *
         (uint64_t)(d->cfg.kv_lora_rank + d->cfg.qk_rope_head_dim) * 4u;
}

df_kv_cache *df_dspark_kv_new(const df_dspark *d, int64_t ctx, char *err, size_t errlen) {
  if (ctx <= 0) ctx = d->max_ctx;
  if (ctx > d->max_ctx) {
    snprintf(err, errlen, "drafter context of %lld tokens exceeds its max_ctx %lld",
             (long long)ctx, (long long)d->max_ctx);
    return NULL;
  }
  int64_t nl = d->cfg.num_hidden_layers;
  df_kv_cache *kv = df_kv_new_layers(nl, ctx, df_dspark_kv_bytes_per_token(d), 0, err, errlen);
  for (int64_t l = 0; kv && l < nl; l++) {
    const df_token_mixer *tm = d->layers[l].attn;
    if (tm->ops->state_new(tm, kv, NULL, err, errlen) != 0) df_kv_destroy(&kv);
  }
  return kv;
}

/* ---- forward ---------------------------------------------------------------------------- */

static int finite_rows(const float *y, int64_t n, const char *what, char *err, size_t errlen) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(y[i])) {
      snprintf(err, errlen, "drafter: %s produced a non-finite value (%g)", what, (double)y[i]);
      return -1;
    }
  return 0;
}

int df_dspark_append(df_dspark *d, df_kv_cache *kv, const float *rows, int64_t n, char *err,
                     size_t errlen) {
  const df_model_config *c = &d->cfg;
  int64_t H = d->H, W = d->C * H, KL = c->kv_lora_rank, dr = c->qk_rope_head_dim,
          nl = c->num_hidden_layers;
  if (n <= 0 || kv->len + n > kv->ctx) {
    snprintf(err, errlen, "drafter context overflow: %lld cached + %lld new rows > %lld",
             (long long)kv->len, (long long)n, (long long)kv->ctx);
    return -1;
  }
  if (finite_rows(rows, n * W, "the target's captured hidden states", err, errlen) != 0) return -1;
  const float *cs = df_t_f32(d->rope_cos), *sn = df_t_f32(d->rope_sin);
  for (int64_t r0 = 0; r0 < n; r0 += d->max_rows) {
    int64_t R = n - r0 < d->max_rows ? n - r0 : d->max_rows;
    for (int64_t r = 0; r < R; r++) d->pos[r] = kv->len + r0 + r;
    df_k_linear(rows + r0 * W, R, W, W, df_t_data(d->ctx_proj), df_t_dtype(d->ctx_proj), H, NULL,
                d->ctx_rows, H);
    df_k_rmsnorm(d->ctx_rows, R, H, df_t_data(d->ctx_norm), df_t_dtype(d->ctx_norm),
                 (float)c->rms_norm_eps, d->ctx_rows);
    for (int64_t l = 0; l < nl; l++) {
      df_k_linear(d->ctx_rows, R, H, H, df_t_data(d->kv_a[l]), df_t_dtype(d->kv_a[l]), KL + dr,
                  NULL, d->kvrow, KL + dr);
      for (int64_t r = 0; r < R; r++)
        df_k_rmsnorm(d->kvrow + r * (KL + dr), 1, KL, df_t_data(d->kv_a_norm[l]),
                     df_t_dtype(d->kv_a_norm[l]), (float)c->rms_norm_eps, d->kvrow + r * (KL + dr));
      df_k_rope_slices(d->kvrow + KL, R, KL + dr, 1, 0, dr, true, d->pos, cs, sn);
      float *ck = df_t_f32(kv->k[l]), *kr = df_t_f32(kv->v[l]);
      for (int64_t r = 0; r < R; r++) {
        memcpy(ck + d->pos[r] * KL, d->kvrow + r * (KL + dr), (size_t)KL * sizeof(float));
        memcpy(kr + d->pos[r] * dr, d->kvrow + r * (KL + dr) + KL, (size_t)dr * sizeof(float));
      }
    }
  }
  kv->len += n;
  return 0;
}

int df_dspark_propose(df_dspark *d, df_kv_cache *kv, int32_t anchor, int r, df_dspark_pick_fn pick,
                      void *pick_ctx, int32_t *out, float *z_out, char *err, size_t errlen) {
  const df_model_config *c = &d->cfg;
  int64_t V = d->V, L = kv->len;
  if (r < 1 || r > d->block) {
    snprintf(err, errlen, "drafter: block of %d rows (expected 1..%d)", r, d->block);
    return -1;
  }
  if (L == 0 || L + r > kv->ctx) {
    snprintf(err, errlen, "drafter: %lld context rows + a block of %d do not fit (ctx %lld; at "
             "least one context row is needed)", (long long)L, r, (long long)kv->ctx);
    return -1;
  }
  if (anchor < 0 || anchor >= V) {
    snprintf(err, errlen, "drafter: anchor id %d outside [0, %lld)", anchor, (long long)V);
    return -1;
  }
  for (int k = 0; k < r; k++) {
    d->ids[k] = k == 0 ? anchor : d->mask_id;
    d->pos[k] = L + k;
    d->row_seq[k] = 0;
  }
  df_kv_cache *kvs[1] = {kv};
  df_rows rows = {.R = r, .pos = d->pos, .seq = d->row_seq, .kvs = kvs, .block_full = true};
  df_t_embed(d->ids, r, d->target->embed, d->x);
  df_residual *rs = d->residual;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    const df_layer *Ly = &d->layers[l];
    rs->ops->sublayer_in(rs, l, Ly, 0, r, d->x, d->xn);
    Ly->attn->ops->forward(Ly->attn, &rows, d->xn, d->tmp);
    rs->ops->sublayer_out(rs, l, Ly, 0, r, d->x, d->tmp);
    rs->ops->sublayer_in(rs, l, Ly, 1, r, d->x, d->xn);
    if (Ly->ffn->ops->forward(Ly->ffn, &rows, d->xn, d->tmp, err, errlen) != 0) return -1;
    rs->ops->sublayer_out(rs, l, Ly, 1, r, d->x, d->tmp);
  }
  df_t_rmsnorm(d->x, r, d->final_norm, (float)c->rms_norm_eps, d->xn);
  df_t_linear(d->xn, 0, r, d->target->lm_head, NULL, d->logits);
  float *z = df_t_f32(d->logits);
  if (finite_rows(z, (int64_t)r * V, "the block's logits", err, errlen) != 0) return -1;
  /* Markov head, sequential: z_k += markov_w2 . markov_w1[prev]; prev = the pick */
  int64_t R = d->rank;
  df_dtype w1t = df_t_dtype(d->mk_w1);
  const char *w1 = df_t_data(d->mk_w1);
  int32_t prev = anchor;
  for (int k = 0; k < r; k++) {
    float *zk = z + (int64_t)k * V;
    for (int64_t i = 0; i < R; i++) d->mk[i] = df_k_to_f32(w1, w1t, (int64_t)prev * R + i);
    df_k_linear(d->mk, 1, R, R, df_t_data(d->mk_w2), df_t_dtype(d->mk_w2), V, NULL, d->bias, V);
    df_k_add(zk, d->bias, V);
    int32_t t = pick ? pick(pick_ctx, k, zk, V) : df_argmax_f32(zk, V);
    if (t < 0 || t >= V) {
      snprintf(err, errlen, "drafter: picked id %d outside [0, %lld)", t, (long long)V);
      return -1;
    }
    out[k] = prev = t;
    if (z_out) memcpy(z_out + (int64_t)k * V, zk, (size_t)V * sizeof(float));
  }
  return 0;
}
