/* The engine's start: which backend runs (the first of the table below that can, unless
 * --backend names one), how many workers, and where JPEG is decoded and encoded (the backend's own
 * codecs when they start, the host's otherwise). A backend whose devices take long to ask for (a
 * GPU's driver starts every device) is chosen on a thread of its own after the server answers, and
 * so are the backend's codecs with --gpu-codecs auto; a failure there stops the process through
 * on_fatal, since a server that would never be ready is of no use. */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The backends, in the order `auto` tries them: a backend is a file that fills its verbs and a
 * line here. */
static const struct backend_ops *const backends[] = {&backend_gpu_ops, &backend_cpu_ops};
#define NBACKENDS (int)(sizeof(backends) / sizeof(backends[0]))

static char built[64]; /* engine_built's answer, made once */

static void make_built(void) {
  for (int c = 0; c < ENGINE_NBACKENDS; c++)
    for (int i = 0; i < NBACKENDS; i++)
      if (backends[i]->column == (enum engine_backend)c && !backends[i]->absent)
        snprintf(built + strlen(built), sizeof(built) - strlen(built), "%s%s", built[0] ? "," : "",
                 backends[i]->kind);
}

const char *engine_built(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_built);
  return built;
}

int engine_cores(void) {
  static int n; /* set by engine_new, or its start thread, before any worker runs */
  char why[700];
  if (!n && (n = cpu_cores("", why, sizeof(why))) > 0) fprintf(stderr, "blurd: %s\n", why);
  return n > 0 ? n : 1;
}

/* Whether the backend cfg asks for may run b: auto any, else the one of its column. */
static int wanted(const struct engine_config *cfg, const struct backend_ops *b) {
  return cfg->backend == ENGINE_AUTO ||
         (cfg->backend == ENGINE_ONLY_CPU) == (b->column == ENGINE_CPU);
}

/* Picks the first backend cfg allows that can run here, and makes what its workers share. Returns
 * its devices (0 for the host), or -1 with err filled. */
static int choose_ops(struct engine *e, char *err, size_t errlen) {
  for (int i = 0; i < NBACKENDS; i++) {
    const struct backend_ops *b = backends[i];
    char why[256] = "";
    if (!wanted(&e->cfg, b)) continue;
    int ndev = b->probe(&e->cfg, why, sizeof(why));
    if (ndev < 0) {
      if (e->cfg.backend != ENGINE_AUTO) {
        snprintf(err, errlen, "%s", why);
        return -1;
      }
      if (!e->unavailable[0]) snprintf(e->unavailable, sizeof(e->unavailable), "%s", why);
      continue;
    }
    if (!(e->shared = b->shared_new(&e->cfg, ndev, engine_cores(), err, errlen))) return -1;
    e->ops = b;
    return ndev;
  }
  snprintf(err, errlen, "no backend can run here");
  return -1;
}

/* Starts the backend's own codecs for per_device workers a device, or says why the host's serve.
 * Returns 0, or -1 with err filled when cfg requires them and they cannot start. */
static int start_codecs(struct engine *e, int per_device, char *err, size_t errlen) {
  char *why = e->codecs_why;
  size_t n = sizeof(e->codecs_why);
  int rc = 0;
  if (e->cfg.gpu_codecs == ENGINE_GPU_CODECS_OFF)
    snprintf(why, n, "--gpu-codecs off");
  else if (!e->ops->codecs_start)
    snprintf(why, n, "%s",
             e->cfg.backend == ENGINE_ONLY_CPU ? "the CPU backend (--backend cpu)"
             : e->unavailable[0]               ? e->unavailable
                                               : "no device of its own");
  else
    rc = e->ops->codecs_start(e->shared, &e->cfg, per_device, why, n);
  if (rc < 0 || (rc == 0 && e->cfg.gpu_codecs == ENGINE_GPU_CODECS_ON)) {
    snprintf(err, errlen, "--gpu-codecs on: %s", why);
    return -1;
  }
  e->fast_codecs = rc > 0;
  if (e->fast_codecs) {
    __atomic_store_n(&e->dev_open[0], 1, __ATOMIC_RELEASE);
    why[0] = 0;
    json_t *o = json_object(); /* the decoder's name, as /metrics and /readyz say it */
    e->ops->codecs_json(e->shared, o, &e->jpeg_decoder);
    json_decref(o);
  } else if (e->ndev > 0) {
    fprintf(stderr, "blurd: JPEG runs on the CPU (libjpeg-turbo): %s\n", why);
  }
  return 0;
}

/* Chooses where JPEG runs, then makes and starts the workers. Returns 0, or -1 with err filled. */
static int start_workers(struct engine *e, char *err, size_t errlen) {
  int cores = engine_cores(), nd = e->ndev ? e->ndev : 1, rc = 0;
  /* the codecs' batches hold at most the workers a device has with them */
  int per = e->ops->workers_per_device(&e->cfg, e->ndev, cores, 1);
  if (start_codecs(e, e->ndev ? per : 0, err, errlen) != 0) return -1;
  int n = e->ops->workers_per_device(&e->cfg, e->ndev, cores, e->fast_codecs) * nd;
  e->workers = calloc((size_t)n, sizeof(*e->workers));
  e->threads = calloc((size_t)n, sizeof(*e->threads));
  if (!e->workers || !e->threads) return -1;
  int first = 0;
  for (int i = 0; i < n; i++) first += engine_first_worker(e, i);
  pthread_mutex_lock(&e->mu);
  e->warming = first;
  e->later = n - first;
  pthread_mutex_unlock(&e->mu);
  __atomic_store_n(&e->started, 1, __ATOMIC_RELEASE);
  for (int i = 0; rc == 0 && i < n && !engine_stopping(e); i++)
    rc = engine_start_worker(e, i, err, errlen);
  if (rc == 0 && engine_stopping(e)) { /* engine_free has begun: the workers not made never warm */
    pthread_mutex_lock(&e->mu);
    for (int i = e->nworkers; i < n; i++) e->warming -= engine_first_worker(e, i);
    pthread_mutex_unlock(&e->mu);
  }
  return rc;
}

/* Chooses the backend and makes what goes with its devices, then says so (chosen: the HTTP
 * threads read the name and the devices from then on). Returns 0, or -1 with err filled (empty
 * when out of memory). */
static int choose_backend(struct engine *e, char *err, size_t errlen) {
  int ndev = choose_ops(e, err, errlen), nmu = ndev > 0 ? ndev : 1;
  if (ndev < 0) return -1;
  e->ndev = ndev;
  e->dev_failed = calloc((size_t)nmu, sizeof(*e->dev_failed));
  e->dev_open = calloc((size_t)nmu, sizeof(*e->dev_open));
  e->dev_mu = calloc((size_t)nmu, sizeof(*e->dev_mu));
  for (int d = 0; e->dev_mu && d < nmu; d++) pthread_mutex_init(&e->dev_mu[d], NULL);
  if (!e->dev_failed || !e->dev_open || !e->dev_mu) return -1;
  static const int warm[3] = {1920, 1080, 3}; /* a 1080p frame: what a first request needs */
  memcpy(e->warm, e->cfg.warm[0] >= 0 ? e->cfg.warm : warm, sizeof(e->warm));
  e->ops->name(ndev, e->name, sizeof(e->name));
  __atomic_store_n(&e->chosen, 1, __ATOMIC_RELEASE);
  return 0;
}

/* Whether a backend the configuration allows takes long to ask for its devices. */
static int defer_choice(const struct engine_config *cfg) {
  for (int i = 0; i < NBACKENDS; i++)
    if (wanted(cfg, backends[i]) && backends[i]->probe_is_slow && backends[i]->probe_is_slow(cfg))
      return 1;
  return 0;
}

/* The start thread (engine_new): chooses the backend when that was left to it, then starts the
 * codecs and the workers. A failure here leaves a server that would never be ready: on_fatal. */
static void *start_main(void *arg) {
  struct engine *e = arg;
  char err[256] = "";
  pthread_setname_np(pthread_self(), "blurd-start");
  int rc = 0;
  if (!__atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE)) {
    rc = choose_backend(e, err, sizeof(err));
    if (rc == 0)
      fprintf(stderr, "blurd: backend %s, chosen %.2f s after the start\n", e->name,
              (clock_ms() - e->t_start) / 1e3);
  }
  if (rc == 0) rc = start_workers(e, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "blurd: the backend does not start: %s\n", err[0] ? err : "out of memory");
    if (e->cfg.on_fatal) e->cfg.on_fatal(e->cfg.on_fatal_arg, 1);
  }
  return NULL;
}

struct engine *engine_new(const struct engine_config *cfg, char *err, size_t errlen) {
  struct engine *e = calloc(1, sizeof(*e));
  if (errlen) err[0] = 0;
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->warm_mu, NULL);
  pthread_cond_init(&e->warm_cv, NULL);
  pthread_cond_init(&e->cv, NULL);
  pthread_cond_init(&e->ready_cv, NULL);
  e->t_start = clock_ms();
  e->cfg = *cfg;
  e->cap = cfg->queue > 0 ? cfg->queue : 1;
  e->ring = calloc((size_t)e->cap, sizeof(*e->ring));
  e->warming = 1; /* not ready until the workers are made and warm */
  int rc = e->ring ? 0 : -1, defer = defer_choice(cfg);
  if (rc == 0 && !defer) rc = choose_backend(e, err, errlen);
  /* The choice and the codecs' start (about a second) go on a thread of their own, so that the
   * server answers (/readyz says it warms up) meanwhile, where the choice was left to it or with
   * --gpu-codecs auto; otherwise a failure of --gpu-codecs on stops the start before the port
   * answers, and the host backend starts in no time. */
  if (rc == 0 && (defer || (e->ndev > 0 && cfg->gpu_codecs == ENGINE_GPU_CODECS_AUTO)))
    rc = (e->has_starter = pthread_create(&e->starter, NULL, start_main, e) == 0) ? 0 : -1;
  else if (rc == 0)
    rc = start_workers(e, err, errlen);
  if (rc != 0 && !*err) snprintf(err, errlen, "out of memory");
  if (rc != 0) {
    engine_free(e);
    return NULL;
  }
  return e;
}

void engine_free(struct engine *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_cond_broadcast(&e->ready_cv); /* later workers waiting for their turn give up */
  pthread_mutex_unlock(&e->mu);
  if (e->has_starter) pthread_join(e->starter, NULL); /* it makes no worker once stop is set */
  pthread_mutex_lock(&e->warm_mu);                    /* a worker waiting to warm up gives up */
  pthread_cond_broadcast(&e->warm_cv);
  pthread_mutex_unlock(&e->warm_mu);
  for (int i = 0; i < e->nworkers; i++) pthread_join(e->threads[i], NULL);
  for (int i = 0; i < e->nworkers; i++)
    if (e->workers[i].state) e->ops->worker_free(e->workers[i].state);
  if (e->ops && e->shared) e->ops->shared_free(e->shared); /* after the workers: they use it */
  for (int d = 0; e->dev_mu && d < (e->ndev ? e->ndev : 1); d++)
    pthread_mutex_destroy(&e->dev_mu[d]);
  free(e->dev_mu);
  free(e->dev_failed);
  free(e->dev_open);
  pthread_cond_destroy(&e->cv);
  pthread_cond_destroy(&e->ready_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->warm_mu);
  pthread_cond_destroy(&e->warm_cv);
  free(e->threads);
  free(e->workers);
  free(e->ring);
  free(e);
}
