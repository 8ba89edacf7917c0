#!/bin/sh
# The test runner: runs every test program it is given, one after another, and prints one line
# for each, "ok   NAME (S s)" or "FAIL NAME (S s)", then one summary line, "N passed, N failed"
# (and the failed ones' names). A test's own output (its cases, its measurements, the server's
# stderr, and the error lines that tests of bad input provoke on purpose) goes to
# $TEST_LOGS/NAME.log (build/test-logs); a failed test's last 80 lines are printed under its line,
# and TEST_VERBOSE=1 prints every test's output as it runs instead.
# Integration tests (integ_*) and Python tests (*.py, run with $PYTHON and the binary as their
# argument) get the server binary $BLURD_BIN; unit tests run as they are. Exits 1 when one failed.
#   BLURD_BIN=build/blurd sh tests/run.sh build/tests/unit_api build/tests/integ_blur tests/http_strict.py
set -u
PYTHON=${PYTHON:-python3}
logs=${TEST_LOGS:-build/test-logs}
mkdir -p "$logs"
passed=0 failed=0 names=""
for t in "$@"; do
  name=$(basename "$t")
  log=$logs/$name.log
  start=$(date +%s)
  case $t in
  *.py) set -- $PYTHON "$t" "$BLURD_BIN" ;;
  */integ_*) set -- env BLURD_BIN="$BLURD_BIN" "$t" ;;
  *) set -- "$t" ;;
  esac
  if [ "${TEST_VERBOSE:-0}" = 1 ]; then
    echo "== $t"
    { "$@" 2>&1; echo $? >"$log.rc"; } | tee "$log"
    rc=$(cat "$log.rc")
    rm -f "$log.rc"
  else
    "$@" >"$log" 2>&1
    rc=$?
  fi
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "ok   $name (${secs} s)"
  else
    failed=$((failed + 1)) names="$names $name"
    echo "FAIL $name (${secs} s, exit $rc; the last 80 lines of $log:)"
    tail -n 80 "$log" | sed 's/^/    /'
  fi
done
echo "$passed passed, $failed failed${names:+:$names}"
[ "$failed" -eq 0 ]
