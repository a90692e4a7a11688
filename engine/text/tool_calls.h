/* engine/text/tool_calls.h — OpenAI tool calls in generated text: an incremental parser per chat
 * family, and the literal frame a forced call starts and ends with.
 *
 * Owns: turning what a model generates (decoded text, the text of added/special tokens included)
 * back into content and tool calls, for streaming (events) and for the final answer; the frame
 * of one call, for constrained decoding. Does not own: rendering (engine/text/chat_template.h),
 * reasoning (engine/text/reasoning.h splits it off first; without that, <think> and Kimi K3's
 * think element are content here), JSON-schema grammars, the
 * API (what the caller does with a dropped call).
 *
 * The formats, as each family's template renders an assistant's calls (the parser reads exactly
 * that, with the leniencies listed):
 *   DF_CHAT_QWEN3 (tests/tokenizer/qwen3_chat_template.jinja):
 *       <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 *     calls separated by "\n"; a "\n" right before a call belongs to it (the template writes it
 *     after non-empty content), so "text\n<tool_call>..." gives the content "text". The JSON
 *     may use any JSON whitespace, but must be an object whose first key is "name" (a string)
 *     and second "arguments" (an object), and nothing else.
 *   DF_CHAT_DEEPSEEK_V3 (tests/tokenizer/deepseek_v3_chat_template.jinja):
 *       <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
 *       <｜tool▁call▁end｜>  (no line break there) further calls after "\n", then
 *       <｜tool▁calls▁end｜>
 *     NAME is the raw text up to the line break (non-empty, no "<｜").
 *   DF_CHAT_KIMI_K2, DF_CHAT_KIMI_K2_THINKING (tests/tokenizer/kimi_k2_thinking_chat_template.jinja):
 *       <|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS
 *       <|tool_call_end|>...<|tool_calls_section_end|>
 *     ID is the model's own call id, "functions.NAME:IDX", taken (whitespace around it cut) as
 *     the call's id; NAME is ID without a leading "functions." and a final ":DIGITS"; at most
 *     512 bytes, no "<|".
 *   DF_CHAT_KIMI_K3 (engine/text/chat_xtml.c, render_assistant):
 *       <|open|>tools<|sep|><|open|>call tool="NAME" index="I"<|sep|><|open|>json type="object"
 *       <|sep|>ARGS<|close|>json<|sep|><|close|>call<|sep|>...<|close|>tools<|sep|>
 *     NAME is the attribute value with &quot; and &amp; undone; a call without the json element
 *     has the arguments {} (the template writes none for blank arguments). Everything around
 *     the tools element (think, response, message tags) is content.
 * In every family a call may also start without its section marker, whitespace between calls
 * and before the section end belongs to the calls, and the section end is optional: a call is
 * complete at its own end marker. ARGS end at the first end marker (</tool_call>,
 * <｜tool▁call▁end｜>, <|tool_call_end|>, <|close|>json<|sep|>) outside a JSON string, so a
 * string may spell a marker; a string left open hides every marker after it (the call ends
 * unterminated: content). ARGS must be JSON text of an object (RFC 8259; whitespace around it
 * is dropped); Qwen3's end at the last "}" before the marker (that "}" closes the outer
 * object), DeepSeek's before "```".
 *
 * Ids: Kimi K2 / K2 Thinking calls carry the model's id. The other families have none: the
 * parser makes "call_" + 24 letters and digits, a function of (id_seed, the call's stream
 * index) only, so the same seed gives the same ids.
 *
 * Malformed: a start whose header does not parse gives its start marker back as content and the
 * text after it is read again; a call that fails later (its arguments, its closing, the end of
 * the text) is content through its end marker, or to the end (calls inside it are not looked
 * for). Whitespace joins a call only after a complete one (and Qwen3's one "\n" before it).
 *
 * Text that happens to spell a marker is a marker (outside argument strings): decoded text cannot
 * tell an added token from plain-text tokens that spell the same bytes. Feed the generated text
 * without the stop token's (<|im_end|>, <｜end▁of▁sentence｜>, <|end_of_msg|>): it would be content.
 * Cost: linear in the text, however it is cut (headers, whitespace runs and held-back pieces are
 * bounded).
 */
#ifndef DF_ENGINE_TOOL_CALLS_H
#define DF_ENGINE_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/chat_template.h"

typedef struct df_tool_parser df_tool_parser;

typedef enum df_tool_ev_kind {
  DF_TOOL_EV_CONTENT = 1, /* text: content (delta.content); includes a dropped call's raw text */
  DF_TOOL_EV_CALL_BEGIN,  /* index, id, name: a call whose header (name) is complete */
  DF_TOOL_EV_ARGS,        /* index, text: the next piece of the call's arguments (JSON text) */
  DF_TOOL_EV_CALL_END,    /* index: the call is complete: the ARGS pieces joined are its
                             arguments, JSON text of an object */
  DF_TOOL_EV_CALL_DROP,   /* index: the announced call turned out not to be one (its arguments
                             are not a JSON object, it is malformed after its header, or the
                             text ended inside it); its raw text follows as CONTENT */
} df_tool_ev_kind;

/* One event. Strings are valid UTF-8, NUL-terminated, owned by the parser and valid until the
 * next df_tool_parser_feed / df_tool_parser_finish / df_tool_parser_destroy. */
typedef struct df_tool_ev {
  df_tool_ev_kind kind;
  size_t index;     /* call events: the call's stream index, calls numbered 0, 1, ... in the
                       order announced (a dropped call keeps its number; the next call does not
                       reuse it); CONTENT: 0 */
  const char *text; /* CONTENT, ARGS: text[0..len) (NUL after it); else NULL */
  size_t len;
  const char *id;   /* CALL_BEGIN: the call's id; else NULL */
  const char *name; /* CALL_BEGIN: the function name (decoded); else NULL */
} df_tool_ev;

/* A complete call of the final answer. Owned by the parser (valid until destroy). */
typedef struct df_tool_call_out {
  const char *id;        /* as announced in CALL_BEGIN */
  const char *name;
  const char *arguments; /* JSON text of an object: the ARGS pieces joined, NUL-terminated */
  size_t arguments_len;
  size_t stream_index;   /* the index its events carried */
  size_t content_pos;    /* the length of the final content when the call began: where it stood */
  const char *raw;       /* the model's text of the call (markers, the "\n" or whitespace before
                            it, a section begin before it, a section end after it) */
  size_t raw_len;
} df_tool_call_out;

/* A parser for `family`'s format. id_seed makes the ids of families without their own (any
 * value; e.g. a request counter). Returns NULL when out of memory or family is unknown.
 * Free with df_tool_parser_destroy. */
df_tool_parser *df_tool_parser_new(df_chat_family family, uint64_t id_seed);

/* Free the parser and everything it returned; set *p to NULL. Accepts NULL and *p NULL. */
void df_tool_parser_destroy(df_tool_parser **p);

/* Feed the next piece of generated text (any bytes, cut anywhere, len 0 allowed). Bytes that
 * are not UTF-8 become U+FFFD (each maximal ill-formed subpart one, as Python's
 * errors="replace"); a character cut at the end of a piece waits for the next piece.
 * Events since the last call go to *ev / *n_ev (borrowed, see df_tool_ev): content that cannot
 * be the start of a call marker is released at once, a possible marker start is held back
 * until the following text decides; a call is announced (CALL_BEGIN) once its name is complete
 * and its arguments stream as they come (held back only where they could be the call's closing
 * structure). A call announced here may still be dropped (CALL_DROP, then its raw text as
 * CONTENT): arguments already streamed for it belong to no call — a streaming client cannot
 * take them back; the final answer (df_tool_parser_content / _call) is always exact.
 * Returns 0, or -1 when out of memory or called after finish (the parser is then unusable). */
int df_tool_parser_feed(df_tool_parser *p, const char *text, size_t len, const df_tool_ev **ev,
                        size_t *n_ev);

/* The text has ended (the model stopped, or was cut by max_tokens when cut_by_length): every
 * held-back piece is decided. A call not complete now (unterminated, its arguments not yet
 * closed, its header unfinished) is not a call: a dropped one gets CALL_DROP, and its text is
 * content; cut_by_length changes nothing in that (a call is complete only at its end marker,
 * which a cut can never have produced half of) and is there for the caller to say why. A
 * trailing partial UTF-8 character becomes U+FFFD. Events go to *ev / *n_ev as for feed.
 * Returns 0, or -1 when out of memory or called twice. */
int df_tool_parser_finish(df_tool_parser *p, bool cut_by_length, const df_tool_ev **ev,
                          size_t *n_ev);

/* The content so far (after finish: the final content): every released CONTENT piece joined,
 * i.e. the text with the complete calls taken out. NUL-terminated, *len its length; owned by
 * the parser, valid until the next feed / finish / destroy. */
const char *df_tool_parser_content(const df_tool_parser *p, size_t *len);

/* Number of complete calls so far, and the i-th (0-based, in order; NULL when i is out of
 * range). Pointers stay valid until destroy. */
size_t df_tool_parser_n_calls(const df_tool_parser *p);
const df_tool_call_out *df_tool_parser_call(const df_tool_parser *p, size_t i);

/* The literal text a forced call of `name` starts with (*prefix) and ends with (*suffix), for
 * tool_choice "required" / a named tool: the caller constrains decoding to prefix + arguments
 * (a JSON-schema grammar of an object) + suffix, and the parser reads that text back as one call
 * of `name` with those arguments. Sources as in the format list above:
 *   Qwen3        prefix "<tool_call>\n{\"name\": \"NAME\", \"arguments\": "
 *                suffix "}\n</tool_call>"  (NAME JSON-escaped as json.dumps(ensure_ascii=False))
 *   DeepSeek-V3  prefix "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n"
 *                suffix "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
 *   Kimi K2 / K2 Thinking
 *                prefix "<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX"
 *                       "<|tool_call_argument_begin|>"
 *                suffix "<|tool_call_end|><|tool_calls_section_end|>"
 *                IDX = call_index: Kimi numbers calls across the conversation (0 for the first
 *                call of a conversation; the number of earlier calls otherwise)
 *   Kimi K3      prefix "<|open|>tools<|sep|><|open|>call tool=\"NAME\" index=\"I\"<|sep|>"
 *                       "<|open|>json type=\"object\"<|sep|>"
 *                suffix "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
 *                I = call_index + 1 (calls of a message count from 1); NAME with & and " escaped.
 *                The frame is the tools element only: it belongs after <|close|>response<|sep|>.
 * call_index is ignored by Qwen3 and DeepSeek-V3. Returns 0 with *prefix and *suffix malloc'd
 * (caller frees both), or -1 with both NULL: family unknown, name NULL, empty or not UTF-8, a
 * name the format cannot carry back (DeepSeek-V3: a line break or "<｜"; Kimi K2: "<|" or
 * whitespace at either end), out of memory. */
int df_tool_call_frame(df_chat_family family, const char *name, size_t call_index,
                       char **prefix, char **suffix);

/* The spellings of the family's call markup that may be added tokens, NULL-terminated (static;
 * empty for an unknown family): a decoder that skips special tokens must keep those that are
 * special (Kimi K2's call markers are). */
const char *const *df_tool_call_markers(df_chat_family family);

#endif
