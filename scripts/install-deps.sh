#!/bin/sh
# Installs the packages that building and testing blurd need: on Debian 12 (CI, the README) and
# on Ubuntu 24.04 (the Dockerfile's build stage), with the Dockerfile linter from npm.
# `--runtime` installs only what build/blurd links, and curl for the container's health check
# (the Dockerfile's runtime stage). Run as root (CI and the Dockerfile do); as another user it
# uses sudo. The same script serves CI, the README and the Dockerfile.
set -eu
# shellcheck disable=SC1091
. /etc/os-release
if [ "$ID" = ubuntu ] && [ "$VERSION_ID" = 24.04 ]; then
  jpeg=libjpeg-turbo8 turbojpeg=libturbojpeg mhd=libmicrohttpd12t64 png=libpng16-16t64
  clang_rt=libclang-rt-18-dev
else # Debian 12
  jpeg=libjpeg62-turbo turbojpeg=libturbojpeg0 mhd=libmicrohttpd12 png=libpng16-16
  clang_rt=libclang-rt-14-dev
fi
if [ "${1:-}" = --runtime ]; then
  pkgs="$mhd libjansson4 $png $turbojpeg $jpeg zlib1g curl"
else
  pkgs="build-essential pkg-config clang-format
    libmicrohttpd-dev libjansson-dev libturbojpeg0-dev $jpeg-dev libpng-dev zlib1g-dev libcurl4-openssl-dev
    python3-skimage python3-yaml gnuplot-nox wrk clang $clang_rt"
  command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $pkgs
if [ "${1:-}" != --runtime ]; then
  $sudo npm install -g --no-audit --no-fund --loglevel=error dockerfile-utils@0.16.3
fi
