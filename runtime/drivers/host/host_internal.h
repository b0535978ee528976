/* The host driver's internals: a worker pool per device and one executor
 * thread per queue. */
#ifndef LOOM_HOST_INTERNAL_H
#define LOOM_HOST_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "loom/driver.h"

#define HOST_REASON_CAPACITY 256

/* Where and why a launch failed: the first failing chunk's start and the
 * message its kernel left with loom_error() ("" if none). */
typedef struct host_failure {
  int64_t begin;
  char reason[HOST_REASON_CAPACITY];
} host_failure;

/* An open launch; lives on the stack of the thread that owns it. */
typedef struct host_job host_job;

/* A persistent set of worker threads that help the threads owning
 * launches (stream executors, loom_run_now callers) run their chunks.
 * Several launches may be open at once; workers take chunks of the one with
 * the highest priority (the lowest value), the earliest opened among equals,
 * and choose again at every chunk boundary after another launch opened. */
typedef struct host_pool {
  int num_workers;
  pthread_t *threads;
  pthread_mutex_t lock;    /* guards the list of open launches */
  host_job *jobs;          /* by priority, then opening order (under lock) */
  atomic_int open_jobs;    /* length of that list */
  _Atomic uint64_t opened; /* launches opened so far: a change means choose again */
  pthread_mutex_t wake_lock;
  pthread_cond_t wake;     /* idle workers, for the next launch */
  atomic_int sleeping;
  _Atomic uint64_t naps;   /* times a worker went to sleep */
  _Atomic uint64_t kicks;  /* wake-ups ahead of a launch (host_pool_kick) */
  pthread_cond_t joined;   /* owners, for their last chunks (under wake_lock) */
  atomic_int stop;
  int workers_off_cpu; /* the CPU the workers are kept off, -1 if none (under lock) */
} host_pool;

int host_pool_init(host_pool *pool, int num_workers);
/* Starts a device thread with an 8 MiB stack, whatever the process's
 * default: kernels keep their tiles on the stack (attention's take up to
 * 550 KiB). pthread_create's result. */
int host_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);
void host_pool_destroy(host_pool *pool);

/* Wakes sleeping workers ahead of a launch about to open (one queued on an
 * idle queue): their wake-up overlaps the hand-off to the thread that will
 * own it. A woken worker that finds nothing open spins its usual window,
 * then sleeps again. Costs one atomic load when no worker sleeps. */
void host_pool_kick(host_pool *pool);

/* Runs fn over [0, range) in chunks of grain on the calling thread, helped
 * by the pool's workers. `priority` is the launching stream's (0 normal,
 * lower is higher): before each of its own chunks the caller runs chunks of
 * open launches of strictly higher priority. Returns 0 or the first failing
 * kernel status, described in *out_failure. */
int host_pool_run(host_pool *pool, int priority, loom_kernel_fn fn,
                  const loom_kernel_args *args, host_failure *out_failure);

typedef struct host_device {
  host_pool pool;
  int threads; /* executor + workers */
} host_device;

typedef struct host_context {
  loom_driver_config config;
  int num_devices;
  host_device *devices;
  /* The most commands a queue holds not yet completed before a submitting
   * thread waits for room (LOOM_QUEUE_DEPTH); 0: unbounded. */
  uint64_t queue_depth;
} host_context;

#define HOST_QUEUE_DEPTH_DEFAULT 1024
/* LOOM_QUEUE_DEPTH: a count >= 0 (0: unbounded); default, and for a value
 * that is not one, HOST_QUEUE_DEPTH_DEFAULT (host_driver.c). */
uint64_t host_queue_depth_from_env(void);

/* host_memory.c: device memory (segments; shareable ones with
 * LOOM_SHAREABLE_MEMORY=1). */
loom_status host_segment_alloc(void *ctx, int device, size_t size, void **out_ptr);
void host_segment_free(void *ctx, int device, void *ptr, size_t size);
loom_status host_segment_detach(void *ctx, int device, void *ptr, size_t size, int *out_fd);

/* Fresh segments populated as they are mapped (host_memory.c, LOOM_POPULATE),
 * process-wide since start: bytes populated with MADV_POPULATE_WRITE, bytes
 * written page by page where the kernel lacks it, pieces whose populate
 * failed (left to fault in), segments too large to populate. */
typedef struct host_populate_stats {
  uint64_t populated_bytes, touched_bytes, failures, skipped;
} host_populate_stats;
void host_memory_populate_stats(host_populate_stats *out);

loom_status host_queue_create(void *ctx, int device, int priority, loom_stream_t *owner,
                              loom_driver_queue **out_queue);
void host_queue_destroy(void *ctx, loom_driver_queue *queue);
loom_status host_queue_submit(void *ctx, loom_driver_queue *queue, const loom_command *command);
loom_status host_queue_query(void *ctx, loom_driver_queue *queue);
loom_status host_queue_synchronize(void *ctx, loom_driver_queue *queue);
loom_status host_queue_run_inline(void *ctx, loom_driver_queue *queue, const loom_command *command);
/* How many nodes (a submitted command's copy) the queue has taken from
 * malloc since it was created; an executed node is kept for a later
 * submission of its size class, so a steady stream of commands stops
 * allocating. */
uint64_t host_queue_nodes_allocated(const loom_driver_queue *queue);
/* Commands submitted to the queue and not yet completed, now. */
uint64_t host_queue_pending(const loom_driver_queue *queue);

/* Reports the failure of launch `cmd` (kernel status rc on the chunk
 * [begin, end), `reason` its kernel's message or "") to `report`, or with
 * `report` NULL sets it as this thread's error. Returns the status. */
loom_status host_launch_failed(const loom_command *cmd, int rc, int64_t begin, int64_t end,
                               const char *reason, loom_stream_t *report);

/* Executes a launch command on the calling thread plus the device's pool,
 * at `priority` (see host_pool_run); reports a failure through `report` (may
 * be NULL: then sets the thread's error message). Returns the failing status
 * or LOOM_OK. */
loom_status host_execute_launch(host_context *ctx, int device, int priority,
                                const loom_command *command, loom_stream_t *report);

/* A byte range [lo, hi) of memory (adaptive eager: host_fuse*.c). */
typedef struct span {
  uintptr_t lo, hi;
} span;

/* The bytes `t` can reach; 0 for none (no data, or no elements). A
 * descriptor the runtime cannot read reaches everything (host_fuse.c). */
int host_fuse_tensor_span(const loom_tensor *t, span *out);

/* A descriptor's element map in its simplest form (adaptive eager): dims of size 1 dropped,
 * neighbours merged where the outer one steps as far as the whole inner. */
typedef struct host_canon {
  int32_t rank;
  int64_t sizes[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
} host_canon;

static inline void host_canonicalize(const loom_tensor *t, host_canon *c) {
  c->rank = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->sizes[d] == 1) continue;
    const int32_t r = c->rank;
    if (r > 0 && c->strides[r - 1] == t->sizes[d] * t->strides[d]) {
      c->sizes[r - 1] *= t->sizes[d];
      c->strides[r - 1] = t->strides[d];
    } else {
      c->sizes[r] = t->sizes[d];
      c->strides[r] = t->strides[d];
      c->rank = r + 1;
    }
  }
}

/* Whether every byte of `t`'s span belongs to one of its elements (no
 * gaps another tensor could own): saving and restoring the span then
 * touches nothing else. Broadcast dims read the same bytes again. */
static inline int host_dense(const loom_tensor *t) {
  if (!t->data) return 1;
  host_canon c;
  host_canonicalize(t, &c);
  int64_t sizes[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  int r = 0;
  for (int32_t d = 0; d < c.rank; ++d) {
    if (c.strides[d] == 0) continue;
    if (c.strides[d] < 0) return 0;
    sizes[r] = c.sizes[d];
    strides[r++] = c.strides[d];
  }
  /* Dims by stride, smallest first (a few dims: insertion sort). */
  for (int i = 1; i < r; ++i)
    for (int j = i; j > 0 && strides[j] < strides[j - 1]; --j) {
      int64_t s = strides[j]; strides[j] = strides[j - 1]; strides[j - 1] = s;
      s = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = s;
    }
  int64_t expect = 1;
  for (int i = 0; i < r; ++i) {
    if (strides[i] != expect) return 0;
    expect *= sizes[i];
  }
  return 1;
}

#endif
