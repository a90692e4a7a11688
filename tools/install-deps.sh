#!/usr/bin/env bash
# Installs every Debian and npm dependency Deltafin needs to build, test and train.
# Idempotent: packages already present are skipped; safe to run repeatedly.
# Usage: tools/install-deps.sh [--quiet]   (uses sudo when not root; --quiet, for make demo:
#        nothing printed when every Debian package is present, npm's output only on failure)
set -euo pipefail
quiet=0
case "${1:-}" in
  --quiet) quiet=1 ;;
  "") ;;
  *) echo "usage: tools/install-deps.sh [--quiet]" >&2; exit 2 ;;
esac

DEBS=(
  build-essential cmake pkg-config git
  clang libclang-rt-14-dev                 # libFuzzer targets
  libtorch-dev libopenblas0-pthread        # tensor math (CPU libtorch 1.13)
  libzmq3-dev libsodium-dev                # transport, CURVE
  libmsgpack-dev                           # wire format
  libcurl4-openssl-dev                     # downloads
  libmbedtls-dev                           # SHA-256, HMAC, CTR-DRBG
  libmicrohttpd-dev                        # HTTP /v1 server
  libjansson-dev                           # JSON
  libavahi-client-dev                      # mDNS/DNS-SD discovery of the coordinator (optional)
  avahi-daemon avahi-utils dbus iproute2   # its test on a private LAN (tests/cluster_discovery.py)
  libpcre2-dev libutf8proc-dev             # tokenizer regex + unicode
  libcmocka-dev                            # unit tests
  python3 python3-torch python3-numpy python3-jinja2 python3-matplotlib  # reference + trainer
  python3-regex                            # tiktoken tokenizer oracle (&& class intersection)
  python3-jsonschema                       # structured-output checker (tests/json_grammar_check.py)
  dpkg-dev debootstrap man-db              # make deb (dpkg-shlibdeps) and its test (tests/package_deb.py)
  chromium chromium-driver                 # headless browser for the web UI test (tests/webui_test.js)
)
# Node.js: keep whatever provides node+npm already (e.g. a nodesource build that bundles npm).
command -v node >/dev/null 2>&1 || DEBS+=(nodejs)
command -v npm >/dev/null 2>&1 || DEBS+=(npm)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${DEBS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
elif [ "$quiet" = 0 ]; then
  echo "install-deps: Debian packages present"
fi

# npm packages live in tools/node_modules (git-ignored), pinned by tools/package.json.
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/package.json" ]; then
  if [ ! -d "$here/node_modules" ] || [ "$here/package.json" -nt "$here/node_modules" ]; then
    if [ "$quiet" = 0 ]; then
      echo "install-deps: npm packages"
      (cd "$here" && npm install --no-audit --no-fund --loglevel=error && touch node_modules)
    elif ! out="$(cd "$here" && npm install --no-audit --no-fund --loglevel=error 2>&1 &&
                  touch node_modules)"; then
      echo "install-deps: npm install failed:" >&2
      echo "$out" >&2
      exit 1
    fi
  fi
fi
