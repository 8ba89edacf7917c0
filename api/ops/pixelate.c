/* POST /pixelate: the block mosaic, the other common privacy filter beside the blur. Each block
 * of `block` pixels, aligned to the image's origin, becomes its mean (colour premultiplied by
 * alpha); with regions, only inside them and up to feather pixels around, as /blur does. The
 * descriptor holds everything about the endpoint; the compute is cpu_pixelate on the CPU and
 * gpu_pixelate_resident on the device, the same bytes. docs/development.md walks through this
 * file as the example of adding an operation. */
#include "../api_int.h"
#include "cost_table.h"

#include <stdio.h>

struct pixelate_params {
  int block;                        /* the block's side in pixels */
  struct api_regions regions;       /* mosaic only these; none: the whole image */
  int feather;                      /* pixels of ramp outside each region */
  int format, quality, compression; /* as in blur_params */
  int lossless, effort, colorspace; /* as in blur_params */
};

#define OFF(field) offsetof(struct pixelate_params, field)
#define BLOCK_MAX  1024 /* a 32x18 mosaic of an 8K frame; larger is one flat colour anyway */

static const struct param_spec pixelate_params[] = {
    {"block", PT_INT, 2, BLOCK_MAX, NULL, "16", OFF(block),
     "The side of each block in pixels; blocks start at the image's top left corner, and those "
     "on the right and bottom edges are cut short.",
     0},
    {"regions", PT_REGIONS, 1, API_REGIONS_MAX, NULL, "", OFF(regions),
     "Pixelate only these rectangles, each [x, y, w, h] in pixels (a JSON array of them, or "
     "x,y,w,h;x,y,w,h in the query); clipped to the image. The blocks stay aligned to the "
     "image, so inside them the result equals the whole image's mosaic; the rest is the input.",
     0},
    {"feather", PT_INT, 0, 1024, NULL, "0", OFF(feather),
     "With regions: pixels outside each region over which the mosaic fades out (smoothstep).", 0},
    OP_OUTPUT_PARAMS(struct pixelate_params),
};

static enum err pixelate_check(void *params, char *msg, size_t msglen) {
  const struct pixelate_params *p = params;
  if (p->feather == 0 || p->regions.n > 0) return ERR_OK;
  snprintf(msg, msglen, "feather applies only with regions; got feather=%d and none.", p->feather);
  return ERR_BAD_PARAMETER;
}

/* Seconds of CPU by the cost model: every sample is read once and written once, whatever the
 * block. With regions, the mosaic of the regions grown by the feather, the input copied under it,
 * and every block tested against every region (cpu_pixelate). */
static double pixelate_cost(const void *params, const struct codec_shape *s) {
  const struct pixelate_params *p = params;
  double samples = (double)s->width * s->height * s->channels, area = 0;
  char msg[8];
  if (p->regions.n == 0) return samples * COST_PIXELATE_NS_SAMPLE * 1e-9;
  for (int i = 0; i < p->regions.n; i++) {
    int r[4];
    if (op_region_rect(&p->regions, i, s->width, s->height, r, msg, 0) == ERR_OK)
      area += (double)(r[2] - r[0] + 2 * p->feather) * (r[3] - r[1] + 2 * p->feather);
  }
  double blocks =
      (double)((s->width + p->block - 1) / p->block) * ((s->height + p->block - 1) / p->block);
  return (area * s->channels * COST_PIXELATE_REGION_NS_SAMPLE +
          samples * COST_PIXELATE_COPY_NS_SAMPLE + blocks * p->regions.n * COST_PIXELATE_NS_TEST) *
         1e-9;
}

static const struct endpoint api_pixelate_endpoint = {
    "/pixelate",    pixelate_params, OP_NPARAMS(pixelate_params), -1, 0, -1,
    pixelate_check, pixelate_cost};

static void pixelate_methods(const struct api_ctx *ctx, json_t *list) {
  (void)ctx;
  json_array_append_new(
      list,
      op_method_entry("mosaic", &api_pixelate_endpoint,
                      "block mosaic: each block of block x block pixels, aligned to the "
                      "image, becomes its mean (colour premultiplied by alpha)",
                      "exact integer means rounded half up: the same bytes on every backend", -1));
}

static void pixelate_result(json_t *o, const void *params, const struct op_result *res) {
  const struct pixelate_params *p = params;
  (void)res;
  json_object_set_new(o, "block", json_integer(p->block));
  if (p->regions.n > 0) json_object_set_new(o, "regions", json_integer(p->regions.n));
}

/* The regions of p clipped to io's image into rect (x0, y0, x1, y1). */
static enum err pixelate_regions(const struct pixelate_params *p, struct op_io *io,
                                 int (*rect)[4]) {
  enum err e = ERR_OK;
  io->res->method = "mosaic";
  for (int i = 0; e == ERR_OK && i < p->regions.n; i++)
    e = op_region_rect(&p->regions, i, io->in->width, io->in->height, rect[i], io->msg, io->msglen);
  return e;
}

static enum err pixelate_cpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct pixelate_params *p = params;
  struct cpu_pixelate m = {p->block};
  int rect[API_REGIONS_MAX][4];
  enum err e = pixelate_regions(p, io, rect);
  if (e != ERR_OK) return e;
  struct cpu_image src = op_image(io->in), dst;
  if (op_host_output(io) != ERR_OK) return ERR_OUT_OF_MEMORY;
  dst = op_image(io->out);
  double t0 = api_now_ms();
  e = cpu_pixelate(env->worker, &m, &src, (const int(*)[4])rect, p->regions.n, p->feather, &dst);
  if (e != ERR_OK) return e;
  *io->t = (struct stage_times){api_now_ms() - t0, -1, -1, -1, -1};
  return ERR_OK;
}

#ifdef BLURD_CUDA
struct pixelate_arg { /* launch_pixelate's */
  struct cpu_pixelate m;
  int rect[API_REGIONS_MAX][4];
  int n, feather;
};

static enum gpu_status launch_pixelate(struct gpu_ctx *ctx, const void *arg,
                                       const struct cpu_image *img, struct cpu_accuracy *acc,
                                       struct gpu_times *g) {
  const struct pixelate_arg *a = arg;
  (void)acc;
  return gpu_pixelate_resident(ctx, &a->m, img, (const int(*)[4])a->rect, a->n, a->feather, g);
}

static enum err pixelate_gpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct pixelate_params *p = params;
  struct pixelate_arg a = {{p->block}, {{0}}, p->regions.n, p->feather};
  enum err e = pixelate_regions(p, io, a.rect);
  return e == ERR_OK ? op_gpu_run(env, io, launch_pixelate, &a, NULL) : e;
}
#else
#define pixelate_gpu NULL
#endif

const struct api_op op_pixelate = {
    "pixelate",
    "Block mosaic: each block of the uploaded image (or of its regions) becomes its mean colour.",
    "Always mosaic.",
    &api_pixelate_endpoint,
    sizeof(struct pixelate_params),
    pixelate_methods,
    {{"block", "integer", "the block's side in pixels."},
     {"regions", "integer", "the number of regions (absent without regions)."}},
    pixelate_result,
    {[ENGINE_CPU] = pixelate_cpu, [ENGINE_GPU] = pixelate_gpu},
};
