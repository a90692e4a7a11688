/* engine/text/tokenizer_utf8.c — UTF-8 well-formedness, lossy repair, NFC, and the streaming
 * decoder of engine/text/tokenizer.h.
 *
 * Owns: the one table of well-formed UTF-8 (Unicode Table 3-7), U+FFFD substitution of maximal
 * subparts, the growable byte buffer, and df_tok_stream_*. Does not own: which bytes a token
 * decodes to (engine/text/tokenizer.c builds that table at load).
 */
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void df_tok__seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

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

bool df_tok__utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    size_t bad;
    int k = df_tok__utf8_seq(s + i, n - i, &cp, &bad);
    if (k <= 0) return false;
    i += (size_t)k;
  }
  return true;
}

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

char *df_tok_utf8_sanitize(const char *s, size_t len, size_t *outlen) {
  df_tok_buf b = {0};
  if (df_tok__buf_reserve(&b, 0) != 0 ||
      df_tok__utf8_lossy_append(&b, (const uint8_t *)s, len, false, NULL) != 0) {
    df_tok__buf_free(&b);
    return NULL;
  }
  if (outlen) *outlen = b.n;
  return b.p;
}

char *df_tok_utf8_nfc(const char *s, size_t len, size_t *outlen) {
  if (len > (size_t)(SIZE_MAX / 8)) return NULL;
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (r < 0) return NULL;
  if (outlen) *outlen = (size_t)r;
  return (char *)dst;
}

/* ---- streaming decoder ---------------------------------------------------------------- */

/* Uses only the public accessors of df_tok. */
struct df_tok_stream {
  const df_tok *tok;
  unsigned flags;
  uint8_t pend[4]; /* a proper prefix of a character, at most 3 bytes */
  size_t npend;
  df_tok_buf out;  /* returned text, valid until the next call */
  df_tok_buf work; /* pending bytes + the new token's bytes */
};

int df_tok_stream_new(const df_tok *tok, unsigned flags, df_tok_stream **out, char *err,
                      size_t errlen) {
  *out = NULL;
  df_tok_stream *s = calloc(1, sizeof *s);
  if (!s || df_tok__buf_reserve(&s->out, 64) != 0) {
    free(s);
    df_tok__seterr(err, errlen, "tokenizer stream: out of memory");
    return -1;
  }
  s->out.p[0] = 0;
  s->tok = tok;
  s->flags = flags;
  *out = s;
  return 0;
}

int df_tok_stream_feed(df_tok_stream *s, int32_t id, const char **text, size_t *len, char *err,
                       size_t errlen) {
  size_t blen = 0;
  const uint8_t *bytes = df_tok_id_to_bytes(s->tok, id, &blen);
  if (!bytes && id < 0) {
    df_tok__seterr(err, errlen, "tokenizer stream: token id %ld is not a token id", (long)id);
    return -1;
  }
  /* ids without a token (a model's padding rows past the tokenizer's vocabulary) add
   * nothing, as in df_tok_decode */
  if (!bytes) blen = 0;
  if ((s->flags & DF_TOK_SKIP_SPECIAL) && df_tok_is_special(s->tok, id)) blen = 0;
  s->work.n = 0;
  s->out.n = 0;
  if (df_tok__buf_put(&s->work, s->pend, s->npend) != 0 ||
      df_tok__buf_put(&s->work, bytes, blen) != 0)
    goto oom;
  size_t used = 0;
  if (df_tok__utf8_lossy_append(&s->out, (const uint8_t *)s->work.p, s->work.n, true, &used) !=
      0)
    goto oom;
  size_t rest = s->work.n - used;
  assert(rest <= 3); /* a held tail is a proper prefix of a character */
  memcpy(s->pend, s->work.p + used, rest);
  s->npend = rest;
  *text = s->out.p;
  *len = s->out.n;
  return 0;
oom:
  df_tok__seterr(err, errlen, "tokenizer stream: out of memory");
  s->out.n = 0;
  if (s->out.p) s->out.p[0] = 0;
  return -1;
}

int df_tok_stream_flush(df_tok_stream *s, const char **text, size_t *len, char *err,
                        size_t errlen) {
  s->out.n = 0;
  if (df_tok__utf8_lossy_append(&s->out, s->pend, s->npend, false, NULL) != 0) {
    df_tok__seterr(err, errlen, "tokenizer stream: out of memory");
    return -1;
  }
  s->npend = 0;
  *text = s->out.p;
  *len = s->out.n;
  return 0;
}

size_t df_tok_stream_pending(const df_tok_stream *s) { return s->npend; }

void df_tok_stream_destroy(df_tok_stream **ps) {
  if (!ps || !*ps) return;
  df_tok__buf_free(&(*ps)->out);
  df_tok__buf_free(&(*ps)->work);
  free(*ps);
  *ps = NULL;
}
