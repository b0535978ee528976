/* The per-device worker pool.
 *
 * Chunk k of a launch always covers [k*grain, min((k+1)*grain, range)),
 * whoever runs it, so results never depend on the number of threads.
 * Participants take chunk indices from an atomic counter.
 *
 * Joining protocol: a worker that sees generation g open announces itself
 * (in_job++) and re-checks that g is still open before touching the job; the
 * owner closes the job (open = 0) after the last chunk and then waits for
 * in_job to drop to zero before the job's memory may change. */
#define _GNU_SOURCE /* sched_getcpu, CPU sets, pthread_setaffinity_np */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/drivers/host/host_internal.h"

#define WORKER_SPIN_NS 30000
#define JOIN_SPIN_NS 20000

/* Copies this thread's message, the failing kernel's reason, to `dst`. */
static void take_reason(char *dst) {
  strncpy(dst, loom_last_error(), HOST_REASON_CAPACITY - 1);
  dst[HOST_REASON_CAPACITY - 1] = '\0';
}

static void run_chunks(host_pool *pool) {
  const loom_kernel_args *args = pool->args;
  const int64_t n = pool->num_chunks, grain = args->grain, range = args->range;
  /* A message left from earlier must not pass for a failing kernel's. */
  loom_clear_error();
  for (;;) {
    const int64_t k = atomic_fetch_add_explicit(&pool->next_chunk, 1, memory_order_relaxed);
    if (k >= n) break;
    const int64_t begin = k * grain, end = range - begin > grain ? begin + grain : range;
    const int rc = pool->fn(args, begin, end);
    if (rc != 0) {
      int expected = 0;
      if (atomic_compare_exchange_strong(&pool->failed, &expected, rc)) {
        pool->failed_begin = begin;
        take_reason(pool->failed_reason);
      }
    }
    if (atomic_fetch_add(&pool->done_chunks, 1) + 1 == n && atomic_load(&pool->owner_waiting)) {
      pthread_mutex_lock(&pool->wake_lock);
      pthread_cond_signal(&pool->joined);
      pthread_mutex_unlock(&pool->wake_lock);
    }
  }
}

static void *worker_main(void *arg) {
  host_pool *pool = arg;
  uint64_t last = 0;
  for (;;) {
    uint64_t g = atomic_load(&pool->open);
    if (g == 0 || g == last) {
      loom_spin spin = loom_spin_start(WORKER_SPIN_NS);
      while (((g = atomic_load(&pool->open)) == 0 || g == last) && !atomic_load(&pool->stop) &&
             loom_spin_more(&spin)) {
      }
      if (atomic_load(&pool->stop)) return NULL;
      if (g == 0 || g == last) {
        pthread_mutex_lock(&pool->wake_lock);
        atomic_fetch_add(&pool->sleeping, 1);
        while (((g = atomic_load(&pool->open)) == 0 || g == last) && !atomic_load(&pool->stop))
          pthread_cond_wait(&pool->wake, &pool->wake_lock);
        atomic_fetch_sub(&pool->sleeping, 1);
        pthread_mutex_unlock(&pool->wake_lock);
        if (atomic_load(&pool->stop)) return NULL;
      }
    }
    atomic_fetch_add(&pool->in_job, 1);
    if (atomic_load(&pool->open) == g) {
      run_chunks(pool);
      last = g;
    }
    atomic_fetch_sub(&pool->in_job, 1);
  }
}

int host_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0) return rc;
  rc = pthread_attr_setstacksize(&attr, (size_t)8 << 20);
  if (rc == 0) rc = pthread_create(thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return rc;
}

int host_pool_init(host_pool *pool, int num_workers) {
  *pool = (host_pool){0};
  pool->workers_off_cpu = -1;
  pthread_mutex_init(&pool->busy, NULL);
  pthread_mutex_init(&pool->wake_lock, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->joined, NULL);
  if (num_workers <= 0) return 0;
  pool->threads = calloc((size_t)num_workers, sizeof *pool->threads);
  if (!pool->threads) return -1;
  for (int i = 0; i < num_workers; ++i) {
    if (host_thread_start(&pool->threads[i], worker_main, pool) != 0) break;
    pool->num_workers = i + 1;
  }
  return 0;
}

void host_pool_destroy(host_pool *pool) {
  pthread_mutex_lock(&pool->wake_lock);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->wake_lock);
  for (int i = 0; i < pool->num_workers; ++i) pthread_join(pool->threads[i], NULL);
  free(pool->threads);
  pthread_cond_destroy(&pool->joined);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->wake_lock);
  pthread_mutex_destroy(&pool->busy);
}

/* The owner's wait for chunks other threads took: a short spin, then sleep.
 * A worker descheduled mid-chunk can only move to the owner's core if that
 * core goes idle; spinning or yielding there would keep it busy. */
static void wait_for_chunks(host_pool *pool, int64_t num_chunks) {
  loom_spin spin = loom_spin_start(JOIN_SPIN_NS);
  while (atomic_load_explicit(&pool->done_chunks, memory_order_acquire) < num_chunks)
    if (!loom_spin_more(&spin)) break;
  if (atomic_load(&pool->done_chunks) >= num_chunks) return;
  pthread_mutex_lock(&pool->wake_lock);
  atomic_store(&pool->owner_waiting, 1);
  while (atomic_load(&pool->done_chunks) < num_chunks)
    pthread_cond_wait(&pool->joined, &pool->wake_lock);
  atomic_store(&pool->owner_waiting, 0);
  pthread_mutex_unlock(&pool->wake_lock);
}

static int run_alone(loom_kernel_fn fn, const loom_kernel_args *args, host_failure *out) {
  loom_clear_error();
  for (int64_t begin = 0, end; begin < args->range; begin = end) {
    end = args->range - begin > args->grain ? begin + args->grain : args->range;
    const int rc = fn(args, begin, end);
    if (rc != 0) {
      out->begin = begin;
      take_reason(out->reason);
      return rc;
    }
  }
  return 0;
}

/* Keeps the workers off the CPU the owner runs on. A spinning worker
 * yields its CPU (loom_spin_more): placed on the owner's, it waits there
 * for the owner's time slice to end while another CPU idles, since the
 * scheduler does not move a thread that ran moments ago. Up to a fifth of
 * the launches of a 512 x 512 x 512 product ran on the owner alone, the
 * worker joining 1-3 ms late. Affinity changes only when the owner has
 * moved, and never leaves the workers without a CPU. */
static void keep_workers_off_owner(host_pool *pool) {
#ifdef __linux__
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu == pool->workers_off_cpu) return;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || !CPU_ISSET(cpu, &set) ||
      CPU_COUNT(&set) < 2)
    return;
  CPU_CLR(cpu, &set);
  for (int i = 0; i < pool->num_workers; ++i)
    (void)pthread_setaffinity_np(pool->threads[i], sizeof set, &set);
  pool->workers_off_cpu = cpu;
#else
  (void)pool;
#endif
}

int host_pool_run(host_pool *pool, loom_kernel_fn fn, const loom_kernel_args *args,
                  host_failure *out_failure) {
  const int64_t num_chunks = args->range / args->grain + (args->range % args->grain != 0);
  /* One chunk, no workers, or the pool busy with another stream's launch:
   * the caller runs every chunk itself (same boundaries either way). */
  if (num_chunks <= 1 || pool->num_workers == 0 || pthread_mutex_trylock(&pool->busy) != 0)
    return run_alone(fn, args, out_failure);
  keep_workers_off_owner(pool);
  pool->fn = fn;
  pool->args = args;
  pool->num_chunks = num_chunks;
  atomic_store(&pool->next_chunk, 0);
  atomic_store(&pool->done_chunks, 0);
  atomic_store(&pool->failed, 0);
  pool->failed_begin = 0;
  const uint64_t g = ++pool->generation;
  atomic_store(&pool->open, g);
  if (atomic_load(&pool->sleeping)) {
    pthread_mutex_lock(&pool->wake_lock);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->wake_lock);
  }
  run_chunks(pool);
  wait_for_chunks(pool, num_chunks);
  atomic_store(&pool->open, 0);
  for (unsigned spins = 0; atomic_load(&pool->in_job) != 0; ++spins)
    spins < 256 ? loom_cpu_relax() : (void)sched_yield();
  const int rc = atomic_load(&pool->failed);
  if (rc != 0) {
    out_failure->begin = pool->failed_begin;
    memcpy(out_failure->reason, pool->failed_reason, sizeof out_failure->reason);
  }
  pthread_mutex_unlock(&pool->busy);
  return rc;
}
