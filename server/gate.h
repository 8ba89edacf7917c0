/* gate: blurd's listening socket and the one thread that accepts on it. A connection within the
 * limits is handed to the HTTP loops. One over a limit waits for its request line: a probe
 * (health, readiness, metrics) is handed over too, marked as over, while a few places of the
 * reserve last; anything else, and any connection while the server drains, is answered in HTTP
 * (429 or 503 with Retry-After and the JSON error), without its request being read, and closed.
 * Internal to server/. */
#ifndef BLURD_GATE_H
#define BLURD_GATE_H

#include <stddef.h>
#include <sys/socket.h>

enum gate_refusal {
  GATE_TOO_MANY,         /* over max_conns: 503 too_many_connections */
  GATE_TOO_MANY_FROM_IP, /* over max_per_ip: 429 too_many_connections_from_address */
  GATE_DRAINING,         /* the server drains: 503 shutting_down */
};

struct gate_config {
  int fd; /* the listening socket, from gate_listen: the gate's from then on */
  unsigned max_conns;
  unsigned max_per_ip; /* 0: no limit */
  unsigned reserve;    /* connections over the limits passed on for a probe at once */
  /* Takes an admitted connection (fd is then the callee's); over: -1, or the enum gate_refusal it
   * would have had (a probe passed on from the reserve). Returns 0, or -1 when it could not (it
   * closed fd): the gate forgets the connection. */
  int (*pass)(void *arg, int fd, const struct sockaddr *sa, socklen_t len, int over);
  /* Whether the request line line[0..n) (without its line end) is a probe's. NULL: connections
   * over a limit are refused at once. Called on the gate's thread. */
  int (*is_probe)(void *arg, const char *line, size_t n);
  /* Writes the whole HTTP answer for a refusal into buf (at most cap bytes); returns its length.
   * Called on the gate's thread, once per refused connection. */
  size_t (*answer)(void *arg, enum gate_refusal why, char *buf, size_t cap);
  void *arg;
};

struct gate;

/* A listening socket on bind:port (an IPv4 address; port 0: any free one), or -1 with a sentence
 * in err. Clients that connect before the gate starts wait in its backlog. */
int gate_listen(const char *bind, int port, char *err, size_t errlen);
/* The gate on cfg->fd (closed on failure too), not accepting yet. Returns NULL with a sentence in
 * err on failure. */
struct gate *gate_new(const struct gate_config *cfg, char *err, size_t errlen);
/* Starts the accepting thread: from then on cfg's callbacks run, and the connections pass took
 * may close (gate_release) at any time, so whoever keeps the gate's pointer for them stores it
 * first. Returns 0, or -1 with a sentence in err (gate_free it then). */
int gate_start(struct gate *g, char *err, size_t errlen);
/* The port it listens on. */
int gate_port(const struct gate *g);
/* A connection that pass took has closed (any thread); reserve: it was passed on as over. */
void gate_release(struct gate *g, const struct sockaddr *sa, int reserve);
/* From now on every new connection gets the GATE_DRAINING answer, but a probe. */
void gate_drain(struct gate *g);
/* Stops the thread: no connection is accepted or passed on any more, while gate_release stays
 * safe for the connections pass took (stop the server that holds them before gate_free). */
void gate_stop(struct gate *g);
/* Stops the thread and closes the listening socket and the connections being answered. */
void gate_free(struct gate *g);

#endif
