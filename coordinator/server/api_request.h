/* coordinator/server/api_request.h — the validated request of /v1 (its types) and the helpers
 * that parse its fields into it, shared by api.c and api_tools.c (coordinator/server/api.h has
 * the parser and the response builders). jansson and libc only.
 */
#ifndef DF_COORD_API_REQUEST_H
#define DF_COORD_API_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum df_api_kind {
  DF_API_CHAT = 1,       /* POST /v1/chat/completions */
  DF_API_COMPLETION = 2, /* POST /v1/completions */
} df_api_kind;

/* An error reply: HTTP status plus the OpenAI body {"error": {message, type, param, code}}. */
typedef struct df_api_error {
  int status;        /* HTTP status (400, 401, 404, 405, 413, 429, 500, 503) */
  char message[512]; /* one line, UTF-8 */
  const char *type;  /* static string: "invalid_request_error", "server_error", ... */
  char param[128];   /* the offending field, e.g. "messages[1].content"; "" = null */
  const char *code;  /* static string or NULL (= null) */
} df_api_error;

/* Most stop strings a request may give (OpenAI's limit). */
#define DF_API_MAX_STOP 4

/* One tool call of an assistant message (OpenAI {id, type: "function", function: {name,
 * arguments}}). */
typedef struct df_api_tool_call {
  char *id;        /* the call's id, or NULL when not given */
  char *name;      /* the function's name */
  char *arguments; /* the arguments as JSON text (OpenAI sends a string; an object is accepted
                      and kept as its compact JSON text); a JSON object */
} df_api_tool_call;

typedef struct df_api_msg {
  char *role;      /* "system", "user", "assistant" or "tool" */
  char *content;   /* UTF-8 without NUL; text parts joined with "\n"; NULL only for an
                      assistant message with tool calls whose content was null or absent */
  char *reasoning; /* assistant reasoning_content, or NULL */
  char *name;      /* the message's name, or NULL */
  char *tool_call_id; /* tool messages: the call answered, or NULL */
  df_api_tool_call *tool_calls; /* assistant: [n_tool_calls] */
  size_t n_tool_calls;
} df_api_msg;

/* tool_choice */
typedef enum df_api_tool_choice {
  DF_API_TOOLS_AUTO = 0,     /* "auto" (the default when tools are given) */
  DF_API_TOOLS_NONE = 1,     /* "none" (the default without tools) */
  DF_API_TOOLS_REQUIRED = 2, /* "required": at least one call */
  DF_API_TOOLS_NAMED = 3,    /* {"type": "function", "function": {"name": N}}: a call of N */
} df_api_tool_choice;

/* response_format.type */
typedef enum df_api_format {
  DF_API_FORMAT_TEXT = 0,
  DF_API_FORMAT_JSON_OBJECT = 1,
  DF_API_FORMAT_JSON_SCHEMA = 2,
} df_api_format;

/* A validated request. Strings are malloc'd, NUL-terminated, valid UTF-8 without NUL bytes;
 * freed by df_api_request_free. "Not given" values are as documented per field. */
typedef struct df_api_request {
  df_api_kind kind;
  char *model;
  df_api_msg *msgs;     /* [n_msgs] (chat) */
  size_t n_msgs;
  char *prompt;         /* completion prompt text, or NULL when given as token ids */
  int32_t *prompt_ids;  /* [n_prompt_ids] completion prompt as token ids (each >= 0) */
  size_t n_prompt_ids;
  int64_t max_tokens;   /* >= 1, or -1 = not given */
  double temperature;   /* [0, 2], or -1 = not given */
  double top_p;         /* (0, 1], or -1 = not given */
  int64_t top_k;        /* >= 0 (0 = off), or -1 = not given */
  bool has_seed;
  uint64_t seed;        /* [0, 2^63-1] when has_seed */
  char *stop[DF_API_MAX_STOP]; /* [n_stop] non-empty */
  int n_stop;
  bool stream;
  bool include_usage;   /* stream_options.include_usage */
  bool ignore_eos;
  int enable_thinking;  /* chat_template_kwargs.enable_thinking (or .thinking): -1 not given,
                           0, 1 */
  int thinking_effort;  /* chat_template_kwargs.thinking_effort or reasoning_effort: a
                           df_api_effort */
  const char *effort_field; /* static: the field that gave thinking_effort, for messages */
  char *tools_json;     /* chat: the `tools` array as compact JSON text (key order kept), or
                           NULL when absent or empty */
  size_t n_tools;
  char **tool_names;    /* [n_tools] each function's name */
  char **tool_params;   /* [n_tools] each function's `parameters` as JSON text, or NULL */
  int tool_choice;      /* a df_api_tool_choice */
  char *tool_choice_name; /* DF_API_TOOLS_NAMED: the function */
  bool parallel_tool_calls; /* default true */
  int format;           /* response_format.type: a df_api_format */
  char *format_json;    /* the whole response_format object as JSON text, or NULL (text) */
  char *schema_json;    /* DF_API_FORMAT_JSON_SCHEMA: json_schema.schema as JSON text */
  bool logprobs;        /* chat: logprobs; completions: logprobs given (an integer) */
  int top_logprobs;     /* chat: top_logprobs (0..DF_API_TOP_LOGPROBS_MAX, needs logprobs);
                           completions: the logprobs integer (0..DF_API_CMPL_LOGPROBS_MAX) */
} df_api_request;

/* OpenAI's limits: top_logprobs of chat, logprobs of (legacy) completions. */
#define DF_API_TOP_LOGPROBS_MAX 20
#define DF_API_CMPL_LOGPROBS_MAX 5

/* How much a thinking model is asked to think (Kimi K3's thinking_effort). */
typedef enum df_api_effort {
  DF_API_EFFORT_UNSET = 0, /* not given: the template's default */
  DF_API_EFFORT_LOW = 1,
  DF_API_EFFORT_MEDIUM = 2,
  DF_API_EFFORT_HIGH = 3,
  DF_API_EFFORT_MAX = 4,
  DF_API_EFFORT_NONE = 5, /* given as null: no effort instruction */
} df_api_effort;

/* Fill *e (printf-style message). type NULL = "invalid_request_error"; param NULL = null;
 * code NULL = null. Returns -1 (so callers can `return df_api_error_set(...)`). */
int df_api_error_set(df_api_error *e, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A 400 with the printf-style message and param (NULL = null). Returns -1. Every helper below returns 0, or -1 with *e set
 * to a 400 naming `param` (500 when out of memory). */
int df_api_bad(df_api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "an object", "a string", ... for messages. */
const char *df_api_type_name(const json_t *v);
/* *out = a malloc'd copy of string v (no NUL bytes; empty only when allow_empty); frees the
 * previous *out. */
int df_api_get_str(const json_t *v, const char *param, bool allow_empty, char **out,
                   df_api_error *e);
int df_api_get_bool(const json_t *v, const char *param, bool *out, df_api_error *e);

#endif
