#!/usr/bin/env bash
# Cluster benchmark: decode ms/token of `deltafin run` with 3 df-node agents on loopback vs
# local-only, measured side by side on the same checkpoint, plus bytes and round trips per
# generated token, and the same cluster behind a delaying relay (tools/df-relay.py) at an
# injected 1 ms round trip. Figures are reported, never asserted.
#   tools/bench/cluster.sh [--quick] [BUILD_DIR]
# Writes BUILD_DIR/bench/cluster.md. --quick uses the 200 MB rss200m preset instead of the
# ~2 GB bench2g one. Nodes use their own copy of the checkpoint (--model-dir; the same files
# here) and equal budgets that together hold every routed expert.
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
deltafin="$build/coordinator/deltafin"
dfnode="$build/node/df-node"
work=$(mktemp -d /tmp/df-bench-cluster.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
new=${BENCH_NEW:-32}
prompt=1,2,3,4,5,6,7,8
size=$(du -sb "$model" | cut -f1)
budget=$(( size / 3 + (64 << 20) ))  # three equal shares of the checkpoint cover the experts

ms_per_token() { sed -n 's/.*, \([0-9.]*\) ms\/token.*/\1/p' "$1" | tail -1; }

echo "bench: local only" >&2
"$deltafin" run --model "$model" --prompt-ids $prompt --max-new $new --temperature 0 --ignore-eos \
  --no-draft --stats > "$work/local.ids" 2> "$work/local.err"

run_cluster() { # $1 tag, $2 rtt ms (0 = direct)
  local tag=$1 rtt=$2 port rport state="$work/coord-$1"
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local tok; tok=$("$deltafin" cluster token --reusable --state-dir "$state" 2>/dev/null)
  local target=$port
  if [ "$rtt" != 0 ]; then
    rport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    /usr/bin/python3 "$here/tools/df-relay.py" "127.0.0.1:$rport" "127.0.0.1:$port" --rtt-ms "$rtt" \
      > "$work/relay-$tag.out" 2>&1 & pids+=($!)
    target=$rport
  fi
  for i in 1 2 3; do
    "$dfnode" join "127.0.0.1:$target" --token "$tok" --state-dir "$work/node-$tag-$i" \
      --model-dir "$model" --memory "$budget" --name "n$i" --threads 1 --quiet \
      > "$work/node-$tag-$i.log" 2>&1 & pids+=($!)
  done
  "$deltafin" run --model "$model" --prompt-ids $prompt --max-new $new --temperature 0 --ignore-eos \
    --no-draft --stats --cluster --cluster-bind 127.0.0.1 --cluster-port "$port" --state-dir "$state" \
    --cluster-nodes 3 --cluster-wait 600 > "$work/$tag.ids" 2> "$work/$tag.err"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
echo "bench: 3 loopback nodes" >&2
run_cluster direct 0
echo "bench: 3 loopback nodes behind a 1 ms round-trip relay" >&2
run_cluster rtt1 1

l=$(ms_per_token "$work/local.err"); d=$(ms_per_token "$work/direct.err"); r=$(ms_per_token "$work/rtt1.err")
same_d=$(cmp -s "$work/local.ids" "$work/direct.ids" && echo identical || echo DIFFERENT)
same_r=$(cmp -s "$work/local.ids" "$work/rtt1.ids" && echo identical || echo DIFFERENT)
traffic() { grep '^cluster:' "$1" | tail -1; }
{
  echo "# Cluster benchmark ($preset, $new generated tokens, $(nproc) CPUs, commit $(git -C "$here" rev-parse --short HEAD))"
  echo
  echo "| setup | decode ms/token | vs local | ids |"
  echo "| --- | ---: | ---: | --- |"
  echo "| local only | $l | 1.00x | reference |"
  echo "| 3 loopback nodes | $d | $(awk -v a="$d" -v b="$l" 'BEGIN{printf "%.2fx", a/b}') | $same_d |"
  echo "| 3 nodes, 1 ms injected RTT | $r | $(awk -v a="$r" -v b="$l" 'BEGIN{printf "%.2fx", a/b}') | $same_r |"
  echo
  echo "Traffic (3 loopback nodes): $(traffic "$work/direct.err")"
  echo
  echo "Traffic (1 ms RTT): $(traffic "$work/rtt1.err")"
} | tee "$out/cluster.md"
