/* tests/fuzz/fuzz_st_header.c — libFuzzer target for the safetensors header parser.
 *
 * Feeds each input as a complete file image to df_st_validate_buffer (engine/safetensors.c)
 * and checks its contract: returns 0 or -1, never reads outside the buffer (ASan), leaks
 * nothing (LeakSanitizer), and on error leaves one non-empty line in err. Built with clang
 * by tests/fuzz.cmake; seeds in tests/fuzz/corpus_st/ (make_corpus_st.py regenerates them),
 * tokens in tests/fuzz/st_header.dict.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512];
  size_t n = (size_t)-1;
  err[0] = '\0';
  int rc = df_st_validate_buffer(data, size, "fuzz.safetensors", &n, err, sizeof err);
  if (rc != 0 && rc != -1) __builtin_trap();
  if (rc == -1 && (err[0] == '\0' || strchr(err, '\n') != NULL || n != 0)) __builtin_trap();
  /* Each tensor takes at least a dozen header bytes, so the count is bounded by the size. */
  if (rc == 0 && n > size) __builtin_trap();
  /* Truncated error buffers must stay terminated. */
  char small[6];
  memset(small, 'x', sizeof small);
  if (df_st_validate_buffer(data, size, "fuzz.safetensors", NULL, small, 5) != rc) __builtin_trap();
  if (rc == -1 && (small[4] != '\0' || small[5] != 'x')) __builtin_trap();
  return 0;
}
