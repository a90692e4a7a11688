/* transport/lograte.c — rate limiting of repeated log lines; see lograte.h. */
#include "transport/lograte.h"

#include <assert.h>
#include <string.h>

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h ? h : 1; /* 0 marks a free slot */
}

void df_proto_lograte_init(df_proto_lograte *r, int64_t window_ms) {
  assert(window_ms > 0);
  memset(r, 0, sizeof *r);
  r->window_ms = window_ms;
}

bool df_proto_lograte_admit(df_proto_lograte *r, const char *line, int64_t now_ms,
                            uint64_t *held) {
  uint64_t h = fnv1a64(line);
  df_proto_lograte_slot *s = NULL, *victim = &r->slot[0];
  for (int i = 0; i < DF_PROTO_LOGRATE_SLOTS; i++) {
    df_proto_lograte_slot *x = &r->slot[i];
    if (x->hash == h) {
      s = x;
      break;
    }
    if (!x->hash) {
      if (victim->hash) victim = x; /* a free slot beats any used one */
    } else if (victim->hash && x->seen_ms < victim->seen_ms) {
      victim = x;
    }
  }
  if (held) *held = 0;
  if (s && now_ms - s->written_ms < r->window_ms) {
    s->held++;
    s->seen_ms = now_ms;
    return false;
  }
  if (!s) {
    s = victim;
    s->hash = h;
    s->held = 0;
  }
  if (held) *held = s->held;
  s->held = 0;
  s->written_ms = s->seen_ms = now_ms;
  return true;
}
