/* loom/driver.h — the interface a driver implements beneath the HAL.
 *
 * A driver is a const table of function pointers plus a context pointer,
 * versioned like a file format: `api_version` comes first, slots are only
 * ever appended, and a slot marked optional may be NULL (the HAL front end
 * then supplies a default). The front end validates every argument (device
 * index, NULL handles, cross-device misuse) before calling a slot, so a
 * driver may trust what it receives.
 *
 * The front end owns policy: caching allocation, statistics, memory limits,
 * stream error slots, events. The driver owns mechanism: raw memory
 * segments and in-order command queues that execute asynchronously. */
#ifndef LOOM_DRIVER_H
#define LOOM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "loom/hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2 appended kernel_resolve; 3 appended loom_command.trace, which a
 * driver completes with loom_driver_trace_report; 4 appended
 * segment_detach. A driver built for an older version is still accepted:
 * the front end reads no slot past its version, and traces none of its
 * commands. */
#define LOOM_DRIVER_API_VERSION 4

/* What the front end asks a queue to execute, in submission order. */
typedef enum loom_command_kind {
  LOOM_COMMAND_LAUNCH = 0,       /* parallel-for of a kernel */
  LOOM_COMMAND_COPY = 1,         /* memcpy between any two real addresses */
  LOOM_COMMAND_EVENT_RECORD = 2, /* call loom_driver_event_complete */
  LOOM_COMMAND_EVENT_WAIT = 3,   /* call loom_driver_event_wait */
  LOOM_COMMAND_CALLBACK = 4,     /* call fn(user) */
} loom_command_kind;

typedef struct loom_command {
  loom_command_kind kind;
  const char *name; /* static storage; used in error messages */
  union {
    struct {
      loom_kernel_fn fn;          /* the implementation kernel_resolve gave */
      const loom_tensor *tensors; /* the driver copies these at submit */
      uint32_t num_tensors;
      const loom_scalar *scalars; /* likewise */
      uint32_t num_scalars;
      int64_t range, grain;
      const loom_kernel_t *kernel; /* the named kernel, NULL for a bare fn */
    } launch;
    struct {
      void *dst;
      const void *src;
      size_t size;
    } copy;
    struct {
      loom_event_t *event;
      uint64_t sequence;
    } event;
    struct {
      void (*fn)(void *user);
      void *user;
    } callback;
  } u;
  /* Optional: called once after the command has executed (or been dropped),
   * e.g. to free a staging buffer. */
  void (*release)(void *arg);
  void *release_arg;
  /* API version 3. While the profiler records the command: the record of
   * its execution, which the front end claimed in the stream's trace ring
   * and the driver completes with loom_driver_trace_report once the
   * command has executed; else NULL. A driver only copies the pointer
   * along with the command. */
  struct loom_trace_slot *trace;
} loom_command;

/* What a driver resolves a kernel name to. */
typedef struct loom_kernel_impl {
  loom_kernel_fn fn;        /* NULL: the name only plans */
  loom_kernel_plan_fn plan; /* NULL: the name only launches */
} loom_kernel_impl;

/* A driver-defined queue. */
typedef struct loom_driver_queue loom_driver_queue;

typedef struct loom_driver_config {
  int num_devices;      /* LOOM_NUM_DEVICES */
  int num_threads;      /* LOOM_NUM_THREADS (host cores to use in total) */
  uint64_t memory_limit; /* LOOM_MEMORY_LIMIT, per device */
} loom_driver_config;

typedef struct loom_driver {
  uint32_t api_version; /* LOOM_DRIVER_API_VERSION the driver was built for */
  const char *name;     /* "host" */
  void *context;

  /* Starts the driver; *out_count receives the number of devices. */
  loom_status (*init)(void *ctx, const loom_driver_config *config,
                      int *out_count);
  /* Optional. Joins threads and frees everything; queues are gone by then. */
  void (*shutdown)(void *ctx);
  /* Optional: the front end fills name/driver/index/total_memory. */
  loom_status (*device_properties)(void *ctx, int device,
                                   loom_device_props *out);

  /* Raw device memory. The returned address must be usable by this driver's
   * commands; for the host driver it is a real host pointer. */
  loom_status (*segment_alloc)(void *ctx, int device, size_t size,
                               void **out_ptr);
  void (*segment_free)(void *ctx, int device, void *ptr, size_t size);

  /* In-order command queues. `owner` is the stream to report errors to
   * through loom_driver_report_error. */
  loom_status (*queue_create)(void *ctx, int device, int priority,
                              loom_stream_t *owner,
                              loom_driver_queue **out_queue);
  /* Waits for the queue's work, then destroys it. */
  void (*queue_destroy)(void *ctx, loom_driver_queue *queue);
  /* Enqueues a copy of `command`; must not wait for earlier commands. */
  loom_status (*queue_submit)(void *ctx, loom_driver_queue *queue,
                              const loom_command *command);
  /* LOOM_OK when every submitted command has executed, else NOT_READY. */
  loom_status (*queue_query)(void *ctx, loom_driver_queue *queue);
  /* Blocks until every submitted command has executed. */
  loom_status (*queue_synchronize)(void *ctx, loom_driver_queue *queue);

  /* Optional: run a launch command now on the calling thread and the
   * device's workers. Default: the chunks run in order on the caller. */
  loom_status (*run_now)(void *ctx, int device, const loom_command *command);

  /* Optional: if the queue has no pending work, execute `command` (a COPY,
   * or a LAUNCH with LOOM_LAUNCH_MAY_RUN_INLINE that the driver judges
   * small) on the calling thread, in queue order, and return LOOM_OK;
   * otherwise return LOOM_ERROR_NOT_READY without doing anything. Saves a
   * thread hand-off for copies the caller waits for anyway, and for tiny
   * kernels, which cost less to run than to hand over. A launch that fails
   * records its error on the queue's stream, as if the queue had run it. */
  loom_status (*queue_run_inline)(void *ctx, loom_driver_queue *queue,
                                  const loom_command *command);

  /* ---- API version 2 ---- */

  /* Optional: the implementation of the kernel named `name` (its kernel
   * function, its planner, or both), called once per name and runtime
   * start; LOOM_ERROR_NOT_SUPPORTED if the driver has none. NULL: the
   * driver has no kernel library, and only kernels registered at run time
   * launch on it. */
  loom_status (*kernel_resolve)(void *ctx, const char *name, loom_kernel_impl *out);

  /* ---- API version 4 ---- */

  /* Optional: gives up the segment at `ptr` (`size` bytes, from
   * segment_alloc) when the driver backs it with memory other processes
   * can map: *out_fd is then a descriptor (close-on-exec) of a memfd of
   * exactly `size` bytes, mode 0600 and sealed against shrinking and
   * growing, of which `ptr` is a shared mapping; the driver forgets the
   * segment, and the caller owns the mapping and the descriptor (it
   * unmaps and closes them). LOOM_ERROR_NOT_SUPPORTED, changing nothing,
   * for any other segment. Sharing a tensor's memory between processes
   * without a copy (loomccl's shared regions) rests on it. */
  loom_status (*segment_detach)(void *ctx, int device, void *ptr, size_t size, int *out_fd);
} loom_driver;

/* The embedded host driver. */
const loom_driver *loom_host_driver(void);
/* Tells the host driver the process is one of several of a job (a loomccl
 * group of several ranks joined): with LOOM_SHAREABLE_MEMORY unset, the
 * segments it allocates from then on are shareable memfds, as under
 * torchrun with LOCAL_WORLD_SIZE > 1 (drivers/host/host_memory.c). */
void loom_host_memory_join_job(void);

/* Makes `driver` available (the table must outlive the runtime). The runtime
 * uses the driver named by LOOM_DRIVER if set, else the most recently
 * registered one, else "host". Registering after the runtime started takes
 * effect at the next start (after loom_shutdown). At most 8 drivers. */
loom_status loom_driver_register(const loom_driver *driver);

/* The status to record for a kernel's non-zero return code: its own if it
 * is a failing loom_status, else LOOM_ERROR_DEVICE. LOOM_ERROR_NOT_READY is
 * no failure (a query would read it as "work pending"), so it maps to
 * LOOM_ERROR_DEVICE too. */
static inline loom_status loom_kernel_status(int rc) {
  return rc > LOOM_OK && rc < LOOM_STATUS_COUNT && rc != LOOM_ERROR_NOT_READY
             ? (loom_status)rc
             : LOOM_ERROR_DEVICE;
}

/* ---- services the front end offers drivers ------------------------------- */

/* Records the first asynchronous error of `stream` (later ones are dropped);
 * the message should name the command: "<op>: <status name> ...". */
void loom_driver_report_error(loom_stream_t *stream, loom_status status,
                              const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Executes an EVENT_RECORD command: stamps the time and marks `sequence`
 * of `event` complete. */
void loom_driver_event_complete(loom_event_t *event, uint64_t sequence);
/* Executes an EVENT_WAIT command: blocks until `sequence` of `event` is
 * complete. */
void loom_driver_event_wait(loom_event_t *event, uint64_t sequence);
/* Around a wait of the submitting thread for room in the full queue of
 * `stream` (may be NULL): whether this thread may wait at all (not while it
 * submits under a runtime lock), then the binding's hooks
 * (loom_set_queue_wait_hooks), called with no lock of the driver held. */
int loom_driver_queue_may_wait(void);
void *loom_driver_queue_wait_begin(loom_stream_t *stream);
void loom_driver_queue_wait_end(loom_stream_t *stream, void *token);
/* Reports when a command with `trace` set really ran, on the clock of
 * loom_trace_now() (a device with its own timer converts), once it has
 * executed: where it executes, so that the profiler sees device time, not
 * enqueue time. Exactly once per traced command, even one whose kernel
 * failed: the profiler's records of the stream's later commands wait for
 * it. Untraced commands cost a driver one test of the field:
 *
 *   if (cmd->trace) {
 *     const uint64_t t0 = loom_trace_now();
 *     ...execute...
 *     loom_driver_trace_report(cmd, t0, loom_trace_now());
 *   } */
void loom_driver_trace_report(const loom_command *command, uint64_t start_ns,
                              uint64_t end_ns);
/* The same for `n` launches that ran as one fused group between start_ns
 * and end_ns (loom/fuse.h): the profiler sees one kernel, named for the
 * members in order ("fused(mul_, add_, sqrt)"), with their bytes and flops,
 * on the first traced member's record; the other members' records are
 * withdrawn. Untraced members are passed over. */
void loom_driver_trace_report_group(const loom_command *const *commands, size_t n,
                                    uint64_t start_ns, uint64_t end_ns);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_DRIVER_H */
