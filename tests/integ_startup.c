/* Start and stop against the real binary on the CPU backend (issue 34; CI has no GPU, and
 * tests/stress/startup.py runs the same checks on the GPU machine): with the default warm-up the
 * port answers within 1 s of the start and /readyz says ready within 3 s; a SIGTERM while the
 * workers still warm up ends the process with status 0 within 1 s, where it used to wait for every
 * worker's warm-up; with a GPU driver's device node the backend is chosen after the port answers.
 */
#include "harness.h"

#include <jansson.h>
#include "test.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The status of GET /readyz (0: no answer); *warming is set when its status says "warming". */
static long readyz(const struct server *s, int *warming) {
  struct http_resp r;
  if (http_request(s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) != 0) return 0;
  long st = r.status;
  *warming = r.body && strstr(r.body, "\"warming\"") != NULL;
  http_resp_free(&r);
  return st;
}

/* /readyz's "workers" and "workers_ready" (-1 when absent). */
static void readyz_workers(const struct server *s, long *workers, long *ready) {
  struct http_resp r;
  *workers = *ready = -1;
  if (http_request(s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) != 0) return;
  json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
  json_t *w = json_object_get(o, "workers"), *wr = json_object_get(o, "workers_ready");
  if (json_is_integer(w)) *workers = (long)json_integer_value(w);
  if (json_is_integer(wr)) *ready = (long)json_integer_value(wr);
  json_decref(o);
  http_resp_free(&r);
}

static void test_ready_in_seconds(void) {
  struct server s;
  int warming = 0;
  double t0 = now_s();
  server_start(&s, (const char *[]){"--backend", "cpu", "--warm-image", "auto", NULL});
  double port = now_s() - t0;
  long st = 0;
  while ((st = readyz(&s, &warming)) != 200 && now_s() - t0 < 10) usleep(10000);
  double ready = now_s() - t0;
  fprintf(stderr, "    port answered after %.2f s, ready after %.2f s\n", port, ready);
  ASSERT_INT(st, ==, 200);
  ASSERT_DBL(port, <=, 1.0);
  ASSERT_DBL(ready, <=, 3.0);
  long workers, made;
  readyz_workers(&s, &workers, &made); /* the CPU backend's workers are all first ones */
  ASSERT_INT(workers, >=, 2);
  ASSERT_INT(made, ==, workers);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* A warm-up image large enough that the two workers are still warming when the signal comes
 * (about 4 s on a 2-core machine), so that the stop cannot wait for them. */
static void test_sigterm_during_warm_up(void) {
  struct server s;
  int warming = 0;
  server_start(&s, (const char *[]){"--backend", "cpu", "--workers", "2", "--warm-image",
                                    "5000x5000x4", NULL});
  ASSERT_INT(readyz(&s, &warming), ==, 503);
  ASSERT(warming);
  long workers, made;
  readyz_workers(&s, &workers, &made); /* none takes jobs before its warm-up ends */
  ASSERT_INT(workers, ==, 2);
  ASSERT_INT(made, ==, 0);
  double t0 = now_s();
  int rc = server_stop(&s, SIGTERM);
  double took = now_s() - t0;
  fprintf(stderr, "    SIGTERM during the warm-up: exit %d after %.2f s\n", rc, took);
  ASSERT_INT(rc, ==, 0);
  ASSERT_DBL(took, <=, 1.0);
}

/* /readyz's "backend" (NULL when absent). Caller frees. */
static char *readyz_backend(const struct server *s) {
  struct http_resp r;
  if (http_request(s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) != 0) return NULL;
  json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
  const char *b = json_string_value(json_object_get(o, "backend"));
  char *copy = b ? strdup(b) : NULL;
  json_decref(o);
  http_resp_free(&r);
  return copy;
}

/* Runs blurd with flag value and /dev/null standing for the GPU driver's node, on a machine with
 * no GPU: it must exit 1 with a message on stderr that holds why. */
static void expect_refusal(const char *flag, const char *value, const char *why) {
  const char *args[] = {flag, value, NULL}, *env[] = {"BLURD_TEST_GPU_NODE=/dev/null", NULL};
  char msg[1024];
  int status = refused_start(args, env, msg, sizeof(msg));
  fprintf(stderr, "    %s %s: exit %d: %s", flag, value, status, msg);
  ASSERT_INT(status, ==, 1);
  ASSERT(strstr(msg, why) != NULL);
}

/* Where the GPU driver's device node exists, the backend is chosen on the start thread, after the
 * port answers (CUDA's start of every visible GPU took up to 1 s with four). BLURD_TEST_GPU_NODE
 * makes /dev/null stand for the node, so CI (no GPU, no node) runs that path: without a GPU the
 * backend is the CPU, chosen after the port; a request sent before it is chosen is served; and
 * --backend gpu and --gpu-codecs on exit 1 with their reasons. A build without CUDA chooses at
 * once: the same answers. */
static void test_backend_chosen_after_port(void) {
  const char *gpu = getenv("BLURD_EXPECT_BACKEND");
  int on_gpu = gpu && strncmp(gpu, "cuda", 4) == 0;
  struct server s;
  const char *env[] = {"BLURD_TEST_GPU_NODE=/dev/null", NULL};
  double t0 = now_s();
  server_start_env(&s, NULL, env);
  double port = now_s() - t0;
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  struct http_resp r;
  ASSERT(http_post_form(&s, "/blur?sigma=3", "image", img, len, NULL, NULL, &r) == 0);
  ASSERT_INT(r.status, ==, 200); /* queued before the workers existed, then served */
  http_resp_free(&r);
  int warming = 0;
  long st = 0;
  while ((st = readyz(&s, &warming)) != 200 && now_s() - t0 < 10) usleep(10000);
  double ready = now_s() - t0;
  char *backend = readyz_backend(&s);
  fprintf(stderr, "    port answered after %.2f s, ready after %.2f s, backend %s\n", port, ready,
          backend ? backend : "(none)");
  ASSERT_INT(st, ==, 200);
  ASSERT_DBL(port, <=, 1.0);
  ASSERT_DBL(ready, <=, 3.0);
  ASSERT(backend != NULL);
  if (on_gpu)
    ASSERT(strncmp(backend, "cuda", 4) == 0);
  else
    ASSERT_STR(backend, "cpu");
  free(backend);
  free(img);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  if (on_gpu) return;
  expect_refusal("--backend", "gpu", "--backend gpu: ");
  expect_refusal("--gpu-codecs", "on", "--gpu-codecs on: ");
}

int main(void) {
  unsetenv("BLURD_WAIT_READY"); /* these tests time the warm-up themselves */
  curl_global_init(CURL_GLOBAL_DEFAULT);
  RUN(test_ready_in_seconds);
  RUN(test_sigterm_during_warm_up);
  RUN(test_backend_chosen_after_port);
  curl_global_cleanup();
  fprintf(stderr, "integ_startup: all passed\n");
  return 0;
}
