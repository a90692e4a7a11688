/* tests/test_safetensors.c — engine/safetensors.{h,c}: dtypes, the header validator on
 * malformed and well-formed byte images (in memory and as files), sharded checkpoints
 * through model.safetensors.index.json, and zero-copy mapping.
 *
 * Every image is built here, byte by byte; nothing is read from fixtures. Temporary files go
 * under a fresh mkdtemp() folder that each test removes.
 */
#define _XOPEN_SOURCE 700

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/safetensors.h"

/* ---- helpers -------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static char *make_tmpdir(void) {
  char *d = strdup("/tmp/df_st_test_XXXXXX");
  assert_non_null(d);
  assert_non_null(mkdtemp(d));
  return d;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char *p = join(dir, name);
  write_bytes(p, text, strlen(text));
  free(p);
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Data byte k of an image made with `seed`. */
static uint8_t data_byte(uint8_t seed, size_t k) { return (uint8_t)(seed + k * 7u); }

/* [le64 declared][header bytes][data_len pattern bytes], minus the last `cut` bytes. */
static uint8_t *image(const char *hdr, size_t hlen, uint64_t declared, size_t data_len,
                      size_t cut, size_t *len_out) {
  size_t full = 8 + hlen + data_len;
  uint8_t *b = calloc(1, full ? full : 1);
  assert_non_null(b);
  put_le64(b, declared);
  memcpy(b + 8, hdr, hlen);
  for (size_t k = 0; k < data_len; k++) b[8 + hlen + k] = data_byte(0, k);
  assert_true(cut <= full);
  *len_out = full - cut;
  return b;
}

static void assert_err(int rc, const char *err, const char *expect, const char *what) {
  if (rc != -1 || strstr(err, expect) == NULL || strchr(err, '\n') != NULL) {
    print_error("case '%s': rc %d, err \"%s\", expected -1 and \"%s\"\n", what, rc, err, expect);
    fail();
  }
}

/* ---- dtypes --------------------------------------------------------------------------- */

static void test_dtypes(void **state) {
  (void)state;
  static const struct {
    df_dtype dt;
    const char *name;
    size_t size;
    int bits;
  } want[] = {
      {DF_DT_BF16, "BF16", 2, 16},       {DF_DT_F16, "F16", 2, 16},
      {DF_DT_F32, "F32", 4, 32},         {DF_DT_F64, "F64", 8, 64},
      {DF_DT_F8_E4M3, "F8_E4M3", 1, 8},  {DF_DT_F8_E5M2, "F8_E5M2", 1, 8},
      {DF_DT_I8, "I8", 1, 8},            {DF_DT_U8, "U8", 1, 8},
      {DF_DT_I16, "I16", 2, 16},         {DF_DT_U16, "U16", 2, 16},
      {DF_DT_I32, "I32", 4, 32},         {DF_DT_U32, "U32", 4, 32},
      {DF_DT_I64, "I64", 8, 64},         {DF_DT_U64, "U64", 8, 64},
      {DF_DT_BOOL, "BOOL", 1, 8},        {DF_DT_F8_E8M0, "F8_E8M0", 1, 8},
      {DF_DT_C64, "C64", 8, 64},         {DF_DT_F4, "F4", 0, 4},
      {DF_DT_F6_E2M3, "F6_E2M3", 0, 6},  {DF_DT_F6_E3M2, "F6_E3M2", 0, 6},
  };
  assert_int_equal(sizeof want / sizeof *want, DF_DT_COUNT);
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    assert_string_equal(df_dtype_name(want[i].dt), want[i].name);
    assert_int_equal(df_dtype_size(want[i].dt), want[i].size);
    assert_int_equal(df_dtype_bits(want[i].dt), want[i].bits);
    df_dtype got = DF_DT_COUNT;
    assert_int_equal(df_dtype_from_name(want[i].name, &got), 0);
    assert_int_equal(got, want[i].dt);
    assert_int_equal(df_dtype_is_supported(want[i].dt),
                     want[i].dt == DF_DT_BF16 || want[i].dt == DF_DT_F16 ||
                         want[i].dt == DF_DT_F32);
  }
  df_dtype got = DF_DT_F32;
  assert_int_equal(df_dtype_from_name("bf16", &got), -1);
  assert_int_equal(df_dtype_from_name("", &got), -1);
  assert_int_equal(df_dtype_from_name(NULL, &got), -1);
  assert_int_equal(got, DF_DT_F32);
  assert_string_equal(df_dtype_name(DF_DT_COUNT), "?");
  assert_string_equal(df_dtype_name((df_dtype)-1), "?");
  assert_int_equal(df_dtype_size(DF_DT_COUNT), 0);
  assert_int_equal(df_dtype_bits(DF_DT_COUNT), 0);
  assert_false(df_dtype_is_supported(DF_DT_COUNT));
}

/* ---- malformed images ----------------------------------------------------------------- */

#define KEEP 0
#define T(n, dt, sh, b, e) "\"" n "\":{\"dtype\":\"" dt "\",\"shape\":" sh ",\"data_offsets\":[" #b "," #e "]}"

typedef struct {
  const char *what;
  const char *hdr; /* header bytes */
  size_t hlen;     /* 0: strlen(hdr) */
  bool set_decl;   /* declared header length: decl when set, else hlen */
  uint64_t decl;
  size_t data_len; /* pattern bytes after the header */
  size_t cut;      /* bytes removed from the end of the image (KEEP: none) */
  const char *expect;
} bad_case;

static const bad_case bad_cases[] = {
    {"empty file", "", 0, false, 0, 0, 8,
     "t.safetensors: file is 0 bytes, shorter than the 8-byte header length"},
    {"5-byte file", "", 0, false, 0, 0, 3,
     "t.safetensors: file is 5 bytes, shorter than the 8-byte header length"},
    {"header length past end", "{}", 0, true, 1000, 0, KEEP,
     "t.safetensors: header length 1000 past end of file (10 bytes)"},
    {"header length one past end", "{}", 0, true, 3, 0, KEEP,
     "header length 3 past end of file (10 bytes)"},
    {"header length over 100 MiB", "{}", 0, true, 100u * 1024 * 1024 + 1, 0, KEEP,
     "t.safetensors: header length 104857601 exceeds the 100 MiB limit"},
    {"header length 2^64-1", "{}", 0, true, UINT64_MAX, 0, KEEP,
     "header length 18446744073709551615 exceeds the 100 MiB limit"},
    {"truncated inside header", "{" T("w", "F32", "[2]", 0, 8) "}", 0, false, 0, 8, 8 + 40,
     "t.safetensors: header length 54 past end of file (22 bytes)"},
    {"truncated inside data", "{" T("w", "F32", "[2]", 0, 8) "}", 0, false, 0, 8, 3,
     "t.safetensors: tensor 'w': data_offsets [0, 8] end past data area of 5 bytes"},
    {"empty header", "", 0, false, 0, 0, KEEP, "t.safetensors: header JSON invalid at line 1"},
    {"invalid JSON", "{\"a\": ", 0, false, 0, 0, KEEP, "header JSON invalid at line 1 column"},
    {"trailing garbage", "{} x", 0, false, 0, 0, KEEP, "header JSON invalid"},
    {"header is an array", "[1, 2]", 0, false, 0, 0, KEEP,
     "t.safetensors: header is a JSON array, expected an object"},
    {"invalid UTF-8", "{\"\xff\":1}", 0, false, 0, 0, KEEP, "header JSON invalid"},
    {"NUL inside header", "{\"a\0\":1}", 8, false, 0, 0, KEEP, "header JSON invalid"},
    {"escaped NUL in name", "{\"a\\u0000b\":1}", 0, false, 0, 0, KEEP, "header JSON invalid"},
    {"duplicate tensor name", "{" T("w", "U8", "[1]", 0, 1) "," T("w", "U8", "[1]", 1, 2) "}", 0,
     false, 0, 2, KEEP, "duplicate object key"},
    {"unknown dtype", "{" T("w", "Q4_K", "[2]", 0, 2) "}", 0, false, 0, 2, KEEP,
     "t.safetensors: tensor 'w': unknown dtype 'Q4_K'"},
    {"dtype wrong case", "{" T("w", "bf16", "[2]", 0, 4) "}", 0, false, 0, 4, KEEP,
     "tensor 'w': unknown dtype 'bf16'"},
    {"dtype not a string", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 0, false,
     0, 1, KEEP, "tensor 'w': dtype is a JSON integer, expected a string"},
    {"entry not an object", "{\"w\":1}", 0, false, 0, 0, KEEP,
     "tensor 'w': entry is a JSON integer, expected an object"},
    {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 0, false, 0, 1, KEEP,
     "tensor 'w': missing 'dtype'"},
    {"missing shape", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 0, false, 0, 1, KEEP,
     "tensor 'w': missing 'shape'"},
    {"missing data_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, false, 0, 1, KEEP,
     "tensor 'w': missing 'data_offsets'"},
    {"shape not a list", "{" T("w", "U8", "\"1\"", 0, 1) "}", 0, false, 0, 1, KEEP,
     "tensor 'w': shape is a JSON string, expected an array"},
    {"negative dim", "{" T("w", "U8", "[2,-2]", 0, 4) "}", 0, false, 0, 4, KEEP,
     "tensor 'w': shape[1] = -2 is negative"},
    {"real dim", "{" T("w", "U8", "[2.0]", 0, 2) "}", 0, false, 0, 2, KEEP,
     "tensor 'w': shape[0] is a JSON real, expected an integer"},
    {"nine dims", "{" T("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 0, false, 0, 1, KEEP,
     "tensor 'w': shape has 9 dims, more than 8"},
    {"element count overflow", "{" T("w", "U8", "[4294967296,4294967296]", 0, 1) "}", 0, false, 0,
     1, KEEP, "tensor 'w': U8 shape with 2 dims overflows 64-bit size"},
    {"overflow before a zero dim", "{" T("w", "U8", "[4294967296,4294967296,0]", 0, 0) "}", 0,
     false, 0, 0, KEEP, "overflows 64-bit size"},
    {"byte size overflow", "{" T("w", "F64", "[2305843009213693952]", 0, 1) "}", 0, false, 0, 1,
     KEEP, "tensor 'w': F64 shape with 1 dims overflows 64-bit size"},
    {"huge dim", "{" T("w", "U8", "[1152921504606846976]", 0, 1) "}", 0, false, 0, 1, KEEP,
     "span 1 bytes but U8 [1152921504606846976] needs 1152921504606846976"},
    {"huge element count", "{" T("w", "U8", "[9223372036854775807]", 0, 1) "}", 0, false, 0, 1,
     KEEP, "U8 shape with 1 dims overflows 64-bit size"},
    {"dim too big for JSON", "{" T("w", "U8", "[99999999999999999999]", 0, 1) "}", 0, false, 0, 1,
     KEEP, "header JSON invalid"},
    {"shape/offset size mismatch", "{" T("w", "F32", "[2,2]", 0, 12) "}", 0, false, 0, 16, KEEP,
     "t.safetensors: tensor 'w': data_offsets [0, 12] span 12 bytes but F32 [2, 2] needs 16"},
    {"scalar size mismatch", "{" T("s", "BF16", "[]", 0, 4) "}", 0, false, 0, 4, KEEP,
     "tensor 's': data_offsets [0, 4] span 4 bytes but BF16 [] needs 2"},
    {"sub-byte not whole bytes", "{" T("w", "F4", "[3]", 0, 2) "}", 0, false, 0, 2, KEEP,
     "tensor 'w': 3 elements of F4 are not a whole number of bytes"},
    {"begin after end", "{" T("w", "U8", "[0]", 8, 4) "}", 0, false, 0, 8, KEEP,
     "tensor 'w': data_offsets [8, 4] are not 0 <= begin <= end"},
    {"negative begin", "{" T("w", "U8", "[4]", -1, 3) "}", 0, false, 0, 8, KEEP,
     "data_offsets [-1, 3] are not 0 <= begin <= end"},
    {"three offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 0,
     false, 0, 2, KEEP, "tensor 'w': data_offsets must be [begin, end] integers"},
    {"real offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}", 0,
     false, 0, 2, KEEP, "data_offsets must be [begin, end] integers"},
    {"offsets past data area",
     "{" T("model.layers.0.mlp.gate.weight", "BF16", "[50]", 100, 200) "}", 0, false, 0, 150,
     KEEP,
     "t.safetensors: tensor 'model.layers.0.mlp.gate.weight': data_offsets [100, 200] end past "
     "data area of 150 bytes"},
    {"offsets past end by one", "{" T("w", "U8", "[4]", 0, 4) "}", 0, false, 0, 3, KEEP,
     "data_offsets [0, 4] end past data area of 3 bytes"},
    {"overlapping tensors", "{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[2]", 8, 16) "}", 0,
     false, 0, 16, KEEP, "t.safetensors: tensors 'a' [0, 16] and 'b' [8, 16] overlap"},
    {"identical ranges", "{" T("b", "U8", "[4]", 4, 8) "," T("a", "U8", "[4]", 4, 8) "}", 0, false,
     0, 8, KEEP, "tensors 'a' [4, 8] and 'b' [4, 8] overlap"},
    {"overlap behind a gap",
     "{" T("big", "U8", "[32]", 0, 32) "," T("x", "U8", "[4]", 8, 12) "," T("y", "U8", "[4]", 16,
                                                                            20) "}",
     0, false, 0, 32, KEEP, "tensors 'big' [0, 32] and 'x' [8, 12] overlap"},
    {"overlap past an empty tensor",
     "{" T("a", "U8", "[10]", 0, 10) "," T("z", "U8", "[0]", 2, 2) "," T("c", "U8", "[4]", 8,
                                                                         12) "}",
     0, false, 0, 12, KEEP, "tensors 'a' [0, 10] and 'c' [8, 12] overlap"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, false, 0, 0, KEEP,
     "t.safetensors: __metadata__ is a JSON array, expected an object of strings"},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, false, 0, 0, KEEP,
     "__metadata__ 'format' is a JSON integer, expected a string"},
    {"control bytes in a name", "{" T("a\\nb", "X", "[1]", 0, 1) "}", 0, false, 0, 1, KEEP,
     "tensor 'a?b': unknown dtype 'X'"},
};

static void test_malformed_buffers(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    const bad_case *c = &bad_cases[i];
    size_t hlen = c->hlen ? c->hlen : strlen(c->hdr);
    size_t len;
    uint8_t *img = image(c->hdr, hlen, c->set_decl ? c->decl : hlen, c->data_len, c->cut, &len);
    char err[512] = "";
    size_t n = 99;
    int rc = df_st_validate_buffer(img, len, "t.safetensors", &n, err, sizeof err);
    assert_err(rc, err, c->expect, c->what);
    assert_int_equal(n, 0);
    /* An exact-size heap copy: a read past the end shows under ASan / valgrind. */
    uint8_t *exact = malloc(len ? len : 1);
    assert_non_null(exact);
    memcpy(exact, img, len);
    rc = df_st_validate_buffer(exact, len, "t.safetensors", NULL, err, sizeof err);
    assert_err(rc, err, c->expect, c->what);
    /* Tiny error buffers are still terminated and never overrun. */
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(df_st_validate_buffer(exact, len, "t.safetensors", NULL, small, 4), -1);
    assert_int_equal(small[3], '\0');
    assert_int_equal(small[4], 'x');
    assert_int_equal(df_st_validate_buffer(exact, len, "t.safetensors", NULL, NULL, 0), -1);
    free(exact);
    free(img);
  }
}

/* The same table through df_st_open_file and df_st_open on real files. */
static void test_malformed_files(void **state) {
  (void)state;
  char *dir = make_tmpdir();
  char *path = join(dir, "t.safetensors");
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    const bad_case *c = &bad_cases[i];
    size_t hlen = c->hlen ? c->hlen : strlen(c->hdr);
    size_t len;
    uint8_t *img = image(c->hdr, hlen, c->set_decl ? c->decl : hlen, c->data_len, c->cut, &len);
    write_bytes(path, img, len);
    free(img);
    char err[512] = "";
    df_st_model *m = (df_st_model *)&err; /* must be reset to NULL */
    int rc = df_st_open_file(path, &m, err, sizeof err);
    assert_err(rc, err, c->expect, c->what);
    assert_null(m);
    assert_non_null(strstr(err, dir)); /* the message names the file as opened */
    m = (df_st_model *)&err;
    rc = df_st_open(dir, &m, err, sizeof err); /* the single *.safetensors in the folder */
    assert_err(rc, err, c->expect, c->what);
    assert_null(m);
  }
  free(path);
  rm_rf(dir);
  free(dir);
}

/* ---- well-formed images --------------------------------------------------------------- */

typedef struct {
  const char *what;
  const char *hdr;
  size_t data_len;
  size_t want_n;
} good_case;

static const good_case good_cases[] = {
    {"empty header object", "{}", 0, 0},
    {"space padding", "{}      ", 0, 0},
    {"metadata only", "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"\"}}", 0, 0},
    {"trailing data bytes", "{}", 100, 0},
    {"scalar and empty tensors",
     "{" T("s", "F32", "[]", 0, 4) "," T("e", "BF16", "[0,7]", 4, 4) "," T("z", "U8", "[0]", 4,
                                                                          4) "}",
     4, 3},
    {"zero dim before huge dims", "{" T("e", "U8", "[0,4294967296,4294967296]", 0, 0) "}", 0, 1},
    {"empty tensor inside another", "{" T("a", "U8", "[8]", 0, 8) "," T("z", "U8", "[0]", 4, 4) "}",
     8, 2},
    {"gaps between tensors", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 8, 12) "}", 16,
     2},
    {"unsorted offsets", "{" T("b", "U8", "[4]", 4, 8) "," T("a", "U8", "[4]", 0, 4) "}", 8, 2},
    {"extra keys in an entry",
     "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"note\":1}}", 2, 1},
    {"every dtype",
     "{" T("bool", "BOOL", "[8]", 0, 8) "," T("u8", "U8", "[8]", 8, 16) "," T(
         "i8", "I8", "[8]", 16, 24) "," T("f8a", "F8_E5M2", "[8]", 24,
                                          32) "," T("f8b", "F8_E4M3", "[8]", 32,
                                                    40) "," T("f8c", "F8_E8M0", "[8]", 40, 48) "," T("i16", "I16", "[8]", 48, 64) "," T("u16", "U16", "[8]", 64, 80) "," T("f16", "F16", "[8]", 80, 96) "," T("bf16", "BF16", "[8]", 96, 112) "," T("i32", "I32", "[8]", 112, 144) "," T("u32", "U32", "[8]", 144, 176) "," T("f32", "F32", "[8]", 176, 208) "," T("c64", "C64", "[8]", 208, 272) "," T("f64", "F64", "[8]", 272, 336) "," T("i64", "I64", "[8]", 336, 400) "," T("u64", "U64", "[8]", 400, 464) "," T("f4", "F4", "[8]", 464, 468) "," T("f6a", "F6_E2M3", "[8]", 468, 474) "," T("f6b", "F6_E3M2", "[8]", 474, 480) "}",
     480, 20},
    {"eight dims", "{" T("w", "U8", "[1,2,1,2,1,2,1,2]", 0, 16) "}", 16, 1},
    {"UTF-8 name", "{" T("w\xc3\xa9ight", "U8", "[1]", 0, 1) "}", 1, 1},
};

static void test_wellformed_buffers(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof good_cases / sizeof *good_cases; i++) {
    const good_case *c = &good_cases[i];
    size_t hlen = strlen(c->hdr), len;
    uint8_t *img = image(c->hdr, hlen, hlen, c->data_len, KEEP, &len);
    char err[512] = "";
    size_t n = 12345;
    int rc = df_st_validate_buffer(img, len, "ok.safetensors", &n, err, sizeof err);
    if (rc != 0 || n != c->want_n) {
      print_error("case '%s': rc %d n %zu err \"%s\"\n", c->what, rc, n, err);
      fail();
    }
    free(img);
  }
  char err[128];
  assert_int_equal(df_st_validate_buffer(NULL, 0, NULL, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "shorter than the 8-byte header length"));
}

/* ---- checkpoints on disk -------------------------------------------------------------- */

typedef struct {
  const char *name, *dtype, *shape; /* shape as JSON */
  size_t nbytes;
} tspec;

/* Write a safetensors file: tensors laid out in the given order, header space-padded to a
 * multiple of 8, data byte k = data_byte(seed, k). Returns the header length. */
static size_t write_st(const char *dir, const char *fname, const tspec *t, int n, uint8_t seed) {
  char hdr[4096];
  size_t o = 0, off = 0;
  o += (size_t)snprintf(hdr + o, sizeof hdr - o, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < n; i++) {
    o += (size_t)snprintf(hdr + o, sizeof hdr - o,
                          ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                          t[i].name, t[i].dtype, t[i].shape, off, off + t[i].nbytes);
    off += t[i].nbytes;
  }
  hdr[o++] = '}';
  while (o % 8) hdr[o++] = ' ';
  assert_true(o < sizeof hdr);
  size_t len = 8 + o + off;
  uint8_t *b = malloc(len);
  assert_non_null(b);
  put_le64(b, o);
  memcpy(b + 8, hdr, o);
  for (size_t k = 0; k < off; k++) b[8 + o + k] = data_byte(seed, k);
  char *p = join(dir, fname);
  write_bytes(p, b, len);
  free(p);
  free(b);
  return o;
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static const tspec shard1[] = {
    {"model.embed_tokens.weight", "BF16", "[4,3]", 24},
    {"model.norm.weight", "F32", "[3]", 12},
};
static const tspec shard2[] = {
    {"model.layers.0.mlp.gate.weight", "F16", "[2,2,2]", 16},
    {"lm_head.weight", "BF16", "[2,3]", 12},
    {"model.layers.0.step", "I64", "[]", 8},
};

static const char *index_json =
    "{\"metadata\":{\"total_size\":72},\"weight_map\":{"
    "\"lm_head.weight\":\"" SHARD2 "\","
    "\"model.embed_tokens.weight\":\"" SHARD1 "\","
    "\"model.layers.0.mlp.gate.weight\":\"" SHARD2 "\","
    "\"model.layers.0.step\":\"" SHARD2 "\","
    "\"model.norm.weight\":\"" SHARD1 "\"}}";

static void test_sharded_checkpoint(void **state) {
  (void)state;
  char *dir = make_tmpdir();
  size_t h1 = write_st(dir, SHARD1, shard1, 2, 11);
  size_t h2 = write_st(dir, SHARD2, shard2, 3, 200);
  write_text(dir, "model.safetensors.index.json", index_json);
  write_text(dir, "config.json", "{}"); /* other files in the folder are ignored */

  df_st_model *m = NULL;
  char err[512] = "";
  assert_int_equal(df_st_open(dir, &m, err, sizeof err), 0);
  assert_string_equal(err, "");
  assert_non_null(m);

  assert_int_equal(df_st_file_count(m), 2);
  char *p1 = join(dir, SHARD1), *p2 = join(dir, SHARD2);
  assert_string_equal(df_st_file_path(m, 0), p1);
  assert_string_equal(df_st_file_path(m, 1), p2);
  assert_null(df_st_file_path(m, 2));
  assert_null(df_st_file_path(m, -1));
  uint64_t size0 = 0, size1 = 0;
  const uint8_t *base0 = df_st_file_map(m, 0, &size0);
  const uint8_t *base1 = df_st_file_map(m, 1, &size1);
  assert_non_null(base0);
  assert_non_null(base1);
  assert_int_equal(size0, 8 + h1 + 36);
  assert_int_equal(size1, 8 + h2 + 36);
  uint64_t sz = 7;
  assert_null(df_st_file_map(m, 2, &sz));
  assert_int_equal(sz, 0);
  /* The mapping is the file itself: its first 8 bytes are the header length. */
  assert_int_equal(get_le64(base0), h1);
  assert_int_equal(get_le64(base1), h2);

  assert_int_equal(df_st_count(m), 5);
  assert_int_equal(df_st_total_bytes(m), 72);
  static const struct {
    const char *name;
    df_dtype dt;
    int ndim;
    int64_t shape[3];
    uint64_t nbytes;
    int file;
    uint64_t begin;
    uint8_t seed;
  } want[] = {
      /* name order */
      {"lm_head.weight", DF_DT_BF16, 2, {2, 3}, 12, 1, 16, 200},
      {"model.embed_tokens.weight", DF_DT_BF16, 2, {4, 3}, 24, 0, 0, 11},
      {"model.layers.0.mlp.gate.weight", DF_DT_F16, 3, {2, 2, 2}, 16, 1, 0, 200},
      {"model.layers.0.step", DF_DT_I64, 0, {0}, 8, 1, 28, 200},
      {"model.norm.weight", DF_DT_F32, 1, {3}, 12, 0, 24, 11},
  };
  for (size_t i = 0; i < 5; i++) {
    const df_st_tensor *t = df_st_at(m, i);
    assert_non_null(t);
    assert_string_equal(t->name, want[i].name);
    assert_ptr_equal(df_st_find(m, want[i].name), t);
    assert_int_equal(t->dtype, want[i].dt);
    assert_int_equal(t->ndim, want[i].ndim);
    for (int d = 0; d < DF_ST_MAX_DIMS; d++)
      assert_int_equal(t->shape[d], d < want[i].ndim ? want[i].shape[d] : 0);
    assert_int_equal(t->nbytes, want[i].nbytes);
    assert_int_equal(t->file_index, want[i].file);
    uint64_t hdr = want[i].file == 0 ? h1 : h2;
    assert_int_equal(t->file_offset, 8 + hdr + want[i].begin);
    const uint8_t *base = want[i].file == 0 ? base0 : base1;
    uint64_t size = want[i].file == 0 ? size0 : size1;
    /* zero copy: the data pointer is the mapping base plus the file offset */
    assert_ptr_equal(t->data, base + t->file_offset);
    assert_true(t->file_offset + t->nbytes <= size);
    const uint8_t *d = t->data;
    for (uint64_t k = 0; k < t->nbytes; k++)
      assert_int_equal(d[k], data_byte(want[i].seed, want[i].begin + k));
  }
  assert_null(df_st_at(m, 5));
  assert_null(df_st_find(m, "model.norm"));
  assert_null(df_st_find(m, "model.norm.weight "));
  assert_null(df_st_find(m, ""));

  /* Zero copy, proven: bytes written to the file after opening show through the pointer
   * (MAP_SHARED of the file, not a private copy). */
  const df_st_tensor *norm = df_st_find(m, "model.norm.weight");
  int fd = open(p1, O_WRONLY);
  assert_true(fd >= 0);
  const uint8_t patch[4] = {0xde, 0xad, 0xbe, 0xef};
  assert_int_equal(pwrite(fd, patch, 4, (off_t)norm->file_offset), 4);
  close(fd);
  assert_memory_equal(norm->data, patch, 4);

  df_st_close(&m);
  assert_null(m);
  df_st_close(&m); /* NULL-safe */
  df_st_close(NULL);
  assert_int_equal(df_st_count(NULL), 0);
  assert_null(df_st_find(NULL, "x"));
  assert_int_equal(df_st_file_count(NULL), 0);
  free(p1);
  free(p2);
  rm_rf(dir);
  free(dir);
}

static void test_single_file_discovery(void **state) {
  (void)state;
  char err[512];
  df_st_model *m = NULL;
  char *dir = make_tmpdir();

  /* Empty folder. */
  assert_int_equal(df_st_open(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, ": no model.safetensors.index.json, model.safetensors or "
                              "*.safetensors file"));

  /* One file under any name. */
  size_t h = write_st(dir, "weights.safetensors", shard1, 2, 5);
  assert_int_equal(df_st_open(dir, &m, err, sizeof err), 0);
  assert_int_equal(df_st_file_count(m), 1);
  char *pw = join(dir, "weights.safetensors");
  assert_string_equal(df_st_file_path(m, 0), pw);
  assert_int_equal(df_st_count(m), 2);
  assert_int_equal(df_st_find(m, "model.norm.weight")->file_offset, 8 + h + 24);
  df_st_close(&m);

  /* A path to the file itself. */
  assert_int_equal(df_st_open(pw, &m, err, sizeof err), 0);
  assert_int_equal(df_st_count(m), 2);
  df_st_close(&m);

  /* Two files, no index: ambiguous. */
  write_st(dir, "other.safetensors", shard2, 3, 5);
  assert_int_equal(df_st_open(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, ": 2 *.safetensors files but no model.safetensors.index.json"));
  assert_null(m);

  /* model.safetensors wins over the others. */
  write_st(dir, "model.safetensors", shard2, 3, 9);
  assert_int_equal(df_st_open(dir, &m, err, sizeof err), 0);
  assert_int_equal(df_st_count(m), 3);
  assert_non_null(df_st_find(m, "lm_head.weight"));
  df_st_close(&m);

  /* Missing folder / file. */
  char *missing = join(dir, "nope");
  assert_int_equal(df_st_open(missing, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "nope: cannot open model folder: No such file or directory"));
  assert_int_equal(df_st_open_file(missing, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "nope: cannot open: No such file or directory"));
  /* A directory is not a safetensors file. */
  assert_int_equal(df_st_open_file(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, ": not a regular file"));
  /* A FIFO is refused at once, never a blocked open. */
  char *fifo = join(dir, "fifo.safetensors");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(df_st_open_file(fifo, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "fifo.safetensors: not a regular file"));
  remove(fifo);
  free(fifo);
  assert_int_equal(df_st_open(NULL, &m, err, sizeof err), -1);
  assert_int_equal(df_st_open_file(NULL, &m, err, sizeof err), -1);
  free(missing);
  free(pw);
  rm_rf(dir);
  free(dir);
}

/* ---- sharded checkpoint errors -------------------------------------------------------- */

typedef struct {
  const char *what;
  const tspec *s1;
  int n1;
  const tspec *s2;
  int n2;
  const char *index; /* NULL: no index written */
  const char *expect;
} shard_case;

static const tspec dup_shard2[] = {
    {"model.layers.0.mlp.gate.weight", "F16", "[2,2,2]", 16},
    {"model.norm.weight", "F32", "[3]", 12},
};
static const tspec trunc2[] = {
    {"lm_head.weight", "BF16", "[2,3]", 12},
    {"model.layers.0.mlp.gate.weight", "F16", "[2,2,200]", 16},
};

#define WM(body) "{\"weight_map\":{" body "}}"

static const shard_case shard_cases[] = {
    {"duplicate across shards", shard1, 2, dup_shard2, 2,
     WM("\"model.embed_tokens.weight\":\"" SHARD1 "\",\"model.norm.weight\":\"" SHARD1
        "\",\"model.layers.0.mlp.gate.weight\":\"" SHARD2 "\""),
     SHARD2 ": tensor 'model.norm.weight' duplicates the one in " SHARD1},
    {"index names a missing file", shard1, 2, shard2, 3,
     WM("\"model.embed_tokens.weight\":\"" SHARD1 "\",\"x\":\"model-00003-of-00003.safetensors\""),
     "model-00003-of-00003.safetensors: cannot open (named by model.safetensors.index.json): No "
     "such file or directory"},
    {"tensor missing from its shard", shard1, 2, shard2, 3,
     WM("\"model.embed_tokens.weight\":\"" SHARD1 "\",\"model.layers.1.mlp.gate.weight\":\"" SHARD2
        "\""),
     SHARD2 ": tensor 'model.layers.1.mlp.gate.weight' named by model.safetensors.index.json is "
            "missing from this file"},
    {"tensor in another shard than named", shard1, 2, shard2, 3,
     WM("\"model.embed_tokens.weight\":\"" SHARD1 "\",\"lm_head.weight\":\"" SHARD1
        "\",\"model.layers.0.step\":\"" SHARD2 "\""),
     "model.safetensors.index.json: tensor 'lm_head.weight' is mapped to " SHARD1
     " but stored in " SHARD2},
    {"malformed shard", shard1, 2, trunc2, 2,
     WM("\"lm_head.weight\":\"" SHARD2 "\",\"model.norm.weight\":\"" SHARD1 "\""),
     SHARD2 ": tensor 'model.layers.0.mlp.gate.weight': data_offsets [12, 28] span 16 bytes but "
            "F16 [2, 2, 200] needs 1600"},
    {"index not JSON", shard1, 2, shard2, 3, "{\"weight_map\": {\n  \"a\": }",
     "model.safetensors.index.json:2:8: JSON syntax error"},
    {"index is an array", shard1, 2, shard2, 3, "[]",
     "model.safetensors.index.json: 'weight_map' missing: the file is not a JSON object"},
    {"weight_map missing", shard1, 2, shard2, 3, "{\"metadata\":{}}",
     "model.safetensors.index.json: 'weight_map' missing"},
    {"weight_map not an object", shard1, 2, shard2, 3, "{\"weight_map\":[]}",
     "model.safetensors.index.json: 'weight_map' is not an object"},
    {"weight_map empty", shard1, 2, shard2, 3, WM(""),
     "model.safetensors.index.json: 'weight_map' is empty"},
    {"weight_map value not a string", shard1, 2, shard2, 3, WM("\"a\":1"),
     "model.safetensors.index.json: weight_map['a'] is a JSON integer, expected a file name"},
    {"weight_map path outside the folder", shard1, 2, shard2, 3,
     WM("\"a\":\"../" SHARD1 "\""),
     "weight_map['a'] = '../" SHARD1 "' is not a file name in the model folder"},
    {"weight_map empty file name", shard1, 2, shard2, 3, WM("\"a\":\"\""),
     "weight_map['a'] = '' is not a file name in the model folder"},
    {"index duplicate key", shard1, 2, shard2, 3,
     WM("\"a\":\"" SHARD1 "\",\"a\":\"" SHARD1 "\""), "duplicate object key"},
};

static void test_sharded_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof shard_cases / sizeof *shard_cases; i++) {
    const shard_case *c = &shard_cases[i];
    char *dir = make_tmpdir();
    write_st(dir, SHARD1, c->s1, c->n1, 1);
    write_st(dir, SHARD2, c->s2, c->n2, 2);
    if (c->index) write_text(dir, "model.safetensors.index.json", c->index);
    char err[512] = "";
    df_st_model *m = (df_st_model *)&err;
    int rc = df_st_open(dir, &m, err, sizeof err);
    assert_err(rc, err, c->expect, c->what);
    assert_null(m);
    rm_rf(dir);
    free(dir);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_malformed_buffers),
      cmocka_unit_test(test_malformed_files),
      cmocka_unit_test(test_wellformed_buffers),
      cmocka_unit_test(test_sharded_checkpoint),
      cmocka_unit_test(test_single_file_discovery),
      cmocka_unit_test(test_sharded_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
