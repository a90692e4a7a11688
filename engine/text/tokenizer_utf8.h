/* engine/text/tokenizer_utf8.h — UTF-8 scanning, U+FFFD repair and code points. Private to
 * engine/text/.
 *
 * Owns: the declarations of engine/text/tokenizer_utf8.c: the UTF-8 scanner (one place that
 * knows which byte sequences are well-formed), lossy repair into a byte buffer, and the
 * code-point helpers the tokenizer's stages share. Does not own: the public UTF-8 helpers
 * df_tok_utf8_sanitize / df_tok_utf8_nfc (engine/text/tokenizer.h) or anything that knows
 * df_tok.
 */
#ifndef DF_ENGINE_TOKENIZER_UTF8_H
#define DF_ENGINE_TOKENIZER_UTF8_H

#include "engine/text/tokenizer_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Examine the UTF-8 sequence starting at s[0] (n >= 1 bytes available).
 *   > 0 : a well-formed character of that many bytes (1..4); *cp gets its code point.
 *   == 0: ill-formed; *bad gets the length (1..3) of its maximal subpart, which one U+FFFD
 *         replaces (Unicode §3.9 "U+FFFD substitution of maximal subparts").
 *   < 0 : s[0..n) is a proper prefix of a well-formed character (more bytes are needed). */
int df_tok__utf8_seq(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);

/* True when all of s[0..n) is well-formed UTF-8. */
bool df_tok__utf8_valid(const uint8_t *s, size_t n);

/* Offset of the first byte of s[n] that does not start a well-formed character, or n. */
size_t df_tok__utf8_invalid_at(const uint8_t *s, size_t n);

/* Append s[0..n) to b with ill-formed subparts replaced by U+FFFD. If `hold_tail` is true, a
 * trailing proper prefix of a character is not consumed: the number of bytes consumed is
 * returned in *used (== n when hold_tail is false). Returns 0 or -1 (OOM). */
int df_tok__utf8_lossy_append(df_tok_buf *b, const uint8_t *s, size_t n, bool hold_tail,
                              size_t *used);

/* Write the UTF-8 of code point cp (< 0x110000) to o[0..4); returns its length, 1..4. */
size_t df_tok__cp_to_utf8(uint32_t cp, char *o);

/* The code point of the character at s[i] of s[0..n) (i < n), its length in bytes in *clen.
 * Meant for valid UTF-8: an ill-formed or cut-off sequence reads as U+FFFD of length 1. */
uint32_t df_tok__cp_at(const char *s, size_t n, size_t i, size_t *clen);

/* The code point of the character of valid UTF-8 that ends at s[end] (exclusive; end > 0);
 * the offset of its first byte in *start. */
uint32_t df_tok__cp_before(const char *s, size_t end, size_t *start);

/* Unicode White_Space (Rust char::is_whitespace). */
bool df_tok__cp_is_ws(uint32_t c);
/* General category Nd, Nl or No (the Digits pre-tokenizer's digits). */
bool df_tok__cp_is_numeric(uint32_t c);
/* General category L* or N* (what a single_word added token must not touch). */
bool df_tok__cp_is_alnum(uint32_t c);

#endif
