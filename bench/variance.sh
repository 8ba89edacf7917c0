#!/bin/bash
# The local-variance benchmark on the GPU machine (seed 004's comparison): every method side by
# side on 1920x1080 and 8192x8192 gray 8-bit, triangle window, radii 7 to 127. Writes
# variance.csv (size,method,radius,ms,gpix_s,reps), variance_ratios.txt (the speed-ups, and the
# cases skipped for time) and device.txt into DIR (default $OUT). The binary comes from BIN
# (default build).
#   bench/variance.sh [DIR]
set -u
dir=${1:-$OUT}
bin=${BIN:-build}
sizes=${SIZES:-1920x1080,8192x8192}
radii=${RADII:-7,15,31,63,127}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 > "$dir/device.txt"
date -u +%Y-%m-%d >> "$dir/device.txt"
"$bin/bench" variance "$sizes" "$radii" "${REPS:-10}" > "$dir/variance.csv" 2> "$dir/variance_ratios.txt"
rc=$?
column -s, -t < "$dir/variance.csv" 2>/dev/null || cat "$dir/variance.csv"
cat "$dir/variance_ratios.txt"
exit $rc
