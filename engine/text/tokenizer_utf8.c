/* engine/text/tokenizer_utf8.c — UTF-8 well-formedness, lossy repair and code points.
 *
 * Owns: the one table of well-formed UTF-8 (Unicode Table 3-7), U+FFFD substitution of maximal
 * subparts, and the code-point helpers the tokenizer's stages share (UTF-8 of a code point,
 * the character at / before an offset, the White_Space, numeric and alphanumeric classes).
 * Does not own: the byte buffer (engine/text/tokenizer_util.c), the public
 * df_tok_utf8_sanitize / df_tok_utf8_nfc (engine/text/tokenizer.c), which bytes a token
 * decodes to (engine/text/tokenizer_load.c builds that table at load), or the streaming
 * decoder (engine/text/tokenizer_decode.c). Knows nothing of df_tok.
 */
#include "engine/text/tokenizer_utf8.h"

#include <string.h>
#include <utf8proc.h>

int df_tok__utf8_seq(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad) {
  uint8_t b0 = s[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int need;
  uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  uint32_t c;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F; /* no surrogates */
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  for (int i = 1; i <= need; i++) {
    if ((size_t)i >= n) return -1;
    uint8_t b = s[i];
    uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad = (size_t)i;
      return 0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return need + 1;
}

size_t df_tok__utf8_invalid_at(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    size_t bad;
    int k = df_tok__utf8_seq(s + i, n - i, &cp, &bad);
    if (k <= 0) return i;
    i += (size_t)k;
  }
  return n;
}

bool df_tok__utf8_valid(const uint8_t *s, size_t n) { return df_tok__utf8_invalid_at(s, n) == n; }

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

int df_tok__utf8_lossy_append(df_tok_buf *b, const uint8_t *s, size_t n, bool hold_tail,
                              size_t *used) {
  /* Worst case: every byte becomes U+FFFD (3 bytes). */
  if (n > (SIZE_MAX - 1) / 3 || df_tok__buf_reserve(b, 3 * n) != 0) return -1;
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && s[run] < 0x80) run++;
    if (run > i) {
      memcpy(b->p + b->n, s + i, run - i);
      b->n += run - i;
      i = run;
      if (i == n) break;
    }
    uint32_t cp;
    size_t bad = 1;
    int k = df_tok__utf8_seq(s + i, n - i, &cp, &bad);
    if (k > 0) {
      memcpy(b->p + b->n, s + i, (size_t)k);
      b->n += (size_t)k;
      i += (size_t)k;
    } else if (k == 0) {
      memcpy(b->p + b->n, k_fffd, 3);
      b->n += 3;
      i += bad;
    } else { /* incomplete at the end */
      if (hold_tail) break;
      memcpy(b->p + b->n, k_fffd, 3);
      b->n += 3;
      i = n;
    }
  }
  b->p[b->n] = 0;
  if (used) *used = i;
  return 0;
}

/* ---- code points ------------------------------------------------------------------------ */

size_t df_tok__cp_to_utf8(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

bool df_tok__cp_is_ws(uint32_t c) { /* Unicode White_Space (Rust char::is_whitespace) */
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool df_tok__cp_is_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool df_tok__cp_is_alnum(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* Decode the (valid) character at s[i] of s[0..n). */
uint32_t df_tok__cp_at(const char *s, size_t n, size_t i, size_t *clen) {
  uint32_t cp = 0;
  size_t bad;
  int k = df_tok__utf8_seq((const uint8_t *)s + i, n - i, &cp, &bad);
  if (k <= 0) {
    *clen = 1;
    return 0xFFFD;
  }
  *clen = (size_t)k;
  return cp;
}

/* Code point of the character that ends at s[end] (exclusive); start in *start. */
uint32_t df_tok__cp_before(const char *s, size_t end, size_t *start) {
  size_t i = end;
  while (i > 0 && ((uint8_t)s[i - 1] & 0xC0) == 0x80 && end - i < 3) i--;
  if (i > 0) i--;
  size_t clen;
  uint32_t c = df_tok__cp_at(s, end, i, &clen);
  *start = i;
  return c;
}
