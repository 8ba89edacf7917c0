#!/bin/bash
# On the GPU machine: HEIC decoded on the GPU's video decoders (--heic-decoders 14, the default)
# against the CPU's decoders (--heic-decoders 0), with AVIF (always the CPU's, dav1d) beside them.
#   bench/heic_gpu.sh --make DIR                  makes DIR/12mp.heic, 1080p.heic, 12mp.avif and
#                                                 1080p.avif (heif-enc, avifenc, python3 with
#                                                 Pillow and numpy; the 12 MP file as
#                                                 bench/heic_load.sh makes it: 48 tiles of 512x512)
#   bench/heic_gpu.sh DIR [SECONDS] [BIN] [OUTDIR]   (defaults 15, build, docs)
# For each mode one blurd (--queue 1024 --max-conns-per-ip 1024 --access-log off), ready, each file
# uploaded for 3 s unmeasured, then wrk (CONNS, default 32, connections for SECONDS) uploading each
# file to /blur?sigma=12&format=jpeg (HEIC answers JPEG by default; AVIF would answer AVIF, and
# its encoder be what is measured): req/s, p50, p99, non-200 answers, blurd's CPU ms per request
# and the SMs' and video decoders' mean utilisation; then one request of each file for
# Server-Timing's decoder. Writes OUTDIR/heic_gpu.md: the table, and for each file the video
# decoders' rate and CPU per request as ratios of the CPU decoders'. WRK: the wrk binary. Run from
# the repository root.
set -euo pipefail
if [ "${1:-}" = --make ]; then
  dir=$2
  mkdir -p "$dir"
  bash bench/heic_load.sh --make "$dir/12mp.heic"
  "${PYTHON:-/usr/bin/python3}" -c "
import numpy as np
from PIL import Image
a = np.asarray(Image.open('tests/data/photo_1080p.jpg'))
Image.fromarray(a).save('$dir/1080p.png')
row = np.concatenate([a, a[:, ::-1], a], axis=1)[:, :4032]
Image.fromarray(np.concatenate([row, row[::-1], row], axis=0)[:3024]).save('$dir/12mp.png')"
  "${PYTHON:-/usr/bin/python3}" tests/data/heif-grid.py --tile 512 --quality 50 "$dir/1080p.png" "$dir/1080p.heic"
  avifenc --min 20 --max 30 -s 8 "$dir/12mp.png" "$dir/12mp.avif" >/dev/null
  avifenc --min 20 --max 30 -s 8 "$dir/1080p.png" "$dir/1080p.avif" >/dev/null
  rm -f "$dir/12mp.png" "$dir/1080p.png"
  exit 0
fi
dir=$1
secs=${2:-15}
bin=${3:-build}
outdir=${4:-docs}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
files=(12mp.heic 1080p.heic 12mp.avif 1080p.avif)
rows=$tmp/rows
: >"$rows"
for mode in video cpu; do
  sessions=$([ "$mode" = video ] && echo 14 || echo 0)
  blurd_start "$tmp/$mode.out" "$tmp/$mode.err" "$bin/blurd" --bind 127.0.0.1 --port 0 \
    --queue 1024 --max-conns-per-ip 1024 --access-log off --heic-decoders "$sessions" ||
    { cat "$tmp/$mode.err" >&2; exit 1; }
  blurd_ready 180 || { cat "$tmp/$mode.err" >&2; exit 1; }
  grep -i "heic" "$tmp/$mode.err" || true
  for f in "${files[@]}"; do
    BLURD_LOAD_FILE=$dir/$f CONNS=8 wrk_run 3 "/blur?sigma=12&format=jpeg" >/dev/null
    line=$(BLURD_LOAD_FILE=$dir/$f CONNS=${CONNS:-32} wrk_run "$secs" "/blur?sigma=12&format=jpeg")
    dec=$(curl -s -D - -o /dev/null -H "Content-Type: image/${f##*.}" --data-binary "@$dir/$f" \
      "http://127.0.0.1:$port/blur?sigma=12&format=jpeg" | tr -d '\r' |
      sed -n 's/^[Ss]erver-[Tt]iming:.*decode;desc="\([^"]*\)".*/\1/p')
    echo "$mode $f: $line decoder=$dec"
    printf '%s\t%s\t%s\t%s\n' "$mode" "$f" "$line" "$dec" >>"$rows"
  done
  curl -s "http://127.0.0.1:$port/metrics" | grep '^blurd_heic_decodes_total' || true
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
done
mkdir -p "$outdir"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU')
awk -F'\t' -v date="$(date -u +%F)" -v machine="$gpu, $(nproc) cores" \
  -v cmd="WRK=${WRK:-wrk} bench/heic_gpu.sh DIR $secs $bin $outdir" -v conns="${CONNS:-32}" '
  function get(l, k,   m) { return match(l, k "=[^ ]*") ? substr(l, RSTART + length(k) + 1, RLENGTH - length(k) - 1) : "?" }
  { mode[NR] = $1; file[NR] = $2; line[NR] = $3; dec[NR] = $4; rps[$1 "/" $2] = get($3, "rps")
    cpu[$1 "/" $2] = get($3, "cpu_ms_per_request") }
  END {
    print "# HEIC on the video decoders against the CPU decoders"
    print ""
    print date ", " machine ". Command: `" cmd "` (wrk " conns " connections, /blur?sigma=12&format=jpeg)."
    print ""
    print "| decoders | file | decoder (Server-Timing) | req/s | p50 ms | p99 ms | non-200 | CPU ms a request | SMs % | video decoders % |"
    print "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= NR; i++)
      printf "| %s | %s | %s | %s | %s | %s | %d | %s | %s | %s |\n", mode[i], file[i], dec[i],
        get(line[i], "rps"), get(line[i], "p50_ms"), get(line[i], "p99_ms"),
        get(line[i], "busy503") + get(line[i], "other"), get(line[i], "cpu_ms_per_request"),
        get(line[i], "sm_pct"), get(line[i], "dec_pct")
    print ""
    print "| file | req/s, video / CPU decoders | CPU ms a request, video / CPU decoders |"
    print "|---|---:|---:|"
    for (i = 1; i <= NR; i++) if (mode[i] == "video") {
      f = file[i]
      printf "| %s | %.2f | %.2f |\n", f, rps["video/" f] / rps["cpu/" f], cpu["video/" f] / cpu["cpu/" f]
    }
  }' "$rows" >"$outdir/heic_gpu.md"
cat "$outdir/heic_gpu.md"
