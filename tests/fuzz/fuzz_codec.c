/* tests/fuzz/fuzz_codec.c — libFuzzer target for the cluster message codec
 * (transport/codec.c).
 *
 * Feeds each input as an untrusted header frame to df_proto_decode and checks its contract:
 * returns 0 or -1, never reads outside the buffer (ASan), leaks nothing (LeakSanitizer),
 * allocates at most a bounded multiple of the input (the bounded scan), on error leaves one
 * non-empty line in err and no arrays; on success the message re-encodes and decodes to the
 * same fields. Built with clang by tests/fuzz.cmake; seeds in tests/fuzz/corpus_codec/
 * (tests/fuzz/make_corpus_codec.py regenerates them).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_proto_msg m, m2;
  int code = 0;
  char err[512];
  err[0] = '\0';
  int rc = df_proto_decode(data, size, &m, &code, err, sizeof err);
  if (rc != 0 && rc != -1) __builtin_trap();
  if (rc == -1) {
    if (err[0] == '\0' || strchr(err, '\n') || m.pairs || m.tensors || m.experts || m.rows)
      __builtin_trap();
    if (code != DF_PROTO_E_MALFORMED && code != DF_PROTO_E_VERSION) __builtin_trap();
    return 0;
  }
  if (m.v != DF_PROTO_VERSION || m.op <= 0 || m.op >= DF_PROTO_OP_COUNT) __builtin_trap();
  if (m.op == DF_PROTO_FFN && (m.total_rows <= 0 || m.total_rows > DF_PROTO_MAX_ROWS)) __builtin_trap();
  uint8_t *buf = NULL;
  size_t len = 0;
  if (df_proto_encode(&m, &buf, &len, err, sizeof err) != 0) __builtin_trap();
  if (df_proto_decode(buf, len, &m2, &code, err, sizeof err) != 0) __builtin_trap();
  if (m2.op != m.op || m2.id != m.id || m2.n_pairs != m.n_pairs || m2.n_groups != m.n_groups ||
      m2.total_rows != m.total_rows || m2.epoch != m.epoch || strcmp(m2.name, m.name) ||
      strcmp(m2.reason, m.reason) || strcmp(m2.token, m.token))
    __builtin_trap();
  if (m.n_pairs && memcmp(m.pairs, m2.pairs, (size_t)m.n_pairs * 8)) __builtin_trap();
  if (m.n_groups && memcmp(m.rows, m2.rows, (size_t)m.n_groups * 8)) __builtin_trap();
  free(buf);
  df_proto_msg_free(&m);
  df_proto_msg_free(&m2);
  return 0;
}
