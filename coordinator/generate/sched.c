/* coordinator/generate/sched.c — the serving scheduler thread and continuous batching; see
 * sched.h.
 *
 * Locking: s->mu guards the queue, the admission counts and the statistics; each job's j->mu
 * guards what the job shares with its caller (released text, finish, counts). The scheduler
 * thread alone touches slots, KV caches, samplers, decoders and the running list.
 */
#define _GNU_SOURCE
#include "coordinator/generate/sched.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/generate/sched_slots.h"
#include "coordinator/generate/sched_stop.h"
#include "engine/draft/dspark.h"
#include "engine/text/chat_template.h"

#include "coordinator/generate/sched_draft.h"
#include "coordinator/generate/sched_internal.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- jobs ---------------------------------------------------------------------------- */

static void job_free(df_sched_job *j) {
  free(j->prompt);
  free(j->seq);
  for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
  free(j->out);
  free(j->lp);
  for (int i = 0; i < j->n_runs; i++) df_jsg_run_destroy(&j->runs[i]);
  free(j->runs);
  for (int i = 0; i < j->n_grammars; i++) df_jsg_destroy(&j->grammars[i]);
  free(j->grammars);
  free(j->gscratch);
  free(j->gok);
  if (j->pipe[0] >= 0) close(j->pipe[0]);
  if (j->pipe[1] >= 0) close(j->pipe[1]);
  df_sampler_destroy(&j->smp);
  df_text_draft_destroy(&j->xd);
  df_tok_stream_destroy(&j->dec);
  df_sched_stop_free(&j->stopper);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

static void job_unref(df_sched_job *j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) job_free(j);
}

/* Under j->mu: wake the caller once per batch of news. */
static void job_signal_locked(df_sched_job *j) {
  if (j->signalled) return;
  char b = 1;
  if (write(j->pipe[1], &b, 1) == 1) j->signalled = true;
}

static int job_emit(df_sched_job *j, const char *text, size_t len) {
  if (!len) return 0;
  int rc = 0;
  pthread_mutex_lock(&j->mu);
  if (j->out_len + len > j->out_cap) {
    size_t c = j->out_cap ? j->out_cap : 256;
    while (c < j->out_len + len) c *= 2;
    char *b = realloc(j->out, c);
    if (!b) {
      rc = -1;
      goto done;
    }
    j->out = b;
    j->out_cap = c;
  }
  memcpy(j->out + j->out_len, text, len);
  j->out_len += len;
  j->news.completion_tokens = j->generated;
  j->news.draft_tokens = j->ddrafted;
  j->news.draft_accepted = j->daccepted;
  job_signal_locked(j);
done:
  pthread_mutex_unlock(&j->mu);
  return rc;
}

static void job_finish(df_sched *s, df_sched_job *j, df_sched_finish f, const char *why) {
  pthread_mutex_lock(&j->mu);
  if (j->news.finish == DF_SCHED_RUNNING) {
    j->news.finish = f;
    j->news.completion_tokens = j->generated;
    j->news.draft_tokens = j->ddrafted;
    j->news.draft_accepted = j->daccepted;
    if (why) {
      size_t n = strlen(why);
      if (n >= sizeof j->news.error) n = sizeof j->news.error - 1;
      memcpy(j->news.error, why, n);
      j->news.error[n] = 0;
    }
  }
  job_signal_locked(j);
  pthread_mutex_unlock(&j->mu);
  pthread_mutex_lock(&s->mu);
  s->st.finished[f]++;
  pthread_mutex_unlock(&s->mu);
}

int df_sched_job_fd(const df_sched_job *j) { return j->pipe[0]; }

int df_sched_job_take(df_sched_job *j, char **text, size_t *len, df_sched_news *news) {
  pthread_mutex_lock(&j->mu);
  char b[16];
  while (read(j->pipe[0], b, sizeof b) > 0) {
  }
  j->signalled = false;
  *text = j->out_len ? j->out : NULL;
  *len = j->out_len;
  if (j->out_len) {
    j->out = NULL;
    j->out_len = j->out_cap = 0;
  }
  *news = j->news;
  pthread_mutex_unlock(&j->mu);
  return 0;
}

int df_sched_job_take_logprobs(df_sched_job *j, df_sched_logprob **lp, size_t *n) {
  pthread_mutex_lock(&j->mu);
  *lp = j->lp;
  *n = j->lp_len;
  j->lp = NULL;
  j->lp_len = j->lp_cap = 0;
  pthread_mutex_unlock(&j->mu);
  return 0;
}

/* Record the logprob entry of id, sampled from logits row [V] (scheduler thread). */
static int record_logprob(df_sched *s, df_sched_job *j, int32_t id, const float *row) {
  df_sched_logprob e = {.id = id, .n_top = j->top_logprobs};
  df_logprobs(row, s->V, j->sp.temperature, id, &e.logprob, e.n_top, e.top_id, e.top_logprob);
  int rc = 0;
  pthread_mutex_lock(&j->mu);
  if (j->lp_len == j->lp_cap) {
    size_t c = j->lp_cap ? 2 * j->lp_cap : 16;
    df_sched_logprob *b = realloc(j->lp, c * sizeof *b);
    if (!b) rc = -1;
    else {
      j->lp = b;
      j->lp_cap = c;
    }
  }
  if (rc == 0) j->lp[j->lp_len++] = e;
  pthread_mutex_unlock(&j->mu);
  return rc;
}

void df_sched_job_cancel(df_sched_job *j) { atomic_store(&j->cancel, true); }

void df_sched_job_release(df_sched_job **jp) {
  if (!jp || !*jp) return;
  df_sched_job_cancel(*jp);
  job_unref(*jp);
  *jp = NULL;
}

/* ---- the scheduler thread ------------------------------------------------------------ */

/* Move j out of the running list and free its slot (under nothing; updates counts). */
static void retire(df_sched *s, int idx) {
  df_sched_job *j = s->running[idx];
  if (j->slot >= 0) df_slot_release(&s->pool, j->slot, j->seq, j->failed ? 0 : j->len);
  memmove(&s->running[idx], &s->running[idx + 1], (size_t)(s->n_run - idx - 1) * sizeof *s->running);
  s->n_run--;
  pthread_mutex_lock(&s->mu);
  s->n_running--;
  pthread_mutex_unlock(&s->mu);
  df_tok_stream_destroy(&j->dec);
  df_sampler_destroy(&j->smp);
  job_unref(j);
}

/* Constrained decoding: logits [V] keep only the ids some live grammar run allows. */
static void grammar_mask(df_sched *s, df_sched_job *j, float *logits) {
  if (j->n_runs == 1) {
    df_jsg_mask(j->runs[0], logits, s->V);
    return;
  }
  /* several alternatives: an id stays when any of them allows it */
  memset(j->gok, 0, (size_t)s->V);
  for (int r = 0; r < j->n_runs; r++) {
    for (int64_t i = 0; i < s->V; i++) j->gscratch[i] = 0.0f;
    df_jsg_mask(j->runs[r], j->gscratch, s->V);
    for (int64_t i = 0; i < s->V; i++) j->gok[i] |= j->gscratch[i] == 0.0f;
  }
  for (int64_t i = 0; i < s->V; i++)
    if (!j->gok[i]) logits[i] = -INFINITY;
}

/* The sampled id advances every live run; runs that cannot take it are dropped (one always
 * can: the id came from the union of their masks). */
static void grammar_accept(df_sched_job *j, int32_t id) {
  int w = 0;
  for (int r = 0; r < j->n_runs; r++) {
    if (df_jsg_accept(j->runs[r], id) == 0) j->runs[w++] = j->runs[r];
    else df_jsg_run_destroy(&j->runs[r]);
  }
  j->n_runs = w;
}

/* Set up a job's per-sequence state when it gets a slot. */
static int activate(df_sched *s, df_sched_job *j, char *err, size_t errlen) {
  if (!(j->smp = df_sampler_new(&j->sp, s->V, err, errlen))) return -1;
  if (df_tok_stream_new(s->tok, DF_TOK_SKIP_SPECIAL, &j->dec, err, errlen) != 0 ||
      df_tok_stream_keep(j->dec, j->keep_special, (size_t)j->n_keep_special) != 0)
    return -1;
  df_sched_stop_init(&j->stopper, (const char *const *)j->stop, j->n_stop);
  if (j->n_grammars) {
    int n = j->n_grammars;
    int32_t ends[16];
    int ne = 0;
    for (int e = 0; e < s->gcfg->n_eos && ne < 12; e++) ends[ne++] = s->gcfg->eos_token_ids[e];
    for (int e = 0; e < s->n_chat_stop && ne < 16; e++) ends[ne++] = s->chat_stop[e];
    if (!(j->runs = calloc((size_t)n, sizeof *j->runs))) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    for (int g = 0; g < n; g++) {
      if (!(j->runs[g] = df_jsg_run_new(j->grammars[g], j->gvocab, ends, ne, err, errlen)))
        return -1;
      j->n_runs = g + 1;
    }
    if (n > 1 && (!(j->gscratch = malloc((size_t)s->V * sizeof(float))) ||
                  !(j->gok = malloc((size_t)s->V)))) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    j->no_draft = true; /* each drafted position would need its own mask */
  }
  if (!(j->seq = malloc((size_t)(j->n_prompt + j->max_tokens) * sizeof *j->seq))) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(j->seq, j->prompt, (size_t)j->n_prompt * sizeof *j->seq);
  j->len = j->n_prompt;
  int64_t reused = 0;
  if ((j->slot = df_slot_take(&s->pool, j->prompt, j->n_prompt, &reused, err, errlen)) < 0)
    return -1;
  j->fed = reused;
  pthread_mutex_lock(&j->mu);
  j->news.cached_tokens = reused;
  pthread_mutex_unlock(&j->mu);
  pthread_mutex_lock(&s->mu);
  s->st.cached_tokens += reused;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static bool is_eos(const df_sched *s, int32_t id) {
  for (int e = 0; e < s->gcfg->n_eos; e++)
    if (s->gcfg->eos_token_ids[e] == id) return true;
  for (int e = 0; e < s->n_chat_stop; e++)
    if (s->chat_stop[e] == id) return true;
  return false;
}

/* One sampled id (from logits row [V]): decode, match stop strings, release text, decide the
 * finish. Returns true when the job is over. */
static bool on_token(df_sched *s, df_sched_job *j, int32_t id, const float *row) {
  char err[256];
  const char *piece, *out;
  size_t plen, olen;
  j->generated++;
  j->last = id;
  j->seq[j->len++] = id;
  bool eos = is_eos(s, id) && !j->ignore_eos;
  if (j->logprobs && !eos && record_logprob(s, j, id, row) != 0) {
    job_finish(s, j, DF_SCHED_ERROR, "out of memory");
    return true;
  }
  /* an end-of-sequence id is a special token: it decodes to nothing */
  if (eos) {
    piece = "";
    plen = 0;
  } else if (df_tok_stream_feed(j->dec, id, &piece, &plen, err, sizeof err) != 0) {
    job_finish(s, j, DF_SCHED_ERROR, err);
    return true;
  }
  int r = df_sched_stop_feed(&j->stopper, piece, plen, &out, &olen);
  if (r < 0 || job_emit(j, out, olen) != 0) {
    job_finish(s, j, DF_SCHED_ERROR, "out of memory");
    return true;
  }
  if (r == 1) {
    job_finish(s, j, DF_SCHED_STOP, NULL);
    return true;
  }
  if (!eos && j->generated < j->max_tokens) {
    pthread_mutex_lock(&j->mu);
    j->news.completion_tokens = j->generated;
    pthread_mutex_unlock(&j->mu);
    return false;
  }
  /* the end: what the decoder holds, then what the stop matcher holds */
  if (df_tok_stream_flush(j->dec, &piece, &plen, err, sizeof err) == 0) {
    r = df_sched_stop_feed(&j->stopper, piece, plen, &out, &olen);
    if (r >= 0) job_emit(j, out, olen);
    if (r == 1) {
      job_finish(s, j, DF_SCHED_STOP, NULL);
      return true;
    }
  }
  df_sched_stop_flush(&j->stopper, &out, &olen);
  job_emit(j, out, olen);
  job_finish(s, j, eos ? DF_SCHED_STOP : DF_SCHED_LENGTH, NULL);
  return true;
}

/* Unlink the queued jobs whose callers cancelled them (s->mu held); returns them as a list
 * (through ->next) for finish_cancelled. */
static df_sched_job *unlink_cancelled_locked(df_sched *s) {
  df_sched_job *gone = NULL, *prev = NULL;
  for (df_sched_job **pp = &s->qhead; *pp;) {
    df_sched_job *q = *pp;
    if (!atomic_load(&q->cancel)) {
      prev = q;
      pp = &q->next;
      continue;
    }
    *pp = q->next;
    if (s->qtail == q) s->qtail = prev;
    s->n_queued--;
    q->next = gone;
    gone = q;
  }
  return gone;
}

/* Finish and release cancelled jobs that never ran (no slot, sampler or stream to free);
 * s->mu not held. */
static void finish_cancelled(df_sched *s, df_sched_job *gone) {
  while (gone) {
    df_sched_job *q = gone;
    gone = q->next;
    q->next = NULL;
    job_finish(s, q, DF_SCHED_CANCELLED, NULL);
    job_unref(q);
  }
}

/* Admit queued jobs into free slots; drop cancelled ones, wherever they wait in the queue (a
 * client gone while queued gives its place back at the next step, not when it reaches the
 * front). */
static void admit(df_sched *s) {
  pthread_mutex_lock(&s->mu);
  df_sched_job *gone = unlink_cancelled_locked(s);
  pthread_mutex_unlock(&s->mu);
  finish_cancelled(s, gone);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    df_sched_job *j = NULL;
    if (s->n_run < s->o.max_seqs && s->qhead) {
      j = s->qhead;
      s->qhead = j->next;
      if (!s->qhead) s->qtail = NULL;
      s->n_queued--;
      s->n_running++;
    }
    pthread_mutex_unlock(&s->mu);
    if (!j) return;
    j->next = NULL;
    j->slot = -1;
    s->running[s->n_run++] = j;
    char err[256];
    if (atomic_load(&j->cancel)) {
      job_finish(s, j, DF_SCHED_CANCELLED, NULL);
      retire(s, s->n_run - 1);
    } else if (activate(s, j, err, sizeof err) != 0) {
      job_finish(s, j, DF_SCHED_ERROR, err);
      retire(s, s->n_run - 1);
    }
  }
}

/* Greedy verification of a drafted sequence: accept d_i while it is the target's argmax,
 * then the target's own token; roll both caches back; emit. L is the committed length before
 * the step (the target cache held L - 1 ids, the draft's L + k - 1). */
static void accept(df_sched *s, df_sched_job *j, int k, const int32_t *d, int64_t L,
                   const float *cap) {
  df_slot *sl = &s->pool.slots[j->slot];
  int a = 0;
  int32_t x = -1;
  /* the target's own choice at each position L + a (coordinator/generate/spec.h) */
  for (; a < k; a++) {
    x = df_sampler_sample_at(j->smp, sl->vlogits + (int64_t)a * s->V, L + a);
    if (x != d[a]) break;
  }
  if (a == k) x = df_sampler_sample_at(j->smp, sl->vlogits + (int64_t)k * s->V, L + k);
  df_kv_truncate(sl->kv, L + a);
  if (cap) df_sched__block_append(s, j, cap, a + 1); /* the rows of the pending id and d_1..d_a */
  else if (sl->dkv && sl->dkv->len > L + a) df_kv_truncate_or_reset(sl->dkv, L + a);
  j->ddrafted += k;
  j->daccepted += a;
  j->wrounds++;
  j->wdrafted += k;
  j->waccepted += a;
  if (j->wrounds >= 8 && j->waccepted < j->wdrafted / 4) { /* it does not pay: a rest */
    j->rest_len = j->rest_len ? 2 * j->rest_len : DF_SCHED_REST_FIRST;
    if (j->rest_len > DF_SCHED_REST_MAX) j->rest_len = DF_SCHED_REST_MAX;
    j->rest_until = j->generated + a + 1 + j->rest_len;
    j->wrounds = j->wdrafted = j->waccepted = 0;
  }
  pthread_mutex_lock(&s->mu);
  s->st.draft_rounds++;
  s->st.drafted += k;
  s->st.accepted += a;
  if (cap) {
    s->st.block_drafted += k;
    s->st.block_accepted += a;
  }
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < a; i++)
    if (on_token(s, j, d[i], sl->vlogits + (int64_t)i * s->V)) return;
  on_token(s, j, x, sl->vlogits + (int64_t)a * s->V);
}

static void step(df_sched *s) {
  for (int i = s->n_run - 1; i >= 0; i--) {
    if (atomic_load(&s->running[i]->cancel)) {
      job_finish(s, s->running[i], DF_SCHED_CANCELLED, NULL);
      retire(s, i);
    }
  }
  if (!s->n_run) return;
  df_batch_seq seqs[DF_MODEL_MAX_BATCH];
  df_sched_job *who[DF_MODEL_MAX_BATCH];
  int k[DF_MODEL_MAX_BATCH] = {0};
  int32_t dtok[DF_MODEL_MAX_BATCH][DF_SCHED_K_MAX];
  int32_t vids[DF_MODEL_MAX_BATCH][DF_SCHED_K_MAX + 1];
  int64_t L[DF_MODEL_MAX_BATCH];
  bool track[DF_MODEL_MAX_BATCH] = {false}; /* block drafter: rows captured for it */
  int nb = 0;
  int64_t budget = s->o.prefill_budget, rows = 0, prompt_rows = 0;
  /* prompt rows share the step's budget in running order (the loop below takes them in the
   * same order): a prompt that gets none waits for the next step */
  int64_t left = budget;
  for (int i = 0; i < s->n_run; i++) {
    df_sched_job *j = s->running[i];
    if (j->fed < j->n_prompt) {
      if (left <= 0) continue;
      int64_t take = j->n_prompt - j->fed;
      left -= take < left ? take : left;
    }
    who[nb++] = j;
  }
  double t0 = now_s();
  if (s->draft && s->n_run <= s->o.draft_max_seqs) df_sched__propose(s, who, nb, k, dtok);
  if (s->block) {
    for (int b = 0; b < nb; b++) track[b] = df_sched__block_tracks(s, who[b]);
    if (s->block && s->n_run <= s->o.draft_max_seqs) df_sched__propose_block(s, who, nb, track, k, dtok);
  }
  for (int b = 0; b < nb; b++) {
    df_sched_job *j = who[b];
    df_slot *sl = &s->pool.slots[j->slot];
    df_batch_seq *q = &seqs[b];
    L[b] = j->len;
    if (j->fed < j->n_prompt) {
      int64_t take = j->n_prompt - j->fed;
      if (take > budget) take = budget;
      budget -= take;
      q->ids = j->prompt + j->fed;
      q->n = take;
      q->mode = j->fed + take == j->n_prompt ? DF_LOGITS_LAST : DF_LOGITS_NONE;
      q->logits = q->mode == DF_LOGITS_LAST ? sl->logits : NULL;
      prompt_rows += take;
    } else if (k[b] > 0) { /* verify: the pending id and d1..dk */
      vids[b][0] = j->last;
      memcpy(&vids[b][1], dtok[b], (size_t)k[b] * sizeof(int32_t));
      q->ids = vids[b];
      q->n = k[b] + 1;
      q->mode = DF_LOGITS_ALL;
      q->logits = sl->vlogits;
    } else {
      q->ids = &j->last;
      q->n = 1;
      q->mode = DF_LOGITS_LAST;
      q->logits = sl->logits;
    }
    q->kv = sl->kv;
    q->capture = NULL;
    rows += q->n;
  }
  if (s->block) { /* the captured rows of the tracked sequences, one buffer for the step */
    int64_t need = 0;
    for (int b = 0; b < nb; b++) need += track[b] ? seqs[b].n : 0;
    if (need > s->cap_rows) {
      float *c = realloc(s->cap, (size_t)(need * s->bwidth) * sizeof(float));
      if (c) {
        s->cap = c;
        s->cap_rows = need;
      } else {
        df_sched__draft_off(s, DF_SLOT_DRAFT_BLOCK, "out of memory for captured rows");
      }
    }
    for (int b = 0, at = 0; s->block && b < nb; b++)
      if (track[b]) {
        seqs[b].capture = s->cap + at * s->bwidth;
        at += (int)seqs[b].n;
      }
  }
  char err[512];
  int rc = df_model_forward_batch(s->m, seqs, nb, err, sizeof err);
  int64_t gen = 0;
  if (rc != 0) {
    for (int b = 0; b < nb; b++) {
      who[b]->failed = true; /* its cache may hold a half-fed chunk: not kept */
      job_finish(s, who[b], DF_SCHED_ERROR, err);
    }
  } else {
    for (int b = 0; b < nb; b++) {
      df_sched_job *j = who[b];
      int64_t g0 = j->generated;
      const float *cap = s->block ? seqs[b].capture : NULL;
      if (j->fed < j->n_prompt) {
        j->fed += seqs[b].n;
        if (j->fed == j->n_prompt) df_slot_prompt_done(&s->pool, j->slot);
      }
      if (seqs[b].mode == DF_LOGITS_ALL) accept(s, j, k[b], dtok[b], L[b], cap);
      else {
        if (cap) df_sched__block_append(s, j, cap, seqs[b].n);
      }
      if (seqs[b].mode == DF_LOGITS_LAST) {
        if (j->n_runs) grammar_mask(s, j, seqs[b].logits);
        int32_t id = df_sampler_sample_at(j->smp, seqs[b].logits, j->len);
        if (j->n_runs) grammar_accept(j, id);
        on_token(s, j, id, seqs[b].logits);
      }
      gen += j->generated - g0;
    }
  }
  double t1 = now_s();
  /* retire finished jobs (keeping the running order of the rest) */
  for (int i = s->n_run - 1; i >= 0; i--) {
    df_sched_job *j = s->running[i];
    pthread_mutex_lock(&j->mu);
    bool over = j->news.finish != DF_SCHED_RUNNING;
    pthread_mutex_unlock(&j->mu);
    if (over) retire(s, i);
  }
  pthread_mutex_lock(&s->mu);
  s->st.steps++;
  s->st.step_rows += rows;
  s->st.prompt_tokens += rc == 0 ? prompt_rows : 0;
  s->st.completion_tokens += gen;
  s->st.busy_s += t1 - t0;
  s->win_tokens += gen;
  if (t1 - s->win_t0 >= 5.0) {
    s->st.gen_tok_s = s->win_tokens / (t1 - s->win_t0);
    s->win_t0 = t1;
    s->win_tokens = 0;
  }
  pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg) {
  df_sched *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->stopping && !s->n_run && !s->qhead) {
      if (s->win_tokens || s->st.gen_tok_s > 0) { /* idle: the rate decays to 0 */
        s->st.gen_tok_s = 0;
        s->win_tokens = 0;
      }
      pthread_cond_wait(&s->cv, &s->mu);
      s->win_t0 = now_s();
    }
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stop) break;
    admit(s);
    step(s);
  }
  /* shutdown: fail everything still held */
  while (s->n_run) {
    job_finish(s, s->running[s->n_run - 1], DF_SCHED_ERROR, "server shutting down");
    retire(s, s->n_run - 1);
  }
  pthread_mutex_lock(&s->mu);
  df_sched_job *q = s->qhead;
  s->qhead = s->qtail = NULL;
  s->n_queued = 0;
  pthread_mutex_unlock(&s->mu);
  while (q) {
    df_sched_job *n = q->next;
    job_finish(s, q, DF_SCHED_ERROR, "server shutting down");
    job_unref(q);
    q = n;
  }
  return NULL;
}

/* ---- public -------------------------------------------------------------------------- */

int df_sched_new(df_model *m, const df_tok *tok, const df_sched_opts *o, df_sched **out,
                 char *err, size_t errlen) {
  *out = NULL;
  df_sched *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "scheduler: out of memory");
    return -1;
  }
  s->m = m;
  s->tok = tok;
  s->o = *o;
  s->V = df_model_cfg(m)->vocab_size;
  s->gcfg = df_model_gen_cfg(m);
  s->n_chat_stop = df_chat_stop_ids(tok, s->chat_stop);
  if (!s->o.max_seqs) s->o.max_seqs = 8;
  if (!s->o.draft_k) s->o.draft_k = 4;
  if (!s->o.draft_max_seqs) s->o.draft_max_seqs = 1;
  if (s->o.draft_k < 1 || s->o.draft_k > DF_SCHED_K_MAX || s->o.draft_max_seqs < 0) {
    snprintf(err, errlen, "draft length must be in [1, %d], got %d", DF_SCHED_K_MAX, s->o.draft_k);
    goto fail;
  }
  s->draft = s->o.draft;
  if (s->draft && !s->o.draft_tok && df_model_cfg(s->draft)->vocab_size != s->V) {
    fprintf(stderr, "deltafin serve: drafting off: the draft's vocabulary (%lld tokens) differs "
            "from the target's (%lld)\n", (long long)df_model_cfg(s->draft)->vocab_size,
            (long long)s->V);
    s->draft = NULL;
  }
  if (s->draft && !s->o.draft_tok &&
      df_model_max_ctx(s->draft) < (s->o.ctx ? s->o.ctx : df_model_max_ctx(m))) {
    fprintf(stderr, "deltafin serve: drafting off: the draft's context (%lld tokens) is shorter "
            "than the target's\n", (long long)df_model_max_ctx(s->draft));
    s->draft = NULL;
  }
  if (!s->o.ctx) s->o.ctx = df_model_max_ctx(m);
  if (!s->o.prefill_budget) s->o.prefill_budget = 256;
  if (s->o.block) { /* the block drafter replaces a draft model */
    int nc = 0;
    const int64_t *layers = df_dspark_capture_layers(s->o.block, &nc);
    char cerr[512];
    if (df_model_set_capture(m, layers, nc, cerr, sizeof cerr) != 0) {
      fprintf(stderr, "deltafin serve: drafting off: block drafter: %s; sequences run on the "
              "target alone\n", cerr);
    } else {
      df_model_set_capture_point(m, df_dspark_capture_point(s->o.block));
      s->block = s->o.block;
      s->bwidth = df_dspark_row_width(s->block);
      s->bctx = df_dspark_max_ctx(s->block) < s->o.ctx ? df_dspark_max_ctx(s->block) : s->o.ctx;
    }
  }
  if (s->o.max_seqs < 1 || s->o.max_seqs > DF_MODEL_MAX_BATCH) {
    snprintf(err, errlen, "parallel sequences must be in [1, %d], got %d", DF_MODEL_MAX_BATCH,
             s->o.max_seqs);
    goto fail;
  }
  if (s->o.max_queue < 0 || s->o.ctx < 2 || s->o.ctx > df_model_max_ctx(m) ||
      s->o.prefill_budget < 1) {
    snprintf(err, errlen, "scheduler options out of range (max_queue %d >= 0, ctx %lld in [2, "
             "%lld], prefill budget %lld >= 1)", s->o.max_queue, (long long)s->o.ctx,
             (long long)df_model_max_ctx(m), (long long)s->o.prefill_budget);
    goto fail;
  }
  s->st.max_seqs = s->o.max_seqs;
  df_slot_pool_init(&s->pool, m, s->o.ctx, s->o.max_seqs,
                    s->o.cache_bytes ? s->o.cache_bytes : DF_SCHED_CACHE_DEFAULT,
                    !s->o.no_prefix_cache);
  s->pool.draft_init = df_sched__pool_draft_init;
  s->pool.draft_ctx = s;
  s->st.max_queue = s->o.max_queue;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->win_t0 = now_s();
  if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
    snprintf(err, errlen, "scheduler: cannot start its thread");
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    goto fail;
  }
  s->thread_started = true;
  *out = s;
  return 0;
fail:
  free(s);
  return -1;
}

void df_sched_shutdown(df_sched *s) {
  if (!s->thread_started) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  s->thread_started = false;
}

void df_sched_destroy(df_sched **sp) {
  if (!sp || !*sp) return;
  df_sched *s = *sp;
  df_sched_shutdown(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  df_slot_pool_free(&s->pool);
  if (s->o.block) df_model_set_capture(s->m, NULL, 0, NULL, 0); /* the target stops capturing */
  free(s->cap);
  free(s);
  *sp = NULL;
}

int64_t df_sched_ctx(const df_sched *s) { return s->o.ctx; }

/* A job whose submission failed: the grammars stay the caller's. */
static void job_free_unsubmitted(df_sched_job *j) {
  j->n_grammars = 0;
  job_free(j);
}

int df_sched_submit(df_sched *s, const df_sched_req *r, df_sched_job **out, int *status,
                    char *err, size_t errlen) {
  *out = NULL;
  *status = 400;
  if (r->n_prompt < 1 || r->max_tokens < 1 || r->n_stop < 0 || r->n_stop > 8 ||
      r->n_grammars < 0 || r->n_grammars > DF_SCHED_MAX_GRAMMARS) {
    snprintf(err, errlen, "a request needs at least one prompt token, max_tokens >= 1 and at "
             "most 8 stop strings and %d grammars", DF_SCHED_MAX_GRAMMARS);
    return -1;
  }
  if (r->n_prompt + r->max_tokens > s->o.ctx) {
    snprintf(err, errlen, "prompt of %lld tokens + max_tokens %lld exceeds the context of %lld "
             "tokens", (long long)r->n_prompt, (long long)r->max_tokens, (long long)s->o.ctx);
    return -1;
  }
  for (int64_t i = 0; i < r->n_prompt; i++) {
    if (r->prompt[i] < 0 || r->prompt[i] >= s->V) {
      snprintf(err, errlen, "prompt token %lld is %d, outside the vocabulary [0, %lld)",
               (long long)i, r->prompt[i], (long long)s->V);
      return -1;
    }
  }
  *status = 500;
  df_sched_job *j = calloc(1, sizeof *j);
  if (!j) goto oom;
  j->pipe[0] = j->pipe[1] = -1;
  pthread_mutex_init(&j->mu, NULL);
  atomic_init(&j->refs, 2);
  atomic_init(&j->cancel, false);
  j->n_prompt = r->n_prompt;
  j->max_tokens = r->max_tokens;
  j->sp = r->sp;
  j->ignore_eos = r->ignore_eos;
  j->chat = r->chat;
  j->logprobs = r->logprobs;
  j->n_keep_special = r->n_keep_special < 0 ? 0
                      : r->n_keep_special > DF_TOK_STREAM_KEEP_MAX ? DF_TOK_STREAM_KEEP_MAX
                                                                   : r->n_keep_special;
  if (j->n_keep_special)
    memcpy(j->keep_special, r->keep_special, (size_t)j->n_keep_special * sizeof *r->keep_special);
  j->gvocab = r->gvocab;
  if (r->n_grammars > 0 && r->gvocab) {
    if (!(j->grammars = malloc((size_t)r->n_grammars * sizeof *j->grammars))) goto oom_job;
    memcpy(j->grammars, r->grammars, (size_t)r->n_grammars * sizeof *j->grammars);
    j->n_grammars = r->n_grammars; /* taken only when the submission succeeds (below) */
  }
  j->top_logprobs = r->top_logprobs < 0 ? 0 : r->top_logprobs > DF_SCHED_TOP_MAX ? DF_SCHED_TOP_MAX : r->top_logprobs;
  j->slot = -1;
  j->news.prompt_tokens = r->n_prompt;
  if (!(j->prompt = malloc((size_t)r->n_prompt * sizeof *j->prompt))) goto oom_job;
  memcpy(j->prompt, r->prompt, (size_t)r->n_prompt * sizeof *j->prompt);
  for (int i = 0; i < r->n_stop; i++) {
    if (!(j->stop[i] = strdup(r->stop[i]))) goto oom_job;
    j->n_stop = i + 1;
  }
  if (pipe2(j->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
    job_free_unsubmitted(j);
    return -1;
  }
  pthread_mutex_lock(&s->mu);
  if (s->stopping) {
    pthread_mutex_unlock(&s->mu);
    job_free_unsubmitted(j);
    *status = 503;
    snprintf(err, errlen, "the server is shutting down");
    return -1;
  }
  /* queued requests whose clients went away give their places back first */
  df_sched_job *gone = unlink_cancelled_locked(s);
  bool full = s->n_queued + s->n_running >= (int64_t)s->o.max_seqs + s->o.max_queue;
  long long n_waiting = (long long)s->n_queued;
  if (!full) {
    if (s->qtail) s->qtail->next = j;
    else s->qhead = j;
    s->qtail = j;
    s->n_queued++;
    pthread_cond_signal(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  finish_cancelled(s, gone);
  if (full) {
    job_free_unsubmitted(j);
    *status = 429;
    snprintf(err, errlen, "the server is busy: %d requests running and %lld waiting (--max-queue "
             "%d); retry later", s->o.max_seqs, n_waiting, s->o.max_queue);
    return -1;
  }
  *out = j;
  return 0;
oom_job:
  job_free_unsubmitted(j);
oom:
  snprintf(err, errlen, "out of memory");
  return -1;
}

df_sched_stats df_sched_get_stats(df_sched *s) {
  pthread_mutex_lock(&s->mu);
  df_sched_stats st = s->st;
  st.queued = s->n_queued;
  st.running = s->n_running;
  st.drafting = s->draft != NULL || s->block != NULL;
  pthread_mutex_unlock(&s->mu);
  return st;
}
