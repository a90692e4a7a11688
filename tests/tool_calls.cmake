# Tool calls in generated text (engine/text/tool_calls.h): the parser per chat family on
# renderings of the published templates, malformed text, frames, UTF-8 and fuzz. Links only dftok.
df_add_cmocka_test(test_tool_calls SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tool_calls.c LIBS dftok)
set_tests_properties(test_tool_calls PROPERTIES TIMEOUT 300)
