/* engine/text/reasoning.h — a chat answer's reasoning and content: an incremental splitter of
 * generated text into its two channels, per chat family.
 *
 * Owns: where a family's reasoning (thinking) ends and its content begins in what a model
 * generates, for streaming (events) and for the final answer (the API's reasoning_content and
 * content). Does not own: tool calls (engine/text/tool_calls.h reads them from the content
 * channel this splitter passes on), rendering (chat_template.h renders reasoning_content of
 * history turns back), the API.
 *
 * The formats, as each family's template writes an assistant turn (the splitter reads that):
 *   DF_CHAT_QWEN3 (tests/tokenizer/qwen3_chat_template.jinja): "<think>\nREASONING\n</think>\n\n
 *     CONTENT". The split is the template's own reading of an assistant message's content:
 *     reasoning = the text before "</think>", after "<think>", with line feeds ('\n') cut at
 *     both ends; content = the text after "</think>" with leading line feeds cut — except that
 *     reasoning ends at the first "</think>" (the template splits at the last one; a streamed
 *     answer cannot wait to know which is last).
 *   DF_CHAT_KIMI_K2_THINKING (tests/tokenizer/kimi_k2_thinking_chat_template.jinja):
 *     "<think>REASONING</think>CONTENT", nothing cut. Its <think> and </think> are special
 *     tokens: the text must keep their spelling (df_reasoning_markers).
 *   DF_CHAT_KIMI_K3 (engine/text/chat_xtml.c; ../K3.md §5.3): the generation prompt opens the
 *     think element (thinking on) or the response element (off), so the answer starts inside
 *     it: REASONING "<|close|>think<|sep|>" "<|open|>response<|sep|>" CONTENT
 *     "<|close|>response<|sep|>" [the tools element] "<|close|>message<|sep|>". The element
 *     markup is not text of either channel: reasoning and content are the bodies, verbatim (the
 *     format escapes attribute values only). Outside the think and response elements,
 *     whitespace is dropped, "<|close|>message<|sep|>" is dropped (also inside the think or
 *     response element, which it then ends), and everything else — the
 *     tools element, passed verbatim from "<|open|>tools<|sep|>" through
 *     "<|close|>tools<|sep|>" for the tool-call parser, or text the format does not put there —
 *     is content; a later "<|open|>response<|sep|>" opens content again.
 *   DeepSeek-V3, Kimi K2: no reasoning channel (df_reasoning_parser_new returns NULL).
 *
 * Where the answer starts (df_reasoning_start): Qwen3 and K2 Thinking models open the
 * reasoning themselves, so AUTO: leading whitespace and then "<think>" open it; any other start
 * makes the whole answer content (a model answering without thinking, or Qwen3 with
 * enable_thinking false, whose prompt holds an empty think block). K3: IN when the prompt
 * opened the think element, OUT when it opened the response element. A reasoning channel that
 * never closes (the model stopped or was cut while thinking) holds the whole answer: its
 * content is empty.
 *
 * Text that spells a marker is a marker: decoded text cannot tell an added token from plain
 * tokens that spell the same bytes. Markers are ASCII, so the pieces this splitter releases cut
 * its input only at marker edges and before line feeds: UTF-8 input gives UTF-8 pieces. Cost:
 * linear in the text however it is cut (a held-back piece is shorter than the longest marker,
 * or a run of line feeds).
 */
#ifndef DF_ENGINE_REASONING_H
#define DF_ENGINE_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/text/chat_template.h"

typedef struct df_reasoning_parser df_reasoning_parser;

typedef enum df_reasoning_start {
  DF_REASONING_AUTO = 0, /* the model may open reasoning itself (Qwen3, K2 Thinking) */
  DF_REASONING_IN,       /* the prompt opened it: the answer starts as reasoning */
  DF_REASONING_OUT,      /* the answer is content from the start (thinking off; or a forced
                            tool call's frame that the prompt ends with) */
} df_reasoning_start;

typedef enum df_reasoning_ev_kind {
  DF_REASONING_EV_REASONING = 1, /* text of the reasoning channel (delta.reasoning_content) */
  DF_REASONING_EV_CONTENT,       /* text of the content channel (for the tool-call parser, or
                                    delta.content) */
} df_reasoning_ev_kind;

/* One event: text[0..len), NUL after it, owned by the parser and valid until the next feed /
 * finish / destroy. */
typedef struct df_reasoning_ev {
  df_reasoning_ev_kind kind;
  const char *text;
  size_t len;
} df_reasoning_ev;

/* True when `family` has a reasoning channel (Qwen3, Kimi K2 Thinking, Kimi K3). */
bool df_reasoning_family(df_chat_family family);

/* The spellings of the family's reasoning markup that are added tokens, NULL-terminated
 * (static; an empty list for families without a reasoning channel): a decoder that skips
 * special tokens must keep these (Kimi K2 Thinking's <think> and </think> are special). */
const char *const *df_reasoning_markers(df_chat_family family);

/* A splitter for `family`, its answer starting as `start` says (AUTO for a K3 answer is OUT).
 * Returns NULL when out of memory or the family has no reasoning channel. Free with
 * df_reasoning_parser_destroy. */
df_reasoning_parser *df_reasoning_parser_new(df_chat_family family, df_reasoning_start start);

/* Free the parser and set *p to NULL. Accepts NULL and *p NULL. */
void df_reasoning_parser_destroy(df_reasoning_parser **p);

/* Feed the next piece of generated text (cut anywhere, len 0 allowed). Events since the last
 * call go to *ev / *n_ev (borrowed, see df_reasoning_ev): text that cannot be part of a marker
 * (or of the line feeds Qwen3 cuts) is released at once; a possible marker start is held back
 * until the following text decides. Consecutive events never have the same kind. Returns 0,
 * or -1 when out of memory or called after finish (the parser is then unusable). */
int df_reasoning_parser_feed(df_reasoning_parser *p, const char *text, size_t len,
                             const df_reasoning_ev **ev, size_t *n_ev);

/* The text has ended: what was held back is decided (a marker prefix left at the end is text
 * of the channel it stands in; line feeds Qwen3 cuts are dropped). Events as for feed.
 * Returns 0, or -1 when out of memory or called twice. */
int df_reasoning_parser_finish(df_reasoning_parser *p, const df_reasoning_ev **ev,
                               size_t *n_ev);

/* The reasoning / content released so far (after finish: the answer's), every event of that
 * kind joined. NUL-terminated, *len its length; owned by the parser, valid until the next feed
 * / finish / destroy. */
const char *df_reasoning_parser_reasoning(const df_reasoning_parser *p, size_t *len);
const char *df_reasoning_parser_content(const df_reasoning_parser *p, size_t *len);

#endif
