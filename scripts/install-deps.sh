#!/bin/sh
# Installs the Debian 12 packages that building and testing blurd need. Run as root (CI does);
# as another user it uses sudo. The same script serves CI, the README and the Dockerfile.
#   sh scripts/install-deps.sh          what building and `make test` need
#   sh scripts/install-deps.sh --web    Chromium for `make test-web` (node and npm must be there)
set -eu
pkgs="build-essential pkg-config clang-format
  libmicrohttpd-dev libjansson-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libcurl4-openssl-dev
  python3-skimage gnuplot-nox wrk clang libclang-rt-14-dev"
if [ "${1:-}" = "--web" ]; then
  pkgs="chromium"
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--web]" >&2
  exit 2
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $pkgs
