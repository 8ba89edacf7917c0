/* cpu: the CPU twin of every operation (the tests' oracle) and the CPU backend's compute, its work
 * spread over a fork-join pool and stopped by a job's cancel token. It knows nothing of HTTP,
 * codecs or CUDA; gpu/ reuses its coefficients, so both backends filter with the same numbers.
 * Fallible functions return an enum err (base/errors.h): ERR_OK, ERR_OUT_OF_MEMORY,
 * ERR_BAD_PARAMETER for what the api checks before it calls, or why the token stopped the work. */
#ifndef BLURD_CPU_H
#define BLURD_CPU_H

#include "../base/errors.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- images ---- */

struct cpu_image { /* a view of interleaved pixels; the owner is whoever allocated data */
  void *data;      /* width*height*channels samples, uint8_t (depth 8) or uint16_t (depth 16) */
  int width;       /* pixels */
  int height;      /* pixels */
  int channels;    /* 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; alpha is always last */
  int depth;       /* bits per sample: 8 or 16 */
};

/* Number of bytes in img's pixel buffer. */
size_t cpu_image_bytes(const struct cpu_image *img);

/* bytes of zeroed memory in whole transparent huge pages, on a 2 MB boundary: a fresh buffer
 * faulted in 2 MB at a time rather than 4 KB. The caller frees it with cpu_pages_free (the same
 * bytes). NULL when out of memory. */
void *cpu_pages_new(size_t bytes);
void cpu_pages_free(void *p, size_t bytes);

/* ---- methods ---- */

/* The method table: enum name, API name, one-line description. The API name is the word users
 * write in ?method=. The fir family gives identical results on every backend (integer
 * arithmetic); on the GPU its three members are the three direct 2-D kernels GF_Default, GF_SM
 * and GF_SM_MWPT (docs/methods.md, "Sources"). */
/* clang-format off */
#define CPU_METHODS(X)                                                                              \
  X(FIR,        "fir",        "direct 2-D convolution with the sampled Gaussian, exact integer sums (GPU: one thread per pixel)", ACC_FIR) \
  X(FIR_SHARED, "fir_shared", "the same sums as fir (GPU: shared-memory tile with halo)", ACC_FIR) \
  X(FIR_MWPT,   "fir_mwpt",   "the same sums as fir (GPU: a block of outputs per thread)", ACC_FIR) \
  X(SEPARABLE,  "separable",  "row pass then column pass with the sampled Gaussian", ACC_SEPARABLE) \
  X(YVV,        "yvv",        "Young-van Vliet 3-pole recursive Gaussian, Triggs-Sdika boundaries", ACC_YVV) \
  X(YVV_BLOCKED, "yvv_blocked", "yvv computed block-parallel with exact carries (Nehab et al. 2011); on the CPU the same as yvv", ACC_YVV) \
  X(YVV2WAY,    "yvv2way",    "Lee, Ko and Choe's two-way partitioned Young-van Vliet (each line split at a centre pixel computed by FIR)", ACC_YVV2WAY) \
  X(DERICHE,    "deriche",    "Deriche's 4th-order recursive Gaussian (causal plus anti-causal)", ACC_DERICHE) \
  X(PYRAMID,    "pyramid",    "reduced k = 2, 4, 8 or 16 times (k <= sigma / 3; triangle weights), the sampled Gaussian there, expanded with the quadratic B-spline; below sigma 6 the same as separable", ACC_PYRAMID)
/* clang-format on */

enum cpu_method {
#define X(e, name, desc, acc) CPU_##e,
  CPU_METHODS(X)
#undef X
      CPU_NMETHODS
};

/* API name of m ("yvv"), or NULL when m is out of range. */
const char *cpu_method_name(enum cpu_method m);
/* One-line description of m. */
const char *cpu_method_desc(enum cpu_method m);
/* The accuracy m measured against the exact Gaussian on photographs (docs/accuracy.md). */
const char *cpu_method_accuracy(enum cpu_method m);
/* The method called name into *m. Returns ERR_OK, or ERR_BAD_PARAMETER when there is none. */
enum err cpu_method_from_name(const char *name, enum cpu_method *m);
/* Does m belong to the fir family (fir, fir_shared, fir_mwpt)? */
int cpu_method_is_fir(enum cpu_method m);
/* Does m take a Young-van Vliet coefficient set (yvv, yvv2way)? */
int cpu_method_has_coeffs(enum cpu_method m);

#define CPU_SIGMA_MIN 0.5   /* smallest sigma a method accepts, in pixels */
#define CPU_SIGMA_MAX 300.0 /* largest sigma a method accepts, in pixels */
#define CPU_TRUNCATE  4.0   /* the reference kernel radius is ceil(CPU_TRUNCATE * sigma) */

struct cpu_blur { /* one blur request */
  enum cpu_method method;
  double sigma_x;  /* standard deviation in pixels along x (within a row) */
  double sigma_y;  /* and along y (within a column); every method filters x, then y */
  double truncate; /* fir family and separable: radius ceil(truncate*sigma) on each axis */
  int coeffs;      /* yvv, yvv2way: an enum cpu_yvv_set */
};

/* The method `auto` stands for on the CPU backend: the fastest one that reaches 48 dB for this
 * sigma and image size (README, "auto"). */
enum cpu_method cpu_auto_method(double sigma, int width, int height);

/* ---- kernels and coefficients (shared with gpu/) ---- */

/* Radius of the sampled Gaussian cut at truncate*sigma: ceil(truncate*sigma), at least 1. */
int cpu_gauss_radius(double sigma, double truncate);
/* Fills w[0..radius] with the one-sided sampled Gaussian, normalised so that
 * w[0] + 2*(w[1] + ... + w[radius]) == 1. */
void cpu_gauss_kernel(double sigma, int radius, double *w);

struct cpu_yvv {  /* coefficients of u[k] = B x[k] + a1 u[k-1] + a2 u[k-2] + a3 u[k-3] */
  double b;       /* gain B = 1 - a1 - a2 - a3 */
  double a[3];    /* feedback a1, a2, a3 */
  double m[3][3]; /* Triggs-Sdika matrix M (already divided by its determinant term) */
};

/* Young-van Vliet coefficient sets (docs/methods.md, "yvv coefficients"): Young & van Vliet's
 * 1995 polynomials, Young, van Vliet & van Ginkel's 2002 ones, van Vliet, Young & Verbeek's 1998
 * poles with their linear q, the 1998 poles with q solved for variance sigma^2, and the 1998 poles
 * with q calibrated to the least-squares fit of the reference kernel. */
/* clang-format off */
#define CPU_YVV_SETS(X)                          \
  X(1995,           "1995")                      \
  X(2002,           "2002")                      \
  X(1998,           "1998")                      \
  X(EXACT_VARIANCE, "variance")                  \
  X(CALIBRATED,     "calibrated")
/* clang-format on */

enum cpu_yvv_set {
#define X(e, name) CPU_YVV_##e,
  CPU_YVV_SETS(X)
#undef X
};

/* Coefficients of set for sigma, with their Triggs-Sdika matrix. Returns ERR_OK,
 * ERR_OUT_OF_MEMORY (only the calibrated set allocates) or ERR_BAD_PARAMETER (set is none of
 * CPU_YVV_SETS). */
enum err cpu_yvv_coeffs(double sigma, enum cpu_yvv_set set, struct cpu_yvv *c);

/* One pole pair of Deriche's filter as a second-order section in delta form, which single
 * precision holds at every sigma: d = b0 x[k] + b1 x[k-1] + k1 y[k-1] + k2 d[k-1] and
 * y[k] = y[k-1] + d causally; c1 x[k+1] + c2 x[k+2] in place of b0, b1 anti-causally. */
struct cpu_deriche_sec {
  double b0, b1, c1, c2; /* causal and anti-causal numerators */
  double k1, k2;         /* -(1 + a1 + a2) and a2 of the denominator 1 + a1 z^-1 + a2 z^-2 */
  double gc, ga;         /* the section's DC gain causally and anti-causally */
};

struct cpu_deriche {             /* Deriche's parallel form: out = causal + anti-causal */
  double a[5];                   /* shared denominator, a[0] = 1 */
  double bc[4];                  /* causal numerator: x[k] .. x[k-3] */
  double ba[5];                  /* anti-causal numerator: x[k+1] .. x[k+4] in ba[1..4] */
  double gc, ga;                 /* DC gains of each part (gc + ga = 1), for the replicated edges */
  struct cpu_deriche_sec sec[2]; /* the same filter as two sections (the GPU's form) */
};

/* Deriche's 4th-order coefficients for sigma (Deriche 1993, as tabulated by Getreuer 2013),
 * normalised to unit DC gain. */
void cpu_deriche_coeffs(double sigma, struct cpu_deriche *c);

/* The FIR window of Lee, Ko & Choe's two-way partitioned filter: N = 2 sigma taps, i.e. radius
 * floor(round(2 sigma) / 2), at least 1. Used for yvv2way's centre pixel and for reproducing the
 * paper's Table 2. */
int cpu_paper_radius(double sigma);

/* The fir family's integer kernel: a[0..radius] with a[0] + 2 (a[1] + ... + a[radius]) == 2^k,
 * the sampled Gaussian rounded to k bits. cpu_fir_shift() gives the k for which every sum of an
 * image of that depth fits 64 bits (premultiplied colour counts twice the depth). */
int cpu_fir_shift(int depth, int alpha);
void cpu_fir_weights(double sigma, int radius, int k, uint32_t *a);

/* ---- one line (tests and references use these directly) ---- */

/* Young-van Vliet over one line of n samples, in place: causal pass from a replicated left edge,
 * Triggs-Sdika right edge, anti-causal pass. */
void cpu_yvv_line(const struct cpu_yvv *c, double *x, int n);
/* Sampled-Gaussian FIR over one line: out[i] = sum_k w[|k|] in[clamp(i+k)], replicate border. */
void cpu_fir_line(const double *w, int radius, const double *in, double *out, int n);
/* Deriche over one line, replicate border. */
void cpu_deriche_line(const struct cpu_deriche *c, const double *in, double *out, int n);
/* The same through c->sec, as the GPU's deriche computes it: equal up to rounding. */
void cpu_deriche_sections_line(const struct cpu_deriche *c, const double *in, double *out, int n);
#define CPU_BLOCK_MAX 64 /* longest block of the block-parallel filter */

struct cpu_yvv_blocked { /* the block-parallel Young-van Vliet filter, as a cascade */
  int b;                 /* block length */
  /* w[k] = p w[k-1] + q x[k], u[k] = g w[k] + c1 u[k-1] + c2 u[k-2] (q = 1 - p, g = 1 - c1 - c2):
   * the direct form's poles in two sections of unit gain, which single precision keeps accurate
   * at large sigma where the direct form is not. States are (w, u[k], u[k-1]) after sample k,
   * and the same for the anti-causal pass (w, v[k], v[k+1]) entering sample k-1 from the right. */
  double p, q, g, c1, c2;
  double t[3][3];  /* the state after a block from the state before it (zero input), both ways */
  double c[3][3];  /* the anti-causal state before a block from its causal state before it */
  double ts[3][3]; /* Triggs-Sdika: the anti-causal state entering the last sample from the
                      causal state after it, both less the last sample's value */
  double mp[3][CPU_BLOCK_MAX]; /* zero-state causal state after a block: mp[i] . x */
  double me[3][CPU_BLOCK_MAX]; /* zero-state anti-causal state before it, both passes: me[i] . x */
};

/* The carry matrices of c for blocks of b <= CPU_BLOCK_MAX samples, with the cascade's
 * coefficients rounded to single precision when single. */
void cpu_yvv_blocked_matrices(const struct cpu_yvv *c, int b, int single,
                              struct cpu_yvv_blocked *m);
/* Young-van Vliet over one line, block-parallel (Nehab, Maximo, Lima & Hoppe 2011): every block
 * but the last filters from a zero state, the carries are fixed block to block with the
 * matrices, the last block applies Triggs-Sdika, and every block then filters again from its
 * true states. Equal to cpu_yvv_line up to rounding; the GPU's yvv_blocked follows it. Returns
 * ERR_OK, or ERR_OUT_OF_MEMORY (x is then unchanged). */
enum err cpu_yvv_blocked_line(const struct cpu_yvv_blocked *m, double *x, int n);
/* pyramid (k > 1): a line of n samples reduced k times, filtered there by the sampled
 * Gaussian of sigma_low, and expanded back. Cell j is centred on sample k j + (k - 1) / 2 and
 * holds the mean of the samples around it weighted by the triangle k - |d| (d: distance from
 * the centre; weights summing to k^2; replicate border); a sample is the quadratic B-spline of
 * its cell and the two beside it, whose 3 weights depend only on its place in the cell. The
 * triangle's variance, the low Gaussian and the B-spline's (1/4 of a cell squared wherever the
 * sample sits, unlike linear interpolation's) add up to sigma^2. The 2-D filter is this along x
 * then y. k = 1 is the separable FIR. */
#define CPU_PYRAMID_SIGMA 3.0 /* k: the largest power of 2 <= sigma / CPU_PYRAMID_SIGMA, */
#define CPU_PYRAMID_KMAX  16  /* from 1 to CPU_PYRAMID_KMAX */
struct cpu_pyramid {
  int k;            /* reduction factor */
  double sigma_low; /* the Gaussian on the reduced line, in its samples */
  int radius;       /* its radius, ceil(truncate * sigma_low) */
};
void cpu_pyramid_params(double sigma, double truncate, struct cpu_pyramid *p);
/* The triangle's weight of sample k j + a in cell j (k - |a - (k - 1) / 2|; a from -(k / 2) to
 * 3k / 2 - 1, 0 outside). */
double cpu_pyramid_tri(int k, int a);
/* The B-spline weights of the cells j-1, j, j+1 for sample k j + r. */
void cpu_pyramid_weights(int k, int r, double wt[3]);
/* pyramid over one line with w[0..p->radius] = cpu_gauss_kernel(p->sigma_low); k > 1. Returns
 * ERR_OK, or ERR_OUT_OF_MEMORY. */
enum err cpu_pyramid_line(const struct cpu_pyramid *p, const double *w, const double *in,
                          double *out, int n);
/* The two-way partitioned Young-van Vliet filter (Lee, Ko & Choe's Algorithm 1) over one line:
 * the centre pixel n/2 by FIR (w, radius: the paper's window), the left block forward and the
 * right block backward from replicated edges, then the reverse passes seeded with the centre
 * value. */
void cpu_yvv2way_line(const struct cpu_yvv *c, const double *w, int radius, const double *in,
                      double *out, int n);

/* ---- cancellation ---- */

/* Why a job's work stopped. */
enum cpu_stop { CPU_RUNNING, CPU_STOP_DEADLINE, CPU_STOP_GONE };

/* The client is asked whether it is still there at most this often, in milliseconds. */
#define CPU_CANCEL_POLL_MS 10

/* A job's cancel token. A worker sets it for its thread (cpu_cancel_set) around the work of one
 * job; cpu_parallel_for hands it to the pool's threads with the batch; the filters' loops ask
 * cpu_cancelled() at least every few milliseconds of work and return early, their output
 * unfinished, once it says stop, and the function that ran them returns the reason
 * (cpu_stop_error). The owner (the job, usually on its stack) fills the first three fields; the
 * rest start at zero. */
struct cpu_cancel {
  double deadline;        /* CLOCK_MONOTONIC milliseconds past which the work stops; 0: none */
  int (*gone)(void *arg); /* has the client left? called with arg from any thread; may be NULL */
  void *arg;
  int stop;               /* an enum cpu_stop; once set it stays (atomic) */
  int polling;            /* a thread is calling gone (atomic) */
  long long next_poll_us; /* gone is not called again before this time, in microseconds (atomic) */
};

/* Makes c the calling thread's token (NULL: none); c must outlive the work it covers. */
void cpu_cancel_set(struct cpu_cancel *c);
/* Checks c: the clock each call, gone at most every CPU_CANCEL_POLL_MS (one thread at a time).
 * Returns the enum cpu_stop, CPU_RUNNING while the work should go on. */
enum cpu_stop cpu_cancel_check(struct cpu_cancel *c);
/* cpu_cancel_check of the calling thread's token (on a pool thread: the token of the batch whose
 * chunk it runs); CPU_RUNNING when it has none. */
enum cpu_stop cpu_cancelled(void);
/* cpu_cancelled() as an error: ERR_OK while the work should go on (or the thread has no token),
 * ERR_DEADLINE_EXCEEDED for CPU_STOP_DEADLINE, ERR_CLIENT_GONE for CPU_STOP_GONE. What every
 * function here returns when the token stopped its work, whatever else went wrong in it. */
enum err cpu_stop_error(void);

/* ---- thread pool ---- */

struct cpu_pool;

/* A fork-join pool of nthreads threads (at least 1). Returns NULL when out of memory. */
struct cpu_pool *cpu_pool_new(int nthreads);
/* Stops and joins the threads; pool may be NULL. */
void cpu_pool_free(struct cpu_pool *pool);
/* Calls fn(arg, begin, end) over [0, n) in chunks, on the pool's threads and the caller's, and
 * returns when all chunks are done. Several threads may call it at once. pool may be NULL: then
 * the caller runs everything. The caller's cancel token goes with the chunks: each chunk is
 * checked before it starts, and once the token says stop no more start (fn's loops check it
 * too, so that a long chunk stops early). */
void cpu_parallel_for(struct cpu_pool *pool, int n, void (*fn)(void *arg, int begin, int end),
                      void *arg);

/* The cores this process may use: those of its CPU affinity, capped by the cgroup CPU quota
 * (v2 cpu.max, v1 cpu.cfs_quota_us over cpu.cfs_period_us, rounded up), the way container-aware
 * runtimes size themselves. root is "" for this machine; tests point it at a fake tree holding
 * proc/self/cgroup and sys/fs/cgroup (affinity is then not read). A sentence saying what was found
 * goes into why. */
int cpu_cores(const char *root, char *why, size_t n);

/* ---- whole images ----
 * An interleaved image is filtered channel by channel, colour premultiplied by alpha where there
 * is alpha, and rounded back: the fir family in integers (fir.c), a sampled Gaussian of radius 64
 * or less on both axes in single-precision tiles (sep.c), every other filter through planes of
 * doubles (image.c). The exact reference (the sampled Gaussian cut at ceil(CPU_TRUNCATE sigma),
 * normalised, replicate border, in double) takes the planes of doubles for every method, so the
 * PSNR of any method is measured the same way. */

struct cpu_timing { /* milliseconds spent in each part of cpu_blur_image */
  double filter;    /* the requested method */
  double reference; /* the exact reference and the PSNR; 0 when not asked for */
};

struct cpu_accuracy { /* an output against the exact reference */
  double psnr;        /* dB over every sample, peak 255 or 65535; INFINITY when identical */
  double max_abs;     /* largest absolute difference, in sample levels */
};

/* Blurs src into dst, which has the same shape and its own buffer. When acc is not NULL it also
 * computes the exact reference and measures dst against it; with alpha, colour is compared
 * premultiplied (the colour of a transparent pixel is invisible). separable with acc, where
 * cpu_separable_exact says so, is the reference itself rounded, measured in the same passes (t's
 * reference 0). t may be NULL. Returns ERR_OK; ERR_OUT_OF_MEMORY; ERR_BAD_PARAMETER when b->coeffs
 * is no enum cpu_yvv_set; or the token's stop (cpu_stop_error). dst is undefined unless ERR_OK. */
enum err cpu_blur_image(struct cpu_pool *pool, const struct cpu_blur *b,
                        const struct cpu_image *src, struct cpu_image *dst,
                        struct cpu_accuracy *acc, struct cpu_timing *t);
/* Measures out against the exact reference of src (sigma_x along x, sigma_y along y), as
 * cpu_blur_image does. Returns ERR_OK, ERR_OUT_OF_MEMORY or the token's stop (acc is then not
 * written). */
enum err cpu_measure(struct cpu_pool *pool, double sigma_x, double sigma_y,
                     const struct cpu_image *src, const struct cpu_image *out,
                     struct cpu_accuracy *acc);
/* Whether cpu_blur_image computes blur b exactly in double precision when it measures it: separable
 * at the default truncate, whose sampled Gaussian is the reference's (any depth and channels). Its
 * output is then the exact Gaussian rounded (in single precision's tiles otherwise: within 1e-3
 * levels of it), and the accuracy costs no pass of its own. */
int cpu_separable_exact(const struct cpu_blur *b);
/* The PSNR over n regions together from each one's accuracy and its sample count (samples[i]:
 * its box's pixels times channels), peak that of depth: the squared errors the PSNRs stand for,
 * added up. INFINITY when every region is identical to its reference (accuracy.c). */
double cpu_accuracy_merge(const struct cpu_accuracy *acc, const double *samples, int n, int depth);

/* ---- combining an image with its blur (compose.c) ---- */

struct cpu_unsharp { /* out = in + amount (in - blurred) */
  double amount;
  double threshold; /* |in - blurred| below this many levels: the sample is left alone */
  int luma;         /* on BT.601 luma only, its change added to every colour */
};

/* The unsharp mask of src with blur (src blurred: same shape) into dst (same shape, its own
 * buffer), in double, rounded half up and clamped. Colour is sharpened premultiplied by alpha
 * (in - blurred of colour times alpha), alpha is copied; with luma, the luma difference of
 * each pixel goes to all its colours (alpha ignored, then copied). Returns ERR_OK, or the
 * token's stop (dst is then unfinished). */
enum err cpu_unsharp_image(struct cpu_pool *pool, const struct cpu_unsharp *u,
                           const struct cpu_image *src, const struct cpu_image *blur,
                           struct cpu_image *dst);

/* Blends box (a blurred copy of the pixels of dst from (bx, by), same channels and depth) into
 * dst inside rect (x0, y0, x1, y1: the region, x1 and y1 exclusive) and up to feather pixels
 * around it: out = in + m (box - in), m = 1 inside the region and a smoothstep of the distance
 * along each axis (the product of the two) outside it, 0 from feather + 1 on. Only the pixels
 * box covers change. Returns ERR_OK, or the token's stop (dst is then unfinished). */
enum err cpu_blend_box(struct cpu_image *dst, const struct cpu_image *box, int bx, int by,
                       const int rect[4], int feather);

/* ---- the block mosaic of /pixelate (pixelate.c) ---- */

struct cpu_pixelate { /* one /pixelate request */
  int block;          /* block size in pixels, >= 1 */
};

/* The block mosaic of src into dst (same shape, own buffer): blocks of p->block pixels aligned to
 * the image's origin (those on the right and bottom edges cut short), each sample the block's
 * mean in exact integer arithmetic, rounded half up. With alpha, colour is averaged premultiplied
 * by alpha, as the blur does: colour = round(sum(c a) / sum(a)) (0 where the block is wholly
 * transparent) and alpha = round(sum(a) / pixels). With n > 0 the mosaic goes only inside the
 * regions rect[i] = {x0, y0, x1, y1} (x1, y1 exclusive) and up to feather pixels around them,
 * blended in order with cpu_blend_box's weights; elsewhere dst = src. gpu_pixelate_resident gives
 * the same bytes. Returns ERR_OK; ERR_OUT_OF_MEMORY; ERR_BAD_PARAMETER when p->block < 1; or the
 * token's stop (dst is then unfinished). */
enum err cpu_pixelate(struct cpu_pool *pool, const struct cpu_pixelate *p,
                      const struct cpu_image *src, const int (*rect)[4], int n, int feather,
                      struct cpu_image *dst);

/* How far, in pixels along an axis of this sigma, the blur b and the exact reference see: a box
 * grown by this much gives, inside the box, what the whole image gives (the recursive filters'
 * responses past the reference's 4 sigma weigh about 3e-5: under 0.01 of a level). Then 16
 * more, so that a box can start on a multiple of 16 and pyramid's cells lie where the whole
 * image's do. */
int cpu_blur_reach(const struct cpu_blur *b, double sigma);
/* The box (x, y, width, height) around region rect (x0, y0, x1, y1) of a width x height image:
 * grown by rx and ry, clipped, starting on a multiple of 16. */
void cpu_region_box(int width, int height, int rx, int ry, const int rect[4], int box[4]);

/* ---- local statistics, local contrast, convolution ----
 * These work on one plane of integer samples: a gray image (channels 1), 8- or 16-bit. Colour
 * uploads are reduced to luma first with cpu_luma(). Borders replicate the edge. */

/* Local variance methods: enum name, API name, one-line description. All but exact compute in
 * float32 (the precision of Gouin, Ancourt & Guettier's GPU code for Threewise) and are compared
 * against exact. */
/* clang-format off */
#define CPU_VAR_METHODS(X)                                                                         \
  X(NAIVE,     "naive",     "two passes over the window: the mean, then the mean squared deviation (float32, O(r^2))") \
  X(KOENIG,    "koenig",    "E[x^2] - E[x]^2 from weighted sums in one pass (float32, O(r^2); loses all digits on flat bright regions)") \
  X(WELFORD,   "welford",   "Welford's online update, weighted, one pass (float32, O(r^2))") \
  X(PAIRWISE,  "pairwise",  "Chan, Golub and LeVeque's pairwise merges over the separable window (float32)") \
  X(THREEWISE, "threewise", "Gouin, Ancourt and Guettier's Threewise: merges of three sparse taps, separable (float32; radius 2^k - 1)") \
  X(EXACT,     "exact",     "running integer sums, O(1) per pixel at any radius; exact for 8- and 16-bit samples")
/* clang-format on */

enum cpu_var_method {
#define X(e, name, desc) CPU_VAR_##e,
  CPU_VAR_METHODS(X)
#undef X
      CPU_VAR_NMETHODS
};

/* API name of m ("exact"), or NULL when out of range. */
const char *cpu_var_method_name(enum cpu_var_method m);
/* One-line description of m. */
const char *cpu_var_method_desc(enum cpu_var_method m);
/* The method called name into *m. Returns ERR_OK, or ERR_BAD_PARAMETER when there is none. */
enum err cpu_var_method_from_name(const char *name, enum cpu_var_method *m);

/* The window, per axis, over 2r + 1 samples; the 2-D weight is the product of the two axes'.
 * triangle: Threewise's 1 2 ... n ... 2 1 with n = r + 1 (a box of n convolved with itself; total
 * 2-D weight W = n^4); box: all ones (W = (2r + 1)^2). */
enum cpu_window { CPU_WINDOW_TRIANGLE, CPU_WINDOW_BOX };

#define CPU_VAR_RADIUS_MAX 127

struct cpu_var { /* one local-variance request */
  enum cpu_var_method method;
  enum cpu_window window;
  int radius; /* 1..CPU_VAR_RADIUS_MAX; threewise: 2^k - 1 */
};

/* Whether method m accepts radius r (threewise: r = 2^k - 1 only). */
int cpu_var_radius_ok(enum cpu_var_method m, int r);

/* Local weighted mean and variance of the gray plane src (channels 1, depth 8 or 16):
 * mean = sum w x / W and var = sum w (x - mean)^2 / W, the population convention (divided by the
 * total weight W, not W - 1). Writes width*height values to var and, when mean is not NULL, to
 * mean. Float methods compute in float32 and widen; exact computes W S1 and W S2 - S1^2 in
 * integers and divides once in double, so the same inputs give the same bits on every backend.
 * Returns ERR_OK; ERR_OUT_OF_MEMORY; ERR_BAD_PARAMETER when cpu_var_radius_ok refuses v's radius
 * for pairwise or threewise; or the token's stop (mean and var are then unfinished). */
enum err cpu_variance(struct cpu_pool *pool, const struct cpu_var *v, const struct cpu_image *src,
                      double *mean, double *var);

/* Luma of src into dst (channels 1, same size and depth, dst->data allocated by the caller):
 * gray is copied; colour is Y = (77 R + 150 G + 29 B + 128) >> 8 at 8 bits and
 * (19595 R + 38470 G + 7471 B + 32768) >> 16 at 16 bits (BT.601 weights in integers, so the
 * exact variance stays exact); alpha is ignored. Returns ERR_OK, or the token's stop (dst is then
 * unfinished). */
enum err cpu_luma(const struct cpu_image *src, struct cpu_image *dst);

/* ---- /variance's whole compute (varimage.c) ---- */

struct cpu_var_out { /* how a variance map becomes an image */
  int stddev;        /* 1: the square root of the variance; 0: the variance */
  int measure;       /* 1: also the PSNR against CPU_VAR_EXACT (the exact method needs none) */
};

struct cpu_var_stats { /* what /variance reports besides the image */
  double scale;        /* output sample = round(value * scale) (cpu_var_scale) */
  double min, max;     /* of the values (after stddev), unscaled */
  double mean;         /* their sum, row by row, then the rows in order, over width*height */
  double psnr; /* dB against the exact map, peak the largest possible value; INFINITY for the
                  exact method; NAN when not measured */
  double reference_ms; /* time spent on the exact map and the PSNR; -1 when not measured */
};

/* Output sample = round(value * scale): the map's largest possible value (half the sample range,
 * or its square) lands at or just under 65535. */
double cpu_var_scale(int depth, int stddev);

/* /variance's whole compute: the luma plane of src when it has colour (cpu_luma), the map
 * (cpu_variance with v), values below 0 (float cancellation) as 0, their square roots when
 * o->stddev, the exact map and the PSNR against it when o->measure (and v is not exact), the
 * statistics into s, and the values scaled into out: width*height 16-bit gray samples, the
 * caller's buffer. The sums run in a fixed order (each row left to right, then the rows top to
 * bottom), which gpu_variance_resident follows, so the exact method gives the same bits on both.
 * Returns what cpu_variance returns (out and s are then unfinished unless ERR_OK). */
enum err cpu_variance_image(struct cpu_pool *pool, const struct cpu_var *v,
                            const struct cpu_var_out *o, const struct cpu_image *src, uint16_t *out,
                            struct cpu_var_stats *s);

struct cpu_contrast { /* Wallis statistical differencing on luma */
  int radius;         /* box window radius (libvips stdif's 11x11 is radius 5) */
  double a;           /* weight of the target mean, 0..1 */
  double m0;          /* target mean, in 8-bit levels (times 257 for 16-bit images) */
  double b;           /* gain weight, 0..1 */
  double s0;          /* target standard deviation, in 8-bit levels (times 257 at 16 bits) */
};

/* Local contrast enhancement: with m and s the box mean and standard deviation of luma Y
 * (exact statistics), Y' = a m0 + (1 - a) m + (Y - m) b s0 / (s0 + b s), computed in double;
 * colour is kept by adding Y' - Y to R, G and B (this leaves BT.601 chroma unchanged); results
 * are rounded half up and clamped; alpha is copied. dst has src's shape and its own buffer.
 * Returns ERR_OK, ERR_OUT_OF_MEMORY or the token's stop (dst is then unfinished). */
enum err cpu_contrast_image(struct cpu_pool *pool, const struct cpu_contrast *c,
                            const struct cpu_image *src, struct cpu_image *dst);

#define CPU_CONV_MAX 31 /* largest kernel side */

struct cpu_conv {                       /* a square convolution kernel */
  int size;                             /* odd, 1..CPU_CONV_MAX */
  float k[CPU_CONV_MAX * CPU_CONV_MAX]; /* size*size weights, row-major, already normalised */
  float bias;                           /* added to every sum, in sample levels */
};

/* The named kernels of "Digital Image Processing with a GPU" (docs/methods.md, "Sources"):
 * edge, sharpen, emboss, box, gauss3. Fills c and returns ERR_OK, or ERR_BAD_PARAMETER when name
 * is not one of them. */
enum err cpu_conv_named(const char *name, struct cpu_conv *c);
/* Names of the named kernels, NULL-terminated. */
extern const char *const cpu_conv_names[];

/* out(x, y) = bias + sum k[j][i] in(x + i - size/2, y + j - size/2), replicate border, per
 * colour channel (not premultiplied), alpha copied; rounded half up and clamped. The sum runs
 * in float32 in a fixed order, row by row, left to right, each product and sum rounded on its
 * own (no fused multiply-add): the GPU kernel gives the same bytes. dst has src's shape and its
 * own buffer. Returns ERR_OK, or the token's stop (dst is then unfinished). */
enum err cpu_convolve_image(struct cpu_pool *pool, const struct cpu_conv *c,
                            const struct cpu_image *src, struct cpu_image *dst);

#ifdef __cplusplus
}
#endif

#endif
