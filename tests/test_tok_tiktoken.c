/* tests/test_tok_tiktoken.c — the Kimi TikTokenTokenizer format (tiktoken.model +
 * tokenizer_config.json) through the public API of engine/text/tokenizer.h.
 *
 * Covers: the ids of tests/tokenizer/tiktoken_oracle.py (an independent Python implementation:
 * the `regex` module's `&&` intersections, tiktoken's merge loop, tokenization_kimi.py's guards)
 * on its stress set, with specials allowed and as plain text, and on long inputs where the
 * guards change the ids; decode and streaming decode giving the text back; the specials
 * (named, unnamed reserved, "special": false), bos/eos/pad, decode flags; and every malformed
 * tiktoken.model / tokenizer_config.json with its exact one-line error.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/text/tokenizer.h"

#define TINY DF_SOURCE_DIR "/tests/tokenizer/tiktoken_tiny"

static char g_tmp[512];

static df_tok *load_tiny(void) {
  df_tok *t = NULL;
  char err[1024];
  if (df_tok_load(TINY, &t, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
  assert_non_null(t);
  return t;
}

static json_t *goldens(void) {
  json_error_t je;
  json_t *g = json_load_file(TINY "/goldens.json", JSON_ALLOW_NUL, &je);
  if (!g) fprintf(stderr, "goldens.json: %s\n", je.text);
  assert_non_null(g);
  return g;
}

static bool same_ids(const int32_t *ids, size_t n, json_t *want) {
  if (json_array_size(want) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (json_integer_value(json_array_get(want, i)) != ids[i]) return false;
  return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n, json_t *want) {
  fprintf(stderr, "%s: got", what);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
  fprintf(stderr, "; want");
  for (size_t i = 0; i < json_array_size(want); i++)
    fprintf(stderr, " %d", (int)json_integer_value(json_array_get(want, i)));
  fprintf(stderr, "\n");
}

static size_t unhex(const char *h, char *out) {
  size_t n = 0;
  for (; h[0] && h[1]; h += 2) {
    unsigned v;
    sscanf(h, "%2x", &v);
    out[n++] = (char)v;
  }
  return n;
}

static void check_decode(const df_tok *t, const int32_t *ids, size_t n, const char *want,
                         size_t wn) {
  char err[512], *out = NULL;
  size_t len = 0;
  assert_int_equal(df_tok_decode(t, ids, n, 0, &out, &len, err, sizeof err), 0);
  assert_int_equal(len, wn);
  assert_memory_equal(out, want, wn);
  free(out);
  df_tok_stream *s = NULL;
  assert_int_equal(df_tok_stream_new(t, 0, &s, err, sizeof err), 0);
  char *acc = malloc(wn + 16);
  size_t an = 0;
  for (size_t i = 0; i < n; i++) {
    const char *p;
    size_t pl;
    assert_int_equal(df_tok_stream_feed(s, ids[i], &p, &pl, err, sizeof err), 0);
    assert_true(an + pl <= wn);
    memcpy(acc + an, p, pl);
    an += pl;
  }
  const char *p;
  size_t pl;
  assert_int_equal(df_tok_stream_flush(s, &p, &pl, err, sizeof err), 0);
  assert_true(an + pl <= wn);
  memcpy(acc + an, p, pl);
  an += pl;
  assert_int_equal(an, wn);
  assert_memory_equal(acc, want, wn);
  free(acc);
  df_tok_stream_destroy(&s);
}

/* Every stress case: ids with specials allowed (flags 0) and as plain text (DF_TOK_PLAIN),
 * then decode / stream back to the text (invalid input: its U+FFFD repair). */
static void test_oracle_cases(void **state) {
  (void)state;
  df_tok *t = load_tiny();
  json_t *g = goldens(), *cases = json_object_get(g, "cases");
  assert_true(json_array_size(cases) >= 80);
  size_t i, bad = 0;
  json_t *c;
  json_array_foreach(cases, i, c) {
    char buf[4096];
    size_t n;
    json_t *tx = json_object_get(c, "text");
    if (tx) {
      n = json_string_length(tx);
      memcpy(buf, json_string_value(tx), n);
    } else {
      n = unhex(json_string_value(json_object_get(c, "hex")), buf);
    }
    static const char *keys[2] = {"ids", "plain"};
    for (int k = 0; k < 2; k++) {
      int32_t *ids = NULL;
      size_t m = 0;
      char err[512];
      assert_int_equal(df_tok_encode(t, buf, n, k ? DF_TOK_PLAIN : 0, &ids, &m, err, sizeof err),
                       0);
      json_t *want = json_object_get(c, keys[k]);
      if (!same_ids(ids, m, want)) {
        char what[128];
        snprintf(what, sizeof what, "case %zu (%s) \"%.40s\"", i, keys[k], tx ? buf : "(hex)");
        print_ids(what, ids, m, want);
        bad++;
      } else {
        size_t cl;
        char *clean = df_tok_utf8_sanitize(buf, n, &cl);
        check_decode(t, ids, m, clean, cl);
        free(clean);
      }
      free(ids);
    }
  }
  json_decref(g);
  df_tok_destroy(&t);
  assert_int_equal(bad, 0);
}

static uint64_t fnv64(const int32_t *ids, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < 4; b++) {
      h ^= ((uint32_t)ids[i] >> (8 * b)) & 0xFF;
      h *= 0x100000001b3ULL;
    }
  return h;
}

/* Long inputs: the 400,000-character slices and the 25,000-character runs cut as the
 * reference cuts them (the oracle records where that changes the ids). */
static void test_oracle_long(void **state) {
  (void)state;
  df_tok *t = load_tiny();
  json_t *g = goldens(), *longs = json_object_get(g, "long");
  assert_int_equal(json_array_size(longs), 6);
  size_t i, changed = 0;
  json_t *c;
  json_array_foreach(longs, i, c) {
    const char *rep = json_string_value(json_object_get(c, "repeat"));
    const char *suf = json_string_value(json_object_get(c, "suffix"));
    size_t times = (size_t)json_integer_value(json_object_get(c, "times"));
    size_t rl = strlen(rep), sl = strlen(suf), n = rl * times + sl;
    char *text = malloc(n + 1);
    for (size_t k = 0; k < times; k++) memcpy(text + k * rl, rep, rl);
    memcpy(text + rl * times, suf, sl);
    int32_t *ids = NULL;
    size_t m = 0;
    char err[512], hex[32];
    int rc = df_tok_encode(t, text, n, 0, &ids, &m, err, sizeof err);
    if (rc != 0) fprintf(stderr, "long case %zu: %s\n", i, err);
    assert_int_equal(rc, 0);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv64(ids, m));
    json_t *head = json_object_get(c, "head"), *tail = json_object_get(c, "tail");
    size_t nh = json_array_size(head), nt = json_array_size(tail);
    bool ok = m == (size_t)json_integer_value(json_object_get(c, "n")) && m >= nh && m >= nt &&
              strcmp(hex, json_string_value(json_object_get(c, "fnv64"))) == 0 &&
              same_ids(ids, nh, head) && same_ids(ids + m - nt, nt, tail);
    if (!ok)
      fprintf(stderr, "long case %zu (\"%s\" x %zu): %zu ids, fnv64 %s; want %lld, %s\n", i, rep,
              times, m, hex, (long long)json_integer_value(json_object_get(c, "n")),
              json_string_value(json_object_get(c, "fnv64")));
    assert_true(ok);
    if (json_is_true(json_object_get(c, "guard_changes_ids"))) changed++;
    check_decode(t, ids, m, text, n);
    free(ids);
    free(text);
  }
  assert_true(changed >= 3); /* the set really exercises both guards */
  json_decref(g);
  df_tok_destroy(&t);
}

static int32_t tok_id(const df_tok *t, const char *s) { return df_tok_token_to_id(t, s, strlen(s)); }

static void test_specials(void **state) {
  (void)state;
  df_tok *t = load_tiny();
  json_t *g = goldens();
  int32_t nb = (int32_t)json_integer_value(json_object_get(g, "n_base"));
  json_decref(g);
  assert_int_equal(nb, 885);
  assert_int_equal(df_tok_vocab_size(t), (size_t)nb + 256);
  assert_int_equal(tok_id(t, "[BOS]"), nb);
  assert_int_equal(tok_id(t, "<|end_of_msg|>"), nb + 2);
  assert_int_equal(tok_id(t, "<|open|>"), nb + 3);
  assert_int_equal(tok_id(t, "[PAD]"), nb + 255);
  /* unnamed reserved ids are spelt with their absolute id */
  char name[64];
  snprintf(name, sizeof name, "<|reserved_token_%d|>", nb + 8);
  assert_int_equal(tok_id(t, name), nb + 8);
  size_t pl;
  assert_string_equal(df_tok_id_to_piece(t, nb + 100, &pl), "<|reserved_token_985|>");
  assert_int_equal(tok_id(t, "<|reserved_token_1|>"), -1);
  assert_int_equal(df_tok_bos_id(t), nb);
  assert_int_equal(df_tok_eos_id(t), nb + 2);
  assert_int_equal(df_tok_pad_id(t), nb + 255);
  assert_true(df_tok_is_added(t, nb + 3) && !df_tok_is_special(t, nb + 3));
  assert_true(df_tok_is_added(t, nb) && df_tok_is_special(t, nb));
  assert_true(df_tok_is_special(t, nb + 8));
  assert_false(df_tok_is_added(t, 300));
  /* ordinary tokens in tokenizer.json's byte-level form; raw bytes for decoding */
  int32_t dl = tok_id(t, "\xc4\xa0" "Deltafin"); /* "ĠDeltafin" */
  assert_int_equal(dl, 880);
  const uint8_t *b = df_tok_id_to_bytes(t, dl, &pl);
  assert_int_equal(pl, 9);
  assert_memory_equal(b, " Deltafin", 9);
  b = df_tok_id_to_bytes(t, 0, &pl); /* rank 0 is byte 13 (the oracle permutes the bytes) */
  assert_int_equal(pl, 1);
  assert_int_equal(b[0], 13);
  /* no BOS in plain encode, nor with ADD_SPECIAL (the config has no add_bos_token) */
  int32_t *ids;
  size_t n;
  char err[256], *out;
  assert_int_equal(df_tok_encode(t, "[BOS]x", 6, DF_TOK_ADD_SPECIAL, &ids, &n, err, sizeof err),
                   0);
  assert_true(n == 2 && ids[0] == nb);
  free(ids);
  /* skip_special drops [BOS] but not the "special": false <|open|> */
  const int32_t seq[] = {nb, 880, nb + 3, nb + 8};
  assert_int_equal(df_tok_decode(t, seq, 4, DF_TOK_SKIP_SPECIAL, &out, &n, err, sizeof err), 0);
  assert_string_equal(out, " Deltafin<|open|>");
  free(out);
  assert_int_equal(df_tok_decode(t, seq, 4, 0, &out, &n, err, sizeof err), 0);
  snprintf(name, sizeof name, "[BOS] Deltafin<|open|><|reserved_token_%d|>", nb + 8);
  assert_string_equal(out, name);
  free(out);
  /* loading the tiktoken.model file itself finds the config beside it */
  df_tok *t2 = NULL;
  assert_int_equal(df_tok_load(TINY "/tiktoken.model", &t2, err, sizeof err), 0);
  assert_int_equal(df_tok_eos_id(t2), nb + 2);
  df_tok_destroy(&t2);
  df_tok_destroy(&t);
}

/* The loader spells each `[X&&[^\p{Han}]]` of the published pattern as one negated class;
 * check with PCRE2's own tables, on every code point, that it is the lookahead form
 * `(?:(?!\p{sc:Han})[X])` (and that Script, not Script_Extensions, is what is excluded: U+3006 stays). */
static void test_pattern_classes(void **state) {
  (void)state;
  static const char *pairs[2][2] = {
      {"(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])",
       "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"},
      {"(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])",
       "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"},
  };
  pcre2_match_data *md = pcre2_match_data_create(2, NULL);
  for (int k = 0; k < 2; k++) {
    pcre2_code *re[2];
    for (int j = 0; j < 2; j++) {
      int ec;
      PCRE2_SIZE eo;
      re[j] = pcre2_compile((PCRE2_SPTR)pairs[k][j], PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
      assert_non_null(re[j]);
    }
    size_t in = 0, diff = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      char u[4];
      size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      if (n == 1) u[0] = (char)cp;
      else if (n == 2) u[0] = (char)(0xC0 | (cp >> 6));
      else if (n == 3) u[0] = (char)(0xE0 | (cp >> 12));
      else u[0] = (char)(0xF0 | (cp >> 18));
      for (size_t i = 1; i < n; i++) u[i] = (char)(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
      bool a = pcre2_match(re[0], (PCRE2_SPTR)u, n, 0, 0, md, NULL) > 0;
      bool b = pcre2_match(re[1], (PCRE2_SPTR)u, n, 0, 0, md, NULL) > 0;
      in += a;
      diff += a != b;
    }
    assert_int_equal(diff, 0);
    assert_true(in > 30000); /* non-Han letters and marks: tens of thousands */
    /* U+3006 〆: Script Common, Script_Extensions Han: a letter of these classes */
    assert_true(pcre2_match(re[1], (PCRE2_SPTR) "\xe3\x80\x86", 3, 0, 0, md, NULL) > 0);
    assert_true(pcre2_match(re[1], (PCRE2_SPTR) "\xe4\xb8\xad", 3, 0, 0, md, NULL) < 0); /* 中 */
    assert_true(pcre2_match(re[1], (PCRE2_SPTR) "\xe3\x81\xaf", 3, 0, 0, md, NULL) > 0); /* は */
    pcre2_code_free(re[0]);
    pcre2_code_free(re[1]);
  }
  pcre2_match_data_free(md);
}

/* ---- malformed files ------------------------------------------------------------------ */

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_byte(uint8_t b, char out[5]) {
  out[0] = k_b64[b >> 2];
  out[1] = k_b64[(b & 3) << 4];
  out[2] = out[3] = '=';
  out[4] = 0;
}

static const char k_cfg[] =
    "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": {\"258\": "
    "{\"content\": \"[BOS]\", \"special\": true}}, \"bos_token\": \"[BOS]\"}";

/* Write DIR/NAME with a tiktoken.model of the 256 bytes (ranks in byte order) + "ab" (rank
 * 256) + "abc" (257), with line `line` (1-based) replaced by `repl` (NULL: none), then
 * `extra` appended; and tokenizer_config.json (cfg). Returns the folder. */
static const char *make_tt(const char *name, int line, const char *repl, const char *extra,
                           const char *cfg) {
  static char dir[700];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  mkdir(dir, 0755);
  char path[800];
  snprintf(path, sizeof path, "%s/tiktoken.model", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int r = 0; r < 258; r++) {
    if (r + 1 == line) {
      if (repl) fprintf(f, "%s\n", repl);
      continue;
    }
    char b[5];
    if (r < 256) {
      b64_byte((uint8_t)r, b);
      fprintf(f, "%s %d\n", b, r);
    } else {
      fprintf(f, "%s %d\n", r == 256 ? "YWI=" : "YWJj", r);
    }
  }
  fputs(extra, f);
  fclose(f);
  if (cfg) {
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(cfg, f);
    fclose(f);
  }
  return dir;
}

static void expect_error(const char *dir, const char *file, const char *want) {
  df_tok *t = NULL;
  char err[1024] = "", full[1400];
  snprintf(full, sizeof full, "%s/%s: %s", dir, file, want);
  int rc = df_tok_load(dir, &t, err, sizeof err);
  if (rc == 0 || strcmp(err, full) != 0)
    fprintf(stderr, "load(%s): rc %d\n  got  \"%s\"\n  want \"%s\"\n", dir, rc, err, full);
  assert_int_equal(rc, -1);
  assert_null(t);
  assert_string_equal(err, full);
}

static void test_malformed(void **state) {
  (void)state;
  /* the unaltered file loads, and BPE merges through "ab" to "abc" */
  df_tok *t = NULL;
  char err[1024];
  assert_int_equal(df_tok_load(make_tt("ok", 0, NULL, "", k_cfg), &t, err, sizeof err), 0);
  int32_t *ids;
  size_t n;
  assert_int_equal(df_tok_encode(t, "abcab", 5, 0, &ids, &n, err, sizeof err), 0);
  assert_true(n == 2 && ids[0] == 257 && ids[1] == 256);
  free(ids);
  assert_int_equal(df_tok_bos_id(t), 258);
  assert_int_equal(df_tok_vocab_size(t), 258 + 256);
  df_tok_destroy(&t);

  const char *B64 = "the token's bytes in standard base64 (A-Z a-z 0-9 + /, '='-padded to a "
                    "multiple of 4 characters)";
  char want[512];
  snprintf(want, sizeof want, "line 66: \"QQ=x\": expected %s", B64);
  expect_error(make_tt("b64_char", 66, "QQ=x 65", "", k_cfg), "tiktoken.model", want);
  snprintf(want, sizeof want, "line 66: \"QQ\": expected %s", B64);
  expect_error(make_tt("b64_pad", 66, "QQ 65", "", k_cfg), "tiktoken.model", want);
  snprintf(want, sizeof want, "line 1: \"A*==\": expected %s", B64);
  expect_error(make_tt("b64_star", 1, "A*== 0", "", k_cfg), "tiktoken.model", want);
  expect_error(make_tt("rank_text", 66, "QQ== 6x5", "", k_cfg), "tiktoken.model",
               "line 66: rank \"6x5\": expected a non-negative decimal integer");
  expect_error(make_tt("rank_neg", 66, "QQ== -65", "", k_cfg), "tiktoken.model",
               "line 66: rank \"-65\": expected a non-negative decimal integer");
  expect_error(make_tt("rank_empty", 66, "QQ== ", "", k_cfg), "tiktoken.model",
               "line 66: rank \"\": expected a non-negative decimal integer");
  expect_error(make_tt("gap", 66, "QQ== 66", "", k_cfg), "tiktoken.model",
               "line 66: rank 66: expected 65 (ranks run 0, 1, 2, ... one per line; 65 is "
               "missing)");
  expect_error(make_tt("dup_rank", 66, "QQ== 64", "", k_cfg), "tiktoken.model",
               "line 66: rank 64 is already given on line 65 (ranks run 0, 1, 2, ... one per "
               "line)");
  expect_error(make_tt("dup_bytes", 0, NULL, "QQ== 258\n", k_cfg), "tiktoken.model",
               "line 259: \"QQ==\": these bytes are already rank 65 (line 66)");
  expect_error(make_tt("no_space", 66, "QQ==65", "", k_cfg), "tiktoken.model",
               "line 66: expected the base64 of a token's bytes, one space, and its rank");
  expect_error(make_tt("two_spaces", 66, "QQ==  65", "", k_cfg), "tiktoken.model",
               "line 66: expected the base64 of a token's bytes, one space, and its rank");
  expect_error(make_tt("blank", 0, NULL, "\nYWJjZA== 258\n", k_cfg), "tiktoken.model",
               "line 259: expected the base64 of a token's bytes, one space, and its rank");
  /* byte 0x41 ("A", line 66) replaced by another token: ranks stay contiguous */
  expect_error(make_tt("no_byte", 66, "YWJjZA== 65", "", k_cfg), "tiktoken.model",
               "no token is the single byte 0x41 (all 256 single bytes must be tokens)");
  {
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/zero", g_tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "wb");
    fclose(f);
    expect_error(dir, "tiktoken.model",
                 "no tokens (expected one line per token: base64 of its bytes, a space, its "
                 "rank)");
  }
  /* a token longer than the reader takes is named as such; CRLF line ends are read as Python's
   * splitlines() reads them; a byte-order mark is shown */
  {
    static char longl[5000];
    memset(longl, 'A', 4100);
    strcpy(longl + 4100, " 258\n");
    expect_error(make_tt("long", 0, NULL, longl, k_cfg), "tiktoken.model",
                 "line 259: a token of 4100 base64 characters: at most 4096 (tokens of at most "
                 "3072 bytes) are read");
  }
  expect_error(make_tt("bom", 1, "\xef\xbb\xbf" "AA== 0", "", k_cfg), "tiktoken.model",
               "line 1: \"\\xEF\\xBB\\xBFAA==\": expected the token's bytes in standard base64 "
               "(A-Z a-z 0-9 + /, '='-padded to a multiple of 4 characters)");
  {
    char dir[700], path[800], p2[800];
    const char *ok = make_tt("crlf_src", 0, NULL, "", k_cfg);
    snprintf(dir, sizeof dir, "%s/crlf", g_tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", ok);
    snprintf(p2, sizeof p2, "%s/tiktoken.model", dir);
    FILE *in = fopen(path, "rb"), *out = fopen(p2, "wb");
    int ch;
    while ((ch = fgetc(in)) != EOF) {
      if (ch == '\n') fputc('\r', out);
      fputc(ch, out);
    }
    fclose(in);
    fclose(out);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", ok);
    snprintf(p2, sizeof p2, "%s/tokenizer_config.json", dir);
    unlink(p2);
    assert_int_equal(link(path, p2), 0);
    assert_int_equal(df_tok_load(dir, &t, err, sizeof err), 0);
    assert_int_equal(df_tok_encode(t, "abcab", 5, 0, &ids, &n, err, sizeof err), 0);
    assert_true(n == 2 && ids[0] == 257 && ids[1] == 256);
    free(ids);
    df_tok_destroy(&t);
  }
  /* what stands in a file's place is refused at once, naming the file: a FIFO is never
   * waited on, a folder named tiktoken.model is this format's file, not "no tokenizer.json" */
  {
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/fifo_cfg", g_tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", make_tt("fifo_src", 0, NULL, "", NULL));
    char p2[800];
    snprintf(p2, sizeof p2, "%s/tiktoken.model", dir);
    unlink(p2);
    assert_int_equal(link(path, p2), 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    assert_int_equal(mkfifo(path, 0644), 0);
    expect_error(dir, "tokenizer_config.json", "not a regular file (a FIFO)");
    snprintf(dir, sizeof dir, "%s/dir_model", g_tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    mkdir(path, 0755);
    expect_error(dir, "tiktoken.model", "not a regular file (a folder)");
  }
  expect_error(make_tt("special_str", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"300\": {\"content\": \"[X]\", \"special\": \"yes\"}}}"),
               "tokenizer_config.json", "added_tokens_decoder[\"300\"].special: expected true or false");
  expect_error(make_tt("add_bos_str", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"258\": {\"content\": \"[BOS]\"}}, \"bos_token\": \"[BOS]\", "
                       "\"add_bos_token\": \"yes\"}"),
               "tokenizer_config.json", "add_bos_token: expected true or false");
  /* the config */
  expect_error(make_tt("no_cfg", 0, NULL, "", NULL), "tokenizer_config.json",
               "No such file or directory (a tiktoken.model tokenizer needs it: "
               "tokenizer_class, added_tokens_decoder)");
  expect_error(make_tt("cls", 0, NULL, "", "{\"tokenizer_class\": \"LlamaTokenizer\"}"),
               "tokenizer_config.json",
               "tokenizer_class: expected \"TikTokenTokenizer\" beside tiktoken.model, got "
               "\"LlamaTokenizer\"");
  expect_error(make_tt("cls_none", 0, NULL, "", "{}"), "tokenizer_config.json",
               "tokenizer_class: expected \"TikTokenTokenizer\" beside tiktoken.model, got none");
  expect_error(make_tt("id_low", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"257\": {\"content\": \"[X]\"}}}"),
               "tokenizer_config.json",
               "added_tokens_decoder[\"257\"]: expected an id in [258, 514) (the 256 ids after "
               "tiktoken.model's 258 ranks)");
  expect_error(make_tt("id_high", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"514\": {\"content\": \"[X]\"}}}"),
               "tokenizer_config.json",
               "added_tokens_decoder[\"514\"]: expected an id in [258, 514) (the 256 ids after "
               "tiktoken.model's 258 ranks)");
  expect_error(make_tt("content", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"300\": {\"content\": \"\"}}}"),
               "tokenizer_config.json",
               "added_tokens_decoder[\"300\"].content: expected a non-empty UTF-8 string");
  expect_error(make_tt("twice", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                       "{\"300\": {\"content\": \"[X]\"}, \"301\": {\"content\": \"[X]\"}}}"),
               "tokenizer_config.json",
               "added_tokens_decoder: \"[X]\" is both id 300 and id 301");
  expect_error(make_tt("bos", 0, NULL, "",
                       "{\"tokenizer_class\": \"TikTokenTokenizer\", \"bos_token\": \"<s>\"}"),
               "tokenizer_config.json", "bos_token: not a token of the vocabulary");
}

static int setup(void **state) {
  (void)state;
  snprintf(g_tmp, sizeof g_tmp, "%s/test_tok_tiktoken.tmp", DF_BINARY_DIR);
  mkdir(g_tmp, 0755);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oracle_cases),
      cmocka_unit_test(test_oracle_long),
      cmocka_unit_test(test_specials),
      cmocka_unit_test(test_pattern_classes),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
