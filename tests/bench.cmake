# The benchmark harness itself (tools/bench): a tiny-mode run of the whole suite whose
# results.json is checked for its figures, commands, commit and exactness flags. Speeds are
# reported by tools/bench/run.sh, never asserted here, so the smoke run shares the machine with
# the other tests (it is not RUN_SERIAL: it keeps one core busy, and the other sat idle).
add_test(NAME bench_smoke COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/bench_smoke.py
  ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/bench-smoke)
set_tests_properties(bench_smoke PROPERTIES TIMEOUT 900)

# The bench's GGUF writer (tools/bench/gguf.py, the llama.cpp peer's input): names, shapes,
# keys and bytes read back against the checkpoint; llama.cpp's greedy ids where the peer is
# installed.
add_test(NAME gguf_writer COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gguf_writer.py
  ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/gguf-writer)
set_tests_properties(gguf_writer PROPERTIES TIMEOUT 300)
