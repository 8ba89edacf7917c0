#!/bin/bash
# On the GPU machine: where the JPEG path is bound, by image size. One blurd (GPU backend, GPU
# codecs, --queue 1024 --max-pixels 70M --max-conns-per-ip 1024 --access-log off), ready and
# warmed by 5 s of 1080p; then for 256x256, 1920x1080 (tests/data/photo_1080p.jpg), 4032x3024
# (12 MP) and 6000x4000 (24 MP) JPEGs (the others made from the 1080p photograph with Pillow,
# LANCZOS, quality 90, 4:2:0), 3 s of each size unmeasured (the workers' buffers grow to it: that
# is a first-use cost, not the size's), then `/blur?sigma=12` with and without the PSNR under wrk (CONNS, default
# 64, connections for SECONDS): req/s, p99, blurd's CPU ms a request, the SMs' and the JPEG
# engines' mean utilisation (nvidia-smi dmon, through bench/lib.sh's wrk_run), and the decode
# batches the run made (/metrics' blurd_jpeg_decode_batch_size: their mean size, the share of one
# image and of eight or fewer). Last, torchvision's in-process decode and decode + encode of the
# 1080p and 12 MP files in batches of 64 (bench/nvjpeg_peer.py). Writes OUTDIR/jpeg_bound.md.
#   bench/jpeg_bound.sh [SECONDS] [BIN] [OUTDIR]      (defaults 10, build, docs)
# SIZES picks the sizes (default "256 1080p 12mp 24mp"); BLURD_ARGS adds server options (e.g.
# "--jpeg-batch-wait-us 3000"), named in the report; PEER_SIZES the peer's sizes (default "1080p
# 12mp"; empty: no peer).
# Needs python3 with Pillow (torch and torchvision for the peer), wrk (WRK) and nvidia-smi.
set -euo pipefail
secs=${1:-10}
bin=${2:-build}
outdir=${3:-docs}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
python3 -c "
from PIL import Image
src = Image.open('tests/data/photo_1080p.jpg').convert('RGB')
for name, size in (('256', (256, 256)), ('12mp', (4032, 3024)), ('24mp', (6000, 4000))):
    src.resize(size, Image.LANCZOS).save('$tmp/' + name + '.jpg', quality=90, subsampling=2)"
cp tests/data/photo_1080p.jpg "$tmp/1080p.jpg"

# batches PORT: the JPEG decode batch histogram of /metrics, summed over devices: "n ones le8 images"
batches() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '
    /^blurd_jpeg_decode_batch_size_bucket/ && /le="1"/ { ones += $NF }
    /^blurd_jpeg_decode_batch_size_bucket/ && /le="8"/ { le8 += $NF }
    /^blurd_jpeg_decode_batch_size_count/ { n += $NF }
    /^blurd_jpeg_decode_batch_size_sum/ { img += $NF }
    END { printf "%d %d %d %d\n", n, ones, le8, img }'
}

# shellcheck disable=SC2086 # BLURD_ARGS is a list of options
blurd_start "$tmp/out" "$tmp/err" "$bin/blurd" --bind 127.0.0.1 --port 0 --queue 1024 \
  --max-pixels 70M --max-conns-per-ip 1024 --access-log off ${BLURD_ARGS:-}
blurd_ready 120 || { cat "$tmp/err" >&2; exit 1; }
codecs=$(curl -s "http://127.0.0.1:$port/readyz" | grep -o '"jpeg_decode": *"[^"]*"' | cut -d'"' -f4 || true)
BLURD_LOAD_FILE=$tmp/1080p.jpg wrk_run 5 "/blur?sigma=12" >/dev/null
rows=()
for size in ${SIZES:-256 1080p 12mp 24mp}; do
  # the workers' buffers grow to this size first, outside the measured runs
  BLURD_LOAD_FILE=$tmp/$size.jpg wrk_run 3 "/blur?sigma=12" >/dev/null
  for path in "/blur?sigma=12" "/blur?sigma=12&psnr=false"; do
    read -r n0 o0 e0 i0 < <(batches "$port")
    line=$(BLURD_LOAD_FILE=$tmp/$size.jpg wrk_run "$secs" "$path")
    read -r n1 o1 e1 i1 < <(batches "$port")
    echo "$size $path: $line"
    get() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$line"; }
    b=$(awk -v n=$((n1 - n0)) -v o=$((o1 - o0)) -v e=$((e1 - e0)) -v i=$((i1 - i0)) 'BEGIN {
      if (n > 0) printf "%.1f | %.0f%% | %.0f%%", i / n, 100 * o / n, 100 * e / n; else printf "- | - | -" }')
    rows+=("| $size | \`$path\` | $(get rps) | $(get p99_ms) | $(get cpu_ms_per_request) | $(get sm_pct) | $(get jpg_pct) | $b |")
    python3 bench/codecs_table.py idle "$port" 20 >/dev/null || true
  done
done
kill -TERM "$pid"
wait "$pid" || true
pid=
grep "JPEG" "$tmp/err" || true # the server's lines on its JPEG decoders
peer=()
for size in ${PEER_SIZES-1080p 12mp}; do
  while IFS= read -r l; do peer+=("- $size: ${l//$tmp\//}"); done < <(python3 bench/nvjpeg_peer.py "$tmp/$size.jpg" 2>&1 |
    grep -E "batch 64|skipped|failed|torchvision" || true)
done
mkdir -p "$outdir"
{
  echo "# Where the JPEG path is bound, by image size"
  echo
  echo "$(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores;" \
    "blurd's JPEG decoder: ${codecs:-?}${BLURD_ARGS:+, blurd $BLURD_ARGS}. Command:" \
    "\`WRK=... bench/jpeg_bound.sh $secs $bin $outdir\`" \
    "(wrk ${CONNS:-64} connections, $secs s a case)."
  echo
  echo "| size | request | req/s | p99 ms | CPU ms a request | SMs % | JPEG engines % | decode batch: mean | of one | of 8 or fewer |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "torchvision in-process, batches of 64 (bench/nvjpeg_peer.py):"
  echo
  printf '%s\n' "${peer[@]}"
} >"$outdir/jpeg_bound.md"
cat "$outdir/jpeg_bound.md"
