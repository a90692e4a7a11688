#!/usr/bin/env bash
# tools/gpu/debian13-check.sh [ROOT] — the GPU build checked on a machine WITHOUT a GPU.
#
# Debian 13 packages a CUDA-enabled libtorch (libtorch-cuda-dev 2.6, contrib) and the CUDA
# 12.4 toolkit (nvidia-cuda-toolkit, non-free). This script bootstraps a Debian 13 chroot in
# ROOT (default /var/tmp/deltafin-debian13; needs root, debootstrap and ~9 GB of disk,
# ~2.8 GB downloaded from the Debian archive), installs them with Deltafin's other
# dependencies, clones the current commit of this repository into it and
#   1. configures the default build (DF_CUDA=OFF) there and runs `cuda_rt_typecheck`, which
#      now compiles engine/device/cuda_rt.c against the toolkit's real <cuda_runtime_api.h>;
#   2. builds everything with DF_CUDA=ON against the CUDA libtorch 2.6 and libcudart 12
#      (-Werror-clean compile of the shim against libtorch 2.x and of cuda_rt.c, real link);
#   3. runs the whole test suite on that build: the CPU path still exact on libtorch 2.6,
#      the torch compute path (torch-cpu) against the golden fixtures on 2.6, and every
#      `--device cuda` / `auto` request falling back to the CPU with its one line, since
#      the chroot has the CUDA libraries but no device and no driver.
# What it cannot show (numbers from a real device) stays with tools/gpu/check.sh.
#
# cuDNN: Debian's nvidia-cudnn package downloads cuDNN from NVIDIA in its postinst, which
# an offline machine cannot do; the chroot gets a stand-in libcudnn.so.9 whose functions
# abort (libtorch_cuda links it; nothing here calls it, as there is no device).
#
# Logs: ROOT/out/{build-off.log,build.log,ctest.log,summary.txt}. Exit status 0 when all
# three steps pass. Re-running reuses the chroot and re-clones the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
root="${1:-/var/tmp/deltafin-debian13}"
mirror="${DF_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
[ "$(id -u)" -eq 0 ] || { echo "debian13-check: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "debian13-check: apt-get install debootstrap" >&2; exit 2; }

pkgs=(build-essential cmake pkgconf git ca-certificates
      libtorch-cuda-dev python3-torch-cuda nvidia-cuda-toolkit
      libzmq3-dev libsodium-dev libmsgpack-dev libcurl4-openssl-dev libmbedtls-dev
      libmicrohttpd-dev libjansson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      python3 python3-numpy python3-jinja2 nodejs npm)

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mnt() { mount "$@" && mounted+=("${!#}"); }

if [ ! -x "$root/usr/bin/apt-get" ]; then
  debootstrap --variant=minbase --components=main,contrib,non-free trixie "$root" "$mirror"
fi
mnt -t proc proc "$root/proc"
mnt --bind /dev "$root/dev"
mnt --bind /dev/pts "$root/dev/pts"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 bash -c "$1"; }

in_root "apt-get update -qq"
# nvidia-cudnn's postinst fetches cuDNN from NVIDIA: let it fail, neutralise it, go on
in_root "apt-get install -y -qq --no-install-recommends ${pkgs[*]}" >"$root/install.log" 2>&1 || true
if [ -e "$root/var/lib/dpkg/info/nvidia-cudnn.postinst" ]; then
  printf '#!/bin/sh\nexit 0\n' >"$root/var/lib/dpkg/info/nvidia-cudnn.postinst"
fi
in_root "dpkg --configure -a && apt-get install -y -qq --no-install-recommends ${pkgs[*]}" \
  >>"$root/install.log" 2>&1 || { tail -20 "$root/install.log"; exit 1; }
if [ ! -e "$root/usr/lib/x86_64-linux-gnu/libcudnn.so.9" ]; then
  in_root '
    cd /tmp
    nm -D --undefined-only /usr/lib/x86_64-linux-gnu/libtorch*.so |
      awk "{print \$2}" | grep "@libcudnn" | sed "s/@.*//" | sort -u >cudnn.syms
    { echo "#include <stdlib.h>"; while read -r s; do echo "int $s(void) { abort(); }"; done <cudnn.syms; } >cudnn_stub.c
    printf "libcudnn.so.9 { global: *; };\n" >cudnn.map
    gcc -shared -fPIC -o /usr/lib/x86_64-linux-gnu/libcudnn.so.9 -Wl,-soname,libcudnn.so.9 \
      -Wl,--version-script=cudnn.map cudnn_stub.c
    ldconfig'
fi

rm -rf "$root/src"
git clone -q "$here" "$root/src"
git -C "$root/src" checkout -q "$(git -C "$here" rev-parse HEAD)"
out="$root/out"
rm -rf "$out" && mkdir -p "$out"
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
# npm packages (tools/package.json): this checkout's, else fetched, trusting the host's CA
# bundle too (a TLS-inspecting proxy's certificate is often only there)
if [ -d "$here/tools/node_modules" ]; then
  cp -a "$here/tools/node_modules" "$root/src/tools/"
else
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/host-ca.crt" 2>/dev/null || true
  in_root "cd /src/tools && NODE_EXTRA_CA_CERTS=/etc/ssl/host-ca.crt npm install --no-audit \
           --no-fund --loglevel=error" >"$out/npm.log" 2>&1 ||
    note "npm install failed (the tokenizer oracle tests will fail): see npm.log"
fi
in_root "g++ --version | head -1; nvcc --version | tail -1; dpkg-query -W libtorch-cuda-dev libcudart12" |
  tee "$out/env.txt"

status=0
if in_root "cd /src && cmake -S . -B build-off -DCMAKE_BUILD_TYPE=Release >/dev/null &&
            cd build-off && ctest -R '^cuda_rt_typecheck\$' -V" >"$out/build-off.log" 2>&1 &&
   ! grep -q 'cuda_decl' "$out/build-off.log"; then
  note "ok    cuda_rt.c compiles against the CUDA toolkit's own headers (DF_CUDA=OFF build's typecheck)"
else
  note "FAIL  cuda_rt_typecheck against the real CUDA headers: see build-off.log"; status=1
fi
if in_root "cd /src && cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDF_CUDA=ON &&
            cmake --build build-cuda -j$(nproc)" >"$out/build.log" 2>&1; then
  note "ok    DF_CUDA=ON build against libtorch-cuda $(in_root "dpkg-query -W -f='\${Version}' libtorch-cuda-dev")"
else
  note "FAIL  DF_CUDA=ON build: see build.log"; status=1
fi
if [ "$status" -eq 0 ]; then
  if in_root "cd /src/build-cuda && ctest -j$(nproc) --timeout 900" >"$out/ctest.log" 2>&1; then
    note "ok    $(grep 'tests passed' "$out/ctest.log" | tail -n 1)"
  else
    note "FAIL  ctest on the DF_CUDA=ON build: $(grep 'tests passed' "$out/ctest.log")"; status=1
  fi
fi
echo "debian13-check: logs in $out"
exit "$status"
