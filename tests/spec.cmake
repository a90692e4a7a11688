# Speculative decoding: exactness with and without a draft, fallbacks, reproducibility, the
# output distribution under sampling, shared tensors, memory headroom, the CLI's fallbacks and
# the cluster.
add_test(NAME spec_drafts COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_spec_drafts.py
  ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/spec-drafts)
set_tests_properties(spec_drafts PROPERTIES FIXTURES_SETUP spec_drafts)
df_add_cmocka_test(test_spec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec.c LIBS dfcoord)
set_tests_properties(test_spec PROPERTIES FIXTURES_REQUIRED spec_drafts)
df_add_cmocka_test(test_spec_sampling SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_sampling.c
  LIBS dfcoord)
set_tests_properties(test_spec_sampling PROPERTIES FIXTURES_REQUIRED spec_drafts)
df_add_cmocka_test(test_spec_mem SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_mem.c LIBS dfcoord)
set_tests_properties(test_spec_mem PROPERTIES FIXTURES_REQUIRED spec_drafts)
