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
  int32_t *kept;   /* [n] ids of the filtered distribution's support, ascending */
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
  s->kept = malloc((size_t)n_vocab * sizeof *s->kept);
  if (!s->vals || !s->sel || !s->probs || !s->order || !s->kept) goto oom;
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
  free(s->kept);
  free(s);
  *sp = NULL;
}

/* top-k up to this k keeps its k largest values in a small sorted array (one pass); above it
 * a quickselect finds the k-th largest */
#define TOPK_SMALL 64

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

/* The filtered distribution of logits [n] (T > 0): its support, ascending ids, in
 * s->kept[0..return) and each kept token's probability at s->probs[id] (entries of other
 * ids are stale). Temperature, then top-k (the k largest, ties at the boundary kept), the
 * softmax over the kept tokens in fp32 exp / fp64 sum, then top-p: from the least probable,
 * tokens are removed while the removed mass stays <= 1 - p (the most probable always stays),
 * and the rest renormalised. Only the kept tokens are visited after top-k, so a small k costs
 * one pass over the vocabulary; the sums run over ascending ids, the order in which a pass
 * over every id (adding zeros elsewhere) would add them. */
static int64_t filtered(df_sampler *s, const float *logits) {
  int64_t n = s->n, m = 0;
  float t = (float)s->p.temperature;
  for (int64_t i = 0; i < n; i++) s->vals[i] = logits[i] / t;
  float thresh = -INFINITY;
  if (s->p.top_k > 0 && s->p.top_k < n) {
    if (s->p.top_k <= TOPK_SMALL) {
      /* the k largest so far, descending: one pass, almost every value compared once */
      float top[TOPK_SMALL];
      int64_t k = s->p.top_k, have = 0;
      for (int64_t i = 0; i < n; i++) {
        float v = s->vals[i];
        if (have == k && !(v > top[k - 1])) continue;
        int64_t at = have < k ? have++ : k - 1;
        while (at > 0 && v > top[at - 1]) {
          top[at] = top[at - 1];
          at--;
        }
        top[at] = v;
      }
      thresh = top[k - 1];
    } else {
      memcpy(s->sel, s->vals, (size_t)n * sizeof *s->sel);
      thresh = kth_largest(s->sel, n, s->p.top_k);
    }
  }
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (s->vals[i] >= thresh) {
      s->kept[m++] = (int32_t)i;
      if (s->vals[i] > mx) mx = s->vals[i];
    }
  float *pr = s->probs;
  if (!isfinite(mx)) {
    /* a temperature so small that logits / T overflows: the T -> 0 limit of the softmax,
     * all mass shared by the tokens of the largest logit (greedy, ties split evenly) */
    float best = logits[df_argmax_f32(logits, n)];
    int64_t ties = 0;
    for (int64_t i = 0; i < n; i++) ties += logits[i] == best;
    m = 0;
    for (int64_t i = 0; i < n; i++)
      if (logits[i] == best) {
        s->kept[m++] = (int32_t)i;
        pr[i] = 1.0f / (float)ties;
      }
    return m;
  }
  double sum = 0;
  for (int64_t j = 0; j < m; j++) {
    int32_t i = s->kept[j];
    pr[i] = expf(s->vals[i] - mx);
    sum += pr[i];
  }
  for (int64_t j = 0; j < m; j++) pr[s->kept[j]] = (float)(pr[s->kept[j]] / sum);
  if (s->p.top_p < 1.0) {
    int64_t mo = 0;
    for (int64_t j = 0; j < m; j++)
      if (pr[s->kept[j]] > 0) s->order[mo++] = s->kept[j];
    qsort_r(s->order, (size_t)mo, sizeof *s->order, cmp_prob_asc, pr);
    double cum = 0;
    /* remove from the least probable while the cumulative mass stays <= 1 - top_p; keep the
     * most probable token always */
    for (int64_t j = 0; j < mo - 1; j++) {
      cum += pr[s->order[j]];
      if (cum <= 1.0 - s->p.top_p) pr[s->order[j]] = 0.0f;
      else break;
    }
    sum = 0;
    for (int64_t j = 0; j < m; j++) sum += pr[s->kept[j]];
    for (int64_t j = 0; j < m; j++) pr[s->kept[j]] = (float)(pr[s->kept[j]] / sum);
  }
  return m;
}

void df_sampler_probs(df_sampler *s, const float *logits, float *probs) {
  int64_t n = s->n;
  memset(probs, 0, (size_t)n * sizeof *probs);
  if (s->p.temperature == 0) {
    probs[df_argmax_f32(logits, n)] = 1.0f;
    return;
  }
  int64_t m = filtered(s, logits);
  for (int64_t j = 0; j < m; j++) probs[s->kept[j]] = s->probs[s->kept[j]];
}

/* The uniform u in (0, 1) of token `id` at sequence position `pos`: a counter-based hash of
 * (seed, pos, id) (the splitmix64 finaliser twice), so each (position, token) has its own
 * draw whatever was drawn before it. */
static double race_u(uint64_t seed, int64_t pos, int32_t id) {
  uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull * ((uint64_t)pos + 1));
  uint64_t h = mix64(k ^ (0xd1b54a32d192ed03ull * ((uint64_t)(uint32_t)id + 1)));
  return ((double)(h >> 11) + 0.5) * 0x1.0p-53;
}

int32_t df_sampler_sample_at(df_sampler *s, const float *logits, int64_t pos) {
  if (s->p.temperature == 0) return df_argmax_f32(logits, s->n);
  int64_t m = filtered(s, logits);
  /* argmax over kept tokens of p_i / E_i with E_i = -log u_i ~ Exp(1) independent: token i
   * wins with probability p_i (the exponential race; the Gumbel-max trick in another form);
   * ties to the lower id. The most probable token runs first, so the best score is high at
   * once; then a token whose clock is surely too slow is skipped without its logarithm:
   * E_i >= 1 - u_i, so (1 - u_i) * best > p_i (with a margin for rounding) means
   * p_i / E_i < best. Skipping changes no result, only the time (most of the vocabulary). */
  const float *pr = s->probs;
  int32_t top = -1;
  for (int64_t j = 0; j < m; j++) {
    int32_t i = s->kept[j];
    if (pr[i] > 0 && (top < 0 || pr[i] > pr[top])) top = i;
  }
  if (top < 0) return df_argmax_f32(logits, s->n);
  int32_t best = top;
  double best_score = (double)pr[top] / -log(race_u(s->p.seed, pos, top));
  for (int64_t j = 0; j < m; j++) {
    int32_t i = s->kept[j];
    if (!(pr[i] > 0) || i == top) continue;
    double u = race_u(s->p.seed, pos, i);
    if ((1.0 - u) * best_score > (double)pr[i] * (1.0 + 0x1p-20)) continue;
    double sc = (double)pr[i] / -log(u);
    if (sc > best_score || (sc == best_score && i < best)) {
      best = i;
      best_score = sc;
    }
  }
  return best;
}

int32_t df_sampler_sample(df_sampler *s, const float *logits) {
  return df_sampler_sample_at(s, logits, s->draws++);
}
