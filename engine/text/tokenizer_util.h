/* engine/text/tokenizer_util.h — the lowest floor of dftok: the one-line error helper, the
 * growable byte buffer, growable arrays and byte hashing. Private to engine/text/.
 *
 * Owns: the declarations of engine/text/tokenizer_util.c. Does not own: UTF-8
 * (engine/text/tokenizer_utf8.h) or anything that knows df_tok
 * (engine/text/tokenizer_internal.h).
 */
#ifndef DF_ENGINE_TOKENIZER_UTIL_H
#define DF_ENGINE_TOKENIZER_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Format one line into err (when err != NULL and errlen > 0). */
void df_tok__seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Growable byte buffer; always NUL-terminated after a successful put. */
typedef struct df_tok_buf {
  char *p;
  size_t n;   /* bytes used */
  size_t cap; /* bytes allocated */
} df_tok_buf;

int df_tok__buf_reserve(df_tok_buf *b, size_t extra); /* 0 or -1 (overflow / OOM) */
int df_tok__buf_put(df_tok_buf *b, const void *p, size_t n);
int df_tok__buf_puts(df_tok_buf *b, const char *s);
void df_tok__buf_free(df_tok_buf *b);

/* Grow the array *p (of *cap elements of `elem` bytes) to hold at least `need` elements; the
 * capacity doubles, starting at 64. Returns 0 (also when it already fits), or -1 on overflow /
 * OOM with *p and *cap unchanged. */
int df_tok__grow(void **p, size_t *cap, size_t need, size_t elem);

/* Read the file at `path` whole into a malloc'd NUL-terminated buffer of *len bytes (caller
 * frees). Opened O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY and checked to be a regular
 * file, so a FIFO, device or folder in its place is refused at once, never waited on.
 * NULL + "PATH: <reason>" in err: cannot open (strerror), "not a regular file (a folder /
 * a FIFO / a device)", larger than max_bytes, out of memory, read error. */
char *df_tok__read_file(const char *path, size_t max_bytes, size_t *len, char *err,
                        size_t errlen);

/* df_tok__read_file (at most 1 GiB) parsed as JSON (jansson, any value): a new reference, or
 * NULL + "PATH: <reason>" / "PATH: line L column C: <jansson's message>" in err. The caller
 * includes <jansson.h>. */
struct json_t;
struct json_t *df_tok__load_json(const char *path, char *err, size_t errlen);

/* 64-bit hash of the n bytes at p (for the tokenizer's in-memory hash tables). */
uint64_t df_tok__hash_bytes(const void *p, size_t n);

#endif
