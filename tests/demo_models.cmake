# Demo models (models/demo-moe, models/demo-draft): the C engine's greedy ids equal the
# PyTorch reference's, stored in tests/fixtures/demo_models_greedy.json by
# tools/train/make_greedy_fixture.py. Needs only the deltafin binary.
add_test(NAME demo_models COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/demo_models.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${DF_FIXTURES}/demo_models_greedy.json)
set_tests_properties(demo_models PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# deltafin tokenize without --model uses the bundled demo model, as run and serve do: its ids
# equal --model models/demo-moe's and, on the fixture's held-out prompts, the reference's.
add_test(NAME tokenize_default COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/tokenize_default.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${DF_FIXTURES}/demo_models_greedy.json)
set_tests_properties(tokenize_default PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
