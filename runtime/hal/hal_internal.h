/* State shared by the HAL front end's files. Not a public header. */
#ifndef LOOM_HAL_INTERNAL_H
#define LOOM_HAL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "loom/driver.h"
#include "loom/hal.h"

/* The device's caching allocator (runtime/alloc/caching_allocator.h, which
 * the files that call it include): the HAL's state only points to it. */
typedef struct loom_allocator loom_allocator;

#define LOOM_STREAM_MAGIC 0x4c53544du /* "LSTM" */

struct loom_stream {
  uint32_t magic;
  atomic_int refs;
  struct loom_runtime *rt; /* the runtime the stream belongs to */
  int device, priority, is_default;
  uint64_t id; /* unique for the process lifetime; keys allocator pools */
  loom_driver_queue *queue;
  /* The first asynchronous error since the last synchronization point. */
  pthread_mutex_t error_lock;
  atomic_int has_error;
  loom_status error;
  char error_message[512];
  struct loom_stream *prev, *next; /* the device's live streams */
  /* Where its commands are traced (runtime/hal/trace.c): made at the first
   * traced command. */
  _Atomic(struct loom_trace_ring *) trace_ring;
  /* While the stream captures (runtime/hal/graph.c): the graph its
   * commands go to, and the pool loom_malloc serves it from. */
  _Atomic(struct loom_graph *) capture;
  _Atomic uint64_t capture_pool;
  _Atomic uint64_t queue_waits; /* loom_stream_queue_waits */
};

typedef struct loom_device_state {
  loom_stream_t *default_stream;
  pthread_mutex_t streams_lock;
  loom_stream_t *streams; /* every live stream, default included */
  loom_allocator *allocator;
} loom_device_state;

typedef struct loom_runtime {
  const loom_driver *driver;
  loom_driver_config config;
  int num_devices;
  loom_device_state *devices;
} loom_runtime;

/* The started runtime, or NULL with the error set (starts it if needed). */
loom_runtime *loom_runtime_get(void);
/* Why loom_runtime_get() returned NULL: always a failure status (the
 * start error, or LOOM_ERROR_UNAVAILABLE), never LOOM_OK. */
loom_status loom_runtime_unavailable(void);

/* Validates a device index; sets the message on failure. */
loom_status loom_check_device(loom_runtime *rt, int device);
/* Validates a stream handle; NULL is rejected. */
loom_status loom_check_stream(const loom_stream_t *stream, const char *what);

/* Returns and clears the stream's asynchronous error (LOOM_OK if none),
 * setting this thread's message to it. */
loom_status loom_stream_take_error(loom_stream_t *stream);

/* Stream bookkeeping used by runtime start and shutdown. */
loom_status loom_stream_create_internal(loom_runtime *rt, int device,
                                        int priority, int is_default,
                                        loom_stream_t **out);
void loom_stream_destroy_internal(loom_runtime *rt, loom_stream_t *stream);

/* Submits a command to `stream`'s queue. */
loom_status loom_stream_submit(loom_runtime *rt, loom_stream_t *stream,
                               const loom_command *command);

/* Brackets submissions that must never wait for room in a full queue
 * (runtime/hal/queue_wait.c): they are made under a lock. Nest. */
void loom_queue_no_wait_enter(void);
void loom_queue_no_wait_leave(void);

/* A process-unique id, never 0: streams' and graph pools' ids share it, so
 * that the allocator can key its free lists by either. */
uint64_t loom_next_object_id(void);

/* ---- graph capture (runtime/hal/graph.c) ---- */

/* The graph `stream` captures into, or NULL (the common case: one load). */
static inline struct loom_graph *loom_stream_capture(const loom_stream_t *stream) {
  return atomic_load_explicit(&((loom_stream_t *)stream)->capture, memory_order_acquire);
}
/* Records `cmd` (a launch, copy or callback the caller built for the
 * stream) into the capture of `stream`; the graph takes over the
 * command's release, which then runs when the graph goes. `kind` and
 * `flops` are what tracing records at each replay. */
loom_status loom_graph_capture_command(loom_stream_t *stream, const loom_command *cmd,
                                       loom_trace_kind kind, uint64_t flops);
/* Records an event record (wait = 0) or wait (wait = 1) on `stream`. */
loom_status loom_graph_capture_event(loom_stream_t *stream, loom_event_t *event, int wait);
/* Refuses `call` on the capturing `stream`: the capture will end with
 * this error, which is also returned (LOOM_ERROR_NOT_PERMITTED). */
loom_status loom_graph_refuse(loom_stream_t *stream, const char *call);

/* The implementation of a looked-up kernel on `driver` (resolved once per
 * driver). */
loom_status loom_kernel_fn_for(const loom_kernel_t *kernel, const loom_driver *driver,
                               loom_kernel_fn *out_fn);

#endif
