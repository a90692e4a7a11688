/* engine/forward.c — the one layer loop: runs a model's plan of composed layers over a
 * batch of sequences, in chunks of max_rows rows; see model.h (df_model_forward_batch).
 *
 * Owns: the chunking of a batch's rows, the embedding lookup, the loop over the plan
 * (residual scheme around each layer's token and channel mixer, engine/layers/layer.h), the
 * final norm and lm_head over the rows that want logits, the sequences' lengths, and the
 * hand-off of a chunk to the torch compute path when the model runs on a device. It never
 * asks which family a layer came from. Does not own: the blocks (engine/layers/), loading
 * (engine/model.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model_internal.h"

/* A sublayer's output [R, H] must be finite: an honest computation from finite weights and
 * inputs never gives NaN or Inf, so one that does means corrupt weights (or a numeric bug),
 * and sampling from it would silently emit garbage. -1 + a message naming the layer, the
 * sublayer and the row's position. One pass over R x H floats per sublayer (in cache). */
static int check_finite(const df_model *m, df_t_tensor *out, int64_t R, int64_t l,
                        const char *what, char *err, size_t errlen) {
  const float *y = df_t_f32(out);
  int64_t H = m->cfg.hidden_size;
  for (int64_t k = 0; k < R * H; k++) {
    if (isfinite(y[k])) continue;
    snprintf(err, errlen, "layer %lld (%s) produced a non-finite value (%g) for the token at "
             "position %lld: the checkpoint's weights of that layer are probably corrupt "
             "(deltafin verify --deep DIR checks every tensor)", (long long)l, what,
             (double)y[k], (long long)m->pos[k / H]);
    return -1;
  }
  return 0;
}

/* The hidden-state capture (df_model_set_capture): rows whose sequence asked for it get the
 * stream x after layer l at each slot that names l. */
static void capture_rows(df_model *m, int64_t l, int64_t R) {
  int64_t H = m->cfg.hidden_size, n = m->n_capture;
  bool mixed = false;
  for (int i = 0; i < n; i++) {
    if (m->capture[i] != l) continue;
    const float *x = df_t_f32(m->x);
    if (m->capture_point == DF_CAPTURE_MIX && m->residual->ops->next_in) {
      /* xn is free until the next layer's sublayer_in overwrites it */
      if (!mixed) m->residual->ops->next_in(m->residual, l, R, m->x, df_t_f32(m->xn));
      mixed = true;
      x = df_t_f32(m->xn);
    }
    for (int64_t r = 0; r < R; r++)
      if (m->row_cap[r]) memcpy(m->row_cap[r] + i * H, x + r * H, (size_t)H * sizeof(float));
  }
}

/* One chunk of R <= max_rows rows. Row r belongs to sequence row_seq[r] and sits at
 * position m->pos[r] of that sequence's cache; rows of one sequence are consecutive and in
 * position order. -1 + message: a block's error (the expert backend's). */
static int forward_chunk(df_model *m, df_kv_cache **kvs, const int32_t *row_seq,
                         const int32_t *ids, int64_t R, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  df_residual *rs = m->residual;
  df_rows rows = {.R = R, .pos = m->pos, .seq = row_seq, .kvs = kvs};
  double t0 = m->profiling ? df_prof_now() : 0;
  df_t_embed(ids, R, m->embed, m->x);
  df_prof_lap(m->profiling, &m->prof.embed, &t0);
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    const df_layer *L = &m->layers[l];
    rs->ops->sublayer_in(rs, l, L, 0, R, m->x, m->xn);
    df_prof_lap(m->profiling, &m->prof.residual, &t0);
    L->attn->ops->forward(L->attn, &rows, m->xn, m->tmp);
    if (check_finite(m, m->tmp, R, l, L->attn->ops->name, err, errlen) != 0) return -1;
    df_prof_lap(m->profiling, &m->prof.attention, &t0);
    rs->ops->sublayer_out(rs, l, L, 0, R, m->x, m->tmp);
    rs->ops->sublayer_in(rs, l, L, 1, R, m->x, m->xn);
    df_prof_lap(m->profiling, &m->prof.residual, &t0);
    if (L->ffn->ops->forward(L->ffn, &rows, m->xn, m->tmp, err, errlen) != 0 ||
        check_finite(m, m->tmp, R, l, L->ffn->ops->name, err, errlen) != 0)
      return -1;
    if (m->profiling) t0 = df_prof_now();
    rs->ops->sublayer_out(rs, l, L, 1, R, m->x, m->tmp);
    capture_rows(m, l, R);
  }
  if (rs->ops->final) {
    rs->ops->final(rs, R, m->x);
    if (check_finite(m, m->x, R, c->num_hidden_layers - 1, "the output mix", err, errlen) != 0)
      return -1;
  }
  df_prof_lap(m->profiling, &m->prof.residual, &t0);
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
    for (int64_t r = 0, ss = cs, ii = ci; r < R; r++) { /* capture destinations */
      const df_batch_seq *q = &seqs[ss];
      m->row_cap[r] = m->n_capture && q->capture ? q->capture + ii * m->n_capture * H : NULL;
      if (++ii == q->n) {
        ss++;
        ii = 0;
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
        for (int t = 0; t < n_seqs; t++) df_kv_rewind(kvs[t], start[t]);
        return -1;
      }
      for (int64_t r = 0; r < R; r++)
        if (m->pos[r] + 1 > kvs[m->row_seq[r]]->len) kvs[m->row_seq[r]]->len = m->pos[r] + 1;
      done += R;
      if (m->progress) m->progress(m->progress_ctx, done, total);
      continue;
    }
    if (forward_chunk(m, kvs, m->row_seq, m->row_ids, R, err, errlen) != 0) {
      for (int t = 0; t < n_seqs; t++) df_kv_rewind(kvs[t], start[t]);
      return -1;
    }
    /* rows that need logits, gathered so lm_head streams its weights once per chunk */
    double t0 = m->profiling ? df_prof_now() : 0;
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
      const float *lg = df_t_f32(m->logits);
      for (int64_t k = 0; k < nl * V; k++) {
        if (isfinite(lg[k])) continue;
        snprintf(err, errlen, "the final norm and lm_head produced a non-finite logit (%g, token "
                 "id %lld): the checkpoint's model.norm or lm_head weights are probably corrupt "
                 "(deltafin verify --deep DIR checks every tensor)", (double)lg[k],
                 (long long)(k % V));
        for (int t = 0; t < n_seqs; t++) df_kv_rewind(kvs[t], start[t]);
        return -1;
      }
      for (int64_t j = 0; j < nl; j++)
        memcpy(m->row_out[j], df_t_f32(m->logits) + j * V, (size_t)V * sizeof(float));
    }
    df_prof_lap(m->profiling, &m->prof.lm_head, &t0);
    /* the chunk's rows are in the caches now */
    for (int64_t r = 0; r < R; r++)
      if (m->pos[r] + 1 > kvs[m->row_seq[r]]->len) kvs[m->row_seq[r]]->len = m->pos[r] + 1;
    if (m->profiling) {
      m->prof.forwards++;
      m->prof.tokens += R;
    }
    done += R;
    if (m->progress) m->progress(m->progress_ctx, done, total);
  }
  return 0;
}

int df_model_forward(df_model *m, df_kv_cache *kv, const int32_t *ids, int64_t n,
                     df_logits_mode mode, float *logits, char *err, size_t errlen) {
  df_batch_seq q = {.kv = kv, .ids = ids, .n = n, .mode = mode, .logits = logits};
  return df_model_forward_batch(m, &q, 1, err, errlen);
}
