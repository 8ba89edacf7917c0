#!/bin/sh
# Lints a live /metrics with promtool (Debian's prometheus package), after requests that create
# series of each kind: blurs, a 400, a 404, a 406 (an Accept of a type blurd does not write) and a
# 417 (counted under /blur). Then a real Prometheus scrapes the server: every query of
# docs/operations.md's dashboard must run, and the p99 that histogram_quantile reads from
# blurd_request_duration_seconds must be longer for /blur than for /healthz.
# Run under scripts/with-server.sh, which sets BLURD_URL (make check-metrics does both).
set -eu
: "${BLURD_URL:?run me under scripts/with-server.sh}"
img=tests/data/camera.png
tmp=$(mktemp -d)
prom=""
trap '[ -z "$prom" ] || kill "$prom" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in 1 2 3 4 5; do
  curl -sf -o /dev/null -H 'Content-Type: image/png' --data-binary @$img "$BLURD_URL/blur?sigma=2"
  curl -sf -o /dev/null "$BLURD_URL/healthz"
done
curl -s -o /dev/null -H 'Content-Type: image/png' --data-binary @$img "$BLURD_URL/blur?sigma=-1"
curl -s -o /dev/null "$BLURD_URL/no/such/path"
curl -s -o /dev/null -H 'Accept: image/bmp' -H 'Content-Type: image/png' --data-binary @$img \
  "$BLURD_URL/blur?sigma=2"
curl -s -o /dev/null -H 'Expect: 100-continue-please' -H 'Content-Type: image/png' \
  --data-binary @$img "$BLURD_URL/blur?sigma=2"
curl -sf "$BLURD_URL/metrics" >"$tmp/metrics"
promtool check metrics <"$tmp/metrics"
for name in blurd_requests_total blurd_request_duration_seconds_bucket process_cpu_seconds_total \
  process_resident_memory_bytes process_open_fds process_start_time_seconds; do
  grep -q "^${name}[ {]" "$tmp/metrics" || {
    echo "check-metrics: no $name" >&2
    exit 1
  }
done
grep -q 'blurd_requests_total{route="/blur",algorithm="none",code="406"} 1' "$tmp/metrics"
grep -q 'blurd_requests_total{route="/blur",algorithm="none",code="417"} 1' "$tmp/metrics"
grep -q 'blurd_request_duration_seconds_count{route="/blur",method="POST",code="200"} 5' \
  "$tmp/metrics"
echo "check-metrics: promtool finds no problem in $(wc -l <"$tmp/metrics") lines"

# A real Prometheus, scraping every second.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/prometheus.yml" <<YML
global: {scrape_interval: 1s}
scrape_configs: [{job_name: blurd, static_configs: [{targets: ["${BLURD_URL#http://}"]}]}]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$port" >"$tmp/prometheus.log" 2>&1 &
prom=$!
query() { # the result of PromQL $1 as JSON, or nothing when the query fails
  curl -sf --get --data-urlencode "query=$1" "http://127.0.0.1:$port/api/v1/query" || true
}
p99() { # the p99 of route $1 since the start, from the real scrape
  query "histogram_quantile(0.99, sum by (le) (blurd_request_duration_seconds_bucket{route=\"$1\"}))" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
blur=""
for _ in $(seq 60); do
  sleep 0.5
  blur=$(p99 /blur 2>/dev/null || true)
  [ -n "$blur" ] && break
done
[ -n "$blur" ] || {
  echo "check-metrics: Prometheus scraped nothing:" >&2
  tail -5 "$tmp/prometheus.log" >&2
  exit 1
}
healthz=$(p99 /healthz)
python3 -c "import sys; b, h = float('$blur'), float('$healthz'); sys.exit(not 0 < h < b < 60)" || {
  echo "check-metrics: p99 of /blur $blur s, of /healthz $healthz s: expected 0 < healthz < blur" >&2
  exit 1
}
# every query of the dashboard in docs/operations.md runs
n=0
awk '/^Queries for a dashboard/ { on = 1 } on && /^```/ { if (++fence == 2) exit; next }
  fence == 1 && !/^#/ && NF' docs/operations.md >"$tmp/queries"
while read -r q; do
  query "$q" | grep -q '"status":"success"' || {
    echo "check-metrics: Prometheus refused a dashboard query: $q" >&2
    exit 1
  }
  n=$((n + 1))
done <"$tmp/queries"
[ "$n" -ge 8 ] || {
  echo "check-metrics: found only $n dashboard queries in docs/operations.md" >&2
  exit 1
}
echo "check-metrics: Prometheus scraped blurd: p99 of /blur $(printf '%.3g' "$blur") s, of" \
  "/healthz $(printf '%.3g' "$healthz") s; $n dashboard queries run"
