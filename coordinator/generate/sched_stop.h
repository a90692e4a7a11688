/* coordinator/generate/sched_stop.h — stop strings over streamed text: matched across token
 * boundaries, never emitted.
 *
 * Owns: holding back the tail of the generated text that could still become a stop string,
 * and cutting the text at the earliest occurrence of any stop string. Text comes in as whole
 * UTF-8 characters (engine/text/tokenizer.h's stream decoder); because stop strings are valid UTF-8
 * too, a held-back tail always starts at a character boundary, so released text never ends
 * inside a character. Does not own: decoding ids to text, the stop strings' memory.
 */
#ifndef DF_COORD_SCHED_STOP_H
#define DF_COORD_SCHED_STOP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct df_sched_stop {
  const char *const *stops; /* [n] borrowed, NUL-terminated, non-empty */
  int n;
  char *held;               /* text not yet released, len bytes */
  size_t len, cap;
  char *out;                /* released text of the last call, out_len bytes */
  size_t out_len, out_cap;
  bool matched;             /* a stop string was found: nothing more is released */
} df_sched_stop;

/* Start matching `n` stop strings (borrowed for the matcher's lifetime; n may be 0). */
void df_sched_stop_init(df_sched_stop *s, const char *const *stops, int n);

/* Free the buffers and zero the matcher. */
void df_sched_stop_free(df_sched_stop *s);

/* Append `len` bytes of newly decoded text. On return *out / *out_len hold the text that can
 * be released now (owned by the matcher, valid until the next call). Returns 1 when a stop
 * string was completed (the released text is everything before it; the stop string and
 * anything after it are dropped, and later calls release nothing), 0 otherwise, -1 when out
 * of memory (nothing released, state unchanged). */
int df_sched_stop_feed(df_sched_stop *s, const char *text, size_t len, const char **out,
                       size_t *out_len);

/* End of the text: release everything still held (nothing after a match). */
void df_sched_stop_flush(df_sched_stop *s, const char **out, size_t *out_len);

#endif
