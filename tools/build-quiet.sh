#!/usr/bin/env bash
# Configures (Release) and builds Deltafin into BUILD_DIR with CMake, keeping the compiler's
# output in BUILD_DIR/build.log instead of on the terminal: one line when it starts; on
# failure a one-line summary (the first error) and the log's path on stderr, exit 1.
# `make demo` uses it; `make build` / `make test` show the whole output.
# Usage: tools/build-quiet.sh BUILD_DIR [JOBS [SOURCE_DIR]]
#   JOBS default: every online CPU; SOURCE_DIR default: this checkout (tests pass another)
set -uo pipefail
build="${1:?usage: tools/build-quiet.sh BUILD_DIR [JOBS [SOURCE_DIR]]}"
jobs="${2:-$(nproc)}"
here="${3:-$(cd "$(dirname "$0")/.." && pwd)}"
mkdir -p "$build" || exit 1
log="$build/build.log"
echo "build: compiling in $build (output in $log)"
if ! { cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$build" -j "$jobs"; } >"$log" 2>&1; then
  first="$(grep -m1 -E 'error|Error' "$log" || tail -n 1 "$log")"
  echo "build: FAILED: $first (full output: $log)" >&2
  exit 1
fi
