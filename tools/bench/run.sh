#!/usr/bin/env bash
# Benchmark harness: one command, every figure measured side by side in one run.
#   tools/bench/run.sh [--quick|--tiny] [--llama-cpp DIR] [BUILD_DIR]   (BUILD_DIR defaults to build)
# Writes BUILD_DIR/bench/results.json (each figure named, with the commands and the commit
# that produced it, and the load average around it), results.md and PNG plots. Random
# checkpoints (tests/reference/make_checkpoint.py), the widened demo target
# (tools/widen/widen.py) and their GGUF copies for llama.cpp are generated once into
# BUILD_DIR/bench and reused.
#   full   ~15 min on a quiet 2-core machine: random models of 0.2, 0.6 and 1.9 GB, the
#          widened demo target (~2.7 GB), llama.cpp on the same weights, speculative (alone /
#          draft model / block drafter / own-tokenizer draft), cluster 1/3 nodes, server
#          1/4/8 streams, tokenizer vs the JS oracle
#   --quick  ~2 min: the 0.2 GB model only, the demo pair unwidened, fewer tokens
#   --tiny   seconds: the tests' tiny fixtures (the ctest smoke test; checks the JSON only)
#   --llama-cpp DIR  the llama.cpp build to time as the peer (DIR, DIR/bin or DIR/build/bin
#          holding llama-bench); default $BENCH_LLAMA_CPP, else npm node-llama-cpp (pinned)
# Environment: BENCH_ONLY=fig1,fig2 runs some figures only; BENCH_OUT=DIR writes elsewhere;
# BENCH_LLAMA_CPP=DIR as --llama-cpp. Needs a built tree (cmake --build BUILD_DIR) and
# Debian's python3 (+ python3-matplotlib for the plots). See docs/PERFORMANCE.md. Timings
# taken at a 1-minute load average above ~1.5 are flagged "measured under load".
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
mode=full
peer="${BENCH_LLAMA_CPP:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick; shift ;;
    --tiny) mode=tiny; shift ;;
    --llama-cpp)
      [ $# -ge 2 ] || { echo "run.sh: --llama-cpp needs a folder" >&2; exit 2; }
      peer="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || { echo "run.sh: one BUILD_DIR at most (got: $*)" >&2; exit 2; }
build="${1:-$here/build}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
args=()
cmd="tools/bench/run.sh "
[ "$mode" = full ] || cmd+="--$mode "
if [ -n "${BENCH_OUT:-}" ]; then args+=(--out "$BENCH_OUT"); fi
if [ -n "${BENCH_ONLY:-}" ]; then args+=(--only "$BENCH_ONLY"); cmd="BENCH_ONLY=$BENCH_ONLY $cmd"; fi
if [ -n "$peer" ]; then args+=(--llama-cpp "$peer"); cmd+="--llama-cpp $peer "; fi
cmd+="$build"
exec "$py" "$here/tools/bench/suite.py" --build "$build" --mode "$mode" --command "$cmd" \
  ${args[@]+"${args[@]}"}
