/* tests/test_reasoning.c — splitting generated text into reasoning and content
 * (engine/text/reasoning.h).
 *
 * Checks, per family (Qwen3, Kimi K2 Thinking, Kimi K3):
 *   - real renderings: an assistant message with reasoning_content and content rendered by
 *     df_chat_render (the published templates in tests/tokenizer/, K3's built-in XTML), the text
 *     after the generation prompt (the stop token cut off) fed whole, cut at every byte and byte
 *     by byte: reasoning and content come back as the template's own reading gives them (Qwen3:
 *     line feeds cut at the ends; K2 Thinking and K3: verbatim); K3 with tool calls: the content
 *     channel, through the tool-call parser, gives the content and the calls;
 *   - explicit cases: no reasoning, unclosed reasoning, whitespace before <think>, marker
 *     prefixes at the end, text outside K3's elements, NUL bytes;
 *   - fuzz: random text of marker pieces and bytes, cut at random: the answer does not depend
 *     on the cuts, events alternate kinds and join to the answer, and nothing but markup, the
 *     whitespace the format puts between elements and Qwen3's line feeds is lost.
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

#include "engine/text/chat_template.h"
#include "engine/text/reasoning.h"
#include "engine/text/tool_calls.h"
#include "tests/chat_fixtures.h"


typedef struct split {
  char *reasoning, *content; /* the parser's answer */
  size_t rlen, clen;
} split;

static void append(char **p, size_t *n, const char *s, size_t k) {
  *p = realloc(*p, *n + k + 1);
  assert_non_null(*p);
  memcpy(*p + *n, s, k);
  *n += k;
  (*p)[*n] = 0;
}

/* Events: kinds alternate, each text has its NUL, they join to what the parser says. */
static void take(const df_reasoning_ev *ev, size_t n, int *last, char **r, size_t *rl, char **c,
                 size_t *cl) {
  for (size_t i = 0; i < n; i++) {
    assert_true(ev[i].kind == DF_REASONING_EV_REASONING || ev[i].kind == DF_REASONING_EV_CONTENT);
    assert_true(ev[i].len > 0);
    assert_int_equal(ev[i].text[ev[i].len], 0);
    if (i) assert_int_not_equal(ev[i].kind, ev[i - 1].kind);
    (void)last;
    if (ev[i].kind == DF_REASONING_EV_REASONING) append(r, rl, ev[i].text, ev[i].len);
    else append(c, cl, ev[i].text, ev[i].len);
  }
}

/* Split text[0..len) fed in pieces that end at cuts[0..n_cuts) (increasing). */
static split split_cuts(df_chat_family f, df_reasoning_start st, const char *text, size_t len,
                        const size_t *cuts, size_t n_cuts) {
  df_reasoning_parser *p = df_reasoning_parser_new(f, st);
  assert_non_null(p);
  split s = {0};
  append(&s.reasoning, &s.rlen, "", 0);
  append(&s.content, &s.clen, "", 0);
  const df_reasoning_ev *ev;
  size_t nev, at = 0;
  int last = 0;
  for (size_t i = 0; i <= n_cuts; i++) {
    size_t to = i < n_cuts ? cuts[i] : len;
    assert_int_equal(df_reasoning_parser_feed(p, text + at, to - at, &ev, &nev), 0);
    take(ev, nev, &last, &s.reasoning, &s.rlen, &s.content, &s.clen);
    at = to;
  }
  assert_int_equal(df_reasoning_parser_finish(p, &ev, &nev), 0);
  take(ev, nev, &last, &s.reasoning, &s.rlen, &s.content, &s.clen);
  size_t l;
  const char *r = df_reasoning_parser_reasoning(p, &l);
  assert_int_equal(l, s.rlen);
  assert_memory_equal(r, s.reasoning, l);
  const char *c = df_reasoning_parser_content(p, &l);
  assert_int_equal(l, s.clen);
  assert_memory_equal(c, s.content, l);
  /* a finished parser takes nothing more */
  assert_int_equal(df_reasoning_parser_feed(p, "x", 1, &ev, &nev), -1);
  df_reasoning_parser_destroy(&p);
  assert_null(p);
  return s;
}

static void split_free(split *s) {
  free(s->reasoning);
  free(s->content);
}

static void same(const split *a, const split *b, const char *what) {
  if (a->rlen != b->rlen || memcmp(a->reasoning, b->reasoning, a->rlen) ||
      a->clen != b->clen || memcmp(a->content, b->content, a->clen))
    fail_msg("%s: the answer depends on the cuts: <%s|%s> vs <%s|%s>", what, a->reasoning,
             a->content, b->reasoning, b->content);
}

/* Whole, every single cut, every pair of cuts (short texts), byte by byte: one answer. */
static split split_every_way(df_chat_family f, df_reasoning_start st, const char *text) {
  size_t len = strlen(text);
  split whole = split_cuts(f, st, text, len, NULL, 0);
  size_t *cuts = calloc(len + 1, sizeof *cuts);
  for (size_t i = 0; i < len; i++) cuts[i] = i;
  split b = split_cuts(f, st, text, len, cuts, len);
  same(&whole, &b, text);
  split_free(&b);
  for (size_t i = 1; i < len; i++) {
    size_t c1[1] = {i};
    split s = split_cuts(f, st, text, len, c1, 1);
    same(&whole, &s, text);
    split_free(&s);
    if (len <= 120)
      for (size_t j = i + 1; j < len; j++) {
        size_t c2[2] = {i, j};
        split s2 = split_cuts(f, st, text, len, c2, 2);
        same(&whole, &s2, text);
        split_free(&s2);
      }
  }
  free(cuts);
  return whole;
}

static void expect(df_chat_family f, df_reasoning_start st, const char *text, const char *r,
                   const char *c) {
  split s = split_every_way(f, st, text);
  if (strcmp(s.reasoning, r) || strcmp(s.content, c))
    fail_msg("<%s>: reasoning <%s> content <%s>, want <%s> <%s>", text, s.reasoning, s.content,
             r, c);
  split_free(&s);
}

/* ---- real renderings ------------------------------------------------------------------------ */

static df_chat_template *load(df_chat_family f) { return chat_fixture_template(f); }

/* The text a model writes for `m` (an assistant message) after [user]'s generation prompt,
 * the stop token cut off. Caller frees. */
static char *generated(const df_chat_template *t, const df_chat_msg *asst, int thinking,
                       const char *stop) {
  char err[512];
  df_chat_msg m[2] = {{.role = "user", .content = "Weather in Paris?"}, *asst};
  df_chat_opts gen = {.add_generation_prompt = true, .enable_thinking = thinking};
  df_chat_opts none = {.add_generation_prompt = false, .enable_thinking = thinking};
  df_chat_text head, all;
  if (df_chat_render(t, m, 1, &gen, &head, err, sizeof err) != 0) fail_msg("%s", err);
  if (df_chat_render(t, m, 2, &none, &all, err, sizeof err) != 0) fail_msg("%s", err);
  if (all.len < head.len || memcmp(all.text, head.text, head.len) != 0)
    fail_msg("the generation prompt is not a prefix:\n%s\n%s", head.text, all.text);
  size_t tl = all.len - head.len, sl = strlen(stop);
  char *g = strndup(all.text + head.len, tl);
  if (tl < sl || memcmp(g + tl - sl, stop, sl) != 0) fail_msg("no stop token: <%s>", g);
  g[tl - sl] = 0;
  df_chat_text_free(&head);
  df_chat_text_free(&all);
  return g;
}

typedef struct example {
  const char *reasoning, *content;  /* the message */
  const char *want_r, *want_c;      /* what the splitter gives back */
} example;

static void rendered(df_chat_family f, const example *xs, size_t n, const char *stop) {
  df_chat_template *t = load(f);
  for (size_t i = 0; i < n; i++) {
    df_chat_msg a = {.role = "assistant", .content = xs[i].content,
                     .reasoning_content = xs[i].reasoning};
    char *g = generated(t, &a, -1, stop);
    expect(f, f == DF_CHAT_KIMI_K3 ? DF_REASONING_IN : DF_REASONING_AUTO, g, xs[i].want_r,
           xs[i].want_c);
    free(g);
  }
  df_chat_template_destroy(&t);
}

static void test_qwen3_rendered(void **state) {
  (void)state;
  /* the template writes "<think>\n" + reasoning.strip('\n') + "\n</think>\n\n" + content
   * .lstrip('\n') for the last turn; the split is its own reading of such content */
  const example xs[] = {
      {"The user wants weather.", "It is sunny.", "The user wants weather.", "It is sunny."},
      {"\n\nTwo lines\nof thought\n\n", "\n\nAnswer\n\n with </think> in it\n",
       "Two lines\nof thought", "Answer\n\n with </think> in it\n"},
      {NULL, "No reasoning.", "", "No reasoning."},
      {"Only thinking.", "", "Only thinking.", ""},
      {"  spaces stay  ", "  here too", "  spaces stay  ", "  here too"},
  };
  rendered(DF_CHAT_QWEN3, xs, sizeof xs / sizeof xs[0], "<|im_end|>\n");
}

/* The content channel through the family's tool-call parser: its content and calls. */
static void calls_back(df_chat_family f, const split *s, const char *content,
                       const df_chat_tool_call *calls, size_t n) {
  df_tool_parser *tp = df_tool_parser_new(f, 1);
  const df_tool_ev *ev;
  size_t nev, cl;
  assert_int_equal(df_tool_parser_feed(tp, s->content, s->clen, &ev, &nev), 0);
  assert_int_equal(df_tool_parser_finish(tp, false, &ev, &nev), 0);
  assert_string_equal(df_tool_parser_content(tp, &cl), content);
  assert_int_equal(df_tool_parser_n_calls(tp), n);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(df_tool_parser_call(tp, i)->name, calls[i].name);
    assert_string_equal(df_tool_parser_call(tp, i)->arguments, calls[i].arguments);
  }
  df_tool_parser_destroy(&tp);
}

static void test_kimi_k2_thinking_rendered(void **state) {
  (void)state;
  /* the template keeps reasoning only on tool-call turns after the last answer: these */
  df_chat_template *t = load(DF_CHAT_KIMI_K2_THINKING);
  df_chat_tool_call call = {"get_weather", "{\"city\": \"Paris\"}", "functions.get_weather:0"};
  const example xs[] = {
      {"Need the weather.", "Checking.", "Need the weather.", "Checking."},
      {"\nkept\n", "\n as is \n", "\nkept\n", "\n as is \n"},
      {NULL, "", "", ""},
  };
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    df_chat_msg a = {.role = "assistant", .content = xs[i].content,
                     .reasoning_content = xs[i].reasoning, .tool_calls = &call, .n_tool_calls = 1};
    char *g = generated(t, &a, -1, "<|im_end|>");
    split s = split_every_way(DF_CHAT_KIMI_K2_THINKING, DF_REASONING_AUTO, g);
    assert_string_equal(s.reasoning, xs[i].want_r);
    calls_back(DF_CHAT_KIMI_K2_THINKING, &s, xs[i].want_c, &call, 1);
    split_free(&s);
    free(g);
  }
  df_chat_template_destroy(&t);
}

static void test_k3_rendered(void **state) {
  (void)state;
  const example xs[] = {
      {"Need the weather.", "Sunny in <b>Paris</b> & \"Rome\".", "Need the weather.",
       "Sunny in <b>Paris</b> & \"Rome\"."},
      {"\n spaced \n", "\n\n answer \n", "\n spaced \n", "\n\n answer \n"},
      {NULL, "No reasoning.", "", "No reasoning."},
      {"Only thinking.", "", "Only thinking.", ""},
  };
  rendered(DF_CHAT_KIMI_K3, xs, sizeof xs / sizeof xs[0], "<|end_of_msg|>");
  /* thinking off: the prompt opens the response element */
  df_chat_template *t = load(DF_CHAT_KIMI_K3);
  df_chat_msg a = {.role = "assistant", .content = "Off.", .reasoning_content = "dropped"};
  char *g = generated(t, &a, 0, "<|end_of_msg|>");
  expect(DF_CHAT_KIMI_K3, DF_REASONING_OUT, g, "", "Off.");
  free(g);
  /* with tool calls: the content channel carries the tools element to the tool-call parser */
  df_chat_tool_call calls[2] = {{"get_weather", "{\"city\": \"Paris\"}", NULL},
                                {"a\"b&c", "{\"q\": \"<|close|>tools<|sep|>\"}", NULL}};
  df_chat_msg b = {.role = "assistant", .content = "Checking.", .reasoning_content = "Think.",
                   .tool_calls = calls, .n_tool_calls = 2};
  g = generated(t, &b, -1, "<|end_of_msg|>");
  split s = split_every_way(DF_CHAT_KIMI_K3, DF_REASONING_IN, g);
  assert_string_equal(s.reasoning, "Think.");
  assert_non_null(strstr(s.content, "<|open|>tools<|sep|>"));
  calls_back(DF_CHAT_KIMI_K3, &s, "Checking.", calls, 2);
  split_free(&s);
  free(g);
  df_chat_template_destroy(&t);
}

/* ---- explicit cases ------------------------------------------------------------------------- */

static void test_cases(void **state) {
  (void)state;
  const df_chat_family Q = DF_CHAT_QWEN3, K = DF_CHAT_KIMI_K2_THINKING, X = DF_CHAT_KIMI_K3;
  const df_reasoning_start A = DF_REASONING_AUTO, I = DF_REASONING_IN, O = DF_REASONING_OUT;
  /* no reasoning: everything is content, nothing cut */
  expect(Q, A, "\n\nHello </think> there\n", "", "\n\nHello </think> there\n");
  expect(Q, A, "", "", "");
  expect(Q, A, " \n ", "", " \n ");
  expect(Q, A, "<thin", "", "<thin");
  expect(Q, A, "<think", "", "<think");
  expect(Q, A, "x<think>y</think>z", "", "x<think>y</think>z");
  /* whitespace before <think> is dropped; unclosed reasoning holds everything */
  expect(Q, A, " \n<think>\nstill thinking\n\n", "still thinking", "");
  expect(Q, A, "<think>\n\n</think>\n\nAnswer", "", "Answer");
  expect(Q, A, "<think>a</think></think>b", "a", "</think>b");
  expect(Q, A, "<think>a\n\nb\n</think>\n\n\nc\n\n", "a\n\nb", "c\n\n");
  expect(Q, A, "<think></thi", "</thi", "");
  expect(Q, O, "<think>x</think>y", "", "<think>x</think>y");
  expect(Q, I, "\nr\n</think>\nc", "r", "c");
  expect(K, A, "<think>\nr\n</think>\nc", "\nr\n", "\nc");
  expect(K, A, "plain", "", "plain");
  /* K3 */
  expect(X, I, "r<|close|>think<|sep|><|open|>response<|sep|>c<|close|>response<|sep|>"
               "<|close|>message<|sep|>", "r", "c");
  expect(X, I, "still<|close|>thi", "still<|close|>thi", "");
  expect(X, O, "c<|close|>response<|sep|>\n \n<|close|>message<|sep|>\n", "", "c");
  expect(X, O, "c<|close|>response<|sep|> stray \n<|open|>response<|sep|>d", "", "c strayd");
  expect(X, O, "c<|close|>response<|sep|><|open|>tools<|sep|>T<|close|>message<|sep|>",
         "", "c<|open|>tools<|sep|>T<|close|>message<|sep|>");
  expect(X, I, "r<|close|>think<|sep|>\n<|open|>tools<|sep|>T<|close|>tools<|sep|>\n",
         "r", "<|open|>tools<|sep|>T<|close|>tools<|sep|>");
  /* the message's close ends an element left open: in neither channel */
  expect(X, O, "c<|close|>message<|sep|>", "", "c");
  expect(X, I, "r<|close|>message<|sep|>", "r", "");
  expect(X, I, "r<|close|>message<|sep|> x", "r", " x");
  /* AUTO on K3 is OUT */
  expect(X, A, "c<|close|>response<|sep|>", "", "c");
  /* families without a reasoning channel */
  assert_null(df_reasoning_parser_new(DF_CHAT_DEEPSEEK_V3, A));
  assert_null(df_reasoning_parser_new(DF_CHAT_KIMI_K2, A));
  assert_false(df_reasoning_family(DF_CHAT_DEEPSEEK_V3));
  assert_null(df_reasoning_markers(DF_CHAT_KIMI_K2)[0]);
  assert_string_equal(df_reasoning_markers(K)[0], "<think>");
  assert_string_equal(df_reasoning_markers(X)[2], "<|sep|>");
  /* a NUL byte is text, never part of a marker */
  static const char nul[] = "<think>a\0b</th\0ink></think>c";
  size_t cuts[3] = {3, 9, 14};
  for (size_t n = 0; n <= 3; n++) {
    split s = split_cuts(Q, A, nul, sizeof nul - 1, cuts, n);
    assert_int_equal(s.rlen, 12);
    assert_memory_equal(s.reasoning, "a\0b</th\0ink>", 12);
    assert_string_equal(s.content, "c");
    split_free(&s);
  }
}

/* ---- fuzz ----------------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* What may vanish: markup, and whitespace. The answer's bytes, with whitespace taken out, are a
 * subsequence of the text's. */
static void subsequence(const char *text, size_t len, const char *part, size_t plen) {
  size_t j = 0;
  for (size_t i = 0; i < plen; i++) {
    if (part[i] == ' ' || part[i] == '\n') continue;
    while (j < len && text[j] != part[i]) j++;
    if (j == len) fail_msg("byte %zu of <%s> is not in <%s>", i, part, text);
    j++;
  }
}

static void fuzz(df_chat_family f, df_reasoning_start st, const char *const *pieces, size_t np) {
  for (int it = 0; it < 3000; it++) {
    char text[512];
    size_t len = 0;
    int k = 1 + (int)(next() % 12);
    for (int i = 0; i < k; i++) {
      const char *pc = pieces[next() % np];
      size_t pl = strlen(pc);
      if (next() % 4 == 0) pl = 1 + next() % pl; /* a marker's prefix */
      if (len + pl >= sizeof text) break;
      memcpy(text + len, pc, pl);
      len += pl;
    }
    text[len] = 0;
    split whole = split_cuts(f, st, text, len, NULL, 0);
    size_t cuts[8], nc = 0;
    for (size_t c = 1 + next() % len; c < len && nc < 8; c += 1 + next() % 9) cuts[nc++] = c;
    split s = split_cuts(f, st, text, len, cuts, nc);
    same(&whole, &s, text);
    subsequence(text, len, whole.reasoning, whole.rlen);
    subsequence(text, len, whole.content, whole.clen);
    split_free(&whole);
    split_free(&s);
  }
}

static void test_fuzz(void **state) {
  (void)state;
  const char *think[] = {"<think>", "</think>", "\n", "\n\n", " ", "a", "<", "bc", "é", "</"};
  fuzz(DF_CHAT_QWEN3, DF_REASONING_AUTO, think, sizeof think / sizeof think[0]);
  fuzz(DF_CHAT_KIMI_K2_THINKING, DF_REASONING_AUTO, think, sizeof think / sizeof think[0]);
  const char *xtml[] = {"<|close|>think<|sep|>", "<|open|>response<|sep|>",
                        "<|close|>response<|sep|>", "<|close|>message<|sep|>",
                        "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "<|close|>", "<|",
                        "\n", " ", "x", "yz", "é"};
  fuzz(DF_CHAT_KIMI_K3, DF_REASONING_IN, xtml, sizeof xtml / sizeof xtml[0]);
  fuzz(DF_CHAT_KIMI_K3, DF_REASONING_OUT, xtml, sizeof xtml / sizeof xtml[0]);
}

/* Many markers in one piece: linear time (each marker's search resumes where it stopped). */
static void test_long(void **state) {
  (void)state;
  const char *head = "<|close|>response<|sep|>", *m = "<|close|>message<|sep|>";
  size_t hl = strlen(head), ml = strlen(m), n = 200000, len = hl + n * ml;
  char *text = malloc(len + 1);
  memcpy(text, head, hl);
  for (size_t i = 0; i < n; i++) memcpy(text + hl + i * ml, m, ml);
  text[len] = 0;
  split s = split_cuts(DF_CHAT_KIMI_K3, DF_REASONING_OUT, text, len, NULL, 0);
  assert_int_equal(s.clen, 0);
  assert_int_equal(s.rlen, 0);
  split_free(&s);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_rendered), cmocka_unit_test(test_kimi_k2_thinking_rendered),
      cmocka_unit_test(test_k3_rendered),    cmocka_unit_test(test_cases),
      cmocka_unit_test(test_fuzz),           cmocka_unit_test(test_long),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
