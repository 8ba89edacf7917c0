/* The gate: blurd accepts its own connections, so that one over a limit gets an HTTP answer
 * instead of a reset. One thread waits on the listening socket with epoll. For each connection it
 * counts the open ones, in total and from the client's IPv4 address (an open-addressing table
 * sized for max_conns), and either passes it on to libmicrohttpd or refuses it: the canned answer
 * is written without reading the request (it fits in the socket buffer), the sending side is
 * shut, and the connection lingers: what the client still sends is read and dropped until it
 * closes, for at most LINGER_MS. Closing a socket with unread data would send a reset, and a
 * reset can destroy the answer before the client reads it. A refusal costs an accept, a write
 * and a close: a flood of them does not reach libmicrohttpd or the workers. When the process runs
 * out of descriptors, the oldest lingering refusal is closed to make room for the next client. */
#include "gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
#define EV_LISTEN  UINT64_MAX
#define EV_WAKE    (UINT64_MAX - 1)

struct ip_count {
  uint32_t addr;  /* network order */
  uint32_t count; /* 0: a free slot */
};

struct lingering {
  int fd; /* -1: closed already */
  double until;
};

struct gate {
  struct gate_config cfg;
  int lfd, ep, wake[2], port;
  pthread_t thread;
  int started;  /* the thread runs */
  int draining; /* atomic */
  pthread_mutex_t mu;
  unsigned open;             /* connections passed on and not yet released */
  struct ip_count *ips;      /* per address, when max_per_ip; nips slots, a power of 2 */
  size_t nips;               /* slots */
  struct lingering *lingers; /* a ring of LINGER_MAX, oldest at head */
  int head, nlingers;
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

/* Counts the connection in, or says why not. */
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

void gate_release(struct gate *g, const struct sockaddr *sa) {
  pthread_mutex_lock(&g->mu);
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

static void accept_all(struct gate *g) {
  for (int k = 0; k < 64; k++) { /* then let the lingering connections have a turn */
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = accept4(g->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && g->nlingers > 0) {
      linger_pop(g); /* out of descriptors: a refusal's linger gives way to a new client */
      continue;
    }
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL); /* out of descriptors */
      return;
    }
    enum gate_refusal why;
    if (!admit(g, (struct sockaddr *)&ss, &why))
      refuse(g, fd, why);
    else if (g->cfg.pass(g->cfg.arg, fd, (struct sockaddr *)&ss, len) != 0)
      gate_release(g, (struct sockaddr *)&ss);
  }
}

static void *gate_main(void *arg) {
  struct gate *g = arg;
  struct epoll_event ev[64];
  pthread_setname_np(pthread_self(), "blurd-gate");
  for (;;) {
    double now = now_ms();
    linger_expire(g, now);
    int timeout = g->nlingers ? (int)(g->lingers[g->head].until - now) + 1 : -1;
    int n = epoll_wait(g->ep, ev, 64, timeout);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.u64 == EV_WAKE) return NULL;
      if (ev[i].data.u64 == EV_LISTEN)
        accept_all(g);
      else
        linger_drain(&g->lingers[ev[i].data.u64]);
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
  int ok = g->lingers && (!cfg->max_per_ip || g->ips);
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
  if (g->wake[0] >= 0) close(g->wake[0]);
  if (g->ep >= 0) close(g->ep);
  if (g->lfd >= 0) close(g->lfd);
  pthread_mutex_destroy(&g->mu);
  free(g->lingers);
  free(g->ips);
  free(g);
}
