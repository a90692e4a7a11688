/* engine/sampler.h — next-token choice from logits: greedy, temperature, top-k, top-p.
 *
 * Owns: the sampling pipeline and its seeded, position-keyed draws. Semantics follow transformers'
 * logits warpers in their usual order: temperature (logits / T), top-k (keep the k largest;
 * ties at the boundary: lower token id first), top-p (Holtzman et al. 2019: keep the
 * smallest set of most probable tokens whose probability reaches p; always at least one),
 * then a draw from the renormalised distribution. temperature 0 means greedy (argmax,
 * lowest id on ties).
 *
 * The draw is position-keyed: the token at sequence position t is the winner of an
 * exponential race over the kept tokens, argmax_i p_i / E_i with E_i = -log u(seed, t, i)
 * and u a counter-based hash of (seed, t, i) (the Gumbel-max trick in another form: token i
 * wins with probability p_i). So the token chosen at t depends only on the seed, t and that
 * position's distribution — not on how many draws came before it. Speculative decoding uses
 * this to be drafter-invariant (coordinator/generate/spec.h): a draft proposes with the same
 * race over its own distribution, and the target keeps a proposal only when its own race
 * picks the same token, so a seeded generation gives the same ids with or without a draft,
 * for any k and any batch. The same seed and logits give the same tokens on every machine.
 */
#ifndef DF_ENGINE_SAMPLER_H
#define DF_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_sampler_params {
  double temperature; /* 0 = greedy */
  double top_p;       /* (0, 1]; 1 = off */
  int64_t top_k;      /* 0 = off */
  uint64_t seed;
} df_sampler_params;

typedef struct df_sampler df_sampler;

/* A sampler for a vocabulary of n_vocab tokens; plans its work buffers (n_vocab entries).
 * Errors (NULL + message): temperature < 0, top_p outside (0, 1], top_k < 0, n_vocab <= 0,
 * out of memory. */
df_sampler *df_sampler_new(const df_sampler_params *p, int64_t n_vocab, char *err,
                           size_t errlen);
void df_sampler_destroy(df_sampler **s);

/* Choose the token at sequence position pos (0-based: the index it will occupy, prompt
 * included) from logits [n_vocab] fp32 (not modified): argmax when greedy, else the
 * position-keyed race above over df_sampler_probs' distribution. Deterministic in (seed, pos,
 * logits). */
int32_t df_sampler_sample_at(df_sampler *s, const float *logits, int64_t pos);
/* df_sampler_sample_at at positions 0, 1, 2, ... counted by this sampler (for callers that
 * do not track positions: tests, one-off draws). */
int32_t df_sampler_sample(df_sampler *s, const float *logits);

/* The filtered, renormalised distribution the sampler would draw from: probs [n_vocab]
 * fp32 (zeros outside the kept set). For greedy it is one-hot. Used by speculative decoding's
 * acceptance test and by tests. */
void df_sampler_probs(df_sampler *s, const float *logits, float *probs);


/* Log-probabilities of the distribution softmax(logits / T) (T = temperature when > 0, else 1):
 * *lp_id gets that of token `id`, and top_id / top_lp [n_top] the n_top most likely tokens,
 * most likely first, ties to the lower id (n_top in [0, n]). Computed in fp64 in one fixed
 * order (max, then the sum of exp over ids 0..n-1), so the same logits give the same bits.
 * logits [n] fp32, not modified. */
void df_logprobs(const float *logits, int64_t n, double temperature, int32_t id, double *lp_id,
                 int n_top, int32_t *top_id, double *top_lp);

/* argmax of logits [n] (lowest index on ties). */
int32_t df_argmax_f32(const float *logits, int64_t n);

#endif
