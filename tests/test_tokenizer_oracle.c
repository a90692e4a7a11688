/* tests/test_tokenizer_oracle.c — the C tokenizer against the JavaScript oracle's ids.
 *
 * usage: test_tokenizer_oracle TOKENIZER_DIR DUMP_FILE NORMALIZATION(nfc|none)
 * DUMP_FILE is written by tests/tokenizer/oracle.js (format described there): the stress set
 * and the Brown corpus with the oracle's ids, and, for the cases listed in
 * tests/tokenizer/oracle_overrides.json, the ids that tokenizer.json's semantics give where the
 * oracle port is wrong. Checks, for every case:
 *   1. encode(text) equals the expected ids (a recorded oracle disagreement must still be one);
 *   2. decode(encode(text)) equals the normalized text (invalid UTF-8 first becomes U+FFFD);
 *   3. the streaming decoder: the concatenation of its outputs plus flush equals the one-shot
 *      decode, every output is complete UTF-8, and (stress set) for every prefix of the ids.
 * Prints encode throughput on the Brown corpus (never asserted).
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

typedef struct tcase {
  char *name;
  char *text;
  size_t len;
  int32_t *exp, *orc;
  size_t n_exp, n_orc;
  char *reason;
} tcase;

static const char *g_dir, *g_dump, *g_norm;
static df_tok *g_tok;
static tcase *g_cases;
static size_t g_n;

static int setup(void **state) {
  (void)state;
  char err[1024];
  if (df_tok_load(g_dir, &g_tok, err, sizeof err) != 0) {
    fprintf(stderr, "load: %s\n", err);
    return -1;
  }
  FILE *f = fopen(g_dump, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open (the oracle dump test writes it; run tools/install-deps.sh "
                    "for the npm packages)\n", g_dump);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)sz + 1);
  if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
    fclose(f);
    free(buf);
    return -1;
  }
  fclose(f);
  const char magic[] = "DFTOKORACLE1\n";
  rd r = {buf, (size_t)sz, 0, 0};
  if ((size_t)sz < sizeof magic - 1 || memcmp(buf, magic, sizeof magic - 1) != 0) {
    fprintf(stderr, "%s: not an oracle dump\n", g_dump);
    free(buf);
    return -1;
  }
  r.i = sizeof magic - 1;
  g_n = rd_u32(&r);
  if (g_n > 1000000) r.bad = 1;
  g_cases = calloc(g_n + 1, sizeof *g_cases);
  for (size_t i = 0; i < g_n && !r.bad; i++) {
    tcase *c = &g_cases[i];
    c->name = rd_str(&r, NULL);
    c->text = rd_str(&r, &c->len);
    c->exp = rd_ids(&r, &c->n_exp);
    c->orc = rd_ids(&r, &c->n_orc);
    c->reason = rd_str(&r, NULL);
  }
  free(buf);
  if (r.bad) {
    fprintf(stderr, "%s: truncated dump\n", g_dump);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (size_t i = 0; i < g_n; i++) {
    free(g_cases[i].name);
    free(g_cases[i].text);
    free(g_cases[i].exp);
    free(g_cases[i].orc);
    free(g_cases[i].reason);
  }
  free(g_cases);
  df_tok_destroy(&g_tok);
  return 0;
}

static void show_piece(const int32_t *ids, size_t n, size_t i) {
  if (i >= n) {
    fprintf(stderr, "(end)");
    return;
  }
  size_t l = 0;
  const char *p = df_tok_id_to_piece(g_tok, ids[i], &l);
  fprintf(stderr, "%d '%.*s'", (int)ids[i], (int)l, p ? p : "?");
}

static void test_ids(void **state) {
  (void)state;
  size_t fails = 0, recorded = 0, bytes = 0, brown_bytes = 0;
  double t_brown = 0;
  char err[512];
  for (size_t i = 0; i < g_n; i++) {
    tcase *c = &g_cases[i];
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = now();
    int rc = df_tok_encode(g_tok, c->text, c->len, 0, &ids, &n, err, sizeof err);
    double dt = now() - t0;
    assert_int_equal(rc, 0);
    bytes += c->len;
    if (strncmp(c->name, "brown/", 6) == 0) {
      t_brown += dt;
      brown_bytes += c->len;
    }
    bool same = n == c->n_exp && (n == 0 || memcmp(ids, c->exp, n * sizeof *ids) == 0);
    if (!same) {
      size_t k = 0;
      while (k < n && k < c->n_exp && ids[k] == c->exp[k]) k++;
      fprintf(stderr, "MISMATCH %s: %zu ids, expected %zu; first difference at %zu: got ", c->name,
              n, c->n_exp, k);
      show_piece(ids, n, k);
      fprintf(stderr, ", expected ");
      show_piece(c->exp, c->n_exp, k);
      fprintf(stderr, "\n");
      fails++;
    }
    if (c->reason[0]) {
      bool oracle_same = c->n_orc == c->n_exp && memcmp(c->orc, c->exp, c->n_exp * 4) == 0;
      printf("recorded oracle disagreement %s: %s\n", c->name, c->reason);
      if (oracle_same) {
        fprintf(stderr, "STALE override %s: the oracle now agrees; remove it\n", c->name);
        fails++;
      }
      recorded++;
    }
    free(ids);
  }
  printf("%zu cases (%.2f MB): %zu mismatches, %zu recorded oracle disagreements\n", g_n,
         bytes / 1e6, fails, recorded);
  if (brown_bytes)
    printf("C encode on Brown: %.2f MB in %.3f s = %.2f MB/s (single thread, word cache warm "
           "after the first documents)\n", brown_bytes / 1e6, t_brown, brown_bytes / 1e6 / t_brown);
  assert_int_equal(fails, 0);
}

static void test_roundtrip(void **state) {
  (void)state;
  size_t fails = 0;
  char err[512];
  for (size_t i = 0; i < g_n; i++) {
    tcase *c = &g_cases[i];
    size_t cl = 0, nl = 0, dl = 0;
    char *clean = df_tok_utf8_sanitize(c->text, c->len, &cl);
    assert_non_null(clean);
    char *norm = clean;
    nl = cl;
    if (strcmp(g_norm, "nfc") == 0) {
      norm = df_tok_utf8_nfc(clean, cl, &nl);
      assert_non_null(norm);
    }
    char *dec = NULL;
    assert_int_equal(df_tok_decode(g_tok, c->exp, c->n_exp, 0, &dec, &dl, err, sizeof err), 0);
    if (dl != nl || memcmp(dec, norm, nl) != 0) {
      fprintf(stderr, "ROUNDTRIP %s: decode(encode(s)) != %s(s)\n", c->name, g_norm);
      fails++;
    }
    free(dec);
    if (norm != clean) free(norm);
    free(clean);
  }
  assert_int_equal(fails, 0);
}

/* Stream ids[0..n) one id at a time; returns the concatenation (+ flush). Checks that every
 * piece is complete UTF-8. */
static char *stream_all(const int32_t *ids, size_t n, size_t *len, size_t *bad_pieces) {
  df_tok_stream *s = NULL;
  char err[256];
  assert_int_equal(df_tok_stream_new(g_tok, 0, &s, err, sizeof err), 0);
  size_t cap = 64, used = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  for (size_t i = 0; i <= n; i++) {
    const char *t;
    size_t tl;
    if (i < n) assert_int_equal(df_tok_stream_feed(s, ids[i], &t, &tl, err, sizeof err), 0);
    else assert_int_equal(df_tok_stream_flush(s, &t, &tl, err, sizeof err), 0);
    size_t cl = 0;
    char *chk = df_tok_utf8_sanitize(t, tl, &cl);
    if (!chk || cl != tl || memcmp(chk, t, tl) != 0) (*bad_pieces)++;
    free(chk);
    while (used + tl + 1 > cap) {
      cap *= 2;
      out = realloc(out, cap);
      assert_non_null(out);
    }
    memcpy(out + used, t, tl);
    used += tl;
  }
  out[used] = 0;
  assert_int_equal(df_tok_stream_pending(s), 0);
  df_tok_stream_destroy(&s);
  *len = used;
  return out;
}

static void test_stream(void **state) {
  (void)state;
  size_t fails = 0, bad = 0, checks = 0;
  char err[256];
  for (size_t i = 0; i < g_n; i++) {
    tcase *c = &g_cases[i];
    bool every_prefix = strncmp(c->name, "stress/", 7) == 0;
    size_t k0 = every_prefix ? 0 : c->n_exp;
    for (size_t k = k0; k <= c->n_exp; k++) {
      char *one = NULL, *str;
      size_t ol = 0, sl = 0;
      assert_int_equal(df_tok_decode(g_tok, c->exp, k, 0, &one, &ol, err, sizeof err), 0);
      str = stream_all(c->exp, k, &sl, &bad);
      checks++;
      if (sl != ol || memcmp(one, str, ol) != 0) {
        if (fails < 10) fprintf(stderr, "STREAM %s: prefix of %zu ids differs\n", c->name, k);
        fails++;
      }
      free(one);
      free(str);
    }
  }
  printf("stream: %zu prefix checks, %zu mismatches, %zu incomplete pieces\n", checks, fails, bad);
  assert_int_equal(fails, 0);
  assert_int_equal(bad, 0);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s TOKENIZER_DIR DUMP_FILE nfc|none\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  g_dump = argv[2];
  g_norm = argv[3];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ids),
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_stream),
  };
  return cmocka_run_group_tests_name("tokenizer_oracle", tests, setup, teardown);
}
