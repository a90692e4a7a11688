/* engine/text/chat_json.h — JSON printed exactly as Python's json.dumps prints it, for chat
 * templates that print request JSON (tools, schemas) through transformers' `tojson` filter.
 * Private to engine/text/.
 *
 * Owns: parsing JSON text from a request (jansson) and writing it back byte-for-byte as
 * `json.dumps(value, ensure_ascii=False, separators=..., sort_keys=...)` of the Python value
 * that json.loads would give. Does not own: templates (engine/text/chat_template.c).
 */
#ifndef DF_ENGINE_CHAT_JSON_H
#define DF_ENGINE_CHAT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/text/tokenizer_util.h"

typedef struct df_pyjson_style {
  bool compact;   /* separators (",", ":") instead of json.dumps' default (", ", ": ") */
  bool sort_keys; /* keys of every object in code point order (sort_keys=True) */
} df_pyjson_style;

/* Parse `text` (NUL-terminated UTF-8 JSON, any value) for printing by df_pyjson_dump.
 * Duplicate keys are refused (Python would keep the last value at the first key's place,
 * which jansson cannot represent). Returns a new reference, or NULL with err set to
 * "<what>: <jansson's message> at line L column C". */
json_t *df_pyjson_parse(const char *text, const char *what, char *err, size_t errlen);

/* Append v to b as Python's json.dumps(v, ensure_ascii=False, separators, sort_keys) prints
 * it (source: CPython Lib/json/encoder.py): strings keep non-ASCII characters, escape `"` `\`
 * \n \r \t \b \f and other code points below U+0020 as \u00XX (lower-case hex); integers in
 * decimal; reals as Python's repr(float) (shortest round-trip digits, exponent form when the
 * decimal exponent is < -4 or >= 16, ".0" on integral values); true/false/null.
 * Returns 0, or -1 on out of memory (b keeps what was appended). Borrows v. */
int df_pyjson_dump(df_tok_buf *b, const json_t *v, df_pyjson_style style);

#endif
