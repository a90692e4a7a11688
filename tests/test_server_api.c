/* tests/test_server_api.c — request validation (a table of accepted and refused bodies, each
 * refusal checked for its status and the field it names), the exact bytes of the SSE and JSON
 * responses, and stop strings matched across arbitrary splits of the text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "coordinator/server/api.h"
#include "coordinator/server/hosts.h"
#include "coordinator/generate/sched_stop.h"

typedef struct bad_case {
  df_api_kind kind;
  const char *body;
  int status;
  const char *param;    /* expected error param ("" = null) */
  const char *contains; /* a piece of the message */
} bad_case;

#define CHAT DF_API_CHAT
#define CMPL DF_API_COMPLETION
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const bad_case bad_cases[] = {
    {CHAT, "", 400, "", "could not parse the JSON"},
    {CHAT, "{\"model\":\"m\",", 400, "", "line 1"},
    {CHAT, "{\"model\":\"m\"} x", 400, "", "could not parse"},
    {CHAT, "[1,2]", 400, "", "must be a JSON object"},
    {CHAT, "\"str\"", 400, "", "JSON object"},
    {CHAT, "{\"model\":\"m\",\"model\":\"n\"," MSGS "}", 400, "", "duplicate"},
    {CHAT, "{" MSGS "}", 400, "model", "provide a model"},
    {CHAT, "{\"model\":null," MSGS "}", 400, "model", "must be a string"},
    {CHAT, "{\"model\":7," MSGS "}", 400, "model", "must be a string"},
    {CHAT, "{\"model\":\"\"," MSGS "}", 400, "model", "empty"},
    {CHAT, "{\"model\":\"m\"}", 400, "messages", "required"},
    {CHAT, "{\"model\":\"m\",\"messages\":[]}", 400, "messages", "at least one"},
    {CHAT, "{\"model\":\"m\",\"messages\":{}}", 400, "messages", "must be an array"},
    {CHAT, "{\"model\":\"m\",\"messages\":[3]}", 400, "messages[0]", "must be an object"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "required"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", 400, "messages[0].role", "supported roles"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\"}]}", 400, "messages[0].content", "required"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"a\"}]}", 400, "messages[0].tool_call_id", "Unrecognized"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "required"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", "string or an array"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 400, "messages[0].content", "NUL"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}", 400, "messages[0].name", "must be a string"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", 400, "messages[0].content[0].image_url", "Unrecognized"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", 400, "messages[0].content[0].type", "only 'text'"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[{}]}]}", 400, "messages[0].tool_calls[0].function", "must be an object"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}", 400, "messages[0].tool_calls[0].function.arguments", "not an object"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]}", 400, "messages[0].tool_calls[0].function.arguments", "required"},
    {CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", 400, "messages[0].tool_calls", "Unrecognized"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"foo\":1}", 400, "foo", "Unrecognized request argument supplied: foo"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"n\":2}", 400, "n", "n = 1"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"logprobs\":1}", 400, "logprobs", "boolean"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"top_logprobs\":2}", 400, "top_logprobs", "requires 'logprobs'"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"logprobs\":true,\"top_logprobs\":21}", 400, "top_logprobs", "[0, 20]"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0].function", "must be an object"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"retrieval\"}]}", 400, "tools[0].type", "\"function\""},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", 400, "tools[0].function.name", "1 to 64"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 400, "tools[1].function.name", "two tools"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}", 400, "tools[0].function.parameters", "JSON Schema object"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tool_choice\":\"required\"}", 400, "tool_choice", "no tools"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tool_choice\":\"maybe\"}", 400, "tool_choice", "must be"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", 400, "tool_choice.function.name", "not in 'tools'"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"parallel_tool_calls\":1}", 400, "parallel_tool_calls", "boolean"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"response_format\":{\"type\":\"xml\"}}", 400, "response_format.type", "must be"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"response_format\":{\"type\":\"json_schema\"}}", 400, "response_format.json_schema", "must be"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}}", 400, "response_format.json_schema.name", "required"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"response_format\":{\"type\":\"json_object\",\"schema\":{}}}", 400, "response_format.schema", "Unrecognized"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"presence_penalty\":0.5}", 400, "presence_penalty", "not supported"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"logit_bias\":{\"1\":2}}", 400, "logit_bias", "not supported"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"max_tokens\":0}", 400, "max_tokens", "[1,"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"max_tokens\":1.5}", 400, "max_tokens", "integer"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"max_tokens\":\"10\"}", 400, "max_tokens", "integer"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"max_tokens\":5,\"max_completion_tokens\":6}", 400, "max_completion_tokens", "disagree"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"temperature\":2.5}", 400, "temperature", "[0, 2]"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"temperature\":\"hot\"}", 400, "temperature", "number"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"top_p\":0}", 400, "top_p", "(0, 1]"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"top_k\":-2}", 400, "top_k", "[-1,"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"seed\":-1}", 400, "seed", "[0,"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"seed\":99999999999999999999}", 400, "", "could not parse"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stop\":\"\"}", 400, "stop", "empty"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop", "at most 4"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stop\":[\"a\",3]}", 400, "stop[1]", "string"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stop\":5}", 400, "stop", "string or an array"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stream\":\"yes\"}", 400, "stream", "boolean"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options", "only allowed when 'stream' is true"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"stream\":true,\"stream_options\":{\"x\":1}}", 400, "stream_options.x", "Unrecognized"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"chat_template_kwargs\":{\"foo\":true}}", 400, "chat_template_kwargs.foo", "enable_thinking (or thinking) and thinking_effort"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"chat_template_kwargs\":{\"thinking_effort\":\"huge\"}}", 400, "chat_template_kwargs.thinking_effort", "\"low\", \"medium\", \"high\", \"max\" or null"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"chat_template_kwargs\":{\"thinking_effort\":3}}", 400, "chat_template_kwargs.thinking_effort", "must be one of"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"reasoning_effort\":\"minimal\"}", 400, "reasoning_effort", "must be one of"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"reasoning_effort\":\"low\",\"chat_template_kwargs\":{\"thinking_effort\":\"max\"}}", 400, "chat_template_kwargs.thinking_effort", "disagrees"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"chat_template_kwargs\":{\"thinking\":true,\"enable_thinking\":false}}", 400, "chat_template_kwargs.enable_thinking", "disagree"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"chat_template_kwargs\":{\"thinking\":\"yes\"}}", 400, "chat_template_kwargs.thinking", "boolean"},
    {CHAT, "{\"model\":\"m\"," MSGS ",\"prompt\":\"x\"}", 400, "prompt", "Unrecognized"},
    {CMPL, "{\"model\":\"m\"}", 400, "prompt", "required"},
    {CMPL, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "one prompt per request"},
    {CMPL, "{\"model\":\"m\",\"prompt\":[[1,2],[3]]}", 400, "prompt[0]", "several prompts"},
    {CMPL, "{\"model\":\"m\",\"prompt\":[1,-2]}", 400, "prompt[1]", "[0,"},
    {CMPL, "{\"model\":\"m\",\"prompt\":[]}", 400, "prompt", "empty"},
    {CMPL, "{\"model\":\"m\",\"prompt\":{}}", 400, "prompt", "must be a string"},
    {CMPL, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", 400, "echo", "not supported"},
    {CMPL, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs", "[0, 5]"},
    {CMPL, "{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":2}", 400, "best_of", "not supported"},
    {CMPL, "{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", "not supported"},
    {CMPL, "{\"model\":\"m\",\"prompt\":\"x\"," MSGS "}", 400, "messages", "Unrecognized"},
};

static void test_refused_bodies(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    const bad_case *c = &bad_cases[i];
    df_api_request r;
    df_api_error e;
    int rc = df_api_parse(c->kind, c->body, strlen(c->body), &r, &e);
    if (rc != -1 || e.status != c->status || strcmp(e.param, c->param) ||
        !strstr(e.message, c->contains))
      fail_msg("case %zu %s: rc %d status %d param '%s' message '%s' (want %d '%s' '%s')", i,
               c->body, rc, e.status, e.param, e.message, c->status, c->param, c->contains);
    assert_null(r.model);
    assert_null(r.msgs);
    /* the error body is OpenAI-shaped */
    size_t n;
    char *b = df_api_error_body(&e, &n);
    assert_non_null(b);
    assert_non_null(strstr(b, "{\"error\":{\"message\":"));
    assert_non_null(strstr(b, "\"type\":\"invalid_request_error\""));
    free(b);
  }
}

static void test_accepted_chat(void **state) {
  (void)state;
  const char *body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
      "\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"r\"},"
      "{\"role\":\"user\",\"content\":\"\\u6771\\u4eac\"}],"
      "\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"seed\":42,"
      "\"stop\":[\"x\",\"yz\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
      "\"n\":1,\"logprobs\":false,\"tools\":[],\"tool_choice\":\"none\",\"response_format\":"
      "{\"type\":\"text\"},\"presence_penalty\":0,\"frequency_penalty\":0.0,\"logit_bias\":{},"
      "\"user\":\"u1\",\"ignore_eos\":true,\"chat_template_kwargs\":{\"enable_thinking\":false},"
      "\"top_logprobs\":null}";
  df_api_request r;
  df_api_error e;
  if (df_api_parse(DF_API_CHAT, body, strlen(body), &r, &e) != 0) fail_msg("%s", e.message);
  assert_string_equal(r.model, "m");
  assert_int_equal(r.n_msgs, 4);
  assert_string_equal(r.msgs[0].role, "system");
  assert_string_equal(r.msgs[1].content, "a\nb");
  assert_string_equal(r.msgs[2].content, "");
  assert_string_equal(r.msgs[2].reasoning, "r");
  assert_string_equal(r.msgs[3].content, "\xe6\x9d\xb1\xe4\xba\xac");
  assert_int_equal(r.max_tokens, 7);
  assert_true(r.temperature == 0.5 && r.top_p == 0.9);
  assert_int_equal(r.top_k, 0);
  assert_true(r.has_seed);
  assert_int_equal(r.seed, 42);
  assert_int_equal(r.n_stop, 2);
  assert_string_equal(r.stop[1], "yz");
  assert_true(r.stream && r.include_usage && r.ignore_eos);
  assert_int_equal(r.enable_thinking, 0);
  assert_int_equal(r.thinking_effort, DF_API_EFFORT_UNSET);
  df_api_request_free(&r);
  assert_null(r.model);
  /* Kimi K3's switches: thinking = enable_thinking; thinking_effort a name or null;
   * reasoning_effort the same names */
  const char *k3 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                   "\"chat_template_kwargs\":{\"thinking\":true,\"thinking_effort\":\"high\"}}";
  if (df_api_parse(DF_API_CHAT, k3, strlen(k3), &r, &e) != 0) fail_msg("%s", e.message);
  assert_int_equal(r.enable_thinking, 1);
  assert_int_equal(r.thinking_effort, DF_API_EFFORT_HIGH);
  df_api_request_free(&r);
  k3 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
       "\"chat_template_kwargs\":{\"thinking_effort\":null}}";
  if (df_api_parse(DF_API_CHAT, k3, strlen(k3), &r, &e) != 0) fail_msg("%s", e.message);
  assert_int_equal(r.thinking_effort, DF_API_EFFORT_NONE);
  df_api_request_free(&r);
  k3 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
       "\"reasoning_effort\":\"max\",\"chat_template_kwargs\":{\"thinking_effort\":\"max\"}}";
  if (df_api_parse(DF_API_CHAT, k3, strlen(k3), &r, &e) != 0) fail_msg("%s", e.message);
  assert_int_equal(r.thinking_effort, DF_API_EFFORT_MAX);
  df_api_request_free(&r);
}

static void test_accepted_completion_defaults(void **state) {
  (void)state;
  const char *b1 = "{\"model\":\"m\",\"prompt\":\"Once\",\"stop\":null,\"max_tokens\":null}";
  df_api_request r;
  df_api_error e;
  if (df_api_parse(DF_API_COMPLETION, b1, strlen(b1), &r, &e) != 0) fail_msg("%s", e.message);
  assert_string_equal(r.prompt, "Once");
  assert_int_equal(r.max_tokens, -1);
  assert_true(r.temperature < 0 && r.top_p < 0 && r.top_k < 0 && !r.has_seed && !r.stream);
  assert_int_equal(r.n_stop, 0);
  assert_int_equal(r.enable_thinking, -1);
  df_api_request_free(&r);
  const char *b2 = "{\"model\":\"m\",\"prompt\":[1,2,151935],\"stop\":\"\\n\",\"echo\":false}";
  if (df_api_parse(DF_API_COMPLETION, b2, strlen(b2), &r, &e) != 0) fail_msg("%s", e.message);
  assert_null(r.prompt);
  assert_int_equal(r.n_prompt_ids, 3);
  assert_int_equal(r.prompt_ids[2], 151935);
  assert_string_equal(r.stop[0], "\n");
  df_api_request_free(&r);
  const char *b3 = "{\"model\":\"m\",\"prompt\":[\"one\"]}";
  if (df_api_parse(DF_API_COMPLETION, b3, strlen(b3), &r, &e) != 0) fail_msg("%s", e.message);
  assert_string_equal(r.prompt, "one");
  df_api_request_free(&r);
}

static void test_sse_bytes(void **state) {
  (void)state;
  df_api_meta m = {.kind = DF_API_CHAT, .id = "chatcmpl-1", .created = 17, .model = "demo"};
  size_t n;
  char *s = df_api_sse_chunk(&m, &(df_api_part){.role = "assistant", .text = ""}, &n);
  assert_string_equal(s, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":17,\"model\":\"demo\",\"choices\":[{\"index\":0,\"delta\":"
                         "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                         "\"finish_reason\":null}]}\n\n");
  assert_int_equal(n, strlen(s));
  free(s);
  m.include_usage = true;
  s = df_api_sse_chunk(&m, &(df_api_part){.text = "\"\xc3\xa9\"\n\0x", .text_len = 7}, &n);
  assert_string_equal(s, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":17,\"model\":\"demo\",\"choices\":[{\"index\":0,\"delta\":"
                         "{\"content\":\"\\\"\xc3\xa9\\\"\\n\\u0000x\"},\"logprobs\":null,"
                         "\"finish_reason\":null}],\"usage\":null}\n\n");
  free(s);
  s = df_api_sse_chunk(&m, &(df_api_part){.finish = "length"}, &n);
  assert_non_null(strstr(s, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":null}\n\n"));
  free(s);
  assert_null(df_api_sse_chunk(&m, &(df_api_part){.text = "\xe6\x9d", .text_len = 2}, &n)); /* split UTF-8 is refused */
  df_api_usage u = {10, 5, 4, 0, 0};
  s = df_api_sse_usage(&m, &u, &n);
  assert_string_equal(s, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":17,\"model\":\"demo\",\"choices\":[],\"usage\":{"
                         "\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n");
  free(s);
  /* an answer decoded with the draft: the extension usage.speculative follows */
  df_api_usage ud = {10, 5, 4, 8, 6};
  s = df_api_sse_usage(&m, &ud, &n);
  assert_string_equal(s, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":17,\"model\":\"demo\",\"choices\":[],\"usage\":{"
                         "\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":4},\"speculative\":{"
                         "\"draft_tokens\":8,\"accepted_tokens\":6}}}\n\n");
  free(s);
  df_api_meta c = {.kind = DF_API_COMPLETION, .id = "cmpl-2", .created = 3, .model = "demo"};
  s = df_api_sse_chunk(&c, &(df_api_part){.text = "hi", .text_len = 2}, &n);
  assert_string_equal(s, "data: {\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":3,"
                         "\"model\":\"demo\",\"choices\":[{\"text\":\"hi\",\"index\":0,"
                         "\"logprobs\":null,\"finish_reason\":null}]}\n\n");
  free(s);
  s = df_api_response(&m, &(df_api_part){.text = "ok", .text_len = 2, .finish = "stop"}, &u, &n);
  assert_string_equal(s, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":17,"
                         "\"model\":\"demo\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                         "\"assistant\",\"content\":\"ok\"},\"logprobs\":null,\"finish_reason\":"
                         "\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,"
                         "\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":4}}}");
  free(s);
  s = df_api_response(&c, &(df_api_part){.text = "ok", .text_len = 2, .finish = "length"}, &u, &n);
  assert_string_equal(s, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":3,"
                         "\"model\":\"demo\",\"choices\":[{\"text\":\"ok\",\"index\":0,"
                         "\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":{"
                         "\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":4}}}");
  free(s);
  df_api_error e;
  df_api_error_set(&e, 400, NULL, "stop", NULL, "bad \"stop\"");
  s = df_api_sse_error(&e, &n);
  assert_string_equal(s, "data: {\"error\":{\"message\":\"bad \\\"stop\\\"\",\"type\":"
                         "\"invalid_request_error\",\"param\":\"stop\",\"code\":null}}\n\n");
  free(s);
}

/* Run `text` through the stop matcher split into pieces at every given cut; return what
 * was released and whether a stop matched. */
static char *run_stops(const char *text, const size_t *cuts, int n_cuts, const char *const *stops,
                       int n_stops, int *matched) {
  df_sched_stop st;
  df_sched_stop_init(&st, stops, n_stops);
  size_t tl = strlen(text), prev = 0;
  char *out = calloc(tl + 1, 1);
  size_t ol = 0;
  *matched = 0;
  for (int i = 0; i <= n_cuts && !*matched; i++) {
    size_t end = i < n_cuts ? cuts[i] : tl;
    const char *o;
    size_t on;
    int r = df_sched_stop_feed(&st, text + prev, end - prev, &o, &on);
    assert_true(r >= 0);
    memcpy(out + ol, o, on);
    ol += on;
    if (r == 1) *matched = 1;
    prev = end;
  }
  if (!*matched) {
    const char *o;
    size_t on;
    df_sched_stop_flush(&st, &o, &on);
    memcpy(out + ol, o, on);
    ol += on;
  }
  df_sched_stop_free(&st);
  return out;
}

static void test_stop_strings_across_splits(void **state) {
  (void)state;
  struct {
    const char *text;
    const char *stops[4];
    int n;
    const char *want;
    int matched;
  } cases[] = {
      {"Hello world. Bye", {"."}, 1, "Hello world", 1},
      {"abcabd", {"abd"}, 1, "abc", 1},
      {"aaab", {"aab"}, 1, "a", 1},
      {"no stop here", {"xyz", "zz"}, 2, "no stop here", 0},
      {"ends with a partial x", {"xy"}, 1, "ends with a partial x", 0},
      {"first END then STOP", {"STOP", "END"}, 2, "first ", 1},
      {"\xe6\x9d\xb1\xe4\xba\xac\xe9\x83\xbd", {"\xe4\xba\xac"}, 1, "\xe6\x9d\xb1", 1},
      {"line1\nline2", {"\n"}, 1, "line1", 1},
      {"STOP at start", {"STOP"}, 1, "", 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    size_t tl = strlen(cases[c].text);
    /* every split into two pieces and into single bytes */
    for (size_t cut = 0; cut <= tl; cut++) {
      int m;
      char *o = run_stops(cases[c].text, &cut, 1, cases[c].stops, cases[c].n, &m);
      if (strcmp(o, cases[c].want) || m != cases[c].matched)
        fail_msg("case %zu cut %zu: got '%s' matched %d", c, cut, o, m);
      free(o);
    }
    size_t cuts[64];
    for (size_t i = 0; i < tl; i++) cuts[i] = i + 1;
    int m;
    char *o = run_stops(cases[c].text, cuts, (int)tl, cases[c].stops, cases[c].n, &m);
    if (strcmp(o, cases[c].want) || m != cases[c].matched)
      fail_msg("case %zu bytewise: got '%s' matched %d", c, o, m);
    free(o);
  }
}

static void test_stop_holds_back_only_prefixes(void **state) {
  (void)state;
  const char *stops[] = {"<end>"};
  df_sched_stop st;
  df_sched_stop_init(&st, stops, 1);
  const char *o;
  size_t n;
  assert_int_equal(df_sched_stop_feed(&st, "abc<e", 5, &o, &n), 0);
  assert_int_equal(n, 3); /* "<e" could start "<end>" */
  assert_memory_equal(o, "abc", 3);
  assert_int_equal(df_sched_stop_feed(&st, "x", 1, &o, &n), 0);
  assert_int_equal(n, 3); /* "<ex" cannot */
  assert_memory_equal(o, "<ex", 3);
  assert_int_equal(df_sched_stop_feed(&st, "<en", 3, &o, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(df_sched_stop_feed(&st, "d>tail", 6, &o, &n), 1);
  assert_int_equal(n, 0);
  assert_int_equal(df_sched_stop_feed(&st, "more", 4, &o, &n), 1);
  assert_int_equal(n, 0);
  df_sched_stop_free(&st);
}

/* --max-connections-per-host counts IPv4 addresses one by one and IPv6 ones by their /64
 * (a host may hold a whole /64); IPv4-mapped IPv6 addresses stay IPv4 addresses. */
static int admit6(df_srv_hosts *h, int fd, const char *ip) {
  struct sockaddr_in6 a = {.sin6_family = AF_INET6};
  assert_int_equal(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
  return df_srv_hosts_admit(h, fd, (struct sockaddr *)&a, sizeof a);
}

static void test_per_host_prefixes(void **st) {
  (void)st;
  df_srv_hosts *h = df_srv_hosts_new(2, 64, 30, -1);
  assert_non_null(h);
  assert_int_equal(admit6(h, 100, "2001:db8::1"), 0);
  assert_int_equal(admit6(h, 101, "2001:db8::2"), 0);
  assert_int_equal(admit6(h, 102, "2001:db8::ffff:1"), 1); /* the same /64: over the limit */
  assert_int_equal(admit6(h, 103, "2001:db8:0:1::1"), 0);   /* the next /64 */
  assert_int_equal(admit6(h, 104, "::ffff:192.0.2.1"), 0);
  assert_int_equal(admit6(h, 105, "::ffff:192.0.2.1"), 0);
  assert_int_equal(admit6(h, 106, "::ffff:192.0.2.1"), 1);
  assert_int_equal(admit6(h, 107, "::ffff:192.0.2.2"), 0); /* another IPv4 host */
  struct sockaddr_in v4 = {.sin_family = AF_INET};
  inet_pton(AF_INET, "192.0.2.1", &v4.sin_addr); /* = its mapped form: the same host */
  assert_int_equal(df_srv_hosts_admit(h, 108, (struct sockaddr *)&v4, sizeof v4), 1);
  df_srv_hosts_free(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused_bodies),
      cmocka_unit_test(test_per_host_prefixes),
      cmocka_unit_test(test_accepted_chat),
      cmocka_unit_test(test_accepted_completion_defaults),
      cmocka_unit_test(test_sse_bytes),
      cmocka_unit_test(test_stop_strings_across_splits),
      cmocka_unit_test(test_stop_holds_back_only_prefixes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
