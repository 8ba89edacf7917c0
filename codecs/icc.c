/* icc.c: ICC colour profiles: found in uploads, put into JPEG files, and applied with Little CMS.
 * The reader works on the uploaded bytes, not on a decoder's state, so every decode path (libpng,
 * libjpeg, libwebp, nvJPEG on the GPU) keeps the profile the same way. PNG and WebP embed the
 * profile in their encoders; JPEG gets it here, in APP2 segments inserted after SOI (and JFIF's
 * APP0), so the same function serves libjpeg's output and nvJPEG's. codec_to_srgb converts pixels
 * to sRGB for colorspace=srgb, and jpeg.c converts CMYK through codec_cmyk_to_rgb. */
#include <lcms2.h>
#include <string.h>
#include <zlib.h>

#include "codecs_int.h"

static const char icc_magic[12] = "ICC_PROFILE"; /* with its NUL: 12 bytes */
#define ICC_CHUNK_MAX (65535 - 2 - 14)           /* profile bytes in one APP2 segment */

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int codec_icc_colours(const uint8_t *icc, size_t len) {
  if (icc == NULL || len < 128 || codec_be32(icc) != len || memcmp(icc + 36, "acsp", 4) != 0)
    return 0;
  if (memcmp(icc + 16, "GRAY", 4) == 0) return 1;
  if (memcmp(icc + 16, "RGB ", 4) == 0) return 3;
  if (memcmp(icc + 16, "CMYK", 4) == 0) return 4;
  return 0;
}

/* Hands a copy of p[0..n) to the caller when it is a well-formed profile. */
static enum codec_status keep(const uint8_t *p, size_t n, uint8_t **icc, size_t *icc_len) {
  if (n > CODEC_ICC_MAX || codec_icc_colours(p, n) == 0) return CODEC_OK;
  *icc = codec_malloc(n);
  if (*icc == NULL) return CODEC_NOMEM;
  memcpy(*icc, p, n);
  *icc_len = n;
  return CODEC_OK;
}

/* The APP2 payloads of a JPEG up to its first scan, joined in sequence order. */
enum codec_status codec_jpeg_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len) {
  const uint8_t *part[256] = {0};
  size_t part_len[256] = {0}, total = 0;
  int count = 0;
  for (size_t pos = 2; len - pos >= 4 && b[pos] == 0xff;) {
    unsigned m = b[pos + 1];
    if (m == 0xff || m == 0x01 || (m >= 0xd0 && m <= 0xd8)) { /* fill byte, standalone markers */
      pos += m == 0xff ? 1 : 2;
      continue;
    }
    if (m == 0xda || m == 0xd9) break;
    size_t seg = (size_t)b[pos + 2] << 8 | b[pos + 3];
    if (seg < 2 || seg > len - pos - 2) break;
    const uint8_t *p = b + pos + 4;
    if (m == 0xe2 && seg >= 2 + 14 && memcmp(p, icc_magic, 12) == 0) {
      int seq = p[12], n = p[13];
      if (seq == 0 || seq > n || (count && n != count) || part[seq]) return CODEC_OK;
      count = n;
      part[seq] = p + 14;
      part_len[seq] = seg - 16;
      total += seg - 16;
    }
    pos += 2 + seg;
  }
  for (int i = 1; i <= count; i++)
    if (part[i] == NULL) return CODEC_OK;
  if (count == 0 || total > CODEC_ICC_MAX) return CODEC_OK;
  uint8_t *joined = codec_malloc(total), *q = joined;
  if (joined == NULL) return CODEC_NOMEM;
  for (int i = 1; i <= count; q += part_len[i], i++) memcpy(q, part[i], part_len[i]);
  enum codec_status st = keep(joined, total, icc, icc_len);
  codec_free(joined);
  return st;
}

/* Inflates a zlib stream of at most CODEC_ICC_MAX bytes. */
static enum codec_status inflate_icc(const uint8_t *z, size_t n, uint8_t **icc, size_t *icc_len) {
  uint8_t *out = codec_malloc(CODEC_ICC_MAX);
  if (out == NULL) return CODEC_NOMEM;
  z_stream s = {
      .next_in = (Bytef *)z, .avail_in = (uInt)n, .next_out = out, .avail_out = CODEC_ICC_MAX};
  enum codec_status st = CODEC_OK;
  if (n <= UINT32_MAX && inflateInit(&s) == Z_OK) {
    if (inflate(&s, Z_FINISH) == Z_STREAM_END) st = keep(out, s.total_out, icc, icc_len);
    inflateEnd(&s);
  }
  codec_free(out);
  return st;
}

/* PNG's iCCP chunk (name, NUL, method 0, zlib data), before the first IDAT. */
enum codec_status codec_png_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len) {
  for (size_t pos = 8; len - pos >= 12;) {
    size_t n = codec_be32(b + pos);
    if (n > len - pos - 12 || memcmp(b + pos + 4, "IDAT", 4) == 0) break;
    const uint8_t *d = b + pos + 8;
    if (memcmp(b + pos + 4, "iCCP", 4) == 0) {
      const uint8_t *nul = memchr(d, 0, n < 80 ? n : 80);
      if (nul == NULL || (size_t)(nul - d) + 2 > n || nul[1] != 0) return CODEC_OK;
      return inflate_icc(nul + 2, n - (size_t)(nul - d) - 2, icc, icc_len);
    }
    pos += n + 12;
  }
  return CODEC_OK;
}

/* WebP's ICCP chunk, among the RIFF chunks after "WEBP". */
enum codec_status codec_webp_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len) {
  for (size_t pos = 12; len - pos >= 8;) {
    size_t n = le32(b + pos + 4);
    if (n > len - pos - 8) break;
    if (memcmp(b + pos, "ICCP", 4) == 0) return keep(b + pos + 8, n, icc, icc_len);
    pos += 8 + n + (n & 1);
    if (pos > len) break;
  }
  return CODEC_OK;
}

/* JPEG's APP2 "ICC_PROFILE" segments (joined in their sequence order), PNG's iCCP chunk (inflated)
 * and WebP's ICCP chunk. A profile that is malformed, split inconsistently, larger than
 * CODEC_ICC_MAX, or whose header does not give its own length is treated as absent: a broken
 * profile does not make the picture unreadable. Every offset comes from an untrusted upload and is
 * checked against the buffer before use. */
/* Where APP2 segments go: after SOI and an APP0 (JFIF) right after it. */
static size_t app2_offset(const uint8_t *jpeg, size_t len) {
  if (len >= 6 && jpeg[2] == 0xff && jpeg[3] == 0xe0) {
    size_t seg = (size_t)jpeg[4] << 8 | jpeg[5];
    if (seg >= 2 && seg <= len - 4) return 4 + seg;
  }
  return 2;
}

enum codec_status codec_jpeg_insert_icc(const uint8_t *jpeg, size_t len, const uint8_t *icc,
                                        size_t icc_len, uint8_t **out, size_t *outlen) {
  *out = NULL;
  *outlen = 0;
  size_t chunks = (icc_len + ICC_CHUNK_MAX - 1) / ICC_CHUNK_MAX;
  if (len < 3 || jpeg[0] != 0xff || jpeg[1] != 0xd8 || icc == NULL || chunks == 0 || chunks > 255)
    return CODEC_UNSUPPORTED;
  size_t at = app2_offset(jpeg, len), total = len + icc_len + chunks * 18;
  uint8_t *p = codec_malloc(total);
  if (p == NULL) return CODEC_NOMEM;
  memcpy(p, jpeg, at);
  size_t w = at;
  for (size_t i = 0; i < chunks; i++) {
    size_t n =
        icc_len - i * ICC_CHUNK_MAX < ICC_CHUNK_MAX ? icc_len - i * ICC_CHUNK_MAX : ICC_CHUNK_MAX;
    size_t seg = n + 16; /* the length field, the magic, sequence and count, the bytes */
    uint8_t head[18] = {0xff, 0xe2, (uint8_t)(seg >> 8), (uint8_t)seg};
    memcpy(head + 4, icc_magic, 12);
    head[16] = (uint8_t)(i + 1);
    head[17] = (uint8_t)chunks;
    memcpy(p + w, head, 18);
    memcpy(p + w + 18, icc + i * ICC_CHUNK_MAX, n);
    w += 18 + n;
  }
  memcpy(p + w, jpeg + at, len - at);
  *out = p;
  *outlen = total;
  return CODEC_OK;
}

/* The lcms2 pixel type of img's samples (channels, depth, host order). */
static cmsUInt32Number lcms_type(int channels, int depth) {
  int bytes = depth / 8, extra = channels == 2 || channels == 4;
  cmsUInt32Number space = channels <= 2 ? PT_GRAY : PT_RGB;
  return COLORSPACE_SH(space) | CHANNELS_SH(channels - extra) | EXTRA_SH(extra) | BYTES_SH(bytes);
}

/* An output profile for gray: sRGB's tone curve on a D65 white. */
static cmsHPROFILE srgb_gray(void) {
  const cmsFloat64Number srgb[5] = {2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045};
  cmsToneCurve *trc = cmsBuildParametricToneCurve(NULL, 4, srgb);
  cmsHPROFILE p = trc ? cmsCreateGrayProfile(cmsD50_xyY(), trc) : NULL;
  if (trc) cmsFreeToneCurve(trc);
  return p;
}

int codec_to_srgb(struct codec_image *img, const uint8_t *icc, size_t icc_len) {
  int gray = img->channels <= 2;
  if (codec_icc_colours(icc, icc_len) != (gray ? 1 : 3)) return 0; /* nothing to apply */
  cmsHPROFILE in = cmsOpenProfileFromMem(icc, (cmsUInt32Number)icc_len);
  cmsHPROFILE out = gray ? srgb_gray() : cmsCreate_sRGBProfile();
  cmsUInt32Number type = lcms_type(img->channels, img->depth);
  cmsHTRANSFORM t =
      in && out ? cmsCreateTransform(in, type, out, type, INTENT_PERCEPTUAL, cmsFLAGS_COPY_ALPHA)
                : NULL;
  if (in) cmsCloseProfile(in);
  if (out) cmsCloseProfile(out);
  if (t == NULL) return 0; /* a profile lcms2 cannot use is ignored, as a broken one is */
  size_t row = (size_t)img->width * (size_t)img->channels * (size_t)(img->depth / 8);
  int y = 0;
  for (; y < img->height && !codec_stopped(); y++) {
    uint8_t *p = img->pixels + (size_t)y * row;
    cmsDoTransform(t, p, p, (cmsUInt32Number)img->width);
  }
  cmsDeleteTransform(t);
  return y == img->height ? 1 : -1;
}

/* CMYK to sRGB without a profile: each channel (1 - C)(1 - K), the usual naive formula. */
static void naive_cmyk(const uint8_t *src, uint8_t *dst, size_t n, int inverted) {
  for (size_t i = 0; i < n; i++, src += 4, dst += 3) {
    unsigned k = inverted ? src[3] : 255u - src[3];
    for (int c = 0; c < 3; c++) {
      unsigned v = inverted ? src[c] : 255u - src[c];
      dst[c] = (uint8_t)((v * k + 127) / 255);
    }
  }
}

enum codec_status codec_cmyk_to_rgb(uint8_t *pixels, size_t width, size_t height, int inverted,
                                    const uint8_t *icc, size_t icc_len) {
  cmsHTRANSFORM t = NULL;
  if (codec_icc_colours(icc, icc_len) == 4) {
    cmsHPROFILE in = cmsOpenProfileFromMem(icc, (cmsUInt32Number)icc_len);
    cmsHPROFILE out = cmsCreate_sRGBProfile();
    if (in && out)
      t = cmsCreateTransform(in, inverted ? TYPE_CMYK_8_REV : TYPE_CMYK_8, out, TYPE_RGB_8,
                             INTENT_PERCEPTUAL, 0);
    if (in) cmsCloseProfile(in);
    if (out) cmsCloseProfile(out);
  }
  uint8_t *row = codec_malloc(width * 3);
  if (row == NULL) {
    if (t) cmsDeleteTransform(t);
    return CODEC_NOMEM;
  }
  /* Row y of RGB ends where CMYK row y + 1 starts, so each row can be written in place. */
  size_t y = 0;
  for (; y < height && !codec_stopped(); y++) {
    const uint8_t *src = pixels + y * width * 4;
    if (t)
      cmsDoTransform(t, src, row, (cmsUInt32Number)width);
    else
      naive_cmyk(src, row, width, inverted);
    memcpy(pixels + y * width * 3, row, width * 3);
  }
  codec_free(row);
  if (t) cmsDeleteTransform(t);
  return y == height ? CODEC_OK : CODEC_CANCELLED;
}
