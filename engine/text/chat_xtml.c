/* engine/text/chat_xtml.c — Kimi K3's XTML chat format as segments (see chat_xtml.h).
 *
 * Source of the format: ggml-org/llama.cpp's
 * models/templates/Kimi-K3.jinja @181a4a8fb1af6142a7bf611dddd36fe34a3de3fe (a transcription of
 * encoding_k3.py) and docs/K3.md §5.3-5.4 for where the segments end. Checked against jinja2 and an
 * independent Python segmenter + tiktoken encoder: tests/tokenizer/kimi_k3_chat_golden.json
 * (tests/tokenizer/gen_k3_goldens.py). The comments name the template's macros.
 *
 * Not rendered (the inputs cannot say them): image / media parts and image_prompts, a system
 * message carrying `tools` (the dynamic tool-declare), `_xtml_json_block`, arguments given as a
 * mapping (df_chat_tool_call.arguments is JSON text: the string branch is taken), a tool
 * message's `tool` key (its `name` is used), `response_schema`.
 */
#include "engine/text/chat_xtml.h"
#include "engine/text/chat_json.h"
#include "engine/text/tokenizer_utf8.h"
#include "engine/text/tokenizer_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char *const k_special[] = {NULL, "<|open|>", "<|close|>", "<|sep|>",
                                        "<|end_of_msg|>"};

const char *df_xtml_special(df_xtml_kind k) {
  return k > DF_XTML_TEXT && k <= DF_XTML_EOM ? k_special[k] : NULL;
}

/* ---- the segment list being built ----------------------------------------------------------- */

typedef struct xb {
  df_tok_buf b;
  df_xtml_seg *s;
  size_t n, cap;
  int oom;
} xb;

static void push(xb *o, df_xtml_kind k, const char *p, size_t n, bool req) {
  if (o->oom || n == 0) return; /* an empty piece gives no ids: not listed */
  if (df_tok__grow((void **)&o->s, &o->cap, o->n + 1, sizeof *o->s) != 0) {
    o->oom = 1;
    return;
  }
  size_t off = o->b.n;
  if (df_tok__buf_put(&o->b, p, n) != 0) {
    o->oom = 1;
    return;
  }
  o->s[o->n++] = (df_xtml_seg){k, off, n, req};
}

static void sp(xb *o, df_xtml_kind k) { push(o, k, k_special[k], strlen(k_special[k]), false); }
static void lit(xb *o, const char *s) { push(o, DF_XTML_TEXT, s, strlen(s), false); }
static void req(xb *o, const char *s, size_t n) { push(o, DF_XTML_TEXT, s, n, true); }

/* escape_attr: value|string|replace('&', '&amp;')|replace('"', '&quot;'), one segment */
static void attr_value(xb *o, const char *v, bool from_req) {
  df_tok_buf e = {0};
  for (const char *p = v; *p && !o->oom; p++) {
    int r = *p == '&' ? df_tok__buf_puts(&e, "&amp;")
            : *p == '"' ? df_tok__buf_puts(&e, "&quot;")
                        : df_tok__buf_put(&e, p, 1);
    if (r != 0) o->oom = 1;
  }
  if (e.n) push(o, DF_XTML_TEXT, e.p, e.n, from_req);
  df_tok__buf_free(&e);
}

typedef struct attr {
  const char *key, *value;
  bool from_req;
} attr;

/* open_tag: '<|open|>' tag, then ' ' key '="' value '"' per attribute, '<|sep|>'. The jinja
 * prints ' key="' as one piece; docs/K3.md §5.4 cuts it into ' key' and '="' (the same pre-split
 * pieces for these keys, all letters). */
static void open_tag(xb *o, const char *tag, const attr *a, size_t na) {
  sp(o, DF_XTML_OPEN);
  lit(o, tag);
  for (size_t i = 0; i < na; i++) {
    char k[32];
    snprintf(k, sizeof k, " %s", a[i].key);
    lit(o, k);
    lit(o, "=\"");
    attr_value(o, a[i].value, a[i].from_req);
    lit(o, "\"");
  }
  sp(o, DF_XTML_SEP);
}

/* close_tag: '<|close|>' tag '<|sep|>' */
static void close_tag(xb *o, const char *tag) {
  sp(o, DF_XTML_CLOSE);
  lit(o, tag);
  sp(o, DF_XTML_SEP);
}

/* Python str.isspace (White_Space plus U+001C..U+001F): what jinja's trim strips. */
static bool py_space(uint32_t c) { return df_tok__cp_is_ws(c) || (c >= 0x1C && c <= 0x1F); }

/* s[0..n) stripped as Python str.strip() does (valid UTF-8). */
static void py_strip(const char *s, size_t n, size_t *a, size_t *b) {
  size_t i = 0, j = n, cl;
  while (i < j && py_space(df_tok__cp_at(s, n, i, &cl))) i += cl;
  while (j > i) {
    size_t st;
    if (!py_space(df_tok__cp_before(s, j, &st))) break;
    j = st;
  }
  *a = i;
  *b = j;
}

static bool blank(const char *s) {
  size_t a, b;
  py_strip(s, strlen(s), &a, &b);
  return a == b;
}

/* internal_system_message: open(message role="system" type=T) body|trim close(message) EOM */
static void internal_msg(xb *o, const char *type, const char *body, size_t n, bool from_req) {
  attr a[] = {{"role", "system", false}, {"type", type, false}};
  open_tag(o, "message", a, 2);
  size_t i, j;
  py_strip(body, n, &i, &j);
  push(o, DF_XTML_TEXT, body + i, j - i, from_req);
  close_tag(o, "message");
  sp(o, DF_XTML_EOM);
}

/* ---- json_sorted: compact JSON as the template prints it -------------------------------------
 * Objects in sorted key order, arrays in order, scalars by tojson = json.dumps(ensure_ascii=
 * False), reals as Python's repr (engine/text/chat_json.h prints all of it). Only objects whose
 * keys sort the same case-sensitively (Python sort_keys=True, docs/K3.md §5.4) and insensitively
 * (the template's dictsort) are accepted, so the text equals both references. */

/* Compare two keys as Python compares k.lower() (code points; utf8proc's simple lowercase). */
static int cmp_lower(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b), i = 0, j = 0, la, lb;
  while (i < na && j < nb) {
    int32_t x = utf8proc_tolower((int32_t)df_tok__cp_at(a, na, i, &la));
    int32_t y = utf8proc_tolower((int32_t)df_tok__cp_at(b, nb, j, &lb));
    if (x != y) return x < y ? -1 : 1;
    i += la;
    j += lb;
  }
  return (i < na) - (j < nb);
}

/* Keys whose Python lower() is not utf8proc's simple mapping: İ (two code points) and Σ
 * (final-sigma context). */
static bool odd_case(const char *k) { return strstr(k, "\xc4\xb0") || strstr(k, "\xce\xa3"); }

static int cmp_bytes(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Refuse what the two key orders would print differently, and nesting past 64 levels. */
static int check_keys(const json_t *v, const char *what, char *err, size_t errlen, int depth) {
  if (depth > 64) {
    df_tok__seterr(err, errlen, "chat: %s: nested deeper than 64 levels", what);
    return -1;
  }
  if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++)
      if (check_keys(json_array_get(v, i), what, err, errlen, depth + 1) != 0) return -1;
    return 0;
  }
  if (!json_is_object(v)) return 0;
  size_t n = json_object_size(v), i = 0;
  const char **keys = malloc((n ? n : 1) * sizeof *keys);
  if (!keys) {
    df_tok__seterr(err, errlen, "chat: out of memory");
    return -1;
  }
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) keys[i++] = k;
  qsort(keys, n, sizeof *keys, cmp_bytes);
  int rc = 0;
  for (i = 0; rc == 0 && i + 1 < n; i++) {
    if (odd_case(keys[i]) || odd_case(keys[i + 1]) || cmp_lower(keys[i], keys[i + 1]) >= 0) {
      df_tok__seterr(err, errlen, "chat: %s: keys \"%.60s\" and \"%.60s\" sort differently "
                     "with and without case (Python sort_keys vs the template's dictsort); "
                     "not rendered", what, keys[i], keys[i + 1]);
      rc = -1;
    }
  }
  free(keys);
  json_object_foreach((json_t *)v, k, x) {
    if (rc == 0) rc = check_keys(x, what, err, errlen, depth + 1);
  }
  return rc;
}

static int json_sorted(df_tok_buf *b, const json_t *v, const char *what, char *err,
                       size_t errlen, int depth) {
  if (check_keys(v, what, err, errlen, depth) != 0) return -1;
  if (df_pyjson_dump(b, v, (df_pyjson_style){.compact = true, .sort_keys = true}) != 0) {
    df_tok__seterr(err, errlen, "chat: out of memory");
    return -1;
  }
  return 0;
}

/* Parse request JSON text (objects with repeated keys refused: Python would keep the last). */
static json_t *parse(const char *text, const char *what, char *err, size_t errlen) {
  json_error_t je;
  json_t *v = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (!v) df_tok__seterr(err, errlen, "chat: %s: not JSON: %s", what, je.text);
  return v;
}

/* ---- validation ----------------------------------------------------------------------------- */

static bool valid(const char *s) {
  return !s || df_tok__utf8_valid((const uint8_t *)s, strlen(s));
}

static int check(const df_chat_msg *msgs, size_t n, char *err, size_t errlen) {
  if (!msgs || n == 0) {
    df_tok__seterr(err, errlen, "chat: no messages");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    if (!m->role) {
      df_tok__seterr(err, errlen, "chat: messages[%zu].role: missing (Kimi K3 messages "
                     "require a role)", i);
      return -1;
    }
    if (!valid(m->role) || !valid(m->content) || !valid(m->reasoning_content) ||
        !valid(m->name) || !valid(m->tool_call_id)) {
      df_tok__seterr(err, errlen, "chat: messages[%zu]: not valid UTF-8", i);
      return -1;
    }
    if (m->n_tool_calls && !m->tool_calls) {
      df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls: missing", i);
      return -1;
    }
    for (size_t k = 0; k < m->n_tool_calls; k++) {
      const df_chat_tool_call *c = &m->tool_calls[k];
      if (!c->name) {
        df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls[%zu]: Kimi K3 tool calls "
                       "require a function name", i, k);
        return -1;
      }
      if (!valid(c->name) || !valid(c->arguments) || !valid(c->id)) {
        df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls[%zu]: not valid UTF-8", i, k);
        return -1;
      }
    }
  }
  return 0;
}

static bool is(const char *a, const char *b) { return a && strcmp(a, b) == 0; }

static const char *const k_efforts[] = {"low", "medium", "high", "max"};

/* ---- the template's body ---------------------------------------------------------------------- */

static void message_body(xb *o, const char *s) {
  if (s) req(o, s, strlen(s)); /* render_content: a string; None renders nothing */
}

/* render_assistant */
static void assistant(xb *o, const df_chat_msg *m, bool thinking) {
  if (thinking) {
    open_tag(o, "think", NULL, 0);
    /* reasoning_content|string|trim truthy: printed whole (untrimmed) */
    if (m->reasoning_content && !blank(m->reasoning_content)) message_body(o, m->reasoning_content);
    close_tag(o, "think");
  }
  open_tag(o, "response", NULL, 0);
  message_body(o, m->content);
  close_tag(o, "response");
  if (m->n_tool_calls == 0) return;
  open_tag(o, "tools", NULL, 0);
  for (size_t k = 0; k < m->n_tool_calls; k++) {
    const df_chat_tool_call *c = &m->tool_calls[k];
    char idx[24];
    snprintf(idx, sizeof idx, "%zu", k + 1); /* loop.index */
    attr a[] = {{"tool", c->name, true}, {"index", idx, false}};
    open_tag(o, "call", a, 2);
    /* arguments is string and arguments|trim: open(json type="object") ARGS close(json);
     * absent (fn.get('arguments', {}) is an empty mapping) or blank: nothing */
    if (c->arguments && !blank(c->arguments)) {
      attr t[] = {{"type", "object", false}};
      open_tag(o, "json", t, 1);
      message_body(o, c->arguments);
      close_tag(o, "json");
    }
    close_tag(o, "call");
  }
  close_tag(o, "tools");
}

typedef struct state {
  const df_chat_msg *calls_of; /* the last assistant message (state.tool_calls), NULL = none */
  size_t tool_index;
} state;

/* render_tool_message(message, state, resolved_name) */
static int tool_message(xb *o, const df_chat_msg *m, size_t at, state *st, const char *resolved,
                        char *err, size_t errlen) {
  st->tool_index++;
  const char *name = resolved ? resolved : m->name;
  if (!name && st->calls_of && st->tool_index <= st->calls_of->n_tool_calls)
    name = st->calls_of->tool_calls[st->tool_index - 1].name; /* fallback by order */
  if (!name) {
    df_tok__seterr(err, errlen, "chat: messages[%zu]: Kimi K3 tool messages need a resolvable "
                   "tool name: a name, a tool_call_id of the preceding assistant message's "
                   "calls, or a call at the same position", at);
    return -1;
  }
  char idx[24];
  snprintf(idx, sizeof idx, "%zu", st->tool_index);
  attr a[] = {{"role", "tool", false}, {"tool", name, true}, {"index", idx, false}};
  open_tag(o, "message", a, 3);
  message_body(o, m->content);
  close_tag(o, "message");
  sp(o, DF_XTML_EOM);
  return 0;
}

static bool call_has_id(const df_chat_msg *calls_of, const char *id) {
  if (!calls_of || !id) return false;
  for (size_t k = 0; k < calls_of->n_tool_calls; k++)
    if (is(calls_of->tool_calls[k].id, id)) return true;
  return false;
}

/* A run of tool messages msgs[i..j): reordered by call order when every one matches a call id
 * of state.tool_calls, else in order with names by `name` or call position. */
static int tool_run(xb *o, const df_chat_msg *msgs, size_t i, size_t j, state *st, char *err,
                    size_t errlen) {
  bool all = true;
  for (size_t r = i; r < j; r++) all = all && call_has_id(st->calls_of, msgs[r].tool_call_id);
  if (!all) {
    for (size_t r = i; r < j; r++)
      if (tool_message(o, &msgs[r], r, st, NULL, err, errlen) != 0) return -1;
    return 0;
  }
  const df_chat_msg *a = st->calls_of;
  for (size_t k = 0; k < a->n_tool_calls; k++) {
    const char *id = a->tool_calls[k].id;
    if (!id) continue;
    bool seen = false; /* emitted.ids: an id repeated by a later call is skipped */
    for (size_t q = 0; q < k && !seen; q++) seen = is(a->tool_calls[q].id, id);
    if (seen) continue;
    for (size_t r = i; r < j; r++)
      if (is(msgs[r].tool_call_id, id) &&
          tool_message(o, &msgs[r], r, st, a->tool_calls[k].name, err, errlen) != 0)
        return -1;
  }
  return 0;
}

static const char k_effort_body[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
    "system is invoked with `thinking_effort=%s`.";
static const char k_rf_head[] =
    "The system is invoked with `response_format=%s`.\nYour response must be raw JSON data "
    "without markdown code blocks (```json) or any additional formatting.";

static int render(xb *o, const df_chat_msg *msgs, size_t n, const df_chat_opts *opt, char *err,
                  size_t errlen) {
  bool thinking = opt->enable_thinking != 0; /* `thinking`, undefined = true */
  const char *effort = opt->thinking_effort ? opt->thinking_effort : "max";
  bool effort_null = opt->thinking_effort && !*opt->thinking_effort;
  bool effort_known = false;
  for (size_t k = 0; k < 4; k++) effort_known = effort_known || is(effort, k_efforts[k]);
  if (thinking && !effort_null && !effort_known) {
    df_tok__seterr(err, errlen, "chat: Unsupported thinking_effort=%.60s; supported values are "
                   "low, medium, high, and max.", effort);
    return -1;
  }
  const char *tc = opt->tool_choice;
  if (tc && !is(tc, "auto") && !is(tc, "required") && !is(tc, "none")) {
    df_tok__seterr(err, errlen, "chat: tool_choice \"%.60s\": Kimi K3 renders auto, required and "
                   "none (a named function is not expressible in its format)", tc);
    return -1;
  }
  int rc = -1;
  json_t *tools = NULL, *rf = NULL;
  df_tok_buf body = {0};
  if (opt->tools_json) {
    if (!(tools = parse(opt->tools_json, "tools", err, errlen))) goto done;
    if (!json_is_array(tools)) {
      df_tok__seterr(err, errlen, "chat: tools: expected a JSON array of tool objects");
      goto done;
    }
  }
  if (opt->response_format_json) {
    if (!(rf = parse(opt->response_format_json, "response_format", err, errlen))) goto done;
    if (!json_is_object(rf) && !json_is_string(rf)) {
      df_tok__seterr(err, errlen, "chat: response_format: expected a JSON object");
      goto done;
    }
  }
  /* {%- if tools is defined and tools -%} render_tool_declare(tools): one body segment */
  if (tools && json_array_size(tools) > 0) {
    if (df_tok__buf_puts(&body, "# Tools\nHere are the available tools, described in "
                                "JSONSchema.\n\n```json\n") != 0 ||
        json_sorted(&body, tools, "tools", err, errlen, 0) != 0 ||
        df_tok__buf_puts(&body, "\n```") != 0) {
      if (!body.p) df_tok__seterr(err, errlen, "chat: out of memory");
      goto done;
    }
    attr a[] = {{"role", "system", false}, {"type", "tool-declare", false}};
    open_tag(o, "message", a, 2);
    req(o, body.p, body.n);
    close_tag(o, "message");
    sp(o, DF_XTML_EOM);
    body.n = 0;
  }
  /* thinking-effort message: thinking and effort one of low|medium|high|max */
  if (thinking && effort_known) {
    char t[sizeof k_effort_body + 16];
    snprintf(t, sizeof t, k_effort_body, effort);
    internal_msg(o, "thinking-effort", t, strlen(t), false);
  }
  state st = {NULL, 0};
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    if (is(m->role, "user") || is(m->role, "system")) {
      /* system messages with `tools` (the dynamic declare) are not expressible here */
      attr a[] = {{"role", m->role, false}, {"name", m->name, true}};
      open_tag(o, "message", a, m->name && *m->name ? 2 : 1);
      message_body(o, m->content);
      close_tag(o, "message");
      sp(o, DF_XTML_EOM);
    } else if (is(m->role, "assistant")) {
      st.calls_of = m->n_tool_calls ? m : NULL; /* state.tool_calls; [] acts as none */
      st.tool_index = 0;
      attr a[] = {{"role", "assistant", false}, {"name", m->name, true}};
      open_tag(o, "message", a, m->name && *m->name ? 2 : 1);
      assistant(o, m, thinking);
      close_tag(o, "message");
      sp(o, DF_XTML_EOM);
    } else if (is(m->role, "tool") && (i == 0 || !is(msgs[i - 1].role, "tool"))) {
      size_t j = i;
      while (j < n && is(msgs[j].role, "tool")) j++;
      if (tool_run(o, msgs, i, j, &st, err, errlen) != 0) goto done;
    } /* other roles render nothing */
  }
  static const char req_body[] = "The system is invoked with `tool_choice=required`.\nYou MUST "
                                 "call tools in the next message.";
  static const char none_body[] = "The system is invoked with `tool_choice=none`.\nYou MUST NOT "
                                  "call any tools in the next message.";
  if (is(tc, "required")) internal_msg(o, "tool-choice", req_body, sizeof req_body - 1, false);
  else if (is(tc, "none")) internal_msg(o, "tool-choice", none_body, sizeof none_body - 1, false);
  if (rf) {
    const char *type = json_is_object(rf) ? json_string_value(json_object_get(rf, "type"))
                                          : json_string_value(rf);
    char head[sizeof k_rf_head + 16];
    if (is(type, "json_object")) {
      snprintf(head, sizeof head, k_rf_head, "json_object");
      internal_msg(o, "response-format", head, strlen(head), false);
    } else if (is(type, "json_schema")) {
      /* response_format.json_schema: its "schema", else its "json_schema", else itself */
      const json_t *w = json_is_object(rf) ? json_object_get(rf, "json_schema") : NULL;
      const json_t *schema = w;
      if (json_is_object(w) && json_object_get(w, "schema")) schema = json_object_get(w, "schema");
      else if (json_is_object(w) && json_object_get(w, "json_schema"))
        schema = json_object_get(w, "json_schema");
      json_t *null = json_null();
      snprintf(head, sizeof head, k_rf_head, "json_schema");
      if (df_tok__buf_puts(&body, head) != 0 ||
          df_tok__buf_puts(&body, "\nThe JSON data must match the following schema:\n```json\n")
              != 0 ||
          json_sorted(&body, schema ? schema : null, "response_format", err, errlen, 0) != 0 ||
          df_tok__buf_puts(&body, "\n```") != 0) {
        if (!body.p) df_tok__seterr(err, errlen, "chat: out of memory");
        goto done;
      }
      internal_msg(o, "response-format", body.p, body.n, true);
    }
  }
  if (opt->add_generation_prompt) {
    attr a[] = {{"role", "assistant", false}};
    open_tag(o, "message", a, 1);
    open_tag(o, thinking ? "think" : "response", NULL, 0);
  }
  rc = 0;
done:
  df_tok__buf_free(&body);
  json_decref(tools);
  json_decref(rf);
  return rc;
}

int df_xtml_render(const df_chat_msg *msgs, size_t n, const df_chat_opts *opts, df_xtml *out,
                   char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  df_chat_opts dflt = {.add_generation_prompt = false, .enable_thinking = -1};
  if (!opts) opts = &dflt;
  if (check(msgs, n, err, errlen) != 0) return -1;
  if (!valid(opts->thinking_effort) || !valid(opts->tool_choice) || !valid(opts->tools_json) ||
      !valid(opts->response_format_json)) {
    df_tok__seterr(err, errlen, "chat: options: not valid UTF-8");
    return -1;
  }
  xb o = {0};
  if (df_tok__buf_put(&o.b, "", 0) != 0) o.oom = 1;
  int rc = o.oom ? -1 : render(&o, msgs, n, opts, err, errlen);
  if (rc == 0 && o.oom) {
    df_tok__seterr(err, errlen, "chat: out of memory");
    rc = -1;
  }
  if (rc != 0) {
    df_tok__buf_free(&o.b);
    free(o.s);
    return -1;
  }
  out->text = o.b.p;
  out->len = o.b.n;
  out->segs = o.s;
  out->n_segs = o.n;
  return 0;
}

void df_xtml_free(df_xtml *x) {
  if (!x) return;
  free(x->text);
  free(x->segs);
  memset(x, 0, sizeof *x);
}

static int32_t special_id(const df_tok *tok, df_xtml_kind k) {
  const char *s = k_special[k];
  int32_t id = df_tok_token_to_id(tok, s, strlen(s));
  return id >= 0 && df_tok_is_added(tok, id) ? id : -1;
}

int df_xtml_encode(const df_xtml *x, const df_tok *tok, int32_t **ids, size_t *n_ids,
                   size_t **seg_end, char *err, size_t errlen) {
  *ids = NULL;
  *n_ids = 0;
  if (seg_end) *seg_end = NULL;
  int32_t sid[5] = {-1, -1, -1, -1, -1};
  for (int k = DF_XTML_OPEN; k <= DF_XTML_EOM; k++) {
    if ((sid[k] = special_id(tok, (df_xtml_kind)k)) < 0) {
      df_tok__seterr(err, errlen, "chat: the tokenizer has no added token %s (needed by the "
                     "Kimi K3 XTML format)", k_special[k]);
      return -1;
    }
  }
  int32_t *out = NULL;
  size_t n = 0, cap = 0, *ends = NULL;
  if (seg_end && x->n_segs && !(ends = malloc(x->n_segs * sizeof *ends))) goto oom;
  for (size_t i = 0; i < x->n_segs; i++) {
    const df_xtml_seg *s = &x->segs[i];
    if (s->kind != DF_XTML_TEXT) {
      if (df_tok__grow((void **)&out, &cap, n + 1, sizeof *out) != 0) goto oom;
      out[n++] = sid[s->kind];
    } else {
      int32_t *p;
      size_t m;
      if (df_tok_encode(tok, x->text + s->off, s->len, DF_TOK_PLAIN, &p, &m, err, errlen) != 0)
        goto fail;
      if (m && df_tok__grow((void **)&out, &cap, n + m, sizeof *out) != 0) {
        free(p);
        goto oom;
      }
      if (m) memcpy(out + n, p, m * sizeof *p);
      n += m;
      free(p);
    }
    if (ends) ends[i] = n;
  }
  *ids = out;
  *n_ids = n;
  if (seg_end) *seg_end = ends;
  return 0;
oom:
  df_tok__seterr(err, errlen, "chat: out of memory");
fail:
  free(out);
  free(ends);
  return -1;
}

/* The special spelled at s[0..n), or DF_XTML_TEXT. */
static df_xtml_kind special_at(const char *s, size_t n) {
  for (int k = DF_XTML_OPEN; k <= DF_XTML_EOM; k++) {
    size_t l = strlen(k_special[k]);
    if (n >= l && !memcmp(s, k_special[k], l)) return (df_xtml_kind)k;
  }
  return DF_XTML_TEXT;
}

/* Bytes from s[0..n) up to (not including) the first special or a byte of `stop` (NULL: none). */
static size_t run_to(const char *s, size_t n, const char *stop) {
  size_t j = 0;
  while (j < n && !(stop && memchr(stop, s[j], strlen(stop))) && !special_at(s + j, n - j)) j++;
  return j;
}

int df_xtml_encode_markup(const df_tok *tok, const char *text, size_t len, int32_t **ids,
                          size_t *n_ids, char *err, size_t errlen) {
  *ids = NULL;
  *n_ids = 0;
  xb o = {0};
  if (df_tok__buf_put(&o.b, "", 0) != 0) o.oom = 1;
  enum { BODY, TAG, ATTRS } st = BODY;
  for (size_t i = 0; i < len && !o.oom;) {
    df_xtml_kind k = special_at(text + i, len - i);
    if (k != DF_XTML_TEXT) {
      sp(&o, k);
      i += strlen(k_special[k]);
      st = k == DF_XTML_OPEN || k == DF_XTML_CLOSE ? TAG : BODY;
      continue;
    }
    size_t j;
    if (st == TAG) { /* the tag name */
      j = run_to(text + i, len - i, " ");
      st = ATTRS;
    } else if (st == ATTRS && text[i] == ' ') { /* " key" */
      j = 1 + run_to(text + i + 1, len - i - 1, "=");
    } else if (st == ATTRS && len - i >= 2 && !memcmp(text + i, "=\"", 2)) {
      lit(&o, "=\""); /* then the value and its closing quote */
      i += 2;
      j = run_to(text + i, len - i, "\"");
      push(&o, DF_XTML_TEXT, text + i, j, false);
      i += j;
      if (i < len && text[i] == '"') {
        lit(&o, "\"");
        i++;
      }
      continue;
    } else { /* a body (or what the renderer never writes inside a tag): to the next special */
      j = run_to(text + i, len - i, NULL);
    }
    push(&o, DF_XTML_TEXT, text + i, j, false);
    i += j;
  }
  int rc = -1;
  if (o.oom) {
    df_tok__seterr(err, errlen, "chat: out of memory");
  } else {
    df_xtml x = {o.b.p, o.b.n, o.s, o.n};
    rc = df_xtml_encode(&x, tok, ids, n_ids, NULL, err, errlen);
  }
  df_tok__buf_free(&o.b);
  free(o.s);
  return rc;
}

int df_xtml_chat_render(const df_chat_msg *msgs, size_t n, const df_chat_opts *opts,
                        df_chat_text *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  df_xtml x;
  if (df_xtml_render(msgs, n, opts, &x, err, errlen) != 0) return -1;
  df_tok_span *sp = NULL;
  size_t nsp = 0, cap = 0;
  for (size_t i = 0; i < x.n_segs; i++) {
    const df_xtml_seg *s = &x.segs[i];
    if (!s->from_request) continue;
    if (nsp && sp[nsp - 1].off + sp[nsp - 1].len == s->off) { /* adjacent: one span */
      sp[nsp - 1].len += s->len;
      continue;
    }
    if (df_tok__grow((void **)&sp, &cap, nsp + 1, sizeof *sp) != 0) {
      free(sp);
      df_xtml_free(&x);
      df_tok__seterr(err, errlen, "chat: out of memory");
      return -1;
    }
    sp[nsp++] = (df_tok_span){s->off, s->len};
  }
  out->text = x.text;
  out->len = x.len;
  out->spans = sp;
  out->n_spans = nsp;
  free(x.segs);
  return 0;
}

int df_xtml_chat_encode(const df_tok *tok, const df_chat_msg *msgs, size_t n,
                        const df_chat_opts *opts, int32_t **ids, size_t *n_ids, char *err,
                        size_t errlen) {
  *ids = NULL;
  *n_ids = 0;
  df_xtml x;
  if (df_xtml_render(msgs, n, opts, &x, err, errlen) != 0) return -1;
  int rc = df_xtml_encode(&x, tok, ids, n_ids, NULL, err, errlen);
  df_xtml_free(&x);
  return rc;
}

/* Per message, what is certain whatever the options: open(message role=R) is <|open|>,
 * "message", " role", "=\"", R, "\"", <|sep|> (2 specials, 5 non-empty text pieces: one id at
 * least each), close(message) <|close|> "message" <|sep|> (3), <|end_of_msg|> (1): 11 for a
 * user, system or tool message; an assistant's adds open(response) and close(response), 6
 * more: 17. Other roles render nothing. */
size_t df_xtml_min_tokens(const df_tok *tok, const df_chat_msg *msgs, size_t n) {
  for (int k = DF_XTML_OPEN; k <= DF_XTML_EOM; k++)
    if (special_id(tok, (df_xtml_kind)k) < 0) return 0;
  size_t lb = 0;
  for (size_t i = 0; i < n; i++) {
    const char *r = msgs[i].role;
    if (is(r, "user") || is(r, "system") || is(r, "tool")) lb += 11;
    else if (is(r, "assistant")) lb += 17;
  }
  return lb;
}
