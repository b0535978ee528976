/* The per-device worker pool.
 *
 * Chunk k of a launch always covers [k*grain, min((k+1)*grain, range)),
 * whoever runs it, so results never depend on the number of threads.
 * Participants take chunk indices from the launch's atomic counter.
 *
 * Several launches can be open at once, one per thread that owns one
 * (each stream's executor, a loom_run_now caller). Owners list their
 * launches on the pool by priority, then opening order. A worker takes
 * chunks of the first listed launch that has chunks left; an owner takes
 * chunks of listed launches of strictly higher priority before each of its
 * own. Both choose again at the next chunk boundary after a launch opens
 * (`opened` changes), so a high-priority stream's launch overtakes the
 * queued chunks of a low-priority one within one chunk, and between equal
 * priorities the first launch keeps the workers (as it would on a device
 * that runs one kernel at a time).
 *
 * Leaving protocol: a helper joins a launch under the pool's lock (helpers++)
 * and leaves it (helpers--) as its last touch of the launch. The owner
 * unlists its launch once every chunk is taken, waits for the chunks still
 * running, then for helpers to reach zero, before the launch's memory (on
 * its stack) goes away. */
#define _GNU_SOURCE /* sched_getcpu, CPU sets, pthread_setaffinity_np */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "runtime/drivers/host/host_internal.h"

#define WORKER_SPIN_NS 30000
#define JOIN_SPIN_NS 20000
/* The owner's wait for helpers' last chunks spins for up to as long as one
 * of its own chunks took (a helper's last chunk began before the owner's
 * ended), within these bounds; sleeping instead would add a wake-up to the
 * launch's end. */
#define JOIN_SPIN_MAX_NS 200000

struct host_job {
  host_job *next; /* in the pool's list (under the pool's lock) */
  int priority;
  loom_kernel_fn fn;
  const loom_kernel_args *args;
  int64_t num_chunks;
  _Atomic int64_t next_chunk, done_chunks;
  atomic_int failed;    /* first failing status, 0 if none */
  int64_t failed_begin; /* written by the thread that set `failed`, */
  char failed_reason[HOST_REASON_CAPACITY]; /* with its kernel's message */
  atomic_int helpers;       /* threads other than the owner inside the job */
  atomic_int owner_waiting; /* the owner sleeps on the pool's `joined` */
};

/* Copies this thread's message, the failing kernel's reason, to `dst`. */
static void take_reason(char *dst) {
  strncpy(dst, loom_last_error(), HOST_REASON_CAPACITY - 1);
  dst[HOST_REASON_CAPACITY - 1] = '\0';
}

static int has_chunks_left(host_job *job) {
  return atomic_load_explicit(&job->next_chunk, memory_order_relaxed) < job->num_chunks;
}

/* Runs chunks of `job` until none is left (returns 0) or a launch opened
 * after `seen` (returns 1: the caller chooses again). Adds the number of
 * chunks it ran to *ran when not NULL. */
static int run_chunks(host_pool *pool, host_job *job, uint64_t seen, int64_t *ran) {
  const loom_kernel_args *args = job->args;
  const int64_t n = job->num_chunks, grain = args->grain, range = args->range;
  /* A message left from earlier must not pass for a failing kernel's. */
  loom_clear_error();
  for (;;) {
    if (atomic_load_explicit(&pool->opened, memory_order_relaxed) != seen) return 1;
    const int64_t k = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
    if (k >= n) return 0;
    const int64_t begin = k * grain, end = range - begin > grain ? begin + grain : range;
    const int rc = job->fn(args, begin, end);
    if (ran) ++*ran;
    if (rc != 0) {
      int expected = 0;
      if (atomic_compare_exchange_strong(&job->failed, &expected, rc)) {
        job->failed_begin = begin;
        take_reason(job->failed_reason);
      }
    }
    if (atomic_fetch_add(&job->done_chunks, 1) + 1 == n && atomic_load(&job->owner_waiting)) {
      pthread_mutex_lock(&pool->wake_lock);
      pthread_cond_broadcast(&pool->joined);
      pthread_mutex_unlock(&pool->wake_lock);
    }
  }
}

/* Joins the first listed launch with chunks left whose priority is below
 * `above` (INT_MAX: any), or returns NULL. */
static host_job *join_job(host_pool *pool, int above) {
  if (!atomic_load(&pool->open_jobs)) return NULL;
  host_job *found = NULL;
  pthread_mutex_lock(&pool->lock);
  for (host_job *j = pool->jobs; j && j->priority < above; j = j->next) {
    if (has_chunks_left(j)) {
      atomic_fetch_add(&j->helpers, 1);
      found = j;
      break;
    }
  }
  pthread_mutex_unlock(&pool->lock);
  return found;
}

/* Helps the launches of priority above `priority` until none has chunks
 * left; returns the value of `opened` that the caller's own chunks run
 * under. */
static uint64_t help_higher(host_pool *pool, int priority) {
  for (;;) {
    const uint64_t seen = atomic_load(&pool->opened);
    host_job *job = join_job(pool, priority);
    if (!job) return seen;
    (void)run_chunks(pool, job, seen, NULL);
    atomic_fetch_sub(&job->helpers, 1);
  }
}

/* Waits for a launch to open after `seen`, spinning then sleeping, until
 * one opens or host_pool_kick wakes it; 0 when stopping. */
static int wait_for_launch(host_pool *pool, uint64_t seen) {
  const uint64_t kicked = atomic_load(&pool->kicks);
  loom_spin spin = loom_spin_start(WORKER_SPIN_NS);
  while (atomic_load(&pool->opened) == seen && !atomic_load(&pool->stop) &&
         loom_spin_more(&spin)) {
  }
  if (atomic_load(&pool->opened) == seen && !atomic_load(&pool->stop)) {
    pthread_mutex_lock(&pool->wake_lock);
    atomic_fetch_add(&pool->sleeping, 1);
    atomic_fetch_add_explicit(&pool->naps, 1, memory_order_relaxed);
    while (atomic_load(&pool->opened) == seen && !atomic_load(&pool->stop) &&
           atomic_load(&pool->kicks) == kicked)
      pthread_cond_wait(&pool->wake, &pool->wake_lock);
    atomic_fetch_sub(&pool->sleeping, 1);
    pthread_mutex_unlock(&pool->wake_lock);
  }
  return !atomic_load(&pool->stop);
}

static void *worker_main(void *arg) {
  host_pool *pool = arg;
  for (;;) {
    const uint64_t seen = atomic_load(&pool->opened);
    host_job *job = join_job(pool, INT_MAX);
    if (job) {
      (void)run_chunks(pool, job, seen, NULL);
      atomic_fetch_sub(&job->helpers, 1);
    } else if (!wait_for_launch(pool, seen)) {
      return NULL;
    }
  }
}

void host_pool_kick(host_pool *pool) {
  if (!atomic_load(&pool->sleeping)) return;
  pthread_mutex_lock(&pool->wake_lock);
  atomic_fetch_add(&pool->kicks, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->wake_lock);
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
  pthread_mutex_init(&pool->lock, NULL);
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
  pthread_mutex_destroy(&pool->lock);
}

/* The owner's wait for chunks other threads took: a spin of `spin_ns`, then
 * sleep. A worker descheduled mid-chunk can only move to the owner's core
 * if that core goes idle; spinning or yielding there would keep it busy,
 * hence the bound. */
static void wait_for_chunks(host_pool *pool, host_job *job, uint64_t spin_ns) {
  const int64_t n = job->num_chunks;
  loom_spin spin = loom_spin_start(spin_ns);
  while (atomic_load_explicit(&job->done_chunks, memory_order_acquire) < n)
    if (!loom_spin_more(&spin)) break;
  if (atomic_load(&job->done_chunks) >= n) return;
  pthread_mutex_lock(&pool->wake_lock);
  atomic_store(&job->owner_waiting, 1);
  while (atomic_load(&job->done_chunks) < n) pthread_cond_wait(&pool->joined, &pool->wake_lock);
  atomic_store(&job->owner_waiting, 0);
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
 * moved, and never leaves the workers without a CPU. Under the pool's
 * lock, by the owner of the only open launch. */
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

/* Lists `job` after every launch of its priority or higher, and wakes the
 * workers. */
static void open_job(host_pool *pool, host_job *job) {
  pthread_mutex_lock(&pool->lock);
  if (!pool->jobs) keep_workers_off_owner(pool);
  host_job **at = &pool->jobs;
  while (*at && (*at)->priority <= job->priority) at = &(*at)->next;
  job->next = *at;
  *at = job;
  atomic_fetch_add(&pool->open_jobs, 1);
  atomic_fetch_add(&pool->opened, 1);
  pthread_mutex_unlock(&pool->lock);
  if (atomic_load(&pool->sleeping)) {
    pthread_mutex_lock(&pool->wake_lock);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->wake_lock);
  }
}

static void close_job(host_pool *pool, host_job *job) {
  pthread_mutex_lock(&pool->lock);
  host_job **at = &pool->jobs;
  while (*at != job) at = &(*at)->next;
  *at = job->next;
  atomic_fetch_sub(&pool->open_jobs, 1);
  pthread_mutex_unlock(&pool->lock);
}

int host_pool_run(host_pool *pool, int priority, loom_kernel_fn fn, const loom_kernel_args *args,
                  host_failure *out_failure) {
  const int64_t num_chunks = args->range / args->grain + (args->range % args->grain != 0);
  /* One chunk, or no workers: the caller runs every chunk itself (same
   * boundaries either way). */
  if (num_chunks <= 1 || pool->num_workers == 0) return run_alone(fn, args, out_failure);
  host_job job = {.priority = priority, .fn = fn, .args = args, .num_chunks = num_chunks};
  open_job(pool, &job);
  uint64_t seen = help_higher(pool, priority);
  const uint64_t start = loom_now_ns();
  int64_t own = 0;
  /* Once its own chunks are all taken the owner only waits: helping then
   * would hold back the completion of its stream for no chunk of its own. */
  while (run_chunks(pool, &job, seen, &own) && has_chunks_left(&job))
    seen = help_higher(pool, priority);
  close_job(pool, &job);
  uint64_t spin_ns = JOIN_SPIN_NS;
  if (own > 0 && atomic_load_explicit(&job.done_chunks, memory_order_relaxed) < num_chunks) {
    const uint64_t per_chunk = (loom_now_ns() - start) / (uint64_t)own;
    if (per_chunk > spin_ns) spin_ns = per_chunk < JOIN_SPIN_MAX_NS ? per_chunk : JOIN_SPIN_MAX_NS;
  }
  wait_for_chunks(pool, &job, spin_ns);
  for (unsigned spins = 0; atomic_load(&job.helpers) != 0; ++spins)
    spins < 256 ? loom_cpu_relax() : (void)sched_yield();
  const int rc = atomic_load(&job.failed);
  if (rc != 0) {
    out_failure->begin = job.failed_begin;
    memcpy(out_failure->reason, job.failed_reason, sizeof out_failure->reason);
  }
  return rc;
}
