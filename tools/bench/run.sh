#!/usr/bin/env bash
# Benchmark harness: one command, every figure measured side by side in one run.
#   tools/bench/run.sh [--quick|--tiny] [BUILD_DIR]      (BUILD_DIR defaults to build)
# Writes BUILD_DIR/bench/results.json (each figure named, with the commands and the commit
# that produced it, and the load average around it), results.md and PNG plots. Random
# checkpoints (tests/reference/make_checkpoint.py) and the widened demo target
# (tools/widen/widen.py) are generated once into BUILD_DIR/bench and reused.
#   full   ~15 min on a quiet 2-core machine: random models of 0.2, 0.6 and 1.9 GB, the
#          widened demo target (~2.7 GB), speculative (alone / draft model / block drafter),
#          cluster 1/3 nodes, server 1/4/8 streams, tokenizer vs the JS oracle
#   --quick  ~2 min: the 0.2 GB model only, the demo pair unwidened, fewer tokens
#   --tiny   seconds: the tests' tiny fixtures (the ctest smoke test; checks the JSON only)
# Needs a built tree (cmake --build BUILD_DIR) and Debian's python3 (+ python3-matplotlib
# for the plots). See docs/PERFORMANCE.md. Timings taken at a 1-minute load average above
# ~1.5 are flagged "measured under load" in the results.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
mode=full
case "${1:-}" in
  --quick) mode=quick; shift ;;
  --tiny) mode=tiny; shift ;;
  -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
esac
build="${1:-$here/build}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
args=()
[ -n "${BENCH_OUT:-}" ] && args+=(--out "$BENCH_OUT")
[ -n "${BENCH_ONLY:-}" ] && args+=(--only "$BENCH_ONLY")
exec "$py" "$here/tools/bench/suite.py" --build "$build" --mode "$mode" \
  --command "tools/bench/run.sh $([ $mode = full ] || echo "--$mode ")$build" ${args[@]+"${args[@]}"}
