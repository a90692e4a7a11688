/* tests/spec_demo_alone.h — the demo target's greedy ids alone (no draft) for the demo
 * prompts, written once per ctest run by the fixture spec_demo_alone (`test_spec_demo
 * --write-alone FILE`, tests/spec.cmake) and read by tests/test_spec_demo.c and
 * tests/test_spec_cluster.c instead of each computing them again; the fixture's cleanup
 * removes the file, so it never outlives the run that made it. A reader without the file (a
 * test run by hand) computes the ids itself.
 *
 * FILE: a first line "deltafin-spec-demo-alone 1 N_NEW COUNT", then one line per prompt:
 * its text, a tab, its prompt ids, a tab, its N_NEW greedy ids (ids separated by spaces). A
 * reader takes a prompt's ids only when its text is there with the very prompt ids it
 * tokenized and the same N_NEW.
 */
#ifndef DF_TESTS_SPEC_DEMO_ALONE_H
#define DF_TESTS_SPEC_DEMO_ALONE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write the file (tmp + rename): np prompts, texts[p] tokenized to ids[p][0..n[p]), their
 * n_new greedy ids alone[p * stride .. + n_new). 0, or -1. */
static inline int spec_demo_alone_write(const char *path, int np, const char *const *texts,
                                        int32_t *const *ids, const size_t *n,
                                        const int32_t *alone, int stride, int n_new) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "deltafin-spec-demo-alone 1 %d %d\n", n_new, np);
  for (int p = 0; p < np; p++) {
    fprintf(f, "%s\t", texts[p]);
    for (size_t i = 0; i < n[p]; i++) fprintf(f, "%s%d", i ? " " : "", ids[p][i]);
    fputc('\t', f);
    for (int i = 0; i < n_new; i++) fprintf(f, "%s%d", i ? " " : "", alone[(size_t)p * stride + i]);
    fputc('\n', f);
  }
  bool ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/* Parse up to max space-separated ids from s (ending at '\t', '\n' or NUL); their count. */
static inline int spec_demo_alone_ids(const char **s, int32_t *out, int max) {
  int k = 0;
  const char *q = *s;
  while (*q && *q != '\t' && *q != '\n') {
    char *e;
    long v = strtol(q, &e, 10);
    if (e == q || k == max) return -1;
    out[k++] = (int32_t)v;
    q = e;
    while (*q == ' ') q++;
  }
  *s = q;
  return k;
}

/* The n_new greedy ids of `text` (tokenized to ids[0..n)) from the file at path into out.
 * true when the file holds that prompt with those prompt ids and the same n_new. */
static inline bool spec_demo_alone_find(const char *path, const char *text,
                                        const int32_t *ids, size_t n, int n_new, int32_t *out) {
  FILE *f = path && *path ? fopen(path, "r") : NULL;
  if (!f) return false;
  static char line[1 << 16];
  int file_new = -1, count = -1;
  bool found = false;
  if (fgets(line, sizeof line, f) &&
      sscanf(line, "deltafin-spec-demo-alone 1 %d %d", &file_new, &count) == 2 && file_new == n_new) {
    size_t tl = strlen(text);
    while (!found && fgets(line, sizeof line, f)) {
      if (strncmp(line, text, tl) != 0 || line[tl] != '\t') continue;
      const char *s = line + tl + 1;
      int32_t got[1024];
      int k = spec_demo_alone_ids(&s, got, 1024);
      if (k < 0 || (size_t)k != n || memcmp(got, ids, n * sizeof *ids) != 0 || *s != '\t') break;
      s++;
      found = spec_demo_alone_ids(&s, out, n_new) == n_new;
    }
  }
  fclose(f);
  return found;
}

#endif
