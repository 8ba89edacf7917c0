#!/bin/bash
# The cost model behind --max-cost against the server's measured CPU time, request by request:
# fifty-six requests over every operation, the formats at their quality and effort extremes (on
# the content they are slowest on: noise, or smooth noise for PNG and lossless WebP; AVIF and
# JPEG XL, lossy and lossless, at effort 6 on noise), 8 and 16 bits, alpha, regions, images from
# 256x256 to 40 MP, and a 12 MP HEIC as a phone writes it (bench/heic_load.sh --make: heif-enc,
# Pillow and numpy; without them its request is skipped). A request's estimate is the model's
# (BIN/tests/integ_cost --estimate: op_budget, the code the server runs); its cost is blurd's
# CPU time, user + system of all its threads and waited-for children (/proc/PID/stat), across it,
# as scripts/cost-calibration.sh measures it: the first request left out unless it takes a second
# or more, then the median of three (one past 5 s), or under 0.1 s the mean of as many as 0.5 s
# take. Prints a table in Markdown (request, image, estimate, measured, ratio, admitted by the
# default budget of 30 s) and exits 1 unless every ratio is within 0.5 to 2 and no request the
# default budget admits took more than 60 s.
#   bench/cost_model.sh [BIN]      (BIN: the build folder, default build; about 20 minutes)
# ONLY=REGEX runs only the requests whose line (image, endpoint, query) matches it (grep -E), e.g.
# ONLY='heic|avif|jxl' the new formats' four (about 6 minutes, most of it JPEG XL's lossless
# effort 6).
# The server runs --backend cpu --max-cost 0 (all requests run) --max-body 512M (the largest
# images are stored PNGs), after one request of a 3000x3000 image: glibc's malloc then keeps
# buffers up to its size in its heap, as in a server that has served one (a fresh server's first
# requests of each size take page faults besides).
set -euo pipefail
bin=${1:-build}
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)

# ---- images: noise (stored PNGs), smooth noise (blurred at sigma 3), their JPEG and WebP ----
noise() { # NAME W H C [DEPTH]
  python3 - "$tmp/$1.png" "$2" "$3" "$4" "${5:-8}" <<'PY'
import os, struct, sys, zlib
path, w, h, c, d = sys.argv[1], *map(int, sys.argv[2:])
row = w * c * d // 8
blob = os.urandom(row * h)
raw = b"".join(b"\0" + blob[y * row:(y + 1) * row] for y in range(h))
def chunk(t, x): return struct.pack(">I", len(x)) + t + x + struct.pack(">I", zlib.crc32(t + x))
ihdr = struct.pack(">IIBBBBB", w, h, d, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 0)
z = zlib.compressobj(0)
open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", z.compress(raw) + z.flush()) + chunk(b"IEND", b""))
PY
}
cli() { "$bin/blurd" "$1" --backend cpu --max-body 1G "${@:2}" >/dev/null 2>&1; }
widen() { # IN OUT: the 8-bit PNG IN as 16 bits (each sample times 257: the same byte twice)
  python3 - "$1" "$2" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
at, idat = 8, b""
while at < len(b):
    n, t = struct.unpack(">I4s", b[at:at + 8])
    if t == b"IHDR":
        w, h, d, ct = struct.unpack(">IIBB", b[at + 8:at + 18])
    if t == b"IDAT":
        idat += b[at + 8:at + 8 + n]
    at += 12 + n
c = {0: 1, 4: 2, 2: 3, 6: 4}[ct]
raw, row, out, prev = zlib.decompress(idat), w * c, bytearray(), bytearray(w * c)
for y in range(h):
    f, line = raw[y * (row + 1)], bytearray(raw[y * (row + 1) + 1:(y + 1) * (row + 1)])
    for i in range(row):
        a = line[i - c] if i >= c else 0
        up, ul = prev[i], prev[i - c] if i >= c else 0
        p = a + up - ul
        pred = [0, a, up, (a + up) // 2, a if abs(p - a) <= abs(p - up) and abs(p - a) <= abs(p - ul) else up if abs(p - up) <= abs(p - ul) else ul][f]
        line[i] = (line[i] + pred) & 255
    out += b"\0" + bytes(v for x in line for v in (x, x))
    prev = line
def chunk(t, x): return struct.pack(">I", len(x)) + t + x + struct.pack(">I", zlib.crc32(t + x))
z = zlib.compressobj(0)
open(sys.argv[2], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, ct, 0, 0, 0)) + chunk(b"IDAT", z.compress(bytes(out)) + z.flush()) + chunk(b"IEND", b""))
PY
}
noise n256 256 256 3
noise n256a 256 256 4
noise n256g 256 256 1
noise n500 500 500 3
noise n1000 1000 1000 3
noise n1000g 1000 1000 1
noise n1000a 1000 1000 4
noise n1000w 1000 1000 3 16
noise n1000aw 1000 1000 4 16
noise n2000 2000 2000 3
noise n2000g 2000 2000 1
noise n2000a 2000 2000 4
noise n3000 3000 3000 3
noise n3000a 3000 3000 4
noise n6000a 6000 6000 4
noise n8000 8000 5000 3
cli blur --method yvv --sigma 3 --psnr false --compression 0 "$tmp/n8000.png" "$tmp/s8000.png"
cli convert --format jpeg --quality 90 "$tmp/s8000.png" "$tmp/s8000.jpg"
cli blur --method yvv --sigma 3 --psnr false --compression 0 "$tmp/n1000.png" "$tmp/s1000.png"
widen "$tmp/s1000.png" "$tmp/s1000w.png"
cli blur --method yvv --sigma 3 --psnr false --compression 0 "$tmp/n1000a.png" "$tmp/s1000a.png"
cli convert --format webp --quality 90 "$tmp/n1000.png" "$tmp/n1000.webp"
cli convert --format webp --lossless true "$tmp/n1000a.png" "$tmp/n1000a.webp"
cli convert --format jpeg --quality 100 "$tmp/n2000.png" "$tmp/n2000.jpg"
cp tests/data/photo_1080p.jpg "$tmp/photo.jpg"
bash bench/heic_load.sh --make "$tmp/h12mp.heic" >/dev/null 2>&1 ||
  echo "cost_model: no 12 MP HEIC (bench/heic_load.sh --make needs heif-enc, Pillow, numpy)" >&2
rm "$tmp/n8000.png" "$tmp/s8000.png"

describe() { # FILE: its shape
  python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read(1 << 16)
if b[:4] == b"\x89PNG":
    w, h, d, t = struct.unpack(">IIBB", b[16:26])
    print(f"{w}x{h} {({0: 'gray', 4: 'gray+alpha', 2: 'RGB', 6: 'RGBA'})[t]}{' 16-bit' if d == 16 else ''} PNG")
elif b[:2] == b"\xff\xd8":
    i = 2
    while b[i + 1] not in (0xC0, 0xC1, 0xC2):
        i += 2 + struct.unpack(">H", b[i + 2:i + 4])[0]
    h, w = struct.unpack(">HH", b[i + 5:i + 9])
    print(f"{w}x{h} {'RGB' if b[i + 9] == 3 else 'gray'} JPEG")
elif b[4:8] == b"ftyp":  # HEIF: the largest ispe (a grid's, not its tiles')
    i, size = b.find(b"ispe"), (0, 0)
    while i >= 0:
        size = max(size, struct.unpack(">II", b[i + 8:i + 16]), key=lambda s: s[0] * s[1])
        i = b.find(b"ispe", i + 4)
    print(f"{size[0]}x{size[1]} {'AVIF' if b[8:12] in (b'avif', b'avis') else 'HEIC'}")
elif b[:4] == b"RIFF":
    print("WebP " + ("lossless" if b"VP8L" in b[:64] else "lossy"))
else:
    print("JPEG XL" if b[:2] == b"\xff\x0a" or b[4:8] == b"JXL " else "GIF" if b[:3] == b"GIF" else "TIFF")
PY
}

# ---- the requests: IMAGE ENDPOINT QUERY [PARAMS] ----
regions64=$(python3 -c 'print("[" + ", ".join(["[0, 0, 3000, 3000]"] * 64) + "]")')
regions16=$(python3 -c 'print("[" + ", ".join(f"[{i * 113 % 1800}, {i * 347 % 1800}, 200, 200]" for i in range(16)) + "]")')
regions8=$(python3 -c 'print("[" + ", ".join(f"[{i * 331 % 2600}, {i * 173 % 2600}, 300, 300]" for i in range(8)) + "]")')
kernel() { python3 -c "print('[' + ','.join(['1'] * ($1 * $1)) + ']')"; }
requests=(
  "n2000 blur method=fir&sigma=300&truncate=8&psnr=false"
  "n2000 blur method=fir&sigma=100&truncate=8&psnr=false"
  "n2000 blur method=separable&sigma=300&truncate=8&psnr=false"
  "n6000a blur sigma=300"
  "n3000a blur sigma=2|{\"regions\": $regions64}"
  "n500 variance method=naive&radius=80&psnr=false"
  "n2000 convolve |{\"kernel\": $(kernel 31)}"
  "n2000a convert format=webp&effort=6&quality=100"
  "n256 blur method=fir&sigma=2&psnr=false"
  "n1000aw blur method=fir&sigma=20"
  "n1000w blur method=separable&sigma=8&psnr=false"
  "s8000.jpg blur method=yvv&sigma=50&psnr=false"
  "n2000a blur method=deriche&sigma=5&psnr=false"
  "n1000 blur method=yvv2way&sigma=20&psnr=false"
  "n2000 blur method=pyramid&sigma=300&psnr=false"
  "n1000 blur method=pyramid&sigma=24"
  "n2000g blur method=yvv_blocked&sigma=12"
  "photo blur sigma=12"
  "n2000 blur method=separable&sigma_x=1&sigma_y=40&psnr=false"
  "n2000 blur sigma=20&feather=16&psnr=false|{\"regions\": $regions16}"
  "n256a blur sigma=1&psnr=false"
  "s8000.jpg blur sigma=5"
  "n2000 sharpen sigma=50"
  "n1000a sharpen sigma=1&luma=true"
  "n256g variance method=welford&radius=127&psnr=false"
  "n1000g variance method=koenig&radius=31"
  "n2000 variance method=pairwise&radius=127"
  "n1000 variance method=threewise&radius=63"
  "n3000a variance method=exact&radius=127"
  "n256 variance radius=7&format=npy"
  "n2000a contrast radius=127"
  "n256g contrast radius=5"
  "n1000 convolve kernel=edge"
  "n1000a convolve |{\"kernel\": $(kernel 15)}"
  "s8000.jpg pixelate block=16&format=png&compression=0"
  "n3000a pixelate block=2&feather=8|{\"regions\": $regions8}"
  "n1000 convert format=webp&effort=0&quality=1"
  "s1000a convert format=webp&lossless=true"
  "n1000g convert format=webp&effort=4&quality=50"
  "photo convert format=png&compression=9"
  "s1000w convert format=png&compression=9"
  "n1000a convert format=png&compression=1"
  "n2000 convert format=jpeg&quality=100"
  "n256 convert format=jpeg&quality=1"
  "n2000.jpg convert "
  "n1000a.webp convert format=png"
  "n1000.webp convert format=png"
  "n2000.jpg convert format=png&compression=0"
  "n3000 convert format=webp&effort=2&quality=90"
  "n1000 convert format=webp&effort=6&quality=100"
  "h12mp.heic convert "
  "n2000 convert format=avif&effort=6"
  "n2000 convert format=jxl&effort=6"
  "n2000 convert format=jxl&effort=6&lossless=true"
  "s8000.jpg convert format=png&compression=2"
  "n3000 blur method=fir&sigma=8&psnr=false"
)

blurd_start "$tmp/out" "$tmp/err" "$bin/blurd" --bind 127.0.0.1 --port 0 --access-log off \
  --backend cpu --max-cost 0 --max-body 512M --max-buffered 4G --request-timeout 600 ||
  { cat "$tmp/err" >&2; exit 1; }
blurd_ready
curl -sf -o /dev/null -H 'Content-Type: image/png' --data-binary @"$tmp/n3000.png" \
  "http://127.0.0.1:$port/convert?format=png&compression=0"

# blurd's CPU ticks: user and system, its threads' and its waited-for children's (a codec may
# run in one); the name in field 2 has no spaces
ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pid/stat"; }
post() { # FILE PATH [PARAMS]: one request, which must answer 200
  local code
  if [ -n "${3:-}" ]; then
    code=$(curl -s -o /dev/null -w '%{http_code}' -F "image=@$1" -F "params=$3" "http://127.0.0.1:$port$2")
  else
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/octet-stream' \
      --data-binary @"$1" "http://127.0.0.1:$port$2")
  fi
  [ "$code" = 200 ] || { echo "cost_model: $2 answered $code" >&2; exit 1; }
}

printf '| request | image | estimate s | measured s | ratio | admitted |\n|---|---|---:|---:|---:|---|\n'
fail=0
for r in "${requests[@]}"; do
  spec=${r%%|*}
  params=
  [ "$spec" != "$r" ] && params=${r#*|}
  [ -z "${ONLY:-}" ] || grep -Eq -- "$ONLY" <<<"$spec" || continue
  read -r img op query <<<"$spec"
  file=$tmp/$img
  [ -f "$file" ] || file=$tmp/$img.png
  [ -f "$file" ] || file=$tmp/$img.jpg
  path="/$op${query:+?$query}"
  if [ ! -f "$file" ]; then
    printf '| `%s` | %s | | | | skipped: not made |\n' "$path" "$img"
    continue
  fi
  est=$("$bin/tests/integ_cost" --estimate "$op" "${query:-}" "$file" ${params:+"$params"})
  # as scripts/cost-calibration.sh measures: the first request is left out unless it takes a
  # second or more (it grows the allocator's heap); then a request of 0.1 s or more is the median
  # of three (one past 5 s), a shorter one the mean of as many as 0.5 s take
  t0=$(ticks)
  post "$file" "$path" "$params"
  first=$(($(ticks) - t0))
  runs=
  [ "$first" -ge "$tck" ] && runs=$first
  if [ "$first" -lt $((tck * 5)) ] && [ "$first" -ge $((tck / 10)) ]; then
    while [ "$(echo "$runs" | wc -w)" -lt 3 ]; do
      t0=$(ticks)
      post "$file" "$path" "$params"
      runs="$runs $(($(ticks) - t0))"
    done
  fi
  if [ -n "$runs" ]; then
    cpu=$(echo "$runs" | tr ' ' '\n' | grep . | sort -n |
      awk -v k="$tck" '{ v[NR] = $1 } END { printf "%.4f", v[int((NR + 1) / 2)] / k }')
  else
    t0=$(ticks)
    n=0
    while :; do
      post "$file" "$path" "$params"
      n=$((n + 1))
      [ $(($(ticks) - t0)) -ge $((tck / 2)) ] && break
    done
    cpu=$(awk -v t="$(($(ticks) - t0))" -v n="$n" -v k="$tck" 'BEGIN { printf "%.4f", t / n / k }')
  fi
  read -r ratio admitted ok < <(awk -v e="$est" -v c="$cpu" 'BEGIN {
    r = e / c; a = e <= 30 ? "yes" : "no"; ok = (r >= 0.5 && r <= 2 && !(e <= 30 && c > 60))
    printf "%.2f %s %d\n", r, a, ok }')
  [ "$ok" = 1 ] || fail=1
  shown=$path
  [ -n "$params" ] && shown="$path + params $(echo "$params" | cut -c1-40)$([ ${#params} -gt 40 ] && echo ...)"
  printf '| `%s` | %s | %s | %s | %s | %s |\n' "$shown" "$(describe "$file")" "$est" "$cpu" "$ratio" \
    "$admitted$([ "$ok" = 1 ] || echo ' **FAIL**')"
done
exit "$fail"
