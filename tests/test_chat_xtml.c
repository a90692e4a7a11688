/* tests/test_chat_xtml.c — Kimi K3's XTML chat format (engine/text/chat_xtml.c) against goldens.
 *
 * Goldens: tests/tokenizer/kimi_k3_chat_golden.json, written by
 * tests/tokenizer/gen_k3_goldens.py: an independent Python segmenter (its text checked, when the
 * goldens were written, against jinja2 rendering llama.cpp's transcription of encoding_k3.py
 * the way transformers does), and each segment encoded alone by
 * tests/tokenizer/tiktoken_oracle.py on tests/tokenizer/tiktoken_tiny (K3's specials at
 * 887-890). Checks, for every conversation: df_chat_render's text equals the golden text byte for byte;
 * the C segments equal the Python ones (kind and bytes); df_chat_encode's ids equal the golden
 * ids segment by segment; at least one case where encoding the rendered text at once (specials
 * recognised only outside message spans) gives other ids, which the goldens predict; the
 * vocabulary-independent counts of docs/K3.md's "22 ids thinking off, 89 default" (below);
 * df_chat_min_tokens never above the ids; recognition of a K3 folder; the refusals.
 */
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
#include "engine/text/chat_xtml.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"

#define GOLDEN DF_SOURCE_DIR "/tests/tokenizer/kimi_k3_chat_golden.json"
#define TOK_DIR DF_SOURCE_DIR "/tests/tokenizer/tiktoken_tiny"

typedef struct conv {
  df_chat_msg *msgs;
  df_chat_tool_call *calls;
  size_t n;
  df_chat_opts opts;
  char *tools, *rf; /* JSON text, malloc'd */
  const char *name, *text;
  size_t text_len;
} conv;

static void conv_from_json(json_t *c, conv *v) {
  memset(v, 0, sizeof *v);
  json_t *msgs = json_object_get(c, "messages"), *m;
  v->n = json_array_size(msgs);
  v->msgs = calloc(v->n + 1, sizeof *v->msgs);
  size_t n_calls = 0, i, k = 0;
  json_array_foreach(msgs, i, m) n_calls += json_array_size(json_object_get(m, "tool_calls"));
  v->calls = calloc(n_calls + 1, sizeof *v->calls);
  assert_non_null(v->msgs);
  assert_non_null(v->calls);
  json_array_foreach(msgs, i, m) {
    df_chat_msg *d = &v->msgs[i];
    d->role = json_string_value(json_object_get(m, "role"));
    d->content = json_string_value(json_object_get(m, "content"));
    d->reasoning_content = json_string_value(json_object_get(m, "reasoning_content"));
    d->name = json_string_value(json_object_get(m, "name"));
    d->tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
    json_t *calls = json_object_get(m, "tool_calls"), *tc;
    size_t j;
    d->tool_calls = &v->calls[k];
    json_array_foreach(calls, j, tc) {
      json_t *f = json_object_get(tc, "function");
      v->calls[k].name = json_string_value(json_object_get(f, "name"));
      v->calls[k].arguments = json_string_value(json_object_get(f, "arguments"));
      v->calls[k].id = json_string_value(json_object_get(tc, "id"));
      k++;
    }
    d->n_tool_calls = json_array_size(calls);
  }
  v->opts.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
  json_t *th = json_object_get(c, "thinking"), *ef = json_object_get(c, "thinking_effort");
  v->opts.enable_thinking = json_is_boolean(th) ? json_is_true(th) : -1;
  v->opts.thinking_effort = json_is_null(ef) ? "" : json_string_value(ef); /* absent: NULL */
  v->opts.tool_choice = json_string_value(json_object_get(c, "tool_choice"));
  json_t *tools = json_object_get(c, "tools"), *rf = json_object_get(c, "response_format");
  if (tools) v->opts.tools_json = v->tools = json_dumps(tools, JSON_COMPACT | JSON_ENCODE_ANY);
  if (rf) v->opts.response_format_json = v->rf = json_dumps(rf, JSON_COMPACT | JSON_ENCODE_ANY);
  v->name = json_string_value(json_object_get(c, "name"));
  v->text = json_string_value(json_object_get(c, "text"));
  v->text_len = json_string_length(json_object_get(c, "text"));
}

static void conv_free(conv *v) {
  free(v->msgs);
  free(v->calls);
  free(v->tools);
  free(v->rf);
}

static json_t *load_golden(void) {
  json_error_t je;
  json_t *g = json_load_file(GOLDEN, 0, &je);
  if (!g) fprintf(stderr, "%s: %s\n", GOLDEN, je.text);
  assert_non_null(g);
  assert_true(json_array_size(json_object_get(g, "cases")) >= 30);
  return g;
}

static df_tok *load_tok(void) {
  df_tok *tok = NULL;
  char err[512];
  if (df_tok_load(TOK_DIR, &tok, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
  assert_non_null(tok);
  return tok;
}

static df_chat_template *load_k3(void) {
  df_chat_template *t = NULL;
  char err[512];
  if (df_chat_template_load(TOK_DIR, &t, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
  assert_non_null(t);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_KIMI_K3);
  return t;
}

static bool ids_equal(const int32_t *a, size_t na, json_t *b) {
  if (na != json_array_size(b)) return false;
  for (size_t i = 0; i < na; i++)
    if (a[i] != json_integer_value(json_array_get(b, i))) return false;
  return true;
}

static void test_goldens(void **state) {
  (void)state;
  df_chat_template *t = load_k3();
  df_tok *tok = load_tok();
  json_t *g = load_golden(), *c;
  size_t i, fails = 0, joined_differ = 0, n_cases = json_array_size(json_object_get(g, "cases"));
  char err[512];
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    conv v;
    conv_from_json(c, &v);
    /* the text */
    df_chat_text out;
    if (df_chat_render(t, v.msgs, v.n, &v.opts, &out, err, sizeof err) != 0) {
      fprintf(stderr, "%s: %s\n", v.name, err);
      fail();
    }
    if (out.len != v.text_len || memcmp(out.text, v.text, v.text_len) != 0) {
      size_t k = 0;
      while (k < out.len && k < v.text_len && out.text[k] == v.text[k]) k++;
      fprintf(stderr, "GOLDEN %s differs at byte %zu:\n  got  \"%.80s\"\n  want \"%.80s\"\n",
              v.name, k, out.text + k, v.text + k);
      fails++;
    }
    /* the segments, and their ids one by one */
    df_xtml x;
    assert_int_equal(df_xtml_render(v.msgs, v.n, &v.opts, &x, err, sizeof err), 0);
    json_t *segs = json_object_get(c, "segments"), *seg_ids = json_object_get(c, "segment_ids");
    int32_t *ids;
    size_t n_ids, *ends;
    assert_int_equal(df_xtml_encode(&x, tok, &ids, &n_ids, &ends, err, sizeof err), 0);
    bool seg_ok = x.n_segs == json_array_size(segs);
    for (size_t s = 0; seg_ok && s < x.n_segs; s++) {
      json_t *gs = json_array_get(segs, s);
      const char *kind = json_string_value(json_array_get(gs, 0));
      json_t *gt = json_array_get(gs, 1);
      const df_xtml_seg *cs = &x.segs[s];
      seg_ok = (strcmp(kind, "special") == 0) == (cs->kind != DF_XTML_TEXT) &&
               json_string_length(gt) == cs->len &&
               memcmp(json_string_value(gt), x.text + cs->off, cs->len) == 0 &&
               ids_equal(ids + (s ? ends[s - 1] : 0), ends[s] - (s ? ends[s - 1] : 0),
                         json_array_get(seg_ids, s));
      if (!seg_ok)
        fprintf(stderr, "SEGMENT %s #%zu: got \"%.*s\", want \"%s\"\n", v.name, s,
                (int)cs->len, x.text + cs->off, json_string_value(gt));
    }
    if (!seg_ok) fails++;
    /* df_chat_encode: the same ids */
    int32_t *e;
    size_t ne;
    assert_int_equal(df_chat_encode(t, tok, v.msgs, v.n, &v.opts, &e, &ne, err, sizeof err), 0);
    if (!ids_equal(e, ne, json_object_get(c, "ids"))) {
      fprintf(stderr, "IDS %s: %zu ids, want %zu\n", v.name, ne,
              json_array_size(json_object_get(c, "ids")));
      fails++;
    }
    assert_true(df_chat_min_tokens(t, tok, v.msgs, v.n) <= ne);
    /* the rendered text encoded at once (structure matched, message bytes plain): equal
     * exactly where the goldens say merges do not cross a segment boundary */
    int32_t *w;
    size_t nw;
    assert_int_equal(df_tok_encode_spans(tok, out.text, out.len, 0, out.spans, out.n_spans, &w,
                                         &nw, err, sizeof err), 0);
    bool differ = nw != ne || memcmp(w, e, ne * sizeof *e) != 0;
    assert_int_equal(differ, json_is_true(json_object_get(c, "joined_text_ids_differ")));
    joined_differ += differ;
    free(w);
    free(e);
    free(ids);
    free(ends);
    df_xtml_free(&x);
    df_chat_text_free(&out);
    conv_free(&v);
  }
  printf("%zu conversations, %zu differ from jinja2 / the oracle; %zu where encoding the whole "
         "text is not per-segment encoding\n", n_cases, fails, joined_differ);
  assert_int_equal(fails, 0);
  assert_true(joined_differ >= 1);
  json_decref(g);
  df_tok_destroy(&tok);
  df_chat_template_destroy(&t);
}

/* docs/K3.md §5.3/5.4: a one-message chat ("Hello", generation prompt) is 22 ids with thinking off
 * and 89 with the default (thinking on, effort max) on the REAL vocabulary. What does not
 * depend on the vocabulary: the number of structural special ids (9 off: 2 per open tag, 2 per
 * close tag, 1 end_of_msg; 14 default) and the number of text segments (13 off, 24 default);
 * on the real vocabulary each of the 13 is one id (22 = 9 + 13). Asserted exactly here. */
static void test_counts(void **state) {
  (void)state;
  df_tok *tok = load_tok();
  df_chat_template *t = load_k3();
  df_chat_msg m = {.role = "user", .content = "Hello"};
  static const struct {
    int thinking;
    size_t specials, texts;
  } k[] = {{0, 9, 13}, {-1, 14, 24}};
  char err[512];
  for (size_t c = 0; c < 2; c++) {
    df_chat_opts o = {.add_generation_prompt = true, .enable_thinking = k[c].thinking};
    df_xtml x;
    assert_int_equal(df_xtml_render(&m, 1, &o, &x, err, sizeof err), 0);
    size_t sp = 0, tx = 0;
    for (size_t s = 0; s < x.n_segs; s++) {
      if (x.segs[s].kind == DF_XTML_TEXT) tx++;
      else sp++;
    }
    assert_int_equal(sp, k[c].specials);
    assert_int_equal(tx, k[c].texts);
    int32_t *ids;
    size_t n;
    assert_int_equal(df_chat_encode(t, tok, &m, 1, &o, &ids, &n, err, sizeof err), 0);
    size_t n_special = 0;
    for (size_t i = 0; i < n; i++) n_special += ids[i] >= 887 && ids[i] <= 890;
    assert_int_equal(n_special, k[c].specials);
    assert_true(n >= sp + tx);
    free(ids);
    df_xtml_free(&x);
  }
  df_chat_template_destroy(&t);
  df_tok_destroy(&tok);
}

static void expect_error(const df_chat_msg *m, size_t n, const df_chat_opts *o, const char *what) {
  df_xtml x;
  char err[512] = "";
  assert_int_equal(df_xtml_render(m, n, o, &x, err, sizeof err), -1);
  assert_null(x.text);
  if (!strstr(err, what)) {
    fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, what);
    fail();
  }
}

static void test_refusals(void **state) {
  (void)state;
  df_chat_msg u = {.role = "user", .content = "hi"};
  df_chat_opts o = {.enable_thinking = -1};
  expect_error(&u, 0, &o, "no messages");
  df_chat_msg norole = {.content = "x"};
  expect_error(&norole, 1, &o, "require a role");
  o.thinking_effort = "extreme";
  expect_error(&u, 1, &o, "Unsupported thinking_effort=extreme");
  o.enable_thinking = 0; /* ignored when thinking is off, as the template does */
  df_xtml x;
  char err[512];
  assert_int_equal(df_xtml_render(&u, 1, &o, &x, err, sizeof err), 0);
  df_xtml_free(&x);
  o = (df_chat_opts){.enable_thinking = -1, .tool_choice = "get_weather"};
  expect_error(&u, 1, &o, "tool_choice");
  o = (df_chat_opts){.enable_thinking = -1, .tools_json = "[{\"b\": [1.5, 1e16, 1e-5], \"a\": 2.0}]"};
  assert_int_equal(df_xtml_render(&u, 1, &o, &x, err, sizeof err), 0); /* Python's repr */
  assert_non_null(strstr(x.text, "[{\"a\":2.0,\"b\":[1.5,1e+16,1e-05]}]"));
  df_xtml_free(&x);
  o.tools_json = "[{\"B\": 1, \"a\": 2}]"; /* sort_keys: B, a; dictsort: a, B */
  expect_error(&u, 1, &o, "sort differently");
  o.tools_json = "{\"type\": \"function\"}";
  expect_error(&u, 1, &o, "expected a JSON array");
  o.tools_json = "[{\"a\": 1, \"a\": 2}]";
  expect_error(&u, 1, &o, "not JSON");
  o = (df_chat_opts){.enable_thinking = -1, .response_format_json = "{\"type\": \"json_schema\", "
                     "\"json_schema\": {\"schema\": {\"maximum\": 0.5}}}"};
  assert_int_equal(df_xtml_render(&u, 1, &o, &x, err, sizeof err), 0);
  assert_non_null(strstr(x.text, "{\"maximum\":0.5}"));
  df_xtml_free(&x);
  o = (df_chat_opts){.enable_thinking = -1};
  df_chat_tool_call nameless = {.arguments = "{}"};
  df_chat_msg a = {.role = "assistant", .content = "", .tool_calls = &nameless, .n_tool_calls = 1};
  expect_error(&a, 1, &o, "require a function name");
  df_chat_msg orphan[] = {{.role = "user", .content = "q"}, {.role = "tool", .content = "r"}};
  expect_error(orphan, 2, &o, "resolvable tool name");
  df_chat_msg bad = {.role = "user", .content = "\xff"};
  expect_error(&bad, 1, &o, "UTF-8");
}

/* A K3 folder is recognised by its tokenizer_config.json; a K2 one (a template, K2 names) is
 * not; the real template text itself is not a known template (K3 folders carry none). */
static void test_recognition(void **state) {
  (void)state;
  df_chat_template *t = load_k3();
  df_tok *tok = load_tok();
  df_chat_msg m[] = {{.role = "system", .content = "s"}, {.role = "user", .content = "u"},
                     {.role = "assistant", .content = "a"}, {.role = "tool", .content = "t", .name = "f"},
                     {.role = "developer", .content = "d"}};
  assert_int_equal(df_chat_min_tokens(t, tok, m, 5), 11 + 11 + 17 + 11);
  df_chat_template_destroy(&t);
  df_tok_destroy(&tok);
  char err[512];
  assert_int_equal(df_chat_template_load(DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_tiny", &t, err,
                                         sizeof err), 0);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_KIMI_K2);
  df_chat_template_destroy(&t);
}

/* The chat format's stop ids: a K3 tokenizer ends a turn at <|end_of_msg|> (887) and [EOS]
 * (886); a K2 one (no XTML tokens) has none beyond the config's. */
static void test_stop_ids(void **state) {
  (void)state;
  df_tok *tok = load_tok();
  int32_t ids[4] = {0};
  assert_int_equal(df_chat_stop_ids(tok, ids), 2);
  assert_int_equal(ids[0], 887);
  assert_int_equal(ids[1], 886);
  df_tok_destroy(&tok);
  char err[512];
  assert_int_equal(df_tok_load(DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_tiny", &tok, err, sizeof err), 0);
  assert_int_equal(df_chat_stop_ids(tok, ids), 0);
  df_tok_destroy(&tok);
  assert_int_equal(df_chat_stop_ids(NULL, ids), 0);
}

/* A forced tool call's frame (the server appends its ids to the prompt, then the arguments come
 * under a grammar, then the frame's end): "<|close|>response<|sep|>" + df_tool_call_frame's
 * prefix, encoded per segment by df_chat_encode_markup, are exactly the ids a rendering of the
 * same call has after the generation prompt (thinking off); the end + "<|close|>message<|sep|>"
 * those after the arguments, before <|end_of_msg|>. */
static void test_forced_frame(void **state) {
  (void)state;
  df_chat_template *t = load_k3();
  df_tok *tok = load_tok();
  char err[512];
  const char *args = "{\"city\": \"Paris\"}";
  df_chat_tool_call call = {"get_weather", args, NULL};
  df_chat_msg m[2] = {{.role = "user", .content = "Weather?"},
                      {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1}};
  df_chat_opts gen = {.add_generation_prompt = true, .enable_thinking = 0};
  df_chat_opts none = {.add_generation_prompt = false, .enable_thinking = 0};
  int32_t *head, *full, *fr, *sf, *ar;
  size_t nh, nf, nfr, nsf, nar;
  assert_int_equal(df_chat_encode(t, tok, m, 1, &gen, &head, &nh, err, sizeof err), 0);
  assert_int_equal(df_chat_encode(t, tok, m, 2, &none, &full, &nf, err, sizeof err), 0);
  assert_true(nf > nh);
  assert_memory_equal(full, head, nh * sizeof *head);
  char *pre, *suf;
  assert_int_equal(df_tool_call_frame(DF_CHAT_KIMI_K3, "get_weather", 0, &pre, &suf), 0);
  char frame[512], end[512];
  snprintf(frame, sizeof frame, "<|close|>response<|sep|>%s", pre);
  snprintf(end, sizeof end, "%s<|close|>message<|sep|>", suf);
  assert_int_equal(df_chat_encode_markup(t, tok, frame, strlen(frame), &fr, &nfr, err, sizeof err), 0);
  assert_int_equal(df_chat_encode_markup(t, tok, end, strlen(end), &sf, &nsf, err, sizeof err), 0);
  assert_int_equal(df_tok_encode(tok, args, strlen(args), DF_TOK_PLAIN, &ar, &nar, err, sizeof err), 0);
  assert_int_equal(nh + nfr + nar + nsf + 1, nf);
  assert_memory_equal(full + nh, fr, nfr * sizeof *fr);
  assert_memory_equal(full + nh + nfr, ar, nar * sizeof *ar);
  assert_memory_equal(full + nh + nfr + nar, sf, nsf * sizeof *sf);
  assert_int_equal(full[nf - 1], 887); /* <|end_of_msg|> */
  /* a frame cut inside the name (the common prefix of several tools) still encodes: its last
   * segment is the value so far */
  int32_t *cut;
  size_t ncut;
  size_t at = strstr(frame, "weather") - frame;
  assert_int_equal(df_chat_encode_markup(t, tok, frame, at, &cut, &ncut, err, sizeof err), 0);
  int32_t *get;
  size_t nget;
  assert_int_equal(df_tok_encode(tok, "get_", 4, DF_TOK_PLAIN, &get, &nget, err, sizeof err), 0);
  assert_true(ncut > nget);
  assert_memory_equal(cut + ncut - nget, get, nget * sizeof *get);
  assert_memory_equal(cut, fr, (ncut - nget) * sizeof *cut);
  free(get);
  free(cut);
  free(pre);
  free(suf);
  free(head);
  free(full);
  free(fr);
  free(sf);
  free(ar);
  df_chat_template_destroy(&t);
  df_tok_destroy(&tok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_goldens),
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_recognition),
      cmocka_unit_test(test_stop_ids),
      cmocka_unit_test(test_forced_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
