#!/bin/sh
# tests/reference/make_fixtures.sh — regenerate every golden fixture under tests/fixtures/.
#
# Each fixture folder tests/fixtures/<preset>/ gets the checkpoint written by
# make_checkpoint.py --preset <preset> plus golden.json, golden_logits.f32 and
# golden_step_logits.f32 from the fp32 reference (make_golden.py). Deterministic: running it
# again on the same numpy/torch gives the same bytes. Takes about half a minute.
#
# Usage: tests/reference/make_fixtures.sh [PRESET...]   (default: every fixture)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../fixtures" && pwd)
py=${DF_PYTHON:-/usr/bin/python3}
export PYTHONDONTWRITEBYTECODE=1
if [ $# -eq 0 ]; then
  set -- tiny-moe-tied tiny-moe-sharded tiny-moe-sparse tiny-dense tiny-ds-bf16 tiny-ds-fp8 \
    tiny-kl-48b tiny-kl-sharded tiny-kl-k3gate tiny-kl-mixed \
    tiny-k3 tiny-k3-unpadded tiny-k3-deep tiny-k3-sharded
fi
for name in "$@"; do
  "$py" "$here/make_golden.py" --preset "$name" --out "$fixtures/$name"
done
