# Reasoning and content of generated text (engine/text/reasoning.h): the splitter per chat
# family on renderings of the published templates, explicit cases and fuzz. Links only dftok.
df_add_cmocka_test(test_reasoning SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reasoning.c LIBS dftok)
set_tests_properties(test_reasoning PROPERTIES TIMEOUT 300)
