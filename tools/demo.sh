#!/usr/bin/env bash
# The README's main job: run the demo model on one machine and show what it generates.
# Usage: tools/demo.sh [BUILD_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
bin="$build/coordinator/deltafin"

# A random qwen3_moe checkpoint in the real Hugging Face layout (~200 MB, 6 layers,
# 32 experts, top-4), written once by the project's deterministic generator.
model="$build/demo-random"
if [ ! -f "$model/config.json" ]; then
  /usr/bin/python3 "$here/tests/reference/make_checkpoint.py" --preset rss200m --out "$model"
fi
"$bin" inspect "$model" | sed -n '1,8p'
prompt=$(seq -s, 100 37 5000 | cut -d, -f1-64)
echo
echo "\$ deltafin run --model $model --prompt-ids <64 ids> --max-new 32 --stats"
"$bin" run --model "$model" --prompt-ids "$prompt" --max-new 32 --temperature 0 --ignore-eos --stats
