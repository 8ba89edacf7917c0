/* The gate: blurd accepts its own connections, so that one over a limit gets an HTTP answer
 * instead of a reset, and so that a probe still gets through when clients hold every connection.
 * One thread waits on the listening socket with epoll. For each connection it counts the open
 * ones, in total and from the client's IPv4 address (an open-addressing table sized for
 * max_conns), and passes it on to the HTTP loops when it is within the limits; one over a limit
 * waits for its request line (wait_add) and is passed on if it is a probe, else refused (refuse).
 * A refusal costs an accept, a write and a close: a flood of them does not reach the HTTP loops
 * or the workers. */
#include "gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define BACKLOG    4096 /* the kernel caps it at net.core.somaxconn */
#define LINGER_MAX 1024 /* refused connections lingering at once; past it the oldest is closed */
#define LINGER_MS  1000
#define WAIT_MAX   256  /* connections over a limit waiting for their request line */
#define WAIT_MS    2000 /* how long one may wait */
#define LINE_PEEK  512  /* bytes of a request line looked at */
#define EV_LISTEN  UINT64_MAX
#define EV_WAKE    (UINT64_MAX - 1)
#define EV_WAIT    (1ULL << 32) /* plus a slot of the waiting ring; below it: a lingering slot */

struct ip_count {
  uint32_t addr;  /* network order */
  uint32_t count; /* 0: a free slot */
};

struct lingering {
  int fd; /* -1: closed already */
  double until;
};

struct waiting { /* a connection over a limit, waiting for its request line */
  int fd;        /* -1: gone already */
  enum gate_refusal why;
  struct sockaddr_storage ss;
  socklen_t len;
  double until;
};

struct gate {
  struct gate_config cfg;
  int lfd, ep, wake[2], port;
  pthread_t thread;
  int started;  /* the thread runs */
  int draining; /* atomic */
  pthread_mutex_t mu;
  unsigned open;             /* connections passed on within the limits and not yet released */
  unsigned reserved;         /* connections of the reserve passed on and not yet released */
  struct ip_count *ips;      /* per address, when max_per_ip; nips slots, a power of 2 */
  size_t nips;               /* slots */
  struct lingering *lingers; /* a ring of LINGER_MAX, oldest at head */
  int head, nlingers;
  struct waiting *waits; /* a ring of WAIT_MAX, oldest at whead */
  int whead, nwaits;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint32_t ip_of(const struct sockaddr *sa) {
  return sa && sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_addr.s_addr : 0;
}

/* The slot of addr, or the free slot where it would go (under mu). */
static size_t ip_slot(const struct gate *g, uint32_t addr) {
  size_t i = (addr * 2654435761u) & (g->nips - 1);
  while (g->ips[i].count && g->ips[i].addr != addr) i = (i + 1) & (g->nips - 1);
  return i;
}

/* Empties slot i, moving later entries of its probe run back so that every lookup still finds
 * its entry (deletion by backward shift; under mu). */
static void ip_remove(struct gate *g, size_t i) {
  size_t mask = g->nips - 1;
  for (size_t j = (i + 1) & mask; g->ips[j].count; j = (j + 1) & mask) {
    size_t home = (g->ips[j].addr * 2654435761u) & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) { /* home is not in (i, j]: j may move to i */
      g->ips[i] = g->ips[j];
      i = j;
    }
  }
  g->ips[i].count = 0;
}

/* Counts the connection in: returns 1 within the limits, or 0 when it is over one (*why says
 * which) or the server drains. */
static int admit(struct gate *g, const struct sockaddr *sa, enum gate_refusal *why) {
  if (__atomic_load_n(&g->draining, __ATOMIC_SEQ_CST)) {
    *why = GATE_DRAINING;
    return 0;
  }
  int ok = 1;
  pthread_mutex_lock(&g->mu);
  size_t i = g->ips ? ip_slot(g, ip_of(sa)) : 0;
  if (g->open >= g->cfg.max_conns)
    ok = 0, *why = GATE_TOO_MANY;
  else if (g->ips && g->ips[i].count >= g->cfg.max_per_ip)
    ok = 0, *why = GATE_TOO_MANY_FROM_IP;
  if (ok) {
    g->open++;
    if (g->ips) g->ips[i] = (struct ip_count){ip_of(sa), g->ips[i].count + 1};
  }
  pthread_mutex_unlock(&g->mu);
  return ok;
}

/* Takes a place of the reserve for a probe over the limits; returns whether there was one. */
static int reserve_take(struct gate *g) {
  pthread_mutex_lock(&g->mu);
  int ok = g->reserved < g->cfg.reserve;
  g->reserved += (unsigned)ok;
  pthread_mutex_unlock(&g->mu);
  return ok;
}

void gate_release(struct gate *g, const struct sockaddr *sa, int reserve) {
  pthread_mutex_lock(&g->mu);
  if (reserve) {
    if (g->reserved > 0) g->reserved--;
    pthread_mutex_unlock(&g->mu);
    return;
  }
  if (g->open > 0) g->open--;
  if (g->ips) {
    size_t i = ip_slot(g, ip_of(sa));
    if (g->ips[i].count > 0 && --g->ips[i].count == 0) ip_remove(g, i);
  }
  pthread_mutex_unlock(&g->mu);
}

static void linger_close(struct lingering *l) {
  if (l->fd >= 0) close(l->fd); /* closing also takes it out of the epoll set */
  l->fd = -1;
}

/* Reads and drops what the client sends; closes at its end (or an error). */
static void linger_drain(struct lingering *l) {
  static char sink[65536]; /* only the gate's thread reads into it */
  ssize_t n;
  if (l->fd < 0) return;
  while ((n = recv(l->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
  }
  if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) linger_close(l);
}

static void linger_pop(struct gate *g) {
  linger_close(&g->lingers[g->head]);
  g->head = (g->head + 1) % LINGER_MAX;
  g->nlingers--;
}

/* Closes the lingering connections past their time, and the closed ones at the head. */
static void linger_expire(struct gate *g, double now) {
  while (g->nlingers > 0 && (g->lingers[g->head].fd < 0 || g->lingers[g->head].until <= now))
    linger_pop(g);
}

/* A refusal is the canned answer, written without reading the request (it fits in the socket
 * buffer); then the sending side is shut, and the connection lingers: what the client still sends
 * is read and dropped until it closes, for at most LINGER_MS. Closing a socket with unread data
 * would send a reset, and a reset can destroy the answer before the client reads it. */
static void refuse(struct gate *g, int fd, enum gate_refusal why) {
  char buf[1024];
  size_t len = g->cfg.answer(g->cfg.arg, why, buf, sizeof(buf));
  if (send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 || shutdown(fd, SHUT_WR) != 0) {
    close(fd); /* the client is gone already */
    return;
  }
  if (g->nlingers == LINGER_MAX) linger_pop(g); /* full: the oldest goes now */
  int slot = (g->head + g->nlingers) % LINGER_MAX;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)slot};
  g->lingers[slot] = (struct lingering){fd, now_ms() + LINGER_MS};
  g->nlingers++;
  if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) linger_close(&g->lingers[slot]);
}

/* The waiting connection of slot i leaves the ring: refused, passed on, or closed (the ring's
 * head moves past the slots already emptied). */
static void wait_clear(struct gate *g, int i) {
  struct waiting *w = &g->waits[i];
  if (w->fd >= 0) epoll_ctl(g->ep, EPOLL_CTL_DEL, w->fd, NULL);
  w->fd = -1;
  while (g->nwaits > 0 && g->waits[g->whead].fd < 0) {
    g->whead = (g->whead + 1) % WAIT_MAX;
    g->nwaits--;
  }
}

static void wait_refuse(struct gate *g, int i) {
  int fd = g->waits[i].fd;
  enum gate_refusal why = g->waits[i].why;
  wait_clear(g, i);
  refuse(g, fd, why);
}

/* A connection over a limit, or any new one while the server drains: it waits in a ring of
 * WAIT_MAX for its request line, which the gate peeks at without reading it (wait_ready), so that a
 * probe (a liveness check while draining) is still answered; without a way to tell a probe (no
 * is_probe) it is refused at once. A connection that sends nothing for WAIT_MS, or the oldest
 * waiting one when the ring is full, is refused. */
static void wait_add(struct gate *g, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     enum gate_refusal why) {
  if (!g->cfg.is_probe) {
    refuse(g, fd, why);
    return;
  }
  if (g->nwaits == WAIT_MAX) wait_refuse(g, g->whead); /* full: the oldest gets its answer */
  int i = (g->whead + g->nwaits) % WAIT_MAX;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = EV_WAIT | (uint64_t)i};
  g->waits[i] = (struct waiting){fd, why, *ss, len, now_ms() + WAIT_MS};
  g->nwaits++;
  if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) wait_refuse(g, i);
}

/* The waiting connection of slot i has bytes (or has closed): a probe's request line is passed on
 * as over, while the reserve has room; anything else is refused. */
static void wait_ready(struct gate *g, int i) {
  struct waiting *w = &g->waits[i];
  char line[LINE_PEEK];
  if (w->fd < 0) return;
  ssize_t n = recv(w->fd, line, sizeof(line), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) { /* the client left */
    close(w->fd);
    wait_clear(g, i);
    return;
  }
  const char *eol = memchr(line, '\n', (size_t)n);
  if (!eol && n < (ssize_t)sizeof(line)) return; /* the rest of the line is to come */
  if (eol && g->cfg.is_probe(g->cfg.arg, line, (size_t)(eol - line)) && reserve_take(g)) {
    int fd = w->fd;
    struct sockaddr_storage ss = w->ss;
    socklen_t len = w->len;
    enum gate_refusal why = w->why;
    epoll_ctl(g->ep, EPOLL_CTL_DEL, fd, NULL);
    w->fd = -1;
    wait_clear(g, i);
    if (g->cfg.pass(g->cfg.arg, fd, (struct sockaddr *)&ss, len, (int)why) != 0)
      gate_release(g, (struct sockaddr *)&ss, 1);
    return;
  }
  wait_refuse(g, i);
}

/* Refuses the waiting connections past their time. */
static void wait_expire(struct gate *g, double now) {
  for (int k = 0; k < g->nwaits; k++) {
    int i = (g->whead + k) % WAIT_MAX;
    if (g->waits[i].fd >= 0 && g->waits[i].until <= now) wait_refuse(g, i), k = -1;
  }
}

/* Accepts what is pending. When the process runs out of descriptors, the oldest lingering refusal
 * is closed to make room for the next client, then the oldest waiting connection is refused. */
static void accept_all(struct gate *g) {
  for (int k = 0; k < 64; k++) { /* then let the lingering connections have a turn */
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = accept4(g->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && g->nlingers > 0) {
      linger_pop(g); /* out of descriptors: a refusal's linger gives way to a new client */
      continue;
    }
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && g->nwaits > 0) {
      wait_refuse(g, g->whead); /* then the oldest waiting connection: refused, it lingers */
      continue;
    }
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL); /* out of descriptors */
      return;
    }
    enum gate_refusal why;
    if (!admit(g, (struct sockaddr *)&ss, &why))
      wait_add(g, fd, &ss, len, why);
    else if (g->cfg.pass(g->cfg.arg, fd, (struct sockaddr *)&ss, len, -1) != 0)
      gate_release(g, (struct sockaddr *)&ss, 0);
  }
}

/* The time until the next lingering or waiting connection is due, in ms; -1: none. */
static int next_due(const struct gate *g, double now) {
  double due = INFINITY;
  if (g->nlingers) due = g->lingers[g->head].until;
  for (int k = 0; k < g->nwaits; k++) {
    const struct waiting *w = &g->waits[(g->whead + k) % WAIT_MAX];
    if (w->fd >= 0 && w->until < due) due = w->until;
  }
  return isinf(due) ? -1 : due <= now ? 0 : (int)(due - now) + 1;
}

static void *gate_main(void *arg) {
  struct gate *g = arg;
  struct epoll_event ev[64];
  pthread_setname_np(pthread_self(), "blurd-gate");
  for (;;) {
    double now = now_ms();
    linger_expire(g, now);
    wait_expire(g, now);
    int n = epoll_wait(g->ep, ev, 64, next_due(g, now));
    for (int i = 0; i < n; i++) {
      uint64_t d = ev[i].data.u64;
      if (d == EV_WAKE) return NULL;
      if (d == EV_LISTEN)
        accept_all(g);
      else if (d & EV_WAIT)
        wait_ready(g, (int)(d & 0xffffffff));
      else
        linger_drain(&g->lingers[d]);
    }
  }
}

int gate_listen(const char *bind_to, int port, char *err, size_t errlen) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  int one = 1, fd = -1;
  if (inet_pton(AF_INET, bind_to, &addr.sin_addr) != 1) {
    snprintf(err, errlen, "--bind %s is not an IPv4 address", bind_to);
    return -1;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, BACKLOG) != 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: %s", bind_to, port, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

struct gate *gate_new(const struct gate_config *cfg, char *err, size_t errlen) {
  struct gate *g = calloc(1, sizeof(*g));
  if (!g) {
    snprintf(err, errlen, "out of memory");
    close(cfg->fd);
    return NULL;
  }
  *g = (struct gate){.cfg = *cfg, .lfd = cfg->fd, .ep = -1, .wake = {-1, -1}};
  struct sockaddr_in addr;
  socklen_t len = sizeof(addr);
  if (getsockname(g->lfd, (struct sockaddr *)&addr, &len) == 0) g->port = ntohs(addr.sin_port);
  pthread_mutex_init(&g->mu, NULL);
  if (cfg->max_per_ip) {
    for (g->nips = 16; g->nips < 2 * (size_t)cfg->max_conns;) g->nips *= 2;
    g->ips = calloc(g->nips, sizeof(*g->ips));
  }
  g->lingers = calloc(LINGER_MAX, sizeof(*g->lingers));
  g->waits = calloc(WAIT_MAX, sizeof(*g->waits));
  int ok = g->lingers && g->waits && (!cfg->max_per_ip || g->ips);
  if (!ok) snprintf(err, errlen, "out of memory");
  if (ok && ((g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || pipe2(g->wake, O_CLOEXEC) != 0)) {
    snprintf(err, errlen, "cannot start the accepting thread: %s", strerror(errno));
    ok = 0;
  }
  struct epoll_event el = {.events = EPOLLIN, .data.u64 = EV_LISTEN},
                     ew = {.events = EPOLLIN, .data.u64 = EV_WAKE};
  if (ok && (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &el) != 0 ||
             epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake[0], &ew) != 0)) {
    snprintf(err, errlen, "cannot start the accepting thread: %s", strerror(errno));
    ok = 0;
  }
  if (!ok) {
    gate_free(g);
    return NULL;
  }
  return g;
}

int gate_start(struct gate *g, char *err, size_t errlen) {
  g->started = pthread_create(&g->thread, NULL, gate_main, g) == 0;
  if (!g->started) snprintf(err, errlen, "cannot start the accepting thread");
  return g->started ? 0 : -1;
}

int gate_port(const struct gate *g) {
  return g->port;
}

void gate_drain(struct gate *g) {
  __atomic_store_n(&g->draining, 1, __ATOMIC_SEQ_CST);
}

void gate_stop(struct gate *g) {
  if (!g) return;
  if (g->started && write(g->wake[1], "x", 1) == 1) pthread_join(g->thread, NULL);
  g->started = 0;
}

void gate_free(struct gate *g) {
  if (!g) return;
  gate_stop(g);
  if (g->wake[1] >= 0) close(g->wake[1]);
  for (int i = 0; g->lingers && i < g->nlingers; i++)
    linger_close(&g->lingers[(g->head + i) % LINGER_MAX]);
  for (int i = 0; g->waits && i < g->nwaits; i++) {
    int fd = g->waits[(g->whead + i) % WAIT_MAX].fd;
    if (fd >= 0) close(fd);
  }
  if (g->wake[0] >= 0) close(g->wake[0]);
  if (g->ep >= 0) close(g->ep);
  if (g->lfd >= 0) close(g->lfd);
  pthread_mutex_destroy(&g->mu);
  free(g->lingers);
  free(g->waits);
  free(g->ips);
  free(g);
}
