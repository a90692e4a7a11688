#!/usr/bin/env bash
# The README's main job: the bundled demo pair (models/demo-moe, a trained qwen3_moe target,
# and models/demo-draft, its qwen3 draft) continues a real English prompt on one machine,
# with speculative decoding on, and prints what it generated and the speed figures.
# Usage: tools/demo.sh [BUILD_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
bin="$build/coordinator/deltafin"

for m in demo-moe demo-draft; do
  if [ ! -f "$here/models/$m/model.safetensors" ]; then
    echo "demo: $here/models/$m/model.safetensors is missing (the demo pair ships in models/;" \
         "tools/train/train.py rebuilds it)" >&2
    exit 1
  fi
done

prompt="The committee reported that the new school"
echo "\$ deltafin run --prompt \"$prompt\" --max-new 48 --stats"
"$bin" run --prompt "$prompt" --max-new 48 --stats
