/* engine/safetensors.c — safetensors header validation, sharded checkpoints, read-only mmap.
 *
 * Owns: the byte-level format (8-byte little-endian header length, JSON header, data area),
 * every check listed in safetensors.h, the index file model.safetensors.index.json, and the
 * lifetime of the file mappings. Tensor data is never copied: df_st_tensor.data points into
 * a PROT_READ/MAP_SHARED mapping of the whole file.
 * Does not own: what the tensors mean (engine/model.c), or any dtype arithmetic.
 *
 * Every input byte is untrusted: lengths are checked before use, sizes are computed in
 * checked 64-bit arithmetic, the JSON parser (jansson, strict) only ever sees the header
 * slice, and every failure returns -1 with one line in the caller's buffer.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */

#include "engine/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024) /* 100 MiB */
#define ST_MAX_INDEX ((uint64_t)100 * 1024 * 1024)
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

/* ---- dtypes -------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int bits;
} dtype_info[DF_DT_COUNT] = {
    [DF_DT_BOOL] = {"BOOL", 8},       [DF_DT_U8] = {"U8", 8},
    [DF_DT_I8] = {"I8", 8},           [DF_DT_F8_E5M2] = {"F8_E5M2", 8},
    [DF_DT_F8_E4M3] = {"F8_E4M3", 8}, [DF_DT_F8_E8M0] = {"F8_E8M0", 8},
    [DF_DT_I16] = {"I16", 16},        [DF_DT_U16] = {"U16", 16},
    [DF_DT_F16] = {"F16", 16},        [DF_DT_BF16] = {"BF16", 16},
    [DF_DT_I32] = {"I32", 32},        [DF_DT_U32] = {"U32", 32},
    [DF_DT_F32] = {"F32", 32},        [DF_DT_C64] = {"C64", 64},
    [DF_DT_F64] = {"F64", 64},        [DF_DT_I64] = {"I64", 64},
    [DF_DT_U64] = {"U64", 64},        [DF_DT_F4] = {"F4", 4},
    [DF_DT_F6_E2M3] = {"F6_E2M3", 6}, [DF_DT_F6_E3M2] = {"F6_E3M2", 6},
};

static bool dtype_valid(df_dtype dt) { return (int)dt >= 0 && dt < DF_DT_COUNT; }

int df_dtype_bits(df_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].bits : 0; }

size_t df_dtype_size(df_dtype dt) {
  int bits = df_dtype_bits(dt);
  return bits % 8 == 0 ? (size_t)bits / 8 : 0;
}

const char *df_dtype_name(df_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].name : "?"; }

bool df_dtype_is_supported(df_dtype dt) {
  return dt == DF_DT_BF16 || dt == DF_DT_F16 || dt == DF_DT_F32;
}

int df_dtype_from_name(const char *name, df_dtype *out) {
  if (!name) return -1;
  for (int i = 0; i < DF_DT_COUNT; i++) {
    if (strcmp(name, dtype_info[i].name) == 0) {
      if (out) *out = (df_dtype)i;
      return 0;
    }
  }
  return -1;
}

/* ---- small helpers -------------------------------------------------------------------- */

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  /* One line: a message never carries a newline, whatever the input contained. */
  for (char *p = err; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
}

/* A name from the file, made printable for a one-line message: control bytes become '?',
 * long names are cut (at a UTF-8 boundary) and end in "...". */
#define SHOWN_MAX 160
static const char *shown(const char *s, char buf[SHOWN_MAX]) {
  size_t o = 0, limit = SHOWN_MAX - 4;
  size_t i = 0;
  for (; s[i] && o < limit; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
  }
  if (s[i]) {
    while (o > 0 && ((unsigned char)buf[o - 1] & 0xC0) == 0x80) o--; /* continuation bytes */
    if (o > 0 && ((unsigned char)buf[o - 1] & 0xC0) == 0xC0) o--;    /* dangling lead byte */
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o] = '\0';
  return buf;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static uint64_t rd_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  if (a > SIZE_MAX - b - 2) return NULL;
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  size_t o = a;
  if (a > 0 && dir[a - 1] != '/') p[o++] = '/';
  memcpy(p + o, name, b + 1);
  return p;
}

static const char *json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "object";
  case JSON_ARRAY: return "array";
  case JSON_STRING: return "string";
  case JSON_INTEGER: return "integer";
  case JSON_REAL: return "real";
  case JSON_TRUE:
  case JSON_FALSE: return "boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

/* ---- tensor list ---------------------------------------------------------------------- */

typedef struct {
  df_st_tensor *v;
  size_t n, cap;
} tvec;

static void tvec_truncate(tvec *t, size_t n) {
  for (size_t i = n; i < t->n; i++) free((char *)t->v[i].name);
  t->n = n;
}

static void tvec_free(tvec *t) {
  tvec_truncate(t, 0);
  free(t->v);
  t->v = NULL;
  t->cap = 0;
}

static int tvec_reserve(tvec *t, size_t extra) {
  if (extra <= t->cap - t->n) return 0;
  if (t->n > SIZE_MAX / sizeof(df_st_tensor) - extra) return -1;
  size_t want = t->n + extra;
  if (t->cap <= SIZE_MAX / sizeof(df_st_tensor) / 2 && want < t->cap * 2) want = t->cap * 2;
  df_st_tensor *nv = realloc(t->v, want * sizeof *nv);
  if (!nv) return -1;
  t->v = nv;
  t->cap = want;
  return 0;
}

static int cmp_offset(const void *a, const void *b) {
  const df_st_tensor *x = a, *y = b;
  uint64_t xb = x->file_offset, yb = y->file_offset;
  if (xb != yb) return xb < yb ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b) {
  const df_st_tensor *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return (x->file_index > y->file_index) - (x->file_index < y->file_index);
}

/* ---- one tensor entry ----------------------------------------------------------------- */

/* Validate one header entry into *t (name not set). data_len: bytes after the header. */
static int parse_entry(const char *file, const char *tname, json_t *entry, uint64_t data_len,
                       df_st_tensor *t, char *err, size_t errlen) {
  char nb[SHOWN_MAX];
  const char *sn = shown(tname, nb);
  if (!json_is_object(entry)) {
    set_err(err, errlen, "%s: tensor '%s': entry is a JSON %s, expected an object", file, sn,
            json_type_name(entry));
    return -1;
  }
  json_t *jd = json_object_get(entry, "dtype");
  json_t *js = json_object_get(entry, "shape");
  json_t *jo = json_object_get(entry, "data_offsets");
  const char *missing = !jd ? "dtype" : !js ? "shape" : !jo ? "data_offsets" : NULL;
  if (missing) {
    set_err(err, errlen, "%s: tensor '%s': missing '%s'", file, sn, missing);
    return -1;
  }
  /* dtype */
  if (!json_is_string(jd)) {
    set_err(err, errlen, "%s: tensor '%s': dtype is a JSON %s, expected a string", file, sn,
            json_type_name(jd));
    return -1;
  }
  if (df_dtype_from_name(json_string_value(jd), &t->dtype) != 0) {
    char db[SHOWN_MAX];
    set_err(err, errlen, "%s: tensor '%s': unknown dtype '%s'", file, sn,
            shown(json_string_value(jd), db));
    return -1;
  }
  /* shape */
  if (!json_is_array(js)) {
    set_err(err, errlen, "%s: tensor '%s': shape is a JSON %s, expected an array", file, sn,
            json_type_name(js));
    return -1;
  }
  size_t nd = json_array_size(js);
  if (nd > DF_ST_MAX_DIMS) {
    set_err(err, errlen, "%s: tensor '%s': shape has %zu dims, more than %d", file, sn, nd,
            DF_ST_MAX_DIMS);
    return -1;
  }
  t->ndim = (int)nd;
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(js, i);
    if (!json_is_integer(d)) {
      set_err(err, errlen, "%s: tensor '%s': shape[%zu] is a JSON %s, expected an integer", file,
              sn, i, json_type_name(d));
      return -1;
    }
    json_int_t v = json_integer_value(d);
    if (v < 0) {
      set_err(err, errlen, "%s: tensor '%s': shape[%zu] = %lld is negative", file, sn, i,
              (long long)v);
      return -1;
    }
    t->shape[i] = (int64_t)v;
    uint64_t prod;
    if (__builtin_mul_overflow(numel, (uint64_t)v, &prod)) overflow = true;
    else numel = prod;
  }
  for (size_t i = nd; i < DF_ST_MAX_DIMS; i++) t->shape[i] = 0;
  /* The product is taken left to right and any overflow on the way is an error, as in the
   * reference implementation ([0, 2^40, 2^40] is a valid empty tensor, [2^40, 2^40, 0] is
   * not). */
  uint64_t bits;
  if (overflow || __builtin_mul_overflow(numel, (uint64_t)df_dtype_bits(t->dtype), &bits)) {
    set_err(err, errlen, "%s: tensor '%s': %s shape with %zu dims overflows 64-bit size", file,
            sn, df_dtype_name(t->dtype), nd);
    return -1;
  }
  if (bits % 8 != 0) {
    set_err(err, errlen,
            "%s: tensor '%s': %llu elements of %s are not a whole number of bytes", file, sn,
            (unsigned long long)numel, df_dtype_name(t->dtype));
    return -1;
  }
  t->nbytes = bits / 8;
  /* data_offsets */
  if (!json_is_array(jo) || json_array_size(jo) != 2 ||
      !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1))) {
    set_err(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end] integers", file, sn);
    return -1;
  }
  json_int_t b = json_integer_value(json_array_get(jo, 0));
  json_int_t e = json_integer_value(json_array_get(jo, 1));
  if (b < 0 || e < b) {
    set_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] are not 0 <= begin <= end",
            file, sn, (long long)b, (long long)e);
    return -1;
  }
  uint64_t span = (uint64_t)e - (uint64_t)b;
  if (span != t->nbytes) {
    char sb[8 * 24 + 4];
    size_t o = 0;
    sb[o++] = '[';
    for (int i = 0; i < t->ndim; i++)
      o += (size_t)snprintf(sb + o, sizeof sb - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    snprintf(sb + o, sizeof sb - o, "]");
    set_err(err, errlen,
            "%s: tensor '%s': data_offsets [%lld, %lld] span %llu bytes but %s %s needs %llu",
            file, sn, (long long)b, (long long)e, (unsigned long long)span,
            df_dtype_name(t->dtype), sb, (unsigned long long)t->nbytes);
    return -1;
  }
  if ((uint64_t)e > data_len) {
    set_err(err, errlen,
            "%s: tensor '%s': data_offsets [%lld, %lld] end past data area of %llu bytes", file,
            sn, (long long)b, (long long)e, (unsigned long long)data_len);
    return -1;
  }
  t->file_offset = (uint64_t)b; /* relative for now; made absolute by the caller */
  return 0;
}

/* ---- one file image ------------------------------------------------------------------- */

/* Validate a complete file image and append its tensors to *out (names owned by *out).
 * With set_data, data pointers are set to buf + file_offset; else NULL.
 * On error nothing is appended. */
static int parse_image(const uint8_t *buf, size_t len, const char *file, int file_index,
                       bool set_data, tvec *out, char *err, size_t errlen) {
  int rc = -1;
  json_t *root = NULL;
  size_t start = out->n;
  if (len < 8) {
    set_err(err, errlen, "%s: file is %zu bytes, shorter than the 8-byte header length", file,
            len);
    goto done;
  }
  uint64_t n = rd_le64(buf);
  if (n > ST_MAX_HEADER) {
    set_err(err, errlen, "%s: header length %llu exceeds the 100 MiB limit", file,
            (unsigned long long)n);
    goto done;
  }
  if (n > (uint64_t)len - 8) {
    set_err(err, errlen, "%s: header length %llu past end of file (%zu bytes)", file,
            (unsigned long long)n, len);
    goto done;
  }
  uint64_t data_start = 8 + n;
  uint64_t data_len = (uint64_t)len - data_start;

  json_error_t jerr;
  root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    set_err(err, errlen, "%s: header JSON invalid at line %d column %d: %s", file, jerr.line,
            jerr.column, jerr.text);
    goto done;
  }
  if (!json_is_object(root)) {
    set_err(err, errlen, "%s: header is a JSON %s, expected an object", file,
            json_type_name(root));
    goto done;
  }
  if (tvec_reserve(out, json_object_size(root)) != 0) {
    set_err(err, errlen, "%s: out of memory for %zu header entries", file,
            json_object_size(root));
    goto done;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_is_object(val)) {
        set_err(err, errlen, "%s: __metadata__ is a JSON %s, expected an object of strings",
                file, json_type_name(val));
        goto done;
      }
      const char *mk;
      json_t *mv;
      json_object_foreach(val, mk, mv) {
        if (!json_is_string(mv)) {
          char kb[SHOWN_MAX];
          set_err(err, errlen, "%s: __metadata__ '%s' is a JSON %s, expected a string", file,
                  shown(mk, kb), json_type_name(mv));
          goto done;
        }
      }
      continue;
    }
    df_st_tensor t;
    memset(&t, 0, sizeof t);
    if (parse_entry(file, key, val, data_len, &t, err, errlen) != 0) goto done;
    t.file_offset += data_start; /* <= len: end <= data_len was checked */
    t.file_index = file_index;
    t.data = set_data ? buf + t.file_offset : NULL;
    t.name = strdup(key);
    if (!t.name) {
      set_err(err, errlen, "%s: out of memory", file);
      goto done;
    }
    out->v[out->n++] = t;
  }
  /* Overlap: sorted by (begin, size), each tensor must start at or after the furthest end
   * seen so far. Zero-size tensors hold no bytes and overlap nothing. */
  size_t cnt = out->n - start;
  if (cnt > 1) {
    df_st_tensor *v = out->v + start;
    qsort(v, cnt, sizeof *v, cmp_offset);
    size_t far = 0; /* index of the tensor with the furthest end so far */
    for (size_t i = 1; i < cnt; i++) {
      uint64_t far_end = v[far].file_offset + v[far].nbytes;
      if (v[i].file_offset < far_end && v[i].nbytes > 0 && v[far].nbytes > 0) {
        char a[SHOWN_MAX], b[SHOWN_MAX];
        set_err(err, errlen,
                "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", file,
                shown(v[far].name, a), (unsigned long long)(v[far].file_offset - data_start),
                (unsigned long long)(far_end - data_start), shown(v[i].name, b),
                (unsigned long long)(v[i].file_offset - data_start),
                (unsigned long long)(v[i].file_offset + v[i].nbytes - data_start));
        goto done;
      }
      if (v[i].file_offset + v[i].nbytes > far_end) far = i;
    }
  }
  rc = 0;
done:
  if (rc != 0) tvec_truncate(out, start);
  json_decref(root);
  return rc;
}

int df_st_validate_buffer(const uint8_t *buf, size_t len, const char *name, size_t *n_out,
                          char *err, size_t errlen) {
  tvec t = {0};
  if (!name) name = "(buffer)";
  if (n_out) *n_out = 0;
  if (!buf && len > 0) {
    set_err(err, errlen, "%s: NULL buffer", name);
    return -1;
  }
  static const uint8_t empty[1];
  int rc = parse_image(buf ? buf : empty, len, name, 0, false, &t, err, errlen);
  if (rc == 0 && n_out) *n_out = t.n;
  tvec_free(&t);
  return rc;
}

/* ---- model ---------------------------------------------------------------------------- */

typedef struct {
  char *path;
  const uint8_t *map;
  size_t size;
} st_file;

struct df_st_model {
  st_file *files;
  int n_files;
  df_st_tensor *tensors; /* sorted by name */
  size_t n_tensors;
  uint64_t total_bytes;
};

void df_st_close(df_st_model **mp) {
  if (!mp || !*mp) return;
  df_st_model *m = *mp;
  for (size_t i = 0; i < m->n_tensors; i++) free((char *)m->tensors[i].name);
  free(m->tensors);
  for (int i = 0; i < m->n_files; i++) {
    if (m->files[i].map) munmap((void *)m->files[i].map, m->files[i].size);
    free(m->files[i].path);
  }
  free(m->files);
  free(m);
  *mp = NULL;
}

/* Map `path` read-only into f (f->path takes ownership of `path` even on error). */
static int map_file(char *path, st_file *f, const char *why, char *err, size_t errlen) {
  int rc = -1, fd = -1;
  f->path = path;
  f->map = NULL;
  f->size = 0;
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block: refused below */
  if (fd < 0) {
    set_err(err, errlen, "%s: cannot open%s: %s", path, why, strerror(errno));
    goto done;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s: not a regular file", path);
    goto done;
  }
  if (st.st_size < 8) {
    set_err(err, errlen, "%s: file is %lld bytes, shorter than the 8-byte header length", path,
            (long long)st.st_size);
    goto done;
  }
  if ((uint64_t)st.st_size > SIZE_MAX) {
    set_err(err, errlen, "%s: file of %lld bytes does not fit in the address space", path,
            (long long)st.st_size);
    goto done;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    set_err(err, errlen, "%s: mmap of %lld bytes failed: %s", path, (long long)st.st_size,
            strerror(errno));
    goto done;
  }
  df_st_advise_weights(p, (size_t)st.st_size);
  f->map = p;
  f->size = (size_t)st.st_size;
  rc = 0;
done:
  if (fd >= 0) close(fd);
  return rc;
}

void df_st_advise_weights(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
  if (p && n) (void)madvise(p, n, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

/* Sort the collected tensors by name, reject duplicates, and hand everything to a model. */
static int finish_model(st_file *files, int n_files, tvec *t, df_st_model **out, char *err,
                        size_t errlen) {
  if (t->n > 1) qsort(t->v, t->n, sizeof *t->v, cmp_name);
  for (size_t i = 1; i < t->n; i++) {
    if (strcmp(t->v[i - 1].name, t->v[i].name) == 0) {
      char nb[SHOWN_MAX];
      set_err(err, errlen, "%s: tensor '%s' duplicates the one in %s",
              base_name(files[t->v[i].file_index].path), shown(t->v[i].name, nb),
              base_name(files[t->v[i - 1].file_index].path));
      return -1;
    }
  }
  df_st_model *m = calloc(1, sizeof *m);
  if (!m) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  m->files = files;
  m->n_files = n_files;
  m->tensors = t->v;
  m->n_tensors = t->n;
  for (size_t i = 0; i < t->n; i++) m->total_bytes += t->v[i].nbytes; /* sum <= file sizes */
  t->v = NULL;
  t->n = t->cap = 0;
  *out = m;
  return 0;
}

static void free_files(st_file *files, int n) {
  if (!files) return;
  for (int i = 0; i < n; i++) {
    if (files[i].map) munmap((void *)files[i].map, files[i].size);
    free(files[i].path);
  }
  free(files);
}

int df_st_open_file(const char *path, df_st_model **out, char *err, size_t errlen) {
  int rc = -1;
  tvec t = {0};
  st_file *files = NULL;
  if (out) *out = NULL;
  if (!path || !out) {
    set_err(err, errlen, "df_st_open_file: NULL argument");
    goto done;
  }
  files = calloc(1, sizeof *files);
  char *p = strdup(path);
  if (!files || !p) {
    free(p);
    set_err(err, errlen, "%s: out of memory", path);
    goto done;
  }
  if (map_file(p, &files[0], "", err, errlen) != 0) goto done;
  if (parse_image(files[0].map, files[0].size, files[0].path, 0, true, &t, err, errlen) != 0)
    goto done;
  if (finish_model(files, 1, &t, out, err, errlen) != 0) goto done;
  files = NULL;
  rc = 0;
done:
  free_files(files, 1);
  tvec_free(&t);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Read a whole (small) file; *buf is NUL-terminated and owned by the caller. */
static int read_small_file(const char *path, uint64_t limit, char **buf, size_t *len, char *err,
                           size_t errlen) {
  int rc = -1;
  /* O_NONBLOCK: a FIFO in the file's place must not block the open (refused below) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f && fd >= 0) close(fd);
  char *b = NULL;
  *buf = NULL;
  if (!f) {
    set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s: not a regular file", path);
    goto done;
  }
  if (st.st_size < 0 || (uint64_t)st.st_size > limit) {
    set_err(err, errlen, "%s: %lld bytes, more than the %llu-byte limit", path,
            (long long)st.st_size, (unsigned long long)limit);
    goto done;
  }
  size_t n = (size_t)st.st_size;
  b = malloc(n + 1);
  if (!b) {
    set_err(err, errlen, "%s: out of memory", path);
    goto done;
  }
  if (fread(b, 1, n, f) != n) {
    set_err(err, errlen, "%s: read failed", path);
    goto done;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  b = NULL;
  rc = 0;
done:
  free(b);
  if (f) fclose(f);
  return rc;
}

/* A weight_map value must name a file directly inside the model folder. */
static bool plain_file_name(const char *s) {
  return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static const df_st_tensor *find_in(const df_st_tensor *v, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, v[mid].name);
    if (c == 0) return &v[mid];
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

static int open_indexed(const char *dir, const char *index_path, df_st_model **out, char *err,
                        size_t errlen) {
  int rc = -1;
  char *text = NULL;
  size_t text_len = 0;
  json_t *root = NULL;
  const char **names = NULL;
  st_file *files = NULL;
  int n_files = 0;
  tvec t = {0};
  df_st_model *m = NULL;
  const char *idx = ST_INDEX_NAME;

  if (read_small_file(index_path, ST_MAX_INDEX, &text, &text_len, err, errlen) != 0) goto done;
  json_error_t jerr;
  root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    set_err(err, errlen, "%s:%d:%d: JSON syntax error: %s", idx, jerr.line, jerr.column,
            jerr.text);
    goto done;
  }
  json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(wm)) {
    set_err(err, errlen, "%s: 'weight_map' %s", idx,
            !json_is_object(root) ? "missing: the file is not a JSON object"
            : wm                  ? "is not an object"
                                  : "missing");
    goto done;
  }
  size_t n_map = json_object_size(wm);
  if (n_map == 0) {
    set_err(err, errlen, "%s: 'weight_map' is empty", idx);
    goto done;
  }
  names = malloc(n_map * sizeof *names);
  if (!names) {
    set_err(err, errlen, "%s: out of memory", idx);
    goto done;
  }
  size_t k = 0;
  const char *key;
  json_t *val;
  json_object_foreach(wm, key, val) {
    char kb[SHOWN_MAX], vb[SHOWN_MAX];
    if (!json_is_string(val)) {
      set_err(err, errlen, "%s: weight_map['%s'] is a JSON %s, expected a file name", idx,
              shown(key, kb), json_type_name(val));
      goto done;
    }
    if (!plain_file_name(json_string_value(val))) {
      set_err(err, errlen, "%s: weight_map['%s'] = '%s' is not a file name in the model folder",
              idx, shown(key, kb), shown(json_string_value(val), vb));
      goto done;
    }
    names[k++] = json_string_value(val);
  }
  qsort(names, k, sizeof *names, cmp_str);
  size_t uniq = 0;
  for (size_t i = 0; i < k; i++)
    if (uniq == 0 || strcmp(names[uniq - 1], names[i]) != 0) names[uniq++] = names[i];
  if (uniq > (size_t)INT32_MAX) {
    set_err(err, errlen, "%s: too many files", idx);
    goto done;
  }
  files = calloc(uniq, sizeof *files);
  if (!files) {
    set_err(err, errlen, "%s: out of memory", idx);
    goto done;
  }
  for (size_t i = 0; i < uniq; i++) {
    char *p = path_join(dir, names[i]);
    if (!p) {
      set_err(err, errlen, "%s: out of memory", idx);
      goto done;
    }
    n_files++;
    if (map_file(p, &files[i], " (named by " ST_INDEX_NAME ")", err, errlen) != 0) goto done;
    if (parse_image(files[i].map, files[i].size, files[i].path, (int)i, true, &t, err,
                    errlen) != 0)
      goto done;
  }
  if (finish_model(files, n_files, &t, &m, err, errlen) != 0) goto done;
  files = NULL; /* owned by m */
  /* Every tensor the index names must be in the file it names. */
  json_object_foreach(wm, key, val) {
    const char *want = json_string_value(val);
    const df_st_tensor *ts = find_in(m->tensors, m->n_tensors, key);
    char kb[SHOWN_MAX];
    if (!ts) {
      set_err(err, errlen, "%s: tensor '%s' named by %s is missing from this file", want,
              shown(key, kb), idx);
      goto done;
    }
    const char *have = base_name(m->files[ts->file_index].path);
    if (strcmp(have, want) != 0) {
      set_err(err, errlen, "%s: tensor '%s' is mapped to %s but stored in %s", idx,
              shown(key, kb), want, have);
      goto done;
    }
  }
  *out = m;
  m = NULL;
  rc = 0;
done:
  df_st_close(&m);
  free_files(files, n_files);
  tvec_free(&t);
  free(names);
  json_decref(root);
  free(text);
  return rc;
}

static bool is_regular(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

int df_st_open(const char *dir, df_st_model **out, char *err, size_t errlen) {
  int rc = -1;
  char *p = NULL;
  DIR *d = NULL;
  char *found = NULL;
  if (out) *out = NULL;
  if (!dir || !out) {
    set_err(err, errlen, "df_st_open: NULL argument");
    goto done;
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    set_err(err, errlen, "%s: cannot open model folder: %s", dir, strerror(errno));
    goto done;
  }
  if (S_ISREG(st.st_mode)) {
    rc = df_st_open_file(dir, out, err, errlen);
    goto done;
  }
  p = path_join(dir, ST_INDEX_NAME);
  if (!p) {
    set_err(err, errlen, "out of memory");
    goto done;
  }
  if (access(p, F_OK) == 0) {
    rc = open_indexed(dir, p, out, err, errlen);
    goto done;
  }
  free(p);
  p = path_join(dir, ST_SINGLE_NAME);
  if (!p) {
    set_err(err, errlen, "out of memory");
    goto done;
  }
  if (access(p, F_OK) == 0) {
    rc = df_st_open_file(p, out, err, errlen);
    goto done;
  }
  d = opendir(dir);
  if (!d) {
    set_err(err, errlen, "%s: cannot list model folder: %s", dir, strerror(errno));
    goto done;
  }
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".safetensors")) continue;
    char *q = path_join(dir, e->d_name);
    if (!q) {
      set_err(err, errlen, "out of memory");
      goto done;
    }
    if (!is_regular(q)) {
      free(q);
      continue;
    }
    count++;
    if (!found) found = q;
    else free(q);
  }
  if (count == 0) {
    set_err(err, errlen, "%s: no " ST_INDEX_NAME ", " ST_SINGLE_NAME " or *.safetensors file",
            dir);
    goto done;
  }
  if (count > 1) {
    set_err(err, errlen, "%s: %d *.safetensors files but no " ST_INDEX_NAME, dir, count);
    goto done;
  }
  rc = df_st_open_file(found, out, err, errlen);
done:
  if (d) closedir(d);
  free(found);
  free(p);
  return rc;
}

/* ---- accessors ------------------------------------------------------------------------ */

const df_st_tensor *df_st_find(const df_st_model *m, const char *name) {
  if (!m || !name) return NULL;
  return find_in(m->tensors, m->n_tensors, name);
}

size_t df_st_count(const df_st_model *m) { return m ? m->n_tensors : 0; }

const df_st_tensor *df_st_at(const df_st_model *m, size_t i) {
  return m && i < m->n_tensors ? &m->tensors[i] : NULL;
}

int df_st_file_count(const df_st_model *m) { return m ? m->n_files : 0; }

const char *df_st_file_path(const df_st_model *m, int i) {
  return m && i >= 0 && i < m->n_files ? m->files[i].path : NULL;
}

uint64_t df_st_total_bytes(const df_st_model *m) { return m ? m->total_bytes : 0; }

const void *df_st_file_map(const df_st_model *m, int i, uint64_t *size_out) {
  if (!m || i < 0 || i >= m->n_files) {
    if (size_out) *size_out = 0;
    return NULL;
  }
  if (size_out) *size_out = m->files[i].size;
  return m->files[i].map;
}
