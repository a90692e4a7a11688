/* coordinator/server/generate.c — the generation endpoints of the /v1 server
 * (/v1/chat/completions, /v1/completions): prompt tokenization with cheap bounds first,
 * submission to the scheduler, the non-streaming answer and the server-sent-event stream.
 * Threads: each request runs on its connection's thread (server.c's file comment).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/server/server_internal.h"
#include "engine/text/chat_template.h"

/* Wait up to timeout_ms for news of the job or the client going away. Returns -1 when the
 * client is gone. */
static int wait_news(conn *c, int timeout_ms) {
  struct pollfd p[2] = {{.fd = df_sched_job_fd(c->job), .events = POLLIN},
                        {.fd = c->fd, .events = POLLRDHUP}};
  int n = poll(p, c->fd >= 0 ? 2 : 1, timeout_ms);
  if (n < 0 && errno != EINTR) return -1;
  if (c->fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return -1;
  return 0;
}

/* A stream that has waited this long for the model sends an SSE comment line (ignored by
 * clients, WHATWG HTML "server-sent events"), so the connection is never silent for
 * --idle-timeout while the generation is queued or slow: half the idle timeout, in ms. */
static int stream_keepalive_ms(const conn *c) {
  return (int)(c->srv->o.idle_timeout_s * 500u);
}


static void client_gone(conn *c) {
  df_sched_job_cancel(c->job);
  pthread_mutex_lock(&c->srv->mu);
  c->srv->disconnects++;
  pthread_mutex_unlock(&c->srv->mu);
}

static const char *finish_name(df_sched_finish f) {
  return f == DF_SCHED_LENGTH ? "length" : "stop";
}

/* ---- streaming ----------------------------------------------------------------------- */

/* Longest prefix of text[0..n) of at most max bytes that ends on a UTF-8 character boundary
 * (text is valid UTF-8). */
static size_t utf8_cut(const char *text, size_t n, size_t max) {
  if (n <= max) return n;
  size_t k = max;
  while (k > 0 && ((unsigned char)text[k] & 0xC0) == 0x80) k--;
  return k ? k : n; /* cannot happen with max >= 4 */
}

#define TEXT_PER_EVENT 2048

/* A token's text for logprobs: its bytes as UTF-8, each ill-formed byte as U+FFFD (a byte
 * token that is part of a character); the raw bytes go in "bytes". */
static json_t *token_str(const df_tok *tok, int32_t id, json_t **bytes) {
  size_t n = 0;
  const uint8_t *b = df_tok_id_to_bytes(tok, id, &n);
  if (bytes) {
    *bytes = json_array();
    for (size_t i = 0; *bytes && b && i < n; i++) json_array_append_new(*bytes, json_integer(b[i]));
  }
  size_t m = 0;
  char *u = df_tok_utf8_sanitize(b ? (const char *)b : "", b ? n : 0, &m);
  json_t *j = u ? json_stringn(u, m) : NULL;
  free(u);
  return j;
}

static size_t utf8_chars(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
  return k;
}

/* The logprobs object of entries lp[0..n) and frees them: chat {"content": [{token, logprob,
 * bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}; completions {tokens,
 * token_logprobs, top_logprobs: [{token: logprob}] (null entries when 0 asked), text_offset}.
 * NULL when out of memory. */
static json_t *logprobs_json(conn *c, df_sched_logprob *lp, size_t n) {
  const df_tok *tok = c->srv->tok;
  json_t *o = NULL;
  if (c->meta.kind == DF_API_CHAT) {
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++) {
      json_t *bytes = NULL, *top = json_array();
      json_t *ts = token_str(tok, lp[i].id, &bytes);
      json_t *e = json_pack("{s:o, s:f, s:o, s:o}", "token", ts, "logprob", lp[i].logprob,
                            "bytes", bytes, "top_logprobs", top);
      for (int t = 0; e && t < lp[i].n_top; t++) {
        json_t *tb = NULL, *tt = token_str(tok, lp[i].top_id[t], &tb);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", tt, "logprob",
                                             lp[i].top_logprob[t], "bytes", tb));
      }
      if (!e || json_array_append_new(content, e)) {
        json_decref(content);
        content = NULL;
      }
    }
    o = content ? json_pack("{s:o, s:n}", "content", content, "refusal") : NULL;
  } else {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; toks && lps && tops && offs && i < n; i++) {
      json_t *ts = token_str(tok, lp[i].id, NULL);
      json_array_append_new(offs, json_integer(c->lp_offset));
      if (ts) c->lp_offset += (int64_t)utf8_chars(json_string_value(ts), json_string_length(ts));
      json_array_append_new(toks, ts);
      json_array_append_new(lps, json_real(lp[i].logprob));
      json_t *d = lp[i].n_top ? json_object() : json_null();
      for (int t = 0; d && t < lp[i].n_top; t++) {
        json_t *k = token_str(tok, lp[i].top_id[t], NULL);
        if (k && !json_object_get(d, json_string_value(k)))
          json_object_set_new(d, json_string_value(k), json_real(lp[i].top_logprob[t]));
        json_decref(k);
      }
      json_array_append_new(tops, d);
    }
    o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                  tops, "text_offset", offs);
  }
  free(lp);
  return o;
}

/* The logprob entries taken and not yet sent, as the logprobs object of the next event (NULL
 * when the request did not ask for them). */
static json_t *pending_logprobs(conn *c) {
  if (!c->logprobs) return NULL;
  json_t *o = logprobs_json(c, c->lp, c->lp_n);
  c->lp = NULL;
  c->lp_n = 0;
  return o;
}

/* Take the job's news: text (appended to c->text) and logprob entries (appended to c->lp).
 * Returns 1 when something new came, 0 when nothing, -1 when out of memory. */
static int take_news(conn *c) {
  char *t;
  size_t tl;
  df_sched_job_take(c->job, &t, &tl, &c->news);
  int got = t != NULL;
  if (t) {
    if (!c->text) {
      c->text = t;
      c->text_len = tl;
    } else {
      char *b = realloc(c->text, c->text_len + tl + 1);
      if (!b) {
        free(t);
        return -1;
      }
      memcpy(b + c->text_len, t, tl);
      c->text = b;
      c->text_len += tl;
      free(t);
    }
  }
  if (c->logprobs) {
    df_sched_logprob *lp;
    size_t n;
    df_sched_job_take_logprobs(c->job, &lp, &n);
    if (n) {
      got = 1;
      df_sched_logprob *b = realloc(c->lp, (c->lp_n + n) * sizeof *b);
      if (!b) {
        free(lp);
        return -1;
      }
      memcpy(b + c->lp_n, lp, n * sizeof *lp);
      c->lp = b;
      c->lp_n += n;
      free(lp);
    }
  }
  return got;
}

/* ---- tools and structured output ----------------------------------------------------- */

/* The server's vocabulary trie for constrained decoding, built on first use. NULL + 500 when
 * out of memory. */
static const df_jsg_vocab *grammar_vocab(srv_ctx *s, df_api_error *e) {
  pthread_mutex_lock(&s->mu);
  char err[256] = "";
  if (!s->gvocab) s->gvocab = df_jsg_vocab_new(s->tok, err, sizeof err);
  const df_jsg_vocab *v = s->gvocab;
  pthread_mutex_unlock(&s->mu);
  if (!v) df_api_error_set(e, 500, "server_error", NULL, NULL, "constrained decoding: %s", err);
  return v;
}

/* Compile one grammar; a schema the recogniser does not support is a 400 naming `param` and
 * the keyword. */
static int compile(const char *schema, const char *prefix, const char *suffix, const char *param,
                   df_jsg **out, df_api_error *e) {
  char err[400];
  if (df_jsg_compile(schema, schema ? strlen(schema) : 0, prefix, suffix, out, NULL, 0, err,
                     sizeof err) == 0)
    return 0;
  return df_api_error_set(e, 400, NULL, param, NULL, "%s: %s", param, err);
}

/* A tool's `parameters` as the schema of its arguments, which are always a JSON object: no
 * parameters or a schema without "type" get "type": "object" (clients send {} for "no
 * parameters"), a type list keeps "object" alone; a schema whose type excludes objects is a 400
 * naming param. Returns malloc'd JSON text, or NULL with *e set. */
static char *object_schema(const char *params, const char *param, df_api_error *e) {
  json_t *o = params ? json_loads(params, 0, NULL) : json_object();
  if (!o || !json_is_object(o)) {
    json_decref(o);
    df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return NULL;
  }
  json_t *t = json_object_get(o, "type");
  bool has_obj = !t || (json_is_string(t) && !strcmp(json_string_value(t), "object"));
  for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++)
    has_obj |= json_is_string(json_array_get(t, i)) &&
               !strcmp(json_string_value(json_array_get(t, i)), "object");
  if (!has_obj) {
    json_decref(o);
    df_api_error_set(e, 400, NULL, param, NULL, "%s: a function's arguments are a JSON object, "
                     "but this schema's \"type\" does not allow one", param);
    return NULL;
  }
  json_object_set_new(o, "type", json_string("object"));
  char *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!text) df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  return text;
}

/* *s = before + *s + after (malloc'd; the old *s freed). 0, or -1 when out of memory (*s
 * freed and NULL). */
static int wrap(char **s, const char *before, const char *after) {
  size_t a = strlen(before), b = *s ? strlen(*s) : 0, c = strlen(after);
  char *n = *s ? malloc(a + b + c + 1) : NULL;
  if (n) {
    memcpy(n, before, a);
    memcpy(n + a, *s, b);
    memcpy(n + a + b, after, c + 1);
  }
  free(*s);
  *s = n;
  return n ? 0 : -1;
}

/* The grammars a request's output must follow (*n = 0: none): response_format json_object /
 * json_schema, or a forced tool call (tool_choice named: that tool's frame around its
 * parameters; "required": one alternative per tool). Each alternative is malloc'd into g[].
 * A forced call's frame text that every alternative starts with goes to *forced (malloc'd, or
 * NULL): the caller appends its tokens to the prompt (the model would spend a token per byte
 * spelling the fixed text out under the mask) and the grammars start after it. Kimi K3's
 * tools element follows the response element: its prompt opens an empty response (thinking off,
 * k3_constrained), so the forced text starts by closing it and the grammar ends by closing the
 * message. */
static int plan_grammars(conn *c, const df_api_request *rq, df_jsg **g, int *n, char **forced,
                         df_api_error *e) {
  *n = 0;
  *forced = NULL;
  if (rq->kind != DF_API_CHAT) return 0;
  if (rq->format == DF_API_FORMAT_JSON_OBJECT || rq->format == DF_API_FORMAT_JSON_SCHEMA) {
    if (compile(rq->format == DF_API_FORMAT_JSON_SCHEMA ? rq->schema_json : NULL, NULL, NULL,
                "response_format.json_schema.schema", &g[0], e))
      return -1;
    *n = 1;
    return 0;
  }
  df_chat_family fam = df_chat_template_family(c->srv->tmpl);
  if (rq->tool_choice != DF_API_TOOLS_REQUIRED && rq->tool_choice != DF_API_TOOLS_NAMED) return 0;
  bool k3 = fam == DF_CHAT_KIMI_K3;
  size_t earlier = 0; /* Kimi K2 numbers calls across the conversation (K3: within the message) */
  for (size_t i = 0; !k3 && i < rq->n_msgs; i++) earlier += rq->msgs[i].n_tool_calls;
  char *pre[DF_SCHED_MAX_GRAMMARS], *suf[DF_SCHED_MAX_GRAMMARS];
  size_t tool[DF_SCHED_MAX_GRAMMARS], np = 0, common = 0;
  int rc = 0;
  for (size_t t = 0; t < rq->n_tools && np < DF_SCHED_MAX_GRAMMARS; t++) {
    if (rq->tool_choice == DF_API_TOOLS_NAMED && strcmp(rq->tool_names[t], rq->tool_choice_name))
      continue;
    if (df_tool_call_frame(fam, rq->tool_names[t], earlier, &pre[np], &suf[np]) != 0 ||
        (k3 && (wrap(&pre[np], "<|close|>response<|sep|>", "") != 0 ||
                wrap(&suf[np], "", "<|close|>message<|sep|>") != 0))) {
      rc = df_api_error_set(e, 400, NULL, "tool_choice", NULL, "tool_choice: this model's chat "
                            "format cannot write a call of '%s'", rq->tool_names[t]);
      free(pre[np]);
      free(suf[np]);
      break;
    }
    tool[np] = t;
    /* the text every frame starts with */
    if (np == 0) common = strlen(pre[0]);
    else
      for (size_t k = 0; k < common; k++)
        if (pre[np][k] != pre[0][k]) {
          common = k;
          break;
        }
    np++;
  }
  while (rc == 0 && common > 0 && ((unsigned char)pre[0][common] & 0xC0) == 0x80) common--;
  for (size_t i = 0; rc == 0 && i < np; i++) {
    char param[96];
    snprintf(param, sizeof param, "tools[%zu].function.parameters", tool[i]);
    char *schema = object_schema(rq->tool_params[tool[i]], param, e);
    if (!schema) rc = -1;
    else if (compile(schema, pre[i] + common, suf[i], param, &g[*n], e) != 0) rc = -1;
    else (*n)++;
    free(schema);
  }
  if (rc == 0 && common && !(*forced = strndup(pre[0], common)))
    rc = df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < np; i++) {
    free(pre[i]);
    free(suf[i]);
  }
  return rc;
}

/* The prompt ids followed by those of `text` (its added tokens matched as the model writes
 * them). */
static int append_forced(const srv_ctx *s, int32_t **ids, size_t *n, const char *text,
                         df_api_error *e) {
  int32_t *more = NULL;
  size_t m = 0;
  char err[256];
  if (df_chat_encode_markup(s->tmpl, s->tok, text, strlen(text), &more, &m, err, sizeof err) != 0)
    return df_api_error_set(e, 500, "server_error", NULL, NULL, "tool call frame: %s", err);
  int32_t *b = realloc(*ids, (*n + m) * sizeof *b);
  if (!b) {
    free(more);
    return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  memcpy(b + *n, more, m * sizeof *b);
  *ids = b;
  *n += m;
  free(more);
  return 0;
}

static int evq_push(conn *c, char *ev) {
  if (!ev) return -1;
  if (c->evq_n == c->evq_cap) {
    size_t cap = c->evq_cap ? 2 * c->evq_cap : 16;
    char **q = realloc(c->evq, cap * sizeof *q);
    if (!q) {
      free(ev);
      return -1;
    }
    c->evq = q;
    c->evq_cap = cap;
  }
  c->evq[c->evq_n++] = ev;
  return 0;
}

/* Stream: tool-parser events as chunks (consecutive content merged; a call's begin as
 * delta.tool_calls [{index, id, type, function: {name, arguments: ""}}], its argument pieces
 * as [{index, function: {arguments}}]), queued in c->evq; the pending logprobs ride on the
 * first. Returns 0, or -1 when out of memory. */
static int queue_tool_events(conn *c, const df_tool_ev *ev, size_t n) {
  for (size_t i = 0; i < n; i++) {
    df_api_part p = {0};
    char *buf = NULL;
    if (ev[i].kind == DF_TOOL_EV_CONTENT) {
      size_t len = 0, k = i;
      for (; k < n && ev[k].kind == DF_TOOL_EV_CONTENT; k++) len += ev[k].len;
      if (!(buf = malloc(len + 1))) return -1;
      len = 0;
      for (; i < k; i++) {
        memcpy(buf + len, ev[i].text, ev[i].len);
        len += ev[i].len;
      }
      i--;
      if (!len) {
        free(buf);
        continue;
      }
      p.text = buf;
      p.text_len = len;
    } else if ((ev[i].kind == DF_TOOL_EV_CALL_BEGIN || ev[i].kind == DF_TOOL_EV_ARGS) &&
               !(c->one_call && ev[i].index > 0)) {
      json_t *fn = ev[i].kind == DF_TOOL_EV_CALL_BEGIN
                       ? json_pack("{s:s, s:s}", "name", ev[i].name, "arguments", "")
                       : json_pack("{s:s%}", "arguments", ev[i].text, ev[i].len);
      json_t *call = ev[i].kind == DF_TOOL_EV_CALL_BEGIN
                         ? json_pack("{s:I, s:s, s:s, s:o}", "index", (json_int_t)ev[i].index, "id",
                                     ev[i].id, "type", "function", "function", fn)
                         : json_pack("{s:I, s:o}", "index", (json_int_t)ev[i].index, "function", fn);
      if (!call || !(p.tool_calls = json_pack("[o]", call))) return -1;
    } else {
      continue;
    }
    p.logprobs = c->lp_n ? pending_logprobs(c) : NULL;
    size_t elen;
    char *e = df_api_sse_chunk(&c->meta, &p, &elen);
    free(buf);
    if (evq_push(c, e) != 0) return -1;
  }
  return 0;
}

/* Stream: the model's text (at_end: its end) through the reasoning splitter and then the
 * tool-call parser, either of which may be absent: reasoning as delta.reasoning_content
 * chunks, content as delta.content chunks or tool-call events (queue_tool_events), in the
 * model's order, queued in c->evq; the pending logprobs ride on the first. Returns 0, or -1
 * when out of memory. */
static int queue_text(conn *c, const char *text, size_t len, bool at_end) {
  const df_tool_ev *tev;
  size_t ntev;
  bool cut = c->news.finish == DF_SCHED_LENGTH;
  if (!c->rp) {
    if (at_end ? df_tool_parser_finish(c->tp, cut, &tev, &ntev) != 0
               : df_tool_parser_feed(c->tp, text, len, &tev, &ntev) != 0)
      return -1;
    return queue_tool_events(c, tev, ntev);
  }
  const df_reasoning_ev *ev;
  size_t nev;
  if (at_end ? df_reasoning_parser_finish(c->rp, &ev, &nev) != 0
             : df_reasoning_parser_feed(c->rp, text, len, &ev, &nev) != 0)
    return -1;
  for (size_t i = 0; i < nev; i++) {
    bool reasoning = ev[i].kind == DF_REASONING_EV_REASONING;
    if (!reasoning && c->tp) {
      if (df_tool_parser_feed(c->tp, ev[i].text, ev[i].len, &tev, &ntev) != 0 ||
          queue_tool_events(c, tev, ntev) != 0)
        return -1;
      continue;
    }
    df_api_part p = {.text = reasoning ? NULL : ev[i].text, .text_len = reasoning ? 0 : ev[i].len,
                     .reasoning = reasoning ? ev[i].text : NULL,
                     .reasoning_len = reasoning ? ev[i].len : 0,
                     .logprobs = c->lp_n ? pending_logprobs(c) : NULL};
    size_t elen;
    if (evq_push(c, df_api_sse_chunk(&c->meta, &p, &elen)) != 0) return -1;
  }
  if (at_end && c->tp) {
    if (df_tool_parser_finish(c->tp, cut, &tev, &ntev) != 0 || queue_tool_events(c, tev, ntev) != 0)
      return -1;
  }
  return 0;
}

/* The final answer's tool calls ([{id, type, function: {name, arguments}}], NULL when none). */
static json_t *final_calls(conn *c) {
  size_t n = df_tool_parser_n_calls(c->tp);
  if (!n) return NULL;
  if (c->one_call) n = 1;
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) {
    const df_tool_call_out *t = df_tool_parser_call(c->tp, i);
    json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", t->id, "type",
                                       "function", "function", "name", t->name, "arguments",
                                       t->arguments, t->arguments_len));
  }
  return a;
}

/* finish_reason: "tool_calls" when the model ended its turn after complete calls. */
static const char *finish_of(conn *c) {
  if (c->tp && c->news.finish == DF_SCHED_STOP && df_tool_parser_n_calls(c->tp) > 0)
    return "tool_calls";
  return finish_name(c->news.finish);
}

/* The next event of the stream into c->ev; returns 1 when one was made, 0 at the end, -1 on
 * a client disconnect or out of memory. */
static int next_event(conn *c) {
  free(c->ev);
  c->ev = NULL;
  c->ev_len = c->ev_off = 0;
  const int64_t keepalive_at = df_srv_now_ms() + stream_keepalive_ms(c);
  for (;;) {
    switch (c->stage) {
    case 0:
      c->stage = 1;
      if (c->meta.kind == DF_API_CHAT) {
        df_api_part p = {.role = "assistant", .text = ""};
        c->ev = df_api_sse_chunk(&c->meta, &p, &c->ev_len);
        return c->ev ? 1 : -1;
      }
      continue;
    case 1:
      if (c->evq_head < c->evq_n) {
        c->ev = c->evq[c->evq_head];
        c->evq[c->evq_head++] = NULL;
        c->ev_len = strlen(c->ev);
        return 1;
      }
      if (c->tp && c->forced) { /* the frame, as if the model had written it */
        int rc = queue_text(c, c->forced, strlen(c->forced), false);
        free(c->forced);
        c->forced = NULL;
        if (rc != 0) return -1;
        continue;
      }
      if ((c->rp || c->tp) && c->text_off < c->text_len) {
        if (queue_text(c, c->text + c->text_off, c->text_len - c->text_off, false) != 0)
          return -1;
        c->text_off = c->text_len;
        continue;
      }
      if (c->text_off < c->text_len) {
        size_t n = utf8_cut(c->text + c->text_off, c->text_len - c->text_off, TEXT_PER_EVENT);
        df_api_part p = {.text = c->text + c->text_off, .text_len = n,
                         .logprobs = pending_logprobs(c)};
        c->ev = df_api_sse_chunk(&c->meta, &p, &c->ev_len);
        c->text_off += n;
        return c->ev ? 1 : -1;
      }
      free(c->text);
      c->text = NULL;
      c->text_len = c->text_off = 0;
      if (c->news.finish != DF_SCHED_RUNNING) {
        if (c->news.finish == DF_SCHED_ERROR || c->news.finish == DF_SCHED_CANCELLED) {
          df_api_error e;
          df_api_error_set(&e, 500, "server_error", NULL, NULL, "generation failed: %s",
                           c->news.error[0] ? c->news.error : "cancelled");
          df_srv_log(c->srv, true, "%s: stream ended by an error: %s", df_srv_route_name[c->route], e.message);
          c->ev = df_api_sse_error(&e, &c->ev_len);
          c->stage = 4;
          return c->ev ? 1 : -1;
        }
        if ((c->rp || c->tp) && !c->tp_done) { /* what the parsers held back */
          c->tp_done = true;
          if (queue_text(c, NULL, 0, true) != 0) return -1;
          continue;
        }
        df_api_part p = {.text = c->meta.kind == DF_API_CHAT ? NULL : "",
                         .finish = finish_of(c),
                         .logprobs = c->lp_n ? pending_logprobs(c) : NULL};
        c->ev = df_api_sse_chunk(&c->meta, &p, &c->ev_len);
        c->stage = c->meta.include_usage ? 2 : 3;
        return c->ev ? 1 : -1;
      }
      if (take_news(c) < 0) return -1;
      if (c->text || c->news.finish != DF_SCHED_RUNNING) continue;
      int64_t left = keepalive_at - df_srv_now_ms();
      if (left <= 0) {
        c->ev = strdup(DF_API_SSE_KEEPALIVE);
        c->ev_len = strlen(DF_API_SSE_KEEPALIVE);
        return c->ev ? 1 : -1;
      }
      if (wait_news(c, left < 1000 ? (int)left : 1000) != 0) {
        client_gone(c);
        return -1;
      }
      continue;
    case 2: {
      df_api_usage u = {c->news.prompt_tokens, c->news.completion_tokens, c->news.cached_tokens,
                        c->news.draft_tokens, c->news.draft_accepted};
      c->ev = df_api_sse_usage(&c->meta, &u, &c->ev_len);
      c->stage = 3;
      return c->ev ? 1 : -1;
    }
    case 3:
      c->ev = strdup(DF_API_SSE_DONE);
      c->ev_len = strlen(DF_API_SSE_DONE);
      c->stage = 4;
      return c->ev ? 1 : -1;
    default:
      return 0;
    }
  }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  conn *c = cls;
  (void)pos;
  if (c->ev_off >= c->ev_len) {
    df_srv_conn_timeout(c, true); /* next_event may wait for the model */
    int r = next_event(c);
    df_srv_conn_timeout(c, false); /* from here the client has to read what was produced */
    if (r == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    if (r < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t n = c->ev_len - c->ev_off;
  if (n > max) n = max;
  memcpy(buf, c->ev + c->ev_off, n);
  c->ev_off += n;
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  df_srv_conn_unref(cls);
}

/* ---- generation requests ------------------------------------------------------------- */

/* A lower bound on the tokens `bytes` bytes of text encode to: no token stands for more than
 * max_piece bytes, and normalisation (NFC) shrinks UTF-8 text by at most a factor 3 (three
 * Hangul jamo into one syllable, UAX #15), so at least bytes / (3 * max_piece) tokens. */
static size_t text_min_tokens(const srv_ctx *s, size_t bytes) {
  return s->max_piece ? bytes / (3 * s->max_piece) : 0;
}

/* True for a Kimi K3 chat whose answer is constrained from its first token (response_format
 * JSON, a forced tool call): its prompt opens the response element, not the think element. */
static bool k3_constrained(const srv_ctx *s, const df_api_request *rq) {
  return rq->kind == DF_API_CHAT && df_chat_template_family(s->tmpl) == DF_CHAT_KIMI_K3 &&
         (rq->format == DF_API_FORMAT_JSON_OBJECT || rq->format == DF_API_FORMAT_JSON_SCHEMA ||
          (rq->n_tools && (rq->tool_choice == DF_API_TOOLS_REQUIRED ||
                           rq->tool_choice == DF_API_TOOLS_NAMED)));
}

/* Where a chat answer starts (engine/text/reasoning.h): after a forced call's frame, in the
 * content; Kimi K3 in the think element when thinking is on (its default) and the answer is
 * not constrained JSON, else in the response element; Qwen3 with enable_thinking false has an
 * empty think block in its prompt: content; otherwise the model opens reasoning itself. */
static df_reasoning_start reasoning_start(const srv_ctx *s, const df_api_request *rq,
                                          bool forced) {
  df_chat_family fam = df_chat_template_family(s->tmpl);
  if (forced) return DF_REASONING_OUT;
  if (fam == DF_CHAT_KIMI_K3)
    return rq->enable_thinking != 0 && !k3_constrained(s, rq) ? DF_REASONING_IN : DF_REASONING_OUT;
  if (fam == DF_CHAT_QWEN3 && rq->enable_thinking == 0) return DF_REASONING_OUT;
  return DF_REASONING_AUTO;
}

/* The prompt's ids. A request that cannot fit in max_prompt tokens by a cheap lower bound
 * (token ids counted, the chat template's per-message minimum plus the text's bound from its
 * bytes, text_min_tokens) is refused before anything is encoded: encoding a body of many
 * thousand messages, or megabytes of text, costs seconds. */
static int tokenize(conn *c, const df_api_request *rq, int64_t max_prompt, int32_t **ids,
                    size_t *n, df_api_error *e) {
  srv_ctx *s = c->srv;
  char err[512];
  int64_t ctx = df_sched_ctx(s->sched);
  *ids = NULL;
  *n = 0;
  if (rq->kind == DF_API_CHAT) {
    if (!s->tmpl)
      return df_api_error_set(e, 400, NULL, "messages", NULL,
                              "this model has no chat template; use /v1/completions");
    df_chat_family fam = df_chat_template_family(s->tmpl);
    size_t n_calls = 0;
    for (size_t i = 0; i < rq->n_msgs; i++) n_calls += rq->msgs[i].n_tool_calls;
    df_chat_msg *msgs = calloc(rq->n_msgs, sizeof *msgs);
    df_chat_tool_call *calls = calloc(n_calls ? n_calls : 1, sizeof *calls);
    if (!msgs || !calls) {
      free(msgs);
      free(calls);
      return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    size_t text = rq->tools_json ? strlen(rq->tools_json) : 0;
    for (size_t i = 0, k = 0; i < rq->n_msgs; i++) {
      const df_api_msg *m = &rq->msgs[i];
      msgs[i].role = m->role;
      /* null content (an assistant turn of calls) is JSON null where the template tells it
       * from "" (DeepSeek-V3 prints calls only then; Kimi K3), else "" */
      msgs[i].content = m->content ? m->content
                        : (fam == DF_CHAT_DEEPSEEK_V3 || fam == DF_CHAT_KIMI_K3) ? NULL : "";
      msgs[i].reasoning_content = m->reasoning;
      msgs[i].name = m->name;
      msgs[i].tool_call_id = m->tool_call_id;
      msgs[i].tool_calls = m->n_tool_calls ? &calls[k] : NULL;
      msgs[i].n_tool_calls = m->n_tool_calls;
      for (size_t t = 0; t < m->n_tool_calls; t++, k++) {
        calls[k] = (df_chat_tool_call){.name = m->tool_calls[t].name,
                                       .arguments = m->tool_calls[t].arguments,
                                       .id = m->tool_calls[t].id};
        text += strlen(calls[k].arguments);
      }
      text += (m->content ? strlen(m->content) : 0) + (m->reasoning ? strlen(m->reasoning) : 0);
    }
    /* each message's text is encoded apart (one token per message lost to rounding), and a
     * non-control token the template minimum counts may merge with it (one more) */
    size_t tl = text_min_tokens(s, text), per = tl > 2 * rq->n_msgs ? tl - 2 * rq->n_msgs : 0;
    size_t lb = df_chat_min_tokens(s->tmpl, s->tok, msgs, rq->n_msgs) + per;
    if ((int64_t)lb > max_prompt) {
      free(msgs);
      free(calls);
      return df_api_error_set(e, 400, NULL, "messages", "context_length_exceeded",
                              "The %zu messages encode to at least %zu tokens, more than the "
                              "%lld this server accepts (context of %lld tokens).", rq->n_msgs,
                              lb, (long long)max_prompt, (long long)ctx);
    }
    static const char *const effort[] = {NULL, "low", "medium", "high", "max", ""};
    if (rq->enable_thinking >= 0 && !df_chat_template_has_thinking(s->tmpl)) {
      free(msgs);
      free(calls);
      return df_api_error_set(e, 400, NULL, "chat_template_kwargs.enable_thinking", NULL,
                              "enable_thinking / thinking is not an option of this model's chat "
                              "template (it renders the same prompt either way)");
    }
    if (rq->thinking_effort != DF_API_EFFORT_UNSET &&
        df_chat_template_family(s->tmpl) != DF_CHAT_KIMI_K3) {
      free(msgs);
      free(calls);
      const char *f = rq->effort_field ? rq->effort_field : "chat_template_kwargs.thinking_effort";
      return df_api_error_set(e, 400, NULL, f, NULL,
                              "%s is not an option of this model's chat template "
                              "(only Kimi K3's XTML has it)", f);
    }
    int think = rq->enable_thinking;
    if (k3_constrained(s, rq)) { /* constrained from the first token: the response element */
      if (think == 1) {
        const char *f = rq->format == DF_API_FORMAT_JSON_OBJECT ||
                                rq->format == DF_API_FORMAT_JSON_SCHEMA ? "response_format"
                                                                        : "tool_choice";
        free(msgs);
        free(calls);
        return df_api_error_set(e, 400, NULL, f, NULL, "%s: constrained output starts at the "
                                "answer's first token, so on Kimi K3 it needs thinking off (it "
                                "would fill the think element)", f);
      }
      think = 0;
    }
    static const char *const choice[] = {"auto", "none", "required", "required"};
    df_chat_opts co = {.add_generation_prompt = true, .enable_thinking = think,
                       .thinking_effort = effort[rq->thinking_effort],
                       .tools_json = rq->tools_json,
                       .tool_choice = rq->n_tools ? choice[rq->tool_choice] : NULL,
                       .response_format_json = rq->format_json};
    int rc = df_chat_encode(s->tmpl, s->tok, msgs, rq->n_msgs, &co, ids, n, err, sizeof err);
    free(msgs);
    free(calls);
    if (rc != 0) return df_api_error_set(e, 400, NULL, "messages", NULL, "messages: %s", err);
    return 0;
  }
  if (rq->prompt_ids) {
    if ((int64_t)rq->n_prompt_ids > max_prompt)
      return df_api_error_set(e, 400, NULL, "prompt", "context_length_exceeded",
                              "The prompt has %zu tokens, more than the %lld this server accepts "
                              "(context of %lld tokens).", rq->n_prompt_ids, (long long)max_prompt,
                              (long long)ctx);
    *ids = malloc(rq->n_prompt_ids * sizeof **ids);
    if (!*ids) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(*ids, rq->prompt_ids, rq->n_prompt_ids * sizeof **ids);
    *n = rq->n_prompt_ids;
    return 0;
  }
  size_t plen = strlen(rq->prompt), lb = text_min_tokens(s, plen);
  if ((int64_t)lb > max_prompt)
    return df_api_error_set(e, 400, NULL, "prompt", "context_length_exceeded",
                            "The prompt of %zu bytes encodes to at least %zu tokens, more than "
                            "the %lld this server accepts (context of %lld tokens).", plen, lb,
                            (long long)max_prompt, (long long)ctx);
  if (df_tok_encode(s->tok, rq->prompt, plen, DF_TOK_ADD_SPECIAL | DF_TOK_BOS_ONCE, ids, n, err,
                    sizeof err) != 0)
    return df_api_error_set(e, 400, NULL, "prompt", NULL, "prompt: %s", err);
  return 0;
}

enum MHD_Result df_srv_handle_generate(conn *c, struct MHD_Connection *mc) {
  srv_ctx *s = c->srv;
  df_api_request rq;
  df_api_error e;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  enum MHD_Result ret;
  df_api_kind kind = c->route == R_CHAT ? DF_API_CHAT : DF_API_COMPLETION;
  if (df_api_parse(kind, c->body ? c->body : "", c->len, &rq, &e) != 0) return df_srv_send_error(c, mc, &e);
  if (strcmp(rq.model, s->model_id)) {
    df_api_error_set(&e, 404, NULL, "model", "model_not_found",
                     "The model `%s` does not exist or you do not have access to it (this "
                     "server serves `%s`).", rq.model, s->model_id);
    goto fail;
  }
  int64_t ctx = df_sched_ctx(s->sched);
  int64_t max_prompt = s->o.max_prompt > 0 && s->o.max_prompt < ctx - 1 ? s->o.max_prompt : ctx - 1;
  if (tokenize(c, &rq, max_prompt, &ids, &n_ids, &e) != 0) goto fail;
  int64_t np = (int64_t)n_ids;
  if (np == 0) {
    df_api_error_set(&e, 400, NULL, kind == DF_API_CHAT ? "messages" : "prompt", NULL,
                     "the prompt encodes to no tokens");
    goto fail;
  }
  if (np > max_prompt) {
    df_api_error_set(&e, 400, NULL, kind == DF_API_CHAT ? "messages" : "prompt",
                     "context_length_exceeded",
                     "The prompt has %lld tokens, more than the %lld this server accepts "
                     "(context of %lld tokens).", (long long)np, (long long)max_prompt, (long long)ctx);
    goto fail;
  }
  int64_t max_tokens = rq.max_tokens;
  if (max_tokens < 0) max_tokens = kind == DF_API_CHAT ? ctx - np : (ctx - np < 16 ? ctx - np : 16);
  if (np + max_tokens > ctx) {
    df_api_error_set(&e, 400, NULL, rq.max_tokens >= 0 ? "max_tokens" : kind == DF_API_CHAT ? "messages" : "prompt",
                     "context_length_exceeded",
                     "This model's maximum context length is %lld tokens. However, you requested "
                     "%lld tokens (%lld in the prompt, %lld for the completion). Please reduce the "
                     "prompt or max_tokens.", (long long)ctx, (long long)(np + max_tokens),
                     (long long)np, (long long)max_tokens);
    goto fail;
  }
  df_jsg *grammars[DF_SCHED_MAX_GRAMMARS];
  int n_grammars = 0;
  char *forced = NULL;
  if (plan_grammars(c, &rq, grammars, &n_grammars, &forced, &e) != 0) goto fail_grammars;
  if (forced) {
    if (append_forced(s, &ids, &n_ids, forced, &e) != 0) goto fail_grammars;
    np = (int64_t)n_ids;
    if (np + max_tokens > ctx) max_tokens = ctx - np;
    if (max_tokens < 1) {
      df_api_error_set(&e, 400, NULL, "messages", "context_length_exceeded", "The prompt and "
                       "the forced tool call's frame take the whole context of %lld tokens",
                       (long long)ctx);
      goto fail_grammars;
    }
  }
  const df_jsg_vocab *gvocab = n_grammars ? grammar_vocab(s, &e) : NULL;
  if (n_grammars && !gvocab) goto fail_grammars;
  /* tools on: the output is parsed into content and calls */
  bool tools = kind == DF_API_CHAT && rq.n_tools && rq.tool_choice != DF_API_TOOLS_NONE;
  if (tools && !(c->tp = df_tool_parser_new(df_chat_template_family(s->tmpl), df_srv_rand(s)))) {
    df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
    goto fail_grammars;
  }
  df_chat_family fam = s->tmpl ? df_chat_template_family(s->tmpl) : DF_CHAT_QWEN3;
  /* a JSON answer (response_format) is content from its first token to its end: splitting it
   * would take markup spelt inside its strings for the format's */
  bool json_answer = n_grammars && !forced;
  if (kind == DF_API_CHAT && !s->o.reasoning_raw && !json_answer && df_reasoning_family(fam) &&
      !(c->rp = df_reasoning_parser_new(fam, reasoning_start(s, &rq, forced != NULL)))) {
    df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
    goto fail_grammars;
  }
  int32_t keep[DF_TOK_STREAM_KEEP_MAX];
  size_t n_keep = 0;
  /* the reasoning markup stays in the text with or without the split ("none": as written) */
  if (kind == DF_API_CHAT)
    n_keep += df_tok_special_ids(s->tok, df_reasoning_markers(fam), keep, DF_TOK_STREAM_KEEP_MAX);
  if (tools)
    n_keep += df_tok_special_ids(s->tok, df_tool_call_markers(fam), keep + n_keep,
                                 DF_TOK_STREAM_KEEP_MAX - n_keep);
  if (c->tp) { /* the frame is part of the model's answer: the parser reads it first */
    c->forced = forced;
    forced = NULL;
  }
  free(forced);
  forced = NULL;
  c->one_call = tools && (!rq.parallel_tool_calls || n_grammars);
  const df_gen_config *g = df_model_gen_cfg(s->m);
  df_sched_req sr = {
      .prompt = ids,
      .n_prompt = np,
      .max_tokens = max_tokens,
      .sp = {.temperature = rq.temperature >= 0 ? rq.temperature : (g->do_sample ? g->temperature : 0.0),
             .top_p = rq.top_p > 0 ? rq.top_p : (g->do_sample ? g->top_p : 1.0),
             .top_k = rq.top_k >= 0 ? rq.top_k : (g->do_sample ? g->top_k : 0),
             .seed = rq.has_seed ? rq.seed : df_srv_rand(s) >> 1},
      .ignore_eos = rq.ignore_eos,
      /* a grammar decides where constrained output ends: a stop string would cut a document
       * (or a forced call) short and still say "stop" */
      .stop = (const char *const *)rq.stop,
      .n_stop = n_grammars ? 0 : rq.n_stop,
      .logprobs = rq.logprobs,
      .top_logprobs = rq.top_logprobs,
      .grammars = (const df_jsg *const *)grammars,
      .n_grammars = n_grammars,
      .gvocab = gvocab,
      /* the markup the parsers read (Kimi K2's call markers and K2 Thinking's <think> are
       * special tokens) */
      .keep_special = keep,
      .chat = kind == DF_API_CHAT, /* the block drafter's traffic when both drafters exist */
      .n_keep_special = (int)n_keep};
  c->logprobs = rq.logprobs;
  int status;
  char err[512];
  if (df_sched_submit(s->sched, &sr, &c->job, &status, err, sizeof err) != 0) {
    df_api_error_set(&e, status, status == 429 ? "requests" : status >= 500 ? "server_error" : NULL,
                     status == 400 ? "prompt" : NULL,
                     status == 429 ? "rate_limit_exceeded" : NULL, "%s", err);
    goto fail_grammars;
  }
  n_grammars = 0; /* the job owns them */
  free(ids);
  ids = NULL;
  c->prompt_tokens = np;
  snprintf(c->id, sizeof c->id, "%s%016llx%08llx", kind == DF_API_CHAT ? "chatcmpl-" : "cmpl-",
           (unsigned long long)df_srv_rand(s), (unsigned long long)(df_srv_rand(s) & 0xffffffffu));
  c->meta = (df_api_meta){.kind = kind, .id = c->id, .created = (int64_t)time(NULL),
                          .model = s->model_id, .include_usage = rq.include_usage};
  if (rq.stream) {
    c->streaming = true;
    df_api_request_free(&rq);
    atomic_fetch_add(&c->refs, 1);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, c, stream_free);
    if (!r) {
      atomic_fetch_sub(&c->refs, 1);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    ret = MHD_queue_response(mc, 200, r);
    MHD_destroy_response(r);
    df_srv_count(s, c->route, 200);
    c->status = 200;
    return ret;
  }
  df_api_request_free(&rq);
  /* non-streaming: collect everything */
  for (;;) {
    int got = take_news(c);
    if (got < 0) {
      df_sched_job_cancel(c->job);
      df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
      return df_srv_send_error(c, mc, &e);
    }
    if (c->news.finish != DF_SCHED_RUNNING) break;
    if (!got && wait_news(c, 1000) != 0) {
      client_gone(c);
      return MHD_NO;
    }
  }
  if (c->news.finish == DF_SCHED_ERROR || c->news.finish == DF_SCHED_CANCELLED) {
    bool down = strstr(c->news.error, "shutting down") != NULL;
    df_api_error_set(&e, down ? 503 : 500, "server_error", NULL, NULL, "generation failed: %s",
                     c->news.error[0] ? c->news.error : "cancelled");
    return df_srv_send_error(c, mc, &e);
  }
  df_api_usage u = {c->news.prompt_tokens, c->news.completion_tokens, c->news.cached_tokens,
                    c->news.draft_tokens, c->news.draft_accepted};
  size_t len = 0;
  df_api_part p = {.text = c->text ? c->text : "", .text_len = c->text_len,
                   .finish = finish_of(c), .logprobs = pending_logprobs(c)};
  if (c->rp) { /* reasoning and content */
    const df_reasoning_ev *ev;
    size_t nev;
    if ((c->forced && df_reasoning_parser_feed(c->rp, c->forced, strlen(c->forced), &ev, &nev)) ||
        (c->text_len && df_reasoning_parser_feed(c->rp, c->text, c->text_len, &ev, &nev) != 0) ||
        df_reasoning_parser_finish(c->rp, &ev, &nev) != 0) {
      json_decref(p.logprobs);
      df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
      return df_srv_send_error(c, mc, &e);
    }
    p.reasoning = df_reasoning_parser_reasoning(c->rp, &p.reasoning_len);
    p.text = df_reasoning_parser_content(c->rp, &p.text_len);
    if (!p.reasoning_len) p.reasoning = NULL;
  }
  if (c->tp) { /* content and calls */
    const df_tool_ev *ev;
    size_t nev;
    if ((!c->rp && c->forced &&
         df_tool_parser_feed(c->tp, c->forced, strlen(c->forced), &ev, &nev) != 0) ||
        (p.text_len && df_tool_parser_feed(c->tp, p.text, p.text_len, &ev, &nev) != 0) ||
        df_tool_parser_finish(c->tp, c->news.finish == DF_SCHED_LENGTH, &ev, &nev) != 0) {
      json_decref(p.logprobs);
      df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
      return df_srv_send_error(c, mc, &e);
    }
    c->tp_done = true;
    p.text = df_tool_parser_content(c->tp, &p.text_len);
    p.tool_calls = final_calls(c);
    p.finish = finish_of(c);
    if (p.tool_calls && !p.text_len) p.text = NULL; /* OpenAI: "content": null beside calls */
  }
  char *body = df_api_response(&c->meta, &p, &u, &len);
  return df_srv_send_json(c, mc, 200, body);
fail_grammars:
  free(forced);
  for (int i = 0; i < n_grammars; i++) df_jsg_destroy(&grammars[i]);
fail:
  free(ids);
  df_api_request_free(&rq);
  return df_srv_send_error(c, mc, &e);
}

