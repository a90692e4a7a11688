/* tests/test_transport.c — transport/ (codec, keys, tokens, allow-list) and the placement
 * rule (coordinator/cluster/cluster_place.c).
 *
 * Codec: every op round-trips; a table of malformed headers (hand-written msgpack bytes)
 * each gets -1 with the right code and leaves no allocation. Keys: created 0600, reloaded
 * equal, refused when readable by others. Tokens: single-use, reusable, expired, wrong,
 * malformed; the ZAP token window. Placement: proportional, capped by budgets, deterministic,
 * replicas on another node. Log rate limit: repeats held back within the window and
 * counted, distinct lines independent, bounded memory. Socket monitor (transport/sock.h):
 * a reader nobody drains never stalls the monitored socket, and tearing a monitor down while
 * peers keep connecting and dropping never deadlocks (a watchdog fails the test instead of
 * letting it hang). Temporary state goes under a fresh mkdtemp() folder.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/cluster/cluster_place.h"
#include "transport/codec.h"
#include "transport/keys.h"
#include "transport/lograte.h"
#include "transport/sock.h"

/* ---- codec ------------------------------------------------------------------------- */

static df_proto_msg roundtrip(const df_proto_msg *in) {
  uint8_t *buf;
  size_t len;
  char err[256];
  assert_int_equal(df_proto_encode(in, &buf, &len, err, sizeof err), 0);
  df_proto_msg out;
  int code = 0;
  int rc = df_proto_decode(buf, len, &out, &code, err, sizeof err);
  if (rc) fprintf(stderr, "decode: %s\n", err);
  assert_int_equal(rc, 0);
  free(buf);
  assert_int_equal(out.v, DF_PROTO_VERSION);
  assert_int_equal(out.op, in->op);
  assert_true(out.id == in->id);
  return out;
}

static void test_codec_roundtrip(void **st) {
  (void)st;
  df_proto_msg j = {.op = DF_PROTO_JOIN, .id = 7, .memory = 12345678901ull, .has_model = true};
  strcpy(j.name, "node-a");
  strcpy(j.token, "00112233445566778899aabbccddeeff");
  df_proto_msg o = roundtrip(&j);
  assert_string_equal(o.name, "node-a");
  assert_string_equal(o.token, j.token);
  assert_true(o.memory == j.memory && o.has_model);
  assert_string_equal(o.key, ""); /* absent unless set */
  df_proto_msg_free(&o);
  /* a token's join connection: JOIN `key` (40 Z85 characters, exactly), answered by ADMIT */
  strcpy(j.key, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
  o = roundtrip(&j);
  assert_string_equal(o.key, j.key);
  df_proto_msg_free(&o);
  df_proto_msg ad = {.op = DF_PROTO_ADMIT, .id = 8};
  o = roundtrip(&ad);
  assert_string_equal(df_proto_op_name(o.op), "ADMIT");
  df_proto_msg_free(&o);
  {
    /* a `key` that is not 40 characters is malformed */
    uint8_t *buf;
    size_t len;
    char e[256];
    int code;
    strcpy(j.key, "short");
    assert_int_equal(df_proto_encode(&j, &buf, &len, e, sizeof e), 0);
    assert_int_equal(df_proto_decode(buf, len, &o, &code, e, sizeof e), -1);
    assert_int_equal(code, DF_PROTO_E_MALFORMED);
    assert_non_null(strstr(e, "key"));
    free(buf);
    j.key[0] = 0;
  }

  int32_t pairs[4] = {1, 0, 3, 7};
  df_proto_tensor ts[6];
  memset(ts, 0, sizeof ts);
  for (int i = 0; i < 6; i++) {
    snprintf(ts[i].name, sizeof ts[i].name, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, i);
    strcpy(ts[i].dtype, "BF16");
    ts[i].shape[0] = 48, ts[i].shape[1] = 96, ts[i].nbytes = 48 * 96 * 2;
    memset(ts[i].sha256, i + 1, 32);
  }
  df_proto_msg a = {.op = DF_PROTO_ASSIGN, .id = 9, .epoch = 3, .hidden = 96, .inter = 48,
                    .max_rows = 64, .n_pairs = 2, .pairs = pairs, .n_tensors = 6, .tensors = ts};
  o = roundtrip(&a);
  assert_int_equal(o.n_pairs, 2);
  assert_memory_equal(o.pairs, pairs, sizeof pairs);
  assert_int_equal(o.n_tensors, 6);
  assert_memory_equal(o.tensors, ts, sizeof ts);
  assert_true(o.epoch == 3 && o.hidden == 96 && o.inter == 48 && o.max_rows == 64);
  assert_true(o.block_n == 0 && o.block_k == 0 && df_proto_assign_per_pair(&o) == 3);
  df_proto_msg_free(&o);

  /* FP8 experts: one pair, three F8_E4M3 weights and their three F32 block scales */
  for (int i = 0; i < 3; i++) strcpy(ts[i].dtype, "F8_E4M3"), ts[i].nbytes = 48 * 96;
  for (int i = 3; i < 6; i++)
    strcpy(ts[i].dtype, "F32"), ts[i].shape[0] = 1, ts[i].shape[1] = 1, ts[i].nbytes = 4;
  df_proto_msg a8 = {.op = DF_PROTO_ASSIGN, .id = 10, .epoch = 4, .hidden = 96, .inter = 48,
                     .max_rows = 64, .block_n = 128, .block_k = 128, .n_pairs = 1,
                     .pairs = pairs, .n_tensors = 6, .tensors = ts};
  o = roundtrip(&a8);
  assert_true(o.block_n == 128 && o.block_k == 128 && df_proto_assign_per_pair(&o) == 6);
  assert_int_equal(o.n_pairs, 1);
  assert_int_equal(o.n_tensors, 6);
  assert_memory_equal(o.tensors, ts, sizeof ts);
  df_proto_msg_free(&o);
  /* six tensors for two pairs without a block size: not three per pair */
  uint8_t *eb;
  size_t el;
  char e2[256];
  int code2;
  a8.block_n = a8.block_k = 0;
  assert_int_equal(df_proto_encode(&a8, &eb, &el, e2, sizeof e2), 0);
  assert_int_equal(df_proto_decode(eb, el, &o, &code2, e2, sizeof e2), -1);
  assert_int_equal(code2, DF_PROTO_E_MALFORMED);
  assert_non_null(strstr(e2, "three per pair"));
  free(eb);
  /* a block size with three tensors for one pair: not six per pair */
  a8.block_n = a8.block_k = 128;
  a8.n_tensors = 3;
  assert_int_equal(df_proto_encode(&a8, &eb, &el, e2, sizeof e2), 0);
  assert_int_equal(df_proto_decode(eb, el, &o, &code2, e2, sizeof e2), -1);
  assert_non_null(strstr(e2, "six per pair"));
  free(eb);
  /* block sizes of 0 or over the limit */
  a8.n_tensors = 6;
  for (int bad = 0; bad < 2; bad++) {
    a8.block_n = bad ? DF_PROTO_MAX_BLOCK + 1 : 128;
    a8.block_k = bad ? 128 : 0;
    if (!bad) a8.block_k = 0, a8.block_n = 128;
    assert_int_equal(df_proto_encode(&a8, &eb, &el, e2, sizeof e2), 0);
    int rc2 = df_proto_decode(eb, el, &o, &code2, e2, sizeof e2);
    assert_int_equal(rc2, -1);
    assert_non_null(strstr(e2, "block"));
    free(eb);
  }

  int32_t ex[3] = {0, 5, 7};
  int64_t rows[3] = {1, 4, 2};
  df_proto_msg f = {.op = DF_PROTO_FFN, .id = 11, .layer = 3, .n_groups = 3, .experts = ex,
                    .rows = rows, .cols = 96};
  o = roundtrip(&f);
  assert_int_equal(o.n_groups, 3);
  assert_memory_equal(o.experts, ex, sizeof ex);
  assert_memory_equal(o.rows, rows, sizeof rows);
  assert_int_equal(o.total_rows, 7);
  assert_int_equal(df_proto_payload_bytes(&o), 7 * 96 * 4);
  df_proto_msg_free(&o);

  df_proto_msg r = {.op = DF_PROTO_RESULT, .id = 11, .total_rows = 7, .cols = 96};
  o = roundtrip(&r);
  assert_int_equal(df_proto_payload_bytes(&o), 7 * 96 * 4);
  df_proto_msg_free(&o);

  df_proto_msg fe = {.op = DF_PROTO_FETCH, .id = 1, .epoch = 2, .tensor = 5, .offset = 4096, .length = 1 << 20};
  o = roundtrip(&fe);
  assert_true(o.tensor == 5 && o.offset == 4096 && o.length == (1u << 20));
  df_proto_msg ch = {.op = DF_PROTO_SHARD_CHUNK, .id = 1, .epoch = 2, .tensor = 5, .offset = 4096, .total = 9000};
  o = roundtrip(&ch);
  assert_true(o.total == 9000 && df_proto_payload_bytes(&o) == -1);
  df_proto_msg rd = {.op = DF_PROTO_READY, .id = 2, .epoch = 4, .held = 77};
  o = roundtrip(&rd);
  assert_true(o.epoch == 4 && o.held == 77);
  df_proto_msg sts = {.op = DF_PROTO_STATS, .id = 2, .held = 1, .served = 2, .rows_done = 3, .busy_us = 4};
  o = roundtrip(&sts);
  assert_true(o.held == 1 && o.served == 2 && o.rows_done == 3 && o.busy_us == 4);
  df_proto_msg er = {.op = DF_PROTO_ERROR, .id = 3, .code = DF_PROTO_E_BAD_REQUEST};
  strcpy(er.reason, "nope");
  o = roundtrip(&er);
  assert_true(o.code == DF_PROTO_E_BAD_REQUEST && !strcmp(o.reason, "nope"));
  df_proto_msg by = {.op = DF_PROTO_BYE, .id = 4};
  o = roundtrip(&by);
  df_proto_msg pi = {.op = DF_PROTO_PING, .id = 5}, po = {.op = DF_PROTO_PONG, .id = 5};
  o = roundtrip(&pi);
  o = roundtrip(&po);
}

typedef struct bad_case {
  const char *what;
  const char *bytes; /* hex */
  int code;
} bad_case;

/* Hand-written msgpack: 83 = map of 3, a1 76 = "v", a2 6f70 = "op", a2 6964 = "id". */
static const bad_case bad_cases[] = {
    {"empty", "", DF_PROTO_E_MALFORMED},
    {"not a map", "93010203", DF_PROTO_E_MALFORMED},
    {"reserved byte c1", "c1", DF_PROTO_E_MALFORMED},
    {"truncated str", "81a17602a4504f", DF_PROTO_E_MALFORMED},
    {"trailing bytes", "83a17602a26f70a450494e47a26964010000", DF_PROTO_E_MALFORMED},
    {"array32 claims 4G elements", "dd ffffffff", DF_PROTO_E_MALFORMED},
    {"map32 claims 4G pairs", "df ffffffff 01", DF_PROTO_E_MALFORMED},
    {"str32 past the end", "db 7fffffff 41", DF_PROTO_E_MALFORMED},
    {"nesting too deep", "91919191919191919101", DF_PROTO_E_MALFORMED},
    {"ext type", "d40102", DF_PROTO_E_MALFORMED},
    {"missing v", "82a26f70a450494e47a26964 01", DF_PROTO_E_MALFORMED},
    {"v not an integer", "83a176a131a26f70a450494e47a26964 01", DF_PROTO_E_MALFORMED},
    {"version 1", "83a17601a26f70a450494e47a26964 01", DF_PROTO_E_VERSION},
    {"version 3", "83a17603a26f70a450494e47a26964 01", DF_PROTO_E_VERSION},
    {"version 0", "83a17600a26f70a450494e47a26964 01", DF_PROTO_E_VERSION},
    {"unknown op", "83a17602a26f70a4 4e4f5045 a26964 01", DF_PROTO_E_MALFORMED},
    {"missing id", "82a17602a26f70a450494e47", DF_PROTO_E_MALFORMED},
    {"negative id", "83a17602a26f70a450494e47a26964 ff", DF_PROTO_E_MALFORMED},
    {"duplicate key", "84a17602a17602a26f70a450494e47a26964 01", DF_PROTO_E_MALFORMED},
    {"non-string key", "8401 01a17602a26f70a450494e47a26964 01", DF_PROTO_E_MALFORMED},
    /* FFN without rows */
    {"FFN missing keys", "83a17602a26f70a346464ea26964 01", DF_PROTO_E_MALFORMED},
    /* FFN layer 1, experts [1], rows [0], cols 4, dtype F32: a zero-row group */
    {"FFN zero rows", "88a17602a26f70a346464ea26964 01a56c6179657201a7657870657274739101a4726f777391 00"
                      "a4636f6c7304a56474797065a3463332", DF_PROTO_E_MALFORMED},
    /* FFN experts [1, 2], rows [3] */
    {"FFN rows/experts lengths", "88a17602a26f70a346464ea26964 01a56c6179657201a765787065727473920102"
                                 "a4726f777391 03a4636f6c7304a56474797065a3463332", DF_PROTO_E_MALFORMED},
    /* FFN dtype BF16 */
    {"FFN dtype", "88a17602a26f70a346464ea26964 01a56c6179657201a7657870657274739101a4726f777391 03"
                  "a4636f6c7304a56474797065a4424631 36", DF_PROTO_E_MALFORMED},
    /* JOIN name of 70 bytes */
    {"JOIN name too long", "86a17602a26f70a44a4f494ea26964 01a46e616d65d946"
                           "41414141414141414141414141414141414141414141414141414141414141414141"
                           "414141414141414141414141414141414141414141414141414141414141414141414141"
                           "a66d656d6f727901a9686173 5f6d6f64656cc2", DF_PROTO_E_MALFORMED},
};

static size_t unhex(const char *s, uint8_t *out) {
  size_t n = 0;
  int hi = -1;
  for (; *s; s++) {
    int v = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
    if (v < 0) continue;
    if (hi < 0) hi = v;
    else out[n++] = (uint8_t)(hi * 16 + v), hi = -1;
  }
  return n;
}

static void test_codec_malformed(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    uint8_t buf[512];
    size_t n = unhex(bad_cases[i].bytes, buf);
    df_proto_msg m;
    int code = 0;
    char err[256] = "";
    int rc = df_proto_decode(buf, n, &m, &code, err, sizeof err);
    if (rc != -1 || code != bad_cases[i].code)
      fail_msg("case '%s': rc %d code %d (%s)", bad_cases[i].what, rc, code, err);
    assert_true(err[0] != 0 && !strchr(err, '\n'));
    assert_null(m.pairs);
    assert_null(m.experts);
  }
  /* a valid JOIN still decodes (the table's encoding is right) */
  uint8_t buf[128];
  size_t n = unhex("85a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901", buf);
  df_proto_msg m;
  int code;
  char err[256];
  assert_int_equal(df_proto_decode(buf, n, &m, &code, err, sizeof err), -1); /* has_model missing */
  assert_non_null(strstr(err, "has_model"));
  n = unhex("86a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901a9686173 5f6d6f64656cc2", buf);
  assert_int_equal(df_proto_decode(buf, n, &m, &code, err, sizeof err), 0);
  assert_string_equal(m.name, "x");
}

/* JOIN `device` (docs/PROTOCOL.md §2): optional; absent = 0, and a CPU node's JOIN is byte for
 * byte the JOIN of before the key, so either side may be older. */
static void test_codec_join_device(void **st) {
  (void)st;
  static const char *k_old = "86a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
                             "a9686173 5f6d6f64656cc2";
  static const char *k_new = "87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f7279cd0400"
                             "a9686173 5f6d6f64656cc2 a6646576696365cd0300";
  uint8_t want[128], *buf;
  size_t wn, n;
  char err[256];
  int code;
  df_proto_msg j = {.op = DF_PROTO_JOIN, .id = 1, .memory = 1};
  strcpy(j.name, "x");
  /* device 0: exactly the old bytes */
  assert_int_equal(df_proto_encode(&j, &buf, &n, err, sizeof err), 0);
  wn = unhex(k_old, want);
  assert_int_equal(n, wn);
  assert_memory_equal(buf, want, wn);
  free(buf);
  /* device 768 of memory 1024: the key follows has_model */
  j.memory = 1024, j.device = 768;
  assert_int_equal(df_proto_encode(&j, &buf, &n, err, sizeof err), 0);
  wn = unhex(k_new, want);
  assert_int_equal(n, wn);
  assert_memory_equal(buf, want, wn);
  df_proto_msg o;
  assert_int_equal(df_proto_decode(buf, n, &o, &code, err, sizeof err), 0);
  free(buf);
  assert_true(o.memory == 1024 && o.device == 768 && !o.has_model);
  assert_string_equal(o.name, "x");
  /* an old node's JOIN (no key) decodes as a CPU node */
  wn = unhex(k_old, want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), 0);
  assert_true(o.memory == 1 && o.device == 0);
  /* round trip with a token and large values */
  j.memory = 24ull << 30, j.device = 20ull << 30, j.has_model = true;
  strcpy(j.token, "00112233445566778899aabbccddeeff");
  o = roundtrip(&j);
  assert_true(o.memory == j.memory && o.device == j.device && o.has_model);
  assert_string_equal(o.token, j.token);
  /* device over memory: malformed, naming the key */
  j.device = j.memory + 1;
  assert_int_equal(df_proto_encode(&j, &buf, &n, err, sizeof err), 0);
  assert_int_equal(df_proto_decode(buf, n, &o, &code, err, sizeof err), -1);
  assert_int_equal(code, DF_PROTO_E_MALFORMED);
  assert_non_null(strstr(err, "device"));
  free(buf);
  /* device not an unsigned integer: malformed */
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a6646576696365a131", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), -1);
  assert_int_equal(code, DF_PROTO_E_MALFORMED);
  assert_non_null(strstr(err, "device"));
}

/* Kimi K3's experts (docs/PROTOCOL.md §2): JOIN `features`, ASSIGN `act` (absent = SiLU) and
 * `mx` (MXFP4: six tensors per pair); every value a peer could get wrong is refused. */
static int decode_of(const df_proto_msg *in, df_proto_msg *out, char *err, size_t errlen) {
  uint8_t *buf;
  size_t len;
  int code = 0;
  assert_int_equal(df_proto_encode(in, &buf, &len, err, errlen), 0);
  int rc = df_proto_decode(buf, len, out, &code, err, errlen);
  free(buf);
  if (rc) {
    assert_int_equal(code, DF_PROTO_E_MALFORMED);
    assert_null(out->pairs);
    assert_null(out->tensors);
  }
  return rc;
}

static void test_codec_k3(void **st) {
  (void)st;
  char err[256];
  df_proto_msg o;
  /* JOIN features: round trip; absent = none; unknown names ignored */
  df_proto_msg j = {.op = DF_PROTO_JOIN, .id = 1, .memory = 1,
                    .features = DF_PROTO_FEAT_ACT | DF_PROTO_FEAT_MX};
  strcpy(j.name, "x");
  o = roundtrip(&j);
  assert_int_equal(o.features, DF_PROTO_FEAT_ACT | DF_PROTO_FEAT_MX);
  j.features = DF_PROTO_FEAT_MX;
  o = roundtrip(&j);
  assert_int_equal(o.features, DF_PROTO_FEAT_MX);
  static const char *k_old = "86a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
                             "a9686173 5f6d6f64656cc2";
  uint8_t want[256], *buf;
  size_t wn, n;
  int code;
  j.features = 0; /* no features: the JOIN of before the key, byte for byte */
  assert_int_equal(df_proto_encode(&j, &buf, &n, err, sizeof err), 0);
  wn = unhex(k_old, want);
  assert_int_equal(n, wn);
  assert_memory_equal(buf, want, wn);
  free(buf);
  /* features ["act", "zz"] (a name from the future is ignored) */
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a8666561747572657392a3616374a27a7a", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), 0);
  assert_int_equal(o.features, DF_PROTO_FEAT_ACT);
  /* features ["act", "mx"]: "mx" is a node of before the 32-chain MXFP4 order (its sums
   * differ), not MXFP4 here; ["mx32"] is */
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a8666561747572657392a3616374a26d78", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), 0);
  assert_int_equal(o.features, DF_PROTO_FEAT_ACT);
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a8666561747572657391a46d783332", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), 0);
  assert_int_equal(o.features, DF_PROTO_FEAT_MX);
  /* features not an array, or holding a number: malformed */
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a86665617475726573a3616374", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), -1);
  assert_non_null(strstr(err, "features"));
  wn = unhex("87a17602a26f70a44a4f494ea26964 01a46e616d65a178a66d656d6f727901"
             "a9686173 5f6d6f64656cc2 a8666561747572657391 07", want);
  assert_int_equal(df_proto_decode(want, wn, &o, &code, err, sizeof err), -1);
  assert_non_null(strstr(err, "features"));

  /* ASSIGN of MXFP4 SiTU experts in a latent width of 96: one pair, three U8 weight_packed
   * then three U8 weight_scale; the betas arrive as the same floats */
  int32_t pairs[2] = {1, 7};
  df_proto_tensor ts[6];
  memset(ts, 0, sizeof ts);
  static const char *const part[3] = {"w1", "w3", "w2"};
  for (int i = 0; i < 6; i++) {
    int64_t N = i % 3 == 2 ? 96 : 64, K = i % 3 == 2 ? 64 : 96;
    snprintf(ts[i].name, sizeof ts[i].name,
             "language_model.model.layers.1.block_sparse_moe.experts.7.%s.weight_%s",
             part[i % 3], i < 3 ? "packed" : "scale");
    strcpy(ts[i].dtype, "U8");
    ts[i].shape[0] = N, ts[i].shape[1] = i < 3 ? K / 2 : K / 32;
    ts[i].nbytes = (uint64_t)(ts[i].shape[0] * ts[i].shape[1]);
    memset(ts[i].sha256, i + 1, 32);
  }
  df_proto_msg a = {.op = DF_PROTO_ASSIGN, .id = 2, .epoch = 5, .hidden = 96, .inter = 64,
                    .max_rows = 64, .mx = DF_PROTO_MX_BLOCK, .act_kind = DF_PROTO_ACT_SITU,
                    .act_beta = 4.0f, .act_beta_lin = 25.0f, .n_pairs = 1, .pairs = pairs,
                    .n_tensors = 6, .tensors = ts};
  o = roundtrip(&a);
  assert_true(o.mx == 32 && o.block_n == 0 && df_proto_assign_per_pair(&o) == 6);
  assert_true(o.act_kind == DF_PROTO_ACT_SITU && o.act_beta == 4.0f && o.act_beta_lin == 25.0f);
  assert_true(o.hidden == 96 && o.inter == 64 && o.n_tensors == 6);
  assert_memory_equal(o.tensors, ts, sizeof ts);
  df_proto_msg_free(&o);
  a.act_beta = 0.1f, a.act_beta_lin = 0; /* inexact in binary, and a pass-through up branch */
  o = roundtrip(&a);
  assert_true(o.act_beta == 0.1f && o.act_beta_lin == 0);
  df_proto_msg_free(&o);
  /* SiTU without mx (BF16 experts): three tensors per pair */
  df_proto_msg a3 = a;
  a3.mx = 0, a3.n_tensors = 3;
  o = roundtrip(&a3);
  assert_true(o.mx == 0 && o.act_kind == DF_PROTO_ACT_SITU && df_proto_assign_per_pair(&o) == 3);
  df_proto_msg_free(&o);
  /* act absent: SiLU, zero betas */
  a3.act_kind = DF_PROTO_ACT_SILU, a3.act_beta = a3.act_beta_lin = 0;
  o = roundtrip(&a3);
  assert_true(o.act_kind == DF_PROTO_ACT_SILU && o.act_beta == 0 && o.act_beta_lin == 0);
  df_proto_msg_free(&o);

  /* refusals, each naming the key */
  struct { float b, bl; uint32_t kind; const char *what; } bad_act[] = {
      {0, 25, DF_PROTO_ACT_SITU, "beta 0"},         {-4, 25, DF_PROTO_ACT_SITU, "beta < 0"},
      {NAN, 25, DF_PROTO_ACT_SITU, "beta NaN"},     {INFINITY, 25, DF_PROTO_ACT_SITU, "beta Inf"},
      {4, -1, DF_PROTO_ACT_SITU, "beta_lin < 0"},   {4, NAN, DF_PROTO_ACT_SITU, "beta_lin NaN"},
      {4, INFINITY, DF_PROTO_ACT_SITU, "beta_lin Inf"}, {4, 25, 2, "unknown kind"},
      {4, 25, 0xffffffffu, "kind 2^32-1"},
  };
  for (size_t i = 0; i < sizeof bad_act / sizeof *bad_act; i++) {
    df_proto_msg x = a;
    x.act_kind = bad_act[i].kind, x.act_beta = bad_act[i].b, x.act_beta_lin = bad_act[i].bl;
    if (decode_of(&x, &o, err, sizeof err) != -1) fail_msg("act %s decoded", bad_act[i].what);
    assert_non_null(strstr(err, "'act'"));
  }
  df_proto_msg x = a;
  x.mx = 16; /* not the MX block size */
  assert_int_equal(decode_of(&x, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "'mx'"));
  x = a;
  x.block_n = x.block_k = 128; /* MXFP4 and FP8 at once */
  assert_int_equal(decode_of(&x, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "'mx'"));
  x = a;
  x.n_tensors = 3; /* mx with three tensors for one pair */
  assert_int_equal(decode_of(&x, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "six per pair"));
  /* act [1, 4.0, "x"], act [1, 4.0] and SiLU with a beta: hand-written */
  static const char *bad_hex[] = {
      "82a36163749301ca40800000a178", "82a36163749201ca40800000",
      "82a36163749300ca40800000ca00000000"};
  for (size_t i = 0; i < 3; i++) {
    /* splice {act: ...} into a valid ASSIGN: decode the valid one's map, then the bad key */
    df_proto_msg y = a;
    y.act_kind = DF_PROTO_ACT_SILU, y.act_beta = y.act_beta_lin = 0;
    assert_int_equal(df_proto_encode(&y, &buf, &n, err, sizeof err), 0);
    uint8_t bk[64];
    size_t bl = unhex(bad_hex[i], bk) - 1; /* drop the leading 0x82 (a 2-key map header) */
    uint8_t *cp = malloc(n + bl);
    memcpy(cp, buf, n);
    assert_true((cp[0] & 0xf0) == 0x80 && (cp[0] & 0x0f) < 15);
    cp[0]++; /* one more key */
    memcpy(cp + n, bk + 1, bl);
    free(buf);
    int c2 = 0;
    assert_int_equal(df_proto_decode(cp, n + bl, &o, &c2, err, sizeof err), -1);
    free(cp);
    assert_int_equal(c2, DF_PROTO_E_MALFORMED);
    assert_non_null(strstr(err, "'act'"));
  }
  assert_true(df_proto_act_valid(DF_PROTO_ACT_SITU, 4.0f, 25.0f));
  assert_true(df_proto_act_valid(DF_PROTO_ACT_SITU, 1.0f, 0));
  assert_true(df_proto_act_valid(DF_PROTO_ACT_SILU, 0, 0));
  assert_false(df_proto_act_valid(DF_PROTO_ACT_SILU, 4.0f, 0));
}

static void test_codec_truncations(void **st) {
  (void)st;
  /* every prefix of a valid ASSIGN is refused without reading past it (ASan) */
  int32_t pairs[2] = {1, 2};
  df_proto_tensor ts[3];
  memset(ts, 0, sizeof ts);
  for (int i = 0; i < 3; i++) strcpy(ts[i].name, "t"), strcpy(ts[i].dtype, "BF16");
  df_proto_msg a = {.op = DF_PROTO_ASSIGN, .id = 1, .epoch = 1, .hidden = 8, .inter = 4, .max_rows = 2,
                    .n_pairs = 1, .pairs = pairs, .n_tensors = 3, .tensors = ts};
  uint8_t *buf;
  size_t len;
  char err[256];
  assert_int_equal(df_proto_encode(&a, &buf, &len, err, sizeof err), 0);
  for (size_t n = 0; n < len; n++) {
    uint8_t *cp = malloc(n ? n : 1);
    memcpy(cp, buf, n);
    df_proto_msg m;
    int code;
    assert_int_equal(df_proto_decode(cp, n, &m, &code, err, sizeof err), -1);
    free(cp);
  }
  free(buf);
}

/* ---- keys, tokens, allow-list ------------------------------------------------------ */

static char tmpdir[64];

static int setup_dir(void **st) {
  (void)st;
  strcpy(tmpdir, "/tmp/df_transport_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **st) {
  (void)st;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_keys(void **st) {
  (void)st;
  char p[256], err[512];
  snprintf(p, sizeof p, "%s/k.key", tmpdir);
  df_proto_keypair a, b;
  bool created;
  assert_int_equal(df_proto_keys_load(p, true, &a, &created, err, sizeof err), 0);
  assert_true(created);
  struct stat s;
  assert_int_equal(stat(p, &s), 0);
  assert_int_equal(s.st_mode & 0777, 0600);
  assert_int_equal(df_proto_keys_load(p, true, &b, &created, err, sizeof err), 0);
  assert_false(created);
  assert_string_equal(a.pub, b.pub);
  assert_string_equal(a.sec, b.sec);
  chmod(p, 0644);
  assert_int_equal(df_proto_keys_load(p, true, &b, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "readable by others"));
  FILE *f = fopen(p, "w");
  fputs("public nonsense\nsecret x\n", f);
  fclose(f);
  chmod(p, 0600);
  assert_int_equal(df_proto_keys_load(p, true, &b, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "malformed"));
  char hex[65], z[41];
  assert_int_equal(df_proto_z85_to_hex(a.pub, hex), 0);
  assert_int_equal(df_proto_hex_to_z85(hex, 64, z), 0);
  assert_string_equal(z, a.pub);
  char fp[17];
  df_proto_key_fingerprint(a.pub, fp);
  assert_int_equal(strlen(fp), 16);
}

static void test_tokens(void **st) {
  (void)st;
  char err[512], tok[DF_PROTO_TOKEN_LEN + 1], tok2[DF_PROTO_TOKEN_LEN + 1];
  char z[41], secret[33];
  df_proto_keypair kp;
  char p[256];
  snprintf(p, sizeof p, "%s/c.key", tmpdir);
  assert_int_equal(df_proto_keys_load(p, true, &kp, NULL, err, sizeof err), 0);
  df_proto_keypair jk, other;
  char why[64];
  assert_int_equal(df_proto_keys_load(p, true, &other, NULL, err, sizeof err), 0);
  assert_false(df_proto_token_join_key_open(tmpdir, other.pub, why, sizeof why));
  /* the expiry reported is the one STATE/tokens records: now + ttl */
  int64_t exp = -1, t0 = (int64_t)time(NULL);
  assert_int_equal(df_proto_token_create(tmpdir, kp.pub, 3600, false, tok, sizeof tok, &exp, err,
                                         sizeof err), 0);
  int64_t t1 = (int64_t)time(NULL);
  assert_true(exp >= t0 + 3600 && exp <= t1 + 3600);
  {
    char tp[256], d[65];
    long long ex = -1;
    snprintf(tp, sizeof tp, "%s/tokens", tmpdir);
    FILE *tf = fopen(tp, "r");
    assert_non_null(tf);
    assert_int_equal(fscanf(tf, "%64s %lld", d, &ex), 2);
    fclose(tf);
    assert_int_equal(ex, exp);
  }
  assert_int_equal(strlen(tok), DF_PROTO_TOKEN_LEN);
  assert_int_equal(df_proto_token_parse(tok, z, secret, err, sizeof err), 0);
  assert_string_equal(z, kp.pub);
  /* the join key: derived from the secret alone, a valid CURVE pair, open while the token is */
  assert_int_equal(df_proto_token_join_keypair(secret, &jk), 0);
  char pub2[41];
  assert_int_equal(zmq_curve_public(pub2, jk.sec), 0);
  assert_string_equal(pub2, jk.pub);
  assert_true(df_proto_token_join_key_open(tmpdir, jk.pub, why, sizeof why));
  assert_false(df_proto_token_join_key_open(tmpdir, kp.pub, why, sizeof why));
  assert_string_equal(why, "no open token has this key");
  assert_int_equal(df_proto_token_join_keypair("0123", &other), -1);
  /* wrong secret */
  char wrong[33];
  strcpy(wrong, secret);
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  assert_int_equal(df_proto_token_redeem(tmpdir, wrong, NULL, err, sizeof err), -1);
  assert_string_equal(err, "unknown token");
  /* the right secret on another token's key */
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, kp.pub, err, sizeof err), -1);
  assert_string_equal(err, "token of another key");
  /* single use */
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, jk.pub, err, sizeof err), 0);
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, jk.pub, err, sizeof err), -1);
  assert_string_equal(err, "token already used");
  assert_false(df_proto_token_join_key_open(tmpdir, jk.pub, why, sizeof why));
  assert_string_equal(why, "its token was already used");
  /* reusable */
  assert_int_equal(df_proto_token_create(tmpdir, kp.pub, 0, true, tok2, sizeof tok2, &exp, err,
                                         sizeof err), 0);
  assert_int_equal(exp, 0); /* never expires */
  assert_int_equal(df_proto_token_parse(tok2, z, secret, err, sizeof err), 0);
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, NULL, err, sizeof err), 0);
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, NULL, err, sizeof err), 0);
  /* expired: rewrite the expiry into the past */
  assert_int_equal(df_proto_token_create(tmpdir, kp.pub, 1, false, tok, sizeof tok, NULL, err,
                                         sizeof err), 0);
  assert_int_equal(df_proto_token_parse(tok, z, secret, err, sizeof err), 0);
  snprintf(p, sizeof p, "%s/tokens", tmpdir);
  struct stat s;
  assert_int_equal(stat(p, &s), 0);
  assert_int_equal(s.st_mode & 0777, 0600);
  FILE *f = fopen(p, "r");
  char lines[4096] = "", line[256];
  while (fgets(line, sizeof line, f)) {
    char d[65];
    long long ex;
    int r, u;
    char jp[41] = "";
    assert_true(sscanf(line, "%64s %lld %d %d %40s", d, &ex, &r, &u, jp) == 5); /* join key kept */
    if (ex > 0 && ex < (long long)time(NULL) + 10) ex = 1000; /* long ago, but kept below */
    char out[300];
    snprintf(out, sizeof out, "%s %lld %d %d %s\n", d, ex, r, u, jp);
    strcat(lines, out);
  }
  fclose(f);
  f = fopen(p, "w");
  fputs(lines, f);
  fclose(f);
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, NULL, err, sizeof err), -1);
  assert_true(!strcmp(err, "token expired") || !strcmp(err, "unknown token"));
  assert_int_equal(df_proto_token_join_keypair(secret, &jk), 0);
  assert_false(df_proto_token_join_key_open(tmpdir, jk.pub, NULL, 0));
  /* an entry from before join keys (four fields) opens no key and still redeems */
  f = fopen(p, "w");
  uint8_t dg[32];
  char dh[65];
  df_proto_sha256(secret, 32, dg);
  df_proto_hex(dg, 32, dh);
  fprintf(f, "%s 0 0 0\n", dh);
  fclose(f);
  assert_false(df_proto_token_join_key_open(tmpdir, jk.pub, why, sizeof why));
  assert_int_equal(df_proto_token_redeem(tmpdir, secret, jk.pub, err, sizeof err), -1);
  assert_string_equal(err, "token of another key");
  /* malformed token texts */
  const char *bad[] = {"", "dft1_", "dft2_00", "dft1_zz", "hello world"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_int_equal(df_proto_token_parse(bad[i], z, secret, err, sizeof err), -1);
  char t3[DF_PROTO_TOKEN_LEN + 1];
  strcpy(t3, tok2);
  t3[10] = 'x'; /* not hex */
  assert_int_equal(df_proto_token_parse(t3, z, secret, err, sizeof err), -1);
}

static void test_allow_list(void **st) {
  (void)st;
  char err[256], name[64];
  df_proto_keypair a, b;
  char p[256];
  snprintf(p, sizeof p, "%s/a.key", tmpdir);
  df_proto_keys_load(p, true, &a, NULL, err, sizeof err);
  snprintf(p, sizeof p, "%s/b.key", tmpdir);
  df_proto_keys_load(p, true, &b, NULL, err, sizeof err);
  assert_false(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  assert_int_equal(df_proto_allow_add(tmpdir, a.pub, "node one", err, sizeof err), 0);
  assert_int_equal(df_proto_allow_add(tmpdir, a.pub, "node one", err, sizeof err), 0);
  assert_true(df_proto_allow_has(tmpdir, a.pub, name, sizeof name));
  assert_string_equal(name, "node_one");
  assert_false(df_proto_allow_has(tmpdir, b.pub, NULL, 0));
  snprintf(p, sizeof p, "%s/nodes", tmpdir);
  FILE *f = fopen(p, "r");
  int lines = 0;
  char l[256];
  while (fgets(l, sizeof l, f)) lines++;
  fclose(f);
  assert_int_equal(lines, 1);
  /* an allow-list others could have written is not trusted: no key is admitted from it, and
   * it is never rewritten (a planted list is not extended) */
  assert_int_equal(chmod(p, 0666), 0);
  assert_false(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  assert_int_equal(df_proto_allow_add(tmpdir, b.pub, "two", err, sizeof err), -1);
  assert_non_null(strstr(err, "not trusted"));
  assert_int_equal(chmod(p, 0600), 0);
  assert_true(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  /* revoke: by fingerprint prefix (8+ hex) or by name; nothing else matches */
  char fa[17], fb[17], rm[256];
  df_proto_key_fingerprint(a.pub, fa);
  df_proto_key_fingerprint(b.pub, fb);
  assert_int_equal(df_proto_allow_add(tmpdir, b.pub, "two", err, sizeof err), 0);
  char pre[9];
  memcpy(pre, fb, 8);
  pre[8] = 0;
  assert_int_equal(df_proto_allow_revoke(tmpdir, "no-such", rm, sizeof rm, err, sizeof err), 0);
  assert_int_equal(df_proto_allow_revoke(tmpdir, "abc", rm, sizeof rm, err, sizeof err), 0);
  assert_int_equal(df_proto_allow_revoke(tmpdir, pre, rm, sizeof rm, err, sizeof err), 1);
  char want[64];
  snprintf(want, sizeof want, "%s two\n", fb);
  assert_string_equal(rm, want);
  assert_false(df_proto_allow_has(tmpdir, b.pub, NULL, 0));
  assert_true(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  /* a revoked key is never admitted again by a token, reusable or not */
  assert_true(df_proto_key_revoked(tmpdir, b.pub));
  assert_false(df_proto_key_revoked(tmpdir, a.pub));
  {
    char tk[DF_PROTO_TOKEN_LEN + 1], z[41], sec[33], e2[512];
    df_proto_keypair jk;
    assert_int_equal(df_proto_token_create(tmpdir, a.pub, 600, true, tk, sizeof tk, NULL, e2,
                                           sizeof e2), 0);
    assert_int_equal(df_proto_token_parse(tk, z, sec, e2, sizeof e2), 0);
    assert_int_equal(df_proto_token_join_keypair(sec, &jk), 0);
    assert_int_equal(df_proto_token_admit(tmpdir, sec, jk.pub, b.pub, "two", e2, sizeof e2), -1);
    assert_non_null(strstr(e2, "revoked"));
    assert_false(df_proto_allow_has(tmpdir, b.pub, NULL, 0));
    df_proto_keypair c3;
    zmq_curve_keypair(c3.pub, c3.sec);
    assert_int_equal(df_proto_token_admit(tmpdir, sec, jk.pub, c3.pub, "three", e2, sizeof e2), 0);
    assert_true(df_proto_allow_has(tmpdir, c3.pub, NULL, 0));
    assert_int_equal(df_proto_allow_revoke(tmpdir, "three", rm, sizeof rm, e2, sizeof e2), 1);
  }
  assert_int_equal(df_proto_allow_revoke(tmpdir, "node_one", rm, sizeof rm, err, sizeof err), 1);
  assert_false(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  /* the list is bounded: past DF_PROTO_MAX_ALLOW keys a new one is refused */
  f = fopen(p, "w");
  for (int i = 0; i < DF_PROTO_MAX_ALLOW; i++) {
    df_proto_keypair k;
    zmq_curve_keypair(k.pub, k.sec);
    fprintf(f, "%s n%d 0\n", k.pub, i);
  }
  fclose(f);
  assert_int_equal(df_proto_allow_add(tmpdir, a.pub, "late", err, sizeof err), -1);
  assert_non_null(strstr(err, "cluster revoke"));
  assert_int_equal(df_proto_allow_revoke(tmpdir, "n7", rm, sizeof rm, err, sizeof err), 1);
  assert_int_equal(df_proto_allow_add(tmpdir, a.pub, "late", err, sizeof err), 0);
  assert_true(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  /* nor one that is a symlink */
  char q[300];
  snprintf(q, sizeof q, "%s/nodes.real", tmpdir);
  assert_int_equal(rename(p, q), 0);
  assert_int_equal(symlink(q, p), 0);
  assert_false(df_proto_allow_has(tmpdir, a.pub, NULL, 0));
  unlink(p);
  rename(q, p);
  /* a state directory others can write is refused, naming the fix */
  char d[300];
  snprintf(d, sizeof d, "%s/lax", tmpdir);
  assert_int_equal(df_proto_state_mkdir(d, err, sizeof err), 0);
  assert_int_equal(chmod(d, 0777), 0);
  assert_int_equal(df_proto_state_mkdir(d, err, sizeof err), -1);
  assert_non_null(strstr(err, "chmod 700"));
  rmdir(d);
}

static void test_sha_hex_ct(void **st) {
  (void)st;
  uint8_t h[32];
  char hex[65];
  df_proto_sha256("abc", 3, h);
  df_proto_hex(h, 32, hex);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  df_proto_sha256_ctx c;
  df_proto_sha256_init(&c);
  df_proto_sha256_update(&c, "a", 1);
  df_proto_sha256_update(&c, "bc", 2);
  uint8_t h2[32];
  df_proto_sha256_final(&c, h2);
  assert_memory_equal(h, h2, 32);
  assert_true(df_proto_ct_equal("abcd", "abcd", 4));
  assert_false(df_proto_ct_equal("abcd", "abce", 4));
  uint8_t r1[16], r2[16];
  char err[128];
  assert_int_equal(df_proto_random(r1, 16, err, sizeof err), 0);
  assert_int_equal(df_proto_random(r2, 16, err, sizeof err), 0);
  assert_memory_not_equal(r1, r2, 16);
}

/* ---- placement --------------------------------------------------------------------- */

/* ---- log rate limit --------------------------------------------------------------------- */

static void test_lograte(void **st) {
  (void)st;
  df_proto_lograte r;
  df_proto_lograte_init(&r, 1000);
  uint64_t held = 99;
  /* first copy written, repeats within the window held back and counted */
  assert_true(df_proto_lograte_admit(&r, "retrying", 0, &held));
  assert_int_equal(held, 0);
  for (int i = 1; i <= 9; i++) assert_false(df_proto_lograte_admit(&r, "retrying", i * 100 - 1, &held));
  /* a different line is not affected; lines differing in one byte are different */
  assert_true(df_proto_lograte_admit(&r, "other", 500, &held));
  assert_true(df_proto_lograte_admit(&r, "retryinG", 500, &held));
  /* after the window: written again, reporting the 9 held back */
  assert_true(df_proto_lograte_admit(&r, "retrying", 1000, &held));
  assert_int_equal(held, 9);
  assert_false(df_proto_lograte_admit(&r, "retrying", 1999, NULL));
  assert_true(df_proto_lograte_admit(&r, "retrying", 2000, &held));
  assert_int_equal(held, 1);
  /* more distinct lines than slots: the least recently seen are forgotten, never a crash */
  char line[32];
  for (int i = 0; i < 3 * DF_PROTO_LOGRATE_SLOTS; i++) {
    snprintf(line, sizeof line, "line %d", i);
    assert_true(df_proto_lograte_admit(&r, line, 2100 + i, &held));
    assert_int_equal(held, 0);
  }
  /* a line seen recently survives while it keeps being offered */
  df_proto_lograte_init(&r, 1000000);
  assert_true(df_proto_lograte_admit(&r, "hot", 0, NULL));
  for (int i = 0; i < 4 * DF_PROTO_LOGRATE_SLOTS; i++) {
    snprintf(line, sizeof line, "cold %d", i);
    assert_true(df_proto_lograte_admit(&r, line, 2 * i + 1, NULL));
    assert_false(df_proto_lograte_admit(&r, "hot", 2 * i + 2, NULL));
  }
}

static void test_place(void **st) {
  (void)st;
  int32_t prim[64], repl[64];
  /* budgets 1:2:5 slots 8, 16, 40 for 48 pairs: exactly proportional, no replicas room? */
  uint64_t b[3] = {8 * 100, 16 * 100, 40 * 100};
  int64_t placed = df_cluster_place(48, 100, 3, b, 1, prim, repl);
  assert_int_equal(placed, 48);
  int cnt[3] = {0}, rep = 0;
  for (int p = 0; p < 48; p++) {
    assert_true(prim[p] >= 0 && prim[p] < 3);
    cnt[prim[p]]++;
    if (repl[p] >= 0) {
      rep++;
      assert_int_not_equal(repl[p], prim[p]);
    }
  }
  assert_int_equal(cnt[0], 6);
  assert_int_equal(cnt[1], 12);
  assert_int_equal(cnt[2], 30);
  assert_int_equal(rep, 64 - 48); /* the spare 16 slots hold replicas */
  /* deterministic */
  int32_t prim2[64], repl2[64];
  df_cluster_place(48, 100, 3, b, 1, prim2, repl2);
  assert_memory_equal(prim, prim2, sizeof(int32_t) * 48);
  assert_memory_equal(repl, repl2, sizeof(int32_t) * 48);
  /* too little room: the rest stays with the coordinator; budgets are never exceeded */
  uint64_t small[2] = {5 * 100 + 99, 3 * 100};
  placed = df_cluster_place(20, 100, 2, small, 1, prim, repl);
  assert_int_equal(placed, 8);
  int c0 = 0, c1 = 0, none = 0;
  for (int p = 0; p < 20; p++) {
    c0 += prim[p] == 0, c1 += prim[p] == 1, none += prim[p] < 0;
    assert_int_equal(repl[p], -1);
  }
  assert_int_equal(c0, 5);
  assert_int_equal(c1, 3);
  assert_int_equal(none, 12);
  /* every layer's experts spread: with equal budgets, alternate */
  uint64_t eq[2] = {1000, 1000};
  df_cluster_place(8, 100, 2, eq, 0, prim, NULL);
  for (int p = 0; p < 8; p++) assert_int_equal(prim[p], p % 2);
  /* no nodes */
  assert_int_equal(df_cluster_place(4, 100, 0, NULL, 1, prim, repl), 0);
  for (int p = 0; p < 4; p++) assert_int_equal(prim[p], -1);
}

/* Device budgets first (df_cluster_place_hot): exact assignments on synthetic nodes. */
static void test_place_hot(void **st) {
  (void)st;
  int32_t prim[16], repl[16], prim2[16], repl2[16];
  /* node 0 has a GPU for 2 pairs of its 4; heat sends p2 and p4 (9, tie: lower index first)
   * there, the rest go by the budget rule in index order, the device pairs counted */
  uint64_t b[3] = {400, 300, 300}, dev[3] = {200, 0, 0};
  uint64_t heat[8] = {5, 1, 9, 0, 9, 3, 2, 7};
  assert_int_equal(df_cluster_place_hot(8, 100, 3, b, dev, heat, 1, prim, repl), 8);
  static const int32_t want_p[8] = {1, 2, 0, 1, 0, 2, 0, 0};
  static const int32_t want_r[8] = {2, 1, -1, -1, -1, -1, -1, -1};
  assert_memory_equal(prim, want_p, sizeof want_p);
  assert_memory_equal(repl, want_r, sizeof want_r);
  /* deterministic */
  df_cluster_place_hot(8, 100, 3, b, dev, heat, 1, prim2, repl2);
  assert_memory_equal(prim, prim2, sizeof want_p);
  assert_memory_equal(repl, repl2, sizeof want_r);
  /* hotter p7 instead of p4: p2, p7 on the device node */
  uint64_t heat2[8] = {5, 1, 9, 0, 6, 3, 2, 7};
  df_cluster_place_hot(8, 100, 3, b, dev, heat2, 0, prim, NULL);
  assert_int_equal(prim[2], 0);
  assert_int_equal(prim[7], 0);
  /* two GPU nodes, no heat (lower index = hotter): split in proportion to the device budgets
   * (300 : 100, ties to the lower node), then the rest by the budget rule */
  uint64_t b2[2] = {300, 500}, dev2[2] = {300, 100};
  assert_int_equal(df_cluster_place_hot(6, 100, 2, b2, dev2, NULL, 0, prim, NULL), 6);
  static const int32_t want2[6] = {0, 0, 0, 1, 1, 1};
  assert_memory_equal(prim, want2, sizeof want2);
  /* a device budget over the node's budget is clamped to it */
  uint64_t b3[2] = {200, 600}, dev3[2] = {1000, 0};
  assert_int_equal(df_cluster_place_hot(6, 100, 2, b3, dev3, NULL, 0, prim, NULL), 6);
  static const int32_t want3[6] = {0, 0, 1, 1, 1, 1};
  assert_memory_equal(prim, want3, sizeof want3);
  /* no device budget (all 0, or under one pair, or NULL): exactly df_cluster_place */
  uint64_t b4[3] = {8 * 100, 16 * 100, 40 * 100}, zero[3] = {0, 99, 0};
  int32_t pa[48], ra[48], pb[48], rb[48];
  df_cluster_place(48, 100, 3, b4, 1, pa, ra);
  df_cluster_place_hot(48, 100, 3, b4, zero, NULL, 1, pb, rb);
  assert_memory_equal(pa, pb, sizeof pa);
  assert_memory_equal(ra, rb, sizeof ra);
  uint64_t h48[48];
  for (int p = 0; p < 48; p++) h48[p] = (uint64_t)(p * 7919 % 48);
  df_cluster_place_hot(48, 100, 3, b4, NULL, h48, 1, pb, rb);
  assert_memory_equal(pa, pb, sizeof pa);
  assert_memory_equal(ra, rb, sizeof ra);
  /* a GPU node among CPU nodes: exactly its device slots hold the hottest pairs */
  uint64_t dev4[3] = {0, 0, 5 * 100};
  df_cluster_place_hot(48, 100, 3, b4, dev4, h48, 1, pb, rb);
  int on2 = 0;
  for (int p = 0; p < 48; p++) { /* h48 is a permutation of 0..47: the 5 hottest are 43..47 */
    if (h48[p] >= 43) assert_int_equal(pb[p], 2);
    on2 += pb[p] == 2;
  }
  assert_int_equal(on2, 30); /* its total share is unchanged */
}

/* ---- socket monitor ---------------------------------------------------------------- */

/* A call into libzmq that never returns cannot be interrupted: the watchdog ends the test
 * process with a line naming what hung (ctest then reports the failure). */
static const char *volatile g_watch_what = "";
static void on_watchdog(int sig) {
  (void)sig;
  static const char pre[] = "test_transport: watchdog: hung in ";
  ssize_t w = write(2, pre, sizeof pre - 1);
  w = write(2, (const char *)g_watch_what, strlen((const char *)g_watch_what));
  w = write(2, "\n", 1);
  (void)w;
  _exit(1);
}
static void watch(const char *what, unsigned s) {
  g_watch_what = what;
  signal(SIGALRM, on_watchdog);
  alarm(s);
}

static bool admit_all(void *user, const char *pub, const char *address, char *why, size_t whylen) {
  (void)user, (void)pub, (void)address, (void)why, (void)whylen;
  return true;
}

typedef struct mon_server {
  void *ctx, *zap, *router, *mon;
  df_proto_keypair kp;
  int port;
} mon_server;

/* A CURVE ROUTER on 127.0.0.1 (port 0 = any) with the ZAP handler and a monitor of the
 * events the coordinator watches; as in coordinator/cluster/cluster.c. */
static void mon_server_open(mon_server *s, int port) {
  char err[256], ep[64];
  memset(s, 0, sizeof *s);
  assert_int_equal(zmq_curve_keypair(s->kp.pub, s->kp.sec), 0);
  assert_non_null(s->ctx = zmq_ctx_new());
  assert_non_null(s->zap = df_proto_zap_bind(s->ctx, err, sizeof err));
  if (port) snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
  else snprintf(ep, sizeof ep, "tcp://127.0.0.1:*");
  for (int i = 0; !(s->router = df_proto_server_open(s->ctx, ep, &s->kp, 1 << 20, err, sizeof err)); i++) {
    assert_true(i < 200); /* the previous round's listener is going away */
    usleep(10000);
  }
  size_t len = sizeof ep;
  assert_int_equal(zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, ep, &len), 0);
  s->port = atoi(strrchr(ep, ':') + 1);
  s->mon = df_proto_monitor_open(s->ctx, s->router, "inproc://test-mon",
                                 ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                                 err, sizeof err);
  if (!s->mon) fprintf(stderr, "%s\n", err);
  assert_non_null(s->mon);
}

static void mon_server_close(mon_server *s) {
  df_proto_monitor_close(s->router, &s->mon);
  assert_null(s->mon);
  zmq_close(s->router);
  zmq_close(s->zap);
  zmq_ctx_term(s->ctx);
}

/* One plain-TCP peer that writes junk and hangs up: the handshake fails, the server drops
 * it (a handshake failure and a disconnect event). wait_close: read until the server has closed it (10 s bound); returns
 * 0 then, -1 if the server never did. Without wait_close (a flood peer) the connect is
 * bounded to 100 ms and the peer resets the connection (SO_LINGER 0) instead of leaving it
 * in TIME_WAIT: a flood of thousands of peers a second would otherwise use up the
 * machine's ephemeral ports within seconds, failing every later connect for a minute. */
static int junk_peer(int port, bool wait_close) {
  int fd = socket(AF_INET, SOCK_STREAM | (wait_close ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) return -1;
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = -1;
  bool connected = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  if (!connected && !wait_close && errno == EINPROGRESS) {
    /* a flood peer whose SYN goes unanswered (a listener between two rounds) gives up after
     * 100 ms instead of waiting out the kernel's SYN retries (1 s, 3 s, ...) */
    struct pollfd pf = {fd, POLLOUT, 0};
    int err = 0;
    socklen_t el = sizeof err;
    connected = poll(&pf, 1, 100) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
                err == 0;
  }
  if (connected) {
    static const char junk[] = "\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7fjunk junk junk";
    if (write(fd, junk, sizeof junk) == (ssize_t)sizeof junk && shutdown(fd, SHUT_WR) == 0) {
      rc = 0;
      if (wait_close) {
        char buf[256];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) {
        }
        rc = n == 0 ? 0 : -1; /* EOF: the server closed it; timeout: it never did */
      }
    }
  }
  if (!wait_close) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  close(fd);
  return rc;
}

static int drain_events(void *mon) {
  int n = 0;
  zmq_msg_t m;
  zmq_msg_init(&m);
  while (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) >= 0)
    if (!zmq_msg_more(&m)) n++;
  zmq_msg_close(&m);
  return n;
}

/* Nobody reads the monitor (as after the manager thread stopped polling): thousands of
 * events later, more than a default 1000 + 1000 message pipe holds, the socket still drops
 * junk peers and carries a CURVE client's message, and teardown returns. With a bounded
 * reader the I/O thread blocks in its monitor send and every connection stalls. */
static void test_monitor_undrained(void **st) {
  (void)st;
  watch("test_monitor_undrained", 120);
  mon_server s;
  mon_server_open(&s, 0);
  int peers = 1500;
  for (int i = 0; i < peers; i++) {
    if (junk_peer(s.port, true) != 0) {
      fprintf(stderr, "junk peer %d was never dropped: the socket's I/O is stalled\n", i);
      fail();
    }
  }
  /* a CURVE client whose key ZAP admits: its message arrives */
  char err[256], ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", s.port);
  df_proto_keypair ck;
  assert_int_equal(zmq_curve_keypair(ck.pub, ck.sec), 0);
  void *cctx = zmq_ctx_new();
  void *cl = df_proto_client_open(cctx, ep, &ck, s.kp.pub, 1 << 20, err, sizeof err);
  assert_non_null(cl);
  df_proto_msg ping = {.op = DF_PROTO_PING, .id = 7};
  bool sent = false, got = false;
  for (int64_t t = 0; !got && t < 30000; t += 100) {
    /* immediate: queued only once the handshake, which needs our ZAP answer, is done */
    if (!sent) sent = df_proto_send(cl, NULL, 0, &ping, NULL, 0, ZMQ_DONTWAIT, err, sizeof err) == 0;
    zmq_pollitem_t it[2] = {{s.zap, 0, ZMQ_POLLIN, 0}, {s.router, 0, ZMQ_POLLIN, 0}};
    zmq_poll(it, 2, 100);
    if (it[0].revents & ZMQ_POLLIN) {
      while (df_proto_zap_handle(s.zap, admit_all, NULL) == 0) {
      }
    }
    df_proto_frames f;
    if ((it[1].revents & ZMQ_POLLIN) && df_proto_recv(s.router, true, ZMQ_DONTWAIT, &f) == 0) {
      got = f.n_frames == 1;
      df_proto_frames_close(&f);
    }
  }
  assert_true(got);
  zmq_close(cl);
  zmq_ctx_term(cctx);
  /* the premise: every drop was reported, more events than a bounded pipe would hold */
  int events = drain_events(s.mon);
  if (events < 2 * peers) fprintf(stderr, "%d monitor events for %d dropped peers\n", events, peers);
  assert_true(events >= 2 * peers);
  assert_true(events > 2000);
  mon_server_close(&s);
  alarm(0);
}

typedef struct flood_arg {
  volatile int port, stop;
} flood_arg;

static void *flood_main(void *p) {
  flood_arg *a = p;
  while (!a->stop) {
    if (junk_peer(a->port, false) != 0) usleep(1000); /* between two servers */
  }
  return NULL;
}

/* Teardown while peers keep connecting and dropping, so monitor events are emitted at every
 * moment of it: every round's monitor close, socket close and zmq_ctx_term return. Closing
 * the reader before stopping the monitor deadlocked here within a few hundred rounds in 3
 * runs out of 4; this many rounds catch it nearly always. */
static void test_monitor_teardown_under_events(void **st) {
  (void)st;
  watch("test_monitor_teardown_under_events", 180);
  flood_arg fa = {0};
  pthread_t th[3];
  mon_server s;
  mon_server_open(&s, 0);
  int port = fa.port = s.port;
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, flood_main, &fa), 0);
  int rounds = 1000, busy = 0;
  for (int r = 0; r < rounds; r++) {
    if (r) mon_server_open(&s, port);
    /* events are flowing: wait (bounded) for the first of this round */
    zmq_pollitem_t it = {s.mon, 0, ZMQ_POLLIN, 0};
    busy += zmq_poll(&it, 1, 2000) == 1;
    drain_events(s.mon);
    mon_server_close(&s);
  }
  fa.stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_true(busy > rounds / 2); /* the premise: events were in flight at teardown */
  alarm(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codec_roundtrip),
      cmocka_unit_test(test_codec_malformed),
      cmocka_unit_test(test_codec_join_device),
      cmocka_unit_test(test_codec_k3),
      cmocka_unit_test(test_codec_truncations),
      cmocka_unit_test_setup_teardown(test_keys, setup_dir, teardown_dir),
      cmocka_unit_test_setup_teardown(test_tokens, setup_dir, teardown_dir),
      cmocka_unit_test_setup_teardown(test_allow_list, setup_dir, teardown_dir),
      cmocka_unit_test(test_sha_hex_ct),
      cmocka_unit_test(test_lograte),
      cmocka_unit_test(test_place),
      cmocka_unit_test(test_place_hot),
      cmocka_unit_test(test_monitor_undrained),
      cmocka_unit_test(test_monitor_teardown_under_events),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
