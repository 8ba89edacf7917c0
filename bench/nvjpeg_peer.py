#!/usr/bin/env python3
"""The torchvision peer of blurd's GPU codecs, for bench/gpu_codecs.sh: decodes and encodes FILE
(default tests/data/photo_1080p.jpg) on the GPU with torchvision.io.decode_jpeg and encode_jpeg
(device="cuda", quality 90; nvJPEG underneath), in batches of 1, 16 and 64 copies, in-process
(no HTTP). Prints one line per batch size with images per second for decode alone and for decode
+ encode: the median of 5 timed loops after a warm-up, torch.cuda.synchronize() around each.
Without torch, torchvision or a CUDA device it prints a note and exits 0.
Usage: nvjpeg_peer.py [FILE]"""
import statistics
import sys
import time

path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/photo_1080p.jpg"
try:
    import torch
    import torchvision
    from torchvision.io import decode_jpeg, encode_jpeg
except ImportError as e:
    print(f"torchvision peer skipped: {e}")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torchvision peer skipped: no CUDA device")
    sys.exit(0)

LOOPS = 5
IMAGES_PER_LOOP = 256


def rate(batch, encode):
    """Images per second, the median of LOOPS timed loops of IMAGES_PER_LOOP images."""
    def step():
        imgs = decode_jpeg(batch, device="cuda")
        if encode:
            encode_jpeg(imgs, quality=90)
    step()  # warm-up: nvJPEG handles, buffers
    iters = max(1, IMAGES_PER_LOOP // len(batch))
    times = []
    for _ in range(LOOPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return iters * len(batch) / statistics.median(times)


data = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8)
print(f"torchvision {torchvision.__version__}, torch {torch.__version__}, "
      f"{torch.cuda.get_device_name(0)}, {path}")
for n in (1, 16, 64):
    try:
        batch = [data] * n
        print(f"batch {n:2d}: decode {rate(batch, False):7.0f} images/s, "
              f"decode + encode (quality 90) {rate(batch, True):7.0f} images/s")
    except Exception as e:  # an old torchvision without batched GPU decode, out of memory, ...
        print(f"batch {n:2d}: failed: {type(e).__name__}: {e}")
    sys.stdout.flush()
