/* coordinator/generate/sched.h — the serving scheduler: one thread owns the model and every
 * sequence's state, and runs continuous batching over the requests it is given.
 *
 * Owns: the request queue and admission (at most max_seqs sequences decode together, at most
 * max_queue more wait), one KV cache slot per running sequence (allocated on first use and
 * reused), one sampler per request, the batched step (every running sequence's next rows —
 * a prompt chunk or its last sampled token — in ONE df_model_forward_batch), detokenization
 * (engine/text/tokenizer.h's stream decoder) and stop strings (sched_stop.h), cancellation, and
 * the serving statistics. Its types (options, requests, news, statistics) are in
 * sched_types.h, its drafting (which drafter, the proposals) in sched_draft.c.
 * Does not own: HTTP, request parsing, tokenizing prompts (the caller gives token ids), the
 * model and tokenizer (borrowed; they must outlive the scheduler).
 *
 * Exactness: each request's tokens are those `deltafin run --no-draft` produces for the same
 * prompt ids and sampler settings. The batched forward gives every sequence bitwise the
 * logits it would get alone (engine/model.h), the prompt is fed in chunks (also invariant),
 * and each request's sampler is seeded from its own seed and chooses each token by its
 * position (engine/sampler.h), exactly as the target-alone loop of
 * coordinator/generate/spec.c does. Which other requests run at the same time has no effect
 * on a request's output.
 *
 * Speculative decoding (with a draft model, while at most draft_max_seqs sequences run):
 * sequences (greedy or sampled; not grammar-constrained ones) get k draft tokens each (the
 * draft's forwards batched across them like the target's, each proposal the request
 * sampler's position-keyed choice), verified in the same batched target forward as everyone
 * else's rows; a draft token is kept while it equals the target's own choice at its position,
 * then the target's own token follows, and both caches roll back (coordinator/generate/spec.h's
 * rule). The target's logits in a verify row are bitwise those of one-token decoding, so the
 * output is identical to the target alone with the request's seed. A sequence whose drafts
 * are mostly rejected (acceptance < 1/4 over 8 rounds) rests: the target alone for 64 tokens,
 * then drafting is measured again; each rest twice the last, at most 1024 tokens.
 *
 * With a block drafter (engine/draft/dspark.h) (for chat requests when there is also a draft
 * model, for every request otherwise): the target's forwards
 * capture the drafter's hidden-state rows of drafting sequences (df_model_set_capture), each
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
#include "coordinator/generate/sched_types.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"

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

/* Queue a request. Returns 0 with *job (release with df_sched_job_release), or -1 with
 * *status and a message: 429 when max_seqs + max_queue requests are already held, 503 when
 * shutting down, 400 for a request outside the limits above (the message gives the
 * numbers), 500 out of memory. */
int df_sched_submit(df_sched *s, const df_sched_req *r, df_sched_job **job, int *status,
                    char *err, size_t errlen);

/* A file descriptor that polls readable (POLLIN) when the job has news (text or its
 * finish) not yet taken. Owned by the job. */
int df_sched_job_fd(const df_sched_job *j);

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

df_sched_stats df_sched_get_stats(df_sched *s);

#endif
