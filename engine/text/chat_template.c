/* engine/text/chat_template.c — recognising and rendering the known chat templates in C.
 *
 * Owns: reading the template text of a model folder, recognising it (FNV-1a 64 of the exact
 * text), and one renderer per known template, written as a line-by-line transcription of the
 * template's Jinja so that the output is byte-identical to jinja2's (checked against goldens in
 * tests/tokenizer/chat_golden.json and deepseek_v3_chat_golden.json), and the bos_token a
 * template prints. Does not own: tokenization (engine/text/tokenizer.h).
 */
#include "engine/text/chat_template.h"
#include "engine/text/chat_json.h"
#include "engine/text/chat_xtml.h"
#include "engine/text/tokenizer_utf8.h"
#include "engine/text/tokenizer_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct df_chat_template {
  df_chat_family family;
  char origin[512];
  char bos[256]; /* bos_token for templates that print it */
};

/* DeepSeek-V3's published special tokens (tokenizer_config.json of the V3 release). */
#define DS_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* Known template texts, by FNV-1a 64 of the exact bytes. */
static const struct {
  uint64_t hash;
  size_t len;
  df_chat_family family;
  const char *what;
} k_known[] = {
    {0x2bfdb7aa9754484eULL, 4116, DF_CHAT_QWEN3, "Qwen3 (hybrid thinking)"},
    {0xebe3604156dc466aULL, 2301, DF_CHAT_DEEPSEEK_V3, "DeepSeek-V3"},
    {0x99d1f704677a2270ULL, 1249, DF_CHAT_KIMI_K2, "Kimi K2"},
    {0xc08d7bfff1b6eb0cULL, 3430, DF_CHAT_KIMI_K2_THINKING, "Kimi K2 Thinking"},
};

static const char *family_name(df_chat_family f) {
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++)
    if (k_known[i].family == f) return k_known[i].what;
  return f == DF_CHAT_KIMI_K3 ? "Kimi K3 (XTML)" : "?";
}

static uint64_t fnv1a64(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
  return h;
}

int df_chat_template_from_text(const char *text, size_t len, const char *origin,
                               df_chat_template **out, char *err, size_t errlen) {
  *out = NULL;
  uint64_t h = fnv1a64(text, len);
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++) {
    if (k_known[i].hash == h && k_known[i].len == len) {
      df_chat_template *t = calloc(1, sizeof *t);
      if (!t) {
        df_tok__seterr(err, errlen, "%s: out of memory", origin);
        return -1;
      }
      t->family = k_known[i].family;
      snprintf(t->origin, sizeof t->origin, "%s", origin);
      if (t->family == DF_CHAT_DEEPSEEK_V3) snprintf(t->bos, sizeof t->bos, "%s", DS_BOS);
      *out = t;
      return 0;
    }
  }
  df_tok__seterr(err, errlen,
                 "%s: chat template not recognised (%zu bytes, FNV-1a 64 %016llx); supported: "
                 "Qwen3, DeepSeek-V3, Kimi K2, Kimi K2 Thinking. Render it with jinja2, add a renderer to engine/text/chat_template.c and "
                 "goldens to tests/tokenizer/", origin, len, (unsigned long long)h);
  return -1;
}


static bool is_str(const json_t *v, const char *s) {
  return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* bos_token of tokenizer_config.json (a string, or an AddedToken object's "content") replaces
 * the family default; absent or null keeps it. */
static int set_bos(df_chat_template *t, const json_t *cfg, const char *where, char *err,
                   size_t errlen) {
  const json_t *b = json_object_get(cfg, "bos_token");
  if (json_is_object(b)) b = json_object_get(b, "content");
  if (!b || json_is_null(b)) return 0;
  if (!json_is_string(b) || json_string_length(b) >= sizeof t->bos ||
      !df_tok__utf8_valid((const uint8_t *)json_string_value(b), json_string_length(b)) ||
      strlen(json_string_value(b)) != json_string_length(b)) {
    df_tok__seterr(err, errlen, "%s: bos_token: expected a UTF-8 string of at most %zu bytes",
                   where, sizeof t->bos - 1);
    return -1;
  }
  memcpy(t->bos, json_string_value(b), json_string_length(b) + 1);
  return 0;
}

/* A Kimi K3 tokenizer_config.json: TikTokenTokenizer naming the four XTML structural tokens in
 * added_tokens_decoder (docs/K3.md §5.1; Kimi K2's names none of them). */
static bool is_kimi_k3(const json_t *cfg) {
  if (!is_str(json_object_get(cfg, "tokenizer_class"), "TikTokenTokenizer")) return false;
  static const char *const need[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
  const json_t *dec = json_object_get(cfg, "added_tokens_decoder");
  for (size_t k = 0; k < 4; k++) {
    bool found = false;
    const char *id;
    json_t *v;
    json_object_foreach((json_t *)dec, id, v) found = found ||
        is_str(json_object_get(v, "content"), need[k]);
    if (!found) return false;
  }
  return true;
}

int df_chat_template_load(const char *dir, df_chat_template **out, char *err, size_t errlen) {
  *out = NULL;
  char path[1024];
  int w = snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  if (w < 0 || (size_t)w >= sizeof path) {
    df_tok__seterr(err, errlen, "%.200s...: path too long", dir);
    return -1;
  }
  struct stat st;
  int rc = -1;
  json_t *cfg = NULL;
  if (stat(path, &st) == 0) {
    cfg = df_tok__load_json(path, err, errlen);
    if (!cfg) return -1;
    json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_array(ct)) { /* [{"name": "default", "template": "..."}, ...] */
      json_t *pick = NULL, *v;
      size_t i;
      json_array_foreach(ct, i, v) {
        const char *nm = json_string_value(json_object_get(v, "name"));
        if (nm && strcmp(nm, "default") == 0) pick = json_object_get(v, "template");
      }
      ct = pick;
      if (!json_is_string(ct)) {
        df_tok__seterr(err, errlen, "%s: chat_template: a list without a \"default\" template",
                       path);
        goto done;
      }
    }
    if (ct && !json_is_null(ct)) {
      if (!json_is_string(ct)) {
        df_tok__seterr(err, errlen, "%s: chat_template: expected a string", path);
        goto done;
      }
      rc = df_chat_template_from_text(json_string_value(ct), json_string_length(ct), dir, out,
                                      err, errlen);
      if (rc == 0 && set_bos(*out, cfg, path, err, errlen) != 0) {
        df_chat_template_destroy(out);
        rc = -1;
      }
      goto done;
    }
  }
  w = snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
  size_t len = 0;
  struct stat jst;
  bool have_jinja = w > 0 && (size_t)w < sizeof path && stat(path, &jst) == 0;
  char *text = NULL;
  if (have_jinja && !(text = df_tok__read_file(path, 1 << 20, &len, err, errlen)))
    goto done; /* there, but a FIFO, a folder, too large or unreadable: say which */
  if (!text && is_kimi_k3(cfg)) { /* K3 folders carry no template: XTML is built in */
    if (!(*out = calloc(1, sizeof **out))) {
      df_tok__seterr(err, errlen, "%s: out of memory", dir);
      goto done;
    }
    (*out)->family = DF_CHAT_KIMI_K3;
    snprintf((*out)->origin, sizeof (*out)->origin, "%s", dir);
    rc = 0;
    goto done;
  }
  if (!text) {
    df_tok__seterr(err, errlen, "%s: no chat template (neither tokenizer_config.json "
                   "\"chat_template\" nor chat_template.jinja)", dir);
    goto done;
  }
  rc = df_chat_template_from_text(text, len, dir, out, err, errlen);
  free(text);
  if (rc == 0 && cfg && set_bos(*out, cfg, dir, err, errlen) != 0) {
    df_chat_template_destroy(out);
    rc = -1;
  }
done:
  json_decref(cfg);
  return rc;
}

void df_chat_template_destroy(df_chat_template **t) {
  if (!t || !*t) return;
  free(*t);
  *t = NULL;
}

df_chat_family df_chat_template_family(const df_chat_template *t) { return t->family; }

bool df_chat_template_has_thinking(const df_chat_template *t) {
  return t->family == DF_CHAT_QWEN3 || t->family == DF_CHAT_KIMI_K3;
}

bool df_chat_template_has_tools(const df_chat_template *t) {
  return t->family != DF_CHAT_DEEPSEEK_V3;
}

bool df_chat_template_has_tool_calls(const df_chat_template *t) {
  return t->family != DF_CHAT_KIMI_K2;
}

/* ---- rendering helpers ------------------------------------------------------------------ */

typedef struct out_t {
  df_tok_buf b;
  df_tok_span *sp;
  size_t n_sp, cap_sp;
  int oom;
} out_t;

/* Template text (structure). */
static void lit(out_t *o, const char *s) {
  if (df_tok__buf_puts(&o->b, s) != 0) o->oom = 1;
}

/* Message bytes: recorded as a span (adjacent spans are merged). */
static void data(out_t *o, const char *s, size_t n) {
  if (n == 0) return;
  size_t off = o->b.n;
  if (df_tok__buf_put(&o->b, s, n) != 0) {
    o->oom = 1;
    return;
  }
  if (o->n_sp && o->sp[o->n_sp - 1].off + o->sp[o->n_sp - 1].len == off) {
    o->sp[o->n_sp - 1].len += n;
    return;
  }
  if (o->n_sp == o->cap_sp) {
    size_t c = o->cap_sp ? o->cap_sp * 2 : 16;
    df_tok_span *p = realloc(o->sp, c * sizeof *p);
    if (!p) {
      o->oom = 1;
      return;
    }
    o->sp = p;
    o->cap_sp = c;
  }
  o->sp[o->n_sp++] = (df_tok_span){off, n};
}

/* A view into a message string (Python str slicing done on bytes: the separators are ASCII). */
typedef struct view {
  const char *p;
  size_t n;
} view;

static view v_of(const char *s) { return (view){s, strlen(s)}; }

static const char *find_last(view v, const char *needle) {
  size_t k = strlen(needle);
  if (v.n < k) return NULL;
  for (size_t i = v.n - k + 1; i-- > 0;)
    if (memcmp(v.p + i, needle, k) == 0) return v.p + i;
  return NULL;
}

static const char *find_first(view v, const char *needle) {
  size_t k = strlen(needle);
  if (v.n < k) return NULL;
  for (size_t i = 0; i + k <= v.n; i++)
    if (memcmp(v.p + i, needle, k) == 0) return v.p + i;
  return NULL;
}

static view lstrip_nl(view v) {
  while (v.n && v.p[0] == '\n') v.p++, v.n--;
  return v;
}

static view rstrip_nl(view v) {
  while (v.n && v.p[v.n - 1] == '\n') v.n--;
  return v;
}

static bool starts_with(view v, const char *s) {
  size_t k = strlen(s);
  return v.n >= k && memcmp(v.p, s, k) == 0;
}

static bool ends_with(view v, const char *s) {
  size_t k = strlen(s);
  return v.n >= k && memcmp(v.p + v.n - k, s, k) == 0;
}

static bool role_is(const df_chat_msg *m, const char *r) { return strcmp(m->role, r) == 0; }

/* ---- Qwen3 -----------------------------------------------------------------------------------
 * A transcription of the Qwen3 template (tests/tokenizer/qwen3_chat_template.jinja).
 * Jinja line -> C line; comments quote the template. */

/* Append the tojson of v (json.dumps(v, ensure_ascii=False)) as message bytes. */
static void data_json(out_t *o, const json_t *v) {
  df_tok_buf b = {0};
  if (df_pyjson_dump(&b, v, (df_pyjson_style){0}) != 0) o->oom = 1;
  else data(o, b.p, b.n);
  df_tok__buf_free(&b);
}

/* A tool call's arguments as the template prints the value json.loads(arguments) gives:
 * {%- if tool_call.arguments is string %} verbatim {%- else %} tojson. A JSON string prints its
 * decoded text, any other JSON value json.dumps(ensure_ascii=False) (", " / ": ", key order
 * kept, a repeated key's last value at its first place as Python keeps it); text that jansson
 * cannot read (not JSON, integers beyond 64 bits, reals that overflow, NUL in a key) and a
 * JSON string holding U+0000 print verbatim, as a string would. */
static void qwen3_arguments(out_t *o, const char *a) {
  json_t *v = json_loads(a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  bool nul = json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v);
  if (!v || nul) data(o, a, strlen(a)); /* (a NUL would go into the prompt raw) */
  else if (json_is_string(v)) data(o, json_string_value(v), json_string_length(v));
  else data_json(o, v); /* NUL inside prints as \u0000 */
  json_decref(v);
}

static void render_qwen3(const df_chat_msg *msgs, size_t n, const df_chat_opts *opt,
                         const json_t *tools, out_t *o) {
  if (tools && json_array_size(tools) > 0) {
    /* {%- if tools %} '<|im_start|>system\n' [messages[0].content + '\n\n'] "# Tools..." */
    lit(o, "<|im_start|>system\n");
    if (role_is(&msgs[0], "system")) {
      data(o, msgs[0].content, strlen(msgs[0].content));
      lit(o, "\n\n");
    }
    lit(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    /* {%- for tool in tools %} "\n" + tool | tojson */
    for (size_t k = 0; k < json_array_size(tools); k++) {
      lit(o, "\n");
      data_json(o, json_array_get(tools, k));
    }
    lit(o, "\n</tools>\n\nFor each function call, return a json object with function name and "
           "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
           "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
  } else if (role_is(&msgs[0], "system")) {
    /* {%- if messages[0].role == 'system' %} '<|im_start|>system\n' + content + '<|im_end|>\n' */
    lit(o, "<|im_start|>system\n");
    data(o, msgs[0].content, strlen(msgs[0].content));
    lit(o, "<|im_end|>\n");
  }
  /* ns.last_query_index: the last user message that is not a <tool_response> wrapper */
  bool multi_step_tool = true;
  size_t last_query_index = n - 1;
  for (size_t k = n; k-- > 0;) {
    view c = v_of(msgs[k].content);
    if (multi_step_tool && role_is(&msgs[k], "user") &&
        !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      multi_step_tool = false;
      last_query_index = k;
    }
  }
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    bool last = i + 1 == n;
    if (role_is(m, "user") || (role_is(m, "system") && i != 0)) {
      /* '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' */
      lit(o, "<|im_start|>");
      lit(o, m->role);
      lit(o, "\n");
      data(o, m->content, strlen(m->content));
      lit(o, "<|im_end|>\n");
    } else if (role_is(m, "assistant")) {
      view content = v_of(m->content), reasoning = {"", 0};
      if (m->reasoning_content) {
        reasoning = v_of(m->reasoning_content);
      } else if (find_first(content, "</think>")) {
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *e = find_last(content, "</think>");
        view after = {e + 8, (size_t)(content.p + content.n - (e + 8))};
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        const char *f = find_first(content, "</think>");
        view before = rstrip_nl((view){content.p, (size_t)(f - content.p)});
        const char *t = find_last(before, "<think>");
        if (t) before = (view){t + 7, (size_t)(before.p + before.n - (t + 7))};
        reasoning = lstrip_nl(before);
        content = lstrip_nl(after);
      }
      /* {%- if loop.index0 > ns.last_query_index %} */
      if (i > last_query_index && (last || reasoning.n > 0)) {
        /* '<|im_start|>' + role + '\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n'
         * + content.lstrip('\n') */
        view r = rstrip_nl(lstrip_nl(reasoning));
        view c = lstrip_nl(content);
        lit(o, "<|im_start|>assistant\n<think>\n");
        data(o, r.p, r.n);
        lit(o, "\n</think>\n\n");
        data(o, c.p, c.n);
      } else {
        lit(o, "<|im_start|>assistant\n");
        data(o, content.p, content.n);
      }
      for (size_t k = 0; k < m->n_tool_calls; k++) {
        /* {%- if (loop.first and content) or (not loop.first) %} '\n' */
        if (k > 0 || content.n > 0) lit(o, "\n");
        lit(o, "<tool_call>\n{\"name\": \"");
        data(o, m->tool_calls[k].name, strlen(m->tool_calls[k].name));
        lit(o, "\", \"arguments\": ");
        qwen3_arguments(o, m->tool_calls[k].arguments);
        lit(o, "}\n</tool_call>");
      }
      lit(o, "<|im_end|>\n");
    } else if (role_is(m, "tool")) {
      /* {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %} */
      if (i == 0 || !role_is(&msgs[i - 1], "tool")) lit(o, "<|im_start|>user");
      lit(o, "\n<tool_response>\n");
      data(o, m->content, strlen(m->content));
      lit(o, "\n</tool_response>");
      if (last || !role_is(&msgs[i + 1], "tool")) lit(o, "<|im_end|>\n");
    }
  }
  if (opt->add_generation_prompt) {
    lit(o, "<|im_start|>assistant\n");
    /* {%- if enable_thinking is defined and enable_thinking is false %} */
    if (opt->enable_thinking == 0) lit(o, "<think>\n\n</think>\n\n");
  }
}

/* ---- DeepSeek-V3 -------------------------------------------------------------------------
 * A transcription of the DeepSeek-V3 template; comments quote it. The special strings are the
 * full-width-bar tokens of its tokenizer ("｜" U+FF5C, "▁" U+2581). */
#define FW "\xef\xbd\x9c" /* ｜ */
#define SP "\xe2\x96\x81" /* ▁ */
#define DS_USER "<" FW "User" FW ">"
#define DS_ASSISTANT "<" FW "Assistant" FW ">"
#define DS_EOS "<" FW "end" SP "of" SP "sentence" FW ">"
#define DS_CALLS_BEGIN "<" FW "tool" SP "calls" SP "begin" FW ">"
#define DS_CALLS_END "<" FW "tool" SP "calls" SP "end" FW ">"
#define DS_CALL_BEGIN "<" FW "tool" SP "call" SP "begin" FW ">"
#define DS_CALL_END "<" FW "tool" SP "call" SP "end" FW ">"
#define DS_SEP "<" FW "tool" SP "sep" FW ">"
#define DS_OUTPUTS_BEGIN "<" FW "tool" SP "outputs" SP "begin" FW ">"
#define DS_OUTPUTS_END "<" FW "tool" SP "outputs" SP "end" FW ">"
#define DS_OUTPUT_BEGIN "<" FW "tool" SP "output" SP "begin" FW ">"
#define DS_OUTPUT_END "<" FW "tool" SP "output" SP "end" FW ">"

/* tool['type'] + '<｜tool▁sep｜>' + name + '\n```json\n' + arguments + '\n```<｜tool▁call▁end｜>' */
static void ds_call(out_t *o, const df_chat_tool_call *c) {
  lit(o, "function" DS_SEP);
  data(o, c->name, strlen(c->name));
  lit(o, "\n```json\n");
  data(o, c->arguments, strlen(c->arguments));
  lit(o, "\n```" DS_CALL_END);
}

static void render_deepseek_v3(const df_chat_template *t, const df_chat_msg *msgs, size_t n,
                               const df_chat_opts *opt, out_t *o) {
  /* ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='',
   * is_first_sp=true) */
  bool is_first = false, is_tool = false, is_output_first = true, is_first_sp = true;
  /* {{bos_token}} first: the system prompt is built before any output, then printed */
  lit(o, t->bos);
  for (size_t i = 0; i < n; i++) {
    if (!role_is(&msgs[i], "system")) continue;
    /* ns.system_prompt + message['content'], later ones after '\n\n' */
    if (!is_first_sp) lit(o, "\n\n");
    data(o, msgs[i].content, strlen(msgs[i].content));
    is_first_sp = false;
  }
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    if (role_is(m, "user")) {
      /* '<｜User｜>' + message['content'] */
      is_tool = false;
      lit(o, DS_USER);
      data(o, m->content, strlen(m->content));
    }
    if (role_is(m, "assistant") && !m->content) {
      /* {%- for tool in message['tool_calls'] %} */
      is_tool = false;
      for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (!is_first) {
          lit(o, DS_ASSISTANT DS_CALLS_BEGIN DS_CALL_BEGIN);
          ds_call(o, &m->tool_calls[k]);
          is_first = true;
        } else {
          /* a later call closes the block after itself (as published) */
          lit(o, "\n" DS_CALL_BEGIN);
          ds_call(o, &m->tool_calls[k]);
          lit(o, DS_CALLS_END DS_EOS);
        }
      }
    }
    if (role_is(m, "assistant") && m->content) {
      if (is_tool) {
        /* '<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>' */
        lit(o, DS_OUTPUTS_END);
        data(o, m->content, strlen(m->content));
        lit(o, DS_EOS);
        is_tool = false;
      } else {
        lit(o, DS_ASSISTANT);
        data(o, m->content, strlen(m->content));
        lit(o, DS_EOS);
      }
    }
    if (role_is(m, "tool")) {
      is_tool = true;
      if (is_output_first) {
        lit(o, DS_OUTPUTS_BEGIN DS_OUTPUT_BEGIN);
        is_output_first = false;
      } else {
        lit(o, "\n" DS_OUTPUT_BEGIN);
      }
      data(o, m->content, strlen(m->content));
      lit(o, DS_OUTPUT_END);
    }
  }
  if (is_tool) lit(o, DS_OUTPUTS_END);
  if (opt->add_generation_prompt && !is_tool) lit(o, DS_ASSISTANT);
}

/* ---- Kimi K2 --------------------------------------------------------------------------------
 * A transcription of the Kimi K2 template (tests/tokenizer/kimi_k2_chat_template.jinja). Its
 * list-content branch is excluded (content is always a string here); tool calls of assistant
 * messages are refused by df_chat_render, since the template would drop them silently. Every
 * tag of the template is written with {%- -%}, so no whitespace of its own reaches the
 * output. */
#define K2_SYSTEM "<|im_system|>system<|im_middle|>"
#define K2_USER "<|im_user|>user<|im_middle|>"
#define K2_ASSISTANT "<|im_assistant|>assistant<|im_middle|>"
#define K2_TOOL "<|im_system|>tool<|im_middle|>"
#define K2_END "<|im_end|>"

static void render_kimi_k2(const df_chat_msg *msgs, size_t n, const df_chat_opts *opt,
                           const char *tools, out_t *o) {
  /* {% if tools -%} '<|im_system|>tool_declare<|im_middle|>' + tools | tojson + '<|im_end|>' */
  if (tools) {
    lit(o, "<|im_system|>tool_declare<|im_middle|>");
    data(o, tools, strlen(tools));
    lit(o, K2_END);
  }
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    /* {%- if loop.first and messages[0]['role'] != 'system' -%} */
    if (i == 0 && !role_is(&msgs[0], "system"))
      lit(o, K2_SYSTEM "You are a helpful assistant" K2_END);
    /* the role header; any other role gets none */
    if (role_is(m, "system")) lit(o, K2_SYSTEM);
    else if (role_is(m, "user")) lit(o, K2_USER);
    else if (role_is(m, "assistant")) lit(o, K2_ASSISTANT);
    else if (role_is(m, "tool")) lit(o, K2_TOOL);
    /* {{- message['content'] + '<|im_end|>' -}} */
    data(o, m->content, strlen(m->content));
    lit(o, K2_END);
  }
  /* {%- if add_generation_prompt -%} '<|im_assistant|>assistant<|im_middle|>' */
  if (opt->add_generation_prompt) lit(o, K2_ASSISTANT);
}

/* ---- Kimi K2 Thinking -------------------------------------------------------------------
 * A transcription of the Kimi K2 Thinking template
 * (tests/tokenizer/kimi_k2_thinking_chat_template.jinja); comments quote it. Every tag is
 * written with {%- -%} (or sits inside a line that is all template), so no whitespace of the
 * template reaches the output apart from the "\n" after "## Return of ID". Content is always a
 * string here (or an assistant's NULL = JSON null, which renders nothing); the list-content
 * branch is not an input. */
#define K2_CALLS_BEGIN "<|tool_calls_section_begin|>"
#define K2_CALLS_END "<|tool_calls_section_end|>"
#define K2_CALL_BEGIN "<|tool_call_begin|>"
#define K2_CALL_ARGS "<|tool_call_argument_begin|>"
#define K2_CALL_END "<|tool_call_end|>"

static void data_s(out_t *o, const char *s) {
  if (s) data(o, s, strlen(s));
}

/* set_roles: role_name = message.get('name') or message['role'] */
static void k2t_header(out_t *o, const df_chat_msg *m) {
  if (role_is(m, "user")) lit(o, "<|im_user|>");
  else if (role_is(m, "assistant")) lit(o, "<|im_assistant|>");
  else lit(o, "<|im_system|>");
  if (m->name && *m->name) data_s(o, m->name);
  else data_s(o, m->role);
  lit(o, "<|im_middle|>");
}

static void k2t_message(out_t *o, const df_chat_msg *m, bool suffix) {
  k2t_header(o, m);
  if (role_is(m, "assistant")) {
    /* history: '<think></think>'; suffix: '<think>' + message.get('reasoning_content', '') +
     * '</think>' */
    lit(o, "<think>");
    if (suffix) data_s(o, m->reasoning_content);
    lit(o, "</think>");
    data_s(o, m->content);
    if (m->n_tool_calls) {
      /* render_toolcalls: '<|tool_call_begin|>' + tool_call['id'] +
       * '<|tool_call_argument_begin|>' + arguments + '<|tool_call_end|>' per call */
      lit(o, K2_CALLS_BEGIN);
      for (size_t k = 0; k < m->n_tool_calls; k++) {
        lit(o, K2_CALL_BEGIN);
        data_s(o, m->tool_calls[k].id);
        lit(o, K2_CALL_ARGS);
        data_s(o, m->tool_calls[k].arguments);
        lit(o, K2_CALL_END);
      }
      lit(o, K2_CALLS_END);
    }
  } else if (role_is(m, "tool")) {
    /* '## Return of ' + message.tool_call_id + '\n' + content (an absent id prints nothing) */
    lit(o, "## Return of ");
    data_s(o, m->tool_call_id);
    lit(o, "\n");
    data_s(o, m->content);
  } else {
    data_s(o, m->content);
  }
  lit(o, K2_END);
}

static void render_kimi_k2_thinking(const df_chat_msg *msgs, size_t n, const df_chat_opts *opt,
                                    const char *tools, out_t *o) {
  /* ns.last_non_tool_call_assistant_msg: the last assistant message without tool calls */
  size_t split = 0; /* hist_msgs = messages[:split], suffix_msgs = messages[split:] */
  for (size_t i = n; i-- > 0;)
    if (role_is(&msgs[i], "assistant") && msgs[i].n_tool_calls == 0) {
      split = i + 1;
      break;
    }
  /* {%- if tools -%} '<|im_system|>tool_declare<|im_middle|>' + tools|tojson + '<|im_end|>' */
  if (tools) {
    lit(o, "<|im_system|>tool_declare<|im_middle|>");
    data_s(o, tools);
    lit(o, K2_END);
  }
  /* {%- if messages|length == 0 or messages[0]['role'] != 'system' -%} */
  if (n == 0 || !role_is(&msgs[0], "system"))
    lit(o, "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot "
           "AI." K2_END);
  for (size_t i = 0; i < n; i++) k2t_message(o, &msgs[i], i >= split);
  if (opt->add_generation_prompt) lit(o, K2_ASSISTANT);
}

static bool valid(const char *s) { return df_tok__utf8_valid((const uint8_t *)s, strlen(s)); }

int df_chat_render(const df_chat_template *t, const df_chat_msg *msgs, size_t n,
                   const df_chat_opts *opts, df_chat_text *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (t->family == DF_CHAT_KIMI_K3) return df_xtml_chat_render(msgs, n, opts, out, err, errlen);
  df_chat_opts dflt = {.add_generation_prompt = false, .enable_thinking = -1};
  if (!opts) opts = &dflt;
  if (n == 0 || !msgs) {
    df_tok__seterr(err, errlen, "chat: no messages");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const df_chat_msg *m = &msgs[i];
    /* null content: only an assistant's, only where the template tells it from "" */
    bool null_ok = (t->family == DF_CHAT_DEEPSEEK_V3 || t->family == DF_CHAT_KIMI_K2_THINKING) &&
                   m->role && role_is(m, "assistant");
    if (!m->role || (!m->content && !null_ok)) {
      df_tok__seterr(err, errlen, "chat: messages[%zu].%s: missing", i, !m->role ? "role" : "content");
      return -1;
    }
    if (!valid(m->role) || (m->content && !valid(m->content)) ||
        (m->reasoning_content && !valid(m->reasoning_content)) ||
        (m->name && !valid(m->name)) || (m->tool_call_id && !valid(m->tool_call_id))) {
      df_tok__seterr(err, errlen, "chat: messages[%zu]: not valid UTF-8", i);
      return -1;
    }
    if (m->n_tool_calls && !m->tool_calls) {
      df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls: missing", i);
      return -1;
    }
    if (m->n_tool_calls && t->family == DF_CHAT_KIMI_K2) {
      df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls: the %s chat template "
                     "does not render tool calls (it would drop them); not supported", i,
                     family_name(t->family));
      return -1;
    }
    for (size_t k = 0; k < m->n_tool_calls; k++) {
      const df_chat_tool_call *c = &m->tool_calls[k];
      if (!c->name || !c->arguments || !valid(c->name) || !valid(c->arguments) ||
          (c->id && !valid(c->id))) {
        df_tok__seterr(err, errlen, "chat: messages[%zu].tool_calls[%zu]: name and arguments "
                       "must be UTF-8 strings", i, k);
        return -1;
      }
    }
  }
  /* tools: printed by the templates that declare them (Qwen3 one tool per line, Kimi K2 and
   * K2 Thinking the list whole); DeepSeek-V3's template never reads `tools`, so jinja2 renders
   * the same prompt with or without them and so does this (df_chat_template_has_tools says
   * which) */
  df_tok_buf tools = {0};
  json_t *tv = NULL;
  if (opts->tools_json) {
    tv = df_pyjson_parse(opts->tools_json, "chat: tools", err, errlen);
    if (!tv) return -1;
    if (!json_is_array(tv)) {
      json_decref(tv);
      df_tok__seterr(err, errlen, "chat: tools: expected an array of tool objects");
      return -1;
    }
    /* Kimi K2 / K2 Thinking: tools|tojson = json.dumps(tools, ensure_ascii=False) */
    bool whole = t->family == DF_CHAT_KIMI_K2 || t->family == DF_CHAT_KIMI_K2_THINKING;
    int rc = whole && json_array_size(tv) > 0 ? df_pyjson_dump(&tools, tv, (df_pyjson_style){0})
                                              : 0;
    if (rc != 0) {
      json_decref(tv);
      df_tok__buf_free(&tools);
      df_tok__seterr(err, errlen, "chat: out of memory");
      return -1;
    }
  }
  out_t o = {0};
  if (df_tok__buf_put(&o.b, "", 0) != 0) o.oom = 1;
  switch (t->family) {
  case DF_CHAT_QWEN3:
    if (!o.oom) render_qwen3(msgs, n, opts, tv, &o);
    break;
  case DF_CHAT_DEEPSEEK_V3:
    if (!o.oom) render_deepseek_v3(t, msgs, n, opts, &o);
    break;
  case DF_CHAT_KIMI_K2:
    if (!o.oom) render_kimi_k2(msgs, n, opts, tools.p, &o);
    break;
  case DF_CHAT_KIMI_K2_THINKING:
    if (!o.oom) render_kimi_k2_thinking(msgs, n, opts, tools.p, &o);
    break;
  case DF_CHAT_KIMI_K3: /* rendered by df_xtml_chat_render above */
    break;
  }
  df_tok__buf_free(&tools);
  json_decref(tv);
  if (o.oom) {
    df_tok__buf_free(&o.b);
    free(o.sp);
    df_tok__seterr(err, errlen, "chat: out of memory");
    return -1;
  }
  out->text = o.b.p;
  out->len = o.b.n;
  out->spans = o.sp;
  out->n_spans = o.n_sp;
  return 0;
}

void df_chat_text_free(df_chat_text *out) {
  if (!out) return;
  free(out->text);
  free(out->spans);
  memset(out, 0, sizeof *out);
}

int df_chat_encode(const df_chat_template *t, const df_tok *tok, const df_chat_msg *msgs,
                   size_t n, const df_chat_opts *opts, int32_t **ids, size_t *n_ids, char *err,
                   size_t errlen) {
  *ids = NULL;
  *n_ids = 0;
  if (t->family == DF_CHAT_KIMI_K3) /* per segment: merges never cross a segment boundary */
    return df_xtml_chat_encode(tok, msgs, n, opts, ids, n_ids, err, errlen);
  df_chat_text txt;
  if (df_chat_render(t, msgs, n, opts, &txt, err, errlen) != 0) return -1;
  int rc = df_tok_encode_spans(tok, txt.text, txt.len, 0, txt.spans, txt.n_spans, ids, n_ids, err,
                               errlen);
  df_chat_text_free(&txt);
  return rc;
}

int df_chat_encode_markup(const df_chat_template *t, const df_tok *tok, const char *text,
                          size_t len, int32_t **ids, size_t *n_ids, char *err, size_t errlen) {
  if (t->family == DF_CHAT_KIMI_K3)
    return df_xtml_encode_markup(tok, text, len, ids, n_ids, err, errlen);
  return df_tok_encode(tok, text, len, 0, ids, n_ids, err, errlen);
}

static bool is_added(const df_tok *tok, const char *piece) {
  int32_t id = df_tok_token_to_id(tok, piece, strlen(piece));
  return id >= 0 && df_tok_is_added(tok, id);
}

int df_chat_stop_ids(const df_tok *tok, int32_t out[4]) {
  static const char *const xtml[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
  static const char *const stops[] = {"<|end_of_msg|>", "[EOS]"};
  if (!tok) return 0;
  for (int k = 0; k < 4; k++)
    if (!is_added(tok, xtml[k])) return 0;
  int n = 0;
  for (int k = 0; k < 2; k++)
    if (is_added(tok, stops[k])) out[n++] = df_tok_token_to_id(tok, stops[k], strlen(stops[k]));
  return n;
}

size_t df_chat_min_tokens(const df_chat_template *t, const df_tok *tok, const df_chat_msg *msgs,
                          size_t n) {
  size_t lb = 0;
  switch (t->family) {
  case DF_CHAT_QWEN3:
    if (!is_added(tok, "<|im_start|>") || !is_added(tok, "<|im_end|>")) return 0;
    for (size_t i = 0; i < n; i++) {
      const char *r = msgs[i].role;
      if (r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant"))) lb += 3;
    }
    break;
  case DF_CHAT_DEEPSEEK_V3:
    if (!is_added(tok, DS_USER) || !is_added(tok, DS_EOS)) return 0;
    for (size_t i = 0; i < n; i++) {
      const char *r = msgs[i].role;
      if (r && (!strcmp(r, "user") || (!strcmp(r, "assistant") && msgs[i].content))) lb++;
    }
    break;
  case DF_CHAT_KIMI_K2:
  case DF_CHAT_KIMI_K2_THINKING:
    /* every message ends with <|im_end|>; system, user, assistant and tool ones open with
     * <|im_system|>/<|im_user|>/<|im_assistant|>, a role word and <|im_middle|>; the default
     * system turn (5: header 3, its text >= 1, <|im_end|>) is not counted */
    if (!is_added(tok, "<|im_system|>") || !is_added(tok, "<|im_user|>") ||
        !is_added(tok, "<|im_assistant|>") || !is_added(tok, "<|im_middle|>") ||
        !is_added(tok, K2_END))
      return 0;
    for (size_t i = 0; i < n; i++) {
      const char *r = msgs[i].role;
      if (!r) continue;
      bool known = !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
                   !strcmp(r, "tool");
      /* K2 Thinking gives every role a header (<|im_system|> for the others) */
      lb += known ? 4 : t->family == DF_CHAT_KIMI_K2_THINKING ? 3 : 1;
    }
    break;
  case DF_CHAT_KIMI_K3:
    lb = df_xtml_min_tokens(tok, msgs, n);
    break;
  }
  return lb;
}
