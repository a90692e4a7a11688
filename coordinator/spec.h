/* coordinator/spec.h — one sequence's generation: the target alone, or speculative decoding
 * with a draft model (Leviathan et al. 2023, "Fast Inference from Transformers via
 * Speculative Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative
 * Sampling").
 *
 * Owns: both models' KV caches for the sequence, the draft/verify/accept loop, rollback,
 * the adaptive choice of k and the decision to stop drafting when it does not pay, and the
 * statistics of all that. Does not own: the models (borrowed), tokenization, stop strings.
 *
 * Per round with draft length k: the draft proposes d1..dk (k single-token forwards of the
 * draft, sampling from its filtered distribution q); the target scores the k+1 positions in
 * ONE forward (the pending token followed by d1..dk), giving p_0..p_k. Greedy
 * (temperature 0): accept d_i while d_i == argmax p_{i-1}; the first mismatch is replaced
 * by argmax p_{i-1}; if all match, argmax p_k is added. Sampling: accept d_i with
 * probability min(1, p(d_i)/q(d_i)); on rejection draw from normalise(max(0, p - q)); if all
 * are accepted draw the bonus token from p_k — so every emitted token is distributed as the
 * target alone would draw it. p and q are the sampler's filtered distributions
 * (temperature, top-k, top-p applied to both). Both KV caches roll back to the accepted
 * length. Because every kernel is batch-invariant, the target's logits in a verify batch
 * are bitwise those of one-token decoding, so greedy output is identical with or without
 * the draft.
 */
#ifndef DF_COORD_SPEC_H
#define DF_COORD_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/sampler.h"

#define DF_SPEC_K_MAX 8

typedef struct df_spec_params {
  int k_init;    /* first draft length; 0 = 4 */
  int k_min;     /* adaptive range, 1 <= k_min <= k_max <= DF_SPEC_K_MAX; 0 = 1 */
  int k_max;     /* 0 = DF_SPEC_K_MAX */
  bool adaptive; /* adapt k to measured acceptance and cost; stop drafting when it does not pay */
  bool quiet;    /* no log line when drafting switches off */
} df_spec_params;

typedef struct df_spec_stats {
  int64_t rounds;          /* verify forwards with a draft */
  int64_t drafted;         /* draft tokens proposed */
  int64_t accepted;        /* draft tokens accepted */
  int64_t emitted;         /* tokens produced by df_spec_step */
  int64_t target_forwards; /* all target forwards after prefill (verify + target-alone) */
  double draft_ms;         /* total draft time */
  double verify_ms;        /* total target time after prefill */
  bool drafting;           /* drafting currently on */
  int k;                   /* current draft length */
  char off_reason[160];    /* why drafting is off ("" when on or never configured) */
  int k_hist[DF_SPEC_K_MAX + 1]; /* rounds run at each k */
} df_spec_stats;

typedef struct df_spec df_spec;

/* A generator for one sequence of up to ctx tokens (0 = the target's max_ctx).
 * `draft` may be NULL (target alone). A draft whose vocabulary size differs from the
 * target's, or whose KV cache cannot be allocated, is not an error: drafting is switched
 * off with the reason in stats.off_reason and one log line on stderr (unless quiet).
 * Errors (NULL + message): bad sampler parameters, target KV allocation failure. */
df_spec *df_spec_new(df_model *target, df_model *draft, const df_sampler_params *sp,
                     const df_spec_params *pp, int64_t ctx, char *err, size_t errlen);
void df_spec_destroy(df_spec **s);

/* Feed the prompt (n >= 1 tokens). With logits_all non-NULL, the target's fp32 logits of
 * every prompt position are written to it ([n, vocab]). Errors: as df_model_forward. */
int df_spec_prefill(df_spec *s, const int32_t *ids, int64_t n, float *logits_all, char *err,
                    size_t errlen);

/* Generate the next tokens: writes 1..DF_SPEC_K_MAX+1 ids to out (capacity
 * DF_SPEC_K_MAX + 1) and returns how many, or -1 with a message (context full, backend
 * error). Tokens past an end-of-sequence id are still returned; the caller cuts. */
int df_spec_step(df_spec *s, int32_t *out, char *err, size_t errlen);

/* Tokens committed so far (prompt + generated). */
int64_t df_spec_len(const df_spec *s);

df_spec_stats df_spec_get_stats(const df_spec *s);

/* Turn drafting off for the rest of the sequence (reason is logged once unless quiet). */
void df_spec_disable(df_spec *s, const char *reason);

#endif
