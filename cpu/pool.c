/* A small fork-join pool: cpu_parallel_for() hands out chunks of an index range to the pool's
 * threads and to its caller, then waits for them. Several job workers share one pool, so the
 * machine is never oversubscribed however many requests are in flight. */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>

struct batch {
  void (*fn)(void *arg, int begin, int end);
  void *arg;
  int n;              /* the range is [0, n) */
  int chunk;          /* indices per chunk */
  int next;           /* first index not handed out yet */
  int remaining;      /* chunks handed out or not, still unfinished */
  struct batch *link; /* next batch with work to hand out */
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

/* Takes the next chunk of b, under pool->mu. Returns 0 when b has none left. */
static int take_chunk(struct cpu_pool *pool, struct batch *b, int *begin, int *end) {
  if (b->next >= b->n) return 0;
  *begin = b->next;
  *end = b->n - b->next > b->chunk ? b->next + b->chunk : b->n;
  b->next = *end;
  if (b->next >= b->n) { /* exhausted: unlink it */
    struct batch **p = &pool->head;
    while (*p && *p != b) p = &(*p)->link;
    if (*p) *p = b->link;
  }
  return 1;
}

static void run_chunk(struct cpu_pool *pool, struct batch *b, int begin, int end) {
  pthread_mutex_unlock(&pool->mu);
  b->fn(b->arg, begin, end);
  pthread_mutex_lock(&pool->mu);
  if (--b->remaining == 0) pthread_cond_broadcast(&pool->done);
}

static void *worker_main(void *arg) {
  struct cpu_pool *pool = arg;
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
    fn(arg, 0, n);
    return;
  }
  /* About four chunks per thread balances uneven chunks without much locking. */
  int chunk = n / (4 * (pool->nthreads + 1));
  if (chunk < 1) chunk = 1;
  struct batch b = {fn, arg, n, chunk, 0, (n + chunk - 1) / chunk, NULL};
  int begin, end;
  pthread_mutex_lock(&pool->mu);
  b.link = pool->head;
  pool->head = &b;
  pthread_cond_broadcast(&pool->work);
  while (take_chunk(pool, &b, &begin, &end)) run_chunk(pool, &b, begin, end);
  while (b.remaining > 0) pthread_cond_wait(&pool->done, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
}
