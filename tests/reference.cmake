# tests/reference.cmake — the PyTorch reference's own checks (tests/reference/selfcheck.py):
# KV-cached == full-sequence forward, safetensors write/read round trip, and every committed
# fixture under tests/fixtures/tiny-*/ regenerating byte for byte and reproducing its goldens
# (qwen3, deepseek_v3 / kimi_k2 and kimi_linear / kimi_k3 fixtures alike).
# Needs Debian's python3 with torch + numpy (DF_PYTHON); writes only to a temporary folder.
add_test(NAME reference_selfcheck
         COMMAND ${DF_PYTHON} ${DF_REFERENCE}/selfcheck.py --fixtures ${DF_FIXTURES})
set_tests_properties(reference_selfcheck PROPERTIES
  TIMEOUT 600
  LABELS "reference"
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")

# The Kimi Linear reference's own command line on the kimi_k3-wrapped fixture, recomputing
# the whole sequence at every step (--no-cache): prints the fixture's greedy ids.
file(READ ${DF_FIXTURES}/tiny-kl-k3gate/golden.json _kl_golden)
string(REGEX MATCH "\"prompt_ids\": \\[([0-9, ]+)\\]" _m "${_kl_golden}")
string(REPLACE " " "" _kl_prompt "${CMAKE_MATCH_1}")
string(REGEX MATCH "\"greedy_ids\": \\[([0-9, ]+)\\]" _m "${_kl_golden}")
string(REPLACE " " "" _kl_greedy "${CMAKE_MATCH_1}")
add_test(NAME reference_kimi_linear_cli
         COMMAND ${DF_PYTHON} ${DF_REFERENCE}/kimi_linear_ref.py --model ${DF_FIXTURES}/tiny-kl-k3gate
                 --prompt-ids ${_kl_prompt} --max-new 32 --no-cache)
set_tests_properties(reference_kimi_linear_cli PROPERTIES
  TIMEOUT 300
  LABELS "reference"
  PASS_REGULAR_EXPRESSION "^${_kl_greedy}\n"
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
