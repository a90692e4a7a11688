/* engine/text/chat_types.h — the conversation a chat format renders: messages, tool calls,
 * request options and the rendered prompt. Shared by the template renderers
 * (engine/text/chat_template.h) and Kimi K3's XTML (engine/text/chat_xtml.h).
 *
 * Owns: these types only. Does not own: any rendering.
 */
#ifndef DF_ENGINE_CHAT_TYPES_H
#define DF_ENGINE_CHAT_TYPES_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/text/tokenizer.h"

/* One tool call of an assistant message. */
typedef struct df_chat_tool_call {
  const char *name;      /* UTF-8, NUL-terminated */
  const char *arguments; /* the arguments as JSON text, inserted verbatim (UTF-8) */
  const char *id;        /* the call's id (OpenAI "id"), NULL = not given */
} df_chat_tool_call;

/* One message. Strings are UTF-8, NUL-terminated, borrowed for the call. */
typedef struct df_chat_msg {
  const char *role;              /* "system", "user", "assistant", "tool" (others render nothing) */
  const char *content;           /* required (use "" for none), except that an assistant
                                    message may pass NULL for JSON null where the template
                                    tells null from "" (DeepSeek-V3: tool-call turns) */
  const char *reasoning_content; /* assistant only; NULL = not given (then taken from
                                    <think>...</think> in content, as the template does) */
  const df_chat_tool_call *tool_calls; /* assistant only; n_tool_calls of them */
  size_t n_tool_calls;
  const char *name;              /* the message's "name", NULL = not given */
  const char *tool_call_id;      /* tool messages: the call they answer, NULL = not given */
} df_chat_msg;

typedef struct df_chat_opts {
  bool add_generation_prompt; /* append the assistant header */
  int enable_thinking;        /* -1 not given (template default), 0 false, 1 true; Kimi K3's
                                 `thinking` */
  const char *tools_json;     /* the request's `tools` as JSON text (an array of tool objects),
                                 NULL or "[]" = none; re-serialised as each template prints it */
  const char *thinking_effort; /* Kimi K3: NULL not given (default "max"), "" given as null
                                  (no thinking-effort message), else low|medium|high|max */
  const char *tool_choice;     /* Kimi K3: NULL or "auto" = no message, "required", "none" */
  const char *response_format_json; /* Kimi K3: the request's `response_format` as JSON text
                                       (an object), NULL = not given */
} df_chat_opts;

/* A rendered prompt: text plus the byte spans that came from messages. */
typedef struct df_chat_text {
  char *text;         /* NUL-terminated, len bytes, malloc'd */
  size_t len;
  df_tok_span *spans; /* [n_spans], sorted, non-overlapping, malloc'd */
  size_t n_spans;
} df_chat_text;

#endif
