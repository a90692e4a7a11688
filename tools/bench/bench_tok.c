/* tools/bench/bench_tok.c — single-threaded encode throughput of the C tokenizer on a text
 * file of NUL-separated documents (written by tools/bench/tok_js.js from the Brown corpus, so
 * the JavaScript tokenizer encodes exactly the same documents in the same run). Each document is
 * one df_tok_encode call (flags 0), as the JavaScript one is one encode() call. Prints one JSON
 * object: docs, bytes, ids, encode_s (best pass, seconds), mb_s (MB = 1e6 bytes per second),
 * tok_s (ids per second), load_s, repeat; with --also, "also": the same fields for each further
 * tokenizer, measured side by side (pass r of every tokenizer runs before pass r + 1 of any, so
 * they see the same machine load).
 *
 * usage: df-bench-tok TOKENIZER(DIR|tokenizer.json|tiktoken.model) DOCS_FILE [--repeat R]
 *                     [--also TOKENIZER]...
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/tokenizer.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define MAX_TOK 8

typedef struct bench {
  const char *path;
  df_tok *tok;
  double load_s, best;
  size_t n_ids, n_docs, bytes;
} bench;

/* One pass of `b` over every document; returns 0, or -1 with a message on stderr. */
static int one_pass(bench *b, const char *buf, long size) {
  char err[512];
  double t = 0;
  b->n_ids = b->n_docs = b->bytes = 0;
  for (long off = 0; off < size;) {
    size_t len = strnlen(buf + off, (size_t)(size - off));
    int32_t *ids = NULL;
    size_t n = 0;
    double s = now_s();
    int rc = df_tok_encode(b->tok, buf + off, len, 0, &ids, &n, err, sizeof err);
    t += now_s() - s;
    if (rc != 0) {
      fprintf(stderr, "df-bench-tok: %s: %s\n", b->path, err);
      return -1;
    }
    free(ids);
    b->n_ids += n;
    b->n_docs++;
    b->bytes += len;
    off += (long)len + 1;
  }
  if (t < b->best) b->best = t;
  return 0;
}

static void print_fields(const bench *b, int repeat) {
  printf("\"docs\": %zu, \"bytes\": %zu, \"ids\": %zu, \"encode_s\": %.6f, \"mb_s\": %.4f, "
         "\"tok_s\": %.0f, \"load_s\": %.4f, \"repeat\": %d",
         b->n_docs, b->bytes, b->n_ids, b->best, b->bytes / 1e6 / b->best, b->n_ids / b->best,
         b->load_s, repeat);
}

int main(int argc, char **argv) {
  bench bs[MAX_TOK];
  int n_tok = 0, repeat = 1;
  const char *docs = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--also") == 0 && i + 1 < argc && n_tok >= 1 && n_tok < MAX_TOK) {
      bs[n_tok++] = (bench){.path = argv[++i]};
    } else if (n_tok == 0 && argv[i][0] != '-') {
      bs[n_tok++] = (bench){.path = argv[i]};
    } else if (!docs && n_tok == 1 && argv[i][0] != '-') {
      docs = argv[i];
    } else {
      n_tok = 0;
      break;
    }
  }
  if (n_tok == 0 || !docs) {
    fprintf(stderr, "usage: df-bench-tok TOKENIZER DOCS_FILE [--repeat R] [--also TOKENIZER]... "
                    "(at most %d tokenizers)\n", MAX_TOK);
    return 2;
  }
  if (repeat < 1) repeat = 1;
  char err[512];
  int rc = 1;
  char *buf = NULL;
  for (int k = 0; k < n_tok; k++) {
    double t0 = now_s();
    if (df_tok_load(bs[k].path, &bs[k].tok, err, sizeof err) != 0) {
      fprintf(stderr, "df-bench-tok: %s\n", err);
      goto done;
    }
    bs[k].load_s = now_s() - t0;
    bs[k].best = 1e30;
  }
  FILE *f = fopen(docs, "rb");
  if (!f) {
    fprintf(stderr, "df-bench-tok: cannot open %s\n", docs);
    goto done;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)size + 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "df-bench-tok: cannot read %s\n", docs);
    fclose(f);
    goto done;
  }
  fclose(f);
  buf[size] = 0;
  /* best of `repeat` passes over every document (the first pass fills the word cache) */
  for (int r = 0; r < repeat; r++)
    for (int k = 0; k < n_tok; k++)
      if (one_pass(&bs[k], buf, size) != 0) goto done;
  printf("{");
  print_fields(&bs[0], repeat);
  if (n_tok > 1) {
    printf(", \"also\": [");
    for (int k = 1; k < n_tok; k++) {
      printf("%s{\"tokenizer\": \"%s\", ", k > 1 ? ", " : "", bs[k].path);
      print_fields(&bs[k], repeat);
      printf("}");
    }
    printf("]");
  }
  printf("}\n");
  rc = 0;
done:
  free(buf);
  for (int k = 0; k < n_tok; k++) df_tok_destroy(&bs[k].tok);
  return rc;
}
