#!/bin/sh
# Runs a command against a live blurd, for the checks that need one (make check-metrics, make
# check-readme): starts $BLURD_BIN (build/blurd) on 127.0.0.1, port $BLURD_PORT (0: a free one),
# with $BLURD_FLAGS, waits until /healthz answers, runs "$@" with BLURD_URL set to the server's
# base URL, then stops the server with SIGTERM. Exits with the command's status, or 1 when the
# server does not start or does not stop cleanly. Its log is printed when something fails.
#   sh scripts/with-server.sh sh -c 'curl -s "$BLURD_URL/healthz"'
set -u
bin=${BLURD_BIN:-build/blurd}
log=$(mktemp)
# shellcheck disable=SC2086
"$bin" --bind 127.0.0.1 --port "${BLURD_PORT:-0}" --access-log off ${BLURD_FLAGS:-} >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|^blurd listening on http://[^:]*:\([0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ] || ! curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then
  echo "with-server: $bin did not start:" >&2
  cat "$log" >&2
  exit 1
fi
BLURD_URL="http://127.0.0.1:$port" "$@"
rc=$?
kill -TERM "$pid"
wait "$pid" || { echo "with-server: $bin did not stop cleanly:" >&2; cat "$log" >&2; rc=1; }
[ "$rc" -eq 0 ] || cat "$log" >&2
exit "$rc"
