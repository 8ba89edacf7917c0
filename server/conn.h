/* The HTTP front's internals, shared by the event loops (http.c) and the connections they serve
 * (conn.c): a connection and its current request, a loop, the server. Internal to server/. */
#ifndef BLURD_CONN_H
#define BLURD_CONN_H

#include "../api/api.h"
#include "gate.h"
#include "../http/http.h"
#include "server.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#define TICK_MS         100   /* how often a loop checks its connections' clocks */
#define WRITE_GRACE_MS  1000  /* to write an answer that was ready at (or after) the deadline */
#define LINGER_MS       1000  /* a closing connection's unread bytes are dropped this long */
#define RESERVE_MS      2000  /* a connection over the limits has this long to send a probe */
#define STALL_MS        1000  /* an answer unread this long is dropped while the budget is short */
#define PRESSURE_MS     1000  /* how long a refused body keeps the budget short */
#define RESERVE_CONNS   16    /* probes over the connection limits served at once */
#define IN_START        4096  /* the first input buffer of a connection */
#define IN_CHUNKED      65536 /* the input buffer a chunked body is read through */
#define READS_PER_EVENT 16    /* reads of one connection before the loop serves the others */

enum conn_state {
  CS_HEAD,   /* waiting for a request head, or the rest of one */
  CS_BODY,   /* reading the body of req */
  CS_JOB,    /* req's job runs: nothing is read; a close of the client's side cancels it */
  CS_WRITE,  /* writing the answer */
  CS_LINGER, /* answered and shut for writing: what comes is dropped until the end or LINGER_MS */
  CS_DEAD,   /* closed: freed once the loop is done with the events at hand */
};

struct srv;
struct loop;

struct request {
  struct loop *loop;
  struct conn *conn; /* NULL once its connection is done with it (the job's callback frees) */
  char *head;        /* the head's bytes, parsed in place: h's strings point into them */
  struct http1_request h;
  uint8_t *body; /* the body so far */
  size_t len, cap;
  size_t counted;  /* bytes of the budget it holds */
  size_t received; /* body bytes received */
  struct http1_chunked chunk;
  int head_only;      /* HEAD: the answer's body is not sent */
  int job;            /* its job has not called back yet */
  int gone;           /* the client left, or was answered without the job (atomic) */
  int answered;       /* its answer is written or being written */
  int observed, late; /* reported to the api; late: when the job calls back */
  struct api_outcome outcome;
  struct api_response *resp; /* the job's answer, handed to the loop */
  struct request *next;      /* in loop->done */
  double deadline;           /* api_now_ms() by which the answer must be ready */
  struct api_request req;    /* what the api sees */
  struct api_trace trace;
  char id[API_REQUEST_ID_MAX + 1];
  char remote[INET6_ADDRSTRLEN];
};

struct conn {
  struct loop *loop;
  int fd;
  struct sockaddr_storage addr;
  int over; /* -1, or the enum gate_refusal of a connection over the limits */
  enum conn_state state;
  char *in; /* bytes read and not yet taken: a head, a chunked body, what follows */
  size_t in_len, in_cap, scanned;
  double head_start;   /* api_now_ms() at the first byte of the head being read; 0: none yet */
  struct request *req; /* the request being read or answered */
  char *out;           /* the answer's status line and header fields */
  size_t out_len;
  uint8_t *body;   /* the answer's body (owned) */
  size_t body_len; /* the bytes of it to send (0 for HEAD) */
  size_t sent;     /* of out, then body */
  size_t counted;  /* bytes of the budget the answer holds */
  int close_after; /* close once the answer is written */
  double until;    /* CS_WRITE: cut past it; CS_LINGER: closed at it */
  double progress; /* api_now_ms() of the last byte read or written */
  unsigned events; /* the epoll interest */
  int parsing;     /* head_in runs: it takes the next request itself */
  struct conn *prev, *next;
};

struct loop {
  struct srv *srv;
  int ep, efd;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;    /* guards incoming and done */
  struct conn *incoming; /* passed on by the gate, not yet in the epoll set */
  struct request *done;  /* jobs that called back */
  struct conn *conns;    /* the loop's connections (its thread only) */
  struct conn *dead;     /* closed ones, freed after the events at hand */
  int index;
};

/* The answer to a connection refused unread: the error's status and JSON body. */
struct canned {
  enum err e;
  struct api_response *resp;
};

struct srv {
  struct gate *gate;
  struct canned canned[3]; /* by enum gate_refusal */
  struct api_ctx *api;
  struct srv_config cfg;
  struct loop *loops;
  int nloops;
  unsigned next_loop;    /* the loop the next connection goes to (atomic) */
  int inflight;          /* requests from their complete head to their written answer (atomic) */
  int jobs;              /* jobs that have not called back (atomic) */
  int draining;          /* atomic */
  int stop;              /* the loops end (atomic) */
  int freed;             /* memory was freed since the last malloc_trim (atomic) */
  size_t buffered;       /* bytes of bodies held or promised and of answers not yet written */
  double pressure_until; /* api_now_ms() until which unread answers are dropped (atomic) */
  int port;
};

/* Wakes loop l's thread: new connections, or jobs that called back. */
static inline void loop_wake(struct loop *l) {
  uint64_t one = 1;
  if (write(l->efd, &one, sizeof(one)) < 0) { /* the counter cannot overflow in practice */
  }
}

/* What the connection's events (epoll's) ask for: reads, writes, a client that left. */
void conn_event(struct conn *c, unsigned events);
/* The connection's clocks at now: deadlines, idle time, a linger's end, a slow reader under a short
 * budget (pressure), and the drain. */
void conn_tick(struct conn *c, double now, int draining, int pressure);
/* A job called back with resp (taken over): the answer goes out on r's connection, or is dropped
 * when the connection is gone or was answered already. */
void conn_job_done(struct request *r, struct api_response *resp);
/* Closes c and lets go of its request and answer; c stays allocated (CS_DEAD) until
 * conn_free_dead. */
void conn_close(struct conn *c);
/* Frees the loop's closed connections. */
void conn_free_dead(struct loop *l);

#endif
