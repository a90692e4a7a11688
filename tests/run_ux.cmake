# What a new user sees of `deltafin run` and `make demo` (tests/run_ux.py; one ctest entry
# per scenario): a quiet default run, --stats' load / start-up / cluster wait / prefill rate,
# a random seed per run that --seed repeats, the progress bar on stderr only (DF_PROGRESS,
# terminals), and tools/build-quiet.sh. The bar's timing and text and the engine's progress
# hooks: tests/test_progress.c.
foreach(scenario quiet clock seed progress build)
  add_test(NAME run_ux_${scenario} COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/run_ux.py
    ${scenario} $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${DF_FIXTURES}
    ${PROJECT_BINARY_DIR}/run-ux/${scenario} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/spec-drafts)
  set_tests_properties(run_ux_${scenario} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(run_ux_quiet PROPERTIES FIXTURES_REQUIRED spec_drafts) # tests/spec.cmake
df_add_cmocka_test(test_progress SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_progress.c LIBS dfcoord)
