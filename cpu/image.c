/* Whole-image blurring on the CPU: split an interleaved image into double planes, filter each
 * plane along x then y, merge back with rounding, and optionally measure the PSNR against the
 * exact reference.
 *
 * Every 1-D pass runs down the columns of a plane, STRIP columns at a time, so the inner loops
 * run across contiguous columns and vectorise; the x pass works on a transposed plane. A plane
 * is loaded already transposed, so one transpose per channel suffices. */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STRIP     16 /* columns filtered side by side */
/* Differences below this many levels are the double-precision reference's own rounding: they
 * count as none, so an exactly right output scores an infinite PSNR. */
#define REF_NOISE 1e-6

enum filter_kind { FILTER_FIR, FILTER_YVV };

struct filter { /* one method, ready to run on strips */
  enum filter_kind kind;
  int radius;         /* FIR: kernel radius */
  double *w;          /* FIR: w[0..radius], owned */
  double *tail;       /* FIR: tail[j] = w[j] + ... + w[radius], j in [0, radius+1], owned */
  struct cpu_yvv yvv; /* YVV coefficients */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void filter_free(struct filter *f) {
  free(f->w);
  free(f->tail);
  f->w = f->tail = NULL;
}

static int filter_init_fir(struct filter *f, double sigma, double truncate) {
  memset(f, 0, sizeof(*f));
  f->kind = FILTER_FIR;
  f->radius = cpu_gauss_radius(sigma, truncate);
  f->w = malloc((size_t)(f->radius + 1) * sizeof(double));
  f->tail = malloc((size_t)(f->radius + 2) * sizeof(double));
  if (!f->w || !f->tail) {
    filter_free(f);
    return -1;
  }
  cpu_gauss_kernel(sigma, f->radius, f->w);
  f->tail[f->radius + 1] = 0;
  for (int j = f->radius; j >= 0; j--) f->tail[j] = f->tail[j + 1] + f->w[j];
  return 0;
}

static int filter_init(struct filter *f, const struct cpu_blur *b) {
  switch (b->method) {
  case CPU_YVV:
    memset(f, 0, sizeof(*f));
    f->kind = FILTER_YVV;
    return cpu_yvv_coeffs(b->sigma, b->coeffs, &f->yvv);
  case CPU_SEPARABLE:
  default:
    return filter_init_fir(f, b->sigma, CPU_TRUNCATE);
  }
}

/* The hot loops run across STRIP columns; an AVX2 clone is picked at run time where the CPU has
 * it. Without FMA contraction both clones give the same bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

/* FIR down a strip: in and out hold n rows of STRIP values. Taps that fall outside [0, n) land
 * on the edge rows, so their weights are added there at once (tail sums): the cost per output
 * is at most min(2r+1, n) + 2 rows, also when the kernel is wider than the image. Away from the
 * edges the symmetric taps are folded: one multiply per pair. */
HOT static void fir_strip(const struct filter *f, const double *in, double *out, int n) {
  const double *w = f->w, *tail = f->tail;
  int r = f->radius;
  for (int i = 0; i < n; i++) {
    double *o = out + (size_t)i * STRIP;
    const double *c = in + (size_t)i * STRIP;
    if (i >= r && i + r < n) {
      for (int s = 0; s < STRIP; s++) o[s] = w[0] * c[s];
      for (int k = 1; k <= r; k++) {
        const double *lo = c - (size_t)k * STRIP, *hi = c + (size_t)k * STRIP;
        for (int s = 0; s < STRIP; s++) o[s] += w[k] * (lo[s] + hi[s]);
      }
      continue;
    }
    double wl = i + 1 <= r ? tail[i + 1] : 0;
    double wr = n - i <= r ? tail[n - i] : 0;
    const double *first = in, *last = in + (size_t)(n - 1) * STRIP;
    for (int s = 0; s < STRIP; s++) o[s] = wl * first[s] + wr * last[s];
    int lo = i < r ? -i : -r, hi = n - 1 - i < r ? n - 1 - i : r;
    for (int k = lo; k <= hi; k++) {
      double wk = w[k < 0 ? -k : k];
      const double *row = in + (size_t)(i + k) * STRIP;
      for (int s = 0; s < STRIP; s++) o[s] += wk * row[s];
    }
  }
}

/* Young-van Vliet down a strip, in place: buf holds n+6 rows, three of padding on each side, so
 * rows 3..n+2 are the samples. Same maths as cpu_yvv_line, STRIP lines at a time. */
HOT static void yvv_strip(const struct cpu_yvv *c, double *buf, int n) {
  double b = c->b, a1 = c->a[0], a2 = c->a[1], a3 = c->a[2];
  double *x0 = buf + 3 * STRIP, *xl = buf + (size_t)(n + 2) * STRIP;
  double edge[STRIP];
  memcpy(edge, xl, sizeof(edge));
  for (int j = 0; j < 3; j++) memcpy(buf + (size_t)j * STRIP, x0, sizeof(edge));
  for (int k = 3; k < n + 3; k++) {
    double *u = buf + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++)
      u[s] = b * u[s] + a1 * u[s - STRIP] + a2 * u[s - 2 * STRIP] + a3 * u[s - 3 * STRIP];
  }
  for (int s = 0; s < STRIP; s++) {
    double d0 = xl[s] - edge[s], d1 = xl[s - STRIP] - edge[s], d2 = xl[s - 2 * STRIP] - edge[s];
    for (int i = 0; i < 3; i++)
      xl[s + i * STRIP] = b * (c->m[i][0] * d0 + c->m[i][1] * d1 + c->m[i][2] * d2) + edge[s];
  }
  for (int k = n + 1; k >= 3; k--) {
    double *v = buf + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++)
      v[s] = b * v[s] + a1 * v[s + STRIP] + a2 * v[s + 2 * STRIP] + a3 * v[s + 3 * STRIP];
  }
}

struct pass { /* one 1-D pass down every column of a plane */
  const struct filter *f;
  double *p; /* h rows of w values */
  int w, h;
  int failed; /* set when a chunk could not get its scratch memory */
};

static void pass_chunk(void *arg, int begin, int end) {
  struct pass *ps = arg;
  int n = ps->h;
  size_t rows = (size_t)n + 6;
  double *buf = calloc(2 * rows * STRIP, sizeof(double));
  if (!buf) {
    __atomic_store_n(&ps->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  double *in = buf + 3 * STRIP, *out = buf + rows * STRIP;
  for (int strip = begin; strip < end; strip++) {
    int x0 = strip * STRIP, sw = ps->w - x0 < STRIP ? ps->w - x0 : STRIP;
    for (int y = 0; y < n; y++)
      memcpy(in + (size_t)y * STRIP, ps->p + (size_t)y * ps->w + x0, sw * sizeof(double));
    double *res = in;
    if (ps->f->kind == FILTER_YVV) {
      yvv_strip(&ps->f->yvv, buf, n);
    } else {
      fir_strip(ps->f, in, out, n);
      res = out;
    }
    for (int y = 0; y < n; y++)
      memcpy(ps->p + (size_t)y * ps->w + x0, res + (size_t)y * STRIP, sw * sizeof(double));
  }
  free(buf);
}

static int pass_columns(struct cpu_pool *pool, const struct filter *f, double *p, int w, int h) {
  struct pass ps = {f, p, w, h, 0};
  cpu_parallel_for(pool, (w + STRIP - 1) / STRIP, pass_chunk, &ps);
  return ps.failed ? -1 : 0;
}

struct transpose {
  const double *src; /* h rows of w */
  double *dst;       /* w rows of h */
  int w, h;
};

static void transpose_chunk(void *arg, int begin, int end) {
  const struct transpose *t = arg;
  enum { B = 32 };
  for (int y0 = begin * B; y0 < end * B && y0 < t->h; y0 += B)
    for (int x0 = 0; x0 < t->w; x0 += B)
      for (int y = y0; y < y0 + B && y < t->h; y++)
        for (int x = x0; x < x0 + B && x < t->w; x++)
          t->dst[(size_t)x * t->h + y] = t->src[(size_t)y * t->w + x];
}

static void transpose(struct cpu_pool *pool, const double *src, double *dst, int w, int h) {
  struct transpose t = {src, dst, w, h};
  cpu_parallel_for(pool, (h + 31) / 32, transpose_chunk, &t);
}

static double sample(const struct cpu_image *img, size_t i) {
  return img->depth == 16 ? ((const uint16_t *)img->data)[i] : ((const uint8_t *)img->data)[i];
}

struct load { /* one channel of an image into a transposed plane */
  const struct cpu_image *img;
  int ch;
  int premultiply; /* multiply by alpha / max */
  double *dst;     /* w rows of h */
};

static void load_chunk(void *arg, int begin, int end) {
  const struct load *l = arg;
  const struct cpu_image *img = l->img;
  int c = img->channels, h = img->height;
  double inv_max = 1.0 / ((1 << img->depth) - 1);
  for (int y = begin; y < end; y++) {
    size_t row = (size_t)y * img->width * c;
    for (int x = 0; x < img->width; x++) {
      size_t i = row + (size_t)x * c;
      double v = sample(img, i + l->ch);
      if (l->premultiply) v *= sample(img, i + c - 1) * inv_max;
      l->dst[(size_t)x * h + y] = v;
    }
  }
}

/* Filters channel ch of img into out (h rows of w); tmp is scratch of the same size. */
static int blur_channel(struct cpu_pool *pool, const struct filter *f, const struct cpu_image *img,
                        int ch, int premultiply, double *out, double *tmp) {
  struct load l = {img, ch, premultiply, tmp};
  cpu_parallel_for(pool, img->height, load_chunk, &l);
  if (pass_columns(pool, f, tmp, img->height, img->width) != 0) return -1;
  transpose(pool, tmp, out, img->height, img->width);
  return pass_columns(pool, f, out, img->width, img->height);
}

struct store { /* a filtered plane into one channel of dst */
  struct cpu_image *dst;
  int ch;
  const double *p;     /* the filtered channel, premultiplied when alpha is set */
  const double *alpha; /* the filtered alpha plane, or NULL */
};

static void store_chunk(void *arg, int begin, int end) {
  const struct store *s = arg;
  struct cpu_image *img = s->dst;
  double max = (1 << img->depth) - 1;
  for (int y = begin; y < end; y++)
    for (int x = 0; x < img->width; x++) {
      size_t j = (size_t)y * img->width + x, i = j * img->channels + s->ch;
      double v = s->p[j];
      if (s->alpha) v = s->alpha[j] > 0 ? v * max / s->alpha[j] : 0;
      v = v <= 0 ? 0 : v >= max ? max : floor(v + 0.5);
      if (img->depth == 16)
        ((uint16_t *)img->data)[i] = (uint16_t)v;
      else
        ((uint8_t *)img->data)[i] = (uint8_t)v;
    }
}

struct sse { /* squared error of one output channel against a reference plane */
  const struct cpu_image *out;
  int ch;
  const double *ref;   /* reference channel, premultiplied when alpha is set */
  const double *alpha; /* reference alpha when the image has alpha, else NULL */
  double *rows;        /* per row: the sum of squared errors, then the largest error */
};

/* With alpha, colour is compared premultiplied: the colour of a transparent pixel is invisible,
 * so only colour times alpha counts. */
static void sse_chunk(void *arg, int begin, int end) {
  const struct sse *e = arg;
  const struct cpu_image *img = e->out;
  int c = img->channels;
  double inv_max = 1.0 / ((1 << img->depth) - 1);
  for (int y = begin; y < end; y++) {
    double acc = 0, max = 0;
    for (int x = 0; x < img->width; x++) {
      size_t j = (size_t)y * img->width + x, i = j * c;
      double v = sample(img, i + e->ch), r = e->ref[j];
      if (e->alpha) v *= sample(img, i + c - 1) * inv_max;
      double d = fabs(v - r) < REF_NOISE ? 0 : fabs(v - r);
      acc += d * d;
      max = d > max ? d : max;
    }
    e->rows[2 * y] = acc;
    e->rows[2 * y + 1] = max;
  }
}

/* Adds the squared errors of one channel to *sse and raises *max to its largest error. */
static void channel_error(struct cpu_pool *pool, struct sse *e, double *sse, double *max) {
  cpu_parallel_for(pool, e->out->height, sse_chunk, e);
  for (int y = 0; y < e->out->height; y++) {
    *sse += e->rows[2 * y];
    *max = e->rows[2 * y + 1] > *max ? e->rows[2 * y + 1] : *max;
  }
}

static double psnr_of(double sse, const struct cpu_image *img) {
  double max = (1 << img->depth) - 1;
  double mse = sse / ((double)img->width * img->height * img->channels);
  return mse > 0 ? 10 * log10(max * max / mse) : INFINITY;
}

int cpu_blur_image(struct cpu_pool *pool, const struct cpu_blur *b, const struct cpu_image *src,
                   struct cpu_image *dst, struct cpu_accuracy *acc, struct cpu_timing *t) {
  size_t px = (size_t)src->width * src->height;
  int alpha = src->channels == 2 || src->channels == 4;
  struct filter f, ref = {0};
  struct cpu_timing tm = {0, 0};
  if (filter_init(&f, b) != 0) return -1;
  if (acc && filter_init_fir(&ref, b->sigma, CPU_TRUNCATE) != 0) {
    filter_free(&f);
    return -1;
  }
  /* planes: channel, scratch, then filtered alpha, reference channel, reference alpha as needed */
  int nplanes = 2 + alpha + (acc ? 1 + alpha : 0);
  double *pl = malloc(nplanes * px * sizeof(double));
  double *rows = malloc(2 * (size_t)src->height * sizeof(double));
  int rc = pl && rows ? 0 : -1;
  double *p = pl, *tmp = NULL, *fa = NULL, *rp = NULL, *ra = NULL, sse = 0, max = 0;
  if (rc == 0) {
    double *next = pl + px;
    tmp = next, next += px;
    if (alpha) fa = next, next += px;
    if (acc) rp = next, next += px;
    if (acc && alpha) ra = next;
  }
  for (int k = 0; rc == 0 && k < src->channels; k++) {
    int ch = alpha ? (k + src->channels - 1) % src->channels : k; /* alpha first */
    int is_alpha = alpha && ch == src->channels - 1, pm = alpha && !is_alpha;
    double *out = is_alpha ? fa : p, *rout = is_alpha ? ra : rp, t0 = now_ms();
    rc = blur_channel(pool, &f, src, ch, pm, out, tmp);
    if (rc == 0) {
      struct store s = {dst, ch, out, pm ? fa : NULL};
      cpu_parallel_for(pool, src->height, store_chunk, &s);
    }
    double t1 = now_ms();
    tm.filter += t1 - t0;
    if (rc == 0 && acc) {
      rc = blur_channel(pool, &ref, src, ch, pm, rout, tmp);
      struct sse e = {dst, ch, rout, pm ? ra : NULL, rows};
      if (rc == 0) channel_error(pool, &e, &sse, &max);
      tm.reference += now_ms() - t1;
    }
  }
  if (rc == 0 && acc) *acc = (struct cpu_accuracy){psnr_of(sse, dst), max};
  if (t) *t = tm;
  free(rows);
  free(pl);
  filter_free(&ref);
  filter_free(&f);
  return rc;
}
