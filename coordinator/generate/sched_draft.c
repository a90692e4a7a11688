/* coordinator/generate/sched_draft.c — the serving scheduler's speculative drafting: which
 * drafter a request uses, the slots' drafting state, and the proposals of the draft model
 * (same vocabulary, batched across sequences), of a draft with its own tokenizer (one
 * sequence at a time, coordinator/generate/text_draft.h) and of the block drafter; see
 * sched_draft.h. Verification and acceptance stay in sched.c's step.
 */
#define _GNU_SOURCE
#include "coordinator/generate/sched_draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/generate/sched_internal.h"
#include "coordinator/generate/text_draft.h"
#include "engine/draft/dspark.h"

/* Drafting with one kind (DF_SLOT_DRAFT_MODEL / _BLOCK) off for good (it failed): one log
 * line. */
void df_sched__draft_off(df_sched *s, int kind, const char *why) {
  pthread_mutex_lock(&s->mu);
  if (kind == DF_SLOT_DRAFT_BLOCK) s->block = NULL;
  else s->draft = NULL;
  bool other = s->draft || s->block;
  pthread_mutex_unlock(&s->mu);
  fprintf(stderr, "deltafin serve: drafting with the %s off: %s; %s\n",
          kind == DF_SLOT_DRAFT_BLOCK ? "block drafter" : "draft model", why,
          other ? "the other drafter drafts for every request" : "sequences run on the target alone");
}

/* Which drafter job j drafts with: none (constrained, or its drafter failed it), the block
 * drafter (chat requests, or every request without a draft model), or the draft model.
 * Sampled requests draft too: proposals and the target's choices are the job sampler's
 * position-keyed ones (coordinator/generate/spec.h), so the ids are those of the request
 * without a draft. */
static int job_drafter(const df_sched *s, const df_sched_job *j) {
  if (j->no_draft) return 0;
  if (s->block && (j->chat || !s->draft)) return DF_SLOT_DRAFT_BLOCK;
  return s->draft ? DF_SLOT_DRAFT_MODEL : 0;
}

/* Job j's drafting rests (it did not pay: the target alone for now). A resting sequence's
 * rows are still captured for a block drafter, so that its context is in step when it drafts
 * again; a draft model catches up then. */
static bool resting(const df_sched_job *j) { return j->generated < j->rest_until; }

/* Slot sl's drafting state of the given kind, empty (one of another kind is dropped): the
 * draft model's cache with its logits row, or the block drafter's context; and the verify
 * logits. Failure ends drafting with that kind for good (-1). */
static int slot_draft_init(df_sched *s, df_slot *sl, int kind) {
  char err[512] = "out of memory";
  df_kv_destroy(&sl->dkv);
  sl->dkind = 0;
  bool ok = kind == DF_SLOT_DRAFT_BLOCK
                ? s->block && (sl->dkv = df_dspark_kv_new(s->block, s->bctx, err, sizeof err))
                : s->draft && (sl->dkv = df_model_kv_new(s->draft, s->o.ctx, err, sizeof err)) &&
                      (sl->dlogits || (sl->dlogits = malloc((size_t)s->V * sizeof(float))));
  if (ok && !sl->vlogits)
    ok = (sl->vlogits = malloc((size_t)(DF_SCHED_K_MAX + 1) * (size_t)s->V * sizeof(float)));
  if (!ok) {
    char why[600];
    snprintf(why, sizeof why, "%s: %s", kind == DF_SLOT_DRAFT_BLOCK ? "context" : "cache", err);
    df_kv_destroy(&sl->dkv);
    df_sched__draft_off(s, kind, why);
    return -1;
  }
  df_kv_truncate(sl->dkv, 0);
  sl->dkind = kind;
  return 0;
}

/* df_slot_pool.draft_init: the scheduler thread, while it takes a slot for a new job. */
int df_sched__pool_draft_init(void *ctx, df_slot *sl, int kind) {
  df_sched *s = ctx;
  if (kind == DF_SLOT_DRAFT_MODEL && s->o.draft_tok) return -1; /* a request's own state */
  bool have = kind == DF_SLOT_DRAFT_BLOCK ? s->block != NULL : kind == DF_SLOT_DRAFT_MODEL && s->draft;
  return have ? slot_draft_init(s, sl, kind) : -1;
}

/* Block drafter: whether job j's slot keeps its drafter context in step with its target
 * cache (then the step captures j's rows). A greedy, drafting sequence whose slot has no
 * context yet gets one; one whose context lags its target cache (a prefix of another
 * request that was not captured) stops drafting. */
bool df_sched__block_tracks(df_sched *s, df_sched_job *j) {
  if (job_drafter(s, j) != DF_SLOT_DRAFT_BLOCK) return false;
  df_slot *sl = &s->pool.slots[j->slot];
  if ((!sl->dkv || sl->dkind != DF_SLOT_DRAFT_BLOCK) &&
      slot_draft_init(s, sl, DF_SLOT_DRAFT_BLOCK) != 0)
    return false;
  if (sl->dkv->len != sl->kv->len) j->no_draft = true;
  return !j->no_draft;
}

/* Block drafter: add n captured rows of job j to its slot's context; a context that would
 * pass its capacity ends j's drafting, a failure ends drafting for good. */
void df_sched__block_append(df_sched *s, df_sched_job *j, const float *rows, int64_t n) {
  df_slot *sl = &s->pool.slots[j->slot];
  char err[512];
  if (!s->block || n <= 0) return;
  if (sl->dkv->len + n > s->bctx) {
    j->no_draft = true;
    return;
  }
  if (df_dspark_append(s->block, sl->dkv, rows, n, err, sizeof err) != 0) {
    df_sched__draft_off(s, DF_SLOT_DRAFT_BLOCK, err);
  }
}

/* The block drafter's row r proposes the token of position len + r: the job's own choice
 * from the row's logits z [V]. */
static int32_t pick_at(void *ctx, int r, const float *z, int64_t V) {
  df_sched_job *j = ctx;
  (void)V;
  return df_sampler_sample_at(j->smp, z, j->len + r);
}

/* Block drafter proposals for the decoding sequences in who[0..n) whose contexts are
 * in step (track[b]): up to min(draft_k, block) tokens after each one's pending id, one
 * drafter forward per sequence; k[b] = 0 where nothing is proposed. */
void df_sched__propose_block(df_sched *s, df_sched_job **who, int n, const bool *track, int *k,
                          int32_t (*dtok)[DF_SCHED_K_MAX]) {
  char err[512];
  int r = df_dspark_block(s->block);
  for (int b = 0; b < n && s->block; b++) {
    df_sched_job *j = who[b];
    if (!track[b]) continue; /* k[b] is another drafter's (or 0) */
    k[b] = 0;
    if (j->fed < j->n_prompt || resting(j)) continue;
    df_slot *sl = &s->pool.slots[j->slot];
    int64_t left = j->max_tokens - j->generated - 1; /* the last token never needs a draft */
    int64_t kb = s->o.draft_k < r ? s->o.draft_k : r;
    if (left < kb) kb = left;
    if (s->bctx - sl->dkv->len < kb) kb = s->bctx - sl->dkv->len;
    if (kb <= 0 || sl->dkv->len == 0) continue;
    if (df_dspark_propose(s->block, sl->dkv, j->last, (int)kb,
                          j->sp.temperature == 0 ? NULL : pick_at, j, dtok[b], NULL, err,
                          sizeof err) != 0) {
      df_sched__draft_off(s, DF_SLOT_DRAFT_BLOCK, err);
      for (int i = 0; i < n; i++)
        if (track[i]) k[i] = 0;
      return;
    }
    k[b] = (int)kb;
  }
}

/* Draft tokens a draft model (same vocabulary or its own tokenizer) proposes for job j this
 * step: draft_k, fewer near max_tokens, 0 while its prompt is fed or when it does not draft
 * with the draft model. */
static int model_draft_len(const df_sched *s, const df_sched_job *j) {
  if (j->fed < j->n_prompt || resting(j) || job_drafter(s, j) != DF_SLOT_DRAFT_MODEL) return 0;
  int64_t left = j->max_tokens - j->generated - 1; /* the last token never needs a draft */
  return left < s->o.draft_k ? (int)(left > 0 ? left : 0) : s->o.draft_k;
}

/* A cross-tokenizer draft's proposals for the decoding sequences in who[0..n): each
 * request's draft state reads the ids committed since its last round and proposes up to
 * draft_k target ids (k[b], 0 where nothing is proposed); one sequence at a time. A draft
 * that fails (a forward, its tokenizer, memory) is off for good, for every request, with one
 * log line (df_sched__draft_off), as a draft model that fails is. */
static void propose_text(df_sched *s, df_sched_job **who, int n, int *k,
                         int32_t (*dtok)[DF_SCHED_K_MAX]) {
  char err[512], why[600];
  for (int b = 0; b < n; b++) k[b] = 0;
  for (int b = 0; b < n; b++) {
    df_sched_job *j = who[b];
    int kb = model_draft_len(s, j);
    if (kb <= 0) continue;
    df_slot *sl = &s->pool.slots[j->slot];
    if (!sl->vlogits &&
        !(sl->vlogits = malloc((size_t)(DF_SCHED_K_MAX + 1) * (size_t)s->V * sizeof(float)))) {
      j->no_draft = true;
      continue;
    }
    int m = -1;
    if (j->xd ||
        df_text_draft_new(s->draft, s->o.draft_tok, s->tok, s->V, &j->xd, err, sizeof err) == 0) {
      if (df_text_draft_commit(j->xd, j->seq + j->x_committed, j->len - j->x_committed, err,
                               sizeof err) == 0) {
        j->x_committed = j->len;
        m = df_text_draft_propose(j->xd, kb, dtok[b], err, sizeof err);
      }
    }
    if (m < 0) {
      df_text_draft_destroy(&j->xd);
      snprintf(why, sizeof why, "text draft: %s", err);
      df_sched__draft_off(s, DF_SLOT_DRAFT_MODEL, why);
      for (int c = 0; c < n; c++) k[c] = 0;
      return;
    }
    k[b] = m;
  }
}

/* Speculative decoding for the sequences in `who[0..n)` that are decoding: the draft
 * catches up with each one's committed ids and proposes up to k[b] tokens (k[b] is set to 0
 * where nothing is proposed). Draft forwards of all of them are batched like the target's. */
void df_sched__propose(df_sched *s, df_sched_job **who, int n, int *k, int32_t (*dtok)[DF_SCHED_K_MAX]) {
  if (s->o.draft_tok) {
    propose_text(s, who, n, k, dtok);
    return;
  }
  df_batch_seq q[DF_MODEL_MAX_BATCH];
  int idx[DF_MODEL_MAX_BATCH], nq = 0, kmax = 0;
  char err[512];
  for (int b = 0; b < n; b++) {
    df_sched_job *j = who[b];
    k[b] = 0;
    int kb = model_draft_len(s, j);
    if (kb <= 0) continue;
    df_slot *sl = &s->pool.slots[j->slot];
    if ((!sl->dkv || sl->dkind != DF_SLOT_DRAFT_MODEL) &&
        slot_draft_init(s, sl, DF_SLOT_DRAFT_MODEL) != 0)
      return;
    if (sl->dkv->len > j->len - 1) df_kv_truncate_or_reset(sl->dkv, j->len - 1);
    /* catch up: the draft's cache gets every committed id, then proposes d1 */
    q[nq] = (df_batch_seq){.kv = sl->dkv, .ids = j->seq + sl->dkv->len,
                           .n = j->len - sl->dkv->len, .mode = DF_LOGITS_LAST,
                           .logits = sl->dlogits};
    idx[nq++] = b;
    k[b] = kb;
    if (kb > kmax) kmax = kb;
  }
  for (int i = 0; nq && i < kmax; i++) {
    if (i > 0) { /* feed d_i, get d_{i+1} */
      nq = 0;
      for (int b = 0; b < n; b++) {
        if (k[b] <= i) continue;
        df_slot *sl = &s->pool.slots[who[b]->slot];
        q[nq] = (df_batch_seq){.kv = sl->dkv, .ids = &dtok[b][i - 1], .n = 1,
                               .mode = DF_LOGITS_LAST, .logits = sl->dlogits};
        idx[nq++] = b;
      }
    }
    if (df_model_forward_batch(s->draft, q, nq, err, sizeof err) != 0) {
      char why[600];
      snprintf(why, sizeof why, "forward: %s", err);
      df_sched__draft_off(s, DF_SLOT_DRAFT_MODEL, why);
      for (int b = 0; b < n; b++) k[b] = 0;
      return;
    }
    /* d_{i+1} is the token of position len + i: the job's own choice from the draft's row */
    for (int t = 0; t < nq; t++)
      dtok[idx[t]][i] = df_sampler_sample_at(who[idx[t]]->smp, q[t].logits, who[idx[t]]->len + i);
  }
}
