/* engine/text/tokenizer_util.c — the lowest floor of dftok: the one-line error helper, the
 * growable byte buffer, growable arrays and byte hashing.
 *
 * Owns: df_tok__seterr, df_tok__buf_*, df_tok__grow and df_tok__hash_bytes
 * (engine/text/tokenizer_util.h). Does not own: UTF-8 (engine/text/tokenizer_utf8.c) or
 * anything that knows df_tok; calls nothing else in dftok.
 */
#include "engine/text/tokenizer_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_tok__seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- byte buffer ------------------------------------------------------------------------ */

int df_tok__buf_reserve(df_tok_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->n - 1) return -1;
  size_t want = b->n + extra + 1;
  if (want <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < want) {
    if (cap > SIZE_MAX / 2) {
      cap = want;
      break;
    }
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int df_tok__buf_put(df_tok_buf *b, const void *p, size_t n) {
  if (df_tok__buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

int df_tok__buf_puts(df_tok_buf *b, const char *s) { return df_tok__buf_put(b, s, strlen(s)); }

void df_tok__buf_free(df_tok_buf *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}

/* ---- arrays ----------------------------------------------------------------------------- */

int df_tok__grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) {
    if (c > SIZE_MAX / 2 / elem) return -1;
    c *= 2;
  }
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- hashing ---------------------------------------------------------------------------- */

uint64_t df_tok__hash_bytes(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}

char *df_tok__read_file(const char *path, size_t max_bytes, size_t *len, char *err,
                        size_t errlen) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    df_tok__seterr(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    df_tok__seterr(err, errlen, "%s: not a regular file (%s)", path,
                   S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO"
                   : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a file");
    close(fd);
    return NULL;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    df_tok__seterr(err, errlen, "%s: %lld bytes, more than the %zu a tokenizer file may have",
                   path, (long long)st.st_size, max_bytes);
    close(fd);
    return NULL;
  }
  char *b = malloc((size_t)st.st_size + 1);
  if (!b) {
    df_tok__seterr(err, errlen, "%s: out of memory", path);
    close(fd);
    return NULL;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      df_tok__seterr(err, errlen, "%s: read error: %s", path, strerror(errno));
      free(b);
      close(fd);
      return NULL;
    }
    if (r == 0) break; /* shrank while reading: what is there */
    got += (size_t)r;
  }
  close(fd);
  b[got] = 0;
  *len = got;
  return b;
}

json_t *df_tok__load_json(const char *path, char *err, size_t errlen) {
  size_t n = 0;
  char *text = df_tok__read_file(path, (size_t)1 << 30, &n, err, errlen);
  if (!text) return NULL;
  json_error_t je;
  json_t *v = json_loadb(text, n, 0, &je);
  free(text);
  if (!v) df_tok__seterr(err, errlen, "%s: line %d column %d: %s", path, je.line, je.column,
                         je.text);
  return v;
}
