/* coordinator/generate/spec.h — one sequence's generation: the target alone, or speculative
 * decoding with a draft model (Leviathan et al. 2023, "Fast Inference from Transformers via
 * Speculative Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative
 * Sampling").
 *
 * Owns: both models' KV caches for the sequence, the draft/verify/accept loop, rollback,
 * the adaptive choice of k and the decision to stop drafting when it does not pay, and the
 * statistics of all that. Does not own: the models (borrowed), tokenization, stop strings.
 *
 * Per round with draft length k: the draft proposes d1..dk (k single-token forwards of the
 * draft); the target scores the k+1 positions in ONE forward (the pending token followed by
 * d1..dk), giving p_0..p_k. The target's choice at each position is the sampler's
 * position-keyed one (engine/sampler.h: greedy, the argmax; sampling, an exponential race
 * whose clocks depend only on the seed, the position and the token). Accept d_i while d_i is
 * the target's choice from p_{i-1}; the first that is not is replaced by that choice; if all
 * are accepted the choice from p_k is added. Both KV caches roll back to the accepted length.
 * Because every kernel is batch-invariant, the target's logits in a verify batch are bitwise
 * those of one-token decoding, so every emitted token is the one the target alone would
 * choose with the same seed: the ids are identical with or without a draft, for any k, at any
 * temperature (drafter-invariant speculative decoding: Daliri, Musco and Suresh, "Coupling
 * without Communication and Drafter-Invariant Speculative Decoding", arXiv:2408.07978, with
 * Gumbel sampling). A draft proposes with the same race over its own filtered distribution q, so a proposal is kept with probability at least
 * (1 - TV(p, q)) / (1 + TV(p, q)) (the same paper; Leviathan et al.'s rejection rule keeps
 * 1 - TV but makes the ids depend on the draft).
 */
#ifndef DF_COORD_SPEC_H
#define DF_COORD_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/generate/text_draft.h"
#include "engine/draft/dspark.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"

#define DF_SPEC_K_MAX 8
#define DF_SPEC_K_TRACE 32 /* k changes kept in df_spec_stats.k_trace */

typedef struct df_spec_params {
  int k_init;    /* first draft length; 0 = 4 */
  int k_min;     /* adaptive range, 1 <= k_min <= k_max <= DF_SPEC_K_MAX; 0 = 1 */
  int k_max;     /* 0 = DF_SPEC_K_MAX */
  bool adaptive; /* adapt k to measured acceptance and cost; stop drafting when it does not pay */
  bool quiet;    /* no log line when drafting switches off */
  /* Memory headroom, bytes: drafting stays off when MemAvailable (/proc/meminfo) minus the
   * draft's needs (df_spec_draft_need_bytes) is below this. 0 = the environment variable
   * DF_DRAFT_MEM_RESERVE (bytes) when set, else DF_SPEC_MEM_RESERVE_DEFAULT; < 0 = no check.
   * Where /proc/meminfo cannot be read the check is skipped. */
  int64_t mem_reserve;
  /* TESTS ONLY: when 1..k, every round's draft token at that position (1-based) is replaced by
   * the next id (mod vocabulary) before the verify, forcing a rejection there whenever the
   * target's choice differs from the new id. 0 = off. */
  int test_corrupt_at;
  /* TESTS ONLY: a known continuation (ids of the whole sequence, prompt included, n_oracle of
   * them): before test_corrupt_at applies, draft token i of a round is replaced by
   * test_oracle[len + i] where that exists — with the target's own greedy output this makes a
   * round accept exactly test_corrupt_at - 1 tokens. NULL = off. */
  const int32_t *test_oracle;
  int64_t n_oracle;
  /* TESTS ONLY: milliseconds every drafting round waits (counted as draft time), so that the
   * adaptive controller measures drafting as not paying whatever the machine. 0 = off. */
  double test_draft_delay_ms;
} df_spec_params;

/* Default memory reserve kept free when a draft is used (256 MiB). */
#define DF_SPEC_MEM_RESERVE_DEFAULT ((int64_t)256 << 20)

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
  char off_reason[640];    /* why drafting is off ("" when on or never configured) */
  bool off_not_paying;     /* drafting is off because the target alone was measured faster
                              (adaptive k: a measurement, not a fault): it rests, and is
                              measured again after 64 tokens, then after twice as many each
                              time it does not pay, at most 1024 */
  int rests;               /* times drafting rested so */
  int k_hist[DF_SPEC_K_MAX + 1]; /* rounds run at each k (0: target-alone steps while drafting) */
  int n_k_trace;                 /* entries used in k_trace */
  struct {
    int64_t at; /* tokens emitted before the change */
    int k;      /* draft length from then on; 0 = target alone (exploring, or drafting off) */
  } k_trace[DF_SPEC_K_TRACE];    /* k over time: the first DF_SPEC_K_TRACE values it took */
} df_spec_stats;

typedef struct df_spec df_spec;

/* A generator for one sequence of up to ctx tokens (0 = the target's max_ctx).
 * `draft` may be NULL (target alone). A draft whose vocabulary size differs from the
 * target's, that does not fit in memory (MemAvailable - df_spec_draft_need_bytes(draft, ctx)
 * < the reserve, see df_spec_params.mem_reserve) or whose KV cache cannot be allocated is not
 * an error: drafting is switched off with the reason in stats.off_reason and one log line on
 * stderr (unless quiet); the output is then the target's alone.
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

/* Whether a later switch-off logs its line at once (quiet = false, the default of
 * df_spec_params) or only records it in df_spec_get_stats(s).off_reason (quiet = true), for
 * a caller that is streaming text to the terminal and reports the reason after it. */
void df_spec_set_quiet(df_spec *s, bool quiet);

/* Bytes a draft still needs to run a sequence of ctx tokens (0 = its max_ctx): its KV cache
 * (df_model_kv_bytes_per_token x ctx + df_model_kv_bytes_per_seq, a recurrent state), its
 * planned buffers, its weights not shared with the target (df_model_bytes.total - .shared)
 * and the generator's row of draft logits (vocab fp32). */
uint64_t df_spec_draft_need_bytes(const df_model *draft, int64_t ctx);

/* Bytes a block drafter needs to run a sequence of ctx tokens (0 = its max_ctx): its context
 * cache, its buffers and the generator's capture rows. Its weights are mapped, not counted. */
uint64_t df_spec_block_need_bytes(const df_dspark *b, int64_t ctx);

/* Draft with the block drafter b (borrowed; it must outlive s, and no other generator may use
 * the same target at the same time: the target's hidden-state capture is set for it) instead
 * of a draft model: per round it proposes min(k, its block size) tokens after the pending
 * token from the target's captured rows (engine/draft/dspark.h), verified and accepted
 * exactly as a draft model's (each proposal the position-keyed choice from the drafter's
 * row, so the ids are the target alone's at any temperature). Call once after
 * df_spec_new without a draft, before df_spec_prefill. Returns 0, or -1 with why (one line:
 * memory headroom short as for a draft, a context longer than the drafter's, the target
 * cannot capture, out of memory); on -1 nothing changed and the target runs alone. */
int df_spec_attach_block(df_spec *s, df_dspark *b, char *why, size_t whylen);

/* Draft with `draft`, a model whose tokenizer (draft_tok) differs from the target's
 * (target_tok), through text (coordinator/generate/text_draft.h): per round it proposes up
 * to k target ids, the target's tokenization of the draft's continuation, cut after the last
 * complete piece. Verified and accepted as a draft model's (a proposal is kept when it is
 * the target's own choice, with probability p(d_i) when sampling), so the ids are the target
 * alone's at any temperature. A round
 * with nothing to propose emits one target token (counted in k_hist[0]). The draft, its
 * tokenizer and target_tok are borrowed and must outlive s. Call once after df_spec_new
 * without a draft, before df_spec_prefill. Returns 0, or -1 with why (memory headroom short
 * as for a draft, its KV cache, out of memory); on -1 the target runs alone. */
int df_spec_attach_text(df_spec *s, df_model *draft, const df_tok *draft_tok,
                        const df_tok *target_tok, char *why, size_t whylen);

/* The text draft (TESTS: its counters and cache), or NULL when none is attached. */
const df_text_draft *df_spec_text_draft(const df_spec *s);

/* The block drafter's context cache (TESTS: it must hold the target's rows of exactly the
 * positions the target's cache holds), or NULL when no block drafter is attached. */
const df_kv_cache *df_spec_block_context(const df_spec *s);

/* Load the draft model in draft_dir for `target` (loaded from target_dir), the way
 * `deltafin run --draft` does: opts as given (NULL: max_ctx = the target's, max_rows =
 * DF_SPEC_K_MAX + 1, threads 0) with share_from set to target, so an embedding / lm_head
 * byte-identical to the target's is mapped once (the target must outlive the draft); then
 * the tokenizers are compared: when both folders have a tokenizer.json, the files must be
 * byte-identical or, failing that, give every id the same bytes and special flag.
 * Returns 0 with *out set, or -1 with *out NULL and why the draft cannot be used in `why`
 * (one line: the load error naming the file, or the tokenizer difference). A -1 is not a
 * failure of the run: the caller logs `why` once and runs the target alone. */
int df_spec_draft_load(df_model *target, const char *target_dir, const char *draft_dir,
                       const df_model_opts *opts, df_model **out, char *why, size_t whylen);

/* As df_spec_draft_load, but a draft whose tokenizer differs from the target's loads too, as
 * a cross-tokenizer draft for df_spec_attach_text (its context: twice opts->max_ctx, or twice
 * the target's, in its own tokens, at most its max_position_embeddings; it shares no table
 * with the target): then *text_tok owns the draft's tokenizer
 * (free with df_tok_destroy after the draft's last use); it is NULL for a same-tokenizer draft
 * (use it with df_spec_new). text_tok NULL: df_spec_draft_load. */
int df_spec_draft_load_any(df_model *target, const char *target_dir, const char *draft_dir,
                           const df_model_opts *opts, df_model **out, df_tok **text_tok,
                           char *why, size_t whylen);

#endif
