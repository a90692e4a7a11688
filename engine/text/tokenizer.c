/* engine/text/tokenizer.c — the df_tok object of engine/text/tokenizer.h: its byte-level
 * alphabet, vocabulary table, pieces and lookups, and the public UTF-8 helpers.
 *
 * Owns: GPT-2's bytes_to_unicode tables, the model.vocab hash table (piece -> id), the piece
 * store, df_tok_vocab_size / token_to_id / id_to_piece / id_to_bytes / is_added / is_special /
 * bos_id / eos_id / pad_id, and df_tok_utf8_sanitize / df_tok_utf8_nfc; the layout of df_tok
 * is in engine/text/tokenizer_internal.h. Does not own the work of the tokenizer's other
 * files, listed lowest first (each uses only those above it and this file, which uses only
 * the first two), nor chat templates (engine/text/chat_template.c):
 *   engine/text/tokenizer_util.c       errors, byte buffer, arrays, hashing
 *   engine/text/tokenizer_utf8.c       UTF-8 scanning and repair, code points
 *   engine/text/tokenizer_normalize.c  the normalizer: its tokenizer.json section, applying it
 *   engine/text/tokenizer_pretok.c     the pre-tokenizer: its tokenizer.json section, splitting
 *   engine/text/tokenizer_bpe.c        model.merges, the merge table, BPE of a word, word cache
 *   engine/text/tokenizer_decode.c     df_tok_decode and the streaming decoder
 *   engine/text/tokenizer_load.c       df_tok_load / df_tok_destroy: the rest of tokenizer.json
 *                                      and tokenizer_config.json
 *   engine/text/tokenizer_encode.c     df_tok_encode / df_tok_encode_spans: the pipeline
 */
#include "engine/text/tokenizer_internal.h"
#include "engine/text/tokenizer_utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- byte-level alphabet (GPT-2 bytes_to_unicode) --------------------------------------- */

uint32_t df_tok__byte_cp[256];
int16_t df_tok__cp_byte[324]; /* code point -> byte, -1 when not in the alphabet */
static pthread_once_t g_alpha_once = PTHREAD_ONCE_INIT;

static void alpha_init(void) {
  int n = 0;
  for (int i = 0; i < 324; i++) df_tok__cp_byte[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    df_tok__byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    df_tok__cp_byte[df_tok__byte_cp[b]] = (int16_t)b;
  }
}

void df_tok__alphabet_init(void) { pthread_once(&g_alpha_once, alpha_init); }

/* ---- vocab table and pieces ------------------------------------------------------------- */

int32_t df_tok__vocab_find(const df_tok *t, const char *s, size_t n) {
  if (!t->vcap) return -1;
  size_t mask = t->vcap - 1, i = (size_t)df_tok__hash_bytes(s, n) & mask;
  for (;;) {
    uint32_t v = t->vslots[i];
    if (!v) return -1;
    int32_t id = (int32_t)(v - 1);
    if (t->piece_len[id] == n && memcmp(t->pieces.p + t->piece_off[id], s, n) == 0) return id;
    i = (i + 1) & mask;
  }
}

void df_tok__vocab_insert(df_tok *t, int32_t id) {
  size_t mask = t->vcap - 1;
  size_t i = (size_t)df_tok__hash_bytes(t->pieces.p + t->piece_off[id], t->piece_len[id]) & mask;
  while (t->vslots[i]) i = (i + 1) & mask;
  t->vslots[i] = (uint32_t)id + 1;
}

size_t df_tok__pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

/* Append a piece (NUL-terminated) to t->pieces and assign it to id. */
int df_tok__set_piece(df_tok *t, int32_t id, const char *s, size_t n) {
  if (t->pieces.n > UINT32_MAX - n - 2) return -1;
  uint32_t off = (uint32_t)t->pieces.n;
  if (df_tok__buf_put(&t->pieces, s, n) != 0 || df_tok__buf_put(&t->pieces, "", 1) != 0) return -1;
  t->piece_off[id] = off;
  t->piece_len[id] = (uint32_t)n;
  return 0;
}

/* ---- lookups ---------------------------------------------------------------------------- */

size_t df_tok_vocab_size(const df_tok *t) { return t->n_ids; }

int32_t df_tok_token_to_id(const df_tok *t, const char *piece, size_t len) {
  for (size_t i = 0; i < t->n_added; i++) {
    int32_t id = t->added[i].id;
    if (t->piece_len[id] == len && memcmp(t->pieces.p + t->piece_off[id], piece, len) == 0)
      return id;
  }
  return df_tok__vocab_find(t, piece, len);
}

const char *df_tok_id_to_piece(const df_tok *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) return NULL;
  if (len) *len = t->piece_len[id];
  return t->pieces.p + t->piece_off[id];
}

const uint8_t *df_tok_id_to_bytes(const df_tok *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) return NULL;
  if (len) *len = t->bytes_len[id];
  return (const uint8_t *)t->dbytes.p + t->bytes_off[id];
}

bool df_tok_is_added(const df_tok *t, int32_t id) {
  return id >= 0 && (size_t)id < t->n_ids && (t->flags[id] & 1);
}

bool df_tok_is_special(const df_tok *t, int32_t id) {
  return id >= 0 && (size_t)id < t->n_ids && (t->flags[id] & 2);
}

size_t df_tok_special_ids(const df_tok *t, const char *const *spellings, int32_t *ids,
                          size_t max) {
  size_t n = 0;
  for (; *spellings && n < max; spellings++) {
    int32_t id = df_tok_token_to_id(t, *spellings, strlen(*spellings));
    if (df_tok_is_special(t, id)) ids[n++] = id;
  }
  return n;
}

int32_t df_tok_bos_id(const df_tok *t) { return t->bos_id; }
int32_t df_tok_eos_id(const df_tok *t) { return t->eos_id; }
int32_t df_tok_pad_id(const df_tok *t) { return t->pad_id; }

/* ---- UTF-8 helpers shared with the chat template and the tools -------------------------- */

size_t df_tok_utf8_invalid_at(const char *s, size_t len) {
  return df_tok__utf8_invalid_at((const uint8_t *)s, len);
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
