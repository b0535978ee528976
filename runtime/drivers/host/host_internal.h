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

/* A persistent set of worker threads that, together with the submitting
 * thread, execute one parallel-for at a time. */
typedef struct host_pool {
  int num_workers;
  pthread_t *threads;
  pthread_mutex_t busy; /* held by the thread that owns the current job */
  /* The current job; valid while `open` holds its generation. */
  loom_kernel_fn fn;
  const loom_kernel_args *args;
  int64_t num_chunks;
  _Atomic int64_t next_chunk, done_chunks;
  atomic_int failed;    /* first failing status, 0 if none */
  int64_t failed_begin; /* written by the thread that set `failed`, */
  char failed_reason[HOST_REASON_CAPACITY]; /* with its kernel's message */
  _Atomic uint64_t open;       /* generation of the open job, 0 if none */
  uint64_t generation;
  atomic_int in_job;           /* workers inside the job */
  pthread_mutex_t wake_lock;
  pthread_cond_t wake;
  atomic_int sleeping;
  /* The owner, asleep until the last chunk is done (under wake_lock). */
  pthread_cond_t joined;
  atomic_int owner_waiting;
  atomic_int stop;
  int workers_off_cpu; /* the CPU the workers are kept off, -1 if none (under busy) */
} host_pool;

int host_pool_init(host_pool *pool, int num_workers);
/* Starts a device thread with an 8 MiB stack, whatever the process's
 * default: kernels keep their tiles on the stack (attention's take up to
 * 550 KiB). pthread_create's result. */
int host_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);
void host_pool_destroy(host_pool *pool);

/* Runs fn over [0, range) in chunks of grain. Returns 0 or the first
 * failing kernel status, described in *out_failure. */
int host_pool_run(host_pool *pool, loom_kernel_fn fn, const loom_kernel_args *args,
                  host_failure *out_failure);

typedef struct host_device {
  host_pool pool;
  int threads; /* executor + workers */
} host_device;

typedef struct host_context {
  loom_driver_config config;
  int num_devices;
  host_device *devices;
} host_context;

loom_status host_queue_create(void *ctx, int device, int priority, loom_stream_t *owner,
                              loom_driver_queue **out_queue);
void host_queue_destroy(void *ctx, loom_driver_queue *queue);
loom_status host_queue_submit(void *ctx, loom_driver_queue *queue, const loom_command *command);
loom_status host_queue_query(void *ctx, loom_driver_queue *queue);
loom_status host_queue_synchronize(void *ctx, loom_driver_queue *queue);
loom_status host_queue_run_inline(void *ctx, loom_driver_queue *queue, const loom_command *command);

/* Executes a launch command on the calling thread plus the device's pool;
 * reports a failure through `report` (may be NULL: then sets the thread's
 * error message). Returns the failing status or LOOM_OK. */
loom_status host_execute_launch(host_context *ctx, int device, const loom_command *command,
                                loom_stream_t *report);

#endif
