/* engine/text/tokenizer_internal.h — private pieces shared by engine/tokenizer*.c and
 * engine/chat_template*.c. Not a public contract: nothing outside dftok includes it.
 *
 * Owns: the UTF-8 scanner (one place that knows which byte sequences are well-formed), a
 * growable byte buffer, and the error-message helper.
 */
#ifndef DF_ENGINE_TOKENIZER_INTERNAL_H
#define DF_ENGINE_TOKENIZER_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Format one line into err (when err != NULL and errlen > 0). */
void df_tok__seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Examine the UTF-8 sequence starting at s[0] (n >= 1 bytes available).
 *   > 0 : a well-formed character of that many bytes (1..4); *cp gets its code point.
 *   == 0: ill-formed; *bad gets the length (1..3) of its maximal subpart, which one U+FFFD
 *         replaces (Unicode §3.9 "U+FFFD substitution of maximal subparts").
 *   < 0 : s[0..n) is a proper prefix of a well-formed character (more bytes are needed). */
int df_tok__utf8_seq(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);

/* True when all of s[0..n) is well-formed UTF-8. */
bool df_tok__utf8_valid(const uint8_t *s, size_t n);

/* Growable byte buffer; always NUL-terminated after a successful put. */
typedef struct df_tok_buf {
  char *p;
  size_t n;   /* bytes used */
  size_t cap; /* bytes allocated */
} df_tok_buf;

int df_tok__buf_reserve(df_tok_buf *b, size_t extra); /* 0 or -1 (overflow / OOM) */
int df_tok__buf_put(df_tok_buf *b, const void *p, size_t n);
int df_tok__buf_puts(df_tok_buf *b, const char *s);
void df_tok__buf_free(df_tok_buf *b);

/* Append s[0..n) to b with ill-formed subparts replaced by U+FFFD. If `hold_tail` is true, a
 * trailing proper prefix of a character is not consumed: the number of bytes consumed is
 * returned in *used (== n when hold_tail is false). Returns 0 or -1 (OOM). */
int df_tok__utf8_lossy_append(df_tok_buf *b, const uint8_t *s, size_t n, bool hold_tail,
                              size_t *used);

#endif
