/* What the engine says of itself to the api: its backend's name, its devices and their memory,
 * where the codecs run, and the batches of the device's JPEG engines. */
#include "engine_int.h"

#include <stdio.h>

int engine_leave_to_exit(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) && e->ops->leave_to_exit;
}

const char *engine_name(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) ? e->name : "starting";
}

const char *engine_worker_name(struct worker *w) {
  return w->ops->worker_name(w->state);
}

/* The devices in use, as far as the HTTP threads may know: 0 until the backend is chosen. */
static int devices(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) ? e->ndev : 0;
}

/* Whether device dev's context is made: reading its free memory before then would make it (in the
 * thread that asks, /readyz's during the start). */
static int dev_open(struct engine *e, int dev) {
  return __atomic_load_n(&e->dev_open[dev], __ATOMIC_ACQUIRE);
}

int engine_device_memory(struct engine *e, int dev, size_t *held, size_t *used, size_t *total) {
  if (dev < 0 || dev >= devices(e) || !e->ops->device_memory ||
      e->ops->device_memory(dev, dev_open(e, dev), used, total) != 0)
    return -1;
  *held = 0;
  pthread_mutex_lock(&e->mu); /* the start thread may still add workers */
  int n = e->nworkers;
  pthread_mutex_unlock(&e->mu);
  for (int i = dev; i < n && e->ops->worker_bytes; i += e->ndev) {     /* i uses device i % ndev */
    void *w = __atomic_load_n(&e->workers[i].state, __ATOMIC_ACQUIRE); /* NULL: not made yet */
    if (w) *held += e->ops->worker_bytes(w);
  }
  return 0;
}

json_t *engine_devices(struct engine *e) {
  json_t *arr = json_array();
  for (int d = 0; arr && d < devices(e) && e->ops->device_json; d++) {
    json_t *o = e->ops->device_json(d, dev_open(e, d), e->nworkers / e->ndev);
    if (o) json_array_append_new(arr, o);
  }
  return arr;
}

json_t *engine_codecs(struct engine *e) {
  if (!__atomic_load_n(&e->started, __ATOMIC_ACQUIRE))
    return json_pack("{s:b, s:s}", "gpu", 0, "reason",
                     "starting: JPEG's codecs are not chosen yet");
  json_t *o = json_pack("{s:b}", "gpu", 0);
  for (int f = CODEC_NONE + 1; o && f < CODEC_NFORMATS; f++) { /* the format table's */
    const struct codec_format_desc *d = codec_format(f);
    char key[32];
    if (d->data) continue;
    json_object_set_new(o, d->name, json_string(d->lib));
    snprintf(key, sizeof(key), "%s_decode", d->name);
    if (d->reader) json_object_set_new(o, key, json_string(d->reader));
    snprintf(key, sizeof(key), "%s_encode", d->name);
    if (d->writer) json_object_set_new(o, key, json_string(d->writer));
  }
  const char *decoder = NULL;
  if (o && e->fast_codecs) e->ops->codecs_json(e->shared, o, &decoder);
  if (o && !e->fast_codecs) json_object_set_new(o, "reason", json_string(e->codecs_why));
  return o;
}

int engine_device_codecs(struct engine *e, const char **jpeg_decoder) {
  int fast = __atomic_load_n(&e->started, __ATOMIC_ACQUIRE) && e->fast_codecs;
  *jpeg_decoder = fast ? e->jpeg_decoder : "libjpeg-turbo";
  return fast;
}

int engine_video_stats(struct engine *e, struct engine_video_stats *s) {
  if (!__atomic_load_n(&e->started, __ATOMIC_ACQUIRE) || !e->ops->video_stats) return -1;
  return e->ops->video_stats(e->shared, s);
}

int engine_batch_stats(struct engine *e, int dev, struct engine_batch_stats *s) {
  if (dev < 0 || dev >= devices(e) || !e->ops->batch_stats) return -1;
  return e->ops->batch_stats(e->shared, dev, s);
}
