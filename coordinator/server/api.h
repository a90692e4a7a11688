/* coordinator/server/api.h — the OpenAI-compatible bodies of /v1: strict request parsing and
 * validation, OpenAI-shaped errors, and the JSON / server-sent-event responses.
 *
 * Owns: turning a request body into a validated df_api_request (every field known, typed and
 * in range; anything we do not implement is an error naming the field), and writing the
 * response bodies byte-exactly as OpenAI frames them. Depends on jansson and libc only (the
 * request parser is fuzzed on its own: tests/fuzz/fuzz_api_request.c).
 * Does not own: tokenization, limits that need the model (prompt tokens, context), HTTP
 * (coordinator/server/server.c), generation (coordinator/generate/sched.c).
 *
 * Accepted fields (null is the same as absent everywhere):
 *   both:  model (string, required), max_tokens (integer >= 1), temperature (number in
 *          [0, 2]), top_p (number in (0, 1]), seed (integer in [0, 2^63-1]), stop (string or
 *          array of 1..4 non-empty strings), stream (bool), stream_options ({include_usage:
 *          bool}, only with stream=true), n (1), presence_penalty / frequency_penalty (0),
 *          logit_bias ({}), user (string; an end-user id, has no effect on the output).
 *          Extensions (as vLLM names them): top_k (integer >= -1; -1 and 0 = off),
 *          ignore_eos (bool).
 *   chat:  messages (required, 1.. of {role: system|user|assistant|tool, content: string or
 *          array of {type: "text", text}, name, reasoning_content (assistant), tool_calls
 *          (assistant), tool_call_id (tool)}), max_completion_tokens (as max_tokens; both given
 *          must agree), logprobs (bool), top_logprobs (0..20, needs logprobs), tools,
 *          tool_choice, parallel_tool_calls, response_format (text | json_object |
 *          json_schema; api_tools.c), chat_template_kwargs ({enable_thinking or thinking: bool,
 *          thinking_effort: "low"|"medium"|"high"|"max"|null}), reasoning_effort (the same
 *          names; thinking_effort is read by the Kimi K3 chat format only, others refuse it).
 *   completions: prompt (required: a string, an array of one string, or an array of token
 *          ids), logprobs (0..5 alternatives), echo (false), best_of (1), suffix (null).
 */
#ifndef DF_COORD_API_H
#define DF_COORD_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

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

/* Parse and validate a request body of `len` bytes (need not be NUL-terminated).
 * Returns 0 and fills *out (free with df_api_request_free), or -1 with *out zeroed and *err
 * set: status 400 for malformed JSON (message gives line and column), a non-object body,
 * duplicate keys, unknown or unsupported fields, wrong types and out-of-range values (param
 * names the field). Never allocates more than a small multiple of len. */
int df_api_parse(df_api_kind kind, const char *body, size_t len, df_api_request *out,
                 df_api_error *err);

/* Free the strings and arrays of a request and zero it. Accepts a zeroed struct. */
void df_api_request_free(df_api_request *r);

/* Fill *e (printf-style message). type NULL = "invalid_request_error"; param NULL = null;
 * code NULL = null. Returns -1 (so callers can `return df_api_error_set(...)`). */
int df_api_error_set(df_api_error *e, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The JSON body of an error, malloc'd and NUL-terminated (*len bytes); NULL when out of
 * memory. */
char *df_api_error_body(const df_api_error *e, size_t *len);

/* What every response of one request shares. */
typedef struct df_api_meta {
  df_api_kind kind;
  const char *id;      /* "chatcmpl-..." / "cmpl-..." */
  int64_t created;     /* Unix seconds */
  const char *model;   /* the model id as served */
  bool include_usage;  /* streaming: "usage": null in every chunk, then a usage chunk */
} df_api_meta;

typedef struct df_api_usage {
  int64_t prompt_tokens;
  int64_t completion_tokens;
  int64_t cached_tokens; /* prompt tokens taken from the prefix cache
                            (usage.prompt_tokens_details.cached_tokens) */
} df_api_usage;

/* One choice's part of a response: a streamed chunk, or the whole answer. */
typedef struct df_api_part {
  const char *role;    /* chat chunk: delta.role ("assistant" in the first chunk), NULL = none */
  const char *text;    /* UTF-8, text_len bytes; NULL: a chat chunk has no content key, a
                          whole chat message has "content": null; completions: "" */
  size_t text_len;
  const char *finish;  /* NULL = null, else "stop" / "length" / "tool_calls" */
  json_t *logprobs;    /* the choice's logprobs object (taken, even on failure); NULL = null */
  json_t *tool_calls;  /* chat: message.tool_calls / delta.tool_calls (taken); NULL = none */
} df_api_part;

/* Server-sent events. Each returns one complete event "data: {json}\n\n", malloc'd,
 * NUL-terminated, *len bytes; NULL when out of memory or text is not valid UTF-8.
 *   chunk: a chat chunk (delta {role?, content?, tool_calls?}) or a completion chunk (text);
 *   usage: the final usage chunk (choices []).
 *   error: {"error": {...}} as an event, for failures after the stream started. */
char *df_api_sse_chunk(const df_api_meta *m, df_api_part *p, size_t *len);
char *df_api_sse_usage(const df_api_meta *m, const df_api_usage *u, size_t *len);
char *df_api_sse_error(const df_api_error *e, size_t *len);
#define DF_API_SSE_DONE "data: [DONE]\n\n"
/* The SSE comment a stream sends while it waits for the model (no event; every SSE client
 * ignores lines that start with ':'), so the connection never falls silent. */
#define DF_API_SSE_KEEPALIVE ": keep-alive\n\n"

/* A whole non-streaming response (chat.completion / text_completion) with usage. Same
 * ownership and errors as the SSE builders. */
char *df_api_response(const df_api_meta *m, df_api_part *p, const df_api_usage *u,
                      size_t *len);

#endif
