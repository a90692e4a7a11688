/* engine/text/tokenizer_normalize.h — the normalizer stage's interface, for the loader and the
 * encode pipeline. Private to engine/text/tokenizer*.c.
 *
 * Owns: the declarations of engine/text/tokenizer_normalize.c. Does not own: where
 * normalization happens (engine/text/tokenizer_encode.c, engine/text/tokenizer_load.c).
 */
#ifndef DF_ENGINE_TOKENIZER_NORMALIZE_H
#define DF_ENGINE_TOKENIZER_NORMALIZE_H

#include "engine/text/tokenizer_internal.h"

/* Parse the normalizer n (null, NFC, NFD, NFKC, NFKD, or a Sequence of those) into t->norm;
 * `where` is its JSON path for messages. Returns 0, or -1 with the error in L. */
int df_tok__load_normalizer(load_ctx *L, json_t *n, const char *where);

/* Replace the contents of out with s[0..n) (valid UTF-8) passed through t's normalizers in
 * order (a copy when there are none). Returns 0, or -1 when out of memory or utf8proc fails. */
int df_tok__normalize(const df_tok *t, const char *s, size_t n, df_tok_buf *out);

#endif
