#!/bin/bash
# On the GPU machine: blurd's GPU codecs (nvJPEG, --gpu-codecs on) against its CPU codecs
# (libjpeg-turbo and libpng, --gpu-codecs off), the filter on the GPU in both. For each mode, one
# blurd (--queue 1024 --max-pixels 70M --max-conns-per-ip 1024 --access-log off; the 8K image has
# 67 Mpix, over the default limit; wrk's 64 connections come from one address), ready and warmed
# by 5 s of the first case, then wrk with 64 connections for SECONDS per case, uploading
# (tests/load/upload.lua):
#   1080p JPEG /blur?sigma=12, the same with psnr=false, 1080p JPEG /convert, 4K JPEG /blur?sigma=12,
#   8K JPEG /blur?sigma=12, 1080p PNG /blur?sigma=12
# (the 4K 3840x2160 and 8K 8192x8192 JPEGs and the PNG are made from tests/data/photo_1080p.jpg
# with Pillow in a temporary folder), recording req/s, p50, p99, non-200 answers and blurd's CPU
# time per request; then, with mode on, the mean JPEG decode batch size from /metrics; then 20
# sequential requests (after 3 warm-ups) of the 1080p JPEG to /blur?sigma=12 for the median
# Server-Timing total and the codec names. A mode whose blurd does not start (on without a GPU or
# nvJPEG) is reported unavailable. Then the start and stop times with the GPU codecs
# (tests/stress/startup.py: port and ready after a start, a SIGTERM during the warm-up, each
# worker's first requests against the next), and the PSNR's cost (1080p /blur?sigma=12 with the
# PSNR over without it, mode on). Last, the torchvision peer (bench/nvjpeg_peer.py), and where
# HEIC_DIR names a folder made by `bench/heic_gpu.sh --make`, the HEIC and AVIF rows: HEIC on the
# video decoders against the CPU's (bench/heic_gpu.sh, OUTDIR/heic_gpu.md).
# Output: OUTDIR/gpu_codecs.md (header, table, on/off ratios, single-request medians, batch size,
# torchvision lines, PASS/FAIL targets for 1080p JPEG /blur?sigma=12) and OUTDIR/gpu_codecs.csv
# (the table); progress and the markdown on stdout. Exits 0 once they are written, whatever the
# targets say. About 12 x SECONDS plus a minute or two (under 9 minutes at 20).
# Run from the repository root. Needs python3 with Pillow (torch and torchvision for the peer) and
# wrk. WRK: the wrk binary (default wrk).
#   bench/gpu_codecs.sh [SECONDS] [BIN] [OUTDIR]      (defaults 20, build, docs)
set -euo pipefail
secs=${1:-20}
bin=${2:-build}
outdir=${3:-docs}
command="WRK=${WRK:-wrk} bench/gpu_codecs.sh $secs $bin $outdir"
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
mkdir -p "$outdir"
raw=$tmp/raw.tsv # one result a line, tab-separated, for codecs_table.py report
: >"$raw"

python3 bench/codecs_table.py images "$tmp"
labels=("1080p JPEG" "1080p JPEG" "1080p JPEG" "4K JPEG" "8K JPEG" "1080p PNG")
p1080=tests/data/photo_1080p.jpg
files=("$p1080" "$p1080" "$p1080" "$tmp/photo_4k.jpg" "$tmp/photo_8k.jpg" "$tmp/photo_1080p.png")
paths=("/blur?sigma=12" "/blur?sigma=12&psnr=false" "/convert" "/blur?sigma=12" "/blur?sigma=12"
       "/blur?sigma=12")

for mode in on off; do
  if ! blurd_start "$tmp/$mode.out" "$tmp/$mode.err" "$bin/blurd" --bind 127.0.0.1 --port 0 \
      --queue 1024 --max-pixels 70M --max-conns-per-ip 1024 --gpu-codecs "$mode" --access-log off; then
    why=$(tr '\n' ' ' <"$tmp/$mode.err" | sed 's/ *$//')
    printf 'unavailable\t%s\tblurd did not start: %s\n' "$mode" "${why:-no message}" >>"$raw"
    echo "mode $mode: unavailable: ${why:-blurd did not start}"
    pid=
    continue
  fi
  echo "mode $mode: $(cat "$tmp/$mode.out")"
  # steady state: the workers warm, then 5 s of the first case, not counted (the first seconds
  # after a start ran at half speed in both modes, 2026-11-23)
  blurd_ready 120 || echo "mode $mode: not ready after 120 s"
  BLURD_LOAD_FILE=${files[0]} wrk_run 5 "${paths[0]}" >/dev/null
  for i in "${!paths[@]}"; do
    name="${labels[$i]} ${paths[$i]}"
    res=$(BLURD_LOAD_FILE=${files[$i]} wrk_run "$secs" "${paths[$i]}")
    printf 'load\t%s\t%s\t%s\n' "$mode" "$name" "$res" >>"$raw"
    echo "  $name: $res"
    # let the queue drain (at most 20 s) so that one case's backlog is not counted in the next
    idle=$(python3 bench/codecs_table.py idle "$port" 20) || idle="waited_s=? idle=0"
    printf 'idle\t%s\t%s\t%s\n' "$mode" "$name" "$idle" >>"$raw"
  done
  if [ "$mode" = on ]; then
    b=$(python3 bench/codecs_table.py batch "$port") || b="present=0"
    printf 'batch\ton\t%s\n' "$b" >>"$raw"
    echo "  decode batches: $b"
  fi
  if s=$(python3 bench/codecs_table.py single "$port" tests/data/photo_1080p.jpg "/blur?sigma=12"); then
    printf 'single\t%s\t%s\n' "$mode" "$s" >>"$raw"
  else
    s=failed
    printf 'note\t%s\tthe single-request run failed\n' "$mode" >>"$raw"
  fi
  echo "  one at a time: $s"
  kill -TERM "$pid"
  wait "$pid" || printf 'note\t%s\tblurd exited with %s\n' "$mode" "$?" >>"$raw"
  pid=
done

echo "start and stop ..."
python3 tests/stress/startup.py --bin "$bin/blurd" --runs 3 --sigterm 0.05,0.5,1,2 --first 4 --rounds-for 2 \
  --log "$tmp/startup.log" -- --gpu-codecs on >"$tmp/startup.txt" 2>&1 || true
cat "$tmp/startup.txt"
while IFS= read -r line; do printf 'startup\t%s\n' "$line" >>"$raw"; done <"$tmp/startup.txt"

echo "torchvision peer ..."
python3 bench/nvjpeg_peer.py tests/data/photo_1080p.jpg >"$tmp/peer.txt" 2>"$tmp/peer.err" ||
  { echo "nvjpeg_peer.py failed:"; tail -n 3 "$tmp/peer.err"; } >>"$tmp/peer.txt"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, - | sed 's/,/, /g' || true)
machine="${gpus:-no GPU (nvidia-smi lists none)}, $(nproc) cores"
python3 bench/codecs_table.py report "$raw" "$tmp/peer.txt" "$outdir" "$(date -u +%F)" \
  "$machine" "$command" "$secs"
cat "$outdir/gpu_codecs.md"
if [ -n "${HEIC_DIR:-}" ]; then
  bash bench/heic_gpu.sh "$HEIC_DIR" "$secs" "$bin" "$outdir"
fi
