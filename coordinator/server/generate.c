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
        df_api_part p = {.text = c->meta.kind == DF_API_CHAT ? NULL : "",
                         .finish = finish_name(c->news.finish),
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
      df_api_usage u = {c->news.prompt_tokens, c->news.completion_tokens, c->news.cached_tokens};
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
static size_t text_min_tokens(const df_srv *s, size_t bytes) {
  return s->max_piece ? bytes / (3 * s->max_piece) : 0;
}

/* The prompt's ids. A request that cannot fit in max_prompt tokens by a cheap lower bound
 * (token ids counted, the chat template's per-message minimum plus the text's bound from its
 * bytes, text_min_tokens) is refused before anything is encoded: encoding a body of many
 * thousand messages, or megabytes of text, costs seconds. */
static int tokenize(conn *c, const df_api_request *rq, int64_t max_prompt, int32_t **ids,
                    size_t *n, df_api_error *e) {
  df_srv *s = c->srv;
  char err[512];
  int64_t ctx = df_sched_ctx(s->sched);
  *ids = NULL;
  *n = 0;
  if (rq->kind == DF_API_CHAT) {
    if (!s->tmpl)
      return df_api_error_set(e, 400, NULL, "messages", NULL,
                              "this model has no chat template; use /v1/completions");
    df_chat_msg *msgs = calloc(rq->n_msgs, sizeof *msgs);
    if (!msgs) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < rq->n_msgs; i++) {
      msgs[i].role = rq->msgs[i].role;
      msgs[i].content = rq->msgs[i].content;
      msgs[i].reasoning_content = rq->msgs[i].reasoning;
    }
    size_t text = 0;
    for (size_t i = 0; i < rq->n_msgs; i++)
      text += (msgs[i].content ? strlen(msgs[i].content) : 0) +
              (msgs[i].reasoning_content ? strlen(msgs[i].reasoning_content) : 0);
    /* each message's text is encoded apart (one token per message lost to rounding), and a
     * non-control token the template minimum counts may merge with it (one more) */
    size_t tl = text_min_tokens(s, text), per = tl > 2 * rq->n_msgs ? tl - 2 * rq->n_msgs : 0;
    size_t lb = df_chat_min_tokens(s->tmpl, s->tok, msgs, rq->n_msgs) + per;
    if ((int64_t)lb > max_prompt) {
      free(msgs);
      return df_api_error_set(e, 400, NULL, "messages", "context_length_exceeded",
                              "The %zu messages encode to at least %zu tokens, more than the "
                              "%lld this server accepts (context of %lld tokens).", rq->n_msgs,
                              lb, (long long)max_prompt, (long long)ctx);
    }
    static const char *const effort[] = {NULL, "low", "medium", "high", "max", ""};
    if (rq->enable_thinking >= 0 && !df_chat_template_has_thinking(s->tmpl)) {
      free(msgs);
      return df_api_error_set(e, 400, NULL, "chat_template_kwargs.enable_thinking", NULL,
                              "enable_thinking / thinking is not an option of this model's chat "
                              "template (it renders the same prompt either way)");
    }
    if (rq->thinking_effort != DF_API_EFFORT_UNSET &&
        df_chat_template_family(s->tmpl) != DF_CHAT_KIMI_K3) {
      free(msgs);
      return df_api_error_set(e, 400, NULL, "chat_template_kwargs.thinking_effort", NULL,
                              "thinking_effort is not an option of this model's chat template "
                              "(only Kimi K3's XTML has it)");
    }
    df_chat_opts co = {.add_generation_prompt = true, .enable_thinking = rq->enable_thinking,
                       .thinking_effort = effort[rq->thinking_effort]};
    int rc = df_chat_encode(s->tmpl, s->tok, msgs, rq->n_msgs, &co, ids, n, err, sizeof err);
    free(msgs);
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
  df_srv *s = c->srv;
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
      .stop = (const char *const *)rq.stop,
      .n_stop = rq.n_stop,
      .logprobs = rq.logprobs,
      .top_logprobs = rq.top_logprobs};
  c->logprobs = rq.logprobs;
  int status;
  char err[512];
  if (df_sched_submit(s->sched, &sr, &c->job, &status, err, sizeof err) != 0) {
    df_api_error_set(&e, status, status == 429 ? "requests" : status >= 500 ? "server_error" : NULL,
                     status == 400 ? "prompt" : NULL,
                     status == 429 ? "rate_limit_exceeded" : NULL, "%s", err);
    goto fail;
  }
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
  df_api_usage u = {c->news.prompt_tokens, c->news.completion_tokens, c->news.cached_tokens};
  size_t len = 0;
  df_api_part p = {.text = c->text ? c->text : "", .text_len = c->text_len,
                   .finish = finish_name(c->news.finish), .logprobs = pending_logprobs(c)};
  char *body = df_api_response(&c->meta, &p, &u, &len);
  return df_srv_send_json(c, mc, 200, body);
fail:
  free(ids);
  df_api_request_free(&rq);
  return df_srv_send_error(c, mc, &e);
}

