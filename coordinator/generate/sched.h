/* coordinator/generate/sched.h — the serving scheduler: one thread owns the model and every
 * sequence's state, and runs continuous batching over the requests it is given.
 *
 * Owns: the request queue and admission (at most max_seqs sequences decode together, at most
 * max_queue more wait), one KV cache slot per running sequence (allocated on first use and
 * reused), one sampler per request, the batched step (every running sequence's next rows —
 * a prompt chunk or its last sampled token — in ONE df_model_forward_batch), detokenization
 * (engine/text/tokenizer.h's stream decoder) and stop strings (sched_stop.h), cancellation, and
 * the serving statistics.
 * Does not own: HTTP, request parsing, tokenizing prompts (the caller gives token ids), the
 * model and tokenizer (borrowed; they must outlive the scheduler).
 *
 * Exactness: each request's tokens are those `deltafin run --no-draft` produces for the same
 * prompt ids and sampler settings. The batched forward gives every sequence bitwise the
 * logits it would get alone (engine/model.h), the prompt is fed in chunks (also invariant),
 * and each request's sampler is seeded from its own seed and draws once per generated token,
 * exactly as the target-alone loop of coordinator/generate/spec.c does. Which other requests run at
 * the same time has no effect on a request's output.
 *
 * Speculative decoding (with a draft model, while at most draft_max_seqs sequences run):
 * greedy sequences get k draft tokens each (the draft's forwards batched across them like
 * the target's), verified in the same batched target forward as everyone else's rows; a
 * draft token is kept while it equals the target's argmax, then the target's own token
 * follows, and both caches roll back (coordinator/generate/spec.h's greedy rule). The target's
 * logits in a verify row are bitwise those of one-token decoding, so the output is identical
 * to the target alone. Sampled sequences always run on the target alone: their draws must
 * follow the request's seed exactly as `deltafin run --no-draft` consumes it. A sequence
 * whose drafts are mostly rejected (acceptance < 1/4 after 8 rounds) stops drafting.
 *
 * With a block drafter (engine/draft/dspark.h) (for chat requests when there is also a draft
 * model, for every greedy request otherwise): the target's forwards
 * capture the drafter's hidden-state rows of greedy sequences (df_model_set_capture), each
 * slot's drafter context takes the rows of the positions the target committed (prompt chunks,
 * decoded tokens, the accepted prefix of a verify), and one drafter forward per sequence
 * proposes up to min(draft_k, block) tokens after the pending one; verification is the same.
 * A context can only grow from captured rows: a sequence whose slot's context does not hold
 * every position its target cache holds (a prefix reused from a sampled request) runs on the
 * target alone.
 *
 * Threads: df_sched_submit, the df_sched_job_* functions and df_sched_get_stats may be called
 * from any thread; a job handle belongs to one caller thread.
 */
#ifndef DF_COORD_SCHED_H
#define DF_COORD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/generate/json_grammar.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"

typedef struct df_sched df_sched;
typedef struct df_sched_job df_sched_job;

typedef struct df_sched_opts {
  int max_seqs;           /* sequences decoded together, 1..DF_MODEL_MAX_BATCH; 0 = 8 */
  int max_queue;          /* requests that may wait for a slot beyond max_seqs (>= 0) */
  int64_t ctx;            /* tokens per sequence (prompt + completion); 0 = the model's max_ctx;
                             at most the model's max_ctx */
  int64_t prefill_budget; /* prompt tokens fed per step over all sequences; 0 = 256 */
  df_model *draft;        /* draft model for speculative decoding (borrowed), or NULL; one
                             whose vocabulary or context does not fit is ignored (logged) */
  const df_tok *draft_tok;/* the draft's own tokenizer when it is not the target's (borrowed;
                             df_spec_draft_load_any): the draft then drafts through text
                             (coordinator/generate/text_draft.h), one sequence at a time, with
                             a draft context per request; NULL: a same-vocabulary draft */
  struct df_dspark *block;/* block drafter reading the target's hidden states (borrowed,
                             engine/draft/dspark.h; loaded against this target), or NULL. With
                             both, chat requests (df_sched_req.chat) draft with the block
                             drafter and the others with the draft model. The scheduler sets
                             the target's capture layers and point for it. */
  int draft_k;            /* draft tokens per round, 1..DF_SCHED_K_MAX; 0 = 4 */
  int draft_max_seqs;     /* draft only while at most this many sequences run; 0 = 1 */
  /* Prefix cache (coordinator/generate/sched_slots.h): bytes of finished sequences' caches
   * kept beyond the max_seqs working slots; 0 = DF_SCHED_CACHE_DEFAULT, < 0 = none beyond
   * the working slots (whose last contents are still reused). */
  int64_t cache_bytes;
  bool no_prefix_cache;   /* every sequence starts cold (no reuse at all) */
} df_sched_opts;

/* Default prefix-cache budget beyond the working slots: 1 GiB. */
#define DF_SCHED_CACHE_DEFAULT ((int64_t)1 << 30)

/* Most alternatives per position a request may ask logprobs for (OpenAI's top_logprobs). */
#define DF_SCHED_TOP_MAX 20

/* One generated token's log-probability and the most likely alternatives at its position,
 * from the target's distribution at the request's temperature: log-softmax(logits / T) for
 * T > 0, log-softmax(logits) for greedy (top-k / top-p are not applied: they cut the
 * distribution, and OpenAI's logprobs are those of the model). fp64 natural logarithms. */
typedef struct df_sched_logprob {
  int32_t id;
  double logprob;
  int n_top;                         /* alternatives below, most likely first (ties: lower id) */
  int32_t top_id[DF_SCHED_TOP_MAX];
  double top_logprob[DF_SCHED_TOP_MAX];
} df_sched_logprob;

/* Most draft tokens per round. */
#define DF_SCHED_K_MAX 8

/* Start the scheduler thread for model `m` and tokenizer `tok` (borrowed). Nothing per
 * sequence is allocated yet. Errors (-1, message): options out of range, thread creation. */
int df_sched_new(df_model *m, const df_tok *tok, const df_sched_opts *o, df_sched **out,
                 char *err, size_t errlen);

/* Stop the thread (the step in progress completes), finish every queued and running job with
 * DF_SCHED_ERROR "server shutting down" and wait for the thread. Afterwards df_sched_submit
 * answers 503; job handles stay valid until released. Idempotent. */
void df_sched_shutdown(df_sched *s);

/* df_sched_shutdown, then free everything the scheduler owns. Job handles still held stay
 * valid until released. NULLs *s; NULL-safe. */
void df_sched_destroy(df_sched **s);

/* Tokens one sequence may hold (prompt + completion). */
int64_t df_sched_ctx(const df_sched *s);

/* One generation request. Everything is copied by df_sched_submit. */
typedef struct df_sched_req {
  const int32_t *prompt;  /* [n_prompt] ids, each in [0, vocab) */
  int64_t n_prompt;       /* >= 1 */
  int64_t max_tokens;     /* >= 1; n_prompt + max_tokens <= df_sched_ctx */
  df_sampler_params sp;
  bool ignore_eos;        /* do not stop at the model's end-of-sequence ids */
  const char *const *stop; /* [n_stop] non-empty UTF-8 stop strings */
  int n_stop;
  bool logprobs;          /* record a df_sched_logprob per generated id (end ids excluded) */
  int top_logprobs;       /* alternatives per position, 0..DF_SCHED_TOP_MAX */
  /* Constrained decoding (structured output, forced tool calls): the output must be accepted
   * by one of grammars[0..n_grammars), then an end id. df_sched_submit takes the grammars when
   * it succeeds (they are freed with the job; on failure they stay the caller's); gvocab is
   * borrowed and must outlive the scheduler. Each step masks the logits to the ids some still-live grammar allows
   * (json_grammar.h df_jsg_mask) before sampling, and the logprobs are those of the masked
   * logits. Such a sequence never drafts. 0 = unconstrained. */
  const df_jsg *const *grammars;
  int n_grammars;
  const df_jsg_vocab *gvocab;
  /* special tokens whose text the output keeps (a chat format's markup that the caller
   * parses: Kimi's tool-call markers, K2 Thinking's <think>); other specials and end ids
   * decode to nothing. At most DF_TOK_STREAM_KEEP_MAX (more are ignored). */
  const int32_t *keep_special;
  int n_keep_special;
  bool chat;              /* a chat turn (its prompt is a chat template's): drafted by the block
                             drafter when there is one; raw completions by the draft model when
                             there is one (df_sched_opts) */
} df_sched_req;

/* Most grammars one request may give (a forced call of one of up to this many tools). */
#define DF_SCHED_MAX_GRAMMARS 128

typedef enum df_sched_finish {
  DF_SCHED_RUNNING = 0,   /* not finished */
  DF_SCHED_STOP = 1,      /* an end-of-sequence id or a stop string */
  DF_SCHED_LENGTH = 2,    /* max_tokens reached */
  DF_SCHED_ERROR = 3,     /* engine error or shutdown; see the news' error */
  DF_SCHED_CANCELLED = 4, /* df_sched_job_cancel */
} df_sched_finish;

/* Queue a request. Returns 0 with *job (release with df_sched_job_release), or -1 with
 * *status and a message: 429 when max_seqs + max_queue requests are already held, 503 when
 * shutting down, 400 for a request outside the limits above (the message gives the
 * numbers), 500 out of memory. */
int df_sched_submit(df_sched *s, const df_sched_req *r, df_sched_job **job, int *status,
                    char *err, size_t errlen);

/* A file descriptor that polls readable (POLLIN) when the job has news (text or its
 * finish) not yet taken. Owned by the job. */
int df_sched_job_fd(const df_sched_job *j);

typedef struct df_sched_news {
  df_sched_finish finish;    /* DF_SCHED_RUNNING until the job is over */
  int64_t prompt_tokens;     /* ids of the prompt */
  int64_t completion_tokens; /* ids generated so far (including an end-of-sequence id) */
  int64_t cached_tokens;     /* prompt ids taken from the prefix cache (not prefilled) */
  int64_t draft_tokens;      /* draft ids proposed for this job so far (0: not drafted) */
  int64_t draft_accepted;    /* of them, ids the target accepted */
  char error[256];           /* DF_SCHED_ERROR: one line */
} df_sched_news;

/* Take the text released since the last take: *text is malloc'd (caller frees) with *len
 * bytes of complete UTF-8 characters, or NULL with *len 0 when there is none. Fills *news.
 * Never blocks. Returns 0, always. */
int df_sched_job_take(df_sched_job *j, char **text, size_t *len, df_sched_news *news);

/* Take the logprob entries recorded since the last call (a request with logprobs): *lp is
 * malloc'd (caller frees) with *n entries in generation order, or NULL with *n 0. An entry is
 * recorded when its id is sampled, so it may precede the text of that id (held back by a stop
 * string or an incomplete UTF-8 character); the id that completes a stop string is recorded
 * too, end-of-sequence ids are not. Never blocks. Returns 0, or -1 when out of memory. */
int df_sched_job_take_logprobs(df_sched_job *j, df_sched_logprob **lp, size_t *n);

/* Ask the scheduler to drop the job: a queued job never starts, a running one is removed
 * before the next step (its slot is free for the next request). Idempotent. */
void df_sched_job_cancel(df_sched_job *j);

/* Give up the caller's handle (cancels the job if it is still running). NULLs *j; NULL-safe. */
void df_sched_job_release(df_sched_job **j);

typedef struct df_sched_stats {
  int64_t queued;            /* waiting for a slot */
  int64_t running;           /* in a slot */
  int64_t max_seqs, max_queue;
  int64_t prompt_tokens;     /* prompt ids fed, total */
  int64_t completion_tokens; /* ids generated, total */
  int64_t steps;             /* batched forwards */
  int64_t step_rows;         /* rows over all steps */
  int64_t finished[5];       /* jobs finished, by df_sched_finish */
  double busy_s;             /* seconds spent in steps (draft and target forwards) */
  int64_t draft_rounds;      /* verifications of drafted tokens */
  int64_t drafted, accepted; /* draft tokens proposed / accepted */
  int64_t block_drafted, block_accepted; /* of them, the block drafter's */
  bool drafting;             /* a draft model is in use */
  double gen_tok_s;          /* generated ids per second over the last few seconds */
  int64_t cached_tokens;     /* prompt ids taken from the prefix cache, total */
} df_sched_stats;

df_sched_stats df_sched_get_stats(df_sched *s);

#endif
