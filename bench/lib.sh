# shellcheck shell=bash
# Shell functions shared by the benchmarks that start blurd (bench/gpu_load.sh, bench/regions.sh,
# bench/gpu_codecs.sh, bench/cpu_vips.sh, bench/cpu_codecs.sh); source it from the repository root:
#   . bench/lib.sh
#   bench_setup                                                   tmp, pid and their cleanup
#   blurd_start OUT ERR BIN/blurd --bind 127.0.0.1 --port 0 ...   sets pid and port
#   blurd_ready [SECONDS]                                         waits for /readyz
#   wrk_run SECONDS PATH                                          prints RESULT ... cpu_ms_per_request=
# WRK: the wrk binary (default wrk).

# bench_setup: checks that wrk (WRK) runs, makes the temporary folder tmp and sets pid empty; at exit
# the blurd at pid (once blurd_start set it) is killed and tmp removed.
bench_setup() {
  command -v "${WRK:-wrk}" >/dev/null || { echo "wrk not found: set WRK" >&2; exit 1; }
  tmp=$(mktemp -d)
  pid=
  trap 'if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT
}

# blurd_start OUT ERR COMMAND...: starts blurd (COMMAND, listening on 127.0.0.1 with --port 0) in
# the background, its stdout in OUT and stderr in ERR; sets pid, and port from the "listening on"
# line. Returns 1 when blurd exits first, or prints no port within 10 s (then it is killed).
blurd_start() {
  local out=$1 err=$2
  shift 2
  "$@" >"$out" 2>"$err" &
  pid=$!
  port=
  for _ in $(seq 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$out" 2>/dev/null | cut -d: -f2 || true)
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; return 1; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" || true
  return 1
}

# blurd_ready [SECONDS]: waits until blurd at port answers /readyz with 200 (its workers warm), at
# most SECONDS (default 120). Returns 1 when it does not.
blurd_ready() {
  for _ in $(seq $((${1:-120} * 5))); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# blurd's CPU seconds (user + system) so far
cpu_s() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$pid/stat"; }

# wrk_run SECONDS PATH: one wrk run, 4 threads and CONNS connections (default 64) for SECONDS, uploading
# (tests/load/upload.lua; BLURD_LOAD_FILE picks the file) to PATH on blurd at port; prints its
# RESULT line with blurd's CPU milliseconds per request added (cpu_ms_per_request, nan when no
# request completed) and, where nvidia-smi runs, the GPUs' mean utilisation over the run from
# `nvidia-smi dmon -s u` once a second: sm_pct (the SMs), jpg_pct (the JPEG engines) and dec_pct
# (the video decoders).
wrk_run() {
  local c0 line dm="" util="" log
  c0=$(cpu_s)
  log=$(mktemp)
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi dmon -s u -d 1 >"$log" 2>/dev/null &
    dm=$!
  fi
  line=$("${WRK:-wrk}" -t4 -c"${CONNS:-64}" -d"$1s" --timeout 30s -s tests/load/upload.lua "http://127.0.0.1:$port" -- "$2" | grep RESULT)
  if [ -n "$dm" ]; then
    kill "$dm" 2>/dev/null || true
    wait "$dm" 2>/dev/null || true
    util=$(awk '/^# *gpu/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
      !/^#/ && col["sm"] && NF > 2 { sm += $col["sm"]; jpg += (col["jpg"] ? $col["jpg"] : 0)
        dec += (col["dec"] ? $col["dec"] : 0); n++ }
      END { if (n) printf " sm_pct=%.0f jpg_pct=%.0f dec_pct=%.0f", sm / n, jpg / n, dec / n }' "$log")
  fi
  rm -f "$log"
  echo "$line$util cpu_ms_per_request=$(awk -v a="$c0" -v b="$(cpu_s)" -v l="$line" 'BEGIN {
    n = match(l, /requests=[0-9]+/) ? substr(l, RSTART + 9, RLENGTH - 9) + 0 : 0
    if (n > 0) printf "%.2f", 1000 * (b - a) / n; else printf "nan" }')"
}
