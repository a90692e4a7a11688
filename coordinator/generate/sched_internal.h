/* coordinator/generate/sched_internal.h — the scheduler's and its jobs' state, shared by
 * coordinator/generate/sched.c (thread, batching, jobs) and sched_draft.c (drafting).
 * Private to coordinator/generate/sched*.c.
 */
#ifndef DF_COORD_SCHED_INTERNAL_H
#define DF_COORD_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "coordinator/generate/json_grammar.h"
#include "coordinator/generate/sched_types.h"
#include "coordinator/generate/sched_slots.h"
#include "coordinator/generate/sched_stop.h"
#include "coordinator/generate/text_draft.h"
#include "engine/draft/dspark.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"

/* a sequence's first drafting rest and the longest, in generated tokens (as `run`'s) */
#define DF_SCHED_REST_FIRST 64
#define DF_SCHED_REST_MAX 1024

struct df_sched_job {
  /* fixed at submit */
  int32_t *prompt;
  int64_t n_prompt, max_tokens;
  df_sampler_params sp;
  bool ignore_eos;
  char *stop[8];
  int n_stop;
  /* shared with the caller, under mu */
  pthread_mutex_t mu;
  int pipe[2];      /* [0] polled by the caller, [1] written by the scheduler */
  bool signalled;   /* a byte is in the pipe */
  df_jsg_run **runs;  /* [n_runs] live grammar runs (NULL when unconstrained) */
  int n_runs;
  df_jsg **grammars;  /* [n_grammars] the request's (owned) */
  int n_grammars;
  const df_jsg_vocab *gvocab;
  float *gscratch;    /* [V] with several runs: one run's mask */
  uint8_t *gok;       /* [V] with several runs: the union */
  int32_t keep_special[DF_TOK_STREAM_KEEP_MAX];
  int n_keep_special;
  bool logprobs;    /* record df_sched_logprob entries */
  int top_logprobs;
  df_sched_logprob *lp; /* recorded entries not yet taken (j->mu) */
  size_t lp_len, lp_cap;
  char *out;        /* released text not yet taken */
  size_t out_len, out_cap;
  df_sched_news news;
  atomic_bool cancel;
  atomic_int refs;
  /* scheduler thread only */
  df_sched_job *next; /* queue / running list */
  int slot;
  int64_t fed;        /* prompt ids in the KV cache */
  int32_t last;       /* last sampled id, fed at the next step */
  int64_t generated;
  int32_t *seq;       /* [n_prompt + max_tokens] committed ids: prompt, then generated */
  int64_t len;
  bool no_draft;      /* drafting did not pay for this sequence */
  bool chat;          /* df_sched_req.chat */
  bool failed;        /* a forward failed: the slot's cache is not kept for prefixes */
  int64_t ddrafted, daccepted; /* the answer's drafting (usage.speculative) */
  /* drafting that does not pay (acceptance < 1/4 over 8 rounds) rests: the target alone until
   * `generated` reaches rest_until, then it is measured again (wrounds.. count since then);
   * each rest twice the last, DF_SCHED_REST_FIRST .. DF_SCHED_REST_MAX tokens */
  int64_t rest_until, rest_len, wrounds, wdrafted, waccepted;
  df_text_draft *xd;  /* a cross-tokenizer draft's state for this request (df_sched_opts.draft_tok) */
  int64_t x_committed;/* ids of seq given to xd */
  df_sampler *smp;
  df_tok_stream *dec;
  df_sched_stop stopper;
};

struct df_sched {
  df_model *m;
  const df_tok *tok;
  df_sched_opts o;
  int64_t V;
  const df_gen_config *gcfg;
  int32_t chat_stop[4]; /* the chat format's end-of-turn ids beyond gcfg's (df_chat_stop_ids) */
  int n_chat_stop;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;
  df_sched_job *qhead, *qtail; /* waiting, FIFO */
  int64_t n_queued, n_running;
  df_sched_job *running[DF_MODEL_MAX_BATCH]; /* scheduler thread only */
  int n_run;
  df_slot_pool pool;
  df_sched_stats st;
  df_model *draft;   /* NULL = no drafting with a draft model */
  df_dspark *block;  /* NULL = no drafting with a block drafter */
  int64_t bctx;      /* the block drafter's context capacity per sequence (tokens) */
  int64_t bwidth;    /* floats per captured row (df_dspark_row_width) */
  float *cap;        /* [cap_rows, bwidth] captured rows of the step's sequences */
  int64_t cap_rows;
  double win_t0;     /* start of the tok/s window */
  int64_t win_tokens;
};

#endif
