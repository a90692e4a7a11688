/* engine/text/reasoning.c — reasoning and content of generated text (see reasoning.h).
 *
 * A family is a set of states, each with the markers that end or change it:
 *   S_START   (Qwen3, K2 Thinking; AUTO) whitespace, then "<think>" opens S_REASON; anything
 *             else makes the rest content (S_CONTENT, nothing cut)
 *   S_REASON  reasoning until the family's end marker ("</think>"; K3 "<|close|>think<|sep|>")
 *   S_CONTENT content to the end (Qwen3, K2 Thinking)
 *   S_RESP    (K3) content until "<|close|>response<|sep|>"
 *   S_OUTSIDE (K3) between elements: whitespace runs and the message's close are dropped, the
 *             response element's open goes to S_RESP, the tools element's open to S_TOOLS,
 *             other text is content
 *   S_TOOLS   (K3) the tools element, content verbatim through its close
 * `in` holds what is not decided: a suffix that may start a marker. `ws` holds a whitespace run
 * whose fate depends on what follows (S_START, S_OUTSIDE); `nl` counts line feeds held at the
 * end of Qwen3's reasoning.
 */
#include "engine/text/reasoning.h"
#include "engine/text/tokenizer_util.h"

#include <stdlib.h>
#include <string.h>

enum { S_START, S_REASON, S_CONTENT, S_RESP, S_OUTSIDE, S_TOOLS };

#define K3_CLOSE_THINK "<|close|>think<|sep|>"
#define K3_OPEN_RESP "<|open|>response<|sep|>"
#define K3_CLOSE_RESP "<|close|>response<|sep|>"
#define K3_CLOSE_MSG "<|close|>message<|sep|>"
#define K3_OPEN_TOOLS "<|open|>tools<|sep|>"
#define K3_CLOSE_TOOLS "<|close|>tools<|sep|>"

typedef struct evrec {
  df_reasoning_ev_kind kind;
  size_t off, len; /* into the arena */
} evrec;

struct df_reasoning_parser {
  df_chat_family family;
  bool qwen;        /* Qwen3's line-feed cuts */
  bool finished, dead;
  int st;
  bool lead;        /* cut line feeds at the start of the current channel (Qwen3) */
  size_t nl;        /* line feeds held at the end of the reasoning (Qwen3) */
  df_tok_buf in, ws, arena, reasoning, content;
  evrec *ev;
  size_t n_ev, cap_ev;
  df_reasoning_ev *pub;
  size_t cap_pub;
};

bool df_reasoning_family(df_chat_family family) {
  return family == DF_CHAT_QWEN3 || family == DF_CHAT_KIMI_K2_THINKING ||
         family == DF_CHAT_KIMI_K3;
}

const char *const *df_reasoning_markers(df_chat_family family) {
  static const char *const think[] = {"<think>", "</think>", NULL};
  static const char *const xtml[] = {"<|open|>", "<|close|>", "<|sep|>", NULL};
  static const char *const none[] = {NULL};
  if (family == DF_CHAT_QWEN3 || family == DF_CHAT_KIMI_K2_THINKING) return think;
  if (family == DF_CHAT_KIMI_K3) return xtml;
  return none;
}

df_reasoning_parser *df_reasoning_parser_new(df_chat_family family, df_reasoning_start start) {
  if (!df_reasoning_family(family)) return NULL;
  df_reasoning_parser *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->family = family;
  p->qwen = family == DF_CHAT_QWEN3;
  if (family == DF_CHAT_KIMI_K3) p->st = start == DF_REASONING_IN ? S_REASON : S_RESP;
  else p->st = start == DF_REASONING_IN ? S_REASON : start == DF_REASONING_OUT ? S_CONTENT : S_START;
  p->lead = p->qwen && p->st == S_REASON;
  if (df_tok__buf_put(&p->in, "", 0) != 0 || df_tok__buf_put(&p->reasoning, "", 0) != 0 ||
      df_tok__buf_put(&p->content, "", 0) != 0 || df_tok__buf_put(&p->ws, "", 0) != 0) {
    df_reasoning_parser_destroy(&p);
    return NULL;
  }
  return p;
}

void df_reasoning_parser_destroy(df_reasoning_parser **pp) {
  if (!pp || !*pp) return;
  df_reasoning_parser *p = *pp;
  df_tok__buf_free(&p->in);
  df_tok__buf_free(&p->ws);
  df_tok__buf_free(&p->arena);
  df_tok__buf_free(&p->reasoning);
  df_tok__buf_free(&p->content);
  free(p->ev);
  free(p->pub);
  free(p);
  *pp = NULL;
}

/* Release text[0..len) to channel `kind`: joined to the last event when it has that kind. */
static int emit(df_reasoning_parser *p, df_reasoning_ev_kind kind, const char *text, size_t len) {
  if (!len) return 0;
  df_tok_buf *total = kind == DF_REASONING_EV_REASONING ? &p->reasoning : &p->content;
  if (df_tok__buf_put(total, text, len) != 0) return -1;
  if (!(p->n_ev && p->ev[p->n_ev - 1].kind == kind)) {
    /* the last event's text ends with a NUL (the arena keeps one after its last byte) */
    if (p->n_ev && df_tok__buf_put(&p->arena, "", 1) != 0) return -1;
    if (p->n_ev == p->cap_ev) {
      size_t cap = p->cap_ev ? 2 * p->cap_ev : 8;
      evrec *e = realloc(p->ev, cap * sizeof *e);
      if (!e) return -1;
      p->ev = e;
      p->cap_ev = cap;
    }
    p->ev[p->n_ev++] = (evrec){kind, p->arena.n, 0};
  }
  if (df_tok__buf_put(&p->arena, text, len) != 0) return -1;
  p->ev[p->n_ev - 1].len += len;
  return 0;
}

static bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The markers that matter in the current state, NULL-terminated. */
static const char *const *markers_of(const df_reasoning_parser *p) {
  static const char *const open_think[] = {"<think>", NULL};
  static const char *const close_think[] = {"</think>", NULL};
  static const char *const k3_reason[] = {K3_CLOSE_THINK, K3_CLOSE_MSG, NULL};
  static const char *const k3_resp[] = {K3_CLOSE_RESP, K3_CLOSE_MSG, NULL};
  static const char *const k3_outside[] = {K3_OPEN_RESP, K3_CLOSE_MSG, K3_OPEN_TOOLS, NULL};
  static const char *const k3_tools[] = {K3_CLOSE_TOOLS, NULL};
  static const char *const none[] = {NULL};
  bool k3 = p->family == DF_CHAT_KIMI_K3;
  switch (p->st) {
  case S_START: return open_think;
  case S_REASON: return k3 ? k3_reason : close_think;
  case S_RESP: return k3_resp;
  case S_OUTSIDE: return k3_outside;
  case S_TOOLS: return k3_tools;
  default: return none;
  }
}

/* Plain text (no marker in it) of the current state. */
static int plain(df_reasoning_parser *p, const char *t, size_t n) {
  switch (p->st) {
  case S_START: {
    /* whitespace waits for "<think>"; anything else: the whole answer is content */
    size_t i = 0;
    while (i < n && is_ws(t[i])) i++;
    if (df_tok__buf_put(&p->ws, t, i) != 0) return -1;
    if (i == n) return 0;
    p->st = S_CONTENT;
    if (emit(p, DF_REASONING_EV_CONTENT, p->ws.p, p->ws.n) != 0) return -1;
    p->ws.n = 0;
    return emit(p, DF_REASONING_EV_CONTENT, t + i, n - i);
  }
  case S_REASON:
  case S_CONTENT:
  case S_RESP: {
    df_reasoning_ev_kind k = p->st == S_REASON ? DF_REASONING_EV_REASONING : DF_REASONING_EV_CONTENT;
    if (!p->qwen) return emit(p, k, t, n);
    if (p->lead) {
      while (n && *t == '\n') t++, n--;
      if (!n) return 0;
      p->lead = false;
    }
    if (p->st != S_REASON) return emit(p, k, t, n);
    size_t keep = n;
    while (keep && t[keep - 1] == '\n') keep--;
    if (keep) {
      for (; p->nl; p->nl--)
        if (emit(p, k, "\n", 1) != 0) return -1;
      if (emit(p, k, t, keep) != 0) return -1;
    }
    p->nl += n - keep;
    return 0;
  }
  case S_OUTSIDE: {
    /* a whitespace-only run between elements is dropped; other text is content, verbatim */
    size_t i = 0;
    while (i < n && is_ws(t[i])) i++;
    if (i == n) return df_tok__buf_put(&p->ws, t, n);
    if (emit(p, DF_REASONING_EV_CONTENT, p->ws.p, p->ws.n) != 0) return -1;
    p->ws.n = 0;
    size_t end = n;
    while (end > i && is_ws(t[end - 1])) end--;
    if (emit(p, DF_REASONING_EV_CONTENT, t, end) != 0) return -1;
    return df_tok__buf_put(&p->ws, t + end, n - end);
  }
  default: /* S_TOOLS */
    return emit(p, DF_REASONING_EV_CONTENT, t, n);
  }
}

/* A marker of the current state: the state it leads to. */
static int marker(df_reasoning_parser *p, const char *m) {
  size_t ml = strlen(m);
  p->ws.n = 0; /* S_START: whitespace before <think>; S_OUTSIDE: between elements */
  switch (p->st) {
  case S_START:
    p->st = S_REASON;
    p->lead = p->qwen;
    return 0;
  case S_REASON: /* K3: the message's close also ends the element it stands in */
    p->nl = 0;
    p->st = p->family == DF_CHAT_KIMI_K3 ? S_OUTSIDE : S_CONTENT;
    p->lead = p->qwen;
    return 0;
  case S_RESP:
    p->st = S_OUTSIDE;
    return 0;
  case S_OUTSIDE:
    if (!strcmp(m, K3_OPEN_RESP)) p->st = S_RESP;
    if (!strcmp(m, K3_OPEN_TOOLS)) {
      p->st = S_TOOLS;
      return emit(p, DF_REASONING_EV_CONTENT, m, ml);
    }
    return 0; /* the message's close */
  default: /* S_TOOLS */
    p->st = S_OUTSIDE;
    return emit(p, DF_REASONING_EV_CONTENT, m, ml);
  }
}

/* Where marker m next occurs in `in` at or after pos (SIZE_MAX: nowhere). Within one run()
 * `in` does not change and pos only grows, so each marker's search resumes where it stopped:
 * the work of one run() is linear in `in` whatever the markers are. */
typedef struct seen {
  const char *m;
  size_t at; /* next occurrence found, SIZE_MAX = none after `from` */
} seen;

static size_t find(const df_tok_buf *in, seen *c, int *nc, const char *m, size_t pos) {
  int i = 0;
  while (i < *nc && c[i].m != m) i++;
  if (i == *nc) c[(*nc)++] = (seen){m, 0};
  else if (c[i].at == SIZE_MAX || c[i].at >= pos) return c[i].at;
  const char *h = strstr(in->p + pos, m);
  c[i].at = h ? (size_t)(h - in->p) : SIZE_MAX;
  return c[i].at;
}

/* Decide what `in` allows; at_end: nothing more comes. */
static int run(df_reasoning_parser *p, bool at_end) {
  seen cache[8];
  int nc = 0;
  size_t pos = 0;
  for (;;) {
    const char *const *ms = markers_of(p);
    const char *bm = NULL;
    size_t best = SIZE_MAX;
    for (int i = 0; ms[i]; i++) {
      size_t at = find(&p->in, cache, &nc, ms[i], pos);
      if (at < best) best = at, bm = ms[i];
    }
    if (bm) {
      int st = p->st;
      if (plain(p, p->in.p + pos, best - pos) != 0) return -1;
      if (p->st != st) { /* the text before it decided the state (S_START): look again */
        pos = best;
        continue;
      }
      if (marker(p, bm) != 0) return -1;
      pos = best + strlen(bm);
      continue;
    }
    /* no marker: hold the longest suffix that may still start one */
    size_t n = p->in.n - pos, hold = 0;
    if (!at_end) {
      for (int i = 0; ms[i]; i++) {
        size_t ml = strlen(ms[i]);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > hold; k--)
          if (!memcmp(p->in.p + p->in.n - k, ms[i], k)) {
            hold = k;
            break;
          }
      }
    }
    if (plain(p, p->in.p + pos, n - hold) != 0) return -1;
    memmove(p->in.p, p->in.p + p->in.n - hold, hold);
    p->in.n = hold;
    p->in.p[hold] = 0;
    return 0;
  }
}

/* The events of this call, published. */
static int publish(df_reasoning_parser *p, const df_reasoning_ev **ev, size_t *n_ev) {
  if (p->n_ev > p->cap_pub) {
    df_reasoning_ev *e = realloc(p->pub, p->n_ev * sizeof *e);
    if (!e) return -1;
    p->pub = e;
    p->cap_pub = p->n_ev;
  }
  for (size_t i = 0; i < p->n_ev; i++) {
    p->pub[i] = (df_reasoning_ev){p->ev[i].kind, p->arena.p + p->ev[i].off, p->ev[i].len};
  }
  *ev = p->pub;
  *n_ev = p->n_ev;
  return 0;
}

/* Start a call: the last call's events are gone. */
static void begin(df_reasoning_parser *p, const df_reasoning_ev **ev, size_t *n_ev) {
  p->n_ev = 0;
  p->arena.n = 0;
  *ev = NULL;
  *n_ev = 0;
}

int df_reasoning_parser_feed(df_reasoning_parser *p, const char *text, size_t len,
                             const df_reasoning_ev **ev, size_t *n_ev) {
  begin(p, ev, n_ev);
  if (p->dead || p->finished) return -1;
  /* a NUL in the text would end the marker search early: feed around it */
  while (len) {
    const char *z = memchr(text, 0, len);
    size_t n = z ? (size_t)(z - text) : len;
    if (df_tok__buf_put(&p->in, text, n) != 0) goto dead;
    p->in.p[p->in.n] = 0;
    if (run(p, false) != 0) goto dead;
    if (z) { /* the NUL itself: plain text of the state */
      if (run(p, true) != 0 || plain(p, "", 1) != 0) goto dead;
      n++;
    }
    text += n;
    len -= n;
  }
  if (publish(p, ev, n_ev) != 0) goto dead;
  return 0;
dead:
  p->dead = true;
  return -1;
}

int df_reasoning_parser_finish(df_reasoning_parser *p, const df_reasoning_ev **ev,
                               size_t *n_ev) {
  begin(p, ev, n_ev);
  if (p->dead || p->finished) return -1;
  p->finished = true;
  if (run(p, true) != 0) goto dead;
  if (p->st == S_START && p->ws.n) { /* only whitespace: content */
    if (emit(p, DF_REASONING_EV_CONTENT, p->ws.p, p->ws.n) != 0) goto dead;
  }
  p->ws.n = 0;
  p->nl = 0;
  if (publish(p, ev, n_ev) != 0) goto dead;
  return 0;
dead:
  p->dead = true;
  return -1;
}

const char *df_reasoning_parser_reasoning(const df_reasoning_parser *p, size_t *len) {
  *len = p->reasoning.n;
  return p->reasoning.p;
}

const char *df_reasoning_parser_content(const df_reasoning_parser *p, size_t *len) {
  *len = p->content.n;
  return p->content.p;
}
