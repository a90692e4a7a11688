/* engine/text/chat_xtml.h — Kimi K3's XTML chat format (private to dftok and its tests).
 *
 * Owns: rendering a conversation (engine/text/chat_template.h's df_chat_msg / df_chat_opts) to
 * Kimi K3's XTML prompt as an ordered list of segments, and encoding it segment by segment.
 * The format is the one of ggml-org/llama.cpp's
 * models/templates/Kimi-K3.jinja @181a4a8fb1af6142a7bf611dddd36fe34a3de3fe (a Jinja
 * transcription of Moonshot's encoding_k3.py) with the segment boundaries of docs/K3.md §5.3-5.4.
 * Does not own: recognising a K3 folder (chat_template.c), tokenization (tokenizer.h).
 *
 * A segment is a structural special (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>: one id
 * each) or a text piece: a tag name, " key", "=\"", an escaped attribute value, "\"", or a
 * body (content, reasoning, tool arguments, the tool-declare / thinking-effort / tool-choice /
 * response-format bodies). Text pieces are encoded alone, as plain text, so BPE merges never
 * cross a segment boundary and no special is ever recognised inside one. Empty pieces are not
 * listed (they give no ids).
 */
#ifndef DF_ENGINE_CHAT_XTML_H
#define DF_ENGINE_CHAT_XTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/chat_types.h"
#include "engine/text/tokenizer.h"

typedef enum df_xtml_kind {
  DF_XTML_TEXT = 0,  /* ordinary text: encoded alone as plain text */
  DF_XTML_OPEN = 1,  /* <|open|> */
  DF_XTML_CLOSE = 2, /* <|close|> */
  DF_XTML_SEP = 3,   /* <|sep|> */
  DF_XTML_EOM = 4,   /* <|end_of_msg|> */
} df_xtml_kind;

typedef struct df_xtml_seg {
  df_xtml_kind kind;
  size_t off, len;   /* its bytes in df_xtml.text */
  bool from_request; /* text that came from the request (message text, names, tools JSON...) */
} df_xtml_seg;

/* A rendered XTML prompt: the text (NUL-terminated) and its segments, which tile it in order. */
typedef struct df_xtml {
  char *text;
  size_t len;
  df_xtml_seg *segs;
  size_t n_segs;
} df_xtml;

/* The spelling of a special kind ("<|open|>" ...); NULL for DF_XTML_TEXT. */
const char *df_xtml_special(df_xtml_kind k);

/* Render msgs[0..n) with opts (NULL = defaults: no generation prompt, thinking on, effort
 * "max"). Borrows every argument. Returns 0 with *out filled (free with df_xtml_free), or -1
 * with *out zeroed and a one-line message in err: no messages, a NULL role, invalid UTF-8, a
 * bad thinking_effort / tool_choice, tools_json or response_format_json that is not JSON of the
 * expected shape or holds what cannot be printed exactly as Python does (object keys whose case-insensitive order, the template's dictsort, differs from
 * their code-point order, Python's sort_keys), a tool call without a name, a tool message whose
 * tool name cannot be resolved, out of memory. */
int df_xtml_render(const df_chat_msg *msgs, size_t n, const df_chat_opts *opts, df_xtml *out,
                   char *err, size_t errlen);

/* Free a rendering and zero it. Accepts a zeroed struct. */
void df_xtml_free(df_xtml *x);

/* Encode a rendering segment by segment: a special is its id among tok's added tokens (an
 * error when tok lacks it), a text segment df_tok_encode(DF_TOK_PLAIN) of its bytes alone; the
 * ids are concatenated into *ids (malloc'd, caller frees). If seg_end is not NULL it gets a
 * malloc'd array of x->n_segs offsets: segment i's ids end at (*seg_end)[i]. 0 or -1 + err. */
int df_xtml_encode(const df_xtml *x, const df_tok *tok, int32_t **ids, size_t *n_ids,
                   size_t **seg_end, char *err, size_t errlen);

/* Split XTML markup text as the renderer writes it (text[0..len), e.g. the frame of a forced
 * tool call "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" ...") into
 * the segments of docs/K3.md §5.4 — each special; after <|open|> / <|close|> the tag name, then
 * per attribute " key", "=\"", the value, "\""; any other text up to the next special one
 * segment — and encode them with df_xtml_encode, so the ids equal those of a rendering of the
 * same text. Text may end anywhere (inside a value: the value so far is its segment). Returns
 * 0 with *ids malloc'd (caller frees), or -1 + err: tok lacks an XTML special, out of memory. */
int df_xtml_encode_markup(const df_tok *tok, const char *text, size_t len, int32_t **ids,
                          size_t *n_ids, char *err, size_t errlen);

/* df_chat_render / df_chat_encode / df_chat_min_tokens for DF_CHAT_KIMI_K3 (chat_template.h
 * documents them). Render: the concatenated text, with every from_request segment as a span. */
int df_xtml_chat_render(const df_chat_msg *msgs, size_t n, const df_chat_opts *opts,
                        df_chat_text *out, char *err, size_t errlen);
int df_xtml_chat_encode(const df_tok *tok, const df_chat_msg *msgs, size_t n,
                        const df_chat_opts *opts, int32_t **ids, size_t *n_ids, char *err,
                        size_t errlen);
size_t df_xtml_min_tokens(const df_tok *tok, const df_chat_msg *msgs, size_t n);

#endif
