/* tests/test_json_grammar.c — structured output by constrained decoding
 * (coordinator/generate/json_grammar.h).
 *
 *   tables      the byte-level recogniser: inputs accepted whole (complete or not) or rejected
 *               at an exact byte, for objects, strings (escapes, surrogates, UTF-8), numbers,
 *               bounds, enums, anyOf / $ref, json_object, extra keys, prefix / suffix, nesting
 *   errors      compile errors name the keyword and its JSON Pointer
 *   tokens      added tokens only inside the literal prefix / suffix, end ids only when
 *               complete, ids past the tokenizer never, no end ids -> 0 allowed when done
 *   walks       random generation with the Qwen3 tokenizer (models/demo-moe): the mask is
 *               checked against df_jsg_accept on copies for sampled ids at every step, is never
 *               empty, and every decoded document is validated by tests/json_grammar_check.py
 *               (python3-jsonschema, Draft 2020-12). Bias: the first 20 tokens are uniform
 *               over the allowed ids; then, to finish, the allowed id (of 16 random ones and
 *               every single-byte token) leaving the fewest bytes to completion, and an end id
 *               as soon as the document is complete; the allowed set is always the mask's
 *   byte walks  the same over single bytes, every byte value tried at every step: never dead,
 *               df_jsg_min_bytes_left exact, documents (with escapes, surrogate pairs, UTF-8,
 *               exponents) validated by the checker
 *   timing      mask time per token on the 151k-id vocabulary at typical positions (printed)
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/generate/json_grammar.h"

static df_jsg *compile_ok(const char *schema, const char *pre, const char *suf) {
  df_jsg *g = NULL;
  char err[512], kw[64];
  if (df_jsg_compile(schema, schema ? strlen(schema) : 0, pre, suf, &g, kw, sizeof kw, err,
                     sizeof err))
    fail_msg("compile %s: %s", schema ? schema : "(json_object)", err);
  return g;
}

/* ---- tables ----------------------------------------------------------------------------- */

typedef struct tcase {
  const char *ok;   /* accepted */
  const char *bad;  /* NULL, or the rest, rejected at its first byte */
  int complete;     /* when bad is NULL: whether `ok` is a complete document */
} tcase;

#define SN(s) ((s) ? (s) : "(json_object)")
#define ACC(s) {s, NULL, 1}
#define PART(s) {s, NULL, 0}
#define REJ(s, rest) {s, rest, 0}

static void run_table(const char *schema, const char *pre, const char *suf, const tcase *t,
                      size_t n) {
  df_jsg *g = compile_ok(schema, pre, suf);
  char err[256];
  for (size_t i = 0; i < n; i++) {
    char in[1024];
    size_t lo = strlen(t[i].ok), lb = t[i].bad ? strlen(t[i].bad) : 0;
    assert_true(lo + lb < sizeof in);
    memcpy(in, t[i].ok, lo);
    memcpy(in + lo, t[i].bad ? t[i].bad : "", lb);
    /* byte by byte: how far it gets */
    df_jsg_run *r = df_jsg_run_new(g, NULL, NULL, 0, err, sizeof err);
    assert_non_null(r);
    size_t got = 0;
    while (got < lo + lb && df_jsg_accept_bytes(r, in + got, 1) == 1) got++;
    size_t want = lo;
    if (got != want)
      fail_msg("schema %s: input '%.*s': stopped at byte %zu, expected %zu%s", SN(schema),
               (int)(lo + lb), in, got, want, t[i].bad ? "" : " (whole input)");
    if (!t[i].bad && df_jsg_complete(r) != (bool)t[i].complete)
      fail_msg("schema %s: input '%s': complete=%d, expected %d", SN(schema), in,
               df_jsg_complete(r), t[i].complete);
    df_jsg_run_destroy(&r);
    /* all at once: the same offset, and all or nothing (after a rejection the run is still at
     * the start, so the accepted part goes in again) */
    r = df_jsg_run_new(g, NULL, NULL, 0, err, sizeof err);
    assert_int_equal(df_jsg_accept_bytes(r, in, lo + lb), (int64_t)want);
    if (t[i].bad) assert_int_equal(df_jsg_accept_bytes(r, in, lo), (int64_t)lo);
    df_jsg_run_destroy(&r);
  }
  df_jsg_destroy(&g);
}

#define TABLE(schema, pre, suf, ...)                                                         \
  do {                                                                                       \
    static const tcase t_[] = {__VA_ARGS__};                                                 \
    run_table(schema, pre, suf, t_, sizeof t_ / sizeof t_[0]);                               \
  } while (0)

static const char *const S_PERSON =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
static const char *const S_STR24 =
    "{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}";
static const char *const S_NUM =
    "{\"type\":\"number\"}";
static const char *const S_INTB =
    "{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":100}";
static const char *const S_NUMB =
    "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":10}";
static const char *const S_ENUM =
    "{\"enum\":[\"a\",\"ab\",1,12,null,{\"k\":[1]},true]}";
static const char *const S_EXTRA =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
    "\"no\":false},\"additionalProperties\":{\"type\":\"string\"}}";
static const char *const S_REFS =
    "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},"
    "\"y\":{\"type\":\"integer\"}},\"required\":[\"x\",\"y\"]}},\"anyOf\":[{\"$ref\":\"#/$defs/"
    "pt\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pt\"},\"minItems\":1},"
    "{\"type\":\"null\"},{\"type\":\"number\"},{\"type\":\"integer\",\"minimum\":5}]}";
static const char *const S_TREE =
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
    "\"integer\"},\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
    "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}";

static void test_tables(void **state) {
  (void)state;
  TABLE(S_PERSON,
        NULL, NULL,
        ACC("{\"name\":\"Bob\",\"age\":42}"),
        ACC("{\"name\": \"Bob\", \"age\": 42, \"tags\": [\"a\", \"b\"]}"),
        ACC("{\n  \"name\": \"Bob\",\n\t\"age\": 150,\n  \"tags\": []\n}"),
        ACC("{ \"name\" : \"\" , \"age\" : 0 }"),
        PART("{\"name\":\"Bob\",\"age\":42"),
        REJ("{\"", "age\":42}"),                              /* required "name" first */
        REJ("{\"name\":\"Bob\"", "}"),                       /* missing required "age" */
        REJ("{\"name\":\"a\",\"age\":1,\"", "x\":1}"),       /* extra key */
        REJ("{\"name\":\"a\",\"", "tags\":[]}"),             /* order: age before tags */
        REJ("{\"name\":\"Bobby", "X\"}"),                    /* maxLength 5 */
        REJ("{\"name\":", "1}"),                             /* wrong type */
        REJ("{\"name\":\"a\",\"age\":15", "1}"),             /* maximum 150 */
        REJ("{\"name\":\"a\",\"age\":-", "1}"),              /* minimum 0 ("-0" is 0) */
        REJ("{\"name\":\"a\",\"age\":0", "1}"),              /* leading zero */
        REJ("{\"name\":\"a\",\"age\":1", ".5}"),             /* integer with a fraction */
        REJ("{\"name\":\"a\",\"age\":1", "e2}"),             /* integer with an exponent */
        REJ("{\"name\":\"a\",\"age\":1,\"tags\":[\"a\",\"b\"", ",\"c\"]}"), /* maxItems 2 */
        REJ("{\"name\":\"a\",\"age\":1,\"tags\":[\"a\",", "]}"),           /* trailing comma */
        REJ("{\"name\":\"a\", ", " \"age\":1}"),             /* second space in a gap */
        REJ("{\n                    ", " \"name\":\"a\"}"), /* 21st indent byte */
        REJ("{\"name\":\"a\",\n", "\n\"age\":1}"),          /* second newline */
        REJ("{", "\r\n\"name\":\"a\"}"),                     /* no \r */
        REJ("", " {\"name\":\"a\",\"age\":1}"),              /* leading whitespace */
        REJ("{\"name\":\"a\",\"age\":1}", " "),              /* trailing whitespace */
        REJ("{\"name\":\"a\",\"age\":1}", "{}"));            /* value after completion */
  TABLE(S_STR24, NULL, NULL,
        ACC("\"ab\""), ACC("\"abcd\""), ACC("\"\\u00e9\\u00E9\""),
        ACC("\"\xc3\xa9\xc3\xa9\xc3\xa9\""),
        ACC("\"\\uD83D\\uDE00x\""),                          /* a pair is one code point */
        ACC("\"\xf0\x9f\x98\x80\xe2\x82\xac\""),             /* U+1F600 U+20AC */
        ACC("\"\\\"\\\\\\/\\b\""), ACC("\"\\f\\n\\r\\t\""),
        PART("\"ab"),
        REJ("\"a", "\""),                                    /* minLength 2 */
        REJ("\"abcd", "e\""),                                /* maxLength 4 */
        REJ("\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", "\xc3\xa9\""),
        REJ("\"\\uD", "E00\""),                              /* lone low surrogate */
        REJ("\"\\uD83D", "x\""),                             /* high surrogate alone */
        REJ("\"\\uD83D\\u", "0041\""),                       /* high + not a low */
        REJ("\"\\uD83D\\uD", "83D\""),                       /* high + high */
        REJ("\"\\", "x\""),                                  /* bad escape */
        REJ("\"\\u00", "g0\""),                              /* bad hex */
        REJ("\"a", "\n\""),                                  /* raw control character */
        REJ("\"a\x7f", "\x01\""),                            /* DEL is fine, U+0001 is not */
        REJ("\"", "\xc0\x80\""),                             /* overlong */
        REJ("\"\xe2\x82", "A\""),                            /* truncated sequence */
        REJ("\"\xed", "\xa0\x80\""),                         /* UTF-16 surrogate in UTF-8 */
        REJ("\"\xf4", "\x90\x80\x80\""),                     /* past U+10FFFF */
        REJ("\"", "\x80\""),                                 /* stray continuation */
        REJ("", "'ab'"));
  TABLE(S_NUM, NULL, NULL,
        ACC("0"), ACC("-0"), ACC("-0.5e+10"), ACC("12.25E-7"), ACC("1e99"),
        ACC("1234567890123456"), ACC("0.1234567890123456"),
        PART("-"), PART("1."), PART("1e"), PART("1e+"),
        REJ("-", "-1"), REJ("0", "1"), REJ("-0", "1"), REJ("1.", "e5"), REJ("", ".5"),
        REJ("", "+1"), REJ("1e99", "9"), REJ("1234567890123456", "7"),
        REJ("0.1234567890123456", "7"), REJ("1", " "), REJ("", "NaN"), REJ("", "Infinity"));
  TABLE(S_INTB, NULL, NULL,
        ACC("99"), ACC("-5"), ACC("0"), ACC("-0"), ACC("7"),
        REJ("-", "6"), REJ("10", "0"), REJ("1", ".0"), REJ("-5", "0"));
  TABLE("{\"type\":\"integer\",\"minimum\":1000.5}", NULL, NULL,
        ACC("1001"), ACC("99999"), PART("100"), PART("1000"), REJ("", "0"), REJ("1001", "."),
        REJ("", "-1"));
  TABLE(S_NUMB, NULL, NULL,
        ACC("0.5"), ACC("10"), ACC("10.000"), ACC("9.999999"), ACC("0.000001"), PART("0"),
        PART("0.000"), REJ("10.", "1"), REJ("", "-1"), REJ("0.00000", "0"), REJ("1", "1"),
        REJ("1", "e1"), REJ("0.123456", "7"));
  TABLE(S_ENUM, NULL, NULL,
        ACC("\"a\""), ACC("\"ab\""), ACC("1"), ACC("12"), ACC("null"), ACC("true"),
        ACC("{\"k\":[1]}"), PART("\"a"), REJ("1", "3"), REJ("{\"k\":", " [1]}"),
        REJ("\"", "b\""), REJ("", "false"), REJ("\"ab\"", "\""));
  TABLE("{\"type\":[\"string\",\"null\"],\"enum\":[\"x\",null,3]}", NULL, NULL,
        ACC("\"x\""), ACC("null"), REJ("", "3"));
  TABLE(S_REFS, NULL, NULL, ACC("{\"x\":1,\"y\":-2}"), ACC("[{\"x\":1,\"y\":2},{\"x\":3,\"y\":4}]"),
        ACC("null"), ACC("3.5"), ACC("7"), REJ("[", "]"), REJ("", "\"s\""),
        REJ("{\"x\":1,\"y\":2", ",\"z\":3}"));
  TABLE(NULL, NULL, NULL, ACC("{}"), ACC("{\"a\":[1,{\"b\":null}],\"c\":\"d\\u0041\",\"a\":true}"),
        ACC("{\"\xc3\xa9\":{\"\":[[],{},\"\",0,-1.5e3,false]}}"), REJ("", "[]"), REJ("", "\"x\""),
        REJ("{\"a", "\\u0041\":1}"),                        /* no escapes in free keys */
        REJ("{\"a\":1,", "}"), REJ("{\"a\":1}", "}"), REJ("{\"a\":[1", "}"));
  TABLE(S_EXTRA,
        NULL, NULL, ACC("{\"id\":1,\"x\":\"y\"}"), ACC("{\"x\":\"y\",\"idx\":\"\"}"), ACC("{}"),
        ACC("{\"i\":\"\",\"n\":\"\",\"noo\":\"\"}"),
        REJ("{\"id\":1,\"id", "\":\"y\"}"),                  /* an extra key equal to "id" */
        REJ("{\"x\":\"y\",\"id", "\":1}"),                   /* declared keys come first */
        REJ("{\"no", "\":\"y\"}"),                           /* forbidden property */
        REJ("{\"x\":", "1}"));
  TABLE("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "\"required\":[\"city\"]}",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", "}\n</tool_call>",
        ACC("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>"),
        PART("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}"),
        REJ("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", " {\"city\":\"P\"}}"),
        REJ("<tool_", "Call>"));
  TABLE("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"const\":\"k\"}],"
        "\"items\":false}",
        NULL, NULL, ACC("[]"), ACC("[true]"), ACC("[false,\"k\"]"), REJ("[true,\"k\"", ",1]"),
        REJ("[", "\"k\"]"));
  /* Recursion, bounded by the 64-frame stack: wrapper 1, objects at 2, 4, .., 62 and arrays
   * between; a 32nd object would need frames 64 and 65 (itself and its integer). */
  char deep[2048] = "";
  const char *lvl = "{\"v\":1,\"k\":[";
  for (int i = 0; i < 31; i++) strcat(deep, lvl);
  const tcase dt[] = {PART(deep), REJ(deep, "{\"v\":1}")};
  run_table(S_TREE, NULL, NULL, dt, 2);
  TABLE(S_TREE, NULL, NULL, ACC("{\"v\":1,\"k\":[{\"v\":2,\"k\":[]},{\"v\":3}]}"));
}

/* ---- compile errors --------------------------------------------------------------------- */

static void test_errors(void **state) {
  (void)state;
  static const struct {
    const char *schema, *msg, *kw;
  } t[] = {
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\","
       "\"patternProperties\":{}}}}",
       "unsupported JSON Schema keyword 'patternProperties' at /properties/a", "patternProperties"},
      {"{\"type\":\"string\",\"pattern\":\"x\"}",
       "unsupported JSON Schema keyword 'pattern' at (root)", "pattern"},
      {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"date\"}}",
       "unsupported JSON Schema keyword 'format' at /items", "format"},
      {"{\"properties\":{\"a/b~\":{\"not\":{}}}}",
       "unsupported JSON Schema keyword 'not' at /properties/a~1b~0", "not"},
      {"{\"if\":{},\"then\":{}}", "unsupported JSON Schema keyword 'if' at (root)", "if"},
      {"{\"type\":\"array\",\"uniqueItems\":true}", "keyword 'uniqueItems' at (root)",
       "uniqueItems"},
      {"{\"type\":\"integer\",\"multipleOf\":2}", "keyword 'multipleOf'", "multipleOf"},
      {"{\"type\":\"object\",\"minProperties\":1}", "keyword 'minProperties'", "minProperties"},
      {"{\"type\":\"object\",\"dependentRequired\":{}}", "keyword 'dependentRequired'",
       "dependentRequired"},
      {"{\"anyOf\":[{\"type\":\"string\",\"contains\":{}}]}",
       "keyword 'contains' at /anyOf/0", "contains"},
      {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
       "'oneOf' alternatives 0 and 1 can match the same value", "oneOf"},
      {"{\"oneOf\":[{\"properties\":{\"x\":{\"type\":\"integer\"}}},{\"type\":\"string\"}]}",
       "'oneOf' alternatives 0 and 1 can match the same value", "oneOf"}, /* "s" matches both */
      {"{\"type\":\"number\",\"minimum\":0.5}", "non-integer 'minimum' on type number",
       "minimum"},
      {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":9}", "no integer", "maximum"},
      {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}",
       "'minLength' 5 is greater than 'maxLength' 2 at (root)", "minLength"},
      {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be a non-negative integer",
       "maxLength"},
      {"{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' does not resolve at (root)",
       "$ref"},
      {"{\"$ref\":\"http://example.com/s.json\"}", "unsupported $ref", "$ref"},
      {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "$ref cycle",
       "$ref"},
      {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
       "\"$ref\":\"#/$defs/a\"}",
       "left-recursive $ref", "$ref"},
      {"{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}},"
       "\"required\":[\"x\"]}},\"$ref\":\"#/$defs/a\"}",
       "no finite instance", ""},
      {"false", "the schema false allows no value here at (root)", ""},
      {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}",
       "required property 'a' has the schema false", "required"},
      {"{\"type\":\"object\",\"required\":[\"z\"],\"additionalProperties\":false}",
       "required property 'z' is not in 'properties'", "required"},
      {"{\"type\":\"strin\"}", "unknown type 'strin'", "type"},
      {"{\"type\":\"string\",\"$ref\":\"#\"}", "'type' alongside '$ref' is not supported",
       "type"},
      {"{\"enum\":[1,2],\"minimum\":0}", "'minimum' alongside 'enum'", "minimum"},
      {"{\"type\":\"string\",\"enum\":[1,2]}", "no 'enum' value matches 'type'", "enum"},
      {"{\"allOf\":[{},{}]}", "'allOf' with more than one subschema", "allOf"},
      {"{\"type\":\"array\",\"items\":false,\"minItems\":1}", "'minItems' 1 needs more items",
       "minItems"},
      {"{\"type\": \"object\",", "schema is not valid JSON", ""},
      {"{\"type\":\"string\",\"type\":\"number\"}", "schema is not valid JSON", ""},
      {"[1]", "a schema must be an object or a boolean", ""},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    df_jsg *g = (df_jsg *)1;
    char err[512], kw[64];
    int rc = df_jsg_compile(t[i].schema, strlen(t[i].schema), NULL, NULL, &g, kw, sizeof kw, err,
                            sizeof err);
    if (rc != -1 || g) fail_msg("%s: compiled, expected '%s'", t[i].schema, t[i].msg);
    if (!strstr(err, t[i].msg))
      fail_msg("%s: error '%s', expected '%s'", t[i].schema, err, t[i].msg);
    if (strcmp(kw, t[i].kw)) fail_msg("%s: keyword '%s', expected '%s'", t[i].schema, kw, t[i].kw);
    assert_null(strchr(err, '\n'));
  }
  /* hostile sizes: deep nesting, huge enums */
  size_t cap = 70 * 40 + 64;
  char *deep = malloc(cap);
  deep[0] = 0;
  for (int i = 0; i < 70; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
  strcat(deep, "true");
  for (int i = 0; i < 70; i++) strcat(deep, "}");
  df_jsg *g = NULL;
  char err[512], kw[64];
  assert_int_equal(df_jsg_compile(deep, strlen(deep), NULL, NULL, &g, kw, sizeof kw, err,
                                  sizeof err), -1);
  assert_non_null(strstr(err, "the schema nests deeper than 64"));
  free(deep);
  size_t ecap = 5000 * 8 + 32;
  char *big = malloc(ecap);
  strcpy(big, "{\"enum\":[");
  for (int i = 0; i < 5000; i++) sprintf(big + strlen(big), "%s%d", i ? "," : "", i);
  strcat(big, "]}");
  assert_int_equal(df_jsg_compile(big, strlen(big), NULL, NULL, &g, kw, sizeof kw, err,
                                  sizeof err), -1);
  assert_non_null(strstr(err, "'enum' has more than 4096 members"));
  assert_string_equal(kw, "enum");
  free(big);
  /* accepted: annotations, oneOf of disjoint types, integer bounds given as reals, "#" */
  static const char *const okays[] = {
      "{\"title\":\"t\",\"description\":\"d\",\"$schema\":\"https://json-schema.org/draft/2020-12/"
      "schema\",\"$id\":\"x\",\"$comment\":\"c\",\"examples\":[1],\"default\":{},"
      "\"type\":\"object\"}",
      "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"},{\"const\":true}]}",
      "{\"type\":\"integer\",\"minimum\":0.5,\"exclusiveMaximum\":9.5}",
      "{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}}}",
      "{\"definitions\":{\"a\":{\"type\":\"string\"}},\"allOf\":[{\"$ref\":\"#/definitions/a\"}]}",
      "true", "{}",
  };
  for (size_t i = 0; i < sizeof okays / sizeof okays[0]; i++) {
    g = compile_ok(okays[i], NULL, NULL);
    df_jsg_destroy(&g);
  }
}

/* ---- the Qwen3 vocabulary --------------------------------------------------------------- */

static df_tok *TOK;
static df_jsg_vocab *VOC;
static int64_t NTOK;
static int32_t SINGLE[256]; /* the id of each single-byte token, -1 none */
static int32_t END[2];      /* <|im_end|>, <|endoftext|> */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int setup_vocab(void **state) {
  (void)state;
  char err[512];
  if (df_tok_load(DF_SOURCE_DIR "/models/demo-moe/tokenizer.json", &TOK, err, sizeof err)) {
    fprintf(stderr, "load tokenizer: %s\n", err);
    return -1;
  }
  double t0 = now_s();
  VOC = df_jsg_vocab_new(TOK, err, sizeof err);
  if (!VOC) {
    fprintf(stderr, "vocab: %s\n", err);
    return -1;
  }
  NTOK = df_jsg_vocab_size(VOC);
  printf("json_grammar: vocab trie of %lld ids built in %.3f s\n", (long long)NTOK, now_s() - t0);
  for (int b = 0; b < 256; b++) SINGLE[b] = -1;
  for (int64_t id = 0; id < NTOK; id++) {
    size_t len;
    const uint8_t *p = df_tok_id_to_bytes(TOK, (int32_t)id, &len);
    if (p && len == 1 && !df_tok_is_added(TOK, (int32_t)id) && SINGLE[p[0]] < 0)
      SINGLE[p[0]] = (int32_t)id;
  }
  for (int b = 0; b < 256; b++)
    if (SINGLE[b] < 0) {
      fprintf(stderr, "no single-byte token for %02x\n", b);
      return -1;
    }
  END[0] = df_tok_token_to_id(TOK, "<|im_end|>", 10);
  END[1] = df_tok_token_to_id(TOK, "<|endoftext|>", 13);
  return END[0] < 0 || END[1] < 0 ? -1 : 0;
}

static int teardown_vocab(void **state) {
  (void)state;
  df_jsg_vocab_destroy(&VOC);
  df_tok_destroy(&TOK);
  return 0;
}

static int64_t mask_count(df_jsg_run *r, float *logits, int64_t V) {
  for (int64_t i = 0; i < V; i++) logits[i] = 0.5f;
  return df_jsg_mask(r, logits, V);
}

static bool allowed_id(const float *logits, int32_t id) {
  return !isinf(logits[id]);
}

static void test_tokens(void **state) {
  (void)state;
  char err[256];
  int64_t V = NTOK + 9;
  float *lg = malloc((size_t)V * sizeof *lg);
  int32_t tc = df_tok_token_to_id(TOK, "<tool_call>", 11);
  int32_t tce = df_tok_token_to_id(TOK, "</tool_call>", 12);
  assert_true(tc >= 0 && tce >= 0);
  df_jsg *g = compile_ok("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                         "\"required\":[\"city\"]}",
                         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
                         "}\n</tool_call>");
  df_jsg_run *r = df_jsg_run_new(g, VOC, END, 2, err, sizeof err);
  int64_t n = mask_count(r, lg, V);
  assert_true(allowed_id(lg, tc));                  /* the added token spells the prefix */
  assert_true(allowed_id(lg, SINGLE['<']));         /* and so do ordinary tokens */
  assert_false(allowed_id(lg, END[0]));
  assert_false(allowed_id(lg, tce));
  for (int64_t i = NTOK; i < V; i++) assert_true(isinf(lg[i]) && lg[i] < 0);
  assert_true(n >= 2 && n < 50);
  assert_int_equal(df_jsg_accept(r, tc), 0);
  assert_int_equal(df_jsg_accept(r, tc), -1);
  const char *mid = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"";
  assert_int_equal(df_jsg_accept_bytes(r, mid, strlen(mid)), (int64_t)strlen(mid));
  n = mask_count(r, lg, V);
  assert_false(allowed_id(lg, tc));                 /* inside the value: never added tokens */
  assert_false(allowed_id(lg, tce));
  assert_false(allowed_id(lg, df_tok_token_to_id(TOK, "<|im_start|>", 12)));
  assert_false(allowed_id(lg, END[1]));
  assert_true(n > NTOK / 2);                        /* almost anything goes in a string */
  assert_int_equal(df_jsg_accept_bytes(r, "P\"}}\n", 5), 5);
  mask_count(r, lg, V);
  assert_true(allowed_id(lg, tce));                 /* the suffix's added token */
  assert_int_equal(df_jsg_accept(r, tce), 0);
  assert_true(df_jsg_complete(r));
  assert_int_equal(mask_count(r, lg, V), 2);        /* only the end ids */
  assert_true(allowed_id(lg, END[0]) && allowed_id(lg, END[1]));
  assert_int_equal(df_jsg_accept(r, SINGLE[' ']), -1);
  assert_int_equal(df_jsg_accept(r, END[1]), 0);
  assert_false(df_jsg_complete(r));
  assert_int_equal(mask_count(r, lg, V), 0);         /* finished */
  assert_int_equal(df_jsg_accept(r, END[0]), -1);
  df_jsg_run_destroy(&r);
  df_jsg_destroy(&g);
  /* no end ids: complete and nothing can follow -> 0 allowed, the caller stops */
  g = compile_ok(NULL, NULL, NULL);
  r = df_jsg_run_new(g, VOC, NULL, 0, err, sizeof err);
  assert_int_equal(df_jsg_accept_bytes(r, "{}", 2), 2);
  assert_true(df_jsg_complete(r));
  assert_int_equal(mask_count(r, lg, V), 0);
  df_jsg_run_destroy(&r);
  df_jsg_destroy(&g);
  /* a top-level number is complete and may still go on */
  g = compile_ok("{\"type\":\"integer\",\"maximum\":500}", NULL, NULL);
  r = df_jsg_run_new(g, VOC, END, 2, err, sizeof err);
  assert_int_equal(df_jsg_accept_bytes(r, "4", 1), 1);
  assert_true(df_jsg_complete(r));
  mask_count(r, lg, V);
  assert_true(allowed_id(lg, END[0]) && allowed_id(lg, SINGLE['9']));
  assert_int_equal(df_jsg_accept(r, SINGLE['9']), 0);
  mask_count(r, lg, V);
  assert_true(allowed_id(lg, SINGLE['9']) && !allowed_id(lg, SINGLE['.']));
  assert_int_equal(df_jsg_accept(r, SINGLE['9']), 0); /* 499 */
  mask_count(r, lg, V);
  assert_false(allowed_id(lg, SINGLE['0']));        /* 4990 > 500 */
  assert_int_equal(df_jsg_min_bytes_left(r), 0);
  df_jsg_run_destroy(&r);
  df_jsg_destroy(&g);
  free(lg);
}

/* ---- random walks ----------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct wschema {
  const char *name, *schema, *prefix, *suffix;
} wschema;

static const wschema WALKS[] = {
    {"nested", "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":"
               "{\"name\":{\"type\":\"string\",\"maxLength\":12},\"email\":{\"type\":\"string\"}},"
               "\"required\":[\"name\"],\"additionalProperties\":false},\"active\":{\"type\":"
               "\"boolean\"}},\"required\":[\"user\",\"active\"],\"additionalProperties\":false}",
     NULL, NULL},
    {"arrays_bounds",
     "{\"type\":\"object\",\"properties\":{\"scores\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"integer\",\"minimum\":-20,\"maximum\":300},\"minItems\":2,\"maxItems\":4},\"ratio\":"
     "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1},\"big\":{\"type\":\"integer\","
     "\"minimum\":1000000}},\"required\":[\"scores\",\"ratio\"]}",
     NULL, NULL},
    {"enum_anyof",
     "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\",\"re\","
     "\"r\\\"e\\\\d\"]},\"value\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\","
     "\"maxLength\":6},{\"type\":\"null\"},{\"type\":\"number\"}]},\"opt\":{\"oneOf\":[{\"type\":"
     "\"boolean\"},{\"type\":\"array\",\"items\":{\"const\":1},\"maxItems\":3}]}},"
     "\"required\":[\"color\",\"value\"]}",
     NULL, NULL},
    {"ref_tree",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
     "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
     NULL, NULL},
    {"tuple_strings",
     "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},"
     "{\"type\":\"integer\"},{\"type\":\"string\",\"minLength\":5}],\"items\":false,"
     "\"minItems\":2}",
     NULL, NULL},
    {"json_object", NULL, NULL, NULL},
    {"tool_call",
     "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":{\"enum\":"
     "[\"celsius\",\"fahrenheit\"]}},\"required\":[\"location\",\"unit\"]}",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", "}\n</tool_call>"},
    {"extra_props",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"tag\":{\"type\":"
     "\"string\"}},\"additionalProperties\":{\"type\":\"number\"},\"required\":[\"id\"]}",
     NULL, NULL},
    {"top_number", "{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":40}", NULL, NULL},
};

#define N_WALKS 10
#define FREE_STEPS 20 /* uniform choice among allowed ids; afterwards steer to completion */
#define MAX_STEPS 400

typedef struct wstats {
  int64_t steps, masks, checks;
  double mask_s;
} wstats;

/* Compare the mask with df_jsg_accept on a copy of the run. */
static void check_id(df_jsg_run *r, const float *lg, int64_t V, int32_t id, wstats *st) {
  char err[128];
  df_jsg_run *c = df_jsg_run_clone(r, err, sizeof err);
  assert_non_null(c);
  int rc = df_jsg_accept(c, id);
  bool a = id < V && allowed_id(lg, id);
  if ((rc == 0) != a) fail_msg("id %d: mask allows=%d, accept=%d", id, a, rc);
  df_jsg_run_destroy(&c);
  st->checks++;
}

/* One walk: returns the generated bytes (malloc'd, *len) by df_tok_decode. */
static char *walk(const df_jsg *g, uint64_t seed, size_t *len, wstats *st) {
  char err[256];
  int64_t V = NTOK + 9;
  float *lg = malloc((size_t)V * sizeof *lg);
  int32_t *allow = malloc((size_t)V * sizeof *allow);
  int32_t *ids = malloc(MAX_STEPS * sizeof *ids);
  char *raw = malloc(MAX_STEPS * 256);
  size_t nraw = 0;
  int n = 0;
  df_jsg_run *r = df_jsg_run_new(g, VOC, END, 2, err, sizeof err);
  assert_non_null(r);
  for (int step = 0;; step++) {
    if (step >= MAX_STEPS) fail_msg("walk seed %llu did not finish", (unsigned long long)seed);
    double t0 = now_s();
    int64_t cnt = mask_count(r, lg, V);
    st->mask_s += now_s() - t0;
    st->masks++;
    if (cnt < 1) fail_msg("dead state after %d tokens: '%.*s'", n, (int)nraw, raw);
    int64_t k = 0;
    for (int64_t i = 0; i < V; i++)
      if (allowed_id(lg, (int32_t)i)) allow[k++] = (int32_t)i;
    assert_int_equal(k, cnt);
    for (int64_t i = NTOK; i < V; i++) assert_true(isinf(lg[i]));
    /* the mask equals accept on a copy: random ids, random allowed ids, the end ids */
    for (int j = 0; j < 40; j++) check_id(r, lg, V, (int32_t)(splitmix64(&seed) % (uint64_t)V), st);
    for (int j = 0; j < 12; j++) check_id(r, lg, V, allow[splitmix64(&seed) % (uint64_t)cnt], st);
    for (int j = 0; j < 8; j++) check_id(r, lg, V, SINGLE[splitmix64(&seed) & 255], st);
    for (int64_t id = NTOK - 1; id >= 0 && df_tok_is_added(TOK, (int32_t)id); id--)
      check_id(r, lg, V, (int32_t)id, st); /* every added token (the ids after the BPE vocab) */
    bool done = df_jsg_complete(r);
    assert_int_equal(allowed_id(lg, END[0]), done);
    int32_t pick;
    if (step < FREE_STEPS) {
      pick = allow[splitmix64(&seed) % (uint64_t)cnt];
    } else if (done) {
      pick = END[splitmix64(&seed) & 1];
    } else {
      /* Steer: among 16 random allowed ids and every allowed single-byte token, the one that
       * leaves the fewest bytes to completion (an allowed single byte always removes one). */
      uint64_t before = df_jsg_min_bytes_left(r), best = UINT64_MAX;
      pick = -1;
      for (int j = 0; j < 16 + 256; j++) {
        int32_t id = j < 16 ? allow[splitmix64(&seed) % (uint64_t)cnt] : SINGLE[j - 16];
        if (!allowed_id(lg, id)) continue;
        df_jsg_run *c = df_jsg_run_clone(r, err, sizeof err);
        assert_int_equal(df_jsg_accept(c, id), 0);
        uint64_t m = df_jsg_min_bytes_left(c);
        if (m < best) best = m, pick = id;
        df_jsg_run_destroy(&c);
      }
      if (best >= before) fail_msg("no allowed id brings '%.*s' closer to completion (%llu)",
                                   (int)nraw, raw, (unsigned long long)before);
    }
    assert_int_equal(df_jsg_accept(r, pick), 0);
    st->steps++;
    if (pick == END[0] || pick == END[1]) break;
    size_t bl;
    const uint8_t *b = df_tok_id_to_bytes(TOK, pick, &bl);
    memcpy(raw + nraw, b, bl);
    nraw += bl;
    ids[n++] = pick;
  }
  assert_int_equal(mask_count(r, lg, V), 0);
  char *text;
  size_t tl;
  assert_int_equal(df_tok_decode(TOK, ids, (size_t)n, 0, &text, &tl, err, sizeof err), 0);
  /* decoding gives back exactly the bytes the grammar accepted (they are valid UTF-8) */
  if (tl != nraw || memcmp(text, raw, nraw))
    fail_msg("decode differs from the token bytes: '%s' vs '%.*s'", text, (int)nraw, raw);
  df_jsg_run_destroy(&r);
  free(lg);
  free(allow);
  free(ids);
  free(raw);
  *len = tl;
  return text;
}

static char *hex(const char *s, size_t n) {
  char *h = malloc(2 * n + 1);
  for (size_t i = 0; i < n; i++) sprintf(h + 2 * i, "%02x", (unsigned char)s[i]);
  h[2 * n] = 0;
  return h;
}

/* Run tests/json_grammar_check.py on the cases; `extra` is appended to its command line. */
static int run_checker(json_t *cases, const char *extra) {
  char path[] = "/tmp/test_json_grammar_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(json_dump_file(cases, path, JSON_INDENT(1)), 0);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s/tests/json_grammar_check.py %s %s", DF_PYTHON, DF_SOURCE_DIR,
           path, extra);
  int rc = system(cmd);
  unlink(path);
  return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static void test_walks(void **state) {
  (void)state;
  json_t *cases = json_array();
  wstats st = {0};
  double t0 = now_s();
  for (size_t w = 0; w < sizeof WALKS / sizeof WALKS[0]; w++) {
    const wschema *ws = &WALKS[w];
    df_jsg *g = compile_ok(ws->schema, ws->prefix, ws->suffix);
    json_t *docs = json_array();
    size_t total = 0;
    for (int i = 0; i < N_WALKS; i++) {
      size_t len;
      char *text = walk(g, 0x5eed0000u + 977u * w + (uint64_t)i, &len, &st);
      total += len;
      char *h = hex(text, len);
      json_array_append_new(docs, json_string(h));
      free(h);
      if (i == 0) printf("json_grammar walk %-14s %s\n", ws->name, text);
      free(text);
    }
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(ws->name));
    json_object_set_new(c, "schema", ws->schema ? json_loads(ws->schema, 0, NULL) : json_null());
    json_object_set_new(c, "prefix", json_string(ws->prefix ? ws->prefix : ""));
    json_object_set_new(c, "suffix", json_string(ws->suffix ? ws->suffix : ""));
    json_object_set_new(c, "docs", docs);
    json_array_append_new(cases, c);
    printf("json_grammar walk %-14s %d documents, %zu bytes\n", ws->name, N_WALKS, total);
    df_jsg_destroy(&g);
  }
  printf("json_grammar walks: %lld tokens, %lld masks (%.3f ms each on average), %lld mask/accept "
         "checks, %.2f s\n",
         (long long)st.steps, (long long)st.masks, 1e3 * st.mask_s / (double)st.masks,
         (long long)st.checks, now_s() - t0);
  assert_int_equal(run_checker(cases, ""), 0);
  /* the checker fails loudly on a bad document */
  json_t *bad = json_deep_copy(cases);
  char *h = hex("{\"user\":{},\"active\":true}", 25);
  json_array_append_new(json_object_get(json_array_get(bad, 0), "docs"), json_string(h));
  free(h);
  assert_int_equal(run_checker(bad, "--expect-invalid"), 0);
  assert_int_not_equal(run_checker(bad, "2>/dev/null"), 0); /* its FAIL line, silenced */
  json_decref(bad);
  json_decref(cases);
}

/* ---- byte walks ------------------------------------------------------------------------- */

/* Random walks over single bytes (every byte value tried on a copy at every step): liveness
 * (some byte is always allowed until complete), completion == 0 bytes left, and exactness of
 * df_jsg_min_bytes_left (it is 1 + its least value over the allowed next bytes). Uniform over
 * the allowed bytes for FREE_BYTES, then the byte leaving the fewest bytes (random among ties),
 * so escapes, surrogate pairs, UTF-8 of every length, exponents and whitespace runs all
 * occur; the documents go to the checker too. */
#define FREE_BYTES 48
#define N_BYTE_WALKS 12

static char *byte_walk(const df_jsg *g, uint64_t seed, size_t *len) {
  char err[128];
  size_t cap = 4096, n = 0;
  char *out = malloc(cap);
  df_jsg_run *r = df_jsg_run_new(g, NULL, NULL, 0, err, sizeof err);
  assert_non_null(r);
  for (int step = 0;; step++) {
    assert_true(step < 3000 && n + 1 < cap);
    uint64_t rem = df_jsg_min_bytes_left(r), least = UINT64_MAX, after[256];
    bool done = df_jsg_complete(r);
    if (done != (rem == 0)) fail_msg("'%.*s': complete=%d but %llu bytes left", (int)n, out, done,
                                     (unsigned long long)rem);
    int ok[256], nok = 0;
    for (int b = 0; b < 256; b++) {
      df_jsg_run *c = df_jsg_run_clone(r, err, sizeof err);
      uint8_t byte = (uint8_t)b;
      if (df_jsg_accept_bytes(c, &byte, 1) == 1) {
        ok[nok++] = b;
        after[b] = df_jsg_min_bytes_left(c);
        if (after[b] < least) least = after[b];
      }
      df_jsg_run_destroy(&c);
    }
    if (!done && !nok) fail_msg("dead state after '%.*s'", (int)n, out);
    if (!done && least + 1 != rem)
      fail_msg("'%.*s': %llu bytes left, but the best next byte leaves %llu", (int)n, out,
               (unsigned long long)rem, (unsigned long long)least);
    if (done && (!nok || step >= FREE_BYTES || splitmix64(&seed) % 8 == 0)) break;
    int pick;
    if (step < FREE_BYTES) {
      pick = ok[splitmix64(&seed) % (uint64_t)nok];
      /* coverage: escapes and surrogate pairs are rare under uniform bytes; take them more */
      static const char lure[] = "\\uDd8ec";
      for (const char *l = lure; *l; l++) {
        uint8_t byte = (uint8_t)*l;
        df_jsg_run *c = df_jsg_run_clone(r, err, sizeof err);
        bool can = df_jsg_accept_bytes(c, &byte, 1) == 1;
        df_jsg_run_destroy(&c);
        if (can && splitmix64(&seed) % 4 == 0) {
          pick = byte;
          break;
        }
      }
    } else {
      int best[256], nb = 0;
      for (int i = 0; i < nok; i++)
        if (after[ok[i]] == least) best[nb++] = ok[i];
      pick = best[splitmix64(&seed) % (uint64_t)nb];
    }
    out[n++] = (char)pick;
    uint8_t byte = (uint8_t)pick;
    assert_int_equal(df_jsg_accept_bytes(r, &byte, 1), 1);
  }
  df_jsg_run_destroy(&r);
  *len = n;
  return out;
}

static void test_byte_walks(void **state) {
  (void)state;
  static const wschema extra[] = {
      {"person", NULL, NULL, NULL}, {"str_2_4", NULL, NULL, NULL}, {"number", NULL, NULL, NULL},
      {"int_bounds", NULL, NULL, NULL}, {"num_bounds", NULL, NULL, NULL},
      {"enum", NULL, NULL, NULL}, {"extra_str", NULL, NULL, NULL}, {"refs", NULL, NULL, NULL},
      {"tree", NULL, NULL, NULL},
  };
  const char *const extra_schemas[] = {S_PERSON, S_STR24, S_NUM,
                                       S_INTB, S_NUMB, S_ENUM, S_EXTRA, S_REFS, S_TREE};
  size_t nw = sizeof WALKS / sizeof WALKS[0], ne = sizeof extra / sizeof extra[0];
  json_t *cases = json_array();
  size_t docs = 0, bytes = 0, esc = 0, uesc = 0, pairs = 0, multi = 0;
  double t0 = now_s();
  for (size_t w = 0; w < nw + ne; w++) {
    wschema ws = w < nw ? WALKS[w] : extra[w - nw];
    if (w >= nw) ws.schema = extra_schemas[w - nw];
    df_jsg *g = compile_ok(ws.schema, ws.prefix, ws.suffix);
    json_t *arr = json_array();
    for (int i = 0; i < N_BYTE_WALKS; i++) {
      size_t len;
      char *text = byte_walk(g, 0xb17e0000u + 131u * w + (uint64_t)i, &len);
      char *h = hex(text, len);
      json_array_append_new(arr, json_string(h));
      if (i == 0) printf("json_grammar bytes %-14s %.*s\n", ws.name, (int)len, text);
      for (size_t k = 0; k + 1 < len; k++) {
        esc += text[k] == '\\' && text[k + 1] != 'u';
        uesc += text[k] == '\\' && text[k + 1] == 'u';
        pairs += k + 12 <= len && !strncasecmp(text + k, "\\ud", 3) &&
                 strchr("89abAB", text[k + 3]) && text[k + 6] == '\\';
        multi += (uint8_t)text[k] >= 0xC2;
      }
      docs++;
      bytes += len;
      free(h);
      free(text);
    }
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(ws.name));
    json_object_set_new(c, "schema", ws.schema ? json_loads(ws.schema, 0, NULL) : json_null());
    json_object_set_new(c, "prefix", json_string(ws.prefix ? ws.prefix : ""));
    json_object_set_new(c, "suffix", json_string(ws.suffix ? ws.suffix : ""));
    json_object_set_new(c, "docs", arr);
    json_array_append_new(cases, c);
    df_jsg_destroy(&g);
  }
  printf("json_grammar byte walks: %zu documents, %zu bytes (%zu short escapes, %zu \\u escapes, "
         "%zu surrogate pairs, %zu non-ASCII characters), %.2f s\n",
         docs, bytes, esc, uesc, pairs, multi, now_s() - t0);
  assert_true(esc > 0 && uesc > 0 && pairs > 0 && multi > 0);
  assert_int_equal(run_checker(cases, ""), 0);
  json_decref(cases);
}

/* ---- timing ----------------------------------------------------------------------------- */

static void time_mask(const char *what, const char *schema, const char *text) {
  char err[256];
  df_jsg *g = compile_ok(schema, NULL, NULL);
  df_jsg_run *r = df_jsg_run_new(g, VOC, END, 2, err, sizeof err);
  assert_int_equal(df_jsg_accept_bytes(r, text, strlen(text)), (int64_t)strlen(text));
  int64_t V = NTOK;
  float *lg = malloc((size_t)V * sizeof *lg);
  int64_t n = mask_count(r, lg, V);
  int reps = 20;
  double t0 = now_s();
  for (int i = 0; i < reps; i++) df_jsg_mask(r, lg, V);
  double ms = 1e3 * (now_s() - t0) / reps;
  printf("json_grammar mask %-44s %7.3f ms/token  %6lld allowed\n", what, ms, (long long)n);
  assert_true(n >= 1);
  free(lg);
  df_jsg_run_destroy(&r);
  df_jsg_destroy(&g);
}

static void test_timing(void **state) {
  (void)state;
  const char *sch = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                    "\"maxLength\":40},\"count\":{\"type\":\"integer\"},\"kind\":{\"enum\":"
                    "[\"alpha\",\"beta\",\"gamma\"]},\"tags\":{\"type\":\"array\",\"items\":"
                    "{\"type\":\"string\"}}},\"required\":[\"name\",\"count\"]}";
  time_mask("json_object: document start", NULL, "");
  time_mask("json_object: value start ({\"a\": )", NULL, "{\"a\": ");
  time_mask("json_object: inside a string value", NULL, "{\"a\": \"hello");
  time_mask("json_object: inside a free key", NULL, "{\"a\": 1, \"ke");
  time_mask("json_object: in a number", NULL, "{\"a\": 12");
  time_mask("schema: key position ({)", sch, "{");
  time_mask("schema: inside a string with maxLength 40", sch, "{\"name\": \"hello");
  time_mask("schema: in an integer", sch, "{\"name\": \"x\", \"count\": 3");
  time_mask("schema: enum value start", sch, "{\"name\": \"x\", \"count\": 3, \"kind\": ");
  time_mask("schema: string in an array", sch, "{\"name\": \"x\", \"count\": 3, \"tags\": [\"a");
  time_mask("anyOf: a string in 3 branches at once",
            "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},"
            "\"required\":[\"q\"]},{\"type\":\"object\",\"properties\":{\"q\":{\"type\":"
            "\"string\",\"maxLength\":3},\"r\":{\"type\":\"null\"}},\"required\":[\"q\",\"r\"]},"
            "{\"type\":\"object\",\"properties\":{\"q\":{\"enum\":[\"abc\"]}}}]}",
            "{\"q\": \"ab");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_errors),
  };
  const struct CMUnitTest vocab_tests[] = {
      cmocka_unit_test(test_tokens),
      cmocka_unit_test(test_timing),
      cmocka_unit_test(test_walks),
      cmocka_unit_test(test_byte_walks),
  };
  int rc = cmocka_run_group_tests_name("json_grammar", tests, NULL, NULL);
  return rc | cmocka_run_group_tests_name("json_grammar_qwen3", vocab_tests, setup_vocab,
                                          teardown_vocab);
}
