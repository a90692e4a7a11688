#!/usr/bin/env bash
# tools/gpu/make-sysroot.sh [DIR] — on a Debian 12 machine with apt, fetch the -dev and
# runtime packages Deltafin's build needs besides libtorch (tools/install-deps.sh's list) and
# unpack them into DIR (default build-gpu-sysroot/, git-ignored), without installing
# anything. A GPU machine that has a compiler, CMake and a CUDA PyTorch but none of these
# Debian packages and no network (a rented or shared GPU box) builds against it:
# carry DIR along and tools/gpu/check.sh picks it up (PKG_CONFIG_PATH, CMAKE_PREFIX_PATH,
# LD_LIBRARY_PATH). Nothing is fetched from anywhere but the configured apt sources.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$here/build-gpu-sysroot}"
dev=(libjansson-dev libpcre2-dev libutf8proc-dev libcmocka-dev libzmq3-dev libsodium-dev
     libmsgpack-dev libcurl4-openssl-dev libmbedtls-dev libmicrohttpd-dev pkgconf libpkgconf3
     pkgconf-bin)
# runtime libraries of the above that a CUDA/Ubuntu image may lack (glibc, libstdc++, zlib,
# OpenSSL, GnuTLS and friends are assumed present)
run=(libjansson4 libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc2
     libcmocka0 libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0 libmsgpackc2
     libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2
     libsasl2-modules-db libbrotli1 libmbedtls14 libmbedx509-1 libmbedcrypto7
     libmicrohttpd12 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1)
mkdir -p "$dir/debs"
cd "$dir/debs"
apt-get download "${dev[@]}" "${run[@]}" >/dev/null
for f in *.deb; do dpkg-deb -x "$f" "$dir"; done
rm -rf "$dir/debs" "$dir/usr/share/doc" "$dir/usr/share/man" "$dir/usr/share/lintian"
find "$dir" -name '*.a' -delete   # shared libraries only: keeps the carried tree small
# pkg-config files name prefix=/usr: check.sh sets PKG_CONFIG_SYSROOT_DIR=$dir and
# PKG_CONFIG_LIBDIR to the folders below (no system .pc file is read). Packages the .pc files
# require privately (static linking only: gnutls, krb5, openpgm, ...) get empty stubs, since
# the build links dynamically.
lib="$dir/usr/lib/x86_64-linux-gnu"
stubs="$lib/pkgconfig-stubs"
mkdir -p "$stubs"
pcs=(jansson libpcre2-8 libutf8proc cmocka libzmq libcurl libmicrohttpd)
for _ in 1 2 3 4 5 6; do
  miss=$(PKG_CONFIG_LIBDIR="$lib/pkgconfig:$dir/usr/share/pkgconfig:$stubs" \
         PKG_CONFIG_SYSROOT_DIR="$dir" LD_LIBRARY_PATH="$lib" "$dir/usr/bin/pkgconf" \
         --cflags --libs "${pcs[@]}" 2>&1 >/dev/null |
         sed -n "s/^Package '\([^']*\)', required by .*/\1/p" | sort -u || true)
  [ -z "$miss" ] && break
  for m in $miss; do
    printf 'Name: %s\nDescription: stub (private requirement, not linked)\nVersion: 999\nCflags:\nLibs:\n' \
      "$m" >"$stubs/$m.pc"
  done
done
du -sh "$dir" | sed 's/^/sysroot: /'
