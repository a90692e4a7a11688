# deltafin pull / stream mode / verify against a mock hub on loopback (tests/mock_hub.py), one
# ctest per scenario (tests/test_pull.py), plus unit tests of the expert cache, the manifest
# parser and the name checks (tests/test_pull_unit.c).
foreach(scenario full resume corrupt http_errors stall disk stream stream_fp8 verify stream_k3
    stream_k3_real setup_k3 dupes hostile)
  add_test(NAME pull_${scenario} COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_pull.py
    $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/pull-tests ${scenario})
  set_tests_properties(pull_${scenario} PROPERTIES TIMEOUT 180 LABELS pull)
endforeach()
# the header-only real K3 folder of tests/kimi_k3.cmake's fixture, served read-only
set_tests_properties(pull_stream_k3_real PROPERTIES FIXTURES_REQUIRED k3_real
  ENVIRONMENT "DF_K3_REAL_DIR=${PROJECT_BINARY_DIR}/k3-real")
df_add_cmocka_test(test_pull_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pull_unit.c LIBS dfcoord)
set_tests_properties(test_pull_unit PROPERTIES LABELS pull)
