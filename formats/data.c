/* data.c: the data outputs for callers that compute on a map rather than look at it: raw samples
 * and NumPy .npy files. A variance map as 16-bit PNG costs a deflate; a program that reads the
 * numbers wants them as they are. CODEC_RAW is the samples, interleaved, row after row,
 * little-endian, with nothing else: width, height, channels and scale travel beside it (the API's
 * headers). CODEC_NPY is the same bytes after a NumPy format 1.0 header. Both take 8- or 16-bit
 * codec_images (codec_encode) or float32 samples (codec_encode_float). */
#include <stdio.h>
#include <string.h>

#include "formats.h"

#define NPY_ALIGN 64 /* numpy aligns the data to 64 bytes since 1.14 (the format allows 16) */

static int little_endian_host(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* The .npy preamble for the described array into head (at least 256 bytes); returns its size:
 * the magic, the version, a little-endian header length and a Python dict literal ('descr' '|u1',
 * '<u2' or '<f4'; 'fortran_order' False; 'shape' (height, width) or (height, width, channels))
 * padded with spaces to a multiple of NPY_ALIGN bytes and ending in a newline. */
static size_t npy_header(char *head, const char *descr, int width, int height, int channels) {
  char dict[160], shape[64];
  if (channels == 1)
    snprintf(shape, sizeof shape, "(%d, %d)", height, width);
  else
    snprintf(shape, sizeof shape, "(%d, %d, %d)", height, width, channels);
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                   descr, shape);
  size_t total = (10 + (size_t)n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN; /* +1: '\n' */
  size_t hlen = total - 10;
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = (char)(hlen & 0xff);
  head[9] = (char)(hlen >> 8);
  memcpy(head + 10, dict, (size_t)n);
  memset(head + 10 + n, ' ', hlen - (size_t)n - 1);
  head[total - 1] = '\n';
  return total;
}

/* Writes the samples (n of size bytes each, host order) as little-endian after an optional
 * header; *out is codec_malloc'd. */
static enum codec_status write_samples(const uint8_t *src, size_t n, size_t size, const char *head,
                                       size_t head_len, uint8_t **out, size_t *outlen, char *msg,
                                       size_t msglen) {
  if (n > (SIZE_MAX - head_len) / size) return CODEC_TOO_LARGE;
  uint8_t *p = codec_malloc(head_len + n * size);
  if (p == NULL) {
    codec_msgf(msg, msglen, "out of memory writing the samples");
    return CODEC_NOMEM;
  }
  memcpy(p, head, head_len);
  if (size == 1 || little_endian_host())
    memcpy(p + head_len, src, n * size);
  else
    for (size_t i = 0; i < n; i++)
      for (size_t b = 0; b < size; b++) p[head_len + i * size + b] = src[i * size + size - 1 - b];
  *out = p;
  *outlen = head_len + n * size;
  return CODEC_OK;
}

static enum codec_status encode_data(const uint8_t *samples, size_t size, const char *descr,
                                     int width, int height, int channels, enum codec_format f,
                                     uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  char head[256];
  size_t head_len = f == CODEC_NPY ? npy_header(head, descr, width, height, channels) : 0;
  size_t n = (size_t)width * (size_t)height * (size_t)channels;
  return write_samples(samples, n, size, head, head_len, out, outlen, msg, msglen);
}

enum codec_status codec_data_encode(const struct codec_image *img, enum codec_format f,
                                    uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  return encode_data(img->pixels, (size_t)img->depth / 8, img->depth == 8 ? "|u1" : "<u2",
                     img->width, img->height, img->channels, f, out, outlen, msg, msglen);
}

enum codec_status codec_encode_float(const float *samples, int width, int height, int channels,
                                     enum codec_format f, uint8_t **out, size_t *outlen, char *msg,
                                     size_t msglen) {
  if (out == NULL || outlen == NULL) return CODEC_UNSUPPORTED;
  *out = NULL;
  *outlen = 0;
  if (samples == NULL || width < 1 || height < 1 || channels < 1 || channels > 4 ||
      (f != CODEC_RAW && f != CODEC_NPY)) {
    codec_msgf(msg, msglen, "float samples are written as raw or npy only, 1..4 channels");
    return CODEC_UNSUPPORTED;
  }
  return encode_data((const uint8_t *)samples, sizeof(float), "<f4", width, height, channels, f,
                     out, outlen, msg, msglen);
}

/* ---- the formats' descriptors ---- */

static enum codec_status raw_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  (void)o;
  return codec_data_encode(img, CODEC_RAW, out, outlen, msg, msglen);
}

static enum codec_status npy_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  (void)o;
  return codec_data_encode(img, CODEC_NPY, out, outlen, msg, msglen);
}

const struct codec_format_desc codec_raw_format = {
    .name = "raw",
    .title = "raw samples",
    .mime = "application/octet-stream",
    .mimes = "",
    .exts = "raw bin",
    .lib = "raw",
    .writer = "blurd",
    .data = 1,
    .exact16 = 1,
    .encode = raw_encode,
};

const struct codec_format_desc codec_npy_format = {
    .name = "npy",
    .title = "NumPy",
    .mime = "application/x-npy",
    .mimes = "",
    .exts = "npy",
    .lib = "npy",
    .writer = "blurd",
    .data = 1,
    .exact16 = 1,
    .encode = npy_encode,
};
