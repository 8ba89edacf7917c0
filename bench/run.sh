#!/bin/bash
# Runs the GPU benchmark with its peers on the GPU machine and writes the CSVs, the markdown
# table and the plot into DIR (default $OUT). The binaries come from BIN (default build; the
# device runs use a copy of the built programs). Needs nvcc, NPP, python3 with cupy, cv2 and
# matplotlib, all present on the GPU machine.
#   bench/run.sh [DIR]
set -u
dir=${1:-$OUT}
bin=${BIN:-build}
sizes=${SIZES:-1920x1080,3840x2160,8192x8192}
sigmas=${SIGMAS:-0.5,1,2,3,12,40,100}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 |
  sed 's/^/NVIDIA /; s/NVIDIA NVIDIA/NVIDIA/; s/, / (driver /; s/$/)/' > "$dir/device.txt"
"$bin/bench" "$sizes" "$sigmas" 10 > "$dir/blurd.csv"
# the recursive methods in each precision, whatever the sigma
for p in float double; do
  BLURD_GPU_PRECISION=$p "$bin/bench" 8192x8192 2,12,100 10 |
    awk -F, -v p=$p 'NR > 1 && $2 ~ /yvv|deriche/ && $2 !~ /^cpu/ { $2 = $2 "@" p; print }' OFS=,
done | sed '1i size,method,sigma,ms,gpix_s' > "$dir/precision.csv"
nvcc -O2 -o /tmp/npp_peer bench/npp_peer.c -lnppif -lnppc && /tmp/npp_peer "$sizes" 1,3,12,40,100 > "$dir/npp.csv"
python3 bench/peers.py "$sizes" 1,3,12,40,100 > "$dir/peers.csv"
python3 bench/report.py "$dir"
