/* coordinator/generate/spec.c — target-alone and speculative generation of one sequence; see
 * spec.h.
 *
 * State invariant: `seq` holds the committed tokens. The target's KV cache holds
 * seq[0 .. len-2] and seq[len-1] is "pending" (not yet fed), except right after a prefill
 * that asked for every prompt logit: then the cache holds all of seq and `p_next` holds the
 * target logits for position len. The draft's cache holds a prefix of seq of length <= len-1
 * and catches up at the start of each round.
 */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/generate/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/generate/text_draft.h"
#include "engine/draft/dspark.h"
#include "engine/models/family.h"
#include "engine/text/tokenizer.h"

struct df_spec {
  df_model *t, *d;
  df_kv_cache *tkv, *dkv;
  /* a block drafter instead of d (df_spec_attach_block): its context cache bkv holds the
   * target's captured rows of exactly the positions tkv holds; cap [K_MAX + 1 or a prefill
   * chunk, W] receives a target forward's captured rows */
  df_dspark *b;
  df_kv_cache *bkv;
  float *cap;
  int64_t cap_rows;
  /* a draft with its own tokenizer instead of d (df_spec_attach_text): it reads the committed
   * text and proposes target ids; as a distribution each proposal is a point mass */
  df_text_draft *x;
  df_sampler *smp;
  df_spec_params pp;
  int64_t V, ctx;
  int32_t *seq;
  int64_t len;
  bool pending;     /* seq[len-1] not yet in the target cache */
  float *p_next;    /* [V] target logits for position len when !pending */
  float *tlogits;   /* [K_MAX + 1, V] verify logits */
  float *dlogits;   /* [V] */
  bool greedy;
  bool drafting;
  int k;
  double rate[DF_SPEC_K_MAX + 1]; /* EMA of emitted tokens per ms at each k (0 = target alone) */
  int rate_n[DF_SPEC_K_MAX + 1];
  int64_t since_choice;
  /* drafting that did not pay rests (the target alone) until token rest_until, then is
   * measured again; each rest twice the last (SPEC_REST_FIRST .. SPEC_REST_MAX tokens) */
  bool resting;
  int64_t rest_until, rest_len;
  df_spec_stats st;
};

/* Tokens the target runs alone after drafting measured slower than it, before drafting is
 * measured again: the first rest, and the longest (text a draft cannot guess often gives
 * way to text it can: a list, a repetition, code after prose). */
#define SPEC_REST_FIRST 64
#define SPEC_REST_MAX 1024

/* Target rows captured per forward chunk for a block drafter (a verify's k+1 fit). */
#define SPEC_CAP_ROWS 64

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Record that k takes value k from the next token on (stats.k_trace). */
static void trace_k(df_spec *s, int k) {
  df_spec_stats *st = &s->st;
  if (st->n_k_trace > 0 && st->k_trace[st->n_k_trace - 1].k == k) return;
  if (st->n_k_trace == DF_SPEC_K_TRACE) return;
  st->k_trace[st->n_k_trace].at = st->emitted;
  st->k_trace[st->n_k_trace].k = k;
  st->n_k_trace++;
}

void df_spec_disable(df_spec *s, const char *reason) {
  if (!s->drafting && s->st.off_reason[0]) return;
  if (s->drafting) trace_k(s, 0);
  s->drafting = false;
  s->st.drafting = false;
  snprintf(s->st.off_reason, sizeof s->st.off_reason, "%s", reason);
  if (!s->pp.quiet) fprintf(stderr, "deltafin: drafting off: %s; the target runs alone\n", reason);
}

void df_spec_set_quiet(df_spec *s, bool quiet) { s->pp.quiet = quiet; }

uint64_t df_spec_draft_need_bytes(const df_model *draft, int64_t ctx) {
  if (ctx <= 0) ctx = df_model_max_ctx(draft);
  df_model_bytes b = df_model_memory(draft);
  uint64_t V = (uint64_t)df_model_cfg(draft)->vocab_size;
  return df_model_kv_bytes_per_token(draft) * (uint64_t)ctx + df_model_kv_bytes_per_seq(draft) +
         b.buffers + (b.total - b.shared) + V * sizeof(float);
}

/* Why the draft does not fit (into why), or false when it does or cannot be judged. */
/* The memory reserve in bytes (df_spec_params.mem_reserve), < 0 = no check. */
static int64_t mem_reserve(const df_spec *s) {
  int64_t reserve = s->pp.mem_reserve;
  if (reserve == 0) {
    const char *e = getenv("DF_DRAFT_MEM_RESERVE");
    char *end = NULL;
    long long v = e && *e ? strtoll(e, &end, 10) : 0;
    reserve = e && *e && end && *end == 0 ? (int64_t)v : DF_SPEC_MEM_RESERVE_DEFAULT;
  }
  return reserve;
}

static bool short_of_memory(const df_spec *s, const df_model *draft, char *why, size_t whylen) {
  int64_t reserve = mem_reserve(s);
  if (reserve < 0) return false;
  int64_t avail = df_host_mem_available();
  if (avail < 0) return false;
  uint64_t need = df_spec_draft_need_bytes(draft, s->ctx);
  if ((double)avail - (double)need >= (double)reserve) return false;
  snprintf(why, whylen, "memory headroom short (the draft needs %.1f MiB, MemAvailable %.1f MiB, "
           "reserve %.1f MiB)", need / 1048576.0, avail / 1048576.0, reserve / 1048576.0);
  return true;
}

df_spec *df_spec_new(df_model *target, df_model *draft, const df_sampler_params *sp,
                     const df_spec_params *pp, int64_t ctx, char *err, size_t errlen) {
  df_spec *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->t = target;
  s->V = df_model_cfg(target)->vocab_size;
  s->ctx = ctx > 0 ? ctx : df_model_max_ctx(target);
  if (pp) s->pp = *pp;
  if (s->pp.k_min <= 0) s->pp.k_min = 1;
  if (s->pp.k_max <= 0 || s->pp.k_max > DF_SPEC_K_MAX) s->pp.k_max = DF_SPEC_K_MAX;
  if (s->pp.k_min > s->pp.k_max) s->pp.k_min = s->pp.k_max;
  if (s->pp.k_init <= 0) s->pp.k_init = 4;
  if (s->pp.k_init < s->pp.k_min) s->pp.k_init = s->pp.k_min;
  if (s->pp.k_init > s->pp.k_max) s->pp.k_init = s->pp.k_max;
  s->k = s->pp.k_init;
  s->st.k = s->k;
  s->greedy = sp->temperature == 0;
  if (!(s->smp = df_sampler_new(sp, s->V, err, errlen))) goto fail;
  if (!(s->tkv = df_model_kv_new(target, s->ctx, err, errlen))) goto fail;
  s->seq = malloc((size_t)s->ctx * sizeof *s->seq);
  s->p_next = malloc((size_t)s->V * sizeof(float));
  s->tlogits = malloc((size_t)(DF_SPEC_K_MAX + 1) * (size_t)s->V * sizeof(float));
  if (!s->seq || !s->p_next || !s->tlogits) goto oom;
  if (draft) {
    char derr[256];
    if (df_model_cfg(draft)->vocab_size != s->V) {
      snprintf(derr, sizeof derr, "the draft's vocabulary (%lld tokens) differs from the target's "
               "(%lld)", (long long)df_model_cfg(draft)->vocab_size, (long long)s->V);
      df_spec_disable(s, derr);
    } else if (short_of_memory(s, draft, derr, sizeof derr)) {
      df_spec_disable(s, derr);
    } else if (!(s->dkv = df_model_kv_new(draft, s->ctx, derr, sizeof derr))) {
      char why[300];
      snprintf(why, sizeof why, "draft KV cache: %s", derr);
      df_spec_disable(s, why);
    } else {
      s->dlogits = malloc((size_t)s->V * sizeof(float));
      if (!s->dlogits) goto oom;
      s->d = draft;
      s->drafting = true;
      s->st.drafting = true;
      trace_k(s, s->k);
    }
  }
  return s;
oom:
  snprintf(err, errlen, "generator: out of memory");
fail:
  df_spec_destroy(&s);
  return NULL;
}

uint64_t df_spec_block_need_bytes(const df_dspark *b, int64_t ctx) {
  if (ctx <= 0) ctx = df_dspark_max_ctx(b);
  return df_dspark_kv_bytes_per_token(b) * (uint64_t)ctx + df_dspark_buffer_bytes(b) +
         (uint64_t)SPEC_CAP_ROWS * (uint64_t)df_dspark_row_width(b) * sizeof(float);
}

int df_spec_attach_block(df_spec *s, df_dspark *b, char *why, size_t whylen) {
  if (s->len != 0 || s->d || s->b) {
    snprintf(why, whylen, "a block drafter is attached once, before the prefill, to a generator "
             "without a draft");
    return -1;
  }
  int64_t reserve = mem_reserve(s);
  int64_t avail = df_host_mem_available();
  uint64_t need = df_spec_block_need_bytes(b, s->ctx);
  if (reserve >= 0 && avail >= 0 && (double)avail - (double)need < (double)reserve) {
    snprintf(why, whylen, "memory headroom short (the block drafter needs %.1f MiB, MemAvailable "
             "%.1f MiB, reserve %.1f MiB)", need / 1048576.0, avail / 1048576.0,
             reserve / 1048576.0);
    return -1;
  }
  if (s->ctx > df_dspark_max_ctx(b)) {
    snprintf(why, whylen, "the block drafter holds %lld tokens, the sequence %lld",
             (long long)df_dspark_max_ctx(b), (long long)s->ctx);
    return -1;
  }
  int n = 0;
  const int64_t *layers = df_dspark_capture_layers(b, &n);
  if (df_model_set_capture(s->t, layers, n, why, whylen) != 0) return -1;
  df_model_set_capture_point(s->t, df_dspark_capture_point(b));
  s->cap_rows = SPEC_CAP_ROWS;
  s->cap = malloc((size_t)s->cap_rows * (size_t)df_dspark_row_width(b) * sizeof(float));
  if (!s->cap || !(s->bkv = df_dspark_kv_new(b, s->ctx, why, whylen))) {
    if (!why[0] || !s->bkv) snprintf(why, whylen, "block drafter: out of memory");
    free(s->cap);
    s->cap = NULL;
    df_model_set_capture(s->t, NULL, 0, NULL, 0);
    return -1;
  }
  s->b = b;
  if (s->pp.k_max > df_dspark_block(b)) s->pp.k_max = df_dspark_block(b);
  if (s->pp.k_min > s->pp.k_max) s->pp.k_min = s->pp.k_max;
  if (s->k > s->pp.k_max) s->k = s->pp.k_max;
  s->st.k = s->k;
  s->drafting = true;
  s->st.drafting = true;
  s->st.off_reason[0] = 0;
  trace_k(s, s->k);
  return 0;
}

int df_spec_attach_text(df_spec *s, df_model *draft, const df_tok *draft_tok,
                        const df_tok *target_tok, char *why, size_t whylen) {
  if (s->len != 0 || s->d || s->b || s->x) {
    snprintf(why, whylen, "a text draft is attached once, before the prefill, to a generator "
             "without a draft");
    return -1;
  }
  if (short_of_memory(s, draft, why, whylen)) return -1;
  if (df_text_draft_new(draft, draft_tok, target_tok, s->V, &s->x, why, whylen) != 0) return -1;
  s->drafting = true;
  s->st.drafting = true;
  s->st.off_reason[0] = 0;
  trace_k(s, s->k);
  return 0;
}

const df_text_draft *df_spec_text_draft(const df_spec *s) { return s->x; }

void df_spec_destroy(df_spec **sp) {
  if (!sp || !*sp) return;
  df_spec *s = *sp;
  df_kv_destroy(&s->tkv);
  df_kv_destroy(&s->dkv);
  df_kv_destroy(&s->bkv);
  df_text_draft_destroy(&s->x);
  free(s->cap);
  if (s->b) {
    df_model_set_capture(s->t, NULL, 0, NULL, 0);
    df_model_set_capture_point(s->t, DF_CAPTURE_PREFIX);
  }
  df_sampler_destroy(&s->smp);
  free(s->seq);
  free(s->p_next);
  free(s->tlogits);
  free(s->dlogits);
  free(s);
  *sp = NULL;
}

int64_t df_spec_len(const df_spec *s) { return s->len; }
const df_kv_cache *df_spec_block_context(const df_spec *s) { return s->b ? s->bkv : NULL; }
df_spec_stats df_spec_get_stats(const df_spec *s) { return s->st; }

/* A target forward of n tokens at tkv->len (df_model_forward's arguments). With a block
 * drafter drafting, the target's hidden states of those rows are captured (in chunks of
 * cap_rows) and appended to the drafter's context cache, which so keeps the positions tkv
 * holds; a drafter failure switches drafting off (never the generation's error). */
static int target_forward(df_spec *s, const int32_t *ids, int64_t n, df_logits_mode mode,
                          float *logits, char *err, size_t errlen) {
  if (!s->b || !s->drafting) return df_model_forward(s->t, s->tkv, ids, n, mode, logits, err, errlen);
  for (int64_t i = 0; i < n;) {
    int64_t c = n - i < s->cap_rows ? n - i : s->cap_rows;
    bool last = i + c == n;
    df_batch_seq q = {.kv = s->tkv, .ids = ids + i, .n = c, .capture = s->cap,
                      .mode = mode == DF_LOGITS_ALL ? DF_LOGITS_ALL
                              : mode == DF_LOGITS_LAST && last ? DF_LOGITS_LAST : DF_LOGITS_NONE,
                      .logits = mode == DF_LOGITS_ALL ? logits + i * s->V
                                : mode == DF_LOGITS_LAST && last ? logits : NULL};
    if (df_model_forward_batch(s->t, &q, 1, err, errlen) != 0) return -1;
    char derr[256];
    if (s->drafting && df_dspark_append(s->b, s->bkv, s->cap, c, derr, sizeof derr) != 0) {
      char why[300];
      snprintf(why, sizeof why, "block drafter: %s", derr);
      df_spec_disable(s, why);
    }
    i += c;
  }
  return 0;
}

/* The committed ids ids[0..n) to a text draft's text; a failure switches drafting off. */
static void commit_text(df_spec *s, const int32_t *ids, int64_t n) {
  if (!s->x || !s->drafting) return;
  char e[256], why[300];
  if (df_text_draft_commit(s->x, ids, n, e, sizeof e) == 0) return;
  snprintf(why, sizeof why, "text draft: %s", e);
  df_spec_disable(s, why);
}

int df_spec_prefill(df_spec *s, const int32_t *ids, int64_t n, float *logits_all, char *err,
                    size_t errlen) {
  if (n <= 0 || s->len != 0) {
    snprintf(err, errlen, n <= 0 ? "empty prompt" : "prefill on a sequence already started");
    return -1;
  }
  if (n >= s->ctx) {
    snprintf(err, errlen, "prompt of %lld tokens leaves no room in a context of %lld",
             (long long)n, (long long)s->ctx);
    return -1;
  }
  /* the last prompt token is only fed at the first step: check every id now */
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= s->V) {
      snprintf(err, errlen, "token id %d at index %lld out of range [0, %lld)", ids[i],
               (long long)i, (long long)s->V);
      return -1;
    }
  if (logits_all) {
    if (target_forward(s, ids, n, DF_LOGITS_ALL, logits_all, err, errlen) != 0) return -1;
    memcpy(s->p_next, logits_all + (n - 1) * s->V, (size_t)s->V * sizeof(float));
    s->pending = false;
  } else {
    if (n > 1 && target_forward(s, ids, n - 1, DF_LOGITS_NONE, NULL, err, errlen) != 0)
      return -1;
    s->pending = true;
  }
  memcpy(s->seq, ids, (size_t)n * sizeof *ids);
  s->len = n;
  commit_text(s, ids, n);
  return 0;
}

/* The token at sequence position pos from logits [V]: the sampler's position-keyed choice
 * (argmax when greedy), so a position's token depends on its logits and the seed only. */
static int32_t choose_at(df_spec *s, const float *logits, int64_t pos) {
  return df_sampler_sample_at(s->smp, logits, pos);
}

static void record_rate(df_spec *s, int k, int emitted, double ms) {
  double r = emitted / (ms > 1e-3 ? ms : 1e-3);
  s->rate[k] = s->rate_n[k] ? 0.7 * s->rate[k] + 0.3 * r : r;
  s->rate_n[k]++;
}

/* Adaptive k: every few rounds, a hill climb on the measured rates — try an unmeasured
 * neighbour of the best measured k (so the search stops going down or up once a step there
 * was slower), then the target alone once, else take the best; stop drafting when the target
 * alone is measurably faster. */
static void adapt(df_spec *s) {
  if (!s->pp.adaptive || !s->drafting) return;
  if (s->resting) {
    if (s->len < s->rest_until) return;
    /* the rest is over: drafting is measured again from k_init, the target alone's rate
     * kept (it does not depend on the text), every drafting rate forgotten */
    s->resting = false;
    s->st.drafting = true;
    s->st.off_not_paying = false;
    s->st.off_reason[0] = 0;
    for (int c = 1; c <= DF_SPEC_K_MAX; c++) s->rate_n[c] = 0;
    s->k = s->pp.k_init;
    s->since_choice = 0;
    trace_k(s, s->k);
    return;
  }
  if (++s->since_choice < 4) return;
  s->since_choice = 0;
  int best = -1;
  for (int c = s->pp.k_min; c <= s->pp.k_max; c++)
    if (s->rate_n[c] >= 2 && (best < 0 || s->rate[c] > s->rate[best])) best = c;
  if (best < 0) return; /* the current k is not measured yet */
  int cand[3] = {best - 1, best + 1, 0};
  for (int i = 0; i < 3; i++) {
    int c = cand[i];
    if ((c == 0 || (c >= s->pp.k_min && c <= s->pp.k_max)) && s->rate_n[c] < 2) {
      s->k = c;
      trace_k(s, c);
      return;
    }
  }
  if (s->rate_n[0] >= 2 && s->rate[0] > 1.05 * s->rate[best]) {
    char why[160];
    snprintf(why, sizeof why, "it does not pay (%.2f tok/s with k=%d, %.2f tok/s target alone)",
             s->rate[best] * 1e3, best, s->rate[0] * 1e3);
    s->st.off_not_paying = true;
    /* it rests: the target alone, the drafter kept in step (it reads the committed tokens
     * when it drafts again) */
    snprintf(s->st.off_reason, sizeof s->st.off_reason, "%s", why);
    s->st.drafting = false;
    s->resting = true;
    s->rest_len = s->rest_len ? s->rest_len * 2 : SPEC_REST_FIRST;
    if (s->rest_len > SPEC_REST_MAX) s->rest_len = SPEC_REST_MAX;
    s->rest_until = s->len + s->rest_len;
    s->st.rests++;
    s->k = 0;
    trace_k(s, 0);
    if (!s->pp.quiet)
      fprintf(stderr, "deltafin: drafting rests: %s; the target runs alone for %lld tokens\n",
              why, (long long)s->rest_len);
    return;
  }
  s->k = best;
  trace_k(s, best);
}

/* One target token. rate_k: the setting whose measured rate the step counts for (0 = target
 * alone; a text draft's round that proposed nothing counts for its k), t0 when it began. */
static int step_target_alone(df_spec *s, int rate_k, double t0, int32_t *out, char *err,
                             size_t errlen) {
  double t1 = now_ms();
  const float *logits = s->p_next;
  if (s->pending) {
    if (s->len >= s->ctx) {
      snprintf(err, errlen, "context full: %lld tokens", (long long)s->ctx);
      return -1;
    }
    if (target_forward(s, &s->seq[s->len - 1], 1, DF_LOGITS_LAST, s->tlogits, err, errlen) != 0)
      return -1;
    logits = s->tlogits;
    s->st.target_forwards++;
  }
  if (s->len >= s->ctx) {
    snprintf(err, errlen, "context full: %lld tokens", (long long)s->ctx);
    return -1;
  }
  int32_t x = choose_at(s, logits, s->len);
  s->seq[s->len++] = x;
  s->pending = true;
  out[0] = x;
  commit_text(s, out, 1);
  double t2 = now_ms();
  s->st.verify_ms += t2 - t1;
  s->st.emitted++;
  s->st.k_hist[0]++;
  record_rate(s, rate_k, 1, t2 - t0);
  return 1;
}

/* The draft model's d1..dk after catching up to seq[0..len-1]: each its own position-keyed
 * choice (greedy: argmax) from its logits, with the seed the target's choice uses, so that
 * where the draft's distribution is near the target's the two choices coincide.
 * -1 + message: a draft forward failed. */
static int propose_model(df_spec *s, int k, int32_t *dtok, char *err, size_t errlen) {
  int64_t L = s->len;
  int64_t D = s->dkv->len;
  if (D > L - 1) D = L - 1;
  D = df_kv_truncate_or_reset(s->dkv, D); /* a recurrent draft state may only reach back so far */
  if (df_model_forward(s->d, s->dkv, &s->seq[D], L - D, DF_LOGITS_LAST, s->dlogits, err,
                       errlen) != 0)
    return -1;
  for (int i = 0; i < k; i++) {
    dtok[i] = choose_at(s, s->dlogits, L + i);
    if (i + 1 < k && df_model_forward(s->d, s->dkv, &dtok[i], 1, DF_LOGITS_LAST, s->dlogits, err,
                                      errlen) != 0)
      return -1;
  }
  return 0;
}

/* Sampling with a block drafter: block row k (0-based) proposes the token of position
 * len + k, the position-keyed choice from the row's logits z [V] (Markov bias included). */
static int32_t pick_sampled(void *ctx, int k, const float *z, int64_t V) {
  df_spec *s = ctx;
  (void)V;
  return choose_at(s, z, s->len + k);
}

/* The block drafter's d1..dk after the pending token seq[len-1], from its context of the
 * target's rows 0..len-2. -1 + message: the drafter failed or lost step with the target. */
static int propose_block(df_spec *s, int k, int32_t *dtok, char *err, size_t errlen) {
  if (s->bkv->len != s->tkv->len) {
    snprintf(err, errlen, "its context holds %lld rows, the target %lld", (long long)s->bkv->len,
             (long long)s->tkv->len);
    return -1;
  }
  return df_dspark_propose(s->b, s->bkv, s->seq[s->len - 1], k, s->greedy ? NULL : pick_sampled, s,
                           dtok, NULL, err, errlen);
}

int df_spec_step(df_spec *s, int32_t *out, char *err, size_t errlen) {
  if (s->len == 0) {
    snprintf(err, errlen, "step before prefill");
    return -1;
  }
  /* room: the verify writes pending + k tokens; the sequence grows by up to k + 1 */
  int k = s->k;
  while (k > 0 && s->len + k + 1 > s->ctx) k--;
  /* a block drafter proposes after the pending token from a context of at least one row:
   * right after a prefill that kept every logit nothing is pending yet, and after a
   * one-token prompt its context is empty; such a step is the target's alone */
  if (!s->drafting || k == 0 || (s->b && (!s->pending || s->bkv->len == 0))) {
    int n = step_target_alone(s, 0, now_ms(), out, err, errlen);
    if (n > 0 && s->drafting) adapt(s);
    return n;
  }
  int64_t L = s->len, V = s->V;
  double t0 = now_ms();
  int32_t dtok[DF_SPEC_K_MAX];
  int kreq = k; /* the setting measured (a text draft may propose fewer) */
  if (s->x) {
    int m = df_text_draft_propose(s->x, k, dtok, err, errlen);
    if (m < 0) goto draft_failed;
    if (m == 0) { /* nothing to propose this round: one target token */
      s->st.draft_ms += now_ms() - t0;
      int n = step_target_alone(s, kreq, t0, out, err, errlen);
      if (n > 0) adapt(s);
      return n;
    }
    k = m;
  } else if ((s->b ? propose_block(s, k, dtok, err, errlen)
                   : propose_model(s, k, dtok, err, errlen)) != 0) {
    goto draft_failed;
  }
  if (s->pp.test_draft_delay_ms > 0) { /* TESTS ONLY (spec.h) */
    struct timespec ts = {0, (long)(s->pp.test_draft_delay_ms * 1e6)};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; s->pp.test_oracle && i < k && L + i < s->pp.n_oracle; i++) /* TESTS ONLY */
    dtok[i] = s->pp.test_oracle[L + i];
  if (s->pp.test_corrupt_at > 0 && s->pp.test_corrupt_at <= k) /* TESTS ONLY (spec.h) */
    dtok[s->pp.test_corrupt_at - 1] = (int32_t)((dtok[s->pp.test_corrupt_at - 1] + 1) % V);
  double t1 = now_ms();
  /* verify: one target forward over [pending?] + d1..dk -> p_0..p_k */
  int32_t vt[DF_SPEC_K_MAX + 1];
  int nv = 0;
  if (s->pending) vt[nv++] = s->seq[L - 1];
  memcpy(vt + nv, dtok, (size_t)k * sizeof *dtok);
  nv += k;
  float *rows = s->tlogits;
  if (!s->pending) {
    memcpy(rows, s->p_next, (size_t)V * sizeof(float));
    rows += V;
  }
  if (target_forward(s, vt, nv, DF_LOGITS_ALL, rows, err, errlen) != 0) {
    /* the target's cache is untouched on error; the sequence state is unchanged */
    return -1;
  }
  s->st.target_forwards++;
  /* accept: d_i stays while it is the target's own choice at its position (greedy: the
   * argmax; sampling: the position-keyed race over p_{i-1}); the first that is not is
   * replaced by that choice; if all stay, the choice from p_k is added. Every emitted token
   * is the one the target alone would choose there with this seed. */
  int a = 0;
  int32_t x = -1;
  for (int i = 0; i < k; i++) {
    int32_t want = choose_at(s, s->tlogits + (int64_t)i * V, L + i);
    if (dtok[i] == want) {
      a++;
      continue;
    }
    x = want;
    break;
  }
  if (a == k) x = choose_at(s, s->tlogits + (int64_t)k * V, L + k);
  /* commit d1..da, x; roll both caches back */
  memcpy(s->seq + L, dtok, (size_t)a * sizeof *dtok);
  s->seq[L + a] = x;
  s->len = L + a + 1;
  df_kv_truncate(s->tkv, L + a);
  if (s->dkv && s->dkv->len > L + a) df_kv_truncate_or_reset(s->dkv, L + a);
  if (s->bkv && s->bkv->len > L + a) df_kv_truncate(s->bkv, L + a);
  s->pending = true;
  memcpy(out, s->seq + L, (size_t)(a + 1) * sizeof *out);
  commit_text(s, out, a + 1);
  double t2 = now_ms();
  s->st.rounds++;
  s->st.drafted += k;
  s->st.accepted += a;
  s->st.emitted += a + 1;
  s->st.draft_ms += t1 - t0;
  s->st.verify_ms += t2 - t1;
  s->st.k_hist[k]++;
  record_rate(s, kreq, a + 1, t2 - t0);
  adapt(s);
  s->st.k = s->k;
  return a + 1;
draft_failed : {
  char why[600];
  snprintf(why, sizeof why, "%s: %s", s->x ? "text draft" : "draft forward failed", err);
  df_spec_disable(s, why);
  return step_target_alone(s, 0, now_ms(), out, err, errlen);
}
}

/* ---- loading a draft ------------------------------------------------------------------- */

/* Whole file into memory (NUL-terminated); NULL when absent or unreadable. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      cap = cap ? 2 * cap : 1 << 20;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, 65536, f);
    n += got;
    if (got < 65536) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

/* 0 when the two folders' tokenizers map every id to the same bytes (or the target's folder
 * has no tokenizer.json), 2 when only the draft's folder has none, 1 when they differ (the
 * difference in why), -1 when one cannot be loaded
 * (why). */
static int same_tokenizer(const char *tdir, const char *ddir, char *why, size_t whylen) {
  char tp[1100], dp[1100];
  snprintf(tp, sizeof tp, "%s/tokenizer.json", tdir);
  snprintf(dp, sizeof dp, "%s/tokenizer.json", ddir);
  size_t tn = 0, dn = 0;
  char *tb = slurp(tp, &tn), *db = tb ? slurp(dp, &dn) : NULL;
  bool identical = tb && db && tn == dn && memcmp(tb, db, tn) == 0;
  bool either_missing = !tb || !db;
  free(tb);
  free(db);
  if (tb && !db) return 2;
  if (identical || either_missing) return 0;
  /* different files: the ids must still mean the same bytes */
  df_tok *tt = NULL, *dt = NULL;
  char e[512];
  int rc = -1;
  if (df_tok_load(tdir, &tt, e, sizeof e) != 0 || df_tok_load(ddir, &dt, e, sizeof e) != 0) {
    snprintf(why, whylen, "tokenizer: %s", e);
    goto done;
  }
  rc = 1;
  size_t n = df_tok_vocab_size(tt);
  if (df_tok_vocab_size(dt) != n) {
    snprintf(why, whylen, "the draft's tokenizer has %zu tokens, the target's %zu",
             df_tok_vocab_size(dt), n);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    size_t la = 0, lb = 0;
    const uint8_t *a = df_tok_id_to_bytes(tt, (int32_t)i, &la);
    const uint8_t *b = df_tok_id_to_bytes(dt, (int32_t)i, &lb);
    if ((!a) != (!b) || la != lb || (la && memcmp(a, b, la) != 0) ||
        df_tok_is_special(tt, (int32_t)i) != df_tok_is_special(dt, (int32_t)i)) {
      snprintf(why, whylen, "the draft's tokenizer differs from the target's (token id %zu)", i);
      goto done;
    }
  }
  rc = 0;
done:
  df_tok_destroy(&tt);
  df_tok_destroy(&dt);
  return rc;
}

int df_spec_draft_load(df_model *target, const char *target_dir, const char *draft_dir,
                       const df_model_opts *opts, df_model **out, char *why, size_t whylen) {
  return df_spec_draft_load_any(target, target_dir, draft_dir, opts, out, NULL, why, whylen);
}

int df_spec_draft_load_any(df_model *target, const char *target_dir, const char *draft_dir,
                           const df_model_opts *opts, df_model **out, df_tok **text_tok,
                           char *why, size_t whylen) {
  *out = NULL;
  if (text_tok) *text_tok = NULL;
  df_model_opts o = {.max_ctx = df_model_max_ctx(target), .max_rows = DF_SPEC_K_MAX + 1};
  if (opts) o = *opts;
  o.share_from = target;
  char err[1024];
  df_model *d = NULL;
  /* a cross-tokenizer draft is known by its tokenizer before it loads: it shares no table
   * with the target, and its context counts its own tokens (up to its own limit) */
  int same = target_dir ? same_tokenizer(target_dir, draft_dir, why, whylen) : 0;
  if (same == 1 && text_tok) { /* up to twice the target's context in its own tokens (a
                                  smaller vocabulary spends more tokens on the same text) */
    o.share_from = NULL;
    o.max_ctx = 2 * (o.max_ctx > 0 ? o.max_ctx : df_model_max_ctx(target));
    if (o.max_ctx < DF_TEXT_DRAFT_MIN_CTX) o.max_ctx = DF_TEXT_DRAFT_MIN_CTX;
  }
  /* a draft with a shorter context than the target's loads at its own limit; df_spec_new
   * then finds it cannot hold the sequence and switches drafting off with that reason */
  df_model_config dc;
  bool have_cfg = df_cfg_load(draft_dir, &dc, err, sizeof err) == 0;
  if (have_cfg && o.max_ctx > dc.max_position_embeddings) o.max_ctx = dc.max_position_embeddings;
  if (same == 2) { /* no tokenizer of its own: its ids must be the target's */
    if (have_cfg && dc.vocab_size != df_model_cfg(target)->vocab_size) {
      snprintf(why, whylen, "draft %s: it has no tokenizer.json and its vocabulary (config.json "
               "vocab_size %lld) differs from the target's (%lld): a draft needs the target's "
               "vocabulary or a tokenizer.json of its own", draft_dir, (long long)dc.vocab_size,
               (long long)df_model_cfg(target)->vocab_size);
      return -1;
    }
    same = 0;
  }
  if (same == 1 && text_tok && o.max_ctx < DF_TEXT_DRAFT_MIN_CTX) {
    snprintf(why, whylen, "draft %s: its context (config.json max_position_embeddings %lld) is "
             "too short to draft text: at least %d tokens", draft_dir,
             (long long)dc.max_position_embeddings, DF_TEXT_DRAFT_MIN_CTX);
    return -1;
  }
  if (df_model_load(draft_dir, &o, &d, err, sizeof err) != 0) {
    snprintf(why, whylen, "draft %s: %s", draft_dir, err);
    return -1;
  }
  if (same == 1 && text_tok) { /* a cross-tokenizer draft: it reads and writes text */
    if (df_tok_load(draft_dir, text_tok, err, sizeof err) != 0) {
      snprintf(why, whylen, "draft %s: %s", draft_dir, err);
      df_model_destroy(&d);
      return -1;
    }
    /* every id its tokenizer can give must have a row in its model */
    if ((int64_t)df_tok_vocab_size(*text_tok) > df_model_cfg(d)->vocab_size) {
      snprintf(why, whylen, "draft %s: its tokenizer has %zu ids, its model (config.json "
               "vocab_size) %lld rows", draft_dir, df_tok_vocab_size(*text_tok),
               (long long)df_model_cfg(d)->vocab_size);
      df_tok_destroy(text_tok);
      df_model_destroy(&d);
      return -1;
    }
    why[0] = 0;
    same = 0;
  }
  if (same != 0) {
    df_model_destroy(&d);
    return -1;
  }
  *out = d;
  return 0;
}
