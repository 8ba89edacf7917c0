/* unit_codec_pngdec: png.c's own path through a PNG's pixel data (codecs/png_unfilter.c and
 * codec_png_inflate in png_inflate.c) against libpng's decode of the same files.
 *
 * The reference is libpng called here directly, with its checks on (CRCs, Adler-32) and its own
 * filters, sharing no code with png.c's path. Files come from three makers: rows of random bytes
 * under random filter types, compressed here with zlib (every filter on every row position, the
 * average and paeth filters on the first row, runs of paeth rows that png_unfilter.c makes two at
 * a time); blurd's encoder at every level and filter strategy; and the fixtures, most of them
 * written by PIL (astronaut.png: 97 IDAT chunks, iCCP, tEXt). Every colour type and depth the path
 * takes (8- and 16-bit gray, gray+alpha, RGB, RGBA) at widths 1, 2, 3, 4 and odd, heights from 1.
 * Damaged files (bad filter bytes, short, long and broken streams, cut files) must be
 * CODEC_CORRUPT with the sentence that names the damage. */
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <zlib.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "test.h"
#include "fixtures.h"

/* A PNG image's shape: channels and depth give the colour type. */
struct shape {
  int w, h, channels, depth;
};

static unsigned bytes_pp(const struct shape *s) {
  return (unsigned)(s->channels * s->depth / 8);
}

static int host_le(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* ---- libpng, the reference ---- */

struct mem {
  const uint8_t *p;
  size_t n, pos;
};

static void mem_read(png_structp png, png_bytep out, size_t n) {
  struct mem *m = png_get_io_ptr(png);
  if (n > m->n - m->pos) png_error(png, "end of file");
  memcpy(out, m->p + m->pos, n);
  m->pos += n;
}

static void quiet(png_structp png, png_const_charp text) {
  (void)png, (void)text;
}

/* libpng's decode of buf (gray, gray+alpha, RGB or RGBA; host byte order), or NULL when libpng
 * refuses the file. The shape goes to *s. */
static uint8_t *libpng_decode(const uint8_t *buf, size_t len, struct shape *s) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, quiet);
  png_infop info = png_create_info_struct(png);
  struct mem m = {buf, len, 0};
  uint8_t *volatile px = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(px);
    free(rows);
    return NULL;
  }
  png_set_read_fn(png, &m, mem_read);
  png_read_info(png, info);
  if (png_get_bit_depth(png, info) == 16 && host_le()) png_set_swap(png);
  png_read_update_info(png, info);
  s->w = (int)png_get_image_width(png, info);
  s->h = (int)png_get_image_height(png, info);
  s->channels = png_get_channels(png, info);
  s->depth = png_get_bit_depth(png, info);
  size_t stride = png_get_rowbytes(png, info);
  px = malloc(stride * (size_t)s->h);
  rows = malloc(sizeof(png_bytep) * (size_t)s->h);
  ASSERT(px != NULL && rows != NULL);
  for (int y = 0; y < s->h; y++) rows[y] = px + (size_t)y * stride;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  return px;
}

/* png.c's decode of buf equals libpng's, sample for sample. */
static void expect_as_libpng(const uint8_t *buf, size_t len, const char *what) {
  struct shape s;
  uint8_t *want = libpng_decode(buf, len, &s);
  if (want == NULL) TEST_FAIL("%s: libpng refuses the file", what);
  struct codec_image img = {0};
  char msg[256] = "";
  enum codec_status st = codec_png_decode(buf, len, NULL, &img, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("%s: status %d (%s)", what, (int)st, msg);
  if (img.width != s.w || img.height != s.h || img.channels != s.channels || img.depth != s.depth)
    TEST_FAIL("%s: %dx%d x%d %d-bit, libpng %dx%d x%d %d-bit", what, img.width, img.height,
              img.channels, img.depth, s.w, s.h, s.channels, s.depth);
  if (memcmp(img.pixels, want, (size_t)s.w * s.h * bytes_pp(&s)) != 0)
    TEST_FAIL("%s: other samples than libpng's", what);
  codec_image_free(&img);
  free(want);
}

/* ---- PNG files from filtered rows ---- */

struct file {
  uint8_t *p;
  size_t n;
};

static void put(struct file *f, const void *data, size_t n) {
  f->p = realloc(f->p, f->n + n + 1);
  ASSERT(f->p != NULL);
  if (n) memcpy(f->p + f->n, data, n);
  f->n += n;
}

static void put32(struct file *f, uint32_t v) {
  uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
  put(f, b, 4);
}

static void put_chunk(struct file *f, const char *type, const uint8_t *data, size_t n) {
  put32(f, (uint32_t)n);
  size_t at = f->n;
  put(f, type, 4);
  put(f, data, n);
  put32(f, (uint32_t)crc32(0, f->p + at, (uInt)(n + 4)));
}

/* The file of shape s whose IDAT data is the zlib stream z (zn bytes), cut into chunks of at most
 * idat_max bytes; `after` (NULL or a chunk type) is an empty chunk put between the last IDAT and
 * IEND. */
static struct file png_file(const struct shape *s, const uint8_t *z, size_t zn, size_t idat_max,
                            const char *after) {
  static const int colour[5] = {0, 0, 4, 2, 6};
  struct file f = {NULL, 0};
  put(&f, "\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {0};
  for (int i = 0; i < 4; i++) {
    ihdr[i] = (uint8_t)((uint32_t)s->w >> (24 - 8 * i));
    ihdr[4 + i] = (uint8_t)((uint32_t)s->h >> (24 - 8 * i));
  }
  ihdr[8] = (uint8_t)s->depth;
  ihdr[9] = (uint8_t)colour[s->channels];
  put_chunk(&f, "IHDR", ihdr, 13);
  size_t at = 0;
  do {
    size_t m = zn - at < idat_max ? zn - at : idat_max;
    put_chunk(&f, "IDAT", z + at, m);
    at += m;
  } while (at < zn);
  if (after) put_chunk(&f, after, NULL, 0);
  put_chunk(&f, "IEND", NULL, 0);
  return f;
}

/* zlib's stream of raw[0..n) at level (malloc'd; its length in *zn). */
static uint8_t *zlib_of(const uint8_t *raw, size_t n, int level, size_t *zn) {
  uLongf cap = compressBound((uLong)n);
  uint8_t *z = malloc(cap);
  ASSERT(z != NULL);
  ASSERT_INT(compress2(z, &cap, raw, (uLong)n, level), ==, Z_OK);
  *zn = cap;
  return z;
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 1103515245u + 12345u;
  return rng_state >> 8;
}

/* Random filtered rows for s: filter types from `filters` (one of them a row, chosen at random
 * when mixed is set, else the row's index modulo its length), and random bytes that are smooth
 * enough for every predictor to matter. */
static uint8_t *filtered_rows(const struct shape *s, const char *filters, int mixed) {
  size_t stride = (size_t)s->w * bytes_pp(s), n = (stride + 1) * (size_t)s->h;
  uint8_t *raw = malloc(n);
  ASSERT(raw != NULL);
  size_t nf = strlen(filters);
  for (int y = 0; y < s->h; y++) {
    uint8_t *r = raw + (size_t)y * (stride + 1);
    r[0] = (uint8_t)(filters[mixed ? rnd() % nf : (size_t)y % nf] - '0');
    for (size_t i = 1; i <= stride; i++) r[i] = (uint8_t)(rnd() % 4 ? rnd() % 9 - 4 : rnd());
  }
  return raw;
}

static const struct {
  int channels, depth;
} kinds[] = {{1, 8}, {2, 8}, {3, 8}, {4, 8}, {1, 16}, {2, 16}, {3, 16}, {4, 16}};
#define NKINDS (sizeof kinds / sizeof kinds[0])

/* codec_png_unfilter, codec_png_unfilter_c and png.c's decode of the file against libpng, for
 * rows of every kind and size under the given filter types. */
static void check_rows(const struct shape *s, const char *filters, int mixed) {
  char what[96];
  snprintf(what, sizeof what, "%dx%d x%d %d-bit, filters %s%s", s->w, s->h, s->channels, s->depth,
           filters, mixed ? " mixed" : "");
  uint8_t *raw = filtered_rows(s, filters, mixed);
  size_t stride = (size_t)s->w * bytes_pp(s), n = (stride + 1) * (size_t)s->h, zn;
  uint8_t *z = zlib_of(raw, n, 6, &zn);
  struct file f = png_file(s, z, zn, 1 + rnd() % 4096, NULL);
  struct shape got;
  uint8_t *want = libpng_decode(f.p, f.n, &got);
  if (want == NULL) TEST_FAIL("%s: libpng refuses the file", what);
  expect_as_libpng(f.p, f.n, what);
  for (int plain = 0; plain < 2; plain++) { /* both unfilters, on the rows after the room */
    size_t room = CODEC_PNG_ROOM_ROWS * stride;
    uint8_t *buf = malloc(room + n);
    ASSERT(buf != NULL);
    memcpy(buf + room, raw, n);
    enum codec_status st = (plain ? codec_png_unfilter_c : codec_png_unfilter)(
        buf, (size_t)s->h, stride, bytes_pp(s), s->depth == 16 && host_le(), NULL, 0);
    ASSERT_INT(st, ==, CODEC_OK);
    if (memcmp(buf, want, stride * (size_t)s->h) != 0)
      TEST_FAIL("%s: codec_png_unfilter%s differs from libpng", what, plain ? "_c" : "");
    free(buf);
  }
  free(want);
  free(f.p);
  free(z);
  free(raw);
}

/* Every filter alone, runs of paeth (made in pairs) broken by others, and random mixtures, for
 * every kind, at widths 1 to 5, odd and wide ones, and heights 1 to 9. */
static void test_filters_against_libpng(void) {
  static const int widths[] = {1, 2, 3, 4, 5, 7, 13, 64, 97};
  static const int heights[] = {1, 2, 3, 4, 6, 9};
  static const char *filters[] = {"0", "1", "2", "3", "4", "44442", "4434", "4444443", "01234"};
  for (size_t k = 0; k < NKINDS; k++)
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
      for (size_t hi = 0; hi < sizeof heights / sizeof *heights; hi++)
        for (size_t fi = 0; fi < sizeof filters / sizeof *filters; fi++) {
          struct shape s = {widths[wi], heights[hi], kinds[k].channels, kinds[k].depth};
          check_rows(&s, filters[fi], 0);
          if (fi == sizeof filters / sizeof *filters - 1) check_rows(&s, filters[fi], 1);
        }
}

/* ---- blurd's encoder and the fixtures ---- */

/* A w x h image of the given kind from the photograph's top-left corner; 16-bit samples get a
 * low byte of their own, so that byte order shows. */
static struct codec_image from_photo(const struct codec_image *photo, int w, int h, int channels,
                                     int depth) {
  struct codec_image img = {.width = w, .height = h, .channels = channels, .depth = depth};
  size_t bpp = (size_t)channels * (size_t)(depth / 8);
  img.pixels = malloc((size_t)w * (size_t)h * bpp);
  ASSERT(img.pixels != NULL);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < channels; c++) {
        unsigned v = photo->pixels[((size_t)y * (size_t)photo->width + (size_t)x) * 3 + (c % 3)];
        if (c == 3) v = (unsigned)(x * 7 + y * 3) & 255; /* alpha */
        size_t at = ((size_t)y * (size_t)w + (size_t)x) * (size_t)channels + (size_t)c;
        if (depth == 8) {
          img.pixels[at] = (uint8_t)v;
        } else {
          uint16_t v16 = (uint16_t)(v << 8 | ((unsigned)(x * 31 + y * 17 + c) & 255));
          memcpy(img.pixels + 2 * at, &v16, 2);
        }
      }
  return img;
}

/* blurd's encoder at every level (each with its own filter) and with each filter strategy at
 * level 6; png.c's decode must give back the image, as libpng's does. */
static void test_encoder_files(void) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg");
  static const int sizes[][2] = {{1, 1}, {2, 1}, {3, 5}, {97, 1}, {97, 33}, {640, 24}};
  for (size_t k = 0; k < NKINDS; k++)
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
      struct codec_image img =
          from_photo(&photo, sizes[si][0], sizes[si][1], kinds[k].channels, kinds[k].depth);
      for (int run = 0; run < 10 + 5; run++) {
        struct codec_encode_opts o = {.format = CODEC_PNG,
                                      .compression = run < 10 ? run : 6,
                                      .png_filter = run < 10 ? CODEC_PNG_FILTER_AUTO
                                                             : (enum codec_png_filter)(run - 9)};
        uint8_t *png;
        size_t len;
        char what[96];
        snprintf(what, sizeof what, "blurd's %dx%d x%d %d-bit, level %d filter %d", img.width,
                 img.height, img.channels, img.depth, o.compression, (int)o.png_filter);
        ASSERT_INT(codec_encode(&img, &o, &png, &len, NULL, 0), ==, CODEC_OK);
        expect_as_libpng(png, len, what);
        struct codec_image back;
        ASSERT_INT(codec_png_decode(png, len, NULL, &back, NULL, 0), ==, CODEC_OK);
        if (memcmp(back.pixels, img.pixels,
                   (size_t)img.width * img.height * img.channels * (img.depth / 8)) != 0)
          TEST_FAIL("%s: not the encoded image", what);
        codec_image_free(&back);
        free(png);
      }
      free(img.pixels);
    }
  codec_image_free(&photo);
}

/* The fixtures the path takes, from PIL, skimage and make-fixtures.py's own writer: filter types
 * chosen by PIL per row, many IDAT chunks, iCCP, tEXt, tIME and iTXt chunks before and after. */
static void test_fixtures(void) {
  static const char *names[] = {
      "camera.png", "astronaut.png",  "chelsea.png",      "coffee.png", "logo.png",
      "gray16.png", "gray_alpha.png", "gray_alpha16.png", "rgb16.png",  "rgba16.png",
      "p3.png",     "p3_srgb.png",    "red_square.png"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t len;
    uint8_t *png = fixture_bytes(names[i], &len);
    struct codec_png_layout l;
    ASSERT_INT(codec_png_layout(png, len, &l), ==, 0);
    if (!l.tidy || l.trns) TEST_FAIL("%s: not a file png.c unfilters itself", names[i]);
    expect_as_libpng(png, len, names[i]);
    free(png);
  }
}

/* ---- damaged files ---- */

/* png.c's verdict on the file: the status, and msg must contain `says`. */
static void expect_refused(const uint8_t *png, size_t len, enum codec_status want,
                           const char *says) {
  struct codec_image img = {0};
  char msg[256] = "";
  enum codec_status st = codec_png_decode(png, len, NULL, &img, msg, sizeof msg);
  if (st != want || strstr(msg, says) == NULL)
    TEST_FAIL("status %d (%s), expected %d with \"%s\"", (int)st, msg, (int)want, says);
  ASSERT(img.pixels == NULL);
}

/* A 13x4 RGB file whose filtered rows are raw (n bytes, the image's 4 x 40 or not). */
static struct file rgb_file(const uint8_t *raw, size_t n, const char *after) {
  size_t zn;
  uint8_t *z = zlib_of(raw, n, 6, &zn);
  struct shape s = {13, 4, 3, 8};
  struct file f = png_file(&s, z, zn, 7, after);
  free(z);
  return f;
}

static void test_damaged(void) {
  struct shape s = {13, 4, 3, 8};
  uint8_t *raw = filtered_rows(&s, "4", 0);
  size_t n = 4 * 40;
  raw[2 * 40] = 5; /* row 2's filter type */
  struct file f = rgb_file(raw, n, NULL);
  expect_refused(f.p, f.n, CODEC_CORRUPT,
                 "the PNG data is corrupt: row 2 has filter type 5 (PNG has 0 to 4)");
  free(f.p);
  raw[2 * 40] = 255;
  f = rgb_file(raw, n, NULL);
  expect_refused(f.p, f.n, CODEC_CORRUPT, "row 2 has filter type 255");
  free(f.p);
  raw[2 * 40] = 1;

  f = rgb_file(raw, n - 1, NULL); /* one byte short */
  expect_refused(f.p, f.n, CODEC_CORRUPT,
                 "the PNG pixel data is corrupt: it inflates to 159 bytes where its rows take 160");
  free(f.p);
  uint8_t *longer = calloc(n + 1, 1);
  memcpy(longer, raw, n);
  f = rgb_file(longer, n + 1, NULL); /* one byte long */
  expect_refused(f.p, f.n, CODEC_CORRUPT, "it inflates to more than the 160 bytes its rows take");
  free(f.p);
  free(longer);

  f = rgb_file(raw, n, NULL); /* IDATs of 7 bytes: the first holds the zlib header */
  uint8_t *first = f.p + 33 + 8;
  first[0] = 0x79; /* CM 9 */
  expect_refused(f.p, f.n, CODEC_CORRUPT, "it does not start with a zlib header");
  first[0] = 0x78;
  first[2] |= 6; /* BTYPE 3: a reserved block type */
  expect_refused(f.p, f.n, CODEC_CORRUPT, "its zlib stream is damaged");
  free(f.p);

  f = rgb_file(raw, n, NULL);
  for (size_t cut = 33; cut < f.n; cut += 5) /* files cut anywhere are refused, never read */
    expect_refused(f.p, cut, CODEC_CORRUPT, "PNG");
  free(f.p);

  f = rgb_file(raw, n, "tEXt"); /* an ancillary chunk after the data: decoded */
  expect_as_libpng(f.p, f.n, "tEXt after IDAT");
  free(f.p);
  f = rgb_file(raw, n, "ZZZZ"); /* an unknown critical chunk: libpng's verdict */
  expect_refused(f.p, f.n, CODEC_CORRUPT, "libpng");
  free(f.p);
  free(raw);
}

/* The limits hold on this path as on libpng's: a file the path would take, over the pixel limit
 * or the width limit, is CODEC_TOO_LARGE before anything is allocated; under them it decodes. */
static void test_limits(void) {
  struct shape s = {97, 33, 3, 8};
  uint8_t *raw = filtered_rows(&s, "4", 0);
  size_t zn;
  uint8_t *z = zlib_of(raw, (size_t)33 * (97 * 3 + 1), 6, &zn);
  struct file f = png_file(&s, z, zn, 4096, NULL);
  static const struct codec_limits over[] = {{0, 0, 97 * 33 - 1}, {96, 0, 0}, {0, 32, 0}};
  for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
    struct codec_image img = {0};
    char msg[256] = "";
    codec_test_fail_alloc(0);
    ASSERT_INT(codec_png_decode(f.p, f.n, &over[i], &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
    ASSERT_INT(codec_test_fail_alloc(-1), ==, 0); /* still armed: nothing was allocated */
    ASSERT(img.pixels == NULL && msg[0] != '\0');
  }
  struct codec_limits fits = {97, 33, 97 * 33};
  struct codec_image img = {0};
  ASSERT_INT(codec_png_decode(f.p, f.n, &fits, &img, NULL, 0), ==, CODEC_OK);
  codec_image_free(&img);
  free(f.p);
  free(z);
  free(raw);
}

int main(void) {
  RUN(test_filters_against_libpng);
  RUN(test_encoder_files);
  RUN(test_fixtures);
  RUN(test_damaged);
  RUN(test_limits);
  fprintf(stderr, "unit_codec_pngdec: all tests passed\n");
  return 0;
}
