# The widened demo target (tools/widen on models/demo-moe, hidden x4) gives the demo target's
# greedy ids on 5 prompts x 32 tokens. Skipped (exit 77) while models/demo-moe is absent.
add_test(NAME widen_demo COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/widen_demo.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${PROJECT_BINARY_DIR}/widen-demo)
set_tests_properties(widen_demo PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# The block drafter widened with it (widen.py --dspark-src/--dspark-out, hidden x4) drafts
# exactly as models/demo-dspark over demo-moe: same text and ids, same rounds and accepted
# tokens at fixed k 6. Skipped (exit 77) while models/demo-moe or models/demo-dspark is absent.
add_test(NAME widen_dspark COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/widen_dspark.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${PROJECT_BINARY_DIR}/widen-dspark)
set_tests_properties(widen_dspark PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
