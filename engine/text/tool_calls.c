/* engine/text/tool_calls.c — tool calls in generated text (see tool_calls.h).
 *
 * One state machine serves every family; a family is its markers (the text each template
 * writes around an assistant's calls: tests/tokenizer/qwen3_chat_template.jinja,
 * deepseek_v3_chat_template.jinja, kimi_k2_thinking_chat_template.jinja, and
 * engine/text/chat_xtml.c for Kimi K3) plus a function that reads a call's header; those are
 * in tool_calls_fmt.c (tool_calls_internal.h).
 *
 *   TEXT    content; looks for a call start: [pre] [section begin, whitespace] call begin
 *   HEADER  the start is in `in`; the family reads the name (and id) after it
 *   ARGS    the call is announced; arguments stream until the arguments' end marker
 *   POST    (Kimi K3) the closing that must follow the arguments' end marker
 *   AFTER   a call is complete; whitespace, then a section end or the next call belong to it
 *
 * `in` holds the sanitized text not yet decided, from the start of the current call (or of
 * the held-back content) on. Every byte leaves `in` exactly once: as content, or as part of a
 * complete call's raw text. The work per fed byte is bounded (headers, whitespace runs and
 * held-back suffixes are capped), so hostile text costs linear time.
 */
#include "engine/text/tool_calls.h"
#include "engine/text/tool_calls_internal.h"
#include "engine/text/chat_json.h"
#include "engine/text/tokenizer_utf8.h"
#include "engine/text/tokenizer_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parser ------------------------------------------------------------------------------ */

enum { S_TEXT, S_HEADER, S_ARGS, S_POST, S_AFTER };

typedef struct evrec {
  df_tool_ev_kind kind;
  size_t index;
  size_t text, len, id, name; /* offsets into the arena; SIZE_MAX = none */
} evrec;

struct df_tool_parser {
  const fam *f;
  uint64_t seed;
  bool dead, finished;
  unsigned char tail[4]; /* a character cut at the end of the last piece */
  size_t n_tail;
  df_tok_buf in;
  int st;
  size_t next_index; /* stream index of the next call */
  /* the current call (HEADER .. POST) */
  size_t mark_len;   /* HEADER: bytes of the start marker(s) */
  size_t index, content_pos, hdr_end, args_sent, lex, post_at;
  bool announced, in_str, esc; /* ARGS: the JSON lexer at `lex` (inside a string, after \) */
  char *name, *id, *args;
  size_t args_len;
  /* events of the current feed / finish */
  evrec *ev;
  size_t n_ev, cap_ev;
  df_tok_buf arena;
  df_tool_ev *pub;
  size_t cap_pub;
  /* the answer */
  df_tok_buf content;
  df_tool_call_out *calls;
  size_t n_calls, cap_calls;
};

df_tool_parser *df_tool_parser_new(df_chat_family family, uint64_t id_seed) {
  const fam *f = df_tc_fam_of(family);
  if (!f) return NULL;
  df_tool_parser *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->f = f;
  p->seed = id_seed;
  if (df_tok__buf_put(&p->content, "", 0) != 0 || df_tok__buf_put(&p->in, "", 0) != 0) {
    df_tool_parser_destroy(&p);
    return NULL;
  }
  return p;
}

static void call_reset(df_tool_parser *p) {
  free(p->name);
  free(p->id);
  free(p->args);
  p->name = p->id = p->args = NULL;
  p->announced = false;
}

void df_tool_parser_destroy(df_tool_parser **pp) {
  if (!pp || !*pp) return;
  df_tool_parser *p = *pp;
  call_reset(p);
  df_tok__buf_free(&p->in);
  df_tok__buf_free(&p->arena);
  df_tok__buf_free(&p->content);
  free(p->ev);
  free(p->pub);
  for (size_t i = 0; i < p->n_calls; i++) {
    free((char *)p->calls[i].id);
    free((char *)p->calls[i].name);
    free((char *)p->calls[i].arguments);
    free((char *)p->calls[i].raw);
  }
  free(p->calls);
  free(p);
  *pp = NULL;
}

/* ---- events ---- */

static size_t arena_str(df_tool_parser *p, const char *s, size_t n) {
  size_t off = p->arena.n;
  if (df_tok__buf_put(&p->arena, s, n) != 0 || df_tok__buf_put(&p->arena, "", 1) != 0) {
    p->dead = true;
    return SIZE_MAX;
  }
  return off;
}

static void ev_push(df_tool_parser *p, df_tool_ev_kind kind, size_t index, const char *text,
                    size_t len, const char *id, const char *name) {
  if (p->dead) return;
  evrec *last = p->n_ev ? &p->ev[p->n_ev - 1] : NULL;
  if (text && last && last->kind == kind && last->index == index &&
      last->text + last->len + 1 == p->arena.n) { /* extend the previous piece */
    p->arena.n--;
    if (df_tok__buf_put(&p->arena, text, len) != 0 || df_tok__buf_put(&p->arena, "", 1) != 0) {
      p->dead = true;
      return;
    }
    last->len += len;
    return;
  }
  if (df_tok__grow((void **)&p->ev, &p->cap_ev, p->n_ev + 1, sizeof *p->ev) != 0) {
    p->dead = true;
    return;
  }
  evrec r = {kind, index, SIZE_MAX, 0, SIZE_MAX, SIZE_MAX};
  if (text) {
    r.text = arena_str(p, text, len);
    r.len = len;
  }
  if (id) r.id = arena_str(p, id, strlen(id));
  if (name) r.name = arena_str(p, name, strlen(name));
  if (!p->dead) p->ev[p->n_ev++] = r;
}

static void emit_content(df_tool_parser *p, const char *s, size_t n) {
  if (n == 0 || p->dead) return;
  if (df_tok__buf_put(&p->content, s, n) != 0) {
    p->dead = true;
    return;
  }
  ev_push(p, DF_TOOL_EV_CONTENT, 0, s, n, NULL, NULL);
}

/* ---- the input buffer ---- */

static void consume(df_tool_parser *p, size_t k) {
  memmove(p->in.p, p->in.p + k, p->in.n - k);
  p->in.n -= k;
  p->in.p[p->in.n] = 0;
}

/* "call_" + 24 letters and digits from (seed, index) */
static char *make_id(uint64_t seed, size_t index) {
  static const char k_alnum[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  char *id = malloc(30);
  if (!id) return NULL;
  memcpy(id, "call_", 5);
  uint64_t x = seed ^ ((uint64_t)index * 0xD1B54A32D192ED03ULL);
  for (int k = 0; k < 3; k++) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    for (int c = 0; c < 8; c++, z /= 62) id[5 + 8 * k + c] = k_alnum[z % 62];
  }
  id[29] = 0;
  return id;
}

/* The current call is not one: its text in[0..end) is content. */
static void drop(df_tool_parser *p, size_t end) {
  if (p->announced) ev_push(p, DF_TOOL_EV_CALL_DROP, p->index, NULL, 0, NULL, NULL);
  emit_content(p, p->in.p, end);
  consume(p, end);
  call_reset(p);
  p->st = S_TEXT;
}

/* The current call is complete at in[end]. */
static void complete(df_tool_parser *p, size_t end) {
  if (df_tok__grow((void **)&p->calls, &p->cap_calls, p->n_calls + 1, sizeof *p->calls) != 0) {
    p->dead = true;
    return;
  }
  char *raw = df_tc_dupn(p->in.p, end);
  if (!raw) {
    p->dead = true;
    return;
  }
  ev_push(p, DF_TOOL_EV_CALL_END, p->index, NULL, 0, NULL, NULL);
  p->calls[p->n_calls++] = (df_tool_call_out){p->id, p->name, p->args, p->args_len, p->index,
                                              p->content_pos, raw, end};
  p->id = p->name = p->args = NULL; /* now the call's */
  p->announced = false;
  consume(p, end);
  p->st = S_AFTER;
}

/* Attach in[0..end) to the last complete call's raw text. */
static void attach(df_tool_parser *p, size_t end) {
  df_tool_call_out *c = &p->calls[p->n_calls - 1];
  char *r = realloc((char *)c->raw, c->raw_len + end + 1);
  if (!r) {
    p->dead = true;
    return;
  }
  memcpy(r + c->raw_len, p->in.p, end);
  c->raw_len += end;
  r[c->raw_len] = 0;
  c->raw = r;
  consume(p, end);
}

/* A call start at s[i]: OK (*len its length), NEED (could be one: the text ends first), FAIL. */
static int start_at(const fam *f, const char *s, size_t n, size_t i, size_t *len) {
  size_t j = i;
  if (f->pre) {
    int r = df_tc_lit_at(s, n, j, f->pre);
    if (r == NEED) return NEED;
    if (r == OK) j += strlen(f->pre);
  }
  if (f->sec_begin) {
    int r = df_tc_lit_at(s, n, j, f->sec_begin);
    if (r == NEED) return NEED;
    if (r == OK) {
      size_t k = df_tc_skip_ws(s, n, j + strlen(f->sec_begin));
      if (k - (j + strlen(f->sec_begin)) > WS_CAP) return FAIL;
      r = df_tc_lit_at(s, n, k, f->call_begin);
      if (r == OK) *len = k + strlen(f->call_begin) - i;
      return r;
    }
  }
  int r = df_tc_lit_at(s, n, j, f->call_begin);
  if (r == OK) *len = j + strlen(f->call_begin) - i;
  return r;
}

static int step_text(df_tool_parser *p, bool final) {
  const fam *f = p->f;
  const char *s = p->in.p;
  size_t n = p->in.n;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((f->pre && c == f->pre[0]) || (f->sec_begin && c == f->sec_begin[0]) ||
          c == f->call_begin[0]))
      continue;
    size_t len = 0;
    int r = start_at(f, s, n, i, &len);
    if (r == FAIL || (r == NEED && final)) continue;
    emit_content(p, s, i);
    consume(p, i);
    if (r == NEED) return 0; /* hold the possible start */
    p->st = S_HEADER;
    p->mark_len = len;
    p->content_pos = p->content.n;
    return 1;
  }
  emit_content(p, s, n);
  consume(p, n);
  return 0;
}

static int step_header(df_tool_parser *p, bool final) {
  hdr h = {0};
  size_t m = p->mark_len;
  int r = p->f->header(p->in.p + m, p->in.n - m, &h);
  if (r == NEED && !final) return 0;
  if (r != OK) { /* not a call: the start marker is content, what follows is looked at again */
    emit_content(p, p->in.p, m);
    consume(p, m);
    p->st = S_TEXT;
    return 1;
  }
  p->name = h.name;
  p->index = p->next_index++;
  p->id = h.id ? h.id : make_id(p->seed, p->index);
  if (!p->id) {
    p->dead = true;
    return 0;
  }
  p->announced = true;
  ev_push(p, DF_TOOL_EV_CALL_BEGIN, p->index, NULL, 0, p->id, p->name);
  p->hdr_end = m + h.len;
  if (h.no_args) {
    p->args = df_tc_dupn("{}", 2);
    p->args_len = 2;
    if (!p->args) {
      p->dead = true;
      return 0;
    }
    ev_push(p, DF_TOOL_EV_ARGS, p->index, "{}", 2, NULL, NULL);
    complete(p, p->hdr_end);
    return 1;
  }
  p->args_sent = 0;
  p->lex = p->hdr_end;
  p->in_str = p->esc = false;
  p->st = S_ARGS;
  return 1;
}

/* Bytes at the end of the arguments text s[0..m) that could be the call's closing structure
 * (whitespace, the args_tail, a prefix of args_end), so not yet released. */
static size_t holdback(const fam *f, const char *s, size_t m) {
  size_t L = strlen(f->args_end), k1 = 0;
  for (size_t k = m < L - 1 ? m : L - 1; k > 0; k--)
    if (memcmp(s + m - k, f->args_end, k) == 0) {
      k1 = k;
      break;
    }
  size_t t1 = m - k1, lim = t1 > HOLD_CAP ? t1 - HOLD_CAP : 0;
  while (t1 > lim && ws(s[t1 - 1])) t1--;
  size_t t3 = t1;
  if (f->args_tail) {
    size_t TL = strlen(f->args_tail);
    if (t1 >= TL && memcmp(s + t1 - TL, f->args_tail, TL) == 0) {
      t3 = t1 - TL;
    } else if (t1 == m) {
      for (size_t k = TL - 1 < t1 ? TL - 1 : t1; k > 0; k--)
        if (memcmp(s + t1 - k, f->args_tail, k) == 0) {
          t3 = t1 - k;
          break;
        }
    }
    lim = t3 > HOLD_CAP ? t3 - HOLD_CAP : 0;
    if (t3 != t1)
      while (t3 > lim && ws(s[t3 - 1])) t3--;
  }
  return m - t3;
}

static int step_args(df_tool_parser *p, bool final) {
  const fam *f = p->f;
  const char *s = p->in.p;
  size_t n = p->in.n, L = strlen(f->args_end), i = p->lex;
  const char *q = NULL;
  /* the end marker counts outside JSON strings only */
  for (bool in_str = p->in_str, esc = p->esc; i < n; i++) {
    char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      p->in_str = in_str;
      p->esc = esc;
      continue;
    }
    if (c == '"') {
      p->in_str = in_str = true;
      continue;
    }
    if (c != f->args_end[0]) continue;
    int r = df_tc_lit_at(s, n, i, f->args_end);
    if (r == OK) q = s + i;
    if (r != FAIL) break;
  }
  p->lex = i;
  if (!q) {
    if (final) {
      drop(p, n);
      return 1;
    }
    size_t a = df_tc_skip_ws(s, n, p->hdr_end);
    if (a == n) return 0;
    size_t rel = n - a - holdback(f, s + a, n - a);
    if (rel > p->args_sent) {
      ev_push(p, DF_TOOL_EV_ARGS, p->index, s + a + p->args_sent, rel - p->args_sent, NULL, NULL);
      p->args_sent = rel;
    }
    return 0;
  }
  size_t qe = (size_t)(q - s), end = qe + L;
  size_t a = df_tc_skip_ws(s, qe, p->hdr_end), e = qe;
  while (e > a && ws(s[e - 1])) e--;
  bool ok = true;
  if (f->args_tail) {
    size_t TL = strlen(f->args_tail);
    ok = e - a >= TL && memcmp(s + e - TL, f->args_tail, TL) == 0;
    if (ok) e -= TL;
    while (e > a && ws(s[e - 1])) e--;
  }
  ok = ok && p->args_sent <= e - a && df_tc_json_object_text(s + a, e - a);
  if (!ok) {
    drop(p, end);
    return 1;
  }
  if (e - a > p->args_sent)
    ev_push(p, DF_TOOL_EV_ARGS, p->index, s + a + p->args_sent, e - a - p->args_sent, NULL, NULL);
  p->args_sent = e - a;
  if (!(p->args = df_tc_dupn(s + a, e - a))) {
    p->dead = true;
    return 0;
  }
  p->args_len = e - a;
  if (f->post) {
    p->post_at = end;
    p->st = S_POST;
  } else {
    complete(p, end);
  }
  return 1;
}

static int step_post(df_tool_parser *p, bool final) {
  const char *s = p->in.p;
  size_t n = p->in.n, j = df_tc_skip_ws(s, n, p->post_at);
  int r = j - p->post_at > WS_CAP ? FAIL : j >= n ? NEED : df_tc_lit_at(s, n, j, p->f->post);
  if (r == NEED && !final) return 0;
  if (r == OK) complete(p, j + strlen(p->f->post));
  else drop(p, p->post_at);
  return 1;
}

static int step_after(df_tool_parser *p, bool final) {
  const fam *f = p->f;
  const char *s = p->in.p;
  size_t n = p->in.n, i = df_tc_skip_ws(s, n, 0);
  if (i > WS_CAP) {
    p->st = S_TEXT;
    return 1;
  }
  if (i == n) {
    if (!final) return 0;
    attach(p, n); /* trailing whitespace after the last call */
    p->st = S_TEXT;
    return 1;
  }
  if (f->sec_end) {
    int r = df_tc_lit_at(s, n, i, f->sec_end);
    if (r == OK) {
      attach(p, i + strlen(f->sec_end));
      p->st = S_TEXT;
      return 1;
    }
    if (r == NEED && !final) return 0;
  }
  int r = df_tc_lit_at(s, n, i, f->call_begin);
  if (r == OK) {
    p->st = S_HEADER;
    p->mark_len = i + strlen(f->call_begin);
    p->content_pos = p->content.n;
    return 1;
  }
  if (r == NEED && !final) return 0;
  p->st = S_TEXT;
  return 1;
}

static void run(df_tool_parser *p, bool final) {
  for (;;) {
    if (p->dead) return;
    int r = 0;
    switch (p->st) {
    case S_TEXT: r = step_text(p, final); break;
    case S_HEADER: r = step_header(p, final); break;
    case S_ARGS: r = step_args(p, final); break;
    case S_POST: r = step_post(p, final); break;
    case S_AFTER: r = step_after(p, final); break;
    }
    if (!r && (!final || (p->st == S_TEXT && p->in.n == 0))) return;
  }
}

static int publish(df_tool_parser *p, const df_tool_ev **ev, size_t *n_ev) {
  *ev = NULL;
  *n_ev = 0;
  if (p->dead) return -1;
  if (df_tok__grow((void **)&p->pub, &p->cap_pub, p->n_ev + 1, sizeof *p->pub) != 0) {
    p->dead = true;
    return -1;
  }
  for (size_t i = 0; i < p->n_ev; i++) {
    const evrec *r = &p->ev[i];
    p->pub[i] = (df_tool_ev){
        r->kind, r->index, r->text == SIZE_MAX ? NULL : p->arena.p + r->text, r->len,
        r->id == SIZE_MAX ? NULL : p->arena.p + r->id,
        r->name == SIZE_MAX ? NULL : p->arena.p + r->name};
  }
  *ev = p->pub;
  *n_ev = p->n_ev;
  return 0;
}

static int take(df_tool_parser *p, const char *text, size_t len, bool hold) {
  p->n_ev = 0;
  p->arena.n = 0;
  if (p->n_tail) { /* complete the cut character first */
    unsigned char buf[8];
    size_t k = p->n_tail, add = len < 4 ? len : 4, used;
    memcpy(buf, p->tail, k);
    memcpy(buf + k, text, add);
    if (df_tok__utf8_lossy_append(&p->in, buf, k + add, hold, &used) != 0) return -1;
    if (used < k) { /* still cut: all of it waits */
      memcpy(p->tail, buf, k + add);
      p->n_tail = k + add;
      return 0;
    }
    text += used - k;
    len -= used - k;
    p->n_tail = 0;
  }
  size_t used;
  if (df_tok__utf8_lossy_append(&p->in, (const uint8_t *)text, len, hold, &used) != 0) return -1;
  memcpy(p->tail, text + used, len - used);
  p->n_tail = len - used;
  return 0;
}

int df_tool_parser_feed(df_tool_parser *p, const char *text, size_t len, const df_tool_ev **ev,
                        size_t *n_ev) {
  *ev = NULL;
  *n_ev = 0;
  if (!p || p->dead || p->finished || (!text && len)) return -1;
  if (take(p, text ? text : "", len, true) != 0) p->dead = true;
  else run(p, false);
  return publish(p, ev, n_ev);
}

int df_tool_parser_finish(df_tool_parser *p, bool cut_by_length, const df_tool_ev **ev,
                          size_t *n_ev) {
  (void)cut_by_length; /* a call is complete only at its end marker, cut or not */
  *ev = NULL;
  *n_ev = 0;
  if (!p || p->dead || p->finished) return -1;
  p->finished = true;
  if (take(p, "", 0, false) != 0) p->dead = true;
  else run(p, true);
  return publish(p, ev, n_ev);
}

const char *df_tool_parser_content(const df_tool_parser *p, size_t *len) {
  if (len) *len = p->content.n;
  return p->content.p;
}

size_t df_tool_parser_n_calls(const df_tool_parser *p) { return p->n_calls; }

const df_tool_call_out *df_tool_parser_call(const df_tool_parser *p, size_t i) {
  return i < p->n_calls ? &p->calls[i] : NULL;
}

/* ---- frames ---------------------------------------------------------------------------------- */

int df_tool_call_frame(df_chat_family family, const char *name, size_t call_index, char **prefix,
                       char **suffix) {
  *prefix = *suffix = NULL;
  if (!name || !*name || !df_tok__utf8_valid((const uint8_t *)name, strlen(name))) return -1;
  df_tok_buf a = {0}, b = {0};
  int rc = 0;
  char num[32];
  switch (family) {
  case DF_CHAT_QWEN3: {
    json_t *js = json_string(name);
    rc = !js || df_tok__buf_puts(&a, "<tool_call>\n{\"name\": ") != 0 ||
         df_pyjson_dump(&a, js, (df_pyjson_style){0}) != 0 ||
         df_tok__buf_puts(&a, ", \"arguments\": ") != 0 || df_tok__buf_puts(&b, "}\n</tool_call>");
    json_decref(js);
    break;
  }
  case DF_CHAT_DEEPSEEK_V3:
    if (strchr(name, '\n') || strstr(name, "<" FW)) return -1;
    rc = df_tok__buf_puts(&a, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP) != 0 ||
         df_tok__buf_puts(&a, name) != 0 || df_tok__buf_puts(&a, "\n```json\n") != 0 ||
         df_tok__buf_puts(&b, "\n```" DS_CALL_END DS_CALLS_END) != 0;
    break;
  case DF_CHAT_KIMI_K2:
  case DF_CHAT_KIMI_K2_THINKING:
    if (strstr(name, "<|") || ws(name[0]) || ws(name[strlen(name) - 1])) return -1;
    snprintf(num, sizeof num, ":%zu", call_index);
    rc = df_tok__buf_puts(&a, K2_CALLS_BEGIN K2_CALL_BEGIN "functions.") != 0 ||
         df_tok__buf_puts(&a, name) != 0 || df_tok__buf_puts(&a, num) != 0 ||
         df_tok__buf_puts(&a, K2_CALL_ARGS) != 0 ||
         df_tok__buf_puts(&b, K2_CALL_END K2_CALLS_END) != 0;
    break;
  case DF_CHAT_KIMI_K3:
    rc = df_tok__buf_puts(&a, "<|open|>tools<|sep|><|open|>call tool=\"") != 0;
    for (const char *c = name; !rc && *c; c++)
      rc = *c == '&' ? df_tok__buf_puts(&a, "&amp;") : *c == '"' ? df_tok__buf_puts(&a, "&quot;")
                                                                 : df_tok__buf_put(&a, c, 1);
    snprintf(num, sizeof num, "\" index=\"%zu\"<|sep|>", call_index + 1);
    rc = rc || df_tok__buf_puts(&a, num) != 0 ||
         df_tok__buf_puts(&a, "<|open|>json type=\"object\"<|sep|>") != 0 ||
         df_tok__buf_puts(&b, "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>") != 0;
    break;
  default:
    rc = 1;
  }
  if (rc) {
    df_tok__buf_free(&a);
    df_tok__buf_free(&b);
    return -1;
  }
  *prefix = a.p;
  *suffix = b.p;
  return 0;
}
