#!/bin/bash
# The CPU backend against libvips (the engine of imaginary and imgproxy) on this machine, in one
# run: 1920x1080 and 3840x2160 RGB photographs (tests/data/photo_1080p.jpg, and twice its size),
# sigma 1, 3, 12, 40 and 100.
#  - vips default and vips `--precision float --min-ampl 0.001`: the net time of
#    `vips gaussblur in.v out.v SIGMA` (minus `vips copy in.v out.v`, vips' native format);
#  - blurd: the `filter` stage of `/blur?method=auto&psnr=false` on the CPU backend, from
#    Server-Timing (the exact reference's time is not counted);
#  - each one's PSNR against the exact Gaussian of the input, measured alike (build/gausspsnr, the
#    measure behind X-PSNR);
#  - end to end: `vips gaussblur in.jpg out.jpg SIGMA` against a whole 1080p JPEG `/blur` request
#    (curl's time, upload and answer included).
# The best of REPS (default 3) runs of each. Writes DIR/cpu_vips.md (default docs/) and prints it.
# Installs libvips-tools with apt-get when vips is missing (as root).
#   bench/cpu_vips.sh [DIR] [BUILD (default build)]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
dir=${1:-docs}
bin=${2:-build}
reps=${REPS:-3}
sigmas=${SIGMAS:-1 3 12 40 100}
if ! command -v vips >/dev/null; then
  apt-get install -y -q libvips-tools >/dev/null
fi
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s.%N; }
best() { sort -g | head -1; } # the smallest of the numbers on stdin

# vips_ms COMMAND...: the best of REPS runs of a command, in milliseconds
vips_ms() {
  for _ in $(seq "$reps"); do
    t0=$(now)
    "$@" >/dev/null
    echo "($(now) - $t0) * 1000" | bc -l
  done | best
}

vips copy tests/data/photo_1080p.jpg "$tmp/1080p.png"
vips resize tests/data/photo_1080p.jpg "$tmp/2160p.png" 2 --kernel lanczos3
blurd_start "$tmp/blurd.out" /dev/null "$bin/blurd" --backend cpu --bind 127.0.0.1 --port 0 \
  --access-log off || { echo "blurd did not start" >&2; exit 1; }
blurd_ready 20 || { echo "blurd not ready after 20 s" >&2; exit 1; }

# blurd_run FILE QUERY: prints "filter_ms total_ms x_psnr wall_ms" of one request
blurd_run() {
  local ctype=image/jpeg
  [ "${1##*.}" = png ] && ctype=image/png
  curl -s -o "$tmp/out" -D "$tmp/h" -w '%{time_total}' -H "Content-Type: $ctype" \
    --data-binary @"$1" "http://127.0.0.1:$port/blur?$2" >"$tmp/wall"
  grep -q '^HTTP/1.1 200' "$tmp/h" || { echo "blurd: $(cat "$tmp/out")" >&2; exit 1; }
  f=$(grep -o 'filter;dur=[0-9.]*' "$tmp/h" | cut -d= -f2)
  t=$(grep -o 'total;dur=[0-9.]*' "$tmp/h" | cut -d= -f2)
  p=$(grep -i '^X-PSNR:' "$tmp/h" | tr -d '\r' | awk '{print $2}')
  echo "$f $t ${p:-nan} $(echo "$(cat "$tmp/wall") * 1000" | bc -l)"
}

{
  echo "# The CPU backend against libvips"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "$(vips --version), \`bench/cpu_vips.sh\` (best of $reps runs each). Times in ms; PSNR in dB"
  echo "against the exact Gaussian; ratios are vips' time over blurd's (above 1: blurd is faster)."
  echo
  echo "| image | sigma | vips default | PSNR | vips float | PSNR | blurd auto | PSNR | default / blurd | float / blurd |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$tmp/md"

for size in 1080p 2160p; do
  png=$tmp/$size.png
  vips copy "$png" "$tmp/in.v"
  copy_ms=$(vips_ms vips copy "$tmp/in.v" "$tmp/out.v")
  for s in $sigmas; do
    row="| $size | $s"
    vd=$(vips_ms vips gaussblur "$tmp/in.v" "$tmp/out.v" "$s")
    vips gaussblur "$tmp/in.v" "$tmp/vd.png" "$s"
    pd=$("$bin/gausspsnr" "$png" "$tmp/vd.png" "$s" | sed 's/psnr_db=\([^ ]*\).*/\1/')
    vf=$(vips_ms vips gaussblur "$tmp/in.v" "$tmp/out.v" "$s" --precision float --min-ampl 0.001)
    vips gaussblur "$tmp/in.v" "$tmp/vf.png" "$s" --precision float --min-ampl 0.001
    pf=$("$bin/gausspsnr" "$png" "$tmp/vf.png" "$s" | sed 's/psnr_db=\([^ ]*\).*/\1/')
    bf=$(for _ in $(seq "$reps"); do blurd_run "$png" "sigma=$s&method=auto&psnr=false&format=png" | cut -d' ' -f1; done | best)
    pb=$(blurd_run "$png" "sigma=$s&method=auto&format=png" | cut -d' ' -f3)
    nd=$(echo "$vd - $copy_ms" | bc -l)
    nf=$(echo "$vf - $copy_ms" | bc -l)
    printf '%s | %.0f | %s | %.0f | %s | %.0f | %s | %.2f | %.2f |\n' "$row" "$nd" "$pd" "$nf" "$pf" \
      "$bf" "$pb" "$(echo "$nd / $bf" | bc -l)" "$(echo "$nf / $bf" | bc -l)" >>"$tmp/md"
  done
done

{
  echo
  echo "End to end, 1920x1080 JPEG in and out: \`vips gaussblur in.jpg out.jpg SIGMA\` (the whole"
  echo "command) against a \`/blur?sigma=SIGMA\` request to the CPU backend (curl's time: upload,"
  echo "decode, blur, PSNR reference, encode, answer; and with \`psnr=false\`)."
  echo
  echo "| sigma | vips (ms) | blurd (ms) | blurd psnr=false (ms) | vips / blurd psnr=false |"
  echo "|---|---|---|---|---|"
} >>"$tmp/md"
for s in $sigmas; do
  ve=$(vips_ms vips gaussblur tests/data/photo_1080p.jpg "$tmp/e.jpg" "$s")
  be=$(for _ in $(seq "$reps"); do blurd_run tests/data/photo_1080p.jpg "sigma=$s" | cut -d' ' -f4; done | best)
  bn=$(for _ in $(seq "$reps"); do blurd_run tests/data/photo_1080p.jpg "sigma=$s&psnr=false" | cut -d' ' -f4; done | best)
  printf '| %s | %.0f | %.0f | %.0f | %.2f |\n' "$s" "$ve" "$be" "$bn" "$(echo "$ve / $bn" | bc -l)" >>"$tmp/md"
done
mkdir -p "$dir"
cp "$tmp/md" "$dir/cpu_vips.md"
cat "$dir/cpu_vips.md"
