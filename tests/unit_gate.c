/* unit_gate: the accepting gate (server/gate.c) takes no connection before gate_start. The
 * server stores the gate's pointer between gate_new and gate_start, and a connection passed on
 * may close, and be released through that pointer, at once: a client that had connected to the
 * backlog and gone away crashed a server restarted under load when the gate accepted from
 * gate_new on (CI, 2026-11-27). */
#include "../server/gate.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

static int passed; /* connections handed over (atomic) */

static int take(void *arg, int fd, const struct sockaddr *sa, socklen_t len) {
  (void)arg, (void)sa, (void)len;
  close(fd);
  __atomic_add_fetch(&passed, 1, __ATOMIC_SEQ_CST);
  return 0;
}

static size_t refuse(void *arg, enum gate_refusal why, char *buf, size_t cap) {
  (void)arg, (void)why, (void)buf, (void)cap;
  return 0;
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
  struct gate_config cfg = {fd, 16, 0, take, refuse, NULL};
  struct gate *g = gate_new(&cfg, err, sizeof(err));
  ASSERT(g != NULL);
  int port = gate_port(g);
  ASSERT_INT(port, >, 0);
  for (int i = 0; i < 3; i++) knock(port);
  usleep(200 * 1000);
  ASSERT_INT(__atomic_load_n(&passed, __ATOMIC_SEQ_CST), ==, 0);
  ASSERT_INT(gate_start(g, err, sizeof(err)), ==, 0);
  for (int i = 0; i < 200 && __atomic_load_n(&passed, __ATOMIC_SEQ_CST) < 3; i++) usleep(10 * 1000);
  ASSERT_INT(__atomic_load_n(&passed, __ATOMIC_SEQ_CST), ==, 3);
  for (int i = 0; i < 3; i++) gate_release(g, NULL);
  gate_free(g);
}

int main(void) {
  RUN(test_no_accept_before_start);
  fprintf(stderr, "unit_gate: all passed\n");
  return 0;
}
