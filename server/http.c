/* The HTTP front's event loops: the gate (gate.c) accepts connections and passes each to one loop,
 * a thread with an epoll set of its own; everything about a connection and its current request
 * happens on that thread (conn.c), but for a job's callback, which hands the answer back to the
 * loop through a queue and an eventfd. Each loop checks its connections' clocks every TICK_MS
 * (conn_tick). Here too: the server's start, drain and stop, and the gate's callbacks (a loop
 * takes a connection; a request line is a probe's; a refusal's answer). */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

/* ---- the loop ---- */

/* The jobs that called back: their answers go out on their connections, or are dropped. */
static void take_done(struct loop *l) {
  struct srv *s = l->srv;
  pthread_mutex_lock(&l->mu);
  struct request *r = l->done;
  l->done = NULL;
  pthread_mutex_unlock(&l->mu);
  while (r) {
    struct request *next = r->next;
    struct api_response *resp = r->resp;
    r->resp = NULL;
    conn_job_done(r, resp);
    __atomic_sub_fetch(&s->jobs, 1, __ATOMIC_SEQ_CST); /* the last touch: srv_drain waits */
    r = next;
  }
}

/* The connections the gate passed on join the loop's epoll set. */
static void take_incoming(struct loop *l) {
  pthread_mutex_lock(&l->mu);
  struct conn *c = l->incoming;
  l->incoming = NULL;
  pthread_mutex_unlock(&l->mu);
  while (c) {
    struct conn *next = c->next;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    c->events = ev.events;
    c->prev = NULL, c->next = l->conns;
    if (l->conns) l->conns->prev = c;
    l->conns = c;
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) conn_close(c);
    c = next;
  }
}

static void ticks(struct loop *l) {
  struct srv *s = l->srv;
  double now = api_now_ms(), until;
  __atomic_load(&s->pressure_until, &until, __ATOMIC_SEQ_CST);
  int draining = __atomic_load_n(&s->draining, __ATOMIC_SEQ_CST);
  for (struct conn *c = l->conns, *next; c; c = next) {
    next = c->next;
    conn_tick(c, now, draining, now < until);
  }
  /* Idle: the freed uploads, images and answers go back to the system, so that RSS returns to
   * its baseline after a burst. */
  if (l->index == 0 && __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) == 0 &&
      __atomic_exchange_n(&s->freed, 0, __ATOMIC_SEQ_CST))
    malloc_trim(0);
}

static void *loop_main(void *arg) {
  struct loop *l = arg;
  struct srv *s = l->srv;
  struct epoll_event ev[128];
  double next_tick = api_now_ms() + TICK_MS;
  pthread_setname_np(pthread_self(), "blurd-http");
  while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
    double now = api_now_ms();
    int timeout = now >= next_tick ? 0 : (int)(next_tick - now) + 1;
    int n = epoll_wait(l->ep, ev, 128, timeout);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.ptr) {
        conn_event(ev[i].data.ptr, ev[i].events);
        continue;
      }
      uint64_t k;
      if (read(l->efd, &k, sizeof(k)) < 0) { /* another wake-up read it */
      }
      take_incoming(l);
      take_done(l);
      if (__atomic_load_n(&s->draining, __ATOMIC_SEQ_CST)) next_tick = 0; /* sweep now */
    }
    if (api_now_ms() >= next_tick) {
      ticks(l);
      next_tick = api_now_ms() + TICK_MS;
    }
    conn_free_dead(l);
  }
  take_incoming(l);
  while (l->conns) conn_close(l->conns);
  conn_free_dead(l);
  return NULL;
}

/* ---- the gate's callbacks ---- */

/* gate_config.pass: a loop takes the connection. */
static int pass(void *arg, int fd, const struct sockaddr *sa, socklen_t len, int over) {
  struct srv *s = arg;
  struct conn *c = calloc(1, sizeof(*c));
  int one = 1;
  if (!c || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    free(c);
    close(fd);
    return -1;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct loop *l = &s->loops[__atomic_fetch_add(&s->next_loop, 1, __ATOMIC_RELAXED) % s->nloops];
  c->loop = l, c->fd = fd, c->over = over, c->progress = api_now_ms();
  memcpy(&c->addr, sa, len < sizeof(c->addr) ? len : sizeof(c->addr));
  pthread_mutex_lock(&l->mu);
  c->next = l->incoming;
  l->incoming = c;
  pthread_mutex_unlock(&l->mu);
  loop_wake(l);
  return 0;
}

/* gate_config.is_probe: whether the request line line[0..n) asks for a probe. */
static int probe_line(void *arg, const char *line, size_t n) {
  char copy[512], *sp1, *sp2;
  (void)arg;
  if (n >= sizeof(copy)) return 0;
  memcpy(copy, line, n);
  copy[n] = 0;
  if (!(sp1 = strchr(copy, ' ')) || !(sp2 = strchr(sp1 + 1, ' '))) return 0;
  *sp1 = *sp2 = 0;
  return api_is_probe(copy, sp1 + 1);
}

/* gate_config.answer: the refusal's error, Retry-After, and an X-Request-Id of its own. */
static size_t gate_answer(void *arg, enum gate_refusal why, char *buf, size_t cap) {
  struct srv *s = arg;
  const struct canned *c = &s->canned[why];
  char id[API_REQUEST_ID_MAX + 1];
  api_request_id(s->api, NULL, id);
  api_refused(s->api, c->e);
  int n = snprintf(buf, cap,
                   "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nRetry-After: 1\r\nX-Request-Id: %s\r\n"
                   "Connection: close\r\n\r\n%.*s",
                   c->resp->status, http_reason(c->resp->status), http_date(), c->resp->len, id,
                   (int)c->resp->len, (const char *)c->resp->body);
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* ---- the server ---- */

int srv_listen(const char *bind, int port, char *err, size_t errlen) {
  return gate_listen(bind, port, err, errlen);
}

static int loops_start(struct srv *s, char *err, size_t errlen) {
  s->nloops = s->cfg.threads > 0 ? s->cfg.threads : 1;
  if (!(s->loops = calloc((size_t)s->nloops, sizeof(*s->loops)))) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < s->nloops; i++) {
    struct loop *l = &s->loops[i];
    *l = (struct loop){.srv = s, .ep = -1, .efd = -1, .index = i};
    pthread_mutex_init(&l->mu, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
        epoll_ctl(l->ep, EPOLL_CTL_ADD, l->efd, &ev) != 0 ||
        pthread_create(&l->thread, NULL, loop_main, l) != 0) {
      snprintf(err, errlen, "cannot start the HTTP threads: %s", strerror(errno));
      return -1;
    }
    l->started = 1;
  }
  return 0;
}

struct srv *srv_new(const struct srv_config *cfg, struct api_ctx *api, char *err, size_t errlen) {
  struct srv *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    close(cfg->listen_fd);
    return NULL;
  }
  s->api = api;
  s->cfg = *cfg;
  static const enum err refusals[] = {[GATE_TOO_MANY] = ERR_TOO_MANY_CONNECTIONS,
                                      [GATE_TOO_MANY_FROM_IP] =
                                          ERR_TOO_MANY_CONNECTIONS_FROM_ADDRESS,
                                      [GATE_DRAINING] = ERR_SHUTTING_DOWN};
  int ok = 1;
  for (int i = 0; i < 3; i++) {
    s->canned[i] = (struct canned){refusals[i], api_error_response(refusals[i], NULL)};
    ok &= s->canned[i].resp != NULL;
  }
  if (!ok) snprintf(err, errlen, "out of memory");
  struct gate_config gc = {.fd = cfg->listen_fd,
                           .max_conns = cfg->max_conns,
                           .max_per_ip = cfg->max_conns_ip,
                           .reserve = RESERVE_CONNS,
                           .pass = pass,
                           .is_probe = probe_line,
                           .answer = gate_answer,
                           .arg = s};
  if (!ok || loops_start(s, err, errlen) != 0) {
    close(cfg->listen_fd);
  } else {
    s->gate = gate_new(&gc, err, errlen);
  }
  /* s->gate is set before the gate accepts: a connection it passes on may close at once, and its
   * loop releases it through s->gate */
  if (!s->gate || gate_start(s->gate, err, errlen) != 0) {
    srv_free(s);
    return NULL;
  }
  s->port = gate_port(s->gate);
  return s;
}

int srv_port(const struct srv *s) {
  return s->port;
}

int srv_drain(struct srv *s, double timeout_s) {
  __atomic_store_n(&s->draining, 1, __ATOMIC_SEQ_CST);
  gate_drain(s->gate); /* new connections: 503 shutting_down, but probes */
  for (int i = 0; i < s->nloops; i++) loop_wake(&s->loops[i]);
  double end = api_now_ms() + timeout_s * 1e3;
  int n;
  /* requests with a complete head whose answers are not written, and jobs that have not called
   * back (of requests answered at their deadline, or whose clients left) */
  while ((n = __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) +
              __atomic_load_n(&s->jobs, __ATOMIC_SEQ_CST)) > 0 &&
         api_now_ms() < end)
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  return n;
}

void srv_free(struct srv *s) {
  if (!s) return;
  gate_stop(s->gate); /* no new connections */
  __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
  for (int i = 0; s->loops && i < s->nloops; i++) {
    struct loop *l = &s->loops[i];
    if (l->started) {
      loop_wake(l);
      pthread_join(l->thread, NULL); /* it closes its connections */
    }
    if (l->efd >= 0) close(l->efd);
    if (l->ep >= 0) close(l->ep);
    pthread_mutex_destroy(&l->mu);
  }
  gate_free(s->gate);
  for (int i = 0; i < 3; i++) api_response_free(s->canned[i].resp);
  free(s->loops);
  free(s);
}
