#!/bin/bash
# On the GPU machine: every image operation on the GPU backend with the GPU codecs, one blurd
# (--queue 1024 --max-conns-per-ip 1024 --access-log off), ready and warmed by 5 s of /blur, then
# wrk (CONNS connections, default 64) for SECONDS per case, uploading tests/data/photo_1080p.jpg
# (a 1080p PNG of it for the PNG-upload case, made with Pillow in a temporary folder). Cases:
#   /blur?sigma=12 (the baseline), /sharpen?sigma=2&amount=1, /contrast, /convolve?kernel=sharpen,
#   /pixelate?block=16, /blur with 4 regions, /blur with sigma_x and sigma_y, /convert,
#   /variance?radius=7 (16-bit PNG), /variance?radius=7&format=raw, /blur?sigma=12&format=png,
#   /blur?sigma=12&format=webp, and /blur?sigma=12 with the 1080p PNG upload.
# Prints one line per case (req/s, p50, p99, non-200 answers, blurd's CPU ms per request) and its
# req/s over the baseline's, as a markdown table on stdout and in OUTDIR/gpu_ops.md.
# WRK: the wrk binary (default wrk); PYTHON: a python3 with Pillow; CODECS: --gpu-codecs (default on).
#   bench/gpu_ops.sh [SECONDS] [BIN] [OUTDIR]      (defaults 10, build, .)
set -euo pipefail
secs=${1:-10}
bin=${2:-build}
outdir=${3:-.}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
"${PYTHON:-python3}" -c "from PIL import Image; Image.open('tests/data/photo_1080p.jpg').save('$tmp/photo_1080p.png')"
blurd_start "$tmp/out" "$tmp/err" "$bin/blurd" --bind 127.0.0.1 --port 0 --queue 1024 \
  --max-conns-per-ip 1024 --access-log off --gpu-codecs "${CODECS:-on}" ||
  { echo "blurd did not start: $(cat "$tmp/err")" >&2; exit 1; }
blurd_ready 60 || { echo "blurd not ready: $(cat "$tmp/err")" >&2; exit 1; }
export BLURD_LOAD_FILE=tests/data/photo_1080p.jpg
wrk_run 5 "/blur?sigma=12" >/dev/null
regions='/blur?sigma=12&regions=100,100,300,200;700,100,300,200;100,600,300,200;700,600,300,200'
cases=("/blur?sigma=12" "/sharpen?sigma=2&amount=1" "/contrast" "/convolve?kernel=sharpen"
  "/pixelate?block=16" "$regions" "/blur?sigma_x=12&sigma_y=4" "/convert"
  "/variance?radius=7" "/variance?radius=7&format=raw" "/blur?sigma=12&format=png"
  "/blur?sigma=12&format=webp" "png:/blur?sigma=12")
field() { echo "$1" | grep -o "$2=[^ ]*" | cut -d= -f2; }
md="$outdir/gpu_ops.md"
{
  echo "# bench/gpu_ops.sh $secs on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
  echo
  echo "| case | req/s | p50 ms | p99 ms | non-200 | CPU ms/req | of /blur |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
} >"$md"
base=
for c in "${cases[@]}"; do
  path=$c
  BLURD_LOAD_FILE=tests/data/photo_1080p.jpg
  if [ "${c#png:}" != "$c" ]; then path=${c#png:}; BLURD_LOAD_FILE=$tmp/photo_1080p.png; fi
  export BLURD_LOAD_FILE
  line=$(wrk_run "$secs" "$path")
  rps=$(field "$line" rps)
  [ -n "$base" ] || base=$rps
  printf '| `%s` | %s | %s | %s | %s | %s | %.2f |\n' "$c" "$rps" "$(field "$line" p50_ms)" \
    "$(field "$line" p99_ms)" "$(($(field "$line" busy503) + $(field "$line" other)))" "$(field "$line" cpu_ms_per_request)" \
    "$(awk -v a="$rps" -v b="$base" 'BEGIN { print a / b }')" >>"$md"
done
kill -TERM "$pid"
wait "$pid" || true
pid=
cat "$md"
