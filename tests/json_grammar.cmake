# Structured output (coordinator/generate/json_grammar.h): recogniser accept / reject tables,
# compile errors, random walks under the mask with the Qwen3 tokenizer of models/demo-moe whose
# documents tests/json_grammar_check.py validates with python3-jsonschema, mask timings.
df_add_cmocka_test(test_json_grammar SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_json_grammar.c
  LIBS dfcoord)
set_tests_properties(test_json_grammar PROPERTIES TIMEOUT 120)
