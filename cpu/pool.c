/* The fork-join pool that every job worker shares (so the machine is never oversubscribed however
 * many requests are in flight), the cancel tokens that ride along with its work, and the count
 * of cores it is sized to (cpu_cores). */
#include "cpu.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Each thread has a current cancel token, a batch takes its caller's, and a pool thread runs a
 * chunk under the batch's token, so the filters' loops anywhere below a job ask one function,
 * cpu_cancelled(). A cancelled batch starts no more chunks. */
static _Thread_local struct cpu_cancel *current; /* the token of the work this thread runs */

void cpu_cancel_set(struct cpu_cancel *c) {
  current = c;
}

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* The clock is read at every check (a vDSO call: no system call); gone may be a system call, so
 * one thread at a time asks it, at most every CPU_CANCEL_POLL_MS. The first reason found stays. */
enum cpu_stop cpu_cancel_check(struct cpu_cancel *c) {
  int s = __atomic_load_n(&c->stop, __ATOMIC_RELAXED);
  if (s != CPU_RUNNING || (c->deadline <= 0 && !c->gone)) return (enum cpu_stop)s;
  long long now = now_us();
  if (c->deadline > 0 && (double)now / 1e3 > c->deadline) {
    s = CPU_STOP_DEADLINE;
  } else if (c->gone && now >= __atomic_load_n(&c->next_poll_us, __ATOMIC_RELAXED) &&
             !__atomic_exchange_n(&c->polling, 1, __ATOMIC_ACQUIRE)) {
    if (now >= __atomic_load_n(&c->next_poll_us, __ATOMIC_RELAXED)) { /* not just polled */
      __atomic_store_n(&c->next_poll_us, now + CPU_CANCEL_POLL_MS * 1000LL, __ATOMIC_RELAXED);
      if (c->gone(c->arg)) s = CPU_STOP_GONE;
    }
    __atomic_store_n(&c->polling, 0, __ATOMIC_RELEASE);
  }
  int running = CPU_RUNNING;
  if (s != CPU_RUNNING &&
      !__atomic_compare_exchange_n(&c->stop, &running, s, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    s = running; /* another thread stopped it first, for its reason */
  return (enum cpu_stop)s;
}

enum cpu_stop cpu_cancelled(void) {
  return current ? cpu_cancel_check(current) : CPU_RUNNING;
}

enum err cpu_stop_error(void) {
  switch (cpu_cancelled()) {
  case CPU_STOP_DEADLINE:
    return ERR_DEADLINE_EXCEEDED;
  case CPU_STOP_GONE:
    return ERR_CLIENT_GONE;
  case CPU_RUNNING:
    break;
  }
  return ERR_OK;
}

struct batch {
  void (*fn)(void *arg, int begin, int end);
  void *arg;
  struct cpu_cancel *cancel; /* the caller's token, or NULL */
  int n;                     /* the range is [0, n) */
  int chunk;                 /* indices per chunk */
  int next;                  /* first index not handed out yet */
  int remaining;             /* chunks handed out or not, still unfinished */
  struct batch *link;        /* next batch with work to hand out */
};

struct cpu_pool {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a batch was queued, or stop */
  pthread_cond_t done; /* a batch finished */
  struct batch *head;  /* batches with chunks left to hand out */
  int stop;
  int nthreads;
  pthread_t threads[];
};

/* Takes the next chunk of b, under pool->mu. Returns 0 when b has none left. A cancelled batch
 * gives up the chunks it has not handed out. */
static int take_chunk(struct cpu_pool *pool, struct batch *b, int *begin, int *end) {
  if (b->next >= b->n) return 0;
  int stop = b->cancel && __atomic_load_n(&b->cancel->stop, __ATOMIC_RELAXED) != CPU_RUNNING;
  if (stop) { /* next is a multiple of chunk: the chunks left are whole but the last */
    b->remaining -= (b->n - b->next + b->chunk - 1) / b->chunk;
    if (b->remaining == 0) pthread_cond_broadcast(&pool->done);
  }
  *begin = b->next;
  *end = b->n - b->next > b->chunk && !stop ? b->next + b->chunk : b->n;
  b->next = *end;
  if (b->next >= b->n) { /* exhausted: unlink it */
    struct batch **p = &pool->head;
    while (*p && *p != b) p = &(*p)->link;
    if (*p) *p = b->link;
  }
  return !stop;
}

/* Runs a chunk under the batch's token, unless that says stop already. */
static void run_chunk(struct cpu_pool *pool, struct batch *b, int begin, int end) {
  pthread_mutex_unlock(&pool->mu);
  struct cpu_cancel *mine = current;
  current = b->cancel;
  if (!b->cancel || cpu_cancel_check(b->cancel) == CPU_RUNNING) b->fn(b->arg, begin, end);
  current = mine;
  pthread_mutex_lock(&pool->mu);
  if (--b->remaining == 0) pthread_cond_broadcast(&pool->done);
}

static void *worker_main(void *arg) {
  struct cpu_pool *pool = arg;
  pthread_setname_np(pthread_self(), "blurd-pool");
  pthread_mutex_lock(&pool->mu);
  for (;;) {
    while (!pool->stop && !pool->head) pthread_cond_wait(&pool->work, &pool->mu);
    if (!pool->head) break; /* stop, and nothing left */
    struct batch *b = pool->head;
    int begin, end;
    if (take_chunk(pool, b, &begin, &end)) run_chunk(pool, b, begin, end);
  }
  pthread_mutex_unlock(&pool->mu);
  return NULL;
}

struct cpu_pool *cpu_pool_new(int nthreads) {
  if (nthreads < 1) nthreads = 1;
  struct cpu_pool *pool = calloc(1, sizeof(*pool) + (size_t)nthreads * sizeof(pthread_t));
  if (!pool) return NULL;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->work, NULL);
  pthread_cond_init(&pool->done, NULL);
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&pool->threads[i], NULL, worker_main, pool) != 0) break;
    pool->nthreads++;
  }
  if (pool->nthreads == 0) {
    cpu_pool_free(pool);
    return NULL;
  }
  return pool;
}

void cpu_pool_free(struct cpu_pool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mu);
  pool->stop = 1;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 0; i < pool->nthreads; i++) pthread_join(pool->threads[i], NULL);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->work);
  pthread_mutex_destroy(&pool->mu);
  free(pool);
}

void cpu_parallel_for(struct cpu_pool *pool, int n, void (*fn)(void *arg, int begin, int end),
                      void *arg) {
  if (n <= 0) return;
  if (!pool || n == 1) {
    if (cpu_cancelled() == CPU_RUNNING) fn(arg, 0, n);
    return;
  }
  /* About four chunks per thread balances uneven chunks without much locking. */
  int chunk = n / (4 * (pool->nthreads + 1));
  if (chunk < 1) chunk = 1;
  struct batch b = {fn, arg, current, n, chunk, 0, (n + chunk - 1) / chunk, NULL};
  int begin, end;
  pthread_mutex_lock(&pool->mu);
  b.link = pool->head;
  pool->head = &b;
  pthread_cond_broadcast(&pool->work);
  while (take_chunk(pool, &b, &begin, &end)) run_chunk(pool, &b, begin, end);
  while (b.remaining > 0) pthread_cond_wait(&pool->done, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
}

/* ---- usable cores ---- */

/* Reads the first line of root/path into buf. Returns whether there is one. */
static int read_line(const char *root, const char *path, char *buf, size_t n) {
  char full[512];
  snprintf(full, sizeof(full), "%s%s", root, path);
  FILE *f = fopen(full, "r");
  int ok = f && fgets(buf, (int)n, f);
  if (f) fclose(f);
  return ok;
}

/* Reads into path the cgroup path of this process for the v1 controller ctl ("cpu"), or for v2
 * when ctl is "", from root/proc/self/cgroup lines "ID:CONTROLLERS:PATH". Returns whether there
 * is one. */
static int cgroup_path(const char *root, const char *ctl, char *path, size_t n) {
  char full[512], line[512];
  snprintf(full, sizeof(full), "%s/proc/self/cgroup", root);
  FILE *f = fopen(full, "r");
  int found = 0;
  while (f && !found && fgets(line, sizeof(line), f)) {
    char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
    if (!p) continue;
    *p++ = 0;
    p[strcspn(p, "\n")] = 0;
    for (char *tok = strtok(c + 1, ","); tok && !found; tok = strtok(NULL, ","))
      if (strcmp(tok, ctl) == 0) found = 1;
    if (!*ctl && !c[1]) found = 1; /* v2: "0::/path" */
    if (found) snprintf(path, n, "%s", strcmp(p, "/") == 0 ? "" : p);
  }
  if (f) fclose(f);
  return found;
}

/* The smallest CPU quota in cores (below best, when best > 0) set in base + path or one of its
 * parents: cpu.max ("QUOTA PERIOD", or "max PERIOD") for v2, cpu.cfs_quota_us (-1: none) over
 * cpu.cfs_period_us for v1. *file: the file that set it. */
static double walk(const char *root, const char *base, char *path, int v2, double best, char *file,
                   size_t n) {
  char dir[512], buf[128];
  for (char *end = path + strlen(path);;) {
    long long quota = -1, period = 0;
    *end = 0;
    snprintf(dir, sizeof(dir), "%s%s/%s", base, path, v2 ? "cpu.max" : "cpu.cfs_quota_us");
    if (read_line(root, dir, buf, sizeof(buf))) {
      if (v2 && sscanf(buf, "%lld %lld", &quota, &period) != 2) quota = -1;
      if (!v2) {
        quota = atoll(buf);
        snprintf(dir, sizeof(dir), "%s%s/cpu.cfs_period_us", base, path);
        period = read_line(root, dir, buf, sizeof(buf)) ? atoll(buf) : 0;
        snprintf(dir, sizeof(dir), "%s%s/cpu.cfs_quota_us", base, path);
      }
      if (quota > 0 && period > 0 && (best == 0 || (double)quota / period < best)) {
        best = (double)quota / period;
        snprintf(file, n, "%s", dir);
      }
    }
    if (end == path || !(end = strrchr(path, '/'))) break; /* then the parent */
  }
  return best;
}

/* The CPU quota in cores along the process's cgroups, v2 and v1 (a container sees its own cgroup
 * as the root); 0 when none limits it. */
static double cgroup_quota(const char *root, char *file, size_t n) {
  char path[400];
  double best = 0;
  if (cgroup_path(root, "", path, sizeof(path)))
    best = walk(root, "/sys/fs/cgroup", path, 1, best, file, n);
  if (cgroup_path(root, "cpu", path, sizeof(path))) {
    char copy[400];
    snprintf(copy, sizeof(copy), "%s", path);
    best = walk(root, "/sys/fs/cgroup/cpu,cpuacct", path, 0, best, file, n);
    best = walk(root, "/sys/fs/cgroup/cpu", copy, 0, best, file, n);
  }
  return best;
}

int cpu_cores(const char *root, char *why, size_t n) {
  cpu_set_t set;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int cores = !*root && sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
              : online > 0                                           ? (int)online
                                                                     : 1;
  char file[512] = "";
  double quota = cgroup_quota(root, file, sizeof(file));
  int limit = quota > 0 ? (int)ceil(quota - 1e-9) : 0;
  if (limit > 0 && limit < cores) {
    snprintf(why, n, "%d cores (the cgroup quota %.2f cores of %s; %d cores visible)", limit, quota,
             file, cores);
    return limit;
  }
  snprintf(why, n, "%d cores (%s)", cores,
           quota > 0 ? "the cgroup quota does not limit them" : "no cgroup CPU quota");
  return cores;
}
