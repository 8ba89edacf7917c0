#!/bin/bash
# Builds the eleven libFuzzer targets into build/fuzz/ with clang (ASan + UBSan), then runs each for
# SECONDS (default 60) on a scratch copy of its seed corpus and regressions, so that runs never
# grow the committed corpus. Prints each target's executions and any crash; exits non-zero when a
# target crashed, timed out, ran out of memory or leaked, leaving the input that did it in
# build/fuzz/ (build/fuzz/<target>-crash-<sha1>, ...) and the log in build/fuzz/<target>.log.
#   bash fuzz/run.sh [SECONDS]             from the repository root or anywhere
#   FUZZ_TARGETS="png jpeg" bash fuzz/run.sh 600   only some targets
#   FUZZ_OUT=/tmp/fuzz bash fuzz/run.sh           build and run elsewhere than build/fuzz
# See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${1:-60}
TARGETS=${FUZZ_TARGETS:-png jpeg webp heif jxl tiff gif multipart params handler framing}
CC=${FUZZ_CC:-clang}
OUT=${FUZZ_OUT:-build/fuzz}
PKGS="libpng libturbojpeg jansson libwebp libwebpmux libdeflate spng lcms2 libheif libde265 dav1d
      libavif libjxl libjxl_threads libtiff-4"
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -D_GNU_SOURCE
        -std=c11 -pthread $(pkg-config --cflags $PKGS)"
LIBS="$(pkg-config --libs libpng libturbojpeg jansson libwebp libwebpmux libdeflate lcms2 libheif libde265 dav1d libavif libjxl libjxl_threads libtiff-4) -lgif -ljpeg -lz -lm -pthread"

# ---- build: the project's sources once, then one binary per target ----
rm -rf "$OUT/obj" && mkdir -p "$OUT/obj" # no objects of files since removed
echo "== building the fuzz targets in $OUT/ with $CC"
for src in base/*.c codecs/*.c formats/*.c cpu/*.c engine/*.c http/*.c api/*.c api/ops/*.c; do
  obj="$OUT/obj/${src//\//_}"
  # shellcheck disable=SC2086 # CFLAGS is a list of flags
  $CC $CFLAGS -c "$src" -o "${obj%.c}.o" &
done
# the demo page's files, embedded as the Makefile does (api/web.c serves them)
sh scripts/embed-web.sh "$OUT/obj/web_assets.c" web/*
# shellcheck disable=SC2086
$CC $CFLAGS -Iapi -c "$OUT/obj/web_assets.c" -o "$OUT/obj/api_web_assets.o" &
for pid in $(jobs -p); do wait "$pid"; done # set -e stops here if one failed
for t in $TARGETS; do
  objs=("$OUT"/obj/codecs_*.o "$OUT"/obj/formats_*.o "$OUT"/obj/base_*.o)
  case $t in
  multipart | params | handler | framing)
    objs+=("$OUT"/obj/cpu_*.o "$OUT"/obj/engine_*.o "$OUT"/obj/http_*.o "$OUT"/obj/api_*.o) ;;
  esac
  # shellcheck disable=SC2086
  $CC $CFLAGS "fuzz/$t.c" "${objs[@]}" $LIBS -o "$OUT/$t"
done

# ---- run ----
failed=0
for t in $TARGETS; do
  work="$OUT/work/$t"
  rm -rf "$work" "$OUT/$t"-crash-* "$OUT/$t"-timeout-* "$OUT/$t"-oom-* "$OUT/$t"-leak-*
  mkdir -p "$work"
  find "fuzz/corpus/$t" "fuzz/regressions/$t" -maxdepth 1 -type f ! -name '.*' \
    -exec cp {} "$work"/ \; 2>/dev/null || true
  dict=()
  if [ -f "fuzz/dict/$t.dict" ]; then dict=("-dict=fuzz/dict/$t.dict"); fi
  echo "== $t: ${SECONDS_EACH}s on $(find "$work" -type f | wc -l) seeds"
  rc=0
  # The outer timeout only fires if libFuzzer itself hangs (e.g. its leak check deadlocked
  # under a memory blow-up): a run must never stall CI. Status 124 or 137 then says so.
  timeout -k 10 $((SECONDS_EACH + 120)) \
    "$OUT/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$OUT/$t-" "${dict[@]}" "$work" \
    >"$OUT/$t.log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$t.log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$OUT/$t.log" | tail -n 1 || true)
  echo "   ${execs:-?} executions, ${cov:-cov: ?}, exit status $rc"
  if [ "$rc" -ne 0 ]; then
    failed=1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "   libFuzzer hung and was killed"; fi
    grep -E '^==[0-9]+==ERROR|^SUMMARY|fuzz check failed|ERROR: libFuzzer|runtime error' \
      "$OUT/$t.log" | head -n 5 | sed 's/^/   /' || true
    for input in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$OUT/$t.log"); do
      echo "   input: $input"
      for r in "fuzz/regressions/$t"/*; do # a known bug, not yet fixed?
        if [ -f "$r" ] && cmp -s "$r" "$input"; then echo "   (the same bytes as $r)"; fi
      done
    done
    echo "   log: $OUT/$t.log"
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "== FAILED: a target crashed; minimise with build/fuzz/<target> -minimize_crash=1" \
    "-runs=10000 <input>, then add it to fuzz/regressions/<target>/"
  exit 1
fi
echo "== all targets ran ${SECONDS_EACH}s each without a crash"
