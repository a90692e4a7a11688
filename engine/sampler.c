/* engine/sampler.c — greedy / temperature / top-k / top-p sampling; see sampler.h. */
#define _GNU_SOURCE
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct df_sampler {
  df_sampler_params p;
  int64_t n;
  float *vals;     /* [n] scaled logits */
  float *sel;      /* [n] quickselect scratch */
  float *probs;    /* [n] */
  int32_t *order;  /* [n] kept ids for top-p */
  int64_t draws;   /* df_sampler_sample's position counter */
};

/* splitmix64's finaliser: a bijective mix of 64 bits. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int32_t df_argmax_f32(const float *logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  return (int32_t)best;
}

void df_logprobs(const float *logits, int64_t n, double temperature, int32_t id, double *lp_id,
                 int n_top, int32_t *top_id, double *top_lp) {
  double inv = temperature > 0 ? 1.0 / temperature : 1.0;
  float mx = logits[0];
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > mx) mx = logits[i];
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += exp(((double)logits[i] - mx) * inv);
  double lse = log(sum);
  *lp_id = ((double)logits[id] - mx) * inv - lse;
  if (n_top > n) n_top = (int)n;
  if (n_top <= 0) return;
  /* top_id[0..have) sorted by logit descending, then id ascending; a later id enters only
   * when strictly larger than the last kept, so ties keep the lower id */
  int have = 0;
  for (int64_t i = 0; i < n; i++) {
    float v = logits[i];
    if (have == n_top && !(v > logits[top_id[have - 1]])) continue;
    int at = have < n_top ? have++ : n_top - 1;
    while (at > 0 && v > logits[top_id[at - 1]]) {
      top_id[at] = top_id[at - 1];
      at--;
    }
    top_id[at] = (int32_t)i;
  }
  for (int t = 0; t < n_top; t++) top_lp[t] = ((double)logits[top_id[t]] - mx) * inv - lse;
}

df_sampler *df_sampler_new(const df_sampler_params *p, int64_t n_vocab, char *err,
                           size_t errlen) {
  if (!(p->temperature >= 0) || !isfinite(p->temperature)) {
    snprintf(err, errlen, "temperature %g must be a finite number >= 0", p->temperature);
    return NULL;
  }
  if (!(p->top_p > 0 && p->top_p <= 1)) {
    snprintf(err, errlen, "top_p %g must be in (0, 1]", p->top_p);
    return NULL;
  }
  if (p->top_k < 0) {
    snprintf(err, errlen, "top_k %lld must be >= 0", (long long)p->top_k);
    return NULL;
  }
  if (n_vocab <= 0) {
    snprintf(err, errlen, "vocabulary size %lld must be positive", (long long)n_vocab);
    return NULL;
  }
  df_sampler *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->p = *p;
  s->n = n_vocab;
  s->vals = malloc((size_t)n_vocab * sizeof *s->vals);
  s->sel = malloc((size_t)n_vocab * sizeof *s->sel);
  s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
  s->order = malloc((size_t)n_vocab * sizeof *s->order);
  if (!s->vals || !s->sel || !s->probs || !s->order) goto oom;
  return s;
oom:
  snprintf(err, errlen, "sampler: out of memory for %lld-token vocabulary", (long long)n_vocab);
  df_sampler_destroy(&s);
  return NULL;
}

void df_sampler_destroy(df_sampler **sp) {
  if (!sp || !*sp) return;
  df_sampler *s = *sp;
  free(s->vals);
  free(s->sel);
  free(s->probs);
  free(s->order);
  free(s);
  *sp = NULL;
}

/* k-th largest (1-based) of a[0..n) by quickselect; a is permuted. */
static float kth_largest(float *a, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1, want = k - 1;
  while (lo < hi) {
    float piv = a[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (a[i] > piv) i++;
      while (a[j] < piv) j--;
      if (i <= j) {
        float t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    if (want <= j) hi = j;
    else if (want >= i) lo = i;
    else return a[want];
  }
  return a[want];
}

/* ascending probability; ties: higher id first (so lower ids survive top-p removal) */
static int cmp_prob_asc(const void *a, const void *b, void *ctx) {
  const float *probs = ctx;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  float px = probs[x], py = probs[y];
  if (px != py) return px < py ? -1 : 1;
  return x > y ? -1 : (x < y ? 1 : 0);
}

void df_sampler_probs(df_sampler *s, const float *logits, float *probs) {
  int64_t n = s->n;
  if (s->p.temperature == 0) {
    memset(probs, 0, (size_t)n * sizeof *probs);
    probs[df_argmax_f32(logits, n)] = 1.0f;
    return;
  }
  float inv_t = (float)s->p.temperature;
  for (int64_t i = 0; i < n; i++) s->vals[i] = logits[i] / inv_t;
  float thresh = -INFINITY;
  if (s->p.top_k > 0 && s->p.top_k < n) {
    memcpy(s->sel, s->vals, (size_t)n * sizeof *s->sel);
    thresh = kth_largest(s->sel, n, s->p.top_k);
  }
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (s->vals[i] >= thresh && s->vals[i] > mx) mx = s->vals[i];
  if (!isfinite(mx)) {
    /* a temperature so small that logits / T overflows: the T -> 0 limit of the softmax,
     * all mass shared by the tokens of the largest logit (greedy, ties split evenly) */
    float best = logits[df_argmax_f32(logits, n)];
    int64_t ties = 0;
    for (int64_t i = 0; i < n; i++) ties += logits[i] == best;
    for (int64_t i = 0; i < n; i++) probs[i] = logits[i] == best ? 1.0f / (float)ties : 0.0f;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    probs[i] = s->vals[i] >= thresh ? expf(s->vals[i] - mx) : 0.0f;
    sum += probs[i];
  }
  for (int64_t i = 0; i < n; i++) probs[i] = (float)(probs[i] / sum);
  if (s->p.top_p < 1.0) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
      if (probs[i] > 0) s->order[m++] = (int32_t)i;
    qsort_r(s->order, (size_t)m, sizeof *s->order, cmp_prob_asc, probs);
    double cum = 0;
    /* remove from the least probable while the cumulative mass stays <= 1 - top_p; keep the
     * most probable token always */
    for (int64_t j = 0; j < m - 1; j++) {
      cum += probs[s->order[j]];
      if (cum <= 1.0 - s->p.top_p) probs[s->order[j]] = 0.0f;
      else break;
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++) sum += probs[i];
    for (int64_t i = 0; i < n; i++) probs[i] = (float)(probs[i] / sum);
  }
}

/* The exponential race's clock of token `id` at sequence position `pos`: E = -log(u) with u
 * in (0, 1) from a counter-based hash of (seed, pos, id) (the splitmix64 finaliser twice), so
 * each (position, token) has its own draw whatever was drawn before it. */
static double race_clock(uint64_t seed, int64_t pos, int32_t id) {
  uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull * ((uint64_t)pos + 1));
  uint64_t h = mix64(k ^ (0xd1b54a32d192ed03ull * ((uint64_t)(uint32_t)id + 1)));
  double u = ((double)(h >> 11) + 0.5) * 0x1.0p-53;
  return -log(u);
}

int32_t df_sampler_sample_at(df_sampler *s, const float *logits, int64_t pos) {
  if (s->p.temperature == 0) return df_argmax_f32(logits, s->n);
  df_sampler_probs(s, logits, s->probs);
  /* argmax over kept tokens of p_i / E_i (E_i ~ Exp(1) independent): token i wins with
   * probability p_i (the exponential race; the Gumbel-max trick in another form); ties to
   * the lower id */
  int32_t best = -1;
  double best_score = 0;
  for (int64_t i = 0; i < s->n; i++) {
    if (!(s->probs[i] > 0)) continue;
    double sc = (double)s->probs[i] / race_clock(s->p.seed, pos, (int32_t)i);
    if (best < 0 || sc > best_score) {
      best = (int32_t)i;
      best_score = sc;
    }
  }
  return best >= 0 ? best : df_argmax_f32(logits, s->n);
}

int32_t df_sampler_sample(df_sampler *s, const float *logits) {
  return df_sampler_sample_at(s, logits, s->draws++);
}
