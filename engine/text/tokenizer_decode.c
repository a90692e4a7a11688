/* engine/text/tokenizer_decode.c — ids -> text: the one-shot df_tok_decode and the streaming
 * decoder of engine/text/tokenizer.h.
 *
 * Owns: joining the decode bytes of ids (skipping special tokens on request, and ids without a
 * token), the U+FFFD repair of the result, and df_tok_stream_* (the first bytes of a character
 * are held back until it is complete). Does not own: which bytes an id decodes to (built at
 * load by engine/text/tokenizer_load.c, read through engine/text/tokenizer.c) or UTF-8 itself
 * (engine/text/tokenizer_utf8.c).
 */
#include "engine/text/tokenizer_internal.h"
#include "engine/text/tokenizer_utf8.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int df_tok_decode(const df_tok *t, const int32_t *ids, size_t n, unsigned flags, char **text,
                  size_t *len, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  df_tok_buf raw = {0}, out = {0};
  int rc = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0) {
      df_tok__seterr(err, errlen, "tokenizer: ids[%zu] = %ld is not a token id", i, (long)id);
      goto done;
    }
    /* ids without a token (a model's padding rows past the tokenizer's vocabulary) decode
     * to nothing, as the reference tokenizer's decode skips them */
    if ((size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) continue;
    if ((flags & DF_TOK_SKIP_SPECIAL) && (t->flags[id] & 2)) continue;
    if (df_tok__buf_put(&raw, t->dbytes.p + t->bytes_off[id], t->bytes_len[id]) != 0) goto oom;
  }
  if (df_tok__buf_reserve(&out, 0) != 0 ||
      df_tok__utf8_lossy_append(&out, (const uint8_t *)raw.p, raw.n, false, NULL) != 0)
    goto oom;
  *text = out.p;
  *len = out.n;
  out.p = NULL;
  rc = 0;
  goto done;
oom:
  df_tok__seterr(err, errlen, "tokenizer: out of memory");
done:
  df_tok__buf_free(&raw);
  df_tok__buf_free(&out);
  return rc;
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
  int32_t keep[DF_TOK_STREAM_KEEP_MAX]; /* specials decoded despite DF_TOK_SKIP_SPECIAL */
  size_t n_keep;
};

int df_tok_stream_keep(df_tok_stream *s, const int32_t *ids, size_t n) {
  if (n > DF_TOK_STREAM_KEEP_MAX - s->n_keep) return -1;
  memcpy(s->keep + s->n_keep, ids, n * sizeof *ids);
  s->n_keep += n;
  return 0;
}

static bool kept(const df_tok_stream *s, int32_t id) {
  for (size_t i = 0; i < s->n_keep; i++)
    if (s->keep[i] == id) return true;
  return false;
}

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
  if ((s->flags & DF_TOK_SKIP_SPECIAL) && df_tok_is_special(s->tok, id) && !kept(s, id)) blen = 0;
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
