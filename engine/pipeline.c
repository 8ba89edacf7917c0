/* The pipeline of an image job on a worker: decode, the operation's compute for the worker's
 * backend, encode, each step timed here so that every backend reports the same names. It only
 * orchestrates: pixels are computed in cpu/ and gpu/, encoded in codecs/. Between the steps the
 * job gives up early when its deadline has passed or its client has left; within every step the
 * same two questions go to the work itself, through the cancel token set for the thread around
 * the whole job (struct cpu_cancel): the filters and the reference ask it (cpu_cancelled), and so
 * do the decoders and encoders, through the codecs' hook (codec_cancel_set), which asks the same
 * token. Their loops stop within milliseconds, and an unfinished result is never encoded. */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

struct cpu_image op_image(const struct codec_image *img) {
  return (struct cpu_image){img->pixels, img->width, img->height, img->channels, img->depth};
}

enum err op_host_output(struct op_io *io) {
  struct cpu_image shape = op_image(io->in);
  *io->out = *io->in;
  io->out->pixels = codec_alloc_pixels(cpu_image_bytes(&shape));
  return io->out->pixels ? ERR_OK : ERR_OUT_OF_MEMORY;
}

/* Whether the job should stop before its next step. */
static enum err still_wanted(const struct engine_image_job *j) {
  if (j->deadline > 0 && clock_ms() > j->deadline) return ERR_DEADLINE_EXCEEDED;
  if (j->client_gone && j->client_gone(j->arg)) return ERR_CLIENT_GONE;
  return ERR_OK;
}

/* The codecs' hook (codec_cancel_set): the job's token, from any thread the codec uses. */
static int codec_stop(void *token) {
  return cpu_cancel_check(token) != CPU_RUNNING;
}

/* The upload's ICC profile into r (read from the file's bytes, whichever decoder ran); with
 * colorspace=srgb, in's pixels converted to sRGB on the host and the profile dropped. */
static enum err colour(const struct engine_image_job *j, struct worker *w, struct engine_image *r) {
  if (codec_icc_read(j->image, j->len, &r->icc, &r->icc_len) != CODEC_OK) return ERR_OUT_OF_MEMORY;
  if (!r->icc || !j->to_srgb) return ERR_OK;
  enum err e = w->ops->to_host(w->state, &r->in);
  if (e == ERR_OK && codec_to_srgb(&r->in, r->icc, r->icc_len) < 0) e = cpu_stop_error();
  free(r->icc);
  r->icc = NULL, r->icc_len = 0;
  return e;
}

/* The compute on w's backend: its own column, or the CPU's on host pixels where it has none
 * (without a pool: on the worker's thread). The filters' loops stop once the deadline has passed
 * or the client has gone, and the compute then returns why (ERR_DEADLINE_EXCEEDED or
 * ERR_CLIENT_GONE). */
static enum err run_op(const struct engine_image_job *j, struct worker *w, struct op_io *io) {
  op_compute_fn fn = j->compute[w->ops->column];
  struct op_env env = w->ops->env(w->state);
  enum err e = ERR_OK;
  if (!fn) {
    fn = j->compute[ENGINE_CPU];
    env = (struct op_env){NULL, env.auto_method, NULL};
    e = w->ops->to_host(w->state, io->in);
  }
  return e == ERR_OK ? fn(&env, j->params, io) : e;
}

/* Decodes, runs the compute and encodes; on success r->enc holds the answer and r->img the
 * pixels it came from (out, or in without a compute). */
static enum err process(const struct engine_image_job *j, struct worker *w,
                        struct engine_image *r) {
  struct engine_timing *t = &r->t;
  struct op_io io = {&r->in, &r->out, &r->res, &t->st, r->msg, sizeof(r->msg)};
  struct codec_encode_opts o;
  enum err e = still_wanted(j);
  if (e != ERR_OK) return e;
  double t0 = clock_ms();
  e = w->ops->decode(w->state, j->image, j->len, &j->lim, &r->in, &t->decoder, r->msg,
                     sizeof(r->msg));
  if (e == ERR_OK) e = colour(j, w, r);
  t->decode = clock_ms() - t0; /* the profile read and colour conversion included */
  if (e == ERR_OK) e = still_wanted(j);
  memset(&o, 0, sizeof(o));
  if (e == ERR_OK) /* before the compute: a 406 costs no filtering */
    e = j->output(j->arg, r->in.format, &o, r->msg, sizeof(r->msg));
  if (e == ERR_OK && j->compute) e = run_op(j, w, &io);
  if (e == ERR_OK) e = still_wanted(j);
  if (e != ERR_OK) return e;
  o.icc = r->icc, o.icc_len = r->icc_len;
  struct codec_image *img = j->compute ? &r->out : &r->in;
  img->format = o.format;
  r->img = img;
  t0 = clock_ms();
  e = w->ops->encode(w->state, img, &o, &r->enc, &r->len, &t->encoder, &t->st.download, r->msg,
                     sizeof(r->msg));
  t->encode = clock_ms() - t0; /* download included, when there is one */
  return e;
}

enum err engine_image_run(struct worker *w, const struct engine_image_job *j,
                          struct engine_image *r) {
  r->t = (struct engine_timing){-1, -1, {-1, -1, -1, -1, -1}, NULL, NULL};
  r->res.psnr = __builtin_nan("");
  struct cpu_cancel token = {j->deadline, j->client_gone, j->arg, 0, 0, 0};
  struct codec_cancel hook = {codec_stop, &token};
  cpu_cancel_set(&token);
  codec_cancel_set(&hook);
  enum err e = process(j, w, r);
  /* A job its token stopped answers why, whatever its unfinished step made of the stop (a lost
   * GPU still stops the process). */
  enum err stop = e != ERR_OK && e != ERR_GPU_LOST ? cpu_stop_error() : ERR_OK;
  if (stop != ERR_OK) e = stop;
  codec_cancel_set(NULL);
  cpu_cancel_set(NULL);
  if (e == ERR_DEADLINE_EXCEEDED || e == ERR_CLIENT_GONE) r->msg[0] = 0;
  if (e == ERR_GPU_LOST && w->engine->cfg.on_fatal) /* the process stops and is restarted */
    w->engine->cfg.on_fatal(w->engine->cfg.on_fatal_arg, 70);
  return e;
}

void engine_image_free(struct engine_image *r) {
  free(r->enc);
  free(r->icc);
  codec_image_free(&r->out);
  codec_image_free(&r->in);
  r->enc = r->icc = NULL;
}
