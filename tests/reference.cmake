# tests/reference.cmake — the PyTorch reference's own checks (tests/reference/selfcheck.py):
# KV-cached == full-sequence forward, safetensors write/read round trip, and every committed
# fixture under tests/fixtures/tiny-*/ regenerating byte for byte and reproducing its goldens.
# Needs Debian's python3 with torch + numpy (DF_PYTHON); writes only to a temporary folder.
add_test(NAME reference_selfcheck
         COMMAND ${DF_PYTHON} ${DF_REFERENCE}/selfcheck.py --fixtures ${DF_FIXTURES})
set_tests_properties(reference_selfcheck PROPERTIES
  TIMEOUT 600
  LABELS "reference"
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
