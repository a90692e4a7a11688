/* tests/id_tokenizer.h — a tokenizer for the 512-token fixtures, whose token i is the text
 * "<iii>" (no merges), written to DF_BINARY_DIR/<name>/tokenizer.json and loaded; for tests
 * that compare scheduler text output with greedy ids. Needs cmocka.h and the tokenizer API
 * included before it. */
#ifndef DF_TESTS_ID_TOKENIZER_H
#define DF_TESTS_ID_TOKENIZER_H

#include <stdio.h>
#include <sys/stat.h>

static df_tok *id_tokenizer(const char *name) {
  char dir[600], path[700], err[512];
  snprintf(dir, sizeof dir, "%s/%s", DF_BINARY_DIR, name);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {", f);
  for (int i = 0; i < 512; i++) fprintf(f, "%s\"<%03d>\": %d", i ? ", " : "", i, i);
  fputs("}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false}, \"decoder\": {\"type\": \"ByteLevel\"}}", f);
  fclose(f);
  df_tok *t = NULL;
  if (df_tok_load(dir, &t, err, sizeof err) != 0) fail_msg("tokenizer: %s", err);
  return t;
}

#endif
