/* Operations as data: what an image endpoint is, declared once in its own file under api/ops/
 * (a struct api_op), and the one table of them (api/ops/table.c). The routes and CLI verbs
 * (handler.c), /openapi.json and docs/api.md (openapi.c), /methods, the JSON result and the
 * dispatch of a job (job.c) read the table; a new operation is its descriptor, its CPU compute
 * in cpu/, its GPU compute in gpu/, a line of the table and its tests (docs/development.md).
 * Included by api_int.h after the parameter and backend types it uses; nothing outside api/
 * includes it. */
#ifndef BLURD_API_OP_H
#define BLURD_API_OP_H

/* ---- the parameter structs of the operations that tests and fuzzers parse into ---- */

#define METHOD_AUTO CPU_NMETHODS /* the value of blur_params.method for method=auto */

#define API_REGIONS_MAX  64      /* rectangles in a region blur */
#define API_REGION_COORD 1000000 /* largest |x|, |y|, w or h of a rectangle */

struct api_regions {         /* a PT_REGIONS value: rectangles as given, before clipping */
  int n;                     /* 0: none (the whole image) */
  int r[API_REGIONS_MAX][4]; /* x, y, w, h in pixels; w and h at least 1 */
};

struct blur_params { /* POST /blur, and POST /sharpen (which has no regions) */
  int method;        /* enum cpu_method, or METHOD_AUTO */
  double sigma;      /* pixels, both axes; 0 when not given */
  double sigma_x;    /* pixels along x and y: sigma's, or as given */
  double sigma_y;
  double truncate;            /* fir family and separable: kernel radius in sigmas */
  int coeffs;                 /* enum cpu_yvv_set */
  int format;                 /* index in params_format_choices: input, then the outputs */
  int quality;                /* the lossy outputs' quality */
  int lossless;               /* WebP and JPEG XL: lossless */
  int compression;            /* PNG zlib level */
  int effort;                 /* lossy WebP: libwebp's method 0..6 */
  int colorspace;             /* index in params_colorspace_choices: keep, srgb */
  int psnr;                   /* compute the PSNR against the exact reference */
  struct api_regions regions; /* /blur: blur only these */
  int feather;                /* /blur: pixels of ramp outside each region */
  double amount;              /* /sharpen: out = in + amount (in - blurred) */
  double threshold;           /* /sharpen: |in - blurred| below this (levels) is left alone */
  int luma;                   /* /sharpen: on luma only, added to R, G and B */
  unsigned given;             /* the parameters the request gave (struct endpoint) */
};

#define VAR_AUTO CPU_VAR_NMETHODS /* var_params.method for method=auto: exact */

enum var_output { VAR_STDDEV, VAR_VARIANCE };

struct var_params { /* POST /variance */
  int method;       /* enum cpu_var_method, or VAR_AUTO */
  int radius;       /* 1..CPU_VAR_RADIUS_MAX */
  int window;       /* enum cpu_window */
  int output;       /* enum var_output */
  int format;       /* index in the map formats: png, raw, npy */
  int compression;  /* PNG zlib level */
  int psnr;         /* measure the map against the exact one */
};

struct contrast_params { /* POST /contrast: struct cpu_contrast's fields, then the output's */
  int radius;
  double a, m0, b, s0;
  int format, quality, compression; /* as in blur_params */
  int lossless, effort, colorspace; /* as in blur_params */
};

struct api_kernel { /* a PT_KERNEL value: a named kernel, or custom weights as given */
  int named;        /* index in cpu_conv_names, or -1 for custom weights */
  int size;         /* custom: the side, odd, 1..CPU_CONV_MAX */
  double w[CPU_CONV_MAX * CPU_CONV_MAX]; /* custom: size*size weights, row-major */
};

#define KERNEL_WEIGHT_MAX 1e6 /* largest |weight| of a kernel, before and after normalising */

struct conv_params { /* POST /convolve */
  struct api_kernel kernel;
  int normalize;                    /* custom kernels: divide by the sum when it is not 0 */
  double bias;                      /* added to every sum; a named kernel's own when not given */
  int format, quality, compression; /* as in blur_params */
  int lossless, effort, colorspace; /* as in blur_params */
  unsigned given;                   /* the parameters the request gave (struct endpoint) */
  struct cpu_conv conv;             /* the kernel to run, built by the endpoint's check */
};

/* Room for any operation's parameter struct (a custom kernel's is the largest); a table test
 * checks every descriptor's params_size against it. */
#define OP_PARAMS_MAX sizeof(struct conv_params)

struct op_field {   /* a field an operation adds to the JSON result */
  const char *name; /* "radius" */
  const char *type; /* its JSON schema type: "integer", "number", "string" */
  const char *doc;  /* one sentence, without the endpoint ("the window radius.") */
};

#define OP_FIELDS_MAX 8

/* One image endpoint: everything else about it is derived from this. */
struct api_op {
  const char *name;          /* "blur": the path without '/', and the CLI verb */
  const char *summary;       /* one sentence for /openapi.json and docs/api.md */
  const char *x_method;      /* what its X-Method header names, for /openapi.json; NULL: none */
  const struct endpoint *ep; /* the path, the parameter specs, the check and the cost */
  size_t params_size;        /* sizeof the endpoint's parameter struct */
  /* Adds the operation's rows to /methods' list (each with method_entry); NULL: none. */
  void (*methods)(const struct api_ctx *ctx, json_t *list);
  struct op_field fields[OP_FIELDS_MAX]; /* its JSON result fields, up to a NULL name */
  /* Sets those fields in the JSON result o from the parameters and the result. */
  void (*result)(json_t *o, const void *params, const struct op_result *res);
  op_compute_fn compute[ENGINE_NBACKENDS]; /* by backend (the CPU's serves where one is missing);
                                              all NULL: none (/convert) */
};

/* Every operation, in the order of the routes, NULL-terminated (api/ops/table.c). */
extern const struct api_op *const api_ops[];
/* The descriptors, one in each file of api/ops/. */
extern const struct api_op op_blur, op_convert, op_variance, op_contrast, op_convolve, op_sharpen,
    op_pixelate;

/* One /methods entry (new reference): name, endpoint, description, accuracy, backends, and the
 * parameters of ep that apply to method m (all when m < 0). */
json_t *op_method_entry(const char *name, const struct endpoint *ep, const char *desc,
                        const char *accuracy, int m);

/* ---- helpers the descriptors share (api/ops/common.c) ---- */

/* The choices of /blur's and /sharpen's method and coeffs (enum cpu_method then "auto";
 * enum cpu_yvv_set). */
extern const char *const op_method_choices[];
extern const char *const op_coeff_choices[];

#define OP_FIR_FAMILY                                                                              \
  (1u << CPU_FIR | 1u << CPU_FIR_SHARED | 1u << CPU_FIR_MWPT | 1u << CPU_SEPARABLE)
#define OP_YVV_FAMILY (1u << CPU_YVV | 1u << CPU_YVV_BLOCKED | 1u << CPU_YVV2WAY)

/* The output parameters of the operations that return an image like their input's, for their
 * parameter struct T (which names these fields format, quality, lossless and compression). */
#define OP_COMPRESSION_PARAM(T, def)                                                               \
  {                                                                                                \
    "compression", PT_INT, 0, 9, NULL, def, offsetof(T, compression),                              \
        "PNG zlib compression level; ignored for JPEG and WebP.", 0                                \
  }
#define OP_OUTPUT_PARAMS(T)                                                                        \
  {"format",          PT_ENUM, 0, 0, params_format_choices, "input", offsetof(T, format),          \
   params_format_doc, 0},                                                                          \
      {"quality", PT_INT, 1, 100, NULL, "90", offsetof(T, quality), params_quality_doc, 0},        \
      {"lossless",          PT_BOOL, 0, 1, params_bool_choices, "false", offsetof(T, lossless),    \
       params_lossless_doc, 0},                                                                    \
      OP_COMPRESSION_PARAM(T, CODEC_PNG_COMPRESSION_DEFAULT_STR),                                  \
      {"effort",                                                                                   \
       PT_INT,                                                                                     \
       0,                                                                                          \
       6,                                                                                          \
       NULL,                                                                                       \
       "2",                                                                                        \
       offsetof(T, effort),                                                                        \
       "Lossy WebP, AVIF and JPEG XL: 0 (fastest) to 6 (smallest files): libwebp's method, aom's " \
       "speed 9 to 3, libjxl's effort 1 to 9. At 2 a smooth RGB image (a blur) is coded as WebP "  \
       "by blurd's own VP8 encoder instead, faster. Ignored otherwise.",                           \
       0},                                                                                         \
  {                                                                                                \
    "colorspace", PT_ENUM, 0, 0, params_colorspace_choices, "keep", offsetof(T, colorspace),       \
        "keep: the output carries the upload's ICC profile (the filter works in the image's own "  \
        "colour space); srgb: the pixels are converted to sRGB with Little CMS and no profile is " \
        "attached.",                                                                               \
        0                                                                                          \
  }

#define OP_NPARAMS(t) ((int)(sizeof(t) / sizeof(t[0])))

/* The blur p asks for on a width x height image: auto resolved with auto_method on the larger
 * sigma. */
struct cpu_blur op_blur_of(const struct blur_params *p, int width, int height,
                           enum cpu_method (*auto_method)(double, int, int));
/* The blur p asks for on io's image on env's backend, and what the client is told of it
 * (res->method, the sigmas). auto with the PSNR and no regions takes separable where the backend
 * computes it exactly and measures it in the same pass (env->measures_itself): the image and its
 * PSNR then cost what the reference alone costs after any other method. */
struct cpu_blur op_blur_resolve(struct op_env *env, const struct blur_params *p, struct op_io *io);
/* The blur the CPU backend runs for p on a width x height image: op_blur_resolve's choice there
 * (auto with the PSNR, no regions and the default truncate is separable measuring itself). */
struct cpu_blur op_blur_cpu(const struct blur_params *p, int width, int height);
/* Seconds of CPU that blur b takes on the CPU on a width x height image of channels channels,
 * the PSNR's reference included when psnr: the filter stage and the reference stage of the cost
 * model (its constants: api/ops/cost_table.h; docs/operations.md, "Limits and costs"). */
double op_blur_s(const struct cpu_blur *b, int psnr, int width, int height, int channels);
/* Seconds of CPU that a region's box of width x height x channels costs beyond its blur (cut out
 * of the image, blended back), and that copying the input first costs when boxes overlap. */
double op_region_box_s(int width, int height, int channels);
double op_region_copy_s(int width, int height, int channels);
/* Whether the request gave parameter name of ep (given: its mask, struct endpoint). */
int op_given(const struct endpoint *ep, unsigned given, const char *name);
/* The value of ep's int (or enum) parameter name in params, or def when ep has none. */
int op_param(const struct endpoint *ep, const void *params, const char *name, int def);
/* The word ep's enum parameter name holds in params, or def when ep has none. */
const char *op_choice(const struct endpoint *ep, const void *params, const char *name,
                      const char *def);
/* How ep's answer is encoded: its format, quality, lossless, compression and effort parameters
 * where it has them (else 90, lossy, the codecs' defaults); the format "input" (or none) is
 * api_output_format's for input and the Accept header accept (NULL: none). No ICC profile. */
struct codec_encode_opts op_output(const struct endpoint *ep, const void *params,
                                   enum codec_format input, const char *accept);
/* The checks of an upload once its parameters are in params (ep's struct): it carries an image
 * in a format the service reads, within the image limits, whose estimated cost is within the
 * budget (op_budget). Returns NULL to go on, or the error response (the caller owns it). */
struct api_response *op_admit(struct api_ctx *ctx, const struct endpoint *ep, const void *params,
                              const uint8_t *image, size_t len, const char *accept);
/* The budget of one request, from its image's header: ERR_IMAGE_TOO_LARGE when the image
 * passes ctx's --max-width, --max-height or --max-pixels (whatever its cost); else ERR_OK when
 * the estimate (op_request_s, ep's cost, op_encode_s) is within ctx's --max-cost (or there is
 * none, or the header cannot be read: the decoder will say why); else ERR_TOO_EXPENSIVE. The
 * answer's format is op_output's under accept (the Accept header, or NULL). msg
 * then holds a sentence; *estimate_s is the estimate in seconds of CPU (0 when not made). */
enum err op_budget(const struct api_ctx *ctx, const struct endpoint *ep, const void *params,
                   const uint8_t *image, size_t len, const char *accept, double *estimate_s,
                   char *msg, size_t msglen);
/* Seconds of CPU that the request of the image file image (len bytes, shape s) costs whatever its
 * operation: the request, the upload, the decode, the answer's buffers and a stored PNG of it
 * written and sent (the cost model's base). */
double op_request_s(const uint8_t *image, size_t len, const struct codec_shape *s);
/* Seconds of CPU that encoding an answer of s's shape with o adds to a stored PNG's, by the cost
 * model: the slower of noise and smooth content measured. */
double op_encode_s(const struct codec_encode_opts *o, const struct codec_shape *s);
/* Region i of rg clipped to a width x height image into rect (x0, y0, x1, y1); ERR_BAD_PARAMETER
 * with a sentence when nothing is left. */
enum err op_region_rect(const struct api_regions *rg, int i, int width, int height, int rect[4],
                        char *msg, size_t msglen);

#endif
