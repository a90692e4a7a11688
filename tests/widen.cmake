# tools/widen keeps the model's function exactly (bitwise logits through the engine).
add_test(NAME widen_check COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/widen_check.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/widen-check)
