/* coordinator/generate/sched_draft.h — the serving scheduler's drafting (sched_draft.c).
 * Private to coordinator/generate/sched*.c; all run on the scheduler thread.
 */
#ifndef DF_COORD_SCHED_DRAFT_H
#define DF_COORD_SCHED_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/generate/sched_types.h"
#include "coordinator/generate/sched_slots.h"

/* Drafting with one kind (DF_SLOT_DRAFT_MODEL / _BLOCK) off for good, with one log line. */
void df_sched__draft_off(df_sched *s, int kind, const char *why);

/* df_slot_pool.draft_init (ctx is the scheduler): slot sl's drafting state of that kind,
 * empty; -1 when there is none (the kind is off, or a draft with its own tokenizer, whose
 * state belongs to the request). */
int df_sched__pool_draft_init(void *ctx, df_slot *sl, int kind);

/* Block drafter: whether job j's slot keeps its drafter context in step with its target cache
 * (then the step captures j's rows); a lagging context stops j's drafting. */
bool df_sched__block_tracks(df_sched *s, df_sched_job *j);

/* Block drafter: n captured rows [n, row width] fp32 of job j appended to its slot's context. */
void df_sched__block_append(df_sched *s, df_sched_job *j, const float *rows, int64_t n);

/* Block drafter proposals for who[0..n) whose contexts are in step (track[b]): k[b] ids into
 * dtok[b] (0 where nothing is proposed). */
void df_sched__propose_block(df_sched *s, df_sched_job **who, int n, const bool *track, int *k,
                             int32_t (*dtok)[DF_SCHED_K_MAX]);

/* Draft model proposals (same vocabulary: forwards batched across sequences; its own
 * tokenizer: through text, one sequence at a time) for the greedy decoding sequences in
 * who[0..n): k[b] ids into dtok[b] (0 where nothing is proposed). */
void df_sched__propose(df_sched *s, df_sched_job **who, int n, int *k,
                       int32_t (*dtok)[DF_SCHED_K_MAX]);

#endif
