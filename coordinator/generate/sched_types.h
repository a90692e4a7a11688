/* coordinator/generate/sched_types.h — the serving scheduler's types and limits (options,
 * requests, news, statistics, logprob entries), apart from its functions
 * (coordinator/generate/sched.h), so that the scheduler's parts (sched.c, sched_draft.c) share
 * them without depending on each other.
 */
#ifndef DF_COORD_SCHED_TYPES_H
#define DF_COORD_SCHED_TYPES_H

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

typedef struct df_sched_news {
  df_sched_finish finish;    /* DF_SCHED_RUNNING until the job is over */
  int64_t prompt_tokens;     /* ids of the prompt */
  int64_t completion_tokens; /* ids generated so far (including an end-of-sequence id) */
  int64_t cached_tokens;     /* prompt ids taken from the prefix cache (not prefilled) */
  int64_t draft_tokens;      /* draft ids proposed for this job so far (0: not drafted) */
  int64_t draft_accepted;    /* of them, ids the target accepted */
  char error[256];           /* DF_SCHED_ERROR: one line */
} df_sched_news;

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

#endif
