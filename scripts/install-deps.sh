#!/bin/sh
# Installs the packages that building and testing blurd need: on Debian 12 (CI, the README) and
# on Ubuntu 24.04 (the Dockerfile's build stage). Run as root (CI and the Dockerfile do); as
# another user it uses sudo. The same script serves CI, the README and the Dockerfile.
#   sh scripts/install-deps.sh            what building and `make test` need (avifdec from
#                                         libavif-bin checks blurd's AVIF files), and curl and jq
#                                         for the README's examples
#   sh scripts/install-deps.sh --runtime  only what build/blurd links, and curl for the
#                                         container's health check (the Dockerfile's runtime stage)
#   sh scripts/install-deps.sh --web      Chromium for `make test-web`, and Debian's Node.js and
#                                         npm when node or npm is missing (Debian 12: Node.js 18)
#   sh scripts/install-deps.sh --ci       --web's, and promtool (Debian's prometheus package) for
#                                         `make check-metrics`: what .ci/run's checks need
# `make test-web`, `make check-deploy` and `make check-openapi` install their npm packages
# themselves, pinned by the lock files in tests/web/, tests/deploy/ and tests/openapi/.
set -eu
# shellcheck disable=SC1091
. /etc/os-release
if [ "$ID" = ubuntu ] && [ "$VERSION_ID" = 24.04 ]; then
  jpeg=libjpeg-turbo8 turbojpeg=libturbojpeg png=libpng16-16t64
  clang_rt=libclang-rt-18-dev
  formats="libheif1 libde265-0 libdav1d7 libavif16 libjxl0.7 libtiff6 libgif7"
  nvdec=""
else # Debian 12
  jpeg=libjpeg62-turbo turbojpeg=libturbojpeg0 png=libpng16-16
  clang_rt=libclang-rt-14-dev
  formats="libheif1 libde265-0 libdav1d6 libavif15 libjxl0.7 libtiff6 libgif7"
  nvdec="libffmpeg-nvenc-dev" # the video decoders' headers, for tests/gpu_nvdec.c
fi
case "${1:-}" in
"")
  pkgs="build-essential pkg-config clang-format
    libjansson-dev libturbojpeg0-dev $jpeg-dev libpng-dev libwebp-dev zlib1g-dev
    libdeflate-dev libspng-dev liblcms2-dev python3-pil python3-numpy libvips-tools libgs-common
    libcurl4-openssl-dev
    libheif-dev libde265-dev libdav1d-dev libavif-dev libjxl-dev libtiff-dev libgif-dev
    libavif-bin $nvdec
    python3-skimage python3-yaml python3-h11 gnuplot-nox wrk clang $clang_rt
    curl jq"
  ;;
--runtime) pkgs="libjansson4 $png $turbojpeg $jpeg libwebp7 libwebpmux3 zlib1g libdeflate0
  libspng0 liblcms2-2 $formats curl" ;;
--web | --ci)
  pkgs="chromium"
  command -v node >/dev/null && command -v npm >/dev/null || pkgs="$pkgs nodejs npm"
  [ "$1" = --web ] || pkgs="$pkgs prometheus"
  ;;
*)
  echo "usage: $0 [--runtime | --web | --ci]" >&2
  exit 2
  ;;
esac
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# apt's own output (about a thousand lines on a fresh machine) goes to a log, printed on failure
log=$(mktemp /tmp/install-deps.XXXXXX.log)
step() { # step WHAT COMMAND...: one line, then the command with its output in the log
  what=$1
  shift
  echo "install-deps: $what"
  "$@" >>"$log" 2>&1 || {
    echo "install-deps: $what failed; the last 40 lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  }
}
step "apt-get update" $sudo apt-get update -q
# shellcheck disable=SC2086
set -- $pkgs
step "installing $# packages and what they need" \
  $sudo apt-get install -y -q --no-install-recommends "$@"
echo "install-deps: done (apt's output: $log)"
