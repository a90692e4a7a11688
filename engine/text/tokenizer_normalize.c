/* engine/text/tokenizer_normalize.c — the normalizer stage: tokenizer.json's "normalizer", and
 * applying it to text.
 *
 * Owns: parsing null / NFC / NFD / NFKC / NFKD / Sequence into df_tok.norm (its load errors
 * included), and df_tok__normalize (utf8proc, skipping text already in the form). Does not
 * own: where normalization happens (the encode pipeline, engine/text/tokenizer_encode.c;
 * added-token contents at load, engine/text/tokenizer_load.c).
 */
#include "engine/text/tokenizer_normalize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int df_tok__load_normalizer(load_ctx *L, json_t *n, const char *where) {
  df_tok *t = L->t;
  if (!n || json_is_null(n)) return 0;
  const char *type = json_string_value(json_object_get(n, "type"));
  if (!type) {
    LERR(L, "%s.type: expected a string", where);
    return -1;
  }
  if (strcmp(type, "Sequence") == 0) {
    json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list)) {
      LERR(L, "%s.normalizers: expected an array", where);
      return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
      char sub[128];
      snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
      if (df_tok__load_normalizer(L, v, sub) != 0) return -1;
    }
    return 0;
  }
  int k;
  if (strcmp(type, "NFC") == 0) k = NORM_NFC;
  else if (strcmp(type, "NFD") == 0) k = NORM_NFD;
  else if (strcmp(type, "NFKC") == 0) k = NORM_NFKC;
  else if (strcmp(type, "NFKD") == 0) k = NORM_NFKD;
  else {
    LERR(L, "%s.type: unsupported normalizer \"%.40s\" (supported: NFC, NFD, NFKC, NFKD, "
            "Sequence)", where, type);
    return -1;
  }
  if (t->n_norm >= (int)(sizeof t->norm / sizeof t->norm[0])) {
    LERR(L, "%s: too many normalizers", where);
    return -1;
  }
  t->norm[t->n_norm++] = k;
  return 0;
}

int df_tok__normalize(const df_tok *t, const char *s, size_t n, df_tok_buf *out) {
  out->n = 0;
  if (df_tok__buf_put(out, s, n) != 0) return -1;
  for (int k = 0; k < t->n_norm; k++) {
    int f = t->norm[k];
    bool ascii = true, below300 = true;
    for (size_t i = 0; i < out->n; i++) {
      uint8_t b = (uint8_t)out->p[i];
      if (b >= 0x80) ascii = false;
      if (b >= 0xCC) {
        below300 = false;
        break;
      }
    }
    if (ascii || (f == NORM_NFC && below300)) continue; /* already in that form */
    utf8proc_option_t o = UTF8PROC_STABLE;
    o |= (f == NORM_NFC || f == NORM_NFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (f == NORM_NFKC || f == NORM_NFKD) o |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    if (out->n > (size_t)INT32_MAX) return -1;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)out->p, (utf8proc_ssize_t)out->n,
                                      &dst, o);
    if (r < 0) return -1;
    out->n = 0;
    int rc = df_tok__buf_put(out, dst, (size_t)r);
    free(dst);
    if (rc != 0) return -1;
  }
  return 0;
}
