# The benchmark harness itself (tools/bench): a tiny-mode run of the whole suite whose
# results.json is checked for its figures, commands, commit and exactness flags. Speeds are
# reported by tools/bench/run.sh, never asserted here, so the smoke run shares the machine with
# the other tests (it is not RUN_SERIAL: it keeps one core busy, and the other sat idle).
add_test(NAME bench_smoke COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/bench_smoke.py
  ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/bench-smoke)
set_tests_properties(bench_smoke PROPERTIES TIMEOUT 900)
