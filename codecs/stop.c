/* stop.c: stopping work that runs inside a library with no cancellation hook of its own. The
 * codecs' own loops ask the thread's hook (codec_stopped) as they go, and libpng, libjpeg and
 * libwebp's decoder are stopped through their callbacks. Two libraries give nothing to ask for
 * long stretches: libdeflate compresses or inflates a whole buffer in one call, and libwebp's
 * encoder reports its progress in whole percents, and not at all while it codes an alpha plane or
 * writes its tokens (docs/engineering-notes.md, "Every stage stops at the deadline"). Their work
 * is stopped from outside, on a thread cancelled where it stands or in a child process killed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define STOP_POLL_MS 5    /* how often a caller asks the hook while the work runs elsewhere */
#define STALL_MS     1000 /* a child asleep this long, using no CPU, is stuck */

/* ---- a thread cancelled where it stands ----
 * codec_run_stoppable: libdeflate's calls compute over memory they are given, and allocate and
 * lock nothing, so they run on a thread of their own with asynchronous cancellation while the
 * caller asks the hook every STOP_POLL_MS; when it says stop, the thread is cancelled where it
 * stands, and nothing is left behind but the caller's buffers. */

struct task {
  void (*fn)(void *arg);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* done was set */
  int done;
};

static void *task_main(void *p) {
  struct task *t = p;
  int old;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
  t->fn(t->arg);
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old); /* no cancellation point follows */
  pthread_mutex_lock(&t->mu);
  t->done = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

/* Waits up to STOP_POLL_MS for t to be done; returns whether it is. */
static int task_wait(struct task *t) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += STOP_POLL_MS * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&t->mu);
  if (!t->done) pthread_cond_timedwait(&t->cv, &t->mu, &until);
  int done = t->done;
  pthread_mutex_unlock(&t->mu);
  return done;
}

/* fn(arg) to the end, on the caller's thread. */
static enum codec_status run_here(void (*fn)(void *arg), void *arg) {
  if (codec_stopped()) return CODEC_CANCELLED;
  fn(arg);
  return CODEC_OK;
}

enum codec_status codec_run_stoppable(void (*fn)(void *arg), void *arg, size_t bytes) {
  struct task t = {.fn = fn, .arg = arg, .mu = PTHREAD_MUTEX_INITIALIZER};
  pthread_condattr_t ca;
  pthread_t th;
  if (codec_cancel_get() == NULL || bytes < CODEC_STOP_THREAD_BYTES) return run_here(fn, arg);
  if (pthread_condattr_init(&ca) != 0) return run_here(fn, arg);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int made = pthread_cond_init(&t.cv, &ca) == 0;
  pthread_condattr_destroy(&ca);
  if (made && pthread_create(&th, NULL, task_main, &t) != 0) {
    pthread_cond_destroy(&t.cv);
    made = 0;
  }
  if (!made) return run_here(fn, arg); /* no thread to be had: to the end, here */
  int stopped = 0;
  while (!task_wait(&t))
    if ((stopped = codec_stopped()) != 0) {
      pthread_cancel(th);
      break;
    }
  pthread_join(th, NULL);
  pthread_cond_destroy(&t.cv);
  return stopped ? CODEC_CANCELLED : CODEC_OK;
}

/* ---- a child process, killed ----
 * codec_run_child: libwebp's encoder allocates as it goes, so a thread cancelled inside it could
 * hold malloc's lock or leak its memory. It runs in a child process (fork) that writes the file to
 * a pipe, which the caller reads while it asks the hook; when the hook says stop the child is
 * killed, and the kernel takes back all it held. The child keeps no other file open (so a
 * client's connection closes when the server closes it) and dies with its parent. A fork copies
 * only the forking thread: a lock another thread held at that moment stays held in the child,
 * which would sleep on it forever. A child that sleeps for STALL_MS without using the CPU is taken
 * for one, killed, and its work left to the caller. */

int codec_write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w, n -= (size_t)w;
  }
  return 0;
}

/* The child, after the fork: nothing open but the standard streams and the pipe (as fd 3), no
 * hook (the parent's reaches into state this copy does not own), and gone with its parent. */
static _Noreturn void child_main(int (*fn)(void *arg, int fd), void *arg, int fd, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127); /* the parent died before the line above */
  signal(SIGINT, SIG_IGN);             /* a terminal's ^C is the parent's to act on */
  signal(SIGTERM, SIG_IGN);
  if (fd != 3 && dup2(fd, 3) != 3) _exit(127);
  close_range(4, ~0u, 0); /* where the kernel lacks it, they close when the child ends */
  codec_cancel_set(NULL);
  _exit(fn(arg, 3) & 255);
}

/* The child's state letter and CPU time in clock ticks from /proc/PID/stat; 0 when unknown. */
static char child_state(pid_t pid, unsigned long long *ticks) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'), state = 0; /* the name may hold spaces and parentheses */
  unsigned long long utime = 0, stime = 0;
  if (p && sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &state, &utime,
                  &stime) == 3)
    *ticks = utime + stime;
  return p ? state : 0;
}

struct watch { /* the parent's view of a running child */
  pid_t pid;
  int polls;                /* since the last look at its state */
  unsigned long long ticks; /* its CPU time at the last look */
  int asleep_ms;            /* asleep without using the CPU since then */
};

/* Whether the child of w is stuck: asleep (S) without using the CPU for STALL_MS. Looks every
 * 20 polls, at most, as reading /proc costs some microseconds. */
static int stuck(struct watch *w) {
  if (++w->polls < 20) return 0;
  unsigned long long ticks = w->ticks;
  char state = child_state(w->pid, &ticks);
  w->asleep_ms = state == 'S' && ticks == w->ticks ? w->asleep_ms + w->polls * STOP_POLL_MS : 0;
  w->ticks = ticks, w->polls = 0;
  return w->asleep_ms >= STALL_MS;
}

/* Reads the child's output from fd into out until it ends; asks the hook and whether it is stuck
 * meanwhile. Returns CODEC_OK at the end of its output, CODEC_CANCELLED, CODEC_NOMEM, or
 * CODEC_UNSUPPORTED for a stuck child or a broken pipe. */
static enum codec_status drain(int fd, struct watch *w, struct codec_buf *out) {
  uint8_t buf[1 << 16];
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, STOP_POLL_MS);
    ssize_t n = r > 0 ? read(fd, buf, sizeof(buf)) : -1;
    if (n == 0) return CODEC_OK; /* the child closed its end: it has ended, or is ending */
    if (n > 0 && codec_buf_append(out, buf, (size_t)n) != CODEC_OK) return CODEC_NOMEM;
    if (n < 0 && r != 0 && errno != EINTR && errno != EAGAIN) return CODEC_UNSUPPORTED;
    if (codec_stopped()) return CODEC_CANCELLED;
    if (n <= 0 && stuck(w)) return CODEC_UNSUPPORTED;
  }
}

enum codec_status codec_run_child(int (*fn)(void *arg, int fd), void *arg, struct codec_buf *out,
                                  int *status) {
  int fds[2], ws = 0;
  size_t had = out->len;
  if (codec_cancel_get() == NULL || pipe2(fds, O_CLOEXEC) != 0) return CODEC_UNSUPPORTED;
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) child_main(fn, arg, fds[1], parent);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return CODEC_UNSUPPORTED;
  }
  struct watch w = {pid, 0, 0, 0};
  enum codec_status st = drain(fds[0], &w, out);
  close(fds[0]);
  if (st != CODEC_OK) kill(pid, SIGKILL);
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) continue;
  if (st != CODEC_OK) {
    out->len = had; /* what the child wrote is dropped */
    return st;
  }
  *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 255;
  return CODEC_OK;
}
