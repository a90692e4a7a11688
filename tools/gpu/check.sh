#!/usr/bin/env bash
# tools/gpu/check.sh — every check of docs/GPU.md that needs an NVIDIA GPU, in one go, for a
# machine that has one. Run from anywhere; results (JSON + logs, at most 8 files) go to
# $OUT (default build-cuda/out):
#   env.txt          nvidia-smi, torch / CUDA / compiler versions, how the build was configured
#   build.log        configure + build of deltafin, df-node and the tests against the CUDA
#                    libtorch of `python3 -c 'import torch'` (DF_CUDA=ON)
#   ctest.log        test_engine (CPU path still exact on this libtorch), test_admission,
#                    test_device on torch-cpu AND with DF_TEST_DEVICE=cuda (golden fixtures
#                    within 1e-3 + greedy ids, half the experts on the host, batch + rollback),
#                    device_cli (cuda: placement line, ids equal the CPU path's), cuda_rt
#   demo.json        demo pair: greedy ids cuda vs cpu vs reference, max |dlogit|
#   cluster.json     one GPU df-node + one CPU df-node vs local ids
#   bench.json       decode / prefill tok/s cuda vs cpu on the widened demo target
#   summary.txt      one line per check: ok / fail / pending
# Usage: tools/gpu/check.sh [STAGE...]  with stages build tests demo cluster bench (default:
# all, in that order; later stages reuse build-cuda/, so where one command may only run a
# few minutes, `check.sh build tests` and then `check.sh demo cluster bench` on the same
# machine do the same). Needs: nvcc or the wheel's CUDA runtime headers, CMake, a C/C++
# compiler, and Deltafin's Debian dependencies — installed, or unpacked by
# tools/gpu/make-sysroot.sh into build-gpu-sysroot/ (carried along; used when present).
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
OUT="${OUT:-$here/build-cuda-out}"
mkdir -p "$OUT"
stages="${*:-build tests demo cluster bench}"
want() { case " $stages " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# Overrides for a dry run on a machine without a GPU (e.g. DF_GPU_DEVICE=torch-cpu
# DF_GPU_BUILD=build-gpu DF_GPU_PYTHON=/usr/bin/python3 tools/gpu/check.sh tests demo cluster)
build="${DF_GPU_BUILD:-$here/build-cuda}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
dev="${DF_GPU_DEVICE:-cuda}"
export DF_GPU_DEVICE="$dev"
py="${DF_GPU_PYTHON:-python3}"
jobs=$(nproc)
summary="$OUT/summary.txt"
touch "$summary"
note() { echo "$*" | tee -a "$summary"; }

# ---- environment ------------------------------------------------------------------------
if want build; then {
  date -u; uname -a; nvidia-smi 2>&1 | head -15
  $py - <<'PY'
import torch, os
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("cxx11_abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))
PY
  cmake --version | head -1; cc --version | head -1; nvcc --version 2>&1 | tail -1
} >"$OUT/env.txt" 2>&1; fi
prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
troot=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')
abi=$($py -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cudart=$($py -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0])' 2>/dev/null || true)

# ---- Debian dependencies from a carried sysroot, when present ---------------------------
sys="$here/build-gpu-sysroot"
cfg=(-DCMAKE_BUILD_TYPE=Release -DDF_FUZZ=OFF -DDF_CUDA=ON)
pp="$prefix"
if [ -d "$sys/usr" ]; then
  lib="$sys/usr/lib/x86_64-linux-gnu"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$sys/usr/share/pkgconfig:$lib/pkgconfig-stubs"
  export PKG_CONFIG_SYSROOT_DIR="$sys"
  export CPATH="$sys/usr/include${CPATH:+:$CPATH}"          # headers pkgconf filters out
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
  export PATH="$PATH:$sys/usr/bin"
  pp="$prefix;$sys/usr"
  cfg+=(-DPKG_CONFIG_EXECUTABLE="$sys/usr/bin/pkgconf" -DCMAKE_LIBRARY_PATH="$lib"
        -DCMAKE_INCLUDE_PATH="$sys/usr/include")
  echo "sysroot: $sys" >>"$OUT/env.txt"
fi
# the wheel's libraries at run time (libtorch_cuda finds its CUDA libraries itself)
export LD_LIBRARY_PATH="$troot/lib:${LD_LIBRARY_PATH:-}"

# ---- configure + build: TorchConfig.cmake first, then DF_TORCH_ROOT ---------------------
targets=(deltafin df-node test_engine test_admission test_device)
configure() { rm -rf "$build"; cmake -S "$here" -B "$build" "${cfg[@]}" "$@" >>"$OUT/build.log" 2>&1; }
if want build; then
: >"$OUT/build.log"
how=""
if configure -DCMAKE_PREFIX_PATH="$pp"; then
  how="TorchConfig.cmake + CUDAToolkit"
elif configure -DCMAKE_PREFIX_PATH="$pp" -DDF_TORCH_ROOT="$troot" -DDF_TORCH_CXX11_ABI="$abi"; then
  how="DF_TORCH_ROOT + CUDAToolkit"
elif [ -n "$cudart" ] && configure -DCMAKE_PREFIX_PATH="$pp" -DDF_TORCH_ROOT="$troot" \
    -DDF_TORCH_CXX11_ABI="$abi" -DDF_CUDART_ROOT="$cudart"; then
  how="DF_TORCH_ROOT + the wheel's CUDA runtime ($cudart)"
fi
echo "configured with: ${how:-nothing (see build.log)}" >>"$OUT/env.txt"
if [ -z "$how" ] || ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >>"$OUT/build.log" 2>&1; then
  note "build: fail (build.log)"
  tail -40 "$OUT/build.log"
  exit 1
fi
note "build: ok ($how)"
fi

# ---- tests ------------------------------------------------------------------------------
if want tests; then
  ctest --test-dir "$build" -R '^(test_engine|test_admission|test_device|device_cli)$' \
    --output-on-failure >"$OUT/ctest.log" 2>&1
  c1=$?
  echo "=== test_device with DF_TEST_DEVICE=$dev" >>"$OUT/ctest.log"
  DF_TEST_DEVICE="$dev" timeout 600 "$build/tests/test_device" >>"$OUT/ctest.log" 2>&1
  c2=$?
  note "ctest (CPU path exact, torch-cpu, device_cli): $([ $c1 = 0 ] && echo ok || echo fail)"
  note "test_device on $dev: $([ $c2 = 0 ] && echo ok || echo fail): $(grep -h "on $dev (" "$OUT/ctest.log" | sed 's/ (.*max |logit - reference| = / /' | tr '\n' ';')"
fi

# ---- deltafin-level checks ----------------------------------------------------------------
export PYTHONUNBUFFERED=1
for what in demo cluster bench; do
  want "$what" || continue
  timeout 900 $py "$here/tools/gpu/check.py" "$what" "$build" "$OUT" 2>>"$OUT/checks.log"
  st=$($py -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['status'], d.get('why',''))" \
       "$OUT/$what.json" 2>/dev/null || echo "fail (no result)")
  note "$what: $st"
done
cat "$summary"
