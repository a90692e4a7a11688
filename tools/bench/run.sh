#!/usr/bin/env bash
# Benchmark harness: one command, figures measured side by side in one run.
#   tools/bench/run.sh [--quick] [BUILD_DIR]
# Writes BUILD_DIR/bench/results.json and results.md. Needs a built tree (make build).
# The ~2 GB random checkpoint (bench2g preset: hidden 1024, 16 layers, 64 experts, top-8)
# is generated once into BUILD_DIR/bench/bench2g. --quick uses the 200 MB rss200m preset.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build="${1:-$here/build}"
out="$build/bench"
mkdir -p "$out"
preset=bench2g
[ "$quick" = 1 ] && preset=rss200m
model="$out/$preset"
if [ ! -f "$model/config.json" ]; then
  echo "bench: writing the $preset checkpoint to $model" >&2
  /usr/bin/python3 "$here/tests/reference/make_checkpoint.py" --preset "$preset" --out "$model" >&2
fi
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
"$build/tools/bench/df-bench-engine" --model "$model" --json "$out/engine.json" | tee "$out/results.md"
{
  echo "{"
  echo "  \"command\": \"tools/bench/run.sh $([ $quick = 1 ] && echo --quick)\","
  echo "  \"commit\": \"$commit\","
  echo "  \"date\": \"$(date -u +%FT%TZ)\","
  echo "  \"engine\": $(cat "$out/engine.json")"
  echo "}"
} > "$out/results.json"
echo "bench: wrote $out/results.json and $out/results.md" >&2
