#!/bin/sh
# Lints a live /metrics with promtool (Debian's prometheus package), after requests that create
# series of each kind: a blur, a 400, a 404 and a 406 (an Accept of a type blurd does not write).
# Run under scripts/with-server.sh, which sets BLURD_URL (make check-metrics does both).
set -eu
: "${BLURD_URL:?run me under scripts/with-server.sh}"
img=tests/data/camera.png
curl -sf -o /dev/null -H 'Content-Type: image/png' --data-binary @$img "$BLURD_URL/blur?sigma=2"
curl -s -o /dev/null -H 'Content-Type: image/png' --data-binary @$img "$BLURD_URL/blur?sigma=-1"
curl -s -o /dev/null "$BLURD_URL/no/such/path"
curl -s -o /dev/null -H 'Accept: image/bmp' -H 'Content-Type: image/png' --data-binary @$img \
  "$BLURD_URL/blur?sigma=2"
curl -sf "$BLURD_URL/metrics" >/tmp/blurd-metrics.$$
trap 'rm -f /tmp/blurd-metrics.$$' EXIT
promtool check metrics </tmp/blurd-metrics.$$
for name in blurd_requests_total process_cpu_seconds_total process_resident_memory_bytes \
  process_open_fds process_start_time_seconds; do
  grep -q "^$name[ {]" /tmp/blurd-metrics.$$ || {
    echo "check-metrics: no $name" >&2
    exit 1
  }
done
grep -q 'blurd_requests_total{route="/blur",algorithm="none",code="406"} 1' /tmp/blurd-metrics.$$
echo "check-metrics: promtool finds no problem in $(wc -l </tmp/blurd-metrics.$$) lines"
