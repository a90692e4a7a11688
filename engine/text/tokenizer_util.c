/* engine/text/tokenizer_util.c — the lowest floor of dftok: the one-line error helper, the
 * growable byte buffer, growable arrays and byte hashing.
 *
 * Owns: df_tok__seterr, df_tok__buf_*, df_tok__grow and df_tok__hash_bytes
 * (engine/text/tokenizer_util.h). Does not own: UTF-8 (engine/text/tokenizer_utf8.c) or
 * anything that knows df_tok; calls nothing else in dftok.
 */
#include "engine/text/tokenizer_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_tok__seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- byte buffer ------------------------------------------------------------------------ */

int df_tok__buf_reserve(df_tok_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->n - 1) return -1;
  size_t want = b->n + extra + 1;
  if (want <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < want) {
    if (cap > SIZE_MAX / 2) {
      cap = want;
      break;
    }
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int df_tok__buf_put(df_tok_buf *b, const void *p, size_t n) {
  if (df_tok__buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

int df_tok__buf_puts(df_tok_buf *b, const char *s) { return df_tok__buf_put(b, s, strlen(s)); }

void df_tok__buf_free(df_tok_buf *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}

/* ---- arrays ----------------------------------------------------------------------------- */

int df_tok__grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) {
    if (c > SIZE_MAX / 2 / elem) return -1;
    c *= 2;
  }
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- hashing ---------------------------------------------------------------------------- */

uint64_t df_tok__hash_bytes(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}
