/* tests/fuzz/fuzz_api_request.c — libFuzzer target for the /v1 request parser.
 *
 * The first input byte picks the endpoint (even: chat, odd: completions), the rest is the
 * request body given to df_api_parse (coordinator/server/api.c). Checks its contract: returns
 * 0 or -1; on -1 a 400 (or 500 when out of memory) with a message and an error body; on 0
 * every documented invariant of df_api_request holds, and the parsed strings go through the
 * SSE and JSON builders and the stop matcher (coordinator/generate/sched_stop.c) without a
 * fault. ASan/UBSan catch bad reads, LeakSanitizer leaks. Built by tests/server.cmake; seeds
 * in tests/fuzz/corpus_api/, tokens in tests/fuzz/api.dict.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/server/api.h"
#include "coordinator/generate/sched_stop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const df_api_meta *m, const char *s, const char *const *stops, int n_stops) {
  size_t n;
  char *ev = df_api_sse_chunk(m, &(df_api_part){.text = s, .text_len = strlen(s)}, &n);
  if (!ev || n < 8 || memcmp(ev, "data: {", 7) || memcmp(ev + n - 2, "\n\n", 2)) __builtin_trap();
  free(ev);
  df_api_usage u = {1, 2, 0, 3, 1};
  ev = df_api_response(m, &(df_api_part){.text = s, .text_len = strlen(s), .finish = "stop"}, &u, &n);
  if (!ev) __builtin_trap();
  free(ev);
  df_sched_stop st;
  df_sched_stop_init(&st, stops, n_stops);
  size_t len = strlen(s), total = 0;
  for (size_t i = 0; i < len; i += 3) {
    const char *o;
    size_t on;
    int r = df_sched_stop_feed(&st, s + i, len - i < 3 ? len - i : 3, &o, &on);
    if (r < 0) __builtin_trap();
    total += on;
    if (total > len) __builtin_trap();
  }
  const char *o;
  size_t on;
  df_sched_stop_flush(&st, &o, &on);
  if (total + on > len) __builtin_trap();
  df_sched_stop_free(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  df_api_kind kind = data[0] & 1 ? DF_API_COMPLETION : DF_API_CHAT;
  df_api_request r;
  df_api_error e;
  int rc = df_api_parse(kind, (const char *)data + 1, size - 1, &r, &e);
  if (rc != 0 && rc != -1) __builtin_trap();
  if (rc == -1) {
    if ((e.status != 400 && e.status != 500) || !e.message[0] || !e.type) __builtin_trap();
    if (r.model || r.msgs || r.prompt || r.prompt_ids) __builtin_trap();
    size_t n;
    char *b = df_api_error_body(&e, &n);
    if (!b) __builtin_trap();
    free(b);
    return 0;
  }
  if (!r.model || !r.model[0] || r.kind != kind) __builtin_trap();
  if (kind == DF_API_CHAT && (!r.msgs || !r.n_msgs)) __builtin_trap();
  if (kind == DF_API_COMPLETION && !r.prompt == !r.prompt_ids) __builtin_trap();
  if (r.max_tokens == 0 || r.max_tokens < -1) __builtin_trap();
  if (r.temperature > 2 || (r.temperature < 0 && r.temperature != -1)) __builtin_trap();
  if (r.top_p == 0 || r.top_p > 1 || (r.top_p < 0 && r.top_p != -1)) __builtin_trap();
  if (r.n_stop < 0 || r.n_stop > DF_API_MAX_STOP) __builtin_trap();
  for (int i = 0; i < r.n_stop; i++)
    if (!r.stop[i] || !r.stop[i][0]) __builtin_trap();
  if (r.include_usage && !r.stream) __builtin_trap();
  df_api_meta m = {.kind = kind, .id = "x", .created = 1, .model = r.model,
                   .include_usage = r.include_usage};
  for (size_t i = 0; i < r.n_msgs; i++) {
    if (!r.msgs[i].role || !r.msgs[i].content) __builtin_trap();
    check_text(&m, r.msgs[i].content, (const char *const *)r.stop, r.n_stop);
  }
  if (r.prompt) check_text(&m, r.prompt, (const char *const *)r.stop, r.n_stop);
  for (size_t i = 0; i < r.n_prompt_ids; i++)
    if (r.prompt_ids[i] < 0) __builtin_trap();
  df_api_request_free(&r);
  return 0;
}
