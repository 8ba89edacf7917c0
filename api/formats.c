/* What the api reads from the codecs' format table (codecs/codecs.h): format='s choices and the
 * output parameters' docs, the media types a raw upload may say, the output format Accept asks
 * for, and the command line's file names. Made once, before main, from the table. */
#include "api_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *params_format_choices[CODEC_NFORMATS + 2]; /* "input", then the pictures written */
const char *params_map_formats[CODEC_NFORMATS + 1];    /* the outputs exact for 16-bit maps */
char params_map_default[16];
char params_format_doc[512], params_quality_doc[320], params_lossless_doc[320];

static const char *title_of(const struct codec_format_desc *d) {
  return d->title;
}

static int picture_out(const struct codec_format_desc *d) {
  return d->encode && !d->data;
}
static int lossy_out(const struct codec_format_desc *d) {
  return d->encode && d->quality;
}
static int lossless_out(const struct codec_format_desc *d) {
  return d->encode && d->lossless;
}
static int answered_otherwise(const struct codec_format_desc *d) {
  return d->decode && d->as != CODEC_NONE;
}

/* format='s sentence: what input keeps, and the uploads it answers in another format. */
static void format_doc(void) {
  char *p = params_format_doc;
  size_t n = sizeof(params_format_doc);
  int at = snprintf(p, n, "Output format; 'input' answers in the upload's format");
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS && at > 0 && (size_t)at < n; f++) {
    const struct codec_format_desc *d = codec_format(f);
    if (answered_otherwise(d))
      at += snprintf(p + at, n - at, ", %s as %s", d->title, codec_format(d->as)->title);
  }
  if (at > 0 && (size_t)at < n)
    snprintf(p + at, n - at, ", or in the type Accept prefers among the outputs.");
}

__attribute__((constructor)) static void formats_from_table(void) {
  int k = 0, m = 0;
  params_format_choices[k++] = "input";
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    const struct codec_format_desc *d = codec_format(f);
    if (picture_out(d)) params_format_choices[k++] = d->name;
    if (d->encode && d->exact16) params_map_formats[m++] = d->name;
    if (d->encode && d->exact16 && !d->data && !params_map_default[0])
      snprintf(params_map_default, sizeof(params_map_default), "%s", d->name);
  }
  format_doc();
  char list[128];
  codec_format_list(list, sizeof(list), lossy_out, title_of, " and ");
  snprintf(params_quality_doc, sizeof(params_quality_doc),
           "Quality of the lossy outputs (%s); ignored for lossless ones.", list);
  codec_format_list(list, sizeof(list), lossless_out, title_of, " and ");
  snprintf(params_lossless_doc, sizeof(params_lossless_doc),
           "%s only: lossless, every sample exact (quality is not used); false is lossy at "
           "quality. Ignored for the other outputs.",
           list);
}

int api_upload_type_ok(const char *content_type) {
  return codec_format_from_mime(content_type) != CODEC_NONE ||
         http_media_is(content_type, "application/octet-stream");
}

enum codec_format api_output_format(enum codec_format input, const char *accept) {
  const struct codec_format_desc *in = codec_format(input);
  enum codec_format own = in && in->as != CODEC_NONE ? in->as : input;
  if (!accept) return own;
  int best = http_accept_q(accept, codec_mime(own));
  enum codec_format choice = own;
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    if (!picture_out(codec_format(f))) continue;
    int q = http_accept_q(accept, codec_mime(f));
    if (q > best) best = q, choice = (enum codec_format)f;
  }
  return choice;
}

const char *api_format_of_path(const char *path) {
  const struct codec_format_desc *d = codec_format(codec_format_from_path(path));
  return d && d->encode ? d->name : NULL;
}

const char *api_media_type(const uint8_t *body, size_t len) {
  const char *m = codec_mime(codec_sniff(body, len));
  return m ? m : "application/octet-stream";
}

/* ".png" for a format whose first extension is png. */
static const char *dot_extension(const struct codec_format_desc *d) {
  static _Thread_local char ext[16];
  snprintf(ext, sizeof(ext), ".%.*s", (int)strcspn(d->exts, " "), d->exts);
  return ext;
}

const char *api_extension_of(const char *media) {
  const struct codec_format_desc *d = codec_format(CODEC_RAW); /* bytes of no format: raw */
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++)
    if (media && codec_format(f)->encode && strcasecmp(codec_format(f)->mime, media) == 0)
      d = codec_format(f);
  return dot_extension(d) + 1;
}

static int writable(const struct codec_format_desc *d) {
  return d->encode != NULL;
}

char *api_output_extensions(char *buf, size_t n) {
  return codec_format_list(buf, n, writable, dot_extension, " or ");
}
