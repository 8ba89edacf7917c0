/* The format table and the codecs' front: the descriptors the format files fill
 * (codec_<name>_format), indexed by enum codec_format; what is read from them (names, media types,
 * extensions, the sniff, the header probe, the cost model's terms); and codec_decode and
 * codec_encode (and codec_encode_held), which check their arguments and hand the work to the
 * format's descriptor. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codecs_int.h"

static const struct codec_format_desc *const table[CODEC_NFORMATS] = {
#define X(id, name) [CODEC_##id] = &codec_##name##_format,
    CODEC_FORMATS(X)
#undef X
};

const struct codec_format_desc *codec_format(enum codec_format f) {
  return f > CODEC_NONE && f < CODEC_NFORMATS ? table[f] : NULL;
}

enum codec_format codec_sniff(const uint8_t *buf, size_t len) {
  if (buf == NULL) return CODEC_NONE;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++)
    if (table[f]->sniff && table[f]->sniff(buf, len)) return (enum codec_format)f;
  return CODEC_NONE;
}

const char *codec_format_name(enum codec_format f) {
  const struct codec_format_desc *d = codec_format(f);
  return d ? d->name : NULL;
}

const char *codec_decoder(const uint8_t *buf, size_t len) {
  const struct codec_format_desc *d = codec_format(codec_sniff(buf, len));
  return !d ? NULL : d->decoder ? d->decoder(buf, len) : d->lib;
}

const char *codec_mime(enum codec_format f) {
  const struct codec_format_desc *d = codec_format(f);
  return d ? d->mime : NULL;
}

/* Whether the space-separated list has the word w[0..n), compared exactly or without case. */
static int listed(const char *list, const char *w, size_t n, int anycase) {
  for (const char *p = list; p && *p;) {
    size_t k = strcspn(p, " ");
    if (k == n && (anycase ? strncasecmp(p, w, n) : strncmp(p, w, n)) == 0) return 1;
    p += k + (p[k] == ' ');
  }
  return 0;
}

enum codec_format codec_format_from_name(const char *name) {
  if (name == NULL) return CODEC_NONE;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++)
    if (strcmp(table[f]->name, name) == 0 || listed(table[f]->exts, name, strlen(name), 0))
      return (enum codec_format)f;
  return CODEC_NONE;
}

enum codec_format codec_format_from_path(const char *path) {
  const char *dot = path ? strrchr(path, '.') : NULL;
  if (!dot || strchr(dot, '/')) return CODEC_NONE;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++)
    if (listed(table[f]->exts, dot + 1, strlen(dot + 1), 1)) return (enum codec_format)f;
  return CODEC_NONE;
}

enum codec_format codec_format_from_mime(const char *content_type) {
  if (content_type == NULL) return CODEC_NONE;
  while (*content_type == ' ' || *content_type == '\t') content_type++;
  size_t n = strcspn(content_type, ";");
  while (n > 0 && (content_type[n - 1] == ' ' || content_type[n - 1] == '\t')) n--;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    const struct codec_format_desc *d = table[f];
    if (d->decode && (listed(d->mime, content_type, n, 1) || listed(d->mimes, content_type, n, 1)))
      return (enum codec_format)f;
  }
  return CODEC_NONE;
}

char *codec_format_list(char *buf, size_t n, int (*want)(const struct codec_format_desc *d),
                        const char *(*word)(const struct codec_format_desc *d), const char *last) {
  int total = 0, k = 0;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) total += want(table[f]) != 0;
  buf[0] = 0;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    if (!want(table[f])) continue;
    size_t at = strlen(buf);
    snprintf(buf + at, n - at, "%s%s", k == 0 ? "" : k == total - 1 ? last : ", ", word(table[f]));
    k++;
  }
  return buf;
}

static int readable(const struct codec_format_desc *d) {
  return d->decode != NULL;
}
static int writable(const struct codec_format_desc *d) {
  return d->encode != NULL;
}
static const char *title_of(const struct codec_format_desc *d) {
  return d->title;
}
static const char *mime_of(const struct codec_format_desc *d) {
  return d->mime;
}
static const char *name_of(const struct codec_format_desc *d) {
  return d->name;
}

char *codec_inputs_text(char *buf, size_t n, int mime) {
  return codec_format_list(buf, n, readable, mime ? mime_of : title_of, " or ");
}

enum codec_status codec_icc_read(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
  const struct codec_format_desc *d = codec_format(codec_sniff(buf, len));
  *icc = NULL;
  *icc_len = 0;
  return d && d->icc ? d->icc(buf, len, icc, icc_len) : CODEC_OK;
}

int codec_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  const struct codec_format_desc *d = codec_format(codec_sniff(buf, len));
  return d && d->probe ? d->probe(buf, len, out) : -1;
}

double codec_decode_cost_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  const struct codec_format_desc *d = codec_format(codec_sniff(buf, len));
  return d && d->decode_ns ? d->decode_ns(buf, len, s) : 0;
}

double codec_encode_cost_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  const struct codec_format_desc *d = codec_format(o->format);
  return d && d->encode_ns ? d->encode_ns(o, s) : 0;
}

/* ---- decode and encode ---- */

enum codec_status codec_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                               struct codec_image *out, char *msg, size_t msglen) {
  enum codec_status st;
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  if (out == NULL) {
    codec_msgf(msg, msglen, "codec_decode was called without an output image");
    return CODEC_UNSUPPORTED;
  }
  memset(out, 0, sizeof *out);
  enum codec_format f = codec_sniff(buf, len);
  const struct codec_format_desc *d = codec_format(f);
  if (d && d->decode) {
    st = d->decode(buf, len, lim, out, msg, msglen);
    if (st == CODEC_OK) out->format = f;
  } else {
    if (buf == NULL || len == 0) codec_msgf(msg, msglen, "the image data is empty");
    st = CODEC_UNKNOWN;
  }
  if (st != CODEC_OK) {
    codec_image_free(out);
    memset(out, 0, sizeof *out);
    if (msg != NULL && msglen > 0 && msg[0] == '\0')
      codec_msgf(msg, msglen, "%s", codec_status_msg(st));
  }
  return st;
}

/* Says why img cannot be encoded, or returns NULL when it can be. */
static const char *encode_problem(const struct codec_image *img) {
  if (img == NULL || img->pixels == NULL) return "there is no image to encode";
  if (img->width < 1 || img->height < 1) return "the image has a width or height of zero";
  if (img->channels < 1 || img->channels > 4) return "the image must have 1 to 4 channels";
  if (img->depth != 8 && img->depth != 16) return "the image must have 8- or 16-bit samples";
  return NULL;
}

/* Whether o can be used; if not, says why in msg. */
static int options_ok(const struct codec_encode_opts *o, char *msg, size_t msglen) {
  const struct codec_format_desc *d = codec_format(o->format);
  char names[160];
  if (!d || !d->encode)
    codec_msgf(msg, msglen, "the output format must be %s",
               codec_format_list(names, sizeof names, writable, name_of, " or "));
  else if (o->format == CODEC_PNG && (o->compression < 0 || o->compression > 9))
    codec_msgf(msg, msglen, "PNG compression %d is outside 0..9", o->compression);
  else if (o->format == CODEC_PNG &&
           (o->png_filter < CODEC_PNG_FILTER_AUTO || o->png_filter > CODEC_PNG_FILTER_ADAPTIVE))
    codec_msgf(msg, msglen, "PNG filter %d is not one of codec_png_filter", (int)o->png_filter);
  else if (o->effort_set && (o->effort < 0 || o->effort > 6))
    codec_msgf(msg, msglen, "%s effort %d is outside 0..6", d->title, o->effort);
  else if (d->quality && !(d->lossless && o->lossless) && (o->quality < 1 || o->quality > 100))
    codec_msgf(msg, msglen, "%s quality %d is outside 1..100", d->title, o->quality);
  else
    return 1;
  return 0;
}

/* o with its ICC profile dropped unless it describes the colours of d's file of img. */
static struct codec_encode_opts with_icc(const struct codec_format_desc *d,
                                         const struct codec_image *img,
                                         const struct codec_encode_opts *o) {
  struct codec_encode_opts eo = *o;
  int colours = d->rgb_only || img->channels >= 3 ? 3 : 1; /* what the file holds */
  if (codec_icc_colours(o->icc, o->icc_len) != colours) eo.icc = NULL, eo.icc_len = 0;
  return eo;
}

enum codec_status codec_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                               uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  if (out == NULL || outlen == NULL || o == NULL) {
    codec_msgf(msg, msglen, "codec_encode was called without options or an output buffer");
    return CODEC_UNSUPPORTED;
  }
  *out = NULL;
  *outlen = 0;
  const char *problem = encode_problem(img);
  if (problem != NULL) {
    codec_msgf(msg, msglen, "%s", problem);
    return CODEC_UNSUPPORTED;
  }
  if (!options_ok(o, msg, msglen)) return CODEC_UNSUPPORTED;
  const struct codec_format_desc *d = codec_format(o->format);
  struct codec_encode_opts eo = with_icc(d, img, o);
  const char *ran = NULL; /* set by an encoder that has more than one of its own */
  eo.encoder = &ran;
  enum codec_status st = d->encode(img, &eo, out, outlen, msg, msglen);
  if (st == CODEC_OK && o->encoder) *o->encoder = ran ? ran : d->lib;
  return st;
}

enum codec_status codec_encode_held(const struct codec_image *img,
                                    const struct codec_encode_opts *o,
                                    const struct codec_vp8_analyser *an, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  if (out == NULL || outlen == NULL) return CODEC_UNSUPPORTED;
  *out = NULL;
  *outlen = 0;
  const struct codec_format_desc *d = o ? codec_format(o->format) : NULL;
  if (img == NULL || an == NULL || !d || !d->encode_held || !options_ok(o, NULL, 0))
    return CODEC_UNSUPPORTED; /* codec_encode says why, from the pixels */
  struct codec_encode_opts eo = with_icc(d, img, o);
  enum codec_status st = d->encode_held(img, &eo, an, out, outlen, msg, msglen);
  if (st == CODEC_OK && o->encoder) *o->encoder = an->name;
  return st;
}

void codec_pictures_free(struct codec_pictures *p) {
  codec_free(p->stream), codec_free(p->pic);
  p->stream = NULL, p->pic = NULL, p->n = 0;
}

void codec_image_free(struct codec_image *img) {
  if (img == NULL) return;
  codec_free(img->pixels);
  img->pixels = NULL;
}

enum codec_status codec_decode_file(const char *path, struct codec_image *out) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long n = -1;
  memset(out, 0, sizeof(*out));
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
    buf = codec_malloc((size_t)n + 1);
  enum codec_status st = CODEC_UNKNOWN;
  if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n)
    st = codec_decode(buf, (size_t)n, &(struct codec_limits){0, 0, 0}, out, NULL, 0);
  codec_free(buf);
  if (f) fclose(f);
  return st;
}
