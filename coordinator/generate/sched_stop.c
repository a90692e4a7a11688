/* coordinator/generate/sched_stop.c — stop strings over streamed text; see sched_stop.h. */
#define _GNU_SOURCE
#include "coordinator/generate/sched_stop.h"

#include <stdlib.h>
#include <string.h>

void df_sched_stop_init(df_sched_stop *s, const char *const *stops, int n) {
  memset(s, 0, sizeof *s);
  s->stops = stops;
  s->n = n;
}

void df_sched_stop_free(df_sched_stop *s) {
  free(s->held);
  free(s->out);
  memset(s, 0, sizeof *s);
}

static int reserve(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  char *b = realloc(*buf, c);
  if (!b) return -1;
  *buf = b;
  *cap = c;
  return 0;
}

static void release(df_sched_stop *s, size_t n) {
  memcpy(s->out, s->held, n);
  s->out_len = n;
  memmove(s->held, s->held + n, s->len - n);
  s->len -= n;
}

int df_sched_stop_feed(df_sched_stop *s, const char *text, size_t len, const char **out,
                       size_t *out_len) {
  *out = "";
  *out_len = 0;
  if (s->matched) return 1;
  if (reserve(&s->held, &s->cap, s->len + len + 1) || reserve(&s->out, &s->out_cap, s->len + len + 1))
    return -1;
  memcpy(s->held + s->len, text, len);
  s->len += len;
  /* earliest complete occurrence of any stop string */
  size_t best = (size_t)-1;
  for (int i = 0; i < s->n; i++) {
    const char *p = memmem(s->held, s->len, s->stops[i], strlen(s->stops[i]));
    if (p && (size_t)(p - s->held) < best) best = (size_t)(p - s->held);
  }
  if (best != (size_t)-1) {
    release(s, best);
    s->len = 0;
    s->matched = true;
    *out = s->out;
    *out_len = s->out_len;
    return 1;
  }
  /* hold back the longest tail that is a proper prefix of some stop string */
  size_t hold = 0;
  for (int i = 0; i < s->n; i++) {
    size_t sl = strlen(s->stops[i]);
    size_t k = sl - 1 < s->len ? sl - 1 : s->len;
    for (; k > hold; k--)
      if (!memcmp(s->held + s->len - k, s->stops[i], k)) break;
    if (k > hold) hold = k;
  }
  release(s, s->len - hold);
  *out = s->out;
  *out_len = s->out_len;
  return 0;
}

void df_sched_stop_flush(df_sched_stop *s, const char **out, size_t *out_len) {
  *out = "";
  *out_len = 0;
  if (s->matched || !s->len) return;
  if (reserve(&s->out, &s->out_cap, s->len)) return; /* cannot happen: out_cap >= cap */
  release(s, s->len);
  *out = s->out;
  *out_len = s->out_len;
}
