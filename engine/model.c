/* engine/model.c — qwen3_moe / qwen3 loading and forward pass, and the parts the
 * deepseek_v3 family shares with them; see model.h.
 *
 * Owns: tensor binding and validation, planned buffers, RoPE tables, the layer loop, the
 * MoE routing/grouping/combine (softmax or sigmoid group-limited router, shared experts).
 * Routed experts themselves run behind the expert backend. The DeepSeek-V3 family's MLA
 * attention and its tensor binding live in engine/model_deepseek.c.
 */
#include "engine/model.h"
#include "engine/model_internal.h"

#include <assert.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/device/admission.h"
#include "engine/device/cuda_rt.h"
#include "engine/experts/expert_local.h"
#include "engine/kernels/kernels.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Adds the time since *t0 to *acc and restarts the clock (only while profiling). */
static inline void prof_lap(const df_model *m, double *acc, double *t0) {
  if (!m->profiling) return;
  double t = now_s();
  *acc += t - *t0;
  *t0 = t;
}

void df_model_profile_enable(df_model *m, bool on) {
  m->profiling = on;
  memset(&m->prof, 0, sizeof m->prof);
}

df_model_profile df_model_profile_get(const df_model *m) { return m->prof; }

/* ---- loading --------------------------------------------------------------------------- */

static const char *file_of(const df_model *m, const df_st_tensor *t) {
  return df_st_file_path(m->st, t->file_index);
}

static int track(df_model *m, df_t_tensor *t) {
  if (m->n_handles == m->cap_handles) {
    size_t nc = m->cap_handles ? m->cap_handles * 2 : 256;
    df_t_tensor **nh = realloc(m->handles, nc * sizeof *nh);
    if (!nh) return -1;
    m->handles = nh;
    m->cap_handles = nc;
  }
  m->handles[m->n_handles++] = t;
  return 0;
}

/* Bind tensor `name` with the expected shape (ndim dims). Optional tensors return NULL
 * without error when absent. *is_expert routes its bytes to the expert total. */
static const df_t_tensor *bind(df_model *m, const char *name, int ndim, const int64_t *shape,
                               bool optional, bool is_expert, char *err, size_t errlen) {
  const df_st_tensor *t = df_st_find(m->st, name);
  if (!t) {
    if (!optional)
      snprintf(err, errlen, "%s: missing tensor '%s' (required by config.json: %s, %lld layers)",
               m->dir, name, m->cfg.model_type, (long long)m->cfg.num_hidden_layers);
    return NULL;
  }
  if (!df_dtype_is_supported(t->dtype)) {
    snprintf(err, errlen, "%s: tensor '%s' has dtype %s, which is recognised but not supported "
             "yet (supported: BF16, F16, F32)", file_of(m, t), name, df_dtype_name(t->dtype));
    return NULL;
  }
  bool same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char got[128] = "", want[128] = "";
    size_t o = 0;
    for (int i = 0; i < t->ndim; i++)
      o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    o = 0;
    for (int i = 0; i < ndim; i++)
      o += (size_t)snprintf(want + o, sizeof want - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(err, errlen, "%s: tensor '%s' has shape [%s] but config.json implies [%s]",
             file_of(m, t), name, got, want);
    return NULL;
  }
  df_t_tensor *h = df_t_wrap(t->data, t->dtype, ndim, shape, err, errlen);
  if (!h) return NULL;
  if (track(m, h) != 0) {
    df_t_destroy(&h);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  m->bytes.total += t->nbytes;
  if (is_expert)
    m->bytes.experts += t->nbytes;
  else
    m->bytes.resident += t->nbytes;
  return h;
}

const df_t_tensor *df_model_bind(df_model *m, const char *name, int ndim, const int64_t *shape,
                                 bool optional, bool is_expert, char *err, size_t errlen) {
  return bind(m, name, ndim, shape, optional, is_expert, err, errlen);
}

int df_model_track(df_model *m, df_t_tensor *t) { return track(m, t); }

#define BIND(dst, name, nd, ...)                                                              \
  do {                                                                                        \
    int64_t sh_[] = {__VA_ARGS__};                                                            \
    if (!((dst) = bind(m, name, nd, sh_, false, false, err, errlen))) goto fail;              \
  } while (0)

static int bind_layer(df_model *m, int64_t l, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  layer_w *L = &m->layers[l];
  int64_t H = c->hidden_size, hd = c->head_dim, nh = c->num_attention_heads,
          nkv = c->num_key_value_heads;
  char nm[256];
#define NM(fmt, ...) (snprintf(nm, sizeof nm, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), nm)
  BIND(L->in_norm, NM("input_layernorm.weight"), 1, H);
  BIND(L->post_norm, NM("post_attention_layernorm.weight"), 1, H);
  BIND(L->q, NM("self_attn.q_proj.weight"), 2, nh * hd, H);
  BIND(L->k, NM("self_attn.k_proj.weight"), 2, nkv * hd, H);
  BIND(L->v, NM("self_attn.v_proj.weight"), 2, nkv * hd, H);
  BIND(L->o, NM("self_attn.o_proj.weight"), 2, H, nh * hd);
  if (c->attention_bias) {
    BIND(L->qb, NM("self_attn.q_proj.bias"), 1, nh * hd);
    BIND(L->kb, NM("self_attn.k_proj.bias"), 1, nkv * hd);
    BIND(L->vb, NM("self_attn.v_proj.bias"), 1, nkv * hd);
    BIND(L->ob, NM("self_attn.o_proj.bias"), 1, H);
  }
  BIND(L->q_norm, NM("self_attn.q_norm.weight"), 1, hd);
  BIND(L->k_norm, NM("self_attn.k_norm.weight"), 1, hd);
  L->moe = c->arch == DF_ARCH_QWEN3_MOE && c->is_moe_layer[l];
  if (L->moe) {
    int64_t E = c->num_experts, I = c->moe_intermediate_size;
    BIND(L->router, NM("mlp.gate.weight"), 2, E, H);
    L->ex_gate = calloc((size_t)E, sizeof *L->ex_gate);
    L->ex_up = calloc((size_t)E, sizeof *L->ex_up);
    L->ex_down = calloc((size_t)E, sizeof *L->ex_down);
    if (!L->ex_gate || !L->ex_up || !L->ex_down) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
    for (int64_t e = 0; e < E; e++) {
      int64_t s_gu[2] = {I, H}, s_d[2] = {H, I};
      if (!(L->ex_gate[e] = bind(m, NM("mlp.experts.%lld.gate_proj.weight", (long long)e), 2, s_gu,
                                 false, true, err, errlen)) ||
          !(L->ex_up[e] = bind(m, NM("mlp.experts.%lld.up_proj.weight", (long long)e), 2, s_gu,
                               false, true, err, errlen)) ||
          !(L->ex_down[e] = bind(m, NM("mlp.experts.%lld.down_proj.weight", (long long)e), 2, s_d,
                                 false, true, err, errlen)))
        goto fail;
    }
  } else {
    int64_t I = c->intermediate_size;
    BIND(L->mlp_gate, NM("mlp.gate_proj.weight"), 2, I, H);
    BIND(L->mlp_up, NM("mlp.up_proj.weight"), 2, I, H);
    BIND(L->mlp_down, NM("mlp.down_proj.weight"), 2, H, I);
  }
#undef NM
  return 0;
fail:
  return -1;
}

/* RoPE inverse frequencies per transformers' rope utils (default, linear, yarn). */
static void rope_inv_freq(const df_model_config *c, double *inv, float *attn_factor) {
  int64_t d = c->head_dim, h2 = d / 2;
  double base = c->rope_theta;
  const df_rope_scaling *rs = &c->rope_scaling;
  *attn_factor = 1.0f;
  for (int64_t i = 0; i < h2; i++) {
    float e = (float)(2 * i) / (float)d;         /* arange(0, d, 2).float() / d */
    float pf = powf((float)base, e);             /* base ** (...) in fp32 */
    inv[i] = 1.0f / pf;
    if (rs->type == DF_ROPE_LINEAR) inv[i] = (float)inv[i] / (float)rs->factor;
    if (rs->type == DF_ROPE_YARN) {
      double factor = rs->factor;
      int64_t omax = rs->original_max_position_embeddings > 0 ? rs->original_max_position_embeddings
                                                             : c->max_position_embeddings;
      /* find_correction_range(beta_fast, beta_slow, d, base, omax), truncated */
      double lo = floor(d * log((double)omax / (rs->beta_fast * 2 * M_PI)) / (2 * log(base)));
      double hi = ceil(d * log((double)omax / (rs->beta_slow * 2 * M_PI)) / (2 * log(base)));
      if (lo < 0) lo = 0;
      if (hi > d - 1) hi = d - 1;
      if (lo == hi) hi += 0.001;
      float ramp = ((float)i - (float)lo) / (float)(hi - lo);
      ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
      float extrap_factor = 1.0f - ramp;
      float inv_extrap = 1.0f / pf, inv_interp = 1.0f / ((float)factor * pf);
      inv[i] = inv_interp * (1.0f - extrap_factor) + inv_extrap * extrap_factor;
      *attn_factor = rs->attention_factor > 0
                         ? (float)rs->attention_factor
                         : (factor <= 1 ? 1.0f : (float)(0.1 * log(factor) + 1.0));
      if (rs->attention_factor <= 0 && rs->mscale > 0 && rs->mscale_all_dim > 0) {
        /* deepseek_v3: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) */
        double a = factor <= 1 ? 1.0 : 0.1 * rs->mscale * log(factor) + 1.0;
        double b = factor <= 1 ? 1.0 : 0.1 * rs->mscale_all_dim * log(factor) + 1.0;
        *attn_factor = (float)(a / b);
      }
    }
  }
}

static int build_rope(df_model *m, char *err, size_t errlen) {
  int64_t h2 = m->cfg.head_dim / 2, n = m->max_ctx;
  double *inv = calloc((size_t)h2, sizeof *inv);
  if (!inv) return -1;
  float af;
  rope_inv_freq(&m->cfg, inv, &af);
  int64_t shape[2] = {n, h2};
  m->rope_cos = df_t_new_f32(2, shape, err, errlen);
  m->rope_sin = m->rope_cos ? df_t_new_f32(2, shape, err, errlen) : NULL;
  if (!m->rope_sin) {
    free(inv);
    return -1;
  }
  float *cs = df_t_f32(m->rope_cos), *sn = df_t_f32(m->rope_sin);
  for (int64_t p = 0; p < n; p++)
    for (int64_t i = 0; i < h2; i++) {
      float ang = (float)p * (float)inv[i]; /* fp32 outer product, as HF */
      cs[p * h2 + i] = cosf(ang) * af;
      sn[p * h2 + i] = sinf(ang) * af;
    }
  free(inv);
  return 0;
}

/* ---- sharing identical tensors with another loaded model (df_model_opts.share_from) ---- */

/* True when tensor `t` of model `m` and tensor `r` of model `src` (same nbytes) hold the same
 * bytes. Both are read from their files with pread, so neither mapping is touched (no
 * resident pages are added for a table only ever gathered by rows). The first 4 KiB are
 * compared alone first, so different tables cost one small read. Any I/O failure answers
 * false. */
static bool file_bytes_equal(const df_model *m, const df_st_tensor *t, const df_model *src,
                             const df_st_tensor *r) {
  int fa = open(file_of(m, t), O_RDONLY | O_CLOEXEC);
  int fb = open(file_of(src, r), O_RDONLY | O_CLOEXEC);
  enum { BLK = 1 << 20 };
  uint8_t *ba = malloc(BLK), *bb = malloc(BLK);
  bool same = fa >= 0 && fb >= 0 && ba && bb;
  for (uint64_t off = 0; same && off < t->nbytes;) {
    size_t want = off == 0 ? 4096 : BLK;
    if (want > t->nbytes - off) want = (size_t)(t->nbytes - off);
    ssize_t ga = pread(fa, ba, want, (off_t)(t->file_offset + off));
    ssize_t gb = pread(fb, bb, want, (off_t)(r->file_offset + off));
    if (ga <= 0 || ga != gb) {
      same = false;
      break;
    }
    same = memcmp(ba, bb, (size_t)ga) == 0;
    off += (uint64_t)ga;
  }
  free(ba);
  free(bb);
  if (fa >= 0) close(fa);
  if (fb >= 0) close(fb);
  return same;
}

/* If this model's tensor `name` (bound as *dst) equals share_from's embed_tokens or lm_head
 * (dtype, shape, bytes), rebind *dst to share_from's mapping. 0, or -1 out of memory. */
static int share_tensor(df_model *m, const df_model *src, const char *name,
                        const df_t_tensor **dst, char *err, size_t errlen) {
  const df_st_tensor *t = df_st_find(m->st, name);
  if (!t || !*dst) return 0;
  const char *cands[] = {"model.embed_tokens.weight", "lm_head.weight"};
  for (int i = 0; i < 2; i++) {
    const df_st_tensor *r = df_st_find(src->st, cands[i]);
    if (!r || r->dtype != t->dtype || r->ndim != t->ndim || r->nbytes != t->nbytes) continue;
    bool same = true;
    for (int d = 0; d < t->ndim; d++) same = same && r->shape[d] == t->shape[d];
    if (!same || !file_bytes_equal(m, t, src, r)) continue;
    df_t_tensor *h = df_t_wrap(r->data, r->dtype, r->ndim, r->shape, err, errlen);
    if (!h) return -1;
    if (track(m, h) != 0) {
      df_t_destroy(&h);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    *dst = h; /* the handle on this model's own mapping stays tracked, never read */
    m->bytes.shared += t->nbytes;
    return 0;
  }
  return 0;
}

static df_t_tensor *buf2(int64_t a, int64_t b, char *err, size_t errlen) {
  int64_t s[2] = {a, b};
  return df_t_new_f32(2, s, err, errlen);
}

static int plan_buffers(df_model *m, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t R = m->max_rows, H = c->hidden_size, hd = c->head_dim;
  int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads;
  int64_t E = c->num_experts > 0 ? c->num_experts : 1, k = c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1;
  int64_t I = c->intermediate_size > c->moe_intermediate_size ? c->intermediate_size : c->moe_intermediate_size;
  if (c->moe_intermediate_size * c->n_shared_experts > I) I = c->moe_intermediate_size * c->n_shared_experts;
  if (I <= 0) I = 1;
  if (!(m->x = buf2(R, H, err, errlen)) || !(m->xn = buf2(R, H, err, errlen)) ||
      !(m->tmp = buf2(R, H, err, errlen)) || !(m->q = buf2(R, nh * hd, err, errlen)) ||
      !(m->k = buf2(R, nkv * hd, err, errlen)) || !(m->v = buf2(R, nkv * hd, err, errlen)) ||
      !(m->att = buf2(R, nh * hd, err, errlen)) || !(m->router_logits = buf2(R, E, err, errlen)) ||
      !(m->xs = buf2(R * k, H, err, errlen)) || !(m->ys = buf2(R * k, H, err, errlen)) ||
      !(m->g = buf2(R, I, err, errlen)) || !(m->u = buf2(R, I, err, errlen)) ||
      !(m->logits = buf2(R, c->vocab_size, err, errlen)) ||
      !(m->scratch = buf2(df_k_max_threads(), m->max_ctx, err, errlen)))
    return -1;
  m->top_idx = calloc((size_t)(R * k), sizeof *m->top_idx);
  m->top_w = calloc((size_t)(R * k), sizeof *m->top_w);
  m->slot = calloc((size_t)(R * k), sizeof *m->slot);
  m->counts = calloc((size_t)(E + 1), sizeof *m->counts);
  m->experts = calloc((size_t)E, sizeof *m->experts);
  m->offsets = calloc((size_t)(E + 1), sizeof *m->offsets);
  m->pos = calloc((size_t)R, sizeof *m->pos);
  m->row_seq = calloc((size_t)R, sizeof *m->row_seq);
  m->row_ids = calloc((size_t)R, sizeof *m->row_ids);
  m->row_out = calloc((size_t)R, sizeof *m->row_out);
  if (!m->top_idx || !m->top_w || !m->slot || !m->counts || !m->experts || !m->offsets ||
      !m->pos || !m->row_seq || !m->row_ids || !m->row_out) {
    snprintf(err, errlen, "out of memory planning buffers");
    return -1;
  }
  m->bytes.buffers = (uint64_t)4 * (uint64_t)(R * (3 * H + 2 * nh * hd + 2 * nkv * hd + E +
                                                   2 * k * H + 2 * I + c->vocab_size) +
                                              df_k_max_threads() * m->max_ctx);
  return 0;
}

/* ---- device placement (docs/GPU.md) ----------------------------------------------------- */

/* Bytes of a weight as stored, FP8 block scales included. */
static uint64_t tensor_bytes(const df_t_tensor *t) {
  if (!t) return 0;
  const df_t_tensor *sc = df_t_block_scale(t, NULL, NULL);
  return (uint64_t)df_t_numel(t) * df_dtype_size(df_t_dtype(t)) +
         (sc ? (uint64_t)df_t_numel(sc) * sizeof(float) : 0);
}

/* Resolve opts->device, admit memory and upload for the torch compute path. Any failure
 * leaves the model on the CPU path with the reason in m->device_note; only out-of-memory
 * on the host is an error (-1). */
static int device_attach(df_model *m, const df_model_opts *opts, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  char want_nm[32], nm[32], note[320], cerr[256];
  df_t_device got;
  df_t_device_name(&opts->device, want_nm, sizeof want_nm);
  df_t_device_resolve(&opts->device, &got, note, sizeof note);
  df_t_device_name(&got, nm, sizeof nm);
  m->device.kind = DF_T_DEV_CPU;
  m->device.index = 0;
  if (got.kind == DF_T_DEV_CPU) {
    snprintf(m->device_note, sizeof m->device_note, "%s",
             note[0] ? note : "--device auto: no usable CUDA device; running on the CPU");
    return 0;
  }
  /* memory figures: the device's, or the caller's (tests), or unlimited (torch-cpu) */
  uint64_t free_b = opts->device_free, total_b = opts->device_total;
  if (!free_b || !total_b) {
    if (got.kind == DF_T_DEV_TORCH_CPU) {
      free_b = total_b = UINT64_MAX / 2;
    } else if (df_cuda_mem_info(got.index, &free_b, &total_b, cerr, sizeof cerr) != 0) {
      snprintf(m->device_note, sizeof m->device_note, "--device %s: cannot measure free device "
               "memory (%s); running on the CPU", nm, cerr);
      return 0;
    }
  }
  int64_t L = c->num_hidden_layers, E = c->num_experts > 0 ? c->num_experts : 0;
  int64_t n_pairs = E > 0 ? L * E : 0, seqs = opts->device_seqs > 0 ? opts->device_seqs : 1;
  uint64_t *eb = n_pairs ? calloc((size_t)n_pairs, sizeof *eb) : NULL;
  uint8_t *on = n_pairs ? calloc((size_t)n_pairs, 1) : NULL;
  df_tm_layer *tl = calloc((size_t)L, sizeof *tl);
  if ((n_pairs && (!eb || !on)) || !tl) {
    free(eb);
    free(on);
    free(tl);
    snprintf(err, errlen, "out of memory planning device placement");
    return -1;
  }
  uint64_t max_w = tensor_bytes(m->lm_head); /* largest weight: its fp32 copy per op */
  for (int64_t l = 0; l < L; l++) {
    const layer_w *w = &m->layers[l];
    df_tm_layer *t = &tl[l];
    *t = (df_tm_layer){.in_norm = w->in_norm, .post_norm = w->post_norm, .q = w->q, .k = w->k,
                       .v = w->v, .o = w->o, .qb = w->qb, .kb = w->kb, .vb = w->vb,
                       .ob = w->ob, .q_norm = w->q_norm, .k_norm = w->k_norm,
                       .mlp_gate = w->mlp_gate, .mlp_up = w->mlp_up, .mlp_down = w->mlp_down,
                       .q_a = w->q_a, .q_a_norm = w->q_a_norm, .q_b = w->q_b, .kv_a = w->kv_a,
                       .kv_a_norm = w->kv_a_norm, .kv_b = w->kv_b, .router_bias = w->router_bias,
                       .sh_gate = w->sh_gate, .sh_up = w->sh_up, .sh_down = w->sh_down};
    if (!w->moe) continue;
    t->router = w->router;
    t->ex_gate = w->ex_gate;
    t->ex_up = w->ex_up;
    t->ex_down = w->ex_down;
    for (int64_t e = 0; e < E && !opts->device_host_experts; e++)
      eb[l * E + e] = tensor_bytes(w->ex_gate[e]) + tensor_bytes(w->ex_up[e]) +
                      tensor_bytes(w->ex_down[e]);
  }
  /* work: planned activations, the fp32 copy of the largest weight (twice: the widened
   * weight and the product's workspace), the logits of a chunk */
  uint64_t kv = df_model_kv_bytes_per_token(m) * (uint64_t)m->max_ctx * (uint64_t)seqs;
  uint64_t work = m->bytes.buffers + 2 * (max_w / (df_dtype_size(df_t_dtype(m->lm_head)))) * 4;
  df_admit_in in = {.device = nm, .free_bytes = free_b, .total_bytes = total_b,
                    .resident_bytes = m->bytes.resident,
                    .kv_bytes = kv, .draft_bytes = opts->device_extra, .work_bytes = work,
                    .n_experts = n_pairs, .expert_bytes = eb,
                    .heat = opts->expert_heat_n == n_pairs ? opts->expert_heat : NULL};
  df_admit_plan plan;
  int rc = df_admit_plan_make(&in, on, &plan);
  m->device_plan = plan;
  if (rc != 0 || !plan.ok) {
    snprintf(m->device_note, sizeof m->device_note, "%s", plan.line);
    goto done;
  }
  df_tm_desc d = {.n_layers = L, .hidden = c->hidden_size, .n_head = c->num_attention_heads,
                  .n_kv = c->num_key_value_heads, .head_dim = c->head_dim,
                  .vocab = c->vocab_size, .n_experts = E, .top_k = c->num_experts_per_tok,
                  .norm_topk = c->norm_topk_prob, .eps = (float)c->rms_norm_eps,
                  .embed = m->embed, .final_norm = m->final_norm, .lm_head = m->lm_head,
                  .rope_cos = m->rope_cos, .rope_sin = m->rope_sin, .layers = tl,
                  .expert_on_device = on, .mla = c->arch == DF_ARCH_DEEPSEEK_V3,
                  .q_lora_rank = c->q_lora_rank, .kv_lora_rank = c->kv_lora_rank,
                  .dn = c->qk_nope_head_dim, .dr = c->qk_rope_head_dim, .dv = c->v_head_dim,
                  .rope_interleave = c->rope_interleave, .mla_scale = m->mla_scale,
                  .n_group = c->n_group, .topk_group = c->topk_group,
                  .routed_scaling = (float)c->routed_scaling_factor};
  m->tm = df_tm_new(&d, &got, note, sizeof note);
  if (!m->tm) {
    snprintf(m->device_note, sizeof m->device_note, "%s; running on the CPU", note);
    goto done;
  }
  m->device = got;
  m->experts_on_device = plan.experts_on_device;
  m->expert_on_device = on;
  on = NULL;
  if (got.kind == DF_T_DEV_TORCH_CPU && !(opts->device_free && opts->device_total))
    snprintf(m->device_note, sizeof m->device_note, "torch-cpu: the torch compute path on the "
             "CPU (a test device), %lld routed experts through it", (long long)plan.experts_on_device);
  else
    snprintf(m->device_note, sizeof m->device_note, "%s", plan.line);
done:
  free(eb);
  free(on);
  free(tl);
  return 0;
}

int df_model_load(const char *dir, const df_model_opts *opts, df_model **out, char *err,
                  size_t errlen) {
  *out = NULL;
  df_model *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  snprintf(m->dir, sizeof m->dir, "%s", dir);
  df_t_set_threads(opts ? opts->threads : 0);
  if (df_cfg_load(dir, &m->cfg, err, errlen) != 0) goto fail;
  if (df_gen_cfg_load(dir, &m->cfg, &m->gen, err, errlen) != 0) goto fail;
  if (df_st_open(dir, &m->st, err, errlen) != 0) goto fail;
  const df_model_config *c = &m->cfg;
  if (c->head_dim % 2 != 0) {
    snprintf(err, errlen, "%s/config.json: head_dim %lld must be even for RoPE", dir,
             (long long)c->head_dim);
    goto fail;
  }
  m->max_ctx = opts && opts->max_ctx > 0 ? opts->max_ctx
               : (c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096);
  m->max_rows = opts && opts->max_rows > 0 ? opts->max_rows : 64;
  if (m->max_ctx > c->max_position_embeddings) {
    snprintf(err, errlen, "context of %lld tokens exceeds max_position_embeddings %lld "
             "(%s/config.json)", (long long)m->max_ctx, (long long)c->max_position_embeddings,
             dir);
    goto fail;
  }
  int64_t H = c->hidden_size;
  BIND(m->embed, "model.embed_tokens.weight", 2, c->vocab_size, H);
  BIND(m->final_norm, "model.norm.weight", 1, H);
  if (c->tie_word_embeddings) {
    m->lm_head = m->embed;
  } else {
    BIND(m->lm_head, "lm_head.weight", 2, c->vocab_size, H);
  }
  if (opts && opts->share_from) {
    if (share_tensor(m, opts->share_from, "model.embed_tokens.weight", &m->embed, err, errlen) != 0)
      goto fail;
    if (c->tie_word_embeddings)
      m->lm_head = m->embed;
    else if (share_tensor(m, opts->share_from, "lm_head.weight", &m->lm_head, err, errlen) != 0)
      goto fail;
  }
  m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
  if (!m->layers) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  for (int64_t l = 0; l < c->num_hidden_layers; l++)
    if ((c->arch == DF_ARCH_DEEPSEEK_V3 ? df_ds_bind_layer(m, l, err, errlen)
                                        : bind_layer(m, l, err, errlen)) != 0)
      goto fail;
  if (build_rope(m, err, errlen) != 0 || plan_buffers(m, err, errlen) != 0) goto fail;
  if (c->arch == DF_ARCH_DEEPSEEK_V3 && df_ds_plan(m, err, errlen) != 0) goto fail;
  /* Weight bytes one decode token reads: the resident part (minus the embedding table when
   * untied: only one row of it is gathered) plus top-k of E experts on every MoE layer. */
  m->bytes.active_per_token = m->bytes.resident;
  if (!c->tie_word_embeddings)
    m->bytes.active_per_token -= (uint64_t)c->vocab_size * (uint64_t)H *
                                 df_dtype_size(df_t_dtype(m->embed));
  if (c->num_experts > 0)
    m->bytes.active_per_token +=
        m->bytes.experts / (uint64_t)c->num_experts * (uint64_t)c->num_experts_per_tok;
  m->backend = df_expert_local_new(m, err, errlen);
  if (!m->backend) goto fail;
  if (c->num_experts > 0) {
    m->route_counts = calloc((size_t)(c->num_hidden_layers * c->num_experts),
                             sizeof *m->route_counts);
    if (!m->route_counts) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
  }
  if (opts && opts->device.kind != DF_T_DEV_CPU && device_attach(m, opts, err, errlen) != 0)
    goto fail;
  *out = m;
  return 0;
fail:
  df_model_destroy(&m);
  return -1;
}

void df_model_destroy(df_model **mp) {
  if (!mp || !*mp) return;
  df_model *m = *mp;
  df_expert_backend_destroy(&m->backend);
  df_tm_destroy(&m->tm);
  free(m->route_counts);
  free(m->expert_on_device);
  for (size_t i = 0; i < m->n_handles; i++) df_t_destroy(&m->handles[i]);
  free(m->handles);
  if (m->layers) {
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
      free(m->layers[l].ex_gate);
      free(m->layers[l].ex_up);
      free(m->layers[l].ex_down);
    }
    free(m->layers);
  }
  df_t_tensor **bufs[] = {&m->rope_cos, &m->rope_sin, &m->x, &m->xn, &m->tmp, &m->q, &m->k,
                          &m->v, &m->att, &m->router_logits, &m->xs, &m->ys, &m->g, &m->u,
                          &m->logits, &m->scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_t_destroy(bufs[i]);
  df_ds_free(m);
  free(m->top_idx);
  free(m->top_w);
  free(m->slot);
  free(m->counts);
  free(m->experts);
  free(m->offsets);
  free(m->pos);
  free(m->row_seq);
  free(m->row_ids);
  free(m->row_out);
  df_st_close(&m->st);
  free(m);
  *mp = NULL;
}

const df_model_config *df_model_cfg(const df_model *m) { return &m->cfg; }
const df_gen_config *df_model_gen_cfg(const df_model *m) { return &m->gen; }
const df_st_model *df_model_tensors(const df_model *m) { return m->st; }
int64_t df_model_max_ctx(const df_model *m) { return m->max_ctx; }
int64_t df_model_max_rows(const df_model *m) { return m->max_rows; }
df_model_bytes df_model_memory(const df_model *m) { return m->bytes; }
df_t_device df_model_device(const df_model *m) { return m->device; }
const char *df_model_device_note(const df_model *m) { return m->device_note; }
int64_t df_model_experts_on_device(const df_model *m) { return m->experts_on_device; }
const uint8_t *df_model_expert_placement(const df_model *m) { return m->expert_on_device; }
df_admit_plan df_model_device_plan(const df_model *m) { return m->device_plan; }
const uint64_t *df_model_route_counts(const df_model *m) { return m->route_counts; }

df_kv_cache *df_model_kv_new(const df_model *m, int64_t ctx, char *err, size_t errlen) {
  if (ctx <= 0) ctx = m->max_ctx;
  if (ctx > m->max_ctx) {
    snprintf(err, errlen, "context %lld tokens exceeds the model's planned max_ctx %lld",
             (long long)ctx, (long long)m->max_ctx);
    return NULL;
  }
  if (m->cfg.arch == DF_ARCH_DEEPSEEK_V3)
    return df_kv_new_mla_on(m->tm ? &m->device : NULL, m->cfg.num_hidden_layers,
                            m->cfg.kv_lora_rank, m->cfg.qk_rope_head_dim, ctx, err, errlen);
  return df_kv_new_on(m->tm ? &m->device : NULL, m->cfg.num_hidden_layers,
                      m->cfg.num_key_value_heads, m->cfg.head_dim, ctx, err, errlen);
}

uint64_t df_model_kv_bytes_per_token(const df_model *m) {
  const df_model_config *c = &m->cfg;
  if (c->arch == DF_ARCH_DEEPSEEK_V3)
    return (uint64_t)(c->num_hidden_layers * (c->kv_lora_rank + c->qk_rope_head_dim)) * 4u;
  return (uint64_t)(2 * c->num_hidden_layers * c->num_key_value_heads * c->head_dim) * 4u;
}

int df_model_expert_weights(const df_model *m, int layer, int expert, const df_t_tensor **gate,
                            const df_t_tensor **up, const df_t_tensor **down) {
  if (layer < 0 || layer >= m->cfg.num_hidden_layers || !m->layers[layer].moe || expert < 0 ||
      expert >= m->cfg.num_experts)
    return -1;
  *gate = m->layers[layer].ex_gate[expert];
  *up = m->layers[layer].ex_up[expert];
  *down = m->layers[layer].ex_down[expert];
  return 0;
}

void df_model_set_expert_backend(df_model *m, df_expert_backend *be) {
  df_expert_backend_destroy(&m->backend);
  if (!be) {
    char err[256];
    be = df_expert_local_new(m, err, sizeof err);
    assert(be);
  }
  m->backend = be;
}

/* ---- forward --------------------------------------------------------------------------- */

/* MoE block over rows [0, R) of m->xn; result in m->tmp. */
static int moe_block(df_model *m, int layer, int64_t R, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  const layer_w *L = &m->layers[layer];
  int64_t E = c->num_experts, k = c->num_experts_per_tok, H = c->hidden_size;
  double t0 = m->profiling ? now_s() : 0;
  df_t_linear(m->xn, 0, R, L->router, NULL, m->router_logits);
  if (c->router == DF_ROUTER_SIGMOID_NOAUX)
    df_k_router_sigmoid_group(df_t_f32(m->router_logits), R, E, df_t_data(L->router_bias),
                              c->n_group, c->topk_group, k, c->norm_topk_prob,
                              (float)c->routed_scaling_factor, m->router_work, m->top_idx,
                              m->top_w);
  else
    df_t_router_topk(m->router_logits, R, k, c->norm_topk_prob, m->top_idx, m->top_w);
  /* group (row, choice) pairs by expert id, ascending; rows ascending within a group */
  memset(m->counts, 0, (size_t)(E + 1) * sizeof *m->counts);
  for (int64_t i = 0; i < R * k; i++) m->counts[m->top_idx[i]]++;
  for (int64_t e = 0; e < E; e++) m->route_counts[(int64_t)layer * E + e] += (uint64_t)m->counts[e];
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
  const float *xn = df_t_f32(m->xn);
  float *xs = df_t_f32(m->xs);
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < k; j++) {
      int64_t s = m->counts[m->top_idx[r * k + j]]++;
      m->slot[r * k + j] = s;
      memcpy(xs + s * H, xn + r * H, (size_t)H * sizeof(float));
    }
  df_expert_request req = {.layer = layer, .n_groups = n_groups, .experts = m->experts,
                           .offsets = m->offsets, .x = m->xs, .y = m->ys};
  prof_lap(m, &m->prof.router, &t0);
  if (df_expert_backend_run(m->backend, &req, err, errlen) != 0) return -1;
  prof_lap(m, &m->prof.experts, &t0);
  const float *ys = df_t_f32(m->ys);
  float *out = df_t_f32(m->tmp);
  for (int64_t r = 0; r < R; r++) {
    float *o = out + r * H;
    memset(o, 0, (size_t)H * sizeof(float));
    for (int64_t j = 0; j < k; j++) df_k_axpy(o, m->top_w[r * k + j], ys + m->slot[r * k + j] * H, H);
  }
  prof_lap(m, &m->prof.combine, &t0);
  if (L->sh_gate) { /* deepseek_v3: routed sum + shared experts (DeepseekV3MoE.forward) */
    df_t_swiglu_ffn(m->xn, 0, R, L->sh_gate, L->sh_up, L->sh_down, m->g, m->u, m->ys);
    df_k_add(out, df_t_f32(m->ys), R * H);
    prof_lap(m, &m->prof.dense_mlp, &t0);
  }
  return 0;
}

/* One chunk of R <= max_rows rows. Row r belongs to sequence row_seq[r] and sits at
 * position m->pos[r] of that sequence's cache; rows of one sequence are consecutive and in
 * position order. */
static int forward_chunk(df_model *m, df_kv_cache **kvs, const int32_t *row_seq,
                         const int32_t *ids, int64_t R, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t H = c->hidden_size, hd = c->head_dim, nh = c->num_attention_heads,
          nkv = c->num_key_value_heads;
  float eps = (float)c->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
  double t0 = m->profiling ? now_s() : 0;
  df_t_embed(ids, R, m->embed, m->x);
  float *x = df_t_f32(m->x), *tmp = df_t_f32(m->tmp);
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    const layer_w *L = &m->layers[l];
    prof_lap(m, &m->prof.embed, &t0);
    if (c->arch == DF_ARCH_DEEPSEEK_V3) {
      df_ds_attention(m, l, kvs, row_seq, R);
      df_k_add(x, tmp, R * H);
      prof_lap(m, &m->prof.attention, &t0);
      goto ffn;
    }
    df_t_rmsnorm(m->x, R, L->in_norm, eps, m->xn);
    df_t_linear_op qkv[3] = {{m->xn, 0, R, L->q, L->qb, m->q}, {m->xn, 0, R, L->k, L->kb, m->k},
                             {m->xn, 0, R, L->v, L->vb, m->v}};
    df_t_linear_multi(qkv, 3);
    df_t_rmsnorm(m->q, R * nh, L->q_norm, eps, m->q);
    df_t_rmsnorm(m->k, R * nkv, L->k_norm, eps, m->k);
    df_t_rope(m->q, R, nh, m->pos, m->rope_cos, m->rope_sin);
    df_t_rope(m->k, R, nkv, m->pos, m->rope_cos, m->rope_sin);
    /* append K/V to each row's own cache: layout [n_kv, ctx, hd] */
    const float *kr = df_t_f32(m->k), *vr = df_t_f32(m->v);
    for (int64_t r = 0; r < R; r++) {
      df_kv_cache *kv = kvs[row_seq[r]];
      float *kc = df_t_f32(kv->k[l]), *vc = df_t_f32(kv->v[l]);
      for (int64_t h = 0; h < nkv; h++) {
        memcpy(kc + (h * kv->ctx + m->pos[r]) * hd, kr + (r * nkv + h) * hd, (size_t)hd * 4);
        memcpy(vc + (h * kv->ctx + m->pos[r]) * hd, vr + (r * nkv + h) * hd, (size_t)hd * 4);
      }
    }
    /* attention per run of rows of one sequence, each over its own cache */
    for (int64_t r0 = 0; r0 < R;) {
      int64_t r1 = r0 + 1;
      while (r1 < R && row_seq[r1] == row_seq[r0]) r1++;
      df_kv_cache *kv = kvs[row_seq[r0]];
      df_t_attention_rows(m->q, r0, r1 - r0, m->pos[r0], nh, kv->k[l], kv->v[l], scale, m->att,
                          m->scratch);
      r0 = r1;
    }
    df_t_linear(m->att, 0, R, L->o, L->ob, m->tmp);
    df_k_add(x, tmp, R * H);
    prof_lap(m, &m->prof.attention, &t0);
  ffn:
    df_t_rmsnorm(m->x, R, L->post_norm, eps, m->xn);
    if (L->moe) {
      if (moe_block(m, (int)l, R, err, errlen) != 0) return -1;
      if (m->profiling) t0 = now_s();
    } else {
      df_t_swiglu_ffn(m->xn, 0, R, L->mlp_gate, L->mlp_up, L->mlp_down, m->g, m->u, m->tmp);
      prof_lap(m, &m->prof.dense_mlp, &t0);
    }
    df_k_add(x, tmp, R * H);
  }
  prof_lap(m, &m->prof.embed, &t0);
  return 0;
}

int df_model_forward_batch(df_model *m, df_batch_seq *seqs, int n_seqs, char *err,
                           size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t V = c->vocab_size, H = c->hidden_size, total = 0;
  if (n_seqs <= 0 || n_seqs > DF_MODEL_MAX_BATCH) {
    snprintf(err, errlen, "forward: %d sequences (expected 1..%d)", n_seqs, DF_MODEL_MAX_BATCH);
    return -1;
  }
  for (int s = 0; s < n_seqs; s++) {
    const df_batch_seq *q = &seqs[s];
    if (q->n <= 0) {
      snprintf(err, errlen, "forward: sequence %d has no tokens", s);
      return -1;
    }
    if (q->kv->len + q->n > q->kv->ctx) {
      snprintf(err, errlen, "context overflow: %lld cached + %lld new tokens > context %lld",
               (long long)q->kv->len, (long long)q->n, (long long)q->kv->ctx);
      return -1;
    }
    for (int t = 0; t < s; t++)
      if (seqs[t].kv == q->kv) {
        snprintf(err, errlen, "forward: sequences %d and %d share a KV cache", t, s);
        return -1;
      }
    for (int64_t i = 0; i < q->n; i++)
      if (q->ids[i] < 0 || q->ids[i] >= V) {
        snprintf(err, errlen, "token id %d at index %lld out of range [0, %lld)", q->ids[i],
                 (long long)i, (long long)V);
        return -1;
      }
    total += q->n;
  }
  df_kv_cache *kvs[DF_MODEL_MAX_BATCH];
  int64_t start[DF_MODEL_MAX_BATCH];
  for (int s = 0; s < n_seqs; s++) {
    kvs[s] = seqs[s].kv;
    start[s] = seqs[s].kv->len;
  }
  /* walk the concatenated rows in chunks of max_rows; (s, i) = next token to place */
  int s = 0;
  int64_t i = 0;
  for (int64_t done = 0; done < total;) {
    int64_t R = total - done < m->max_rows ? total - done : m->max_rows;
    int cs = s;
    int64_t ci = i;
    for (int64_t r = 0; r < R; r++) {
      m->row_seq[r] = s;
      m->row_ids[r] = seqs[s].ids[i];
      m->pos[r] = start[s] + i;
      if (++i == seqs[s].n) {
        s++;
        i = 0;
      }
    }
    if (m->tm) { /* torch compute path: the whole chunk, lm_head included, on the device */
      for (int64_t r = 0, ss = cs, ii = ci; r < R; r++) {
        const df_batch_seq *q = &seqs[ss];
        bool want = q->mode == DF_LOGITS_ALL || (q->mode == DF_LOGITS_LAST && ii == q->n - 1);
        m->row_out[r] = !want ? NULL : q->mode == DF_LOGITS_ALL ? q->logits + ii * V : q->logits;
        if (++ii == q->n) {
          ss++;
          ii = 0;
        }
      }
      if (df_tm_forward(m->tm, R, m->row_ids, m->pos, m->row_seq, kvs, m->row_out, m->backend,
                        m->xs, m->ys, m->route_counts, err, errlen) != 0) {
        for (int t = 0; t < n_seqs; t++) kvs[t]->len = start[t];
        return -1;
      }
      for (int64_t r = 0; r < R; r++)
        if (m->pos[r] + 1 > kvs[m->row_seq[r]]->len) kvs[m->row_seq[r]]->len = m->pos[r] + 1;
      done += R;
      continue;
    }
    if (forward_chunk(m, kvs, m->row_seq, m->row_ids, R, err, errlen) != 0) {
      for (int t = 0; t < n_seqs; t++) kvs[t]->len = start[t];
      return -1;
    }
    /* rows that need logits, gathered so lm_head streams its weights once per chunk */
    double t0 = m->profiling ? now_s() : 0;
    int64_t nl = 0;
    const float *xr = df_t_f32(m->x);
    float *g = df_t_f32(m->tmp);
    for (int64_t r = 0, ss = cs, ii = ci; r < R; r++) {
      const df_batch_seq *q = &seqs[ss];
      bool want = q->mode == DF_LOGITS_ALL || (q->mode == DF_LOGITS_LAST && ii == q->n - 1);
      if (want) {
        memcpy(g + nl * H, xr + r * H, (size_t)H * sizeof(float));
        m->row_out[nl++] = q->mode == DF_LOGITS_ALL ? q->logits + ii * V : q->logits;
      }
      if (++ii == q->n) {
        ss++;
        ii = 0;
      }
    }
    if (nl > 0) {
      df_t_rmsnorm(m->tmp, nl, m->final_norm, (float)c->rms_norm_eps, m->xn);
      df_t_linear(m->xn, 0, nl, m->lm_head, NULL, m->logits);
      for (int64_t j = 0; j < nl; j++)
        memcpy(m->row_out[j], df_t_f32(m->logits) + j * V, (size_t)V * sizeof(float));
    }
    prof_lap(m, &m->prof.lm_head, &t0);
    /* the chunk's rows are in the caches now */
    for (int64_t r = 0; r < R; r++)
      if (m->pos[r] + 1 > kvs[m->row_seq[r]]->len) kvs[m->row_seq[r]]->len = m->pos[r] + 1;
    if (m->profiling) {
      m->prof.forwards++;
      m->prof.tokens += R;
    }
    done += R;
  }
  return 0;
}

int df_model_forward(df_model *m, df_kv_cache *kv, const int32_t *ids, int64_t n,
                     df_logits_mode mode, float *logits, char *err, size_t errlen) {
  df_batch_seq q = {.kv = kv, .ids = ids, .n = n, .mode = mode, .logits = logits};
  return df_model_forward_batch(m, &q, 1, err, errlen);
}
