/* coordinator/server/api.c — strict parsing of /v1 request bodies and the OpenAI-shaped response
 * bodies; see api.h for the accepted fields. jansson and libc only.
 */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/server/api.h"
#include "coordinator/server/api_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- parsing ------------------------------------------------------------------------- */

static int get_int(const json_t *v, const char *param, int64_t lo, int64_t hi, int64_t *out,
                   df_api_error *e) {
  if (!json_is_integer(v))
    return df_api_bad(e, param, "'%s' must be an integer, got %s", param, df_api_type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return df_api_bad(e, param, "'%s' must be in [%lld, %lld], got %lld", param, (long long)lo,
               (long long)hi, (long long)x);
  *out = (int64_t)x;
  return 0;
}

/* A number in [lo, hi] (lo excluded when lo_open). */
static int get_num(const json_t *v, const char *param, double lo, bool lo_open, double hi,
                   double *out, df_api_error *e) {
  if (!json_is_number(v)) return df_api_bad(e, param, "'%s' must be a number, got %s", param, df_api_type_name(v));
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
    return df_api_bad(e, param, "'%s' must be in %s%g, %g], got %g", param, lo_open ? "(" : "[", lo, hi, x);
  *out = x;
  return 0;
}

/* Fields we know but do not implement: accepted only at their no-op value. */
static int only_value(const json_t *v, const char *param, const json_t *ok, const char *what,
                      df_api_error *e) {
  if (json_equal(v, ok)) return 0;
  return df_api_bad(e, param, "'%s' is not supported: only %s is accepted", param, what);
}

static int parse_stop(const json_t *v, df_api_request *r, df_api_error *e) {
  if (json_is_string(v)) {
    r->n_stop = 1;
    return df_api_get_str(v, "stop", false, &r->stop[0], e);
  }
  if (!json_is_array(v)) return df_api_bad(e, "stop", "'stop' must be a string or an array of strings, got %s", df_api_type_name(v));
  size_t n = json_array_size(v);
  if (n > DF_API_MAX_STOP) return df_api_bad(e, "stop", "'stop' has %zu strings; at most %d are supported", n, DF_API_MAX_STOP);
  for (size_t i = 0; i < n; i++) {
    char p[32];
    snprintf(p, sizeof p, "stop[%zu]", i);
    if (df_api_get_str(json_array_get(v, i), p, false, &r->stop[i], e)) return -1;
    r->n_stop = (int)i + 1;
  }
  return 0;
}

static int parse_content(const json_t *v, const char *param, char **out, df_api_error *e) {
  if (json_is_string(v)) return df_api_get_str(v, param, true, out, e);
  if (!json_is_array(v))
    return df_api_bad(e, param, "'%s' must be a string or an array of text parts, got %s", param, df_api_type_name(v));
  size_t total = 0, n = json_array_size(v);
  for (size_t i = 0; i < n; i++) {
    const json_t *part = json_array_get(v, i);
    char p[160];
    snprintf(p, sizeof p, "%s[%zu]", param, i);
    if (!json_is_object(part)) return df_api_bad(e, p, "'%s' must be an object, got %s", p, df_api_type_name(part));
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)part, k, x) {
      if (strcmp(k, "type") && strcmp(k, "text")) {
        char q[200];
        snprintf(q, sizeof q, "%s.%s", p, k);
        return df_api_bad(e, q, "Unrecognized content part field: '%s'", q);
      }
    }
    const json_t *t = json_object_get(part, "type");
    char q[200];
    snprintf(q, sizeof q, "%s.type", p);
    if (!json_is_string(t)) return df_api_bad(e, q, "'%s' must be a string", q);
    if (strcmp(json_string_value(t), "text"))
      return df_api_bad(e, q, "'%s' is '%s': only 'text' content parts are supported", q, json_string_value(t));
    const json_t *tx = json_object_get(part, "text");
    snprintf(q, sizeof q, "%s.text", p);
    if (!json_is_string(tx)) return df_api_bad(e, q, "'%s' must be a string, got %s", q, tx ? df_api_type_name(tx) : "nothing");
    if (memchr(json_string_value(tx), 0, json_string_length(tx)))
      return df_api_bad(e, q, "'%s' must not contain NUL characters", q);
    total += json_string_length(tx) + 1;
  }
  char *s = malloc(total + 1), *w = s;
  if (!s) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    const json_t *tx = json_object_get(json_array_get(v, i), "text");
    if (i) *w++ = '\n';
    memcpy(w, json_string_value(tx), json_string_length(tx));
    w += json_string_length(tx);
  }
  *w = 0;
  free(*out);
  *out = s;
  return 0;
}

static int parse_messages(const json_t *v, df_api_request *r, df_api_error *e) {
  if (!json_is_array(v)) return df_api_bad(e, "messages", "'messages' must be an array, got %s", df_api_type_name(v));
  size_t n = json_array_size(v);
  if (!n) return df_api_bad(e, "messages", "'messages' must contain at least one message");
  r->msgs = calloc(n, sizeof *r->msgs);
  if (!r->msgs) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  r->n_msgs = n;
  for (size_t i = 0; i < n; i++) {
    const json_t *m = json_array_get(v, i);
    df_api_msg *d = &r->msgs[i];
    char p[64], q[128];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m)) return df_api_bad(e, p, "'%s' must be an object, got %s", p, df_api_type_name(m));
    const json_t *role = json_object_get(m, "role");
    snprintf(q, sizeof q, "%s.role", p);
    if (!role) return df_api_bad(e, q, "'%s' is required", q);
    if (df_api_get_str(role, q, false, &d->role, e)) return -1;
    if (strcmp(d->role, "system") && strcmp(d->role, "user") && strcmp(d->role, "assistant") &&
        strcmp(d->role, "tool"))
      return df_api_bad(e, q, "'%s' is '%s': supported roles are system, user, assistant and tool",
                        q, d->role);
    bool assistant = !strcmp(d->role, "assistant"), tool = !strcmp(d->role, "tool");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)m, k, x) {
      snprintf(q, sizeof q, "%s.%s", p, k);
      if (!strcmp(k, "role")) continue;
      if (!strcmp(k, "content")) {
        if (json_is_null(x) && assistant) continue;
        if (parse_content(x, q, &d->content, e)) return -1;
      } else if (!strcmp(k, "reasoning_content") && assistant) {
        if (!json_is_null(x) && df_api_get_str(x, q, true, &d->reasoning, e)) return -1;
      } else if (!strcmp(k, "tool_calls") && assistant) {
        if (df_api_parse_tool_calls(x, q, d, e)) return -1;
      } else if (!strcmp(k, "tool_call_id") && tool) {
        if (!json_is_null(x) && df_api_get_str(x, q, false, &d->tool_call_id, e)) return -1;
      } else if (!strcmp(k, "name")) {
        if (!json_is_null(x) && df_api_get_str(x, q, false, &d->name, e)) return -1;
      } else if (!strcmp(k, "function_call") || !strcmp(k, "refusal") || !strcmp(k, "audio")) {
        if (!json_is_null(x)) return df_api_bad(e, q, "'%s' is not supported", q);
      } else {
        return df_api_bad(e, q, "Unrecognized message field: '%s'", q);
      }
    }
    if (!d->content) {
      snprintf(q, sizeof q, "%s.content", p);
      if (!assistant) return df_api_bad(e, q, "'%s' is required", q);
      /* an assistant turn of tool calls may have null content; otherwise null is "" */
      if (!d->n_tool_calls && !(d->content = strdup("")))
        return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
  }
  return 0;
}

static int parse_prompt(const json_t *v, df_api_request *r, df_api_error *e) {
  if (json_is_string(v)) return df_api_get_str(v, "prompt", true, &r->prompt, e);
  if (!json_is_array(v))
    return df_api_bad(e, "prompt", "'prompt' must be a string, an array of one string or an array of "
               "token ids, got %s", df_api_type_name(v));
  size_t n = json_array_size(v);
  if (!n) return df_api_bad(e, "prompt", "'prompt' must not be empty");
  if (json_is_string(json_array_get(v, 0))) {
    if (n != 1)
      return df_api_bad(e, "prompt", "'prompt' has %zu strings: one prompt per request is supported "
                 "(batched prompts are not implemented)", n);
    return df_api_get_str(json_array_get(v, 0), "prompt[0]", true, &r->prompt, e);
  }
  r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
  if (!r->prompt_ids) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    const json_t *x = json_array_get(v, i);
    char p[48];
    snprintf(p, sizeof p, "prompt[%zu]", i);
    if (json_is_array(x))
      return df_api_bad(e, p, "'prompt' as an array of token arrays (several prompts) is not supported");
    int64_t id = 0;
    if (get_int(x, p, 0, INT32_MAX, &id, e)) return -1;
    r->prompt_ids[i] = (int32_t)id;
  }
  r->n_prompt_ids = n;
  return 0;
}

static int parse_stream_options(const json_t *v, df_api_request *r, df_api_error *e) {
  if (!json_is_object(v))
    return df_api_bad(e, "stream_options", "'stream_options' must be an object, got %s", df_api_type_name(v));
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    if (strcmp(k, "include_usage")) {
      char q[160];
      snprintf(q, sizeof q, "stream_options.%s", k);
      return df_api_bad(e, q, "Unrecognized request argument supplied: '%s'", q);
    }
    if (!json_is_null(x) && df_api_get_bool(x, "stream_options.include_usage", &r->include_usage, e))
      return -1;
  }
  return 0;
}

/* "low".."max" -> DF_API_EFFORT_LOW..MAX, anything else -1 */
static int effort_of(const json_t *x) {
  static const char *const names[] = {"low", "medium", "high", "max"};
  const char *v = json_string_value(x);
  for (int i = 0; v && i < 4; i++)
    if (!strcmp(v, names[i])) return DF_API_EFFORT_LOW + i;
  return -1;
}

static int parse_template_kwargs(const json_t *v, df_api_request *r, df_api_error *e) {
  if (!json_is_object(v))
    return df_api_bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s", df_api_type_name(v));
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    char q[160];
    snprintf(q, sizeof q, "chat_template_kwargs.%s", k);
    if (!strcmp(k, "thinking_effort")) {
      if (json_is_null(x)) {
        r->thinking_effort = DF_API_EFFORT_NONE;
        continue;
      }
      int eff = effort_of(x);
      if (eff < 0)
        return df_api_bad(e, q, "'%s' must be one of \"low\", \"medium\", \"high\", \"max\" or null", q);
      if (r->thinking_effort != DF_API_EFFORT_UNSET && r->thinking_effort != eff)
        return df_api_bad(e, q, "'%s' disagrees with 'reasoning_effort'", q);
      r->thinking_effort = eff;
      continue;
    }
    /* enable_thinking (Qwen3) and thinking (Kimi K3) name the same switch */
    if (strcmp(k, "enable_thinking") && strcmp(k, "thinking"))
      return df_api_bad(e, q, "'%s' is not supported: the template options are enable_thinking (or "
                 "thinking) and thinking_effort", q);
    if (json_is_null(x)) continue;
    bool b = false;
    if (df_api_get_bool(x, q, &b, e)) return -1;
    if (r->enable_thinking >= 0 && r->enable_thinking != b)
      return df_api_bad(e, q, "'chat_template_kwargs.enable_thinking' and '.thinking' disagree");
    r->enable_thinking = b;
  }
  return 0;
}

int df_api_parse(df_api_kind kind, const char *body, size_t len, df_api_request *r,
                 df_api_error *e) {
  memset(r, 0, sizeof *r);
  memset(e, 0, sizeof *e);
  r->kind = kind;
  r->max_tokens = -1;
  r->temperature = -1;
  r->top_p = -1;
  r->top_k = -1;
  r->enable_thinking = -1;
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
  if (!root) {
    df_api_error_set(e, 400, NULL, NULL, NULL,
                     "We could not parse the JSON body of your request: %s (line %d, column %d)",
                     je.text, je.line, je.column);
    goto fail;
  }
  if (!json_is_object(root)) {
    df_api_bad(e, NULL, "The request body must be a JSON object, got %s", df_api_type_name(root));
    goto fail;
  }
  json_t *one = json_integer(1), *zero = json_integer(0), *fals = json_false(),
         *empty_obj = json_object();
  int64_t mct = -1;
  bool top_given = false, choice_given = false;
  r->parallel_tool_calls = true;
  int rc = 0;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    bool chat = kind == DF_API_CHAT, cmpl = kind == DF_API_COMPLETION;
    if (json_is_null(v) && strcmp(k, "model") && strcmp(k, "messages") && strcmp(k, "prompt"))
      continue; /* null = not given */
    if (!strcmp(k, "model")) rc = df_api_get_str(v, "model", false, &r->model, e);
    else if (chat && !strcmp(k, "messages")) rc = parse_messages(v, r, e);
    else if (cmpl && !strcmp(k, "prompt")) rc = parse_prompt(v, r, e);
    else if (!strcmp(k, "max_tokens")) rc = get_int(v, k, 1, INT32_MAX, &r->max_tokens, e);
    else if (chat && !strcmp(k, "max_completion_tokens")) rc = get_int(v, k, 1, INT32_MAX, &mct, e);
    else if (!strcmp(k, "temperature")) rc = get_num(v, k, 0, false, 2, &r->temperature, e);
    else if (!strcmp(k, "top_p")) rc = get_num(v, k, 0, true, 1, &r->top_p, e);
    else if (!strcmp(k, "top_k")) {
      rc = get_int(v, k, -1, INT32_MAX, &r->top_k, e);
      if (!rc && r->top_k < 0) r->top_k = 0;
    } else if (!strcmp(k, "seed")) {
      int64_t s = 0;
      rc = get_int(v, k, 0, INT64_MAX, &s, e);
      r->seed = (uint64_t)s;
      r->has_seed = !rc;
    } else if (!strcmp(k, "stop")) rc = parse_stop(v, r, e);
    else if (!strcmp(k, "stream")) rc = df_api_get_bool(v, k, &r->stream, e);
    else if (!strcmp(k, "stream_options")) rc = parse_stream_options(v, r, e);
    else if (!strcmp(k, "ignore_eos")) rc = df_api_get_bool(v, k, &r->ignore_eos, e);
    else if (!strcmp(k, "user")) {
      char *u = NULL;
      rc = df_api_get_str(v, k, true, &u, e);
      free(u);
    } else if (!strcmp(k, "n")) rc = only_value(v, k, one, "n = 1", e);
    else if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
      rc = json_is_number(v) && json_number_value(v) == 0 ? 0 : only_value(v, k, zero, "0", e);
    } else if (!strcmp(k, "logit_bias")) rc = only_value(v, k, empty_obj, "{}", e);
    else if (chat && !strcmp(k, "logprobs")) rc = df_api_get_bool(v, k, &r->logprobs, e);
    else if (chat && !strcmp(k, "top_logprobs")) {
      int64_t t = 0;
      rc = get_int(v, k, 0, DF_API_TOP_LOGPROBS_MAX, &t, e);
      r->top_logprobs = (int)t;
      top_given = !rc;
    }
    else if (chat && !strcmp(k, "tools")) rc = df_api_parse_tools(v, r, e);
    else if (chat && !strcmp(k, "tool_choice")) {
      rc = df_api_parse_tool_choice(v, r, e);
      choice_given = !rc;
    } else if (chat && !strcmp(k, "parallel_tool_calls")) rc = df_api_get_bool(v, k, &r->parallel_tool_calls, e);
    else if (chat && !strcmp(k, "response_format")) rc = df_api_parse_response_format(v, r, e);
    else if (chat && !strcmp(k, "chat_template_kwargs")) rc = parse_template_kwargs(v, r, e);
    else if (chat && !strcmp(k, "reasoning_effort")) {
      int eff = effort_of(v);
      if (eff < 0) rc = df_api_bad(e, k, "'reasoning_effort' must be one of \"low\", \"medium\", \"high\", \"max\"");
      else if (r->thinking_effort != DF_API_EFFORT_UNSET && r->thinking_effort != eff)
        rc = df_api_bad(e, k, "'reasoning_effort' disagrees with 'chat_template_kwargs.thinking_effort'");
      else {
        r->thinking_effort = eff;
        r->effort_field = "reasoning_effort";
      }
    }
    else if (cmpl && !strcmp(k, "logprobs")) {
      int64_t t = 0;
      rc = get_int(v, k, 0, DF_API_CMPL_LOGPROBS_MAX, &t, e);
      r->logprobs = !rc;
      r->top_logprobs = (int)t;
    }
    else if (cmpl && !strcmp(k, "echo")) rc = only_value(v, k, fals, "false", e);
    else if (cmpl && !strcmp(k, "best_of")) rc = only_value(v, k, one, "1", e);
    else if (cmpl && !strcmp(k, "suffix")) rc = df_api_bad(e, k, "'suffix' is not supported");
    else rc = df_api_bad(e, k, "Unrecognized request argument supplied: %s", k);
    if (rc) break;
  }
  json_decref(one);
  json_decref(zero);
  json_decref(fals);
  json_decref(empty_obj);
  if (rc) goto fail;
  if (!r->model) {
    df_api_bad(e, "model", "you must provide a model parameter");
    goto fail;
  }
  if (kind == DF_API_CHAT && !r->msgs) {
    df_api_bad(e, "messages", "'messages' is a required property");
    goto fail;
  }
  if (kind == DF_API_COMPLETION && !r->prompt && !r->prompt_ids) {
    df_api_bad(e, "prompt", "'prompt' is a required property");
    goto fail;
  }
  if (mct >= 0) {
    if (r->max_tokens >= 0 && r->max_tokens != mct) {
      df_api_bad(e, "max_completion_tokens", "'max_tokens' (%lld) and 'max_completion_tokens' (%lld) "
          "disagree; give one of them", (long long)r->max_tokens, (long long)mct);
      goto fail;
    }
    r->max_tokens = mct;
  }
  if (!choice_given) r->tool_choice = r->n_tools ? DF_API_TOOLS_AUTO : DF_API_TOOLS_NONE;
  if (df_api_check_tools(r, e)) goto fail;
  if (top_given && !r->logprobs) {
    df_api_bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    goto fail;
  }
  if (r->include_usage && !r->stream) {
    df_api_bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    goto fail;
  }
  json_decref(root);
  return 0;
fail:
  json_decref(root);
  df_api_request_free(r);
  r->kind = kind;
  return -1;
}

void df_api_request_free(df_api_request *r) {
  if (!r) return;
  free(r->model);
  df_api_free_tools(r);
  for (size_t i = 0; i < r->n_msgs; i++) {
    free(r->msgs[i].role);
    free(r->msgs[i].content);
    free(r->msgs[i].reasoning);
  }
  free(r->msgs);
  free(r->prompt);
  free(r->prompt_ids);
  for (int i = 0; i < DF_API_MAX_STOP; i++) free(r->stop[i]);
  memset(r, 0, sizeof *r);
}

/* ---- responses ----------------------------------------------------------------------- */

/* Compact JSON text of `o` (insertion order kept) wrapped as prefix + json + suffix; steals o. */
static char *dump_wrap(json_t *o, const char *prefix, const char *suffix, size_t *len) {
  if (!o) return NULL;
  char *j = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!j) return NULL;
  size_t a = strlen(prefix), b = strlen(j), c = strlen(suffix);
  char *s = malloc(a + b + c + 1);
  if (s) {
    memcpy(s, prefix, a);
    memcpy(s + a, j, b);
    memcpy(s + a + b, suffix, c + 1);
    if (len) *len = a + b + c;
  }
  free(j);
  return s;
}

/* Length of the well-formed UTF-8 character at s[0..n), 0 when ill-formed (Unicode 3.9). */
static size_t utf8_char(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!k || k > n) return 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return k;
}

/* A JSON string of a message we wrote (it may quote bytes of a malformed body, or be cut in
 * the middle of a character): each ill-formed byte becomes U+FFFD. */
static json_t *lenient_string(const char *s) {
  size_t n = strlen(s), w = 0;
  char *b = malloc(3 * n + 1);
  if (!b) return NULL;
  for (size_t i = 0; i < n;) {
    size_t k = utf8_char((const unsigned char *)s + i, n - i);
    if (k) {
      memcpy(b + w, s + i, k);
      w += k;
      i += k;
    } else {
      memcpy(b + w, "\xEF\xBF\xBD", 3);
      w += 3;
      i++;
    }
  }
  json_t *j = json_stringn(b, w);
  free(b);
  return j;
}

char *df_api_error_body(const df_api_error *e, size_t *len) {
  json_t *o = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", lenient_string(e->message),
                        "type", e->type ? e->type : "invalid_request_error", "param",
                        e->param[0] ? lenient_string(e->param) : json_null(), "code",
                        e->code ? json_string(e->code) : json_null());
  return dump_wrap(o, "", "", len);
}

char *df_api_sse_error(const df_api_error *e, size_t *len) {
  size_t n;
  char *b = df_api_error_body(e, &n);
  if (!b) return NULL;
  char *s = malloc(n + 9);
  if (s) {
    memcpy(s, "data: ", 6);
    memcpy(s + 6, b, n);
    memcpy(s + 6 + n, "\n\n", 3);
    if (len) *len = n + 8;
  }
  free(b);
  return s;
}

static json_t *head(const df_api_meta *m, const char *object) {
  return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created",
                   (json_int_t)m->created, "model", m->model);
}

static json_t *usage_obj(const df_api_usage *u) {
  json_t *o = json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                        "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                        (json_int_t)(u->prompt_tokens + u->completion_tokens),
                        "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
  /* extension: speculative decoding's share of the answer (only when it drafted) */
  if (o && u->draft_tokens > 0)
    json_object_set_new(o, "speculative", json_pack("{s:I, s:I}", "draft_tokens",
                                                    (json_int_t)u->draft_tokens, "accepted_tokens",
                                                    (json_int_t)u->draft_accepted));
  return o;
}

/* A JSON string of text_len bytes, NULL when not valid UTF-8. */
static json_t *text_json(const char *text, size_t len) {
  return json_stringn(text ? text : "", text ? len : 0);
}

/* The choice object of a chunk (chat: delta) or a whole response (chat: message). Takes
 * p->logprobs and p->tool_calls in every case. NULL when out of memory or text is not UTF-8. */
static json_t *choice_obj(const df_api_meta *m, df_api_part *p, bool whole) {
  bool chat = m->kind == DF_API_CHAT;
  json_t *lp = p->logprobs ? p->logprobs : json_null(), *tc = p->tool_calls;
  p->logprobs = p->tool_calls = NULL;
  json_t *choice = json_object(), *t = NULL, *r = NULL;
  if (!choice) goto fail;
  if (p->text || !chat) {
    if (!(t = text_json(p->text, p->text_len))) goto fail;
  }
  if (chat && p->reasoning && !(r = text_json(p->reasoning, p->reasoning_len))) goto fail;
  if (chat) {
    json_t *msg = json_object();
    if (!msg) goto fail;
    json_object_set_new(choice, "index", json_integer(0));
    json_object_set_new(choice, whole ? "message" : "delta", msg);
    if (whole || p->role) json_object_set_new(msg, "role", json_string(whole ? "assistant" : p->role));
    if (t) json_object_set_new(msg, "content", t);
    else if (whole) json_object_set_new(msg, "content", json_null());
    t = NULL;
    if (r) json_object_set_new(msg, "reasoning_content", r);
    r = NULL;
    if (tc) json_object_set_new(msg, "tool_calls", tc);
    tc = NULL;
  } else {
    json_object_set_new(choice, "text", t);
    t = NULL;
    json_object_set_new(choice, "index", json_integer(0));
  }
  json_object_set_new(choice, "logprobs", lp);
  json_object_set_new(choice, "finish_reason", p->finish ? json_string(p->finish) : json_null());
  return choice;
fail:
  json_decref(lp);
  json_decref(tc);
  json_decref(t);
  json_decref(r);
  json_decref(choice);
  return NULL;
}

char *df_api_sse_chunk(const df_api_meta *m, df_api_part *p, size_t *len) {
  bool chat = m->kind == DF_API_CHAT;
  json_t *choice = choice_obj(m, p, false);
  if (!choice) return NULL;
  json_t *o = head(m, chat ? "chat.completion.chunk" : "text_completion");
  if (!o) {
    json_decref(choice);
    return NULL;
  }
  json_object_set_new(o, "choices", json_pack("[o]", choice));
  if (m->include_usage) json_object_set_new(o, "usage", json_null());
  return dump_wrap(o, "data: ", "\n\n", len);
}

char *df_api_sse_usage(const df_api_meta *m, const df_api_usage *u, size_t *len) {
  json_t *o = head(m, m->kind == DF_API_CHAT ? "chat.completion.chunk" : "text_completion");
  if (!o) return NULL;
  json_object_set_new(o, "choices", json_array());
  json_object_set_new(o, "usage", usage_obj(u));
  return dump_wrap(o, "data: ", "\n\n", len);
}

char *df_api_response(const df_api_meta *m, df_api_part *p, const df_api_usage *u,
                      size_t *len) {
  json_t *choice = choice_obj(m, p, true);
  if (!choice) return NULL;
  json_t *o = head(m, m->kind == DF_API_CHAT ? "chat.completion" : "text_completion");
  if (!o) {
    json_decref(choice);
    return NULL;
  }
  json_object_set_new(o, "choices", json_pack("[o]", choice));
  json_object_set_new(o, "usage", usage_obj(u));
  return dump_wrap(o, "", "", len);
}
