# Speculative decoding: exactness with and without a draft, fallbacks, reproducibility, the
# output distribution under sampling, shared tensors, memory headroom, the CLI's fallbacks and
# the cluster.
add_test(NAME spec_drafts COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_spec_drafts.py
  ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/spec-drafts ${PROJECT_SOURCE_DIR}/models)
set_tests_properties(spec_drafts PROPERTIES FIXTURES_SETUP spec_drafts)
df_add_cmocka_test(test_spec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec.c LIBS dfcoord)
set_tests_properties(test_spec PROPERTIES FIXTURES_REQUIRED spec_drafts)
df_add_cmocka_test(test_spec_sampling SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_sampling.c
  LIBS dfcoord)
# dspark_v16: the block drafter of its last case (tests/dspark.cmake)
set_tests_properties(test_spec_sampling PROPERTIES FIXTURES_REQUIRED "spec_drafts;dspark_v16")
df_add_cmocka_test(test_spec_mem SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_mem.c LIBS dfcoord)
set_tests_properties(test_spec_mem PROPERTIES FIXTURES_REQUIRED spec_drafts)
# many prompts through one coordinator process (driven by spec_cli.py demo_cluster)
add_executable(test_spec_cluster ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_cluster.c)
target_link_libraries(test_spec_cluster PRIVATE dfcoord)
foreach(scenario fallbacks block cluster demo_cluster text)
  add_test(NAME spec_${scenario}
    COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/spec_cli.py ${scenario} ${PROJECT_BINARY_DIR}
            ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/spec-drafts ${PROJECT_BINARY_DIR}/spec-cli/${scenario}
            ${PROJECT_SOURCE_DIR}/models)
  set_tests_properties(spec_${scenario} PROPERTIES FIXTURES_REQUIRED spec_drafts TIMEOUT 600
                       SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(spec_cluster spec_demo_cluster PROPERTIES LABELS cluster)
set_tests_properties(spec_demo_cluster PROPERTIES TIMEOUT 1200)
# the demo pair (models/demo-moe + models/demo-draft): skipped (exit 77) while it is missing
df_add_cmocka_test(test_spec_demo SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_demo.c LIBS dfcoord)
set_tests_properties(test_spec_demo PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
# the demo target's greedy ids alone for the 20 demo prompts, computed once for test_spec_demo
# and spec_demo_cluster (tests/spec_demo_alone.h), removed after them
set(DF_SPEC_DEMO_ALONE ${PROJECT_BINARY_DIR}/spec-demo-alone.txt)
add_test(NAME spec_demo_alone COMMAND test_spec_demo --write-alone ${DF_SPEC_DEMO_ALONE})
set_tests_properties(spec_demo_alone PROPERTIES FIXTURES_SETUP spec_demo_alone
                     SKIP_RETURN_CODE 77 TIMEOUT 600)
add_test(NAME spec_demo_alone_cleanup COMMAND ${CMAKE_COMMAND} -E rm -f ${DF_SPEC_DEMO_ALONE})
set_tests_properties(spec_demo_alone_cleanup PROPERTIES FIXTURES_CLEANUP spec_demo_alone)
set_property(TEST test_spec_demo spec_demo_cluster APPEND PROPERTY FIXTURES_REQUIRED
             spec_demo_alone)
set_property(TEST test_spec_demo APPEND PROPERTY ENVIRONMENT DF_SPEC_DEMO_ALONE=${DF_SPEC_DEMO_ALONE})
# cross-tokenizer drafting (coordinator/generate/text_draft.h): the DeepSeek-V3 fixture with its
# relabeled self, the demo target with demo-xdraft and with demo-draft under swapped ids
df_add_cmocka_test(test_spec_text SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_text.c LIBS dfcoord)
set_tests_properties(test_spec_text PROPERTIES FIXTURES_REQUIRED spec_drafts TIMEOUT 600)
