/* engine/layers/kda.c — the KDA token mixer and its recurrent state; see kda.h. */
#include "engine/layers/kda.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

typedef struct kda {
  df_token_mixer base;
  df_kda_weights w;
  df_kda_dims d;
  const df_layer_env *env;
  int64_t C, cap, row_f; /* channels, log rows, floats per log row (3C + C + H) */
  float *taps;           /* [3, C, W] conv taps of q, k, v, fp32 (owned) */
  float *exp_a;          /* [H] exp(A_log[h]) fp32 (owned) */
  float *dt_bias;        /* [C] (owned) */
  float *o_norm;         /* [D] (owned) */
  df_t_tensor *q, *k, *v, *fa, *graw, *braw, *gate, *ga, *att, *rowlog;
  float *hs; /* [H, 4D] per-head scratch */
} kda;

/* One sequence's state of one KDA layer (the df_kv_rec in its cache slot). */
typedef struct kda_state {
  df_kv_rec base;
  const kda *a;
  int64_t len;      /* positions folded into S */
  int64_t base_len; /* positions folded into S0: the log holds [base_len, len) */
  float *S, *win;   /* [H, D, D] delta-rule state; [3, C, W-1] conv windows, oldest first */
  float *S0, *win0; /* the same at base_len */
  float *log;       /* [cap, row_f]: position p in row p % cap */
  float *mem;       /* the one allocation behind all of them */
} kda_state;

int64_t df_kda_log_rows(int64_t max_rows) { return max_rows > 64 ? max_rows : 64; }

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One row of head h: conv + SiLU of the pre-conv rows pre [3C] (q, k, v) against the
 * windows win (shifted by the row), l2norm, the delta-rule update of S [D, D] with the
 * decay g [C] (log-space, this head's D entries used) and beta, then o [D] = S^T q^ when o
 * is not NULL. sc: [4D] scratch. The state update never depends on o, so a replay (o NULL)
 * reproduces the first run's state bit for bit. Formula: kda.h, docs/K3.md §3.4. */
static void head_step(const kda *a, int64_t h, float *S, float *win, const float *pre,
                      const float *g, float beta, float *o, float *sc) {
  const int64_t D = a->d.head_dim, C = a->C, W = a->d.conv_width;
  float *qkv[3] = {sc, sc + D, sc + 2 * D}, *u = sc + 3 * D;
  for (int which = 0; which < 3; which++) {
    float *dst = qkv[which];
    for (int64_t dd = 0; dd < D; dd++) {
      int64_t c = h * D + dd;
      const float *tw = a->taps + (which * C + c) * W;
      float *wn = win + (which * C + c) * (W - 1);
      float x = pre[which * C + c], y = 0.0f;
      bool need = which > 0 || o; /* q only feeds the output; its window still moves */
      if (need) {
        for (int64_t j = 0; j < W - 1; j++) y = fmaf(tw[j], wn[j], y);
        y = fmaf(tw[W - 1], x, y);
      }
      for (int64_t j = 0; j + 1 < W - 1; j++) wn[j] = wn[j + 1];
      if (W > 1) wn[W - 2] = x;
      if (need) dst[dd] = y / (1.0f + expf(-y));
    }
  }
  float *q = qkv[0], *k = qkv[1], *v = qkv[2];
  float nk = sqrtf(df_k_dot(k, k, D) + 1e-6f);
  for (int64_t dd = 0; dd < D; dd++) k[dd] = k[dd] / nk;
  const float *gh = g + h * D;
  /* S <- S * exp(g)[:, None], and u = S^T k^ over the decayed rows (key rows ascending; one
   * pass over S: each row is decayed just before it is read) */
  memset(u, 0, (size_t)D * sizeof(float));
  for (int64_t dd = 0; dd < D; dd++) {
    float e = expf(gh[dd]);
    float *row = S + dd * D;
    for (int64_t j = 0; j < D; j++) row[j] *= e;
    df_k_axpy(u, k[dd], row, D);
  }
  for (int64_t j = 0; j < D; j++) u[j] = v[j] - u[j];
  if (o) {
    float nq = sqrtf(df_k_dot(q, q, D) + 1e-6f), scale = 1.0f / sqrtf((float)D);
    for (int64_t dd = 0; dd < D; dd++) q[dd] = (q[dd] / nq) * scale;
    memset(o, 0, (size_t)D * sizeof(float));
  }
  /* S <- S + beta k^ (x) u, and o = S^T q^ over the updated rows (ascending) */
  for (int64_t dd = 0; dd < D; dd++) {
    df_k_axpy(S + dd * D, beta * k[dd], u, D);
    if (o) df_k_axpy(o, q[dd], S + dd * D, D);
  }
}

/* Every head of one logged row onto (S, win), no output (folds and replays). */
static void replay_row(const kda *a, float *S, float *win, const float *row) {
  const int64_t H = a->d.n_head, D = a->d.head_dim, C = a->C;
  bool par = H > 1 && H * D * D >= 65536;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t h = 0; h < H; h++)
    head_step(a, h, S + h * D * D, win, row, row + 3 * C, row[4 * C + h], NULL, a->hs + h * 4 * D);
}

/* ---- the state ------------------------------------------------------------------------ */

static uint64_t state_floats(const kda *a) {
  uint64_t H = (uint64_t)a->d.n_head, D = (uint64_t)a->d.head_dim,
           win = 3u * (uint64_t)a->C * (uint64_t)(a->d.conv_width - 1);
  return 2u * (H * D * D + win) + (uint64_t)a->cap * (uint64_t)a->row_f;
}

static bool st_can(const df_kv_rec *r, int64_t n) {
  const kda_state *s = (const kda_state *)r;
  return n == 0 || n == s->len || (n >= s->base_len && n <= s->len);
}

static void st_rollback(df_kv_rec *r, int64_t n) {
  kda_state *s = (kda_state *)r;
  const kda *a = s->a;
  if (n == s->len) return;
  uint64_t sn = (uint64_t)(a->d.n_head * a->d.head_dim * a->d.head_dim),
           wn = (uint64_t)(3 * a->C * (a->d.conv_width - 1));
  if (n == 0) { /* the log's rows are dead once base_len == len == 0 */
    memset(s->mem, 0, (size_t)(2 * (sn + wn)) * sizeof(float));
    s->len = s->base_len = 0;
    return;
  }
  assert(n >= s->base_len && n <= s->len);
  memcpy(s->S, s->S0, sn * sizeof(float));
  memcpy(s->win, s->win0, wn * sizeof(float));
  for (int64_t p = s->base_len; p < n; p++)
    replay_row(a, s->S, s->win, s->log + (p % a->cap) * a->row_f);
  s->len = n;
}

static void st_destroy(df_kv_rec *r) {
  kda_state *s = (kda_state *)r;
  free(s->mem);
  free(s);
}

/* A snapshot of one KDA state (kv_cache.h df_kv_rec_snap): S and the conv windows at len
 * positions, no base or log (a restore starts a new history there). */
struct df_kv_rec_snap {
  int64_t len, H, D, W;
  float data[]; /* S [H, D, D], then win [3, C, W-1] */
};

static df_kv_rec_snap *st_snap_take(const df_kv_rec *r, int64_t len, uint64_t *bytes, char *err,
                                    size_t errlen) {
  const kda_state *s = (const kda_state *)r;
  const kda *a = s->a;
  if (s->len != len) {
    snprintf(err, errlen, "KDA state holds %lld positions, the cache %lld", (long long)s->len,
             (long long)len);
    return NULL;
  }
  size_t sn = (size_t)(a->d.n_head * a->d.head_dim * a->d.head_dim),
         wn = (size_t)(3 * a->C * (a->d.conv_width - 1)),
         b = sizeof(df_kv_rec_snap) + (sn + wn) * sizeof(float);
  df_kv_rec_snap *c = malloc(b);
  if (!c) {
    snprintf(err, errlen, "KDA state snapshot: out of memory (%zu bytes)", b);
    return NULL;
  }
  c->len = len;
  c->H = a->d.n_head;
  c->D = a->d.head_dim;
  c->W = a->d.conv_width;
  memcpy(c->data, s->S, sn * sizeof(float));
  memcpy(c->data + sn, s->win, wn * sizeof(float));
  *bytes = b;
  return c;
}

static bool st_snap_fits(const df_kv_rec *r, const df_kv_rec_snap *c, char *err, size_t errlen) {
  const kda *a = ((const kda_state *)r)->a;
  if (c->H == a->d.n_head && c->D == a->d.head_dim && c->W == a->d.conv_width) return true;
  snprintf(err, errlen, "KDA state of %lld heads x %lld, conv width %lld in the snapshot, %lld x "
           "%lld, conv width %lld in the cache", (long long)c->H, (long long)c->D,
           (long long)c->W, (long long)a->d.n_head, (long long)a->d.head_dim,
           (long long)a->d.conv_width);
  return false;
}

/* The snapshot becomes both the state and its base at len; the log's rows are dead (the
 * next forward writes positions len.. before any fold or replay reads them). */
static void st_snap_restore(df_kv_rec *r, const df_kv_rec_snap *c) {
  kda_state *s = (kda_state *)r;
  const kda *a = s->a;
  size_t sn = (size_t)(a->d.n_head * a->d.head_dim * a->d.head_dim),
         wn = (size_t)(3 * a->C * (a->d.conv_width - 1));
  memcpy(s->S, c->data, sn * sizeof(float));
  memcpy(s->win, c->data + sn, wn * sizeof(float));
  memcpy(s->S0, c->data, sn * sizeof(float));
  memcpy(s->win0, c->data + sn, wn * sizeof(float));
  s->len = s->base_len = c->len;
}

static void st_snap_free(df_kv_rec_snap *c) { free(c); }

static const df_kv_rec_ops kda_state_ops = {.can_rollback = st_can,
                                            .rollback = st_rollback,
                                            .destroy = st_destroy,
                                            .snap_take = st_snap_take,
                                            .snap_fits = st_snap_fits,
                                            .snap_restore = st_snap_restore,
                                            .snap_free = st_snap_free};

/* ---- the mixer ------------------------------------------------------------------------ */

static void kda_forward(df_token_mixer *tm, const df_rows *rows, const df_t_tensor *xn,
                        df_t_tensor *out) {
  kda *a = (kda *)tm;
  const df_kda_weights *w = &a->w;
  const int64_t R = rows->R, l = tm->layer, H = a->d.n_head, D = a->d.head_dim, C = a->C,
                rf = a->row_f;
  df_t_linear_op p1[6] = {{xn, 0, R, w->q, NULL, a->q},     {xn, 0, R, w->k, NULL, a->k},
                          {xn, 0, R, w->v, NULL, a->v},     {xn, 0, R, w->f_a, NULL, a->fa},
                          {xn, 0, R, w->b, NULL, a->braw},
                          {xn, 0, R, w->g ? w->g : w->g_a, NULL, w->g ? a->gate : a->ga}};
  df_t_linear_multi(p1, 6);
  df_t_linear_op p2[2] = {{a->fa, 0, R, w->f_b, NULL, a->graw},
                          {a->ga, 0, R, w->g_b, NULL, a->gate}};
  df_t_linear_multi(p2, w->g ? 1 : 2);
  /* each row's recurrence inputs: pre-conv q, k, v; the log-decay g; beta */
  const float *q = df_t_f32(a->q), *k = df_t_f32(a->k), *v = df_t_f32(a->v),
              *gr = df_t_f32(a->graw), *br = df_t_f32(a->braw);
  float *lg = df_t_f32(a->rowlog);
  for (int64_t r = 0; r < R; r++) {
    float *row = lg + r * rf;
    memcpy(row, q + r * C, (size_t)C * sizeof(float));
    memcpy(row + C, k + r * C, (size_t)C * sizeof(float));
    memcpy(row + 2 * C, v + r * C, (size_t)C * sizeof(float));
    float *g = row + 3 * C;
    for (int64_t c = 0; c < C; c++) {
      float x = gr[r * C + c] + a->dt_bias[c], ea = a->exp_a[c / D];
      if (a->d.lower_bound) {
        g[c] = a->d.lb * sigmoidf(ea * x);
      } else {
        float sp = x > 20.0f ? x : log1pf(expf(x));
        g[c] = -ea * sp;
      }
    }
    for (int64_t h = 0; h < H; h++) row[4 * C + h] = sigmoidf(br[r * H + h]);
  }
  const float *gate = df_t_f32(a->gate);
  float *att = df_t_f32(a->att);
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = df_rows_run_end(rows, r0), n = r1 - r0;
    kda_state *s = (kda_state *)rows->kvs[rows->seq[r0]]->rec[l];
    assert(s && rows->pos[r0] == s->len && n <= a->cap);
    while (s->len + n - s->base_len > a->cap) { /* fold the oldest logged row into the base */
      replay_row(a, s->S0, s->win0, s->log + (s->base_len % a->cap) * rf);
      s->base_len++;
    }
    for (int64_t r = r0; r < r1; r++)
      memcpy(s->log + ((s->len + r - r0) % a->cap) * rf, lg + r * rf, (size_t)rf * sizeof(float));
    bool par = H > 1 && n * H * D * D >= 16384;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
    for (int64_t h = 0; h < H; h++) {
      float *S = s->S + h * D * D, *sc = a->hs + h * 4 * D;
      for (int64_t r = r0; r < r1; r++) {
        const float *row = lg + r * rf;
        float *o = att + r * C + h * D;
        head_step(a, h, S, s->win, row, row + 3 * C, row[4 * C + h], o, sc);
        /* gated RMSNorm: weight before the sigmoid gate (fla FusedRMSNormGated) */
        float inv = 1.0f / sqrtf(df_k_dot(o, o, D) / (float)D + a->d.norm_eps);
        const float *gt = gate + r * C + h * D;
        for (int64_t dd = 0; dd < D; dd++)
          o[dd] = ((o[dd] * inv) * a->o_norm[dd]) * sigmoidf(gt[dd]);
      }
    }
    s->len += n;
    r0 = r1;
  }
  df_t_linear(a->att, 0, R, w->o, NULL, out);
}

static uint64_t kda_bytes_per_token(const df_token_mixer *tm) { return 0; }

static uint64_t kda_bytes_per_seq(const df_token_mixer *tm) {
  return state_floats((const kda *)tm) * sizeof(float) + sizeof(kda_state);
}

static int kda_state_new(const df_token_mixer *tm, df_kv_cache *kv, const df_t_device *dev,
                         char *err, size_t errlen) {
  const kda *a = (const kda *)tm;
  uint64_t nf = state_floats(a);
  kda_state *s = calloc(1, sizeof *s);
  float *mem = s ? calloc((size_t)nf, sizeof(float)) : NULL;
  if (!mem) {
    free(s);
    snprintf(err, errlen, "KDA state of layer %lld: out of memory (%llu bytes)",
             (long long)tm->layer, (unsigned long long)(nf * sizeof(float)));
    return -1;
  }
  uint64_t sn = (uint64_t)(a->d.n_head * a->d.head_dim * a->d.head_dim),
           wn = (uint64_t)(3 * a->C * (a->d.conv_width - 1));
  s->base.ops = &kda_state_ops;
  s->a = a;
  s->mem = mem;
  s->S = mem;
  s->win = s->S + sn;
  s->S0 = s->win + wn;
  s->win0 = s->S0 + sn;
  s->log = s->win0 + wn;
  kv->rec[tm->layer] = &s->base;
  return 0;
}

static void kda_destroy(df_token_mixer *tm) {
  kda *a = (kda *)tm;
  free(a->taps);
  free(a->exp_a);
  free(a->dt_bias);
  free(a->o_norm);
  free(a);
}

/* describe NULL: the torch compute path does not run KDA (engine/model.c refuses it). */
static const df_token_mixer_ops kda_ops = {"kda", "fp32 KDA recurrent state + conv windows",
                                           kda_forward, kda_bytes_per_token, kda_bytes_per_seq,
                                           kda_state_new, NULL, kda_destroy};

static float *widen(const df_t_tensor *t, int64_t off, int64_t n) {
  float *p = malloc((size_t)n * sizeof(float));
  if (!p) return NULL;
  for (int64_t i = 0; i < n; i++) p[i] = df_k_to_f32(df_t_data(t), df_t_dtype(t), off + i);
  return p;
}

df_token_mixer *df_kda_new(const df_layer_env *env, df_ws *ws, int64_t layer,
                           const df_kda_weights *w, const df_kda_dims *dims, char *err,
                           size_t errlen) {
  kda *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  a->base.ops = &kda_ops;
  a->base.layer = layer;
  a->w = *w;
  a->d = *dims;
  a->env = env;
  const int64_t H = dims->n_head, D = dims->head_dim, W = dims->conv_width, C = H * D,
                R = env->max_rows;
  a->C = C;
  a->cap = df_kda_log_rows(R);
  a->row_f = 4 * C + H;
  a->taps = malloc((size_t)(3 * C * W) * sizeof(float));
  a->exp_a = widen(w->a_log, 0, H);
  a->dt_bias = widen(w->dt_bias, 0, C);
  a->o_norm = widen(w->o_norm, 0, D);
  if (!a->taps || !a->exp_a || !a->dt_bias || !a->o_norm) goto oom;
  const df_t_tensor *cv[3] = {w->q_conv, w->k_conv, w->v_conv};
  for (int which = 0; which < 3; which++)
    for (int64_t i = 0; i < C * W; i++)
      a->taps[which * C * W + i] = df_k_to_f32(df_t_data(cv[which]), df_t_dtype(cv[which]), i);
  for (int64_t h = 0; h < H; h++) a->exp_a[h] = expf(a->exp_a[h]);
  if (!(a->q = df_ws_f32(ws, "kda.q", R, C, err, errlen)) ||
      !(a->k = df_ws_f32(ws, "kda.k", R, C, err, errlen)) ||
      !(a->v = df_ws_f32(ws, "kda.v", R, C, err, errlen)) ||
      !(a->fa = df_ws_f32(ws, "kda.fa", R, D, err, errlen)) ||
      !(a->ga = df_ws_f32(ws, "kda.ga", R, D, err, errlen)) ||
      !(a->graw = df_ws_f32(ws, "kda.graw", R, C, err, errlen)) ||
      !(a->braw = df_ws_f32(ws, "kda.braw", R, H, err, errlen)) ||
      !(a->gate = df_ws_f32(ws, "kda.gate", R, C, err, errlen)) ||
      !(a->att = df_ws_f32(ws, "kda.att", R, C, err, errlen)) ||
      !(a->rowlog = df_ws_f32(ws, "kda.rowlog", R, a->row_f, err, errlen)) ||
      !(a->hs = df_ws_array(ws, "kda.hs", H * 4 * D, sizeof(float), err, errlen))) {
    kda_destroy(&a->base);
    return NULL;
  }
  return &a->base;
oom:
  kda_destroy(&a->base);
  snprintf(err, errlen, "out of memory");
  return NULL;
}
