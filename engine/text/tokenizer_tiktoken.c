/* engine/text/tokenizer_tiktoken.c — the Kimi TikTokenTokenizer format: tiktoken.model and the
 * specials of tokenizer_config.json, read into a df_tok.
 *
 * Owns: reading and validating tiktoken.model (one line per token: the standard base64 of its
 * bytes, one space, its rank; ranks 0, 1, 2, ... in file order; every single byte present; no
 * bytes twice), the named and reserved specials (tokenizer_config.json added_tokens_decoder;
 * 256 ids after the last rank, unnamed ones spelt <|reserved_token_N|>), the merge table that
 * makes the BPE of engine/text/tokenizer_bpe.c tiktoken's rank merging, and the Kimi K2/K3
 * pre-split pattern. Does not own: the rest of loading (the added-token sets, decode bytes,
 * bos/eos: engine/text/tokenizer_load.c), the input slicing guards
 * (engine/text/tokenizer_encode.c), or BPE itself (engine/text/tokenizer_bpe.c).
 *
 * Tokens are stored in the byte-level form of tokenizer.json (GPT-2 bytes_to_unicode: byte
 * 0x20 is "Ġ"), as Hugging Face's conversion of a tiktoken file writes them, so that
 * df_tok_token_to_id, df_tok_id_to_piece and the decode table work unchanged.
 *
 * tiktoken's BPE: a piece that is a token is that token; otherwise the adjacent pair whose
 * concatenation has the lowest rank is merged (leftmost among equal ranks) until no adjacent
 * concatenation is a token. The merge table is therefore every split of every token into two
 * tokens, (left id, right id) -> (rank = id of the whole, id), and the heap merge of
 * tokenizer_bpe.c (lowest rank first, leftmost on ties) with the whole-word lookup first
 * (ignore_merges) gives exactly tiktoken's ids.
 */
#include "engine/text/tokenizer_tiktoken.h"
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_pretok.h"
#include "engine/text/tokenizer_utf8.h"

#include <errno.h>
#include <mbedtls/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TT_MAX_RANK (1 << 24)   /* ranks at or above are refused (hostile allocation) */
#define TT_N_RESERVED 256       /* special ids after the last rank (the published config) */
#define TT_MAX_LINE_BYTES 4096  /* base64 of one token */

/* tokenization_kimi.py's pat_str (Kimi K2 / K3). PCRE2 has no `&&` class intersection; each
 * `[X&&[^\p{Han}]]` is written as its complement's complement: every code point has exactly
 * one general category (L = Lu Ll Lt Lm Lo, M, N, P, S, Z, C), so
 *   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]  =  [^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}]
 *   [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]        =  [^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}]
 * (exact, and one class per character: a `(?:(?!\p{Han})[...])*` lookahead group costs a JIT
 * stack frame per character and overflows PCRE2's default JIT stack on a 25,000-letter word).
 * \p{Han} is the Script property, \p{sc:Han}: PCRE2's bare script name means
 * Script_Extensions (U+3001 "、" would be Han), tiktoken's Rust regex and Python's `regex` mean
 * Script. \s / \S are rewritten to White_Space by df_tok__add_regex_step.
 * Unicode version: the reference's tables are Unicode 16.0, the system PCRE2's older (10.42:
 * Unicode 14); the step matches with stand-ins for the code points whose classes differ
 * (engine/text/unicode_kimi.h, made by tools/gen_unicode_kimi.py; tokenizer_pretok.c), so the
 * pattern is the same and every older code point is answered by PCRE2's own tables. */
#define TT_UPPER "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"
#define TT_LOWER "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"
#define TT_CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
static const char k_kimi_pat[] =
    "[\\p{sc:Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?" TT_UPPER "*" TT_LOWER "+" TT_CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?" TT_UPPER "+" TT_LOWER "*" TT_CONTR
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

const char *df_tok__kimi_pattern(void) { return k_kimi_pat; }

static bool b64_char(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

/* Strict standard base64: a multiple of 4 characters of the alphabet, '=' only as the last one
 * or two. */
static bool b64_strict(const char *s, size_t n) {
  if (n == 0 || n % 4 != 0) return false;
  size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
  for (size_t i = 0; i < n - pad; i++)
    if (!b64_char((unsigned char)s[i])) return false;
  return true;
}

/* Byte-level form of raw bytes (each byte one character of bytes_to_unicode, 1-2 bytes). */
/* The first bytes of s[n] for a message: at most 40, bytes outside printable ASCII as \xNN
 * (a BOM, a tab or a CR in a line is then visible). */
static const char *show(const char *s, size_t n, char out[200]) {
  size_t k = 0;
  for (size_t i = 0; i < n && i < 40; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[k++] = (char)c;
    else k += (size_t)snprintf(out + k, 5, "\\x%02X", c);
  }
  if (n > 40) out[k++] = '.', out[k++] = '.', out[k++] = '.';
  out[k] = 0;
  return out;
}

static size_t to_bytelevel(const uint8_t *b, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += df_tok__cp_to_utf8(df_tok__byte_cp[b[i]], out + k);
  return k;
}


/* The lines of tiktoken.model: sizes the id table, enters every token. */
static int load_ranks(load_ctx *L, const char *text, size_t len) {
  df_tok *t = L->t;
  size_t n_lines = 0;
  for (size_t i = 0; i < len; i++)
    if (text[i] == '\n') n_lines++;
  if (len > 0 && text[len - 1] != '\n') n_lines++;
  if (n_lines == 0) {
    LERR(L, "no tokens (expected one line per token: base64 of its bytes, a space, its rank)");
    return -1;
  }
  if (n_lines >= TT_MAX_RANK) {
    LERR(L, "%zu lines: more than %d tokens", n_lines, TT_MAX_RANK - 1);
    return -1;
  }
  t->n_ids = n_lines + TT_N_RESERVED;
  t->piece_off = malloc(t->n_ids * sizeof *t->piece_off);
  t->piece_len = calloc(t->n_ids, sizeof *t->piece_len);
  t->bytes_off = calloc(t->n_ids, sizeof *t->bytes_off);
  t->bytes_len = calloc(t->n_ids, sizeof *t->bytes_len);
  t->flags = calloc(t->n_ids, 1);
  t->vcap = df_tok__pow2_at_least(n_lines * 2 + 1);
  t->vslots = calloc(t->vcap, sizeof *t->vslots);
  if (!t->piece_off || !t->piece_len || !t->bytes_off || !t->bytes_len || !t->flags ||
      !t->vslots) {
    LERR(L, "out of memory for %zu ids", t->n_ids);
    return -1;
  }
  memset(t->piece_off, 0xFF, t->n_ids * sizeof *t->piece_off);
  uint8_t raw[TT_MAX_LINE_BYTES];
  char bl[2 * TT_MAX_LINE_BYTES];
  size_t pos = 0;
  for (size_t line = 1; line <= n_lines; line++) {
    const char *s = text + pos;
    const char *nl = memchr(s, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - s) : len - pos;
    pos += n + 1;
    if (n > 0 && s[n - 1] == '\r') n--; /* CRLF line ends, as Python's splitlines() reads them */
    size_t expect = line - 1;
    char shown[200];
    const char *sp = memchr(s, ' ', n);
    if (n == 0 || !sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
      LERR(L, "line %zu: expected the base64 of a token's bytes, one space, and its rank", line);
      return -1;
    }
    size_t blen = (size_t)(sp - s), rlen = n - blen - 1;
    if (blen > TT_MAX_LINE_BYTES) {
      LERR(L, "line %zu: a token of %zu base64 characters: at most %d (tokens of at most %d "
              "bytes) are read", line, blen, TT_MAX_LINE_BYTES, TT_MAX_LINE_BYTES / 4 * 3);
      return -1;
    }
    if (!b64_strict(s, blen)) {
      LERR(L, "line %zu: \"%s\": expected the token's bytes in standard base64 (A-Z a-z 0-9 "
              "+ /, '='-padded to a multiple of 4 characters)", line, show(s, blen, shown));
      return -1;
    }
    size_t rn = 0;
    uint64_t rank = 0;
    for (; rn < rlen && s[blen + 1 + rn] >= '0' && s[blen + 1 + rn] <= '9' && rn < 10; rn++)
      rank = rank * 10 + (uint64_t)(s[blen + 1 + rn] - '0');
    if (rlen == 0 || rn != rlen) {
      LERR(L, "line %zu: rank \"%s\": expected a non-negative decimal integer", line,
           show(s + blen + 1, rlen, shown));
      return -1;
    }
    if (rank < expect) {
      LERR(L, "line %zu: rank %llu is already given on line %llu (ranks run 0, 1, 2, ... one "
              "per line)", line, (unsigned long long)rank, (unsigned long long)rank + 1);
      return -1;
    }
    if (rank > expect) {
      LERR(L, "line %zu: rank %llu: expected %zu (ranks run 0, 1, 2, ... one per line; %zu "
              "is missing)", line, (unsigned long long)rank, expect, expect);
      return -1;
    }
    size_t olen = 0;
    if (mbedtls_base64_decode(raw, sizeof raw, &olen, (const unsigned char *)s, blen) != 0 ||
        olen == 0) {
      LERR(L, "line %zu: \"%.*s\": not base64 of at least one byte", line,
           (int)(blen > 40 ? 40 : blen), s);
      return -1;
    }
    size_t k = to_bytelevel(raw, olen, bl);
    int32_t dup = df_tok__vocab_find(t, bl, k);
    if (dup >= 0) {
      LERR(L, "line %zu: \"%.*s\": these bytes are already rank %d (line %d)", line,
           (int)(blen > 40 ? 40 : blen), s, (int)dup, (int)dup + 1);
      return -1;
    }
    if (df_tok__set_piece(t, (int32_t)expect, bl, k) != 0) {
      LERR(L, "out of memory");
      return -1;
    }
    df_tok__vocab_insert(t, (int32_t)expect);
  }
  for (int b = 0; b < 256; b++) {
    char u[4];
    size_t k = df_tok__cp_to_utf8(df_tok__byte_cp[b], u);
    t->byte_id[b] = df_tok__vocab_find(t, u, k);
    if (t->byte_id[b] < 0) {
      LERR(L, "no token is the single byte 0x%02X (all 256 single bytes must be tokens)", b);
      return -1;
    }
  }
  return 0;
}

/* Every split of every token into two tokens. Two passes: count, then fill. */
static int build_merges(load_ctx *L, size_t n_base) {
  df_tok *t = L->t;
  size_t count = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && df_tok__merges_alloc(t, count) != 0) {
      LERR(L, "out of memory for %zu merges", count);
      return -1;
    }
    for (size_t id = 0; id < n_base; id++) {
      const char *p = t->pieces.p + t->piece_off[id];
      size_t n = t->piece_len[id], i = 0;
      while (i < n) {
        size_t cl;
        df_tok__cp_at(p, n, i, &cl);
        i += cl;
        if (i >= n) break;
        int32_t a = df_tok__vocab_find(t, p, i), b = df_tok__vocab_find(t, p + i, n - i);
        if (a < 0 || b < 0) continue;
        if (pass == 0) count++;
        else df_tok__merge_add(t, a, b, (uint32_t)id, (int32_t)id);
      }
    }
  }
  return 0;
}

/* tokenizer_config.json: tokenizer_class and added_tokens_decoder. */
static int load_specials(load_ctx *L, const char *cfgpath, size_t n_base) {
  df_tok *t = L->t;
  load_ctx C = {t, cfgpath, L->err, L->errlen};
  struct stat cst;
  if (stat(cfgpath, &cst) != 0) {
    LERR(&C, "%s (a tiktoken.model tokenizer needs it: tokenizer_class, added_tokens_decoder)",
         strerror(errno));
    return -1;
  }
  json_t *c = df_tok__load_json(cfgpath, L->err, L->errlen);
  if (!c) return -1;
  int rc = -1;
  char **names = calloc(TT_N_RESERVED, sizeof *names);
  bool *plain = calloc(TT_N_RESERVED, sizeof *plain);
  if (!names || !plain) {
    LERR(&C, "out of memory");
    goto done;
  }
  const char *cls = json_string_value(json_object_get(c, "tokenizer_class"));
  if (!json_is_object(c) || !cls || strcmp(cls, "TikTokenTokenizer") != 0) {
    LERR(&C, "tokenizer_class: expected \"TikTokenTokenizer\" beside tiktoken.model, got %s%.40s%s",
         cls ? "\"" : "", cls ? cls : "none", cls ? "\"" : "");
    goto done;
  }
  json_t *dec = json_object_get(c, "added_tokens_decoder");
  if (dec && !json_is_object(dec)) {
    LERR(&C, "added_tokens_decoder: expected an object of id -> {\"content\": ...}");
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(dec, key, v) {
    char *end;
    errno = 0;
    long long id = strtoll(key, &end, 10);
    if (!*key || *end || errno || id < (long long)n_base ||
        id >= (long long)(n_base + TT_N_RESERVED)) {
      LERR(&C, "added_tokens_decoder[\"%.20s\"]: expected an id in [%zu, %zu) (the %d ids after "
               "tiktoken.model's %zu ranks)", key, n_base, n_base + TT_N_RESERVED, TT_N_RESERVED,
           n_base);
      goto done;
    }
    json_t *content = json_object_get(v, "content");
    if (!json_is_string(content) || json_string_length(content) == 0 ||
        !df_tok__utf8_valid((const uint8_t *)json_string_value(content),
                            json_string_length(content))) {
      LERR(&C, "added_tokens_decoder[\"%s\"].content: expected a non-empty UTF-8 string", key);
      goto done;
    }
    size_t k = (size_t)id - n_base;
    names[k] = strdup(json_string_value(content));
    if (!names[k]) {
      LERR(&C, "out of memory");
      goto done;
    }
    json_t *sp = json_object_get(v, "special");
    if (sp && !json_is_boolean(sp)) {
      LERR(&C, "added_tokens_decoder[\"%s\"].special: expected true or false", key);
      goto done;
    }
    plain[k] = !df_tok__jbool(v, "special", true);
  }
  t->added = calloc(TT_N_RESERVED, sizeof *t->added);
  if (!t->added) {
    LERR(&C, "out of memory");
    goto done;
  }
  for (size_t k = 0; k < TT_N_RESERVED; k++) {
    int32_t id = (int32_t)(n_base + k);
    char tmp[64];
    const char *s = names[k];
    if (!s) {
      snprintf(tmp, sizeof tmp, "<|reserved_token_%d|>", (int)id);
      s = tmp;
    }
    size_t n = strlen(s);
    for (size_t j = 0; j < t->n_added; j++) {
      if (t->added[j].len == n && memcmp(t->added[j].content, s, n) == 0) {
        LERR(&C, "added_tokens_decoder: \"%.60s\" is both id %d and id %d", s,
             (int)t->added[j].id, (int)id);
        goto done;
      }
    }
    added_tok *a = &t->added[t->n_added];
    a->content = strdup(s);
    if (!a->content || df_tok__set_piece(t, id, s, n) != 0) {
      free(a->content);
      a->content = NULL;
      LERR(&C, "out of memory");
      goto done;
    }
    t->n_added++;
    a->id = id;
    a->len = n;
    a->special = !plain[k];
    t->flags[id] |= 1 | (a->special ? 2 : 0);
  }
  rc = 0;
done:
  if (names)
    for (size_t k = 0; k < TT_N_RESERVED; k++) free(names[k]);
  free(names);
  free(plain);
  json_decref(c);
  return rc;
}

int df_tok__load_tiktoken(load_ctx *L, const char *model_path, const char *cfg_path) {
  df_tok *t = L->t;
  size_t len;
  char *text = df_tok__read_file(model_path, (size_t)1 << 30, &len, L->err, L->errlen);
  if (!text) return -1;
  int rc = load_ranks(L, text, len);
  free(text);
  if (rc != 0) return -1;
  size_t n_base = t->n_ids - TT_N_RESERVED;
  if (build_merges(L, n_base) != 0 || load_specials(L, cfg_path, n_base) != 0) return -1;
  if (df_tok__add_regex_step(L, k_kimi_pat, BEH_REMOVED, true, "the Kimi pre-split pattern") !=
      0)
    return -1;
  t->steps[t->n_steps - 1].kimi_unicode = true;
  t->ignore_merges = true;
  t->tiktoken_guards = true;
  return 0;
}
