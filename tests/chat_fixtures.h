/* tests/chat_fixtures.h — the chat template of each family as the cmocka tests of generated
 * text load it (test_tool_calls.c, test_reasoning.c): the published jinja templates in
 * tests/tokenizer/ for Qwen3 and DeepSeek-V3, the tiny Kimi tokenizer folders for Kimi K2
 * Thinking and Kimi K3 (XTML, built in). Include after <cmocka.h>. */
#ifndef DF_TESTS_CHAT_FIXTURES_H
#define DF_TESTS_CHAT_FIXTURES_H

#include <stdio.h>

#include "engine/text/chat_template.h"

#define CHAT_FIXTURE_DIR DF_SOURCE_DIR "/tests/tokenizer"

/* The template of family f (DF_CHAT_KIMI_K2 loads K2 Thinking's); fails the test when it does
 * not load or is not of that family. Caller destroys it. */
static inline df_chat_template *chat_fixture_template(df_chat_family f) {
  char err[512];
  df_chat_template *t = NULL;
  const char *jinja = f == DF_CHAT_QWEN3 ? CHAT_FIXTURE_DIR "/qwen3_chat_template.jinja"
                      : f == DF_CHAT_DEEPSEEK_V3 ? CHAT_FIXTURE_DIR "/deepseek_v3_chat_template.jinja"
                                                 : NULL;
  if (jinja) {
    FILE *fp = fopen(jinja, "rb");
    assert_non_null(fp);
    char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    assert_int_equal(df_chat_template_from_text(buf, n, "tests/tokenizer", &t, err, sizeof err), 0);
  } else {
    const char *dir = f == DF_CHAT_KIMI_K3 ? CHAT_FIXTURE_DIR "/tiktoken_tiny"
                                           : CHAT_FIXTURE_DIR "/kimi_k2_thinking_tiny";
    if (df_chat_template_load(dir, &t, err, sizeof err) != 0) fail_msg("%s", err);
  }
  assert_int_equal(df_chat_template_family(t), f);
  return t;
}

#endif
