/* transport/lograte.h — rate limiting of repeated log lines, for both ends of the cluster
 * (df-node and the coordinator's cluster manager), whose retry loops would otherwise write the
 * same line several times a second.
 *
 * Owns: the decision whether one formatted line is written now or held back, and the count of
 * held-back copies. A line identical to one written less than `window_ms` ago is held back;
 * the next copy written after the window reports how many were held. Lines are compared
 * whole (exact bytes), through a 64-bit hash, in a small table of the most recently seen
 * distinct lines (least recently seen evicted). Does not own: formatting, the output stream,
 * the clock (the caller passes monotonic milliseconds), locking — not thread-safe; one owner
 * thread, or the caller serialises.
 */
#ifndef DF_TRANSPORT_LOGRATE_H
#define DF_TRANSPORT_LOGRATE_H

#include <stdbool.h>
#include <stdint.h>

#define DF_PROTO_LOGRATE_SLOTS 32 /* distinct lines remembered */
#define DF_PROTO_LOGRATE_WINDOW_MS 30000 /* the window both ends use */

typedef struct df_proto_lograte_slot {
  uint64_t hash;      /* FNV-1a 64 of the line; 0 = free slot */
  int64_t written_ms; /* when the line was last written */
  int64_t seen_ms;    /* when it was last offered (for eviction) */
  uint64_t held;      /* copies held back since it was last written */
} df_proto_lograte_slot;

typedef struct df_proto_lograte {
  int64_t window_ms;                                  /* > 0 */
  df_proto_lograte_slot slot[DF_PROTO_LOGRATE_SLOTS]; /* the remembered lines */
} df_proto_lograte;

/* Start with nothing remembered; window_ms > 0 (milliseconds). */
void df_proto_lograte_init(df_proto_lograte *r, int64_t window_ms);

/* Offer one line (NUL-terminated, without its newline) at now_ms (a monotonic clock in
 * milliseconds; never decreasing between calls). Returns true when the caller should write
 * it, with *held (may be NULL) set to the copies held back since it was last written (0 the
 * first time), which the caller should mention; false when it is held back (and counted).
 * Never fails and allocates nothing. */
bool df_proto_lograte_admit(df_proto_lograte *r, const char *line, int64_t now_ms,
                            uint64_t *held);

#endif
