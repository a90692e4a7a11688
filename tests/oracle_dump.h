/* tests/oracle_dump.h — reading the oracles' binary dumps (tests/tokenizer/oracle.js,
 * tests/tokenizer/tiktoken_npm_oracle.js): little-endian u32 counts and lengths, strings as
 * u32 length + bytes, id lists as u32 count + u32 ids. Include after <cmocka.h>.
 *
 * Every read is bounded by the buffer: a short or corrupt dump sets `bad` and returns 0/NULL,
 * never reads past the end. Returned strings and id lists are malloc'd (caller frees).
 */
#ifndef DF_TESTS_ORACLE_DUMP_H
#define DF_TESTS_ORACLE_DUMP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct rd {
  const uint8_t *p;
  size_t n, i;
  int bad;
} rd;

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint32_t rd_u32(rd *r) {
  if (r->bad || r->n - r->i < 4) {
    r->bad = 1;
    return 0;
  }
  uint32_t v = (uint32_t)r->p[r->i] | (uint32_t)r->p[r->i + 1] << 8 |
               (uint32_t)r->p[r->i + 2] << 16 | (uint32_t)r->p[r->i + 3] << 24;
  r->i += 4;
  return v;
}

/* A string; *len its bytes (may be NULL). */
static inline char *rd_str(rd *r, size_t *len) {
  uint32_t n = rd_u32(r);
  if (r->bad || r->n - r->i < n) {
    r->bad = 1;
    return NULL;
  }
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  memcpy(s, r->p + r->i, n);
  s[n] = 0;
  r->i += n;
  if (len) *len = n;
  return s;
}

/* An id list of *n ids. */
static inline int32_t *rd_ids(rd *r, size_t *n) {
  uint32_t k = rd_u32(r);
  if (r->bad || (r->n - r->i) / 4 < k) {
    r->bad = 1;
    return NULL;
  }
  int32_t *v = malloc(((size_t)k + 1) * sizeof *v);
  assert_non_null(v);
  for (uint32_t j = 0; j < k; j++) v[j] = (int32_t)rd_u32(r);
  *n = k;
  return v;
}

#endif
