/* tests/test_tool_calls.c — parsing tool calls out of generated text (engine/text/tool_calls.h).
 *
 * Checks, per family (Qwen3, DeepSeek-V3, Kimi K2 Thinking, Kimi K3):
 *   - real renderings: an assistant message with tool calls rendered by df_chat_render (the
 *     published templates in tests/tokenizer/, Kimi K3's built-in XTML), the text after the
 *     generation prompt (the stop token cut off) fed whole, cut at every byte, and byte by byte:
 *     the same calls (name, arguments JSON-equal to the given ones, the model's id for Kimi),
 *     the content exactly as expected, and the streaming invariants below;
 *   - malformed calls (bad JSON arguments, a broken header, unterminated, an unknown marker, cut
 *     by length) come back as content, byte for byte, and a good call after a bad one is kept;
 *   - the forced-call frames (df_tool_call_frame) parse back as one call of that name;
 *   - UTF-8: characters cut between pieces, ill-formed bytes as U+FFFD;
 *   - fuzz: random text built from marker pieces, JSON pieces and random bytes, cut at random:
 *     every event and result is valid UTF-8, the result does not depend on the cuts, and the
 *     content with each call's raw text put back at its place is the input (sanitized).
 * Streaming invariants (every run): CONTENT pieces joined = the final content; per call,
 * CALL_BEGIN first, ARGS pieces joined = the final arguments, then CALL_END; a CALL_DROP only
 * for an announced call that has no CALL_END; complete calls have arguments that are a JSON
 * object; ids are the model's (Kimi K2) or "call_" + 24 letters and digits.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"
#include "tests/chat_fixtures.h"

#define FW "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"
#define DS_EOS "<" FW "end" SP "of" SP "sentence" FW ">"

/* ---- running the parser ------------------------------------------------------------------- */

#define MAXC 16
typedef struct run {
  char *content; /* from the events */
  size_t content_len;
  size_t n_begin;
  char *args[MAXC]; /* per stream index, from the events */
  size_t args_len[MAXC];
  char *name[MAXC], *id[MAXC];
  bool ended[MAXC], dropped[MAXC];
  /* the final answer */
  char *final_content;
  size_t final_len, n_calls;
  df_tool_call_out calls[MAXC];
  char *call_args[MAXC], *call_name[MAXC], *call_id[MAXC], *call_raw[MAXC];
} run;

static void append(char **p, size_t *n, const char *s, size_t k) {
  *p = realloc(*p, *n + k + 1);
  assert_non_null(*p);
  memcpy(*p + *n, s, k);
  *n += k;
  (*p)[*n] = 0;
}

static char *memdup0(const char *s, size_t n) { /* strndup stops at a NUL byte */
  char *d = malloc(n + 1);
  assert_non_null(d);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static bool utf8_ok(const char *s, size_t n) { return df_tok_utf8_invalid_at(s, n) == n; }

static void take_events(run *r, const df_tool_ev *ev, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const df_tool_ev *e = &ev[i];
    assert_true(e->index < MAXC);
    switch (e->kind) {
    case DF_TOOL_EV_CONTENT:
      assert_true(e->len > 0 && utf8_ok(e->text, e->len) && e->text[e->len] == 0);
      append(&r->content, &r->content_len, e->text, e->len);
      break;
    case DF_TOOL_EV_CALL_BEGIN:
      assert_int_equal(e->index, r->n_begin); /* announced in order, numbers not reused */
      r->n_begin++;
      assert_true(utf8_ok(e->name, strlen(e->name)) && utf8_ok(e->id, strlen(e->id)));
      assert_true(*e->name && *e->id);
      r->name[e->index] = strdup(e->name);
      r->id[e->index] = strdup(e->id);
      append(&r->args[e->index], &r->args_len[e->index], "", 0);
      break;
    case DF_TOOL_EV_ARGS:
      assert_true(e->index < r->n_begin && !r->ended[e->index] && !r->dropped[e->index]);
      assert_true(e->len > 0 && utf8_ok(e->text, e->len));
      append(&r->args[e->index], &r->args_len[e->index], e->text, e->len);
      break;
    case DF_TOOL_EV_CALL_END:
      assert_true(e->index < r->n_begin && !r->ended[e->index] && !r->dropped[e->index]);
      r->ended[e->index] = true;
      break;
    case DF_TOOL_EV_CALL_DROP:
      assert_true(e->index < r->n_begin && !r->ended[e->index] && !r->dropped[e->index]);
      r->dropped[e->index] = true;
      break;
    default:
      fail_msg("event kind %d", (int)e->kind);
    }
  }
}

/* Feed text[0..len) cut at the offsets cuts[0..nc) (ascending), finish, check the invariants. */
static void parse_cuts(df_chat_family f, uint64_t seed, const char *text, size_t len,
                       const size_t *cuts, size_t nc, bool cut_by_length, run *r) {
  memset(r, 0, sizeof *r);
  append(&r->content, &r->content_len, "", 0);
  df_tool_parser *p = df_tool_parser_new(f, seed);
  assert_non_null(p);
  const df_tool_ev *ev;
  size_t nev, at = 0;
  for (size_t k = 0; k <= nc; k++) {
    size_t to = k < nc ? cuts[k] : len;
    assert_int_equal(df_tool_parser_feed(p, text + at, to - at, &ev, &nev), 0);
    take_events(r, ev, nev);
    at = to;
  }
  assert_int_equal(df_tool_parser_finish(p, cut_by_length, &ev, &nev), 0);
  take_events(r, ev, nev);
  assert_int_equal(df_tool_parser_feed(p, "x", 1, &ev, &nev), -1); /* after finish */
  size_t cl;
  const char *c = df_tool_parser_content(p, &cl);
  assert_int_equal(cl, r->content_len);
  assert_memory_equal(c, r->content, cl);
  r->final_content = memdup0(c, cl);
  r->final_len = cl;
  r->n_calls = df_tool_parser_n_calls(p);
  assert_true(r->n_calls <= MAXC);
  assert_null(df_tool_parser_call(p, r->n_calls));
  size_t ended = 0;
  for (size_t i = 0; i < r->n_begin; i++) {
    assert_true(r->ended[i] != r->dropped[i]); /* every announced call is decided */
    ended += r->ended[i];
  }
  assert_int_equal(ended, r->n_calls);
  for (size_t i = 0; i < r->n_calls; i++) {
    const df_tool_call_out *o = df_tool_parser_call(p, i);
    size_t si = o->stream_index;
    assert_true(si < r->n_begin && r->ended[si]);
    assert_string_equal(o->name, r->name[si]);
    assert_string_equal(o->id, r->id[si]);
    assert_int_equal(o->arguments_len, r->args_len[si]);
    assert_memory_equal(o->arguments, r->args[si], o->arguments_len);
    assert_true(utf8_ok(o->arguments, o->arguments_len) && utf8_ok(o->raw, o->raw_len));
    json_error_t je;
    json_t *v = json_loadb(o->arguments, o->arguments_len, 0, &je);
    if (!v) fail_msg("arguments %s: %s", o->arguments, je.text);
    assert_true(json_is_object(v));
    json_decref(v);
    if (f != DF_CHAT_KIMI_K2 && f != DF_CHAT_KIMI_K2_THINKING) {
      assert_int_equal(strlen(o->id), 29);
      assert_memory_equal(o->id, "call_", 5);
      for (size_t k = 5; k < 29; k++)
        assert_true((o->id[k] >= '0' && o->id[k] <= '9') || (o->id[k] >= 'a' && o->id[k] <= 'z') ||
                    (o->id[k] >= 'A' && o->id[k] <= 'Z'));
    }
    if (i) assert_true(o->content_pos >= r->calls[i - 1].content_pos);
    assert_true(o->content_pos <= cl);
    r->calls[i] = *o;
    r->call_args[i] = memdup0(o->arguments, o->arguments_len);
    r->call_name[i] = strdup(o->name);
    r->call_id[i] = strdup(o->id);
    r->call_raw[i] = memdup0(o->raw, o->raw_len);
    r->calls[i].arguments = r->call_args[i];
    r->calls[i].name = r->call_name[i];
    r->calls[i].id = r->call_id[i];
    r->calls[i].raw = r->call_raw[i];
  }
  /* every input byte is accounted for: content with the calls' raw text put back */
  size_t sl;
  char *san = df_tok_utf8_sanitize(text, len, &sl);
  assert_non_null(san);
  char *re = NULL;
  size_t rl = 0, from = 0;
  append(&re, &rl, "", 0);
  for (size_t i = 0; i < r->n_calls; i++) {
    append(&re, &rl, r->final_content + from, r->calls[i].content_pos - from);
    append(&re, &rl, r->calls[i].raw, r->calls[i].raw_len);
    from = r->calls[i].content_pos;
  }
  append(&re, &rl, r->final_content + from, cl - from);
  if (rl != sl || memcmp(re, san, sl) != 0) {
    size_t d = 0;
    while (d < rl && d < sl && re[d] == san[d]) d++;
    fail_msg("reassembled text (%zu bytes, %zu calls) differs from the input (%zu bytes) at %zu:"
             "\n<%s>\n<%s>", rl, r->n_calls, sl, d, re + d, san + d);
  }
  free(re);
  free(san);
  df_tool_parser_destroy(&p);
  assert_null(p);
}

static void run_free(run *r) {
  free(r->content);
  free(r->final_content);
  for (size_t i = 0; i < MAXC; i++) {
    free(r->args[i]);
    free(r->name[i]);
    free(r->id[i]);
    free(r->call_args[i]);
    free(r->call_name[i]);
    free(r->call_id[i]);
    free(r->call_raw[i]);
  }
  memset(r, 0, sizeof *r);
}

static void parse_whole(df_chat_family f, const char *text, bool cut, run *r) {
  parse_cuts(f, 42, text, strlen(text), NULL, 0, cut, r);
}

/* Two runs give the same final answer. */
static void same_answer(const run *a, const run *b) {
  assert_int_equal(a->final_len, b->final_len);
  assert_memory_equal(a->final_content, b->final_content, a->final_len);
  assert_int_equal(a->n_calls, b->n_calls);
  for (size_t i = 0; i < a->n_calls; i++) {
    assert_string_equal(a->calls[i].name, b->calls[i].name);
    assert_string_equal(a->calls[i].id, b->calls[i].id);
    assert_string_equal(a->calls[i].arguments, b->calls[i].arguments);
    assert_int_equal(a->calls[i].content_pos, b->calls[i].content_pos);
    assert_int_equal(a->calls[i].raw_len, b->calls[i].raw_len);
    assert_memory_equal(a->calls[i].raw, b->calls[i].raw, a->calls[i].raw_len);
  }
}

/* Whole, cut at every byte (two pieces), and byte by byte: all the same answer. */
static void parse_every_cut(df_chat_family f, const char *text, run *whole) {
  size_t len = strlen(text);
  parse_cuts(f, 42, text, len, NULL, 0, false, whole);
  for (size_t c = 0; c <= len; c++) {
    run r;
    parse_cuts(f, 42, text, len, &c, 1, false, &r);
    same_answer(whole, &r);
    run_free(&r);
  }
  size_t *all = malloc((len + 1) * sizeof *all);
  assert_non_null(all);
  for (size_t c = 0; c < len; c++) all[c] = c;
  run r;
  parse_cuts(f, 42, text, len, all, len, false, &r);
  same_answer(whole, &r);
  run_free(&r);
  free(all);
}

static bool json_text_equal(const char *a, const char *b) {
  json_t *x = json_loads(a, 0, NULL), *y = json_loads(b, 0, NULL);
  bool eq = x && y && json_equal(x, y);
  json_decref(x);
  json_decref(y);
  return eq;
}

/* ---- real renderings ---------------------------------------------------------------------- */

static df_chat_template *load(df_chat_family f) { return chat_fixture_template(f); }

typedef struct example {
  const char *what;
  const char *content;   /* the assistant's content (NULL: JSON null) */
  const char *reasoning; /* NULL: none */
  size_t n_calls;
  df_chat_tool_call calls[4];
  const char *want_content; /* the content the parser must give back */
} example;

/* Render [user, assistant(example)] and take the text after the generation prompt, the stop
 * token cut off; parse it every way; compare with the example. */
static void check_example(df_chat_family f, const df_chat_template *t, const example *x,
                          const char *stop) {
  char err[512];
  df_chat_msg m[2] = {{.role = "user", .content = "Weather in Paris and Rome?"},
                      {.role = "assistant", .content = x->content,
                       .reasoning_content = x->reasoning, .tool_calls = x->calls,
                       .n_tool_calls = x->n_calls}};
  df_chat_opts gen = {.add_generation_prompt = true, .enable_thinking = -1};
  df_chat_opts none = {.add_generation_prompt = false, .enable_thinking = -1};
  df_chat_text head, all;
  if (df_chat_render(t, m, 1, &gen, &head, err, sizeof err) != 0) fail_msg("%s", err);
  if (df_chat_render(t, m, 2, &none, &all, err, sizeof err) != 0) fail_msg("%s", err);
  if (all.len < head.len || memcmp(all.text, head.text, head.len) != 0)
    fail_msg("%s: the generation prompt is not a prefix:\n%s\n%s", x->what, head.text, all.text);
  size_t tl = all.len - head.len, sl = strlen(stop);
  char *gen_text = strndup(all.text + head.len, tl);
  if (tl >= sl && memcmp(gen_text + tl - sl, stop, sl) == 0) gen_text[tl - sl] = 0;
  run r;
  parse_every_cut(f, gen_text, &r);
  if (strcmp(r.final_content, x->want_content) != 0)
    fail_msg("%s: content\n<%s>, want\n<%s>\n(text <%s>)", x->what, r.final_content,
             x->want_content, gen_text);
  if (r.n_calls != x->n_calls)
    fail_msg("%s: %zu calls, want %zu (text <%s>)", x->what, r.n_calls, x->n_calls, gen_text);
  for (size_t i = 0; i < x->n_calls; i++) {
    assert_string_equal(r.calls[i].name, x->calls[i].name);
    const char *want = *x->calls[i].arguments ? x->calls[i].arguments : "{}";
    if (!json_text_equal(r.calls[i].arguments, want))
      fail_msg("%s: call %zu arguments %s, want %s", x->what, i, r.calls[i].arguments,
               want);
    if (x->calls[i].id) assert_string_equal(r.calls[i].id, x->calls[i].id);
    assert_int_equal(r.calls[i].stream_index, i);
  }
  run_free(&r);
  free(gen_text);
  df_chat_text_free(&head);
  df_chat_text_free(&all);
}

#define PARIS "{\"city\": \"Paris\"}"
#define ROME "{\"city\":\"Rome\",\"days\":2,\"opts\":{\"units\":[\"°C\",null],\"deep\":{\"x\":-1.5e3}}}"
#define UNI "{\"q\": \"東京 café 👍🏽 \\\"quoted\\\" \\\\ \\n </tool_call> ``` <|tool_call_end|>\"}"

static void test_qwen3_rendered(void **state) {
  (void)state;
  df_chat_template *t = load(DF_CHAT_QWEN3);
  const example xs[] = {
      /* the last assistant turn gets an empty think block; its "\n\n" is followed by the call
       * with no "\n" of the template's own, so the parser takes the second "\n" for the call's */
      {"one call, no content", "", NULL, 1, {{"get_weather", PARIS, NULL}}, "<think>\n\n</think>\n"},
      {"content before calls", "Let me check both.", NULL, 2,
       {{"get_weather", PARIS, NULL}, {"get_weather", ROME, NULL}},
       "<think>\n\n</think>\n\nLet me check both."},
      {"reasoning, content, three calls", "Checking.", "The user wants weather.", 3,
       {{"get_weather", PARIS, NULL}, {"get_weather", ROME, NULL}, {"search", UNI, NULL}},
       "<think>\nThe user wants weather.\n</think>\n\nChecking."},
      {"empty arguments", "", NULL, 1, {{"now", "{}", NULL}}, "<think>\n\n</think>\n"},
  };
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
    check_example(DF_CHAT_QWEN3, t, &xs[i], "<|im_end|>\n");
  df_chat_template_destroy(&t);
}

static void test_deepseek_rendered(void **state) {
  (void)state;
  df_chat_template *t = load(DF_CHAT_DEEPSEEK_V3);
  /* the template closes the calls block only after a later call (its quirk); either way the
   * text after the generation prompt is the calls and the end of sentence (the stop token) */
  const example xs[] = {
      {"one call", NULL, NULL, 1, {{"get_weather", PARIS, NULL}}, ""},
      {"two calls", NULL, NULL, 2, {{"get_weather", PARIS, NULL}, {"get_weather", ROME, NULL}}, ""},
      {"unicode arguments", NULL, NULL, 2, {{"search", UNI, NULL}, {"now", "{}", NULL}}, ""},
  };
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
    check_example(DF_CHAT_DEEPSEEK_V3, t, &xs[i], DS_EOS);
  df_chat_template_destroy(&t);
  /* three calls as the model writes them (one block, calls separated by line breaks) */
  const char *three = "Sure." "<" FW "tool" SP "calls" SP "begin" FW ">"
                      "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">a\n"
                      "```json\n{}\n```<" FW "tool" SP "call" SP "end" FW ">\n"
                      "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">b\n"
                      "```json\n{\"x\": [1, 2]}\n```<" FW "tool" SP "call" SP "end" FW ">\n"
                      "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">c\n"
                      "```json\n{\"y\": \"```\"}\n```<" FW "tool" SP "call" SP "end" FW ">"
                      "<" FW "tool" SP "calls" SP "end" FW ">";
  run r;
  parse_every_cut(DF_CHAT_DEEPSEEK_V3, three, &r);
  assert_string_equal(r.final_content, "Sure.");
  assert_int_equal(r.n_calls, 3);
  assert_string_equal(r.calls[0].name, "a");
  assert_string_equal(r.calls[0].arguments, "{}");
  assert_string_equal(r.calls[1].arguments, "{\"x\": [1, 2]}");
  assert_string_equal(r.calls[2].name, "c");
  assert_string_equal(r.calls[2].arguments, "{\"y\": \"```\"}");
  /* the section end belongs to the last call */
  assert_non_null(strstr(r.calls[2].raw, "calls" SP "end"));
  run_free(&r);
}

static void test_kimi_rendered(void **state) {
  (void)state;
  df_chat_template *t = load(DF_CHAT_KIMI_K2_THINKING);
  const example xs[] = {
      {"one call", "", "Need the weather.", 1,
       {{"get_weather", PARIS, "functions.get_weather:0"}}, "<think>Need the weather.</think>"},
      {"content, two calls", "Checking both.", NULL, 2,
       {{"get_weather", PARIS, "functions.get_weather:0"},
        {"get_weather", ROME, "functions.get_weather:1"}},
       "<think></think>Checking both."},
      {"null content, unicode arguments", NULL, NULL, 2,
       {{"search", UNI, "functions.search:3"}, {"now", "{}", "functions.now:4"}},
       "<think></think>"},
  };
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
    check_example(DF_CHAT_KIMI_K2_THINKING, t, &xs[i], "<|im_end|>");
  df_chat_template_destroy(&t);
  /* Kimi K2 (Instruct) uses the same call format */
  run r;
  parse_every_cut(DF_CHAT_KIMI_K2,
                  "ok<|tool_calls_section_begin|><|tool_call_begin|> functions.f:7 "
                  "<|tool_call_argument_begin|> {\"a\": 1} <|tool_call_end|>"
                  "<|tool_calls_section_end|>",
                  &r);
  assert_string_equal(r.final_content, "ok");
  assert_int_equal(r.n_calls, 1);
  assert_string_equal(r.calls[0].id, "functions.f:7");
  assert_string_equal(r.calls[0].name, "f");
  assert_string_equal(r.calls[0].arguments, "{\"a\": 1}");
  run_free(&r);
}

static void test_k3_rendered(void **state) {
  (void)state;
  df_chat_template *t = load(DF_CHAT_KIMI_K3);
  const example xs[] = {
      {"one call", "", "Need it.", 1, {{"get_weather", PARIS, NULL}},
       "Need it.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
       "<|close|>message<|sep|>"},
      {"content, two calls, odd name", "Checking.", NULL, 2,
       {{"get_weather", ROME, NULL}, {"a\"b&c", UNI, NULL}},
       "<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
       "<|close|>message<|sep|>"},
      /* blank arguments: the template writes no json element; they read back as {} */
      {"no arguments", "", NULL, 2, {{"now", "", NULL}, {"get_weather", PARIS, NULL}},
       "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
       "<|close|>message<|sep|>"},
  };
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    example x = xs[i];
    check_example(DF_CHAT_KIMI_K3, t, &x, "<|end_of_msg|>");
  }
  df_chat_template_destroy(&t);
}

/* ---- malformed text is content -------------------------------------------------------------- */

typedef struct bad {
  df_chat_family f;
  const char *text;
  bool cut;
  size_t n_calls;       /* calls that must come out anyway */
  const char *content;  /* NULL: the whole text */
} bad;

static void test_malformed(void **state) {
  (void)state;
#define QC(body) "<tool_call>\n" body "\n</tool_call>"
#define DSC(name, args)                                                                    \
  "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">" name        \
  "\n```json\n" args "\n```<" FW "tool" SP "call" SP "end" FW ">"
#define KC(id, args) "<|tool_call_begin|>" id "<|tool_call_argument_begin|>" args "<|tool_call_end|>"
#define K3C(attrs, args)                                                                   \
  "<|open|>call" attrs "<|sep|><|open|>json type=\"object\"<|sep|>" args                   \
  "<|close|>json<|sep|><|close|>call<|sep|>"
  static const bad k[] = {
      /* Qwen3 */
      {DF_CHAT_QWEN3, "x" QC("{\"name\": \"f\", \"arguments\": {\"a\": }}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"name\": \"f\", \"arguments\": [1]}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"name\": \"f\", \"arguments\": \"{}\"}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"arguments\": {}, \"name\": \"f\"}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"name\": \"\", \"arguments\": {}}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"name\": \"f\", \"arguments\": {}, \"id\": 1}"), false, 0, NULL},
      {DF_CHAT_QWEN3, QC("{\"name\": \"f\", \"arguments\": {}"), false, 0, NULL}, /* no outer } */
      {DF_CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", true, 0, NULL},
      {DF_CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_", false, 0,
       NULL},
      {DF_CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"argu", true, 0, NULL},
      {DF_CHAT_QWEN3, "<tool_callx>{\"name\": \"f\", \"arguments\": {}}</tool_call>", false, 0, NULL},
      {DF_CHAT_QWEN3, "a <tool_call> b </tool_call> c", false, 0, NULL},
      {DF_CHAT_QWEN3, "<tool_response>\n{}\n</tool_response>", false, 0, NULL},
      /* a good call after a bad one and one before it */
      {DF_CHAT_QWEN3,
       "A" QC("{\"name\": \"f\", \"arguments\": {}}") "\n" QC("{\"name\": \"g\", \"arguments\": {\"a\"}}")
       "\n" QC("{\"name\": \"h\", \"arguments\": {\"b\": 2}}") "Z", false, 2,
       "A\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\"}}\n</tool_call>Z"},
      /* DeepSeek-V3 */
      {DF_CHAT_DEEPSEEK_V3, DSC("f", "{\"a\": 1"), false, 0, NULL},
      {DF_CHAT_DEEPSEEK_V3, DSC("", "{}"), false, 0, NULL},
      {DF_CHAT_DEEPSEEK_V3,
       "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">f\n{}\n```<" FW
       "tool" SP "call" SP "end" FW ">", false, 0, NULL}, /* no ```json */
      {DF_CHAT_DEEPSEEK_V3,
       "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">f\n```json\n{}<" FW
       "tool" SP "call" SP "end" FW ">", false, 0, NULL}, /* no closing ``` */
      {DF_CHAT_DEEPSEEK_V3,
       "<" FW "tool" SP "call" SP "begin" FW ">func<" FW "tool" SP "sep" FW ">f\n```json\n{}\n```<" FW
       "tool" SP "call" SP "end" FW ">", false, 0, NULL},
      {DF_CHAT_DEEPSEEK_V3,
       "<" FW "tool" SP "calls" SP "begin" FW "><" FW "tool" SP "call" SP "begin" FW
       ">function<" FW "tool" SP "sep" FW ">f\n```json\n{\"a\": 1}", true, 0, NULL},
      {DF_CHAT_DEEPSEEK_V3, "<" FW "tool" SP "calls" SP "begin" FW ">no call", false, 0, NULL},
      /* the line break after a dropped call is content: whitespace joins a call only after a
       * complete one (and Qwen3's single "\n" before a call) */
      {DF_CHAT_DEEPSEEK_V3, DSC("f", "{}") "\n" DSC("g", "{]") "\n" DSC("h", "{}"), false, 2,
       "\n" DSC("g", "{]") "\n"},
      /* Kimi K2 */
      {DF_CHAT_KIMI_K2_THINKING, KC("functions.:0", "{}"), false, 0, NULL},
      {DF_CHAT_KIMI_K2_THINKING, KC("functions.f:0", "{\"a\": tru}"), false, 0, NULL},
      {DF_CHAT_KIMI_K2_THINKING, KC("functions.f:0", ""), false, 0, NULL},
      {DF_CHAT_KIMI_K2_THINKING, KC("functions.f<|im_end|>:0", "{}"), false, 0, NULL},
      {DF_CHAT_KIMI_K2_THINKING,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\"",
       true, 0, NULL},
      {DF_CHAT_KIMI_K2_THINKING, "<|tool_calls_section_begin|><|tool_calls_section_end|>", false, 0,
       NULL},
      {DF_CHAT_KIMI_K2_THINKING,
       "<|tool_calls_section_begin|>" KC("functions.f:0", "{}") KC("functions.g:1", "{x}")
       "<|tool_calls_section_end|>", false, 1,
       KC("functions.g:1", "{x}") "<|tool_calls_section_end|>"},
      /* Kimi K3 */
      {DF_CHAT_KIMI_K3, K3C(" tool=\"f\" index=\"1\"", "{\"a\": }"), false, 0, NULL},
      {DF_CHAT_KIMI_K3, K3C(" index=\"1\"", "{}"), false, 0, NULL}, /* no tool attribute */
      {DF_CHAT_KIMI_K3, K3C(" tool=\"\"", "{}"), false, 0, NULL},
      {DF_CHAT_KIMI_K3, "<|open|>caller tool=\"f\"<|sep|><|close|>call<|sep|>", false, 0, NULL},
      {DF_CHAT_KIMI_K3,
       "<|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{}<|close|>json<|sep|>trailing", false, 0,
       NULL},
      {DF_CHAT_KIMI_K3, "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{\"a\":",
       true, 0, NULL},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    run r;
    size_t len = strlen(k[i].text);
    parse_cuts(k[i].f, 1, k[i].text, len, NULL, 0, k[i].cut, &r);
    const char *want = k[i].content ? k[i].content : k[i].text;
    if (r.n_calls != k[i].n_calls || strcmp(r.final_content, want) != 0)
      fail_msg("case %zu: %zu calls, content\n<%s>, want %zu calls and\n<%s>", i, r.n_calls,
               r.final_content, k[i].n_calls, want);
    run_free(&r);
    for (size_t c = 0; c <= len; c++) { /* and cut anywhere: the same */
      run w, s;
      parse_cuts(k[i].f, 1, k[i].text, len, NULL, 0, k[i].cut, &w);
      parse_cuts(k[i].f, 1, k[i].text, len, &c, 1, k[i].cut, &s);
      same_answer(&w, &s);
      run_free(&w);
      run_free(&s);
    }
  }
}

/* An announced call that turns out bad: CALL_BEGIN, ARGS, then CALL_DROP and its text as
 * content; the stream index is not reused. */
static void test_drop_events(void **state) {
  (void)state;
  df_tool_parser *p = df_tool_parser_new(DF_CHAT_QWEN3, 7);
  const df_tool_ev *ev;
  size_t n;
  const char *a = "Hi\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ";
  assert_int_equal(df_tool_parser_feed(p, a, strlen(a), &ev, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(ev[0].kind, DF_TOOL_EV_CONTENT);
  assert_string_equal(ev[0].text, "Hi"); /* the "\n" waited: it belonged to the call */
  assert_int_equal(ev[1].kind, DF_TOOL_EV_CALL_BEGIN);
  assert_string_equal(ev[1].name, "f");
  assert_int_equal(ev[1].index, 0);
  assert_int_equal(ev[2].kind, DF_TOOL_EV_ARGS);
  assert_string_equal(ev[2].text, "{\"a\":"); /* the trailing space waits */
  const char *b = "oops}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  assert_int_equal(df_tool_parser_feed(p, b, strlen(b), &ev, &n), 0);
  size_t k = 0;
  assert_int_equal(ev[k].kind, DF_TOOL_EV_CALL_DROP);
  assert_int_equal(ev[k++].index, 0);
  assert_int_equal(ev[k].kind, DF_TOOL_EV_CONTENT);
  assert_string_equal(ev[k++].text,
                      "\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": oops}}\n</tool_call>");
  assert_int_equal(ev[k].kind, DF_TOOL_EV_CALL_BEGIN);
  assert_int_equal(ev[k].index, 1);
  assert_string_equal(ev[k++].name, "g");
  assert_int_equal(ev[k].kind, DF_TOOL_EV_ARGS);
  assert_string_equal(ev[k++].text, "{}");
  assert_int_equal(ev[k].kind, DF_TOOL_EV_CALL_END);
  assert_int_equal(ev[k++].index, 1);
  assert_int_equal(n, k);
  assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), -1); /* twice */
  assert_int_equal(df_tool_parser_n_calls(p), 1);
  const df_tool_call_out *c = df_tool_parser_call(p, 0);
  assert_int_equal(c->stream_index, 1);
  assert_string_equal(c->arguments, "{}");
  size_t cl;
  assert_string_equal(df_tool_parser_content(p, &cl),
                      "Hi\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": oops}}\n</tool_call>");
  assert_int_equal(c->content_pos, cl);
  df_tool_parser_destroy(&p);
  df_tool_parser_destroy(&p); /* NULL is fine */
  df_tool_parser_destroy(NULL);
  assert_null(df_tool_parser_new((df_chat_family)99, 0));
}

/* Arguments stream as they come: only what could be the closing structure waits. */
static void test_streaming(void **state) {
  (void)state;
  df_tool_parser *p = df_tool_parser_new(DF_CHAT_QWEN3, 7);
  const df_tool_ev *ev;
  size_t n;
  const char *pieces[] = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
                          "{\"city\": \"Par", "is\"", "}", "}", "\n</tool_", "call>", "\n"};
  const char *want_args[] = {NULL, "{\"city\": \"Par", "is\"", NULL, "}", NULL, NULL, NULL};
  for (size_t i = 0; i < 8; i++) {
    assert_int_equal(df_tool_parser_feed(p, pieces[i], strlen(pieces[i]), &ev, &n), 0);
    size_t a = 0;
    for (size_t k = 0; k < n; k++)
      if (ev[k].kind == DF_TOOL_EV_ARGS) {
        assert_non_null(want_args[i]);
        assert_string_equal(ev[k].text, want_args[i]);
        a++;
      }
    assert_int_equal(a, want_args[i] ? 1 : 0);
    if (i == 0) {
      assert_int_equal(n, 1);
      assert_int_equal(ev[0].kind, DF_TOOL_EV_CALL_BEGIN);
      assert_string_equal(ev[0].name, "get_weather");
      assert_memory_equal(ev[0].id, "call_", 5);
    }
    if (i == 6) assert_int_equal(ev[n - 1].kind, DF_TOOL_EV_CALL_END);
  }
  assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(df_tool_parser_n_calls(p), 1);
  assert_string_equal(df_tool_parser_call(p, 0)->raw,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
                      "\n</tool_call>\n");
  df_tool_parser_destroy(&p);
  /* content is released at once unless it could start a marker */
  p = df_tool_parser_new(DF_CHAT_KIMI_K2_THINKING, 0);
  assert_int_equal(df_tool_parser_feed(p, "Hello <|tool_", 13, &ev, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(ev[0].text, "Hello ");
  assert_int_equal(df_tool_parser_feed(p, "x", 1, &ev, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(ev[0].text, "<|tool_x");
  df_tool_parser_destroy(&p);
  /* ids: a function of (seed, stream index) */
  char *ids[3];
  for (int s = 0; s < 3; s++) {
    p = df_tool_parser_new(DF_CHAT_QWEN3, s < 2 ? 5 : 6);
    const char *c = QC("{\"name\": \"f\", \"arguments\": {}}");
    assert_int_equal(df_tool_parser_feed(p, c, strlen(c), &ev, &n), 0);
    assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), 0);
    ids[s] = strdup(df_tool_parser_call(p, 0)->id);
    df_tool_parser_destroy(&p);
  }
  assert_string_equal(ids[0], ids[1]);
  assert_string_not_equal(ids[0], ids[2]);
  for (int s = 0; s < 3; s++) free(ids[s]);
}

static void test_utf8(void **state) {
  (void)state;
  /* a character cut between pieces, in content and in arguments and in a name */
  const char *t = "caf\xc3\xa9 " QC("{\"name\": \"\xe6\x9d\xb1\", \"arguments\": {\"q\": \"\xf0\x9f\x91\x8d\"}}");
  run w;
  parse_every_cut(DF_CHAT_QWEN3, t, &w);
  assert_string_equal(w.final_content, "caf\xc3\xa9 ");
  assert_int_equal(w.n_calls, 1);
  assert_string_equal(w.calls[0].name, "\xe6\x9d\xb1");
  assert_string_equal(w.calls[0].arguments, "{\"q\": \"\xf0\x9f\x91\x8d\"}");
  run_free(&w);
  /* ill-formed bytes: U+FFFD per maximal subpart, also at the very end */
  run r;
  parse_cuts(DF_CHAT_QWEN3, 0, "a\xff" "b\xe2\x82" "c\xf0\x9f", 8, NULL, 0, false, &r);
  assert_string_equal(r.final_content, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd");
  run_free(&r);
  /* escapes in a Qwen3 name are decoded; a lone surrogate is not a name */
  parse_whole(DF_CHAT_QWEN3, QC("{\"name\": \"a\\u00e9\\ud83d\\udc4d\\n\", \"arguments\": {}}"),
              false, &r);
  assert_int_equal(r.n_calls, 1);
  assert_string_equal(r.calls[0].name, "a\xc3\xa9\xf0\x9f\x91\x8d\n");
  run_free(&r);
  parse_whole(DF_CHAT_QWEN3, QC("{\"name\": \"a\\ud83d\", \"arguments\": {}}"), false, &r);
  assert_int_equal(r.n_calls, 0);
  run_free(&r);
}

/* ---- frames ---------------------------------------------------------------------------------- */

static void test_frames(void **state) {
  (void)state;
  static const df_chat_family fams[] = {DF_CHAT_QWEN3, DF_CHAT_DEEPSEEK_V3, DF_CHAT_KIMI_K2,
                                        DF_CHAT_KIMI_K2_THINKING, DF_CHAT_KIMI_K3};
  static const char *const names[] = {"get_weather", "caf\xc3\xa9-1", "a\"b&c\\d"};
  const char *args = "{\"city\": \"Paris\", \"n\": [1, {\"x\": null}]}";
  for (size_t fi = 0; fi < 5; fi++)
    for (size_t ni = 0; ni < 3; ni++) {
      char *pre, *suf;
      int rc = df_tool_call_frame(fams[fi], names[ni], 3, &pre, &suf);
      if (rc != 0) {
        fail_msg("family %d, name %s: no frame", (int)fams[fi], names[ni]);
      }
      size_t l = strlen(pre) + strlen(args) + strlen(suf);
      char *text = malloc(l + 8);
      snprintf(text, l + 8, "ok %s%s%s", pre, args, suf);
      run r;
      parse_every_cut(fams[fi], text, &r);
      if (r.n_calls != 1) fail_msg("family %d: <%s> gave %zu calls", (int)fams[fi], text, r.n_calls);
      assert_string_equal(r.final_content, "ok ");
      assert_string_equal(r.calls[0].name, names[ni]);
      assert_string_equal(r.calls[0].arguments, args);
      free(text);
      free(pre);
      free(suf);
      run_free(&r);
    }
  char *pre, *suf;
  assert_int_equal(df_tool_call_frame(DF_CHAT_QWEN3, "f", 0, &pre, &suf), 0);
  assert_string_equal(pre, "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
  assert_string_equal(suf, "}\n</tool_call>");
  free(pre);
  free(suf);
  assert_int_equal(df_tool_call_frame(DF_CHAT_DEEPSEEK_V3, "f", 0, &pre, &suf), 0);
  assert_string_equal(pre, "<" FW "tool" SP "calls" SP "begin" FW "><" FW "tool" SP "call" SP "begin"
                           FW ">function<" FW "tool" SP "sep" FW ">f\n```json\n");
  assert_string_equal(suf, "\n```<" FW "tool" SP "call" SP "end" FW "><" FW "tool" SP "calls" SP
                           "end" FW ">");
  free(pre);
  free(suf);
  assert_int_equal(df_tool_call_frame(DF_CHAT_KIMI_K2_THINKING, "f", 2, &pre, &suf), 0);
  assert_string_equal(pre, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:2"
                           "<|tool_call_argument_begin|>");
  assert_string_equal(suf, "<|tool_call_end|><|tool_calls_section_end|>");
  free(pre);
  free(suf);
  assert_int_equal(df_tool_call_frame(DF_CHAT_KIMI_K3, "f", 0, &pre, &suf), 0);
  assert_string_equal(pre, "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
                           "<|open|>json type=\"object\"<|sep|>");
  assert_string_equal(suf, "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>");
  free(pre);
  free(suf);
  /* names that cannot be framed */
  assert_int_equal(df_tool_call_frame(DF_CHAT_QWEN3, "", 0, &pre, &suf), -1);
  assert_null(pre);
  assert_null(suf);
  assert_int_equal(df_tool_call_frame(DF_CHAT_QWEN3, NULL, 0, &pre, &suf), -1);
  assert_int_equal(df_tool_call_frame(DF_CHAT_QWEN3, "\xff", 0, &pre, &suf), -1);
  assert_int_equal(df_tool_call_frame(DF_CHAT_DEEPSEEK_V3, "a\nb", 0, &pre, &suf), -1);
  assert_int_equal(df_tool_call_frame(DF_CHAT_KIMI_K2, "a<|b", 0, &pre, &suf), -1);
  assert_int_equal(df_tool_call_frame(DF_CHAT_KIMI_K2, " a", 0, &pre, &suf), -1);
  assert_int_equal(df_tool_call_frame((df_chat_family)0, "f", 0, &pre, &suf), -1);
}

/* ---- fuzz -------------------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static void fuzz_family(df_chat_family f, const char *const *pieces, size_t np, size_t iters) {
  char buf[600];
  size_t cuts[64], with_calls = 0;
  for (size_t it = 0; it < iters; it++) {
    size_t len = 0, want = 20 + rnd() % 400;
    while (len < want) {
      uint64_t r = rnd() % 10;
      if (r < 7) { /* a piece of the format */
        const char *pc = pieces[rnd() % np];
        size_t l = strlen(pc);
        if (len + l >= sizeof buf) break;
        memcpy(buf + len, pc, l);
        len += l;
      } else if (r < 9) { /* a random byte */
        buf[len++] = (char)(rnd() & 0xff);
      } else { /* a random cut of a piece */
        const char *pc = pieces[rnd() % np];
        size_t l = strlen(pc), k = l ? rnd() % l : 0;
        if (len + k >= sizeof buf) break;
        memcpy(buf + len, pc, k);
        len += k;
      }
    }
    size_t nc = rnd() % 8, last = 0;
    for (size_t k = 0; k < nc; k++) {
      last += rnd() % (len - last + 1);
      cuts[k] = last;
    }
    run a, b;
    parse_cuts(f, it, buf, len, NULL, 0, it % 2, &a);
    parse_cuts(f, it, buf, len, cuts, nc, it % 2, &b);
    same_answer(&a, &b);
    with_calls += a.n_calls > 0;
    run_free(&a);
    run_free(&b);
  }
  printf("# family %d: %zu texts, %zu with complete calls\n", (int)f, iters, with_calls);
  assert_true(with_calls > iters / 20); /* the fuzz does reach complete calls */
}

static void test_fuzz(void **state) {
  (void)state;
  rng_state = 12345;
  static const char *const qwen[] = {
      "<tool_call>", "</tool_call>", "\n", " ", "{\"name\": \"f\", \"arguments\": ", "{", "}",
      "\"a\": 1", ", ", "[1, 2]", "\"x\\\"y\"", "\xe6\x9d\xb1", "\xf0\x9f\x91\x8d", "<think>",
      "text", "\"name\"", ":", "\"arguments\"", "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"};
  static const char *const ds[] = {
      "<" FW "tool" SP "calls" SP "begin" FW ">", "<" FW "tool" SP "call" SP "begin" FW ">",
      "function<" FW "tool" SP "sep" FW ">f\n```json\n", "\n```<" FW "tool" SP "call" SP "end" FW ">",
      "<" FW "tool" SP "calls" SP "end" FW ">", "{", "}", "\"a\": 1", "```", "\n", " ", "text",
      "\xe6\x9d\xb1", "<" FW, "{\"b\": [true, null]}", DSC("g", "{\"c\": \"```\"}")};
  static const char *const kimi[] = {
      "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.f:0",
      "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", "{", "}",
      "\"a\": 1", " ", "\n", "text", "<|", "\xe6\x9d\xb1", "{\"b\": [1.5e3, \"\\u00e9\"]}",
      KC("functions.g:1", "{\"c\": \"<|tool_call_end|>\"}")};
  static const char *const k3[] = {
      "<|open|>tools<|sep|>", "<|open|>call", " tool=\"f\"", " index=\"1\"", "<|sep|>",
      "<|open|>json type=\"object\"<|sep|>", "<|close|>json<|sep|>", "<|close|>call<|sep|>",
      "<|close|>tools<|sep|>", "{", "}", "\"a\": 1", " ", "text", "&quot;", "\xe6\x9d\xb1",
      "<|close|>call<|sep|><|open|>call tool=\"g\"<|sep|><|close|>call<|sep|>",
      K3C(" tool=\"h&amp;\"", "{\"d\": 2}")};
  fuzz_family(DF_CHAT_QWEN3, qwen, sizeof qwen / sizeof qwen[0], 20000);
  fuzz_family(DF_CHAT_DEEPSEEK_V3, ds, sizeof ds / sizeof ds[0], 20000);
  fuzz_family(DF_CHAT_KIMI_K2_THINKING, kimi, sizeof kimi / sizeof kimi[0], 20000);
  fuzz_family(DF_CHAT_KIMI_K3, k3, sizeof k3 / sizeof k3[0], 20000);
  /* pure random bytes, cut anywhere */
  for (size_t it = 0; it < 20000; it++) {
    char buf[256];
    size_t len = rnd() % sizeof buf, cuts[8], nc = rnd() % 8, last = 0;
    for (size_t k = 0; k < len; k++) buf[k] = (char)(rnd() & 0xff);
    for (size_t k = 0; k < nc; k++) {
      last += rnd() % (len - last + 1);
      cuts[k] = last;
    }
    run a;
    parse_cuts((df_chat_family)(1 + it % 5), it, buf, len, cuts, nc, false, &a);
    run_free(&a);
  }
}

/* Long text fed in small pieces costs about linear time (no rescans of what was decided). */
static void test_long(void **state) {
  (void)state;
  static const df_chat_family fams[] = {DF_CHAT_QWEN3, DF_CHAT_DEEPSEEK_V3,
                                        DF_CHAT_KIMI_K2_THINKING, DF_CHAT_KIMI_K3};
  static const char *const starts[] = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"",
      "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">f\n```json\n{\"s\": \"",
      "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"s\": \"",
      "<|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{\"s\": \""};
  for (size_t fi = 0; fi < 4; fi++) {
    df_tool_parser *p = df_tool_parser_new(fams[fi], 0);
    const df_tool_ev *ev;
    size_t n, total = 0;
    assert_int_equal(df_tool_parser_feed(p, starts[fi], strlen(starts[fi]), &ev, &n), 0);
    for (size_t i = 0; i < 400000; i++) { /* 2.4 MB of arguments, 6 bytes a piece */
      const char *piece = i % 3 == 2 ? "      " : "ab <| ";
      assert_int_equal(df_tool_parser_feed(p, piece, 6, &ev, &n), 0);
      for (size_t k = 0; k < n; k++) total += ev[k].kind == DF_TOOL_EV_ARGS ? ev[k].len : 0;
    }
    assert_true(total > 2000000); /* streamed, not held */
    assert_int_equal(df_tool_parser_finish(p, true, &ev, &n), 0); /* cut: content */
    assert_int_equal(df_tool_parser_n_calls(p), 0);
    size_t cl;
    df_tool_parser_content(p, &cl);
    assert_int_equal(cl, strlen(starts[fi]) + 2400000);
    df_tool_parser_destroy(&p);
  }
  /* call headers that never end (a name running on), fed 3 bytes at a time: each is given up
   * after a bounded look, and its text is content */
  static const char *const heads[] = {
      "<tool_call>\n{\"name\": \"", "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW ">",
      "<|tool_call_begin|>functions.", "<|open|>call tool=\""};
  for (size_t fi = 0; fi < 4; fi++) {
    df_tool_parser *p = df_tool_parser_new(fams[fi], 0);
    const df_tool_ev *ev;
    size_t n, fed = 0;
    for (size_t rep = 0; rep < 300; rep++) {
      assert_int_equal(df_tool_parser_feed(p, heads[fi], strlen(heads[fi]), &ev, &n), 0);
      fed += strlen(heads[fi]);
      for (size_t i = 0; i < 700; i++, fed += 3)
        assert_int_equal(df_tool_parser_feed(p, "abc", 3, &ev, &n), 0);
    }
    assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), 0);
    size_t cl;
    df_tool_parser_content(p, &cl);
    assert_int_equal(cl, fed);
    assert_int_equal(df_tool_parser_n_calls(p), 0);
    df_tool_parser_destroy(&p);
  }
  /* a long run of content with marker prefixes everywhere */
  df_tool_parser *p = df_tool_parser_new(DF_CHAT_QWEN3, 0);
  const df_tool_ev *ev;
  size_t n;
  for (size_t i = 0; i < 400000; i++) assert_int_equal(df_tool_parser_feed(p, "\n<tool_c", 8, &ev, &n), 0);
  assert_int_equal(df_tool_parser_finish(p, false, &ev, &n), 0);
  df_tool_parser_destroy(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_rendered),   cmocka_unit_test(test_deepseek_rendered),
      cmocka_unit_test(test_kimi_rendered),    cmocka_unit_test(test_k3_rendered),
      cmocka_unit_test(test_malformed),        cmocka_unit_test(test_drop_events),
      cmocka_unit_test(test_streaming),        cmocka_unit_test(test_utf8),
      cmocka_unit_test(test_frames),           cmocka_unit_test(test_fuzz),
      cmocka_unit_test(test_long),
  };
  return cmocka_run_group_tests_name("tool_calls", tests, NULL, NULL);
}
