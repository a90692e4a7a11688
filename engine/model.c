/* engine/model.c — loading a model folder into a plan of composed layers, its sequences'
 * state, and the accessors of model.h.
 *
 * Owns: what every family shares at load: config and safetensors, the embedding table, final
 * norm and lm_head (and their sharing with another loaded model), the family's per-layer
 * plan (engine/models/family.h), RoPE tables, the planned buffers, the local expert backend,
 * the byte counts; a sequence's state (df_model_kv_new: each layer's token mixer allocates
 * its part); placing the model on a device for the torch compute path. Does not own: the
 * layer loop (engine/forward.c), any family's tensors or blocks (engine/models/,
 * engine/layers/), the admission rule (engine/device/admission.c).
 */
#include "engine/model.h"

#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/device/admission.h"
#include "engine/device/cuda_rt.h"
#include "engine/experts/expert_local.h"
#include "engine/kernels/kernels.h"
#include "engine/layers/moe.h"
#include "engine/layers/rope.h"
#include "engine/model_internal.h"

void df_model_profile_enable(df_model *m, bool on) {
  m->profiling = on;
  memset(&m->prof, 0, sizeof m->prof);
}

df_model_profile df_model_profile_get(const df_model *m) { return m->prof; }

/* ---- sharing identical tensors with another loaded model (df_model_opts.share_from) ---- */

/* True when tensor `t` of model `m` and tensor `r` of model `src` (same nbytes) hold the same
 * bytes. Both are read from their files with pread, so neither mapping is touched (no
 * resident pages are added for a table only ever gathered by rows). The first 4 KiB are
 * compared alone first, so different tables cost one small read. Any I/O failure answers
 * false. */
static bool file_bytes_equal(const df_model *m, const df_st_tensor *t, const df_model *src,
                             const df_st_tensor *r) {
  int fa = open(df_st_file_path(m->st, t->file_index), O_RDONLY | O_CLOEXEC);
  int fb = open(df_st_file_path(src->st, r->file_index), O_RDONLY | O_CLOEXEC);
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
  char cands[2][96];
  snprintf(cands[0], sizeof cands[0], "%smodel.embed_tokens.weight", src->cfg.tensor_prefix);
  snprintf(cands[1], sizeof cands[1], "%slm_head.weight", src->cfg.tensor_prefix);
  for (int i = 0; i < 2; i++) {
    const df_st_tensor *r = df_st_find(src->st, cands[i]);
    if (!r || r->dtype != t->dtype || r->ndim != t->ndim || r->nbytes != t->nbytes) continue;
    bool same = true;
    for (int d = 0; d < t->ndim; d++) same = same && r->shape[d] == t->shape[d];
    if (!same || !file_bytes_equal(m, t, src, r)) continue;
    df_t_tensor *h = df_t_wrap(r->data, r->dtype, r->ndim, r->shape, err, errlen);
    if (!h) return -1;
    if (df_binder_track(&m->bind, h) != 0) {
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


/* The planned buffers of the layer loop itself; the blocks planned theirs while being built. */
static int plan_buffers(df_model *m, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t R = m->max_rows, H = c->hidden_size;
  df_ws *ws = m->ws;
  if (!(m->x = df_ws_f32(ws, "model.x", R, H, err, errlen)) ||
      !(m->xn = df_ws_f32(ws, "model.xn", R, H, err, errlen)) ||
      !(m->tmp = df_ws_f32(ws, "model.tmp", R, H, err, errlen)) ||
      !(m->logits = df_ws_f32(ws, "model.logits", R, c->vocab_size, err, errlen)) ||
      df_moe_io_buffers(ws, R, c->num_experts_per_tok, H, &m->xs, &m->ys, err, errlen) != 0 ||
      !(m->pos = df_ws_array(ws, "model.pos", R, sizeof *m->pos, err, errlen)) ||
      !(m->row_seq = df_ws_array(ws, "model.row_seq", R, sizeof *m->row_seq, err, errlen)) ||
      !(m->row_ids = df_ws_array(ws, "model.row_ids", R, sizeof *m->row_ids, err, errlen)) ||
      !(m->row_out = df_ws_array(ws, "model.row_out", R, sizeof *m->row_out, err, errlen)) ||
      !(m->row_cap = df_ws_array(ws, "model.row_cap", R, sizeof *m->row_cap, err, errlen)))
    return -1;
  return 0;
}

/* The local backend's view of the routed experts: layer `layer`'s channel mixer. */
static int expert_lookup(const void *owner, int layer, int expert, const df_t_tensor **gate,
                         const df_t_tensor **up, const df_t_tensor **down) {
  return df_model_expert_weights(owner, layer, expert, gate, up, down);
}

df_expert_backend *df_model_local_experts(const df_model *m, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  int64_t I = c->moe_intermediate_size > 0 ? c->moe_intermediate_size : 1;
  int64_t k = c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1;
  return df_expert_local_new(expert_lookup, m, m->max_rows * k, I, err, errlen);
}

/* ---- device placement (docs/GPU.md) ---------------------------------------------------- */

/* Bytes of a weight as stored, FP8 block scales and MXFP4 E8M0 scales included. */
static uint64_t tensor_bytes(const df_t_tensor *t) {
  return t ? df_t_stored_bytes(t) : 0;
}

/* Resolve opts->device, admit memory (engine/device/admission.h: resident, KV cache, draft
 * and work charged first, the hottest routed experts in the rest) and hand the weights to
 * the torch compute path as each block describes them (docs/GPU.md). Any failure leaves the
 * model on the CPU path with the reason in m->device_note; only out-of-memory on the host
 * is an error (-1 + message). */
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
  /* the torch path's view of every layer: each block describes its own weights */
  df_tm_desc d = {.n_layers = L, .hidden = c->hidden_size, .n_head = c->num_attention_heads,
                  .n_kv = c->num_key_value_heads, .head_dim = c->head_dim,
                  .vocab = c->vocab_size, .n_experts = E, .top_k = c->num_experts_per_tok,
                  .norm_topk = c->norm_topk_prob, .eps = (float)c->rms_norm_eps,
                  .embed = m->embed, .final_norm = m->final_norm, .lm_head = m->lm_head,
                  .rope_cos = m->rope_cos, .rope_sin = m->rope_sin, .layers = tl,
                  .n_group = c->n_group, .topk_group = c->topk_group,
                  .routed_scaling = (float)c->routed_scaling_factor};
  uint64_t kv_per_token = 0, kv_per_seq = 0;
  for (int64_t l = 0; l < L; l++) {
    const df_layer *w = &m->layers[l];
    df_tm_layer *t = &tl[l];
    *t = (df_tm_layer){.in_norm = w->norm[0], .post_norm = w->norm[1]};
    w->attn->ops->describe(w->attn, &d, t);
    w->ffn->ops->describe(w->ffn, &d, t);
    kv_per_token += w->attn->ops->state_bytes_per_token(w->attn);
    kv_per_seq += w->attn->ops->state_bytes_per_seq(w->attn);
    if (!w->ffn->ops->expert_weights) continue;
    for (int64_t e = 0; e < E && !opts->device_host_experts; e++) {
      const df_t_tensor *g, *u, *dn;
      if (w->ffn->ops->expert_weights(w->ffn, e, &g, &u, &dn) == 0)
        eb[l * E + e] = tensor_bytes(g) + tensor_bytes(u) + tensor_bytes(dn);
    }
  }
  /* work: planned activations, the fp32 copy of the largest weight (twice: the widened
   * weight and the product's workspace), the logits of a chunk */
  uint64_t kv = (kv_per_token * (uint64_t)m->max_ctx + kv_per_seq) * (uint64_t)seqs;
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
  d.expert_on_device = on;
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
  if (!(m->family = df_family_of(c, err, errlen))) goto fail;
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
  m->bind = (df_binder){.dir = m->dir, .st = m->st, .cfg = &m->cfg};
  if (!(m->ws = df_ws_new())) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* rope tables, attention scratch and the routing counts are set below, once every tensor
   * matched the config (so a config naming absurd sizes fails on a tensor, not on memory),
   * before any forward reads them */
  m->env = (df_layer_env){.cfg = &m->cfg, .max_rows = m->max_rows, .max_ctx = m->max_ctx,
                          .backend = &m->backend, .profiling = &m->profiling, .prof = &m->prof};
  int64_t H = c->hidden_size;
  int64_t s_emb[2] = {c->vocab_size, H}, s_norm[1] = {H};
  char n_emb[96], n_norm[96], n_head[96]; /* under the config's tensor prefix */
  snprintf(n_emb, sizeof n_emb, "%smodel.embed_tokens.weight", c->tensor_prefix);
  snprintf(n_norm, sizeof n_norm, "%smodel.norm.weight", c->tensor_prefix);
  snprintf(n_head, sizeof n_head, "%slm_head.weight", c->tensor_prefix);
  if (!(m->embed = df_bind(&m->bind, n_emb, 2, s_emb, false, false, err, errlen)) ||
      !(m->final_norm = df_bind(&m->bind, n_norm, 1, s_norm, false, false, err, errlen)))
    goto fail;
  if (c->tie_word_embeddings) {
    m->lm_head = m->embed;
  } else if (!(m->lm_head = df_bind(&m->bind, n_head, 2, s_emb, false, false, err, errlen))) {
    goto fail;
  }
  if (opts && opts->share_from) {
    if (share_tensor(m, opts->share_from, n_emb, &m->embed, err, errlen) != 0) goto fail;
    if (c->tie_word_embeddings)
      m->lm_head = m->embed;
    else if (share_tensor(m, opts->share_from, n_head, &m->lm_head, err, errlen) != 0)
      goto fail;
  }
  m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
  if (!m->layers) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  df_family_ctx fc = {.bind = &m->bind, .cfg = &m->cfg, .env = &m->env, .ws = m->ws};
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    if (m->family->build_layer(&fc, l, &m->layers[l], err, errlen) != 0) goto fail;
    if (opts && opts->progress) opts->progress(opts->progress_ctx, l + 1, c->num_hidden_layers);
  }
  if (!(m->residual = m->family->residual_new(&fc, m->layers, err, errlen))) goto fail;
  if (df_rope_tables_new(c, m->max_ctx, &m->rope_cos, &m->rope_sin, err, errlen) != 0 ||
      !(m->scratch = df_ws_f32(m->ws, "model.att_scratch", df_k_max_threads(), m->max_ctx, err,
                               errlen)) ||
      plan_buffers(m, err, errlen) != 0)
    goto fail;
  if (c->num_experts > 0) {
    m->route_counts = calloc((size_t)(c->num_hidden_layers * c->num_experts),
                             sizeof *m->route_counts);
    if (!m->route_counts) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
  }
  m->env.route_counts = m->route_counts;
  m->env.rope_cos = m->rope_cos;
  m->env.rope_sin = m->rope_sin;
  m->env.att_scratch = m->scratch;
  m->bytes.total = m->bind.total;
  m->bytes.resident = m->bind.resident;
  m->bytes.experts = m->bind.experts;
  m->bytes.buffers = df_ws_bytes(m->ws);
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    const df_channel_mixer *f = m->layers[l].ffn;
    df_tm_desc d = {0};
    df_tm_layer t = {0};
    if (!f || !f->ops->expert_weights || !f->ops->describe) continue;
    f->ops->describe(f, &d, &t);
    const df_t_tensor *sh[3] = {t.sh_gate, t.sh_up, t.sh_down};
    for (int i = 0; i < 3; i++)
      if (sh[i]) m->bytes.shared_experts += df_t_stored_bytes(sh[i]);
  }
  /* Weight bytes one decode token reads: the resident part (minus the embedding table when
   * untied: only one row of it is gathered) plus top-k of E experts on every MoE layer. */
  m->bytes.active_per_token = m->bytes.resident;
  if (!c->tie_word_embeddings)
    m->bytes.active_per_token -= (uint64_t)c->vocab_size * (uint64_t)H *
                                 df_dtype_size(df_t_dtype(m->embed));
  if (c->num_experts > 0)
    m->bytes.active_per_token +=
        m->bytes.experts / (uint64_t)c->num_experts * (uint64_t)c->num_experts_per_tok;
  m->backend = df_model_local_experts(m, err, errlen);
  if (!m->backend) goto fail;
  if (opts && opts->device.kind != DF_T_DEV_CPU) {
    /* a block without a torch view (describe NULL: KDA, NoPE MLA) keeps the model on the
     * CPU kernels: refused when the device was asked for by name, a note under auto */
    const char *kind = NULL;
    for (int64_t l = 0; l < c->num_hidden_layers && !kind; l++)
      if (!m->layers[l].attn->ops->describe) kind = m->layers[l].attn->ops->state_kind;
    if (kind && opts->device.kind != DF_T_DEV_AUTO) {
      char nm[32];
      df_t_device_name(&opts->device, nm, sizeof nm);
      snprintf(err, errlen, "--device %s: the torch compute path does not run model type %s "
               "yet (its layers hold %s); use --device cpu", nm, c->model_type, kind);
      goto fail;
    }
    if (kind)
      snprintf(m->device_note, sizeof m->device_note, "--device auto: the torch compute path "
               "does not run model type %s yet; running on the CPU", c->model_type);
    else if (device_attach(m, opts, err, errlen) != 0)
      goto fail;
  }
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
  if (m->layers) {
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) df_layer_clear(&m->layers[l]);
    free(m->layers);
  }
  if (m->residual) m->residual->ops->destroy(m->residual);
  df_binder_free(&m->bind);
  df_t_destroy(&m->rope_cos);
  df_t_destroy(&m->rope_sin);
  df_ws_destroy(&m->ws);
  df_st_close(&m->st);
  free(m);
  *mp = NULL;
}

int df_model_set_capture(df_model *m, const int64_t *layers, int n, char *err, size_t errlen) {
  if (n < 0 || n > DF_MODEL_MAX_CAPTURE) {
    snprintf(err, errlen, "capture: %d layers (expected 0..%d)", n, DF_MODEL_MAX_CAPTURE);
    return -1;
  }
  if (n > 0 && m->tm) {
    char dev[64];
    snprintf(err, errlen, "capture: the model computes on %s, whose path does not capture "
             "hidden states", df_t_device_name(&m->device, dev, sizeof dev));
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (layers[i] < 0 || layers[i] >= m->cfg.num_hidden_layers) {
      snprintf(err, errlen, "capture: layer %lld outside 0..%lld", (long long)layers[i],
               (long long)m->cfg.num_hidden_layers - 1);
      return -1;
    }
  for (int i = 0; i < n; i++) m->capture[i] = layers[i];
  m->n_capture = n;
  return 0;
}

void df_model_set_capture_point(df_model *m, df_capture_point p) { m->capture_point = p; }

void df_model_set_progress(df_model *m, df_model_progress_fn fn, void *ctx) {
  m->progress = fn;
  m->progress_ctx = ctx;
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

void df_model_print_summary(const df_model *m, FILE *f) { m->family->summary(&m->cfg, f); }

void df_model_state_kind(const df_model *m, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (int64_t l = 0; l < m->cfg.num_hidden_layers && o < cap; l++) {
    const char *k = m->layers[l].attn->ops->state_kind;
    bool seen = false;
    for (int64_t j = 0; j < l && !seen; j++) seen = m->layers[j].attn->ops->state_kind == k;
    if (!seen) o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? " + " : "", k);
  }
}

uint64_t df_model_kv_bytes_per_token(const df_model *m) {
  uint64_t b = 0;
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    b += m->layers[l].attn->ops->state_bytes_per_token(m->layers[l].attn);
  return b;
}

uint64_t df_model_kv_bytes_per_seq(const df_model *m) {
  uint64_t b = 0;
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
    b += m->layers[l].attn->ops->state_bytes_per_seq(m->layers[l].attn);
  return b;
}

df_kv_cache *df_model_kv_new(const df_model *m, int64_t ctx, char *err, size_t errlen) {
  if (ctx <= 0) ctx = m->max_ctx;
  if (ctx > m->max_ctx) {
    snprintf(err, errlen, "context %lld tokens exceeds the model's planned max_ctx %lld",
             (long long)ctx, (long long)m->max_ctx);
    return NULL;
  }
  uint64_t per_token = df_model_kv_bytes_per_token(m), per_seq = df_model_kv_bytes_per_seq(m);
  df_kv_cache *kv = df_kv_new_layers(m->cfg.num_hidden_layers, ctx, per_token, per_seq, err,
                                     errlen);
  if (!kv) return NULL;
  const df_t_device *dev = m->tm ? &m->device : NULL;
  for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
    const df_token_mixer *tm = m->layers[l].attn;
    char inner[256];
    if (tm->ops->state_new(tm, kv, dev, inner, sizeof inner) != 0) {
      snprintf(err, errlen, "KV cache of %llu bytes (ctx %lld tokens): %s",
               (unsigned long long)df_kv_bytes(kv), (long long)ctx, inner);
      df_kv_destroy(&kv);
      return NULL;
    }
  }
  return kv;
}

void df_model_expert_tensor_name(const df_model *m, int layer, int expert, int part, char *buf,
                                 size_t cap) {
  static const char *const parts[3] = {"gate_proj", "up_proj", "down_proj"};
  if (m->family->expert_tensor_name) {
    m->family->expert_tensor_name(&m->cfg, layer, expert, part, buf, cap);
    return;
  }
  snprintf(buf, cap, "%smodel.layers.%d.mlp.experts.%d.%s.weight", m->cfg.tensor_prefix, layer,
           expert, parts[part]);
}

int df_model_expert_weights(const df_model *m, int layer, int expert, const df_t_tensor **gate,
                            const df_t_tensor **up, const df_t_tensor **down) {
  if (layer < 0 || layer >= m->cfg.num_hidden_layers) return -1;
  const df_channel_mixer *cm = m->layers[layer].ffn;
  if (!cm->ops->expert_weights) return -1;
  return cm->ops->expert_weights(cm, expert, gate, up, down);
}

void df_model_set_expert_backend(df_model *m, df_expert_backend *be) {
  df_expert_backend_destroy(&m->backend);
  if (!be) {
    char err[256];
    be = df_model_local_experts(m, err, sizeof err);
    assert(be);
  }
  m->backend = be;
}

/* A "/proc/meminfo" field in bytes ("MemAvailable:"), or -1 when unreadable. */
static int64_t meminfo_bytes(const char *field) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && sscanf(line + n, " %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int64_t df_host_mem_available(void) { return meminfo_bytes("MemAvailable:"); }

int64_t df_host_mem_total(void) { return meminfo_bytes("MemTotal:"); }

int df_model_admit_host(const df_model *m, char *err, size_t errlen) {
  int64_t total = df_host_mem_total();
  uint64_t res = m->bytes.resident;
  if (total < 0 || res <= (uint64_t)total) return 0;
  double gib = 1024.0 * 1024.0 * 1024.0;
  snprintf(err, errlen, "admission: the resident part of %s (embeddings, attention, routers, "
           "shared experts, head: read on every token) is %.1f GiB, but this machine has %.1f "
           "GiB of memory (%.1f GiB short); the routed experts (%.1f GiB) could be mapped from "
           "disk or served by df-nodes, the resident part cannot", m->dir, res / gib,
           total / gib, (res - (uint64_t)total) / gib, m->bytes.experts / gib);
  return -1;
}

uint64_t df_model_seq_state_bytes(const df_model *m, int64_t ctx) {
  return df_model_kv_bytes_per_token(m) * (uint64_t)ctx + df_model_kv_bytes_per_seq(m);
}
