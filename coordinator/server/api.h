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

#include "coordinator/server/api_request.h"


/* Parse and validate a request body of `len` bytes (need not be NUL-terminated).
 * Returns 0 and fills *out (free with df_api_request_free), or -1 with *out zeroed and *err
 * set: status 400 for malformed JSON (message gives line and column), a non-object body,
 * duplicate keys, unknown or unsupported fields, wrong types and out-of-range values (param
 * names the field). Never allocates more than a small multiple of len. */
int df_api_parse(df_api_kind kind, const char *body, size_t len, df_api_request *out,
                 df_api_error *err);

/* Free the strings and arrays of a request and zero it. Accepts a zeroed struct. */
void df_api_request_free(df_api_request *r);



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
  int64_t draft_tokens;  /* draft tokens proposed while decoding the answer; > 0 adds the
                            extension usage.speculative {draft_tokens, accepted_tokens}
                            (docs/API.md); 0 = no such key */
  int64_t draft_accepted; /* of them, tokens the target accepted */
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
  const char *reasoning; /* chat: message.reasoning_content / delta.reasoning_content, UTF-8,
                            reasoning_len bytes; NULL = no such key */
  size_t reasoning_len;
} df_api_part;

/* Server-sent events. Each returns one complete event "data: {json}\n\n", malloc'd,
 * NUL-terminated, *len bytes; NULL when out of memory or text is not valid UTF-8.
 *   chunk: a chat chunk (delta {role?, content?, reasoning_content?, tool_calls?}) or a
 *          completion chunk (text);
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
