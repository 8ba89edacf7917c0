/* unit_gate: the accepting gate (server/gate.c) takes no connection before gate_start (the server
 * stores the gate's pointer between gate_new and gate_start, and a connection passed on may
 * close, and be released through that pointer, at once); past max_conns it passes the reserve's
 * connections on marked as over, then refuses, and a released place of the reserve is free
 * again. */
#include "../server/gate.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

static int passed;   /* connections handed over (atomic) */
static int over[8];  /* the over argument of each, in order */
static int refusals; /* connections refused (atomic) */

static int take(void *arg, int fd, const struct sockaddr *sa, socklen_t len, int why) {
  (void)arg, (void)sa, (void)len;
  close(fd);
  int i = __atomic_fetch_add(&passed, 1, __ATOMIC_SEQ_CST);
  if (i < 8) over[i] = why;
  return 0;
}

static size_t refuse(void *arg, enum gate_refusal why, char *buf, size_t cap) {
  (void)arg, (void)why, (void)buf, (void)cap;
  __atomic_add_fetch(&refusals, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/* Waits up to 2 s for counter to reach n. */
static int wait_for(int *counter, int n) {
  for (int i = 0; i < 200 && __atomic_load_n(counter, __ATOMIC_SEQ_CST) < n; i++) usleep(10 * 1000);
  return __atomic_load_n(counter, __ATOMIC_SEQ_CST);
}

/* Connects to 127.0.0.1:port and closes at once: the connection waits in the backlog. */
static void knock(int port) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT(c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
  close(c);
}

static void test_no_accept_before_start(void) {
  char err[256];
  int fd = gate_listen("127.0.0.1", 0, err, sizeof(err));
  ASSERT(fd >= 0);
  struct gate_config cfg = {fd, 16, 0, 0, take, NULL, refuse, NULL};
  struct gate *g = gate_new(&cfg, err, sizeof(err));
  ASSERT(g != NULL);
  int port = gate_port(g);
  ASSERT_INT(port, >, 0);
  for (int i = 0; i < 3; i++) knock(port);
  usleep(200 * 1000);
  ASSERT_INT(__atomic_load_n(&passed, __ATOMIC_SEQ_CST), ==, 0);
  ASSERT_INT(gate_start(g, err, sizeof(err)), ==, 0);
  ASSERT_INT(wait_for(&passed, 3), ==, 3);
  for (int i = 0; i < 3; i++) gate_release(g, NULL, 0);
  gate_free(g);
}

/* gate_config.is_probe: "GET /probe ..." */
static int probe(void *arg, const char *line, size_t n) {
  (void)arg;
  return n >= 10 && memcmp(line, "GET /probe", 10) == 0;
}

/* Connects to 127.0.0.1:port and sends text; returns the socket. */
static int send_line(int port, const char *text) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT(c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
  ASSERT(send(c, text, strlen(text), 0) == (ssize_t)strlen(text));
  return c;
}

/* max_conns 2 and a reserve of 1: past the limit a probe's request line is passed on as over the
 * total, anything else is refused, and so is a second probe while the first holds the reserve;
 * once its place is released, the next probe takes it. */
static void test_reserve(void) {
  char err[256];
  int c[6];
  __atomic_store_n(&passed, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&refusals, 0, __ATOMIC_SEQ_CST);
  int fd = gate_listen("127.0.0.1", 0, err, sizeof(err));
  ASSERT(fd >= 0);
  struct gate_config cfg = {fd, 2, 0, 1, take, probe, refuse, NULL};
  struct gate *g = gate_new(&cfg, err, sizeof(err));
  ASSERT(g != NULL && gate_start(g, err, sizeof(err)) == 0);
  int port = gate_port(g);
  c[0] = send_line(port, "");
  c[1] = send_line(port, "");
  ASSERT_INT(wait_for(&passed, 2), ==, 2);
  c[2] = send_line(port, "GET /other HTTP/1.1\r\n");
  ASSERT_INT(wait_for(&refusals, 1), ==, 1);
  c[3] = send_line(port, "GET /probe HTTP/1.1\r\n");
  ASSERT_INT(wait_for(&passed, 3), ==, 3);
  c[4] = send_line(port, "GET /probe HTTP/1.1\r\n"); /* the reserve is held */
  ASSERT_INT(wait_for(&refusals, 2), ==, 2);
  gate_release(g, NULL, 1);
  c[5] = send_line(port, "GET /probe HTTP/1.1\r\n");
  ASSERT_INT(wait_for(&passed, 4), ==, 4);
  ASSERT_INT(over[0], ==, -1);
  ASSERT_INT(over[1], ==, -1);
  ASSERT_INT(over[2], ==, GATE_TOO_MANY);
  ASSERT_INT(over[3], ==, GATE_TOO_MANY);
  ASSERT_INT(__atomic_load_n(&refusals, __ATOMIC_SEQ_CST), ==, 2);
  for (int i = 0; i < 2; i++) gate_release(g, NULL, 0);
  gate_release(g, NULL, 1);
  gate_free(g);
  for (int i = 0; i < 6; i++) close(c[i]);
}

int main(void) {
  RUN(test_no_accept_before_start);
  RUN(test_reserve);
  fprintf(stderr, "unit_gate: all passed\n");
  return 0;
}
