/* tools/bench/bench_tok.c — single-threaded encode throughput of the C tokenizer on a text
 * file of NUL-separated documents (written by tools/bench/tok_js.js from the Brown corpus, so
 * the JavaScript oracle encodes exactly the same documents in the same run). Each document is
 * one df_tok_encode call, as the oracle's is one encode() call. Prints one JSON object.
 *
 * usage: df-bench-tok TOKENIZER(DIR|tokenizer.json) DOCS_FILE [--repeat R]
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

int main(int argc, char **argv) {
  if (argc != 3 && !(argc == 5 && strcmp(argv[3], "--repeat") == 0)) {
    fprintf(stderr, "usage: df-bench-tok TOKENIZER DOCS_FILE [--repeat R]\n");
    return 2;
  }
  int repeat = argc == 5 ? atoi(argv[4]) : 1;
  if (repeat < 1) repeat = 1;
  char err[512];
  double t0 = now_s();
  df_tok *tok = NULL;
  if (df_tok_load(argv[1], &tok, err, sizeof err) != 0) {
    fprintf(stderr, "df-bench-tok: %s\n", err);
    return 1;
  }
  double t_load = now_s() - t0;
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    fprintf(stderr, "df-bench-tok: cannot open %s\n", argv[2]);
    df_tok_destroy(&tok);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)size + 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "df-bench-tok: cannot read %s\n", argv[2]);
    fclose(f);
    free(buf);
    df_tok_destroy(&tok);
    return 1;
  }
  fclose(f);
  buf[size] = 0;
  /* best of `repeat` passes over every document (the first pass fills the word cache) */
  double best = 1e30;
  size_t n_ids = 0, n_docs = 0, bytes = 0;
  for (int r = 0; r < repeat; r++) {
    double t = 0;
    n_ids = n_docs = bytes = 0;
    for (long off = 0; off < size;) {
      size_t len = strnlen(buf + off, (size_t)(size - off));
      int32_t *ids = NULL;
      size_t n = 0;
      double s = now_s();
      int rc = df_tok_encode(tok, buf + off, len, 0, &ids, &n, err, sizeof err);
      t += now_s() - s;
      if (rc != 0) {
        fprintf(stderr, "df-bench-tok: %s\n", err);
        free(buf);
        df_tok_destroy(&tok);
        return 1;
      }
      free(ids);
      n_ids += n;
      n_docs++;
      bytes += len;
      off += (long)len + 1;
    }
    if (t < best) best = t;
  }
  printf("{\"docs\": %zu, \"bytes\": %zu, \"ids\": %zu, \"encode_s\": %.6f, \"mb_s\": %.4f, "
         "\"load_s\": %.4f, \"repeat\": %d}\n",
         n_docs, bytes, n_ids, best, bytes / 1e6 / best, t_load, repeat);
  free(buf);
  df_tok_destroy(&tok);
  return 0;
}
