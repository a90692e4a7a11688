/* coordinator/generate/sched_slots.h — the serving scheduler's sequence slots and its prefix
 * cache.
 *
 * Owns: one slot per sequence (the target's KV cache, the draft's, their logits buffers), the
 * ids each idle slot's cache still holds from the sequence that last used it, and — for models
 * with a recurrent state (Kimi Linear / K3's KDA layers) — a snapshot of that state at the end
 * of the sequence's prompt. A new sequence takes the idle slot whose cache shares the longest
 * usable prefix with its prompt and starts prefill after it:
 *   * an attention cache (GQA, MLA) is cut back to the common prefix (df_kv_truncate: only the
 *     length moves);
 *   * a recurrent state can be cut back only a bounded distance (df_kv_can_truncate); beyond
 *     that the snapshot taken at the end of the previous prompt is restored when the new
 *     prompt extends that whole prompt — the message boundary of a chat: turn n+1's prompt is
 *     turn n's prompt, the answer and the new messages.
 * Every kernel is batch- and chunk-invariant (engine/model.h), so the reused positions hold
 * bitwise the state a cold prefill of the same ids computes, and the output is identical to a
 * cold run. The draft's cache keeps at most the reused prefix (df_kv_truncate_or_reset; the
 * scheduler's draft catches up from its own length).
 * Idle slots beyond the scheduler's max_seqs working slots are kept while their bytes (KV
 * caches, snapshots, buffers) fit `budget`; the least recently used is freed first.
 * Does not own: the models (borrowed), the jobs, the batched step (sched.c).
 * Threads: the scheduler thread only.
 */
#ifndef DF_COORD_SCHED_SLOTS_H
#define DF_COORD_SCHED_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kv_cache.h"
#include "engine/model.h"

/* Cached ids past a shared prefix worth keeping: a slot holding more is copied from, not cut. */
#define DF_SLOTS_KEEP_TAIL 16

/* df_slot.dkind: a draft model's KV cache, a block drafter's context cache. */
#define DF_SLOT_DRAFT_MODEL 1
#define DF_SLOT_DRAFT_BLOCK 2

/* Most slots: DF_MODEL_MAX_BATCH working ones plus idle ones kept for their prefixes. */
#define DF_SLOTS_MAX (DF_MODEL_MAX_BATCH + 64)

typedef struct df_slot {
  df_kv_cache *kv;  /* the target's cache (ctx tokens), allocated on first use */
  float *logits;    /* [V] fp32 */
  df_kv_cache *dkv; /* the draft's cache (ctx tokens), allocated when the slot first drafts;
                       with a block drafter, its context cache of target rows */
  int dkind;        /* what dkv is: 0 none, DF_SLOT_DRAFT_MODEL, DF_SLOT_DRAFT_BLOCK */
  float *vlogits;   /* [DF_SCHED_K_MAX + 1, V] verify logits */
  float *dlogits;   /* [V] draft logits */
  bool busy;        /* a running sequence owns it */
  int32_t *ids;     /* [ctx] the ids whose state kv holds: the first kv->len are valid once the
                       slot is idle */
  df_kv_snap *snap; /* recurrent models: the state at the end of the last prompt, or NULL */
  double used;      /* when it last became idle (monotonic seconds), for LRU eviction */
} df_slot;

typedef struct df_slot_pool {
  df_model *m;       /* target (borrowed) */
  int64_t ctx, V;    /* tokens per cache; logits width */
  int working;       /* slots kept whatever their bytes (the scheduler's max_seqs) */
  int64_t budget;    /* bytes of idle slots beyond `working` that may be kept; <= 0 = none */
  bool reuse;        /* start new sequences from cached prefixes */
  bool recurrent;    /* the target's cache has a recurrent state: snapshot prompts */
  bool host;         /* caches in host memory (the engine's own kernels): prefixes can be
                        copied between slots */
  /* Makes slot sl's drafting state (dkv and its logits buffers, empty) when a prefix is
   * copied into sl from a slot that has one of that kind (dkind), so the draft's prefix is
   * copied too (a block drafter's context cannot be rebuilt from ids). Returns 0, or -1 (the
   * copy then skips the draft's prefix). NULL: no drafting. Set by the scheduler. */
  int (*draft_init)(void *ctx, df_slot *sl, int kind);
  void *draft_ctx;
  df_slot slots[DF_SLOTS_MAX];
  int64_t reused_tokens; /* prompt tokens taken from caches, total */
  int64_t evictions;     /* idle slots freed for the budget */
} df_slot_pool;

/* Initialise a pool for target m (borrowed) with `working` slots always kept (1..
 * DF_MODEL_MAX_BATCH), `budget` bytes for more idle ones and prefix reuse on or off. Never
 * fails (nothing is allocated until a slot is taken). */
void df_slot_pool_init(df_slot_pool *p, df_model *m, int64_t ctx, int working, int64_t budget,
                       bool reuse);

/* Free every slot's caches and buffers. */
void df_slot_pool_free(df_slot_pool *p);

/* Take a slot for a sequence whose prompt is prompt[0..n) (n >= 1): the idle slot with the
 * longest usable cached prefix (at most n - 1 ids, so the last prompt id is always fed and
 * gives logits), else an unallocated one, else the least recently used idle one. When taking
 * that slot would cut more than DF_SLOTS_KEEP_TAIL cached ids past the prefix (another
 * conversation that shares only a system prompt, say) and another slot can be had, the prefix
 * is copied into that one instead (attention K/V rows; a recurrent state only from the
 * prompt-end snapshot), so both conversations stay cached. The slot's
 * target cache then holds exactly *reused ids of the prompt (0 = a cold start) and its draft
 * cache at most that many. Returns the slot index, or -1 with a message: no slot free (the
 * caller admits at most `working` sequences, so this is a bug), cache allocation failed
 * (the message gives the bytes), out of memory. */
int df_slot_take(df_slot_pool *p, const int32_t *prompt, int64_t n, int64_t *reused, char *err,
                 size_t errlen);

/* The sequence in slot i has fed its whole prompt (prompt[0..n), n == kv->len): on a recurrent
 * model keep a snapshot of the state there (replacing the slot's previous one). Failure only
 * loses that reuse (the snapshot stays NULL); never an error for the sequence. */
void df_slot_prompt_done(df_slot_pool *p, int i);

/* The sequence in slot i is over: its ids seq[0..n) (n >= kv->len; the first kv->len are what
 * the cache holds) are kept for later prefixes, and idle slots over the budget are freed,
 * least recently used first. */
void df_slot_release(df_slot_pool *p, int i, const int32_t *seq, int64_t n);

#endif
