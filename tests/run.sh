#!/bin/sh
# The test runner: runs every test program it is given, one after another, each after a line
# "== NAME", and ends with one summary line, "N passed, N failed" (and the failed ones' names).
# Integration tests (integ_*) and Python tests (*.py, run with $PYTHON and the binary as their
# argument) get the server binary $BLURD_BIN; unit tests run as they are. Exits 1 when one failed.
#   BLURD_BIN=build/blurd sh tests/run.sh build/tests/unit_api build/tests/integ_blur tests/http_strict.py
set -u
PYTHON=${PYTHON:-python3}
passed=0 failed=0 names=""
for t in "$@"; do
  echo "== $t"
  case $t in
  *.py) $PYTHON "$t" "$BLURD_BIN" ;;
  */integ_*) BLURD_BIN=$BLURD_BIN "$t" ;;
  *) "$t" ;;
  esac
  if [ $? -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)) names="$names $(basename "$t")"
  fi
done
echo "$passed passed, $failed failed${names:+:$names}"
[ "$failed" -eq 0 ]
