#!/bin/bash
# The load test (CI runs it after the tests): wrk against the real binary on loopback, uploading
# real photographs of mixed sizes (tests/load/upload.lua).
#  1. below capacity: 64 connections for SECONDS (default 60) with a queue larger than that;
#     every request must succeed, none may time out.
#  2. over capacity: 64 connections for SECONDS/2 against one worker and a queue of 4 with a
#     heavier blur; the excess must get 503 with Retry-After at once, nothing may time out, and
#     the server's memory (VmRSS, sampled every second) must level off.
# Prints RESULT lines with the figures; exits non-zero when a check fails.
#   tests/load/run.sh [SECONDS] [BLURD_BIN] [PATH]   (PATH of the first run, default /blur?sigma=3)
# BLURD_LOAD_ARGS adds flags to blurd; WRK names the wrk binary (default wrk).
set -euo pipefail
secs=${1:-60}
bin=${2:-build/blurd}
path=${3:-/blur?sigma=3}
extra=${BLURD_LOAD_ARGS:-}
cd "$(dirname "$0")/../.."
fail=0

start() { # starts blurd with "$@"; sets pid and url
  "$bin" --bind 127.0.0.1 --port 0 $extra "$@" > /tmp/blurd-load.$$ 2>/tmp/blurd-load-err.$$ &
  pid=$!
  for _ in $(seq 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' /tmp/blurd-load.$$ 2>/dev/null | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  url="http://127.0.0.1:$port"
}

stop() {
  kill -TERM "$pid"
  wait "$pid" || { echo "blurd exited with $?"; fail=1; }
}

field() { # field NAME LINE
  echo "$2" | grep -o "$1=[0-9.]*" | cut -d= -f2
}

rss_sampler() { # writes the max VmRSS (kB) seen in the first and second half into $1
  local first=0 second=0 n=0 half=$(( $2 / 2 ))
  while kill -0 "$pid" 2>/dev/null && [ $n -lt "$2" ]; do
    r=$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
    if [ $n -lt $half ]; then [ "$r" -gt "$first" ] && first=$r; else [ "$r" -gt "$second" ] && second=$r; fi
    n=$((n + 1))
    sleep 1
  done
  echo "$first $second" > "$1"
}

# 1. below capacity
start --queue 256
line=$(${WRK:-wrk} -t2 -c64 -d"${secs}s" --timeout 60s -s tests/load/upload.lua "$url" -- "$path" | grep RESULT)
echo "below capacity: $line"
for k in busy503 other timeouts connect read write; do
  [ "$(field $k "$line")" = 0 ] || { echo "FAIL: $k is not 0"; fail=1; }
done
stop

# 2. over capacity
half=$(( secs / 2 ))
start --workers 1 --queue 4
rss_sampler /tmp/blurd-rss.$$ "$half" &
sampler=$!
line=$(${WRK:-wrk} -t2 -c64 -d"${half}s" --timeout 10s -s tests/load/upload.lua "$url" -- "/blur?sigma=20&method=separable" | grep RESULT)
wait $sampler
read -r rss1 rss2 < /tmp/blurd-rss.$$
echo "over capacity: $line rss_first_half_kb=$rss1 rss_second_half_kb=$rss2"
[ "$(field timeouts "$line")" = 0 ] || { echo "FAIL: timeouts"; fail=1; }
[ "$(field other "$line")" = 0 ] || { echo "FAIL: answers other than 200 and 503"; fail=1; }
[ "$(field busy503 "$line")" -gt 0 ] || { echo "FAIL: no 503 over capacity"; fail=1; }
[ "$(field busy503 "$line")" = "$(field with_retry_after "$line")" ] || { echo "FAIL: a 503 without Retry-After"; fail=1; }
[ "$rss2" -le $(( rss1 * 5 / 4 + 16384 )) ] || { echo "FAIL: memory kept growing"; fail=1; }
stop
rm -f /tmp/blurd-load.$$ /tmp/blurd-load-err.$$ /tmp/blurd-rss.$$
exit $fail
