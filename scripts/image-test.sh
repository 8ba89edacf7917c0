#!/bin/bash
# Builds the container image's CPU flavour with podman and runs it (make image-test, CI). On
# Debian 12, as root: installs podman, runc and debootstrap when they are missing, makes a
# Debian 12 minbase image with debootstrap (once: kept as localhost/debian:bookworm-minbase, its
# root filesystem as a tarball in the cache folder), builds the Dockerfile on it as
# localhost/blurd:cpu, then runs the image as podman run would in production: read-only root
# filesystem, no tmpfs, port 8080 published on a free port. It checks that blurd runs as uid
# 10001, /healthz answers 200, the image's health check passes (podman healthcheck run: podman
# runs health checks from systemd timers, which this machine may lack), a blur of a photograph
# is byte for byte the host binary's ($BLURD_BIN, default build/blurd), and `podman stop -t 10`
# ends the container with status 0 within 1 s; then prints the image's size. Exits non-zero on
# the first check that fails.
#   BLURD_BIN=build/blurd bash scripts/image-test.sh
# Podman's settings are in the cache folder ($IMAGE_TEST_CACHE, default
# /var/cache/blurd-image-test), through CONTAINERS_CONF: runc (crun refuses this machine's cgroup
# layout), open files under the machine's hard limit of 20,000, cgroupfs and a file for the
# events (no systemd). apt's, debootstrap's and podman build's output go to image-test.log
# there; its tail is printed when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BLURD_BIN:-build/blurd}
cache=${IMAGE_TEST_CACHE:-/var/cache/blurd-image-test}
base=localhost/debian:bookworm-minbase
image=localhost/blurd:cpu
photo=tests/data/photo_1080p.jpg
query='blur?sigma=12'

mkdir -p "$cache"
log=$cache/image-test.log
: >"$log"
tmp=$(mktemp -d)
ctr=""
start=$(date +%s)

say() { echo "image-test: $*"; }
fail() {
  echo "image-test: FAIL: $*" >&2
  exit 1
}
# Runs a command with its output in the log; prints the log's tail when it fails.
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    echo "image-test: FAIL: $* (the end of $log:)" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
cleanup() {
  rc=$?
  if [ -n "$ctr" ]; then
    [ "$rc" -eq 0 ] || { echo "image-test: the container's log:" >&2; podman logs "$ctr" >&2 || true; }
    podman rm -f -t 0 "$ctr" >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

[ -x "$bin" ] || fail "$bin is not built (make)"
[ "$(id -u)" -eq 0 ] || fail "run as root (podman build and debootstrap)"

missing=""
for tool in podman:podman runc:runc debootstrap:debootstrap; do
  command -v "${tool%%:*}" >/dev/null || missing="$missing ${tool#*:}"
done
if [ -n "$missing" ]; then
  say "installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update -qq
  # shellcheck disable=SC2086
  quiet apt-get install -y -qq --no-install-recommends $missing
fi

export CONTAINERS_CONF=$cache/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# The Debian mirror this machine's apt uses, for debootstrap and the image's sources.
sources=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
  2>/dev/null | grep -E '^(deb|URIs:)' || true)
mirror=$(grep -oE 'https?://[^ ]+/debian/?( |$)' <<<"$sources" | head -n 1 | tr -d ' ' || true)
security=$(grep -oE 'https?://[^ ]+/debian-security/?( |$)' <<<"$sources" | head -n 1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}
security=${security:-http://deb.debian.org/debian-security}

if podman image exists "$base"; then
  say "base image $base: cached"
else
  rootfs=$cache/bookworm-minbase.tar
  if [ ! -s "$rootfs" ]; then
    say "debootstrap --variant=minbase bookworm from $mirror"
    dir=$cache/rootfs
    rm -rf "$dir"
    quiet debootstrap --variant=minbase bookworm "$dir" "$mirror"
    cat >"$dir/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" -cf "$rootfs.tmp" . && mv "$rootfs.tmp" "$rootfs"
    rm -rf "$dir"
  fi
  say "importing $rootfs as $base"
  quiet podman import "$rootfs" "$base"
fi

say "podman build -t $image (the CPU flavour, on $base)"
t0=$(date +%s)
# --format docker keeps HEALTHCHECK, which the OCI image format has no field for; apt in the
# build uses the host's network.
quiet podman build --format docker --network host \
  --build-arg BUILD_BASE="$base" --build-arg RUN_BASE="$base" -t "$image" .
say "built in $(($(date +%s) - t0)) s"

port=$(free_port)
say "podman run --read-only (no tmpfs), port 8080 published on 127.0.0.1:$port"
# Podman runs the HEALTHCHECK from a systemd timer; without systemd, podman run and stop log
# errors about it (into the log here) and the check below runs it with podman healthcheck run.
ctr=$(podman run -d --read-only --read-only-tmpfs=false -p "127.0.0.1:$port:8080" "$image" 2>>"$log") ||
  { tail -n 20 "$log" >&2; fail "podman run $image"; }
url=http://127.0.0.1:$port
for _ in $(seq 100); do
  curl -sf -o /dev/null "$url/healthz" && break
  [ "$(podman inspect --format '{{.State.Running}}' "$ctr")" = true ] || fail "the container exited"
  sleep 0.1
done
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz" || true)
[ "$code" = 200 ] || fail "/healthz answered $code"
say "/healthz: 200"

pid=$(podman inspect --format '{{.State.Pid}}' "$ctr")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "blurd runs as uid $uid, not 10001"
say "blurd runs as uid $uid (/proc/$pid/status)"

healthy=""
for _ in $(seq 30); do
  if podman healthcheck run "$ctr" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 1
done
[ -n "$healthy" ] || fail "podman healthcheck run $ctr did not pass in 30 s"
say "health check: podman healthcheck run passes, status" \
  "$(podman inspect --format '{{.State.Health.Status}}' "$ctr")"

curl -sf -F "image=@$photo" "$url/$query" -o "$tmp/container.jpg" || fail "POST /$query to the container"
BLURD_BIN=$bin sh scripts/with-server.sh \
  sh -c 'curl -sf -F "image=@$1" "$BLURD_URL/$2" -o "$3"' sh "$photo" "$query" "$tmp/host.jpg" ||
  fail "POST /$query to $bin"
cmp -s "$tmp/container.jpg" "$tmp/host.jpg" ||
  fail "POST /$query of $photo: the container's answer ($(wc -c <"$tmp/container.jpg") bytes)" \
    "differs from $bin's ($(wc -c <"$tmp/host.jpg") bytes)"
say "POST /$query of $photo: the container's $(wc -c <"$tmp/host.jpg") bytes equal $bin's"

t0=$(date +%s%N)
podman stop -t 10 "$ctr" >>"$log" 2>&1 || fail "podman stop -t 10 $ctr"
ms=$((($(date +%s%N) - t0) / 1000000))
status=$(podman inspect --format '{{.State.ExitCode}}' "$ctr")
[ "$status" = 0 ] || fail "podman stop -t 10: the container exited with status $status"
[ "$ms" -lt 1000 ] || fail "podman stop -t 10 took $ms ms (1 s at most)"
say "podman stop -t 10: status 0 in $ms ms"

size=$(podman image inspect --format '{{.Size}}' "$image")
# the images of earlier runs that this build replaced (and their build stages) would pile up on
# a machine that keeps its storage: keep this run's, which the next build reuses as its cache
podman image prune -f --filter "until=$(date -u -d "@$start" +%Y-%m-%dT%H:%M:%SZ)" >>"$log" 2>&1 ||
  true
say "$image: $((size / 1000000)) MB; passed in $(($(date +%s) - start)) s"
