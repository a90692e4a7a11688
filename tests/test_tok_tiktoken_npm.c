/* tests/test_tok_tiktoken_npm.c — the C tiktoken.model tokenizer against the real tiktoken core
 * (npm `tiktoken`, the WebAssembly build of its Rust CoreBPE) on real vocabularies.
 *
 * usage: test_tok_tiktoken_npm FIXTURE_DIR ENCODING(o200k_base|cl100k_base|unicode16)
 * (unicode16: the check vocabulary and cases of the code points assigned after PCRE2's Unicode
 * tables, engine/text/unicode_kimi.h; the layout check is then only the specials' places).
 * FIXTURE_DIR is written by tests/tokenizer/tiktoken_npm_oracle.js: a Kimi-format folder
 * (tiktoken.model = the npm package's ENCODING ranks, tokenizer_config.json with the Kimi K3
 * layout of 256 specials) and cases.bin, the core's ids for every case (Brown corpus sentences,
 * tests/tokenizer/stress.json, a Kimi stress set) with all specials allowed and plain, computed
 * with the Kimi K2/K3 pre-split pattern as published and tokenization_kimi.py's guards.
 * Checks, for every case:
 *   1. df_tok_encode(flags 0) equals the core's encode(text, "all"), df_tok_encode(DF_TOK_PLAIN)
 *      equals its encode_ordinary(text); zero mismatches, the first ones printed (case index,
 *      name, first differing position, expected and got ids with their bytes);
 *   2. decode(ids) gives the text back for both id lists (invalid UTF-8 first becomes U+FFFD);
 * plus the layout of the fixture (vocabulary size, named specials, bos/eos) and published ids
 * of the ENCODING ("hello world"), and prints the C encode throughput (never asserted).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "oracle_dump.h"

#include "engine/text/tokenizer.h"

#define MAX_SHOWN 10 /* mismatches printed in full */

typedef struct tcase {
  char *name;
  char *text;
  size_t len;
  int32_t *ids[2]; /* [0] specials allowed, [1] plain */
  size_t n[2];
} tcase;

static const char *g_dir, *g_enc;
static df_tok *g_tok;
static tcase *g_cases;
static size_t g_n;

static int setup(void **state) {
  (void)state;
  char err[1024], path[4096];
  double t0 = now();
  if (df_tok_load(g_dir, &g_tok, err, sizeof err) != 0) {
    fprintf(stderr, "load: %s\n", err);
    return -1;
  }
  printf("load %s: %zu ids in %.2f s\n", g_dir, df_tok_vocab_size(g_tok), now() - t0);
  snprintf(path, sizeof path, "%s/cases.bin", g_dir);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open (tok_tiktoken_npm_dump_* writes it with "
                    "tests/tokenizer/tiktoken_npm_oracle.js; tools/install-deps.sh installs the "
                    "npm package tiktoken)\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = sz > 0 ? malloc((size_t)sz) : NULL;
  if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
    fprintf(stderr, "%s: cannot read\n", path);
    fclose(f);
    free(buf);
    return -1;
  }
  fclose(f);
  const char magic[] = "DFTIKTOKNPM1\n";
  if ((size_t)sz < sizeof magic - 1 || memcmp(buf, magic, sizeof magic - 1) != 0) {
    fprintf(stderr, "%s: not a tiktoken_npm_oracle.js dump\n", path);
    free(buf);
    return -1;
  }
  rd r = {buf, (size_t)sz, sizeof magic - 1, 0};
  g_n = rd_u32(&r);
  if (g_n > 10000000) r.bad = 1;
  g_cases = r.bad ? NULL : calloc(g_n + 1, sizeof *g_cases);
  for (size_t i = 0; i < g_n && !r.bad; i++) {
    tcase *c = &g_cases[i];
    c->name = rd_str(&r, NULL);
    c->text = rd_str(&r, &c->len);
    c->ids[0] = rd_ids(&r, &c->n[0]);
    c->ids[1] = rd_ids(&r, &c->n[1]);
  }
  free(buf);
  if (r.bad || r.i != r.n) {
    fprintf(stderr, "%s: truncated or trailing bytes\n", path);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (size_t i = 0; g_cases && i < g_n; i++) {
    free(g_cases[i].name);
    free(g_cases[i].text);
    free(g_cases[i].ids[0]);
    free(g_cases[i].ids[1]);
  }
  free(g_cases);
  df_tok_destroy(&g_tok);
  return 0;
}

/* "ID 'bytes'" of ids[i], bytes escaped, or "(end)". */
static void show_id(const int32_t *ids, size_t n, size_t i) {
  if (i >= n) {
    fprintf(stderr, "(end)");
    return;
  }
  size_t l = 0;
  const uint8_t *b = df_tok_id_to_bytes(g_tok, ids[i], &l);
  fprintf(stderr, "%d '", (int)ids[i]);
  for (size_t k = 0; b && k < l && k < 40; k++) {
    if (b[k] >= 0x20 && b[k] < 0x7f && b[k] != '\'' && b[k] != '\\') fputc(b[k], stderr);
    else fprintf(stderr, "\\x%02x", b[k]);
  }
  fprintf(stderr, "'");
}

static void test_fixture_layout(void **state) {
  (void)state;
  /* o200k_base: 199,998 ranks; cl100k_base: 100,256. The 256 specials follow. */
  bool check = strcmp(g_enc, "unicode16") == 0; /* the check vocabulary: any size */
  size_t n_base = check ? (size_t)df_tok_vocab_size(g_tok) - 256
                        : strcmp(g_enc, "o200k_base") == 0 ? 199998 : 100256;
  assert_int_equal(df_tok_vocab_size(g_tok), n_base + 256);
  assert_int_equal(df_tok_token_to_id(g_tok, "[BOS]", 5), (int32_t)n_base);
  assert_int_equal(df_tok_token_to_id(g_tok, "<|end_of_msg|>", 14), (int32_t)n_base + 2);
  assert_int_equal(df_tok_token_to_id(g_tok, "<|media_pad|>", 13), (int32_t)n_base + 21);
  assert_int_equal(df_tok_token_to_id(g_tok, "<osagent_mode>", 14), (int32_t)n_base + 65);
  assert_int_equal(df_tok_token_to_id(g_tok, "[PAD]", 5), (int32_t)n_base + 255);
  char name[64];
  snprintf(name, sizeof name, "<|reserved_token_%zu|>", n_base + 8);
  assert_int_equal(df_tok_token_to_id(g_tok, name, strlen(name)), (int32_t)n_base + 8);
  assert_int_equal(df_tok_bos_id(g_tok), (int32_t)n_base);
  assert_int_equal(df_tok_eos_id(g_tok), (int32_t)n_base + 1);
  /* The published ids of "hello world" in each encoding (the Kimi pattern splits it as the
   * encoding's own does: "hello", " world"). */
  if (check) return;
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(df_tok_encode(g_tok, "hello world", 11, 0, &ids, &n, err, sizeof err), 0);
  assert_int_equal(n, 2);
  if (strcmp(g_enc, "o200k_base") == 0) {
    assert_int_equal(ids[0], 24912);
    assert_int_equal(ids[1], 2375);
  } else {
    assert_int_equal(ids[0], 15339);
    assert_int_equal(ids[1], 1917);
  }
  free(ids);
}

static void test_ids(void **state) {
  (void)state;
  static const unsigned flags[2] = {0, DF_TOK_PLAIN};
  static const char *mode[2] = {"specials", "plain"};
  size_t fails = 0, bytes = 0, n_ids = 0;
  double t = 0;
  char err[512];
  for (size_t i = 0; i < g_n; i++) {
    tcase *c = &g_cases[i];
    for (int m = 0; m < 2; m++) {
      int32_t *ids = NULL;
      size_t n = 0;
      double t0 = now();
      int rc = df_tok_encode(g_tok, c->text, c->len, flags[m], &ids, &n, err, sizeof err);
      t += now() - t0;
      if (rc != 0) fprintf(stderr, "encode %s: %s\n", c->name, err);
      assert_int_equal(rc, 0);
      bytes += c->len;
      n_ids += n;
      bool same = n == c->n[m] && (n == 0 || memcmp(ids, c->ids[m], n * sizeof *ids) == 0);
      if (!same) {
        if (fails < MAX_SHOWN) {
          size_t k = 0;
          while (k < n && k < c->n[m] && ids[k] == c->ids[m][k]) k++;
          fprintf(stderr, "MISMATCH case %zu %s (%s, %zu bytes): got %zu ids, expected %zu; "
                          "first difference at %zu: got ", i, c->name, mode[m], c->len, n,
                  c->n[m], k);
          show_id(ids, n, k);
          fprintf(stderr, ", expected ");
          show_id(c->ids[m], c->n[m], k);
          fprintf(stderr, "\n");
        }
        fails++;
      }
      free(ids);
    }
  }
  printf("%s: %zu cases x 2 modes (%.2f MB): %zu mismatches; C encode %.2f MB/s, %.0f ids/s "
         "(single thread)\n", g_enc, g_n, bytes / 1e6, fails, bytes / 1e6 / t, n_ids / t);
  assert_int_equal(fails, 0);
}

static void test_roundtrip(void **state) {
  (void)state;
  size_t fails = 0;
  char err[512];
  for (size_t i = 0; i < g_n; i++) {
    tcase *c = &g_cases[i];
    size_t cl = 0;
    char *clean = df_tok_utf8_sanitize(c->text, c->len, &cl);
    assert_non_null(clean);
    for (int m = 0; m < 2; m++) {
      char *dec = NULL;
      size_t dl = 0;
      assert_int_equal(df_tok_decode(g_tok, c->ids[m], c->n[m], 0, &dec, &dl, err, sizeof err),
                       0);
      if (dl != cl || memcmp(dec, clean, cl) != 0) {
        if (fails < MAX_SHOWN)
          fprintf(stderr, "ROUNDTRIP case %zu %s (%s): decode(encode(s)) != s\n", i, c->name,
                  m ? "plain" : "specials");
        fails++;
      }
      free(dec);
    }
    free(clean);
  }
  assert_int_equal(fails, 0);
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[2], "o200k_base") != 0 && strcmp(argv[2], "cl100k_base") != 0 &&
                    strcmp(argv[2], "unicode16") != 0)) {
    fprintf(stderr, "usage: %s FIXTURE_DIR o200k_base|cl100k_base|unicode16\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  g_enc = argv[2];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixture_layout),
      cmocka_unit_test(test_ids),
      cmocka_unit_test(test_roundtrip),
  };
  return cmocka_run_group_tests_name("tok_tiktoken_npm", tests, setup, teardown);
}
