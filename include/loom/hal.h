/* loom/hal.h — the runtime's public API: devices, memory, streams, events
 * and commands. It is driver-independent; the driver behind it is chosen at
 * loom_init(). Everything here is thread-safe.
 *
 * Conventions: out-parameters are cleared on entry; a function that creates
 * an object hands the caller one reference, released with *_release. */
#ifndef LOOM_HAL_H
#define LOOM_HAL_H

#include <stddef.h>
#include <stdint.h>

#include "loom/features.h"
#include "loom/kernel_abi.h"
#include "loom/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_HAL_VERSION 1

typedef struct loom_stream loom_stream_t;
typedef struct loom_event loom_event_t;

/* ---- runtime and devices ------------------------------------------------ */

/* Starts the runtime once (idempotent, thread-safe). Reads LOOM_NUM_DEVICES
 * (default 1), LOOM_NUM_THREADS (default: all cores) and LOOM_MEMORY_LIMIT
 * (bytes, with optional K/M/G suffix; default: physical memory). Every other
 * call starts the runtime implicitly. */
loom_status loom_init(void);

/* Waits for all streams, joins every runtime thread and frees everything
 * (streams, events still queued, device and pinned memory, live blocks
 * included). The next runtime call starts the runtime afresh. For tests and
 * clean process exit; no other runtime call may run concurrently. */
void loom_shutdown(void);

/* Number of devices; 0 if the runtime cannot start. Never fails. */
int loom_device_count(void);

typedef struct loom_device_props {
  char name[128];         /* e.g. "loom host (Intel Xeon ...)" */
  char driver[32];        /* "host" */
  int32_t index;
  int32_t num_threads;    /* workers serving this device */
  uint64_t total_memory;  /* bytes this device may hold (the limit) */
  int32_t major, minor;   /* capability version of the driver */
  uint32_t features;      /* LOOM_FEATURE_* bits (loom/features.h) */
  uint32_t flags;         /* LOOM_DEVICE_* bits below */
} loom_device_props;

/* loom_device_props.flags */
enum {
  /* Device memory is host memory: code on the host may read and write it
   * (once the streams that use it are synchronized), as the host driver's
   * kernels do. Clear where the host cannot address it (the guarded driver,
   * a discrete device): there, host code reaches device data only through
   * HAL copies and kernels. */
  LOOM_DEVICE_HOST_ADDRESSABLE = 1u << 0,
};

loom_status loom_device_properties(int device, loom_device_props *out);

/* Waits for all work on every stream of `device`; returns the first
 * asynchronous error recorded on any of them (and clears it). */
loom_status loom_device_synchronize(int device);
/* Waits for all work on every stream of `device` (streams being captured
 * run nothing and are skipped) and leaves their asynchronous errors
 * recorded, for the streams' own synchronization points to return: for
 * code that must outlive the device's work without consuming its errors
 * (the release of memory kernels may use). */
loom_status loom_device_wait_idle(int device);

/* ---- device memory (caching allocator) -------------------------------- */

/* Allocates `size` bytes (size 0 gives NULL and LOOM_OK) on `device` for use
 * on `stream` (NULL: the device's default stream). The block returns to the
 * cache on loom_free and is handed out again on that stream at once, on
 * another stream only after the work recorded on it has completed.
 * Over the limit: releases cached blocks, retries, then fails with
 * LOOM_ERROR_OUT_OF_MEMORY and a message naming requested and free sizes. */
loom_status loom_malloc(int device, size_t size, loom_stream_t *stream,
                        void **out_ptr);

/* Returns a block from loom_malloc to the cache. NULL is a no-op. */
loom_status loom_free(void *ptr);

/* Marks the block containing `ptr` as in use by `stream`: a later loom_free
 * defers its reuse until the work enqueued on `stream` so far is done. */
loom_status loom_record_stream(void *ptr, loom_stream_t *stream);

/* Device index owning `ptr` (any address inside a live block), or -1. */
int loom_pointer_device(const void *ptr);

/* One statistic, with the meaning of c10::CachingAllocator::Stat. */
typedef struct loom_stat {
  int64_t current, peak, allocated, freed;
} loom_stat;

/* Index into loom_stat arrays: aggregate, small pool (<= 1 MiB), large. */
enum { LOOM_POOL_ALL = 0, LOOM_POOL_SMALL = 1, LOOM_POOL_LARGE = 2,
       LOOM_POOL_COUNT = 3 };

/* Mirrors c10::CachingDeviceAllocator::DeviceStats field for field. */
typedef struct loom_memory_stats {
  loom_stat allocation[LOOM_POOL_COUNT];
  loom_stat segment[LOOM_POOL_COUNT];
  loom_stat active[LOOM_POOL_COUNT];
  loom_stat inactive_split[LOOM_POOL_COUNT];
  loom_stat allocated_bytes[LOOM_POOL_COUNT];
  loom_stat reserved_bytes[LOOM_POOL_COUNT];
  loom_stat active_bytes[LOOM_POOL_COUNT];
  loom_stat inactive_split_bytes[LOOM_POOL_COUNT];
  loom_stat requested_bytes[LOOM_POOL_COUNT];
  int64_t num_alloc_retries;
  int64_t num_ooms;
  loom_stat oversize_allocations;
  loom_stat oversize_segments;
  int64_t num_sync_all_streams;
  int64_t num_device_alloc;
  int64_t num_device_free;
  int64_t max_split_size;
} loom_memory_stats;

loom_status loom_memory_stats_get(int device, loom_memory_stats *out);
loom_status loom_memory_reset_peak(int device);
loom_status loom_memory_reset_accumulated(int device);
/* Releases every cached, unused segment of `device` back to the driver. */
loom_status loom_memory_empty_cache(int device);
/* Bytes still available under the limit, and the limit. */
loom_status loom_memory_info(int device, size_t *out_free, size_t *out_total);

/* ---- device memory: snapshots and events (for tools) -------------------- */

/* A block's state, as PyTorch's memory snapshots name them. */
enum {
  LOOM_BLOCK_INACTIVE = 0,     /* cached, free for reuse */
  LOOM_BLOCK_ALLOCATED = 1,    /* handed out by loom_malloc, not yet freed */
  LOOM_BLOCK_PENDING_FREE = 2, /* freed, waiting for the streams that used it */
};

typedef struct loom_memory_block_info {
  uintptr_t address;
  size_t size;           /* bytes, as the allocator rounded them */
  size_t requested_size; /* bytes asked of loom_malloc (0 when inactive) */
  int32_t state;         /* LOOM_BLOCK_* */
} loom_memory_block_info;

/* A segment: memory obtained from the driver at once, carved into blocks
 * that all serve one stream. */
typedef struct loom_memory_segment_info {
  int32_t device;
  int32_t pool;          /* LOOM_POOL_SMALL or LOOM_POOL_LARGE */
  uintptr_t address;
  size_t total_size;     /* bytes obtained from the driver */
  size_t allocated_size; /* bytes in LOOM_BLOCK_ALLOCATED blocks */
  size_t active_size;    /* bytes in allocated and pending-free blocks */
  size_t requested_size; /* bytes requested for those active blocks */
  uint64_t stream_id;    /* loom_stream_id of the stream it serves */
  size_t num_blocks;
} loom_memory_segment_info;

/* Called once per segment with its `segment->num_blocks` blocks in address
 * order; a non-zero return ends the walk. */
typedef int (*loom_memory_segment_fn)(void *user, const loom_memory_segment_info *segment,
                                      const loom_memory_block_info *blocks);

/* Walks `device`'s segments in address order. The picture is taken at once
 * under the allocator's lock (deferred frees whose streams finished are
 * completed first); `fn` then runs with no runtime lock held, so it may call
 * the runtime. LOOM_ERROR_OUT_OF_MEMORY if the host cannot hold the copy. */
loom_status loom_memory_snapshot(int device, loom_memory_segment_fn fn, void *user);

/* Describes the live block that starts at `ptr` (from loom_malloc, not yet
 * freed): its device, the loom_stream_id of its stream, sizes and state.
 * LOOM_ERROR_INVALID_ARGUMENT for any other address. */
loom_status loom_memory_block_query(const void *ptr, int *out_device, uint64_t *out_stream_id,
                                    loom_memory_block_info *out_block);

/* What the allocator did that its caller did not ask for block by block. */
enum {
  LOOM_MEMORY_EVENT_SEGMENT_ALLOC = 0,  /* a segment obtained from the driver */
  LOOM_MEMORY_EVENT_SEGMENT_FREE = 1,   /* a segment returned to the driver */
  LOOM_MEMORY_EVENT_FREE_COMPLETED = 2, /* a freed block became reusable: at
                                           loom_free, or for a block other
                                           streams used, once they finished */
  LOOM_MEMORY_EVENT_OOM = 3,            /* loom_malloc failed for lack of memory */
};

typedef struct loom_memory_event {
  int32_t kind;          /* LOOM_MEMORY_EVENT_* */
  int32_t device;
  uintptr_t address;     /* the segment's or block's (0 for OOM) */
  size_t size;           /* segment or block bytes; OOM: bytes requested */
  size_t requested_size; /* FREE_COMPLETED: bytes asked of loom_malloc */
  uint64_t stream_id;    /* loom_stream_id of the stream concerned */
  size_t device_free;    /* OOM: bytes still free under the limit */
} loom_memory_event;

typedef struct loom_memory_observer {
  void (*fn)(void *user, const loom_memory_event *event);
  void *user;
} loom_memory_observer;

/* Installs `observer` (NULL: none) for every device; it must stay valid
 * while installed. When this returns, no call to the previous observer is
 * in progress. Events come on the thread whose call caused them, with that
 * device's allocator lock held: `fn` must not call the runtime nor wait for
 * a thread that may. Not called while loom_shutdown frees the memory. */
loom_status loom_memory_set_observer(const loom_memory_observer *observer);

/* Takes the allocation at `ptr` (a live block's start) out of the caching
 * allocator, with the segment it fills, when the driver backs that segment
 * with memory other processes can map (the host driver with
 * LOOM_SHAREABLE_MEMORY=1): *out_fd is then the segment's memfd (mode
 * 0600, sealed against resizing) and *out_size its size; the caller owns
 * the shared mapping at `ptr` (*out_size bytes) and the descriptor, and no
 * longer frees the block. Streams must be done with it (recorded uses on
 * other streams refuse). LOOM_ERROR_NOT_SUPPORTED, changing nothing, where
 * the block shares its segment or the driver cannot. */
loom_status loom_memory_detach(void *ptr, int *out_fd, size_t *out_size);

/* ---- pinned host memory ------------------------------------------------- */

/* Page-locked (for the host driver: registered) host memory, cached. Copies
 * from/to it are fully asynchronous. */
loom_status loom_host_malloc(size_t size, void **out_ptr);
loom_status loom_host_free(void *ptr);
/* 1 if `ptr` lies inside a live pinned block, else 0. */
int loom_host_is_pinned(const void *ptr);
/* Base address of the pinned block containing `ptr`, or NULL. */
void *loom_host_block_base(const void *ptr);
loom_status loom_host_empty_cache(void);
/* Registers [ptr, ptr + size), host memory the caller mapped (a shared
 * segment, say), as pinned: copies to and from it are then asynchronous,
 * as with loom_host_malloc's blocks, so the caller must keep it mapped and
 * untouched by the host while copies queued on it run. The range must not
 * overlap pinned memory. Not counted in loom_host_stats; loom_shutdown ends
 * every registration. */
loom_status loom_host_register(void *ptr, size_t size);
/* Ends the registration that starts at `ptr` (copies already queued on the
 * range still run: synchronize their streams before unmapping it). */
loom_status loom_host_unregister(void *ptr);
/* Host allocator statistics (allocation/segment/allocated_bytes/
 * reserved_bytes as in loom_memory_stats, aggregate only). */
typedef struct loom_host_stats {
  loom_stat allocation, segment, allocated_bytes, reserved_bytes;
  int64_t num_host_alloc, num_host_free;
} loom_host_stats;
loom_status loom_host_stats_get(loom_host_stats *out);
loom_status loom_host_reset_peak(void);
loom_status loom_host_reset_accumulated(void);

/* ---- streams ------------------------------------------------------------ */

/* A stream is an in-order queue of commands executed asynchronously. Streams
 * of one device run concurrently. Priority: 0 normal, < 0 higher (lower
 * values first): where streams compete for a device's threads, the chunks of
 * a higher-priority stream's launches are taken before a lower-priority
 * stream's queued chunks (a running chunk is never interrupted). */
loom_status loom_stream_create(int device, int priority,
                               loom_stream_t **out_stream);
/* The device's default stream: borrowed, lives as long as the runtime. */
loom_status loom_stream_default(int device, loom_stream_t **out_stream);
void loom_stream_retain(loom_stream_t *stream);
void loom_stream_release(loom_stream_t *stream);
int loom_stream_device(const loom_stream_t *stream);
int loom_stream_priority(const loom_stream_t *stream);
/* The stream's identity for the allocator (loom_memory_segment_info,
 * loom_memory_event): unique for the process's life, never 0; 0 for an
 * invalid stream. */
uint64_t loom_stream_id(const loom_stream_t *stream);

/* LOOM_OK when all enqueued work is done, LOOM_ERROR_NOT_READY while some is
 * pending, or the recorded asynchronous error (which it clears). */
loom_status loom_stream_query(loom_stream_t *stream);
/* Waits until all enqueued work is done; returns (and clears) the first
 * asynchronous error recorded since the last synchronization point, with a
 * message naming the command that failed. */
loom_status loom_stream_synchronize(loom_stream_t *stream);

/* A stream's queue holds at most LOOM_QUEUE_DEPTH commands not yet
 * completed (default 1024; 0: unbounded): a thread that submits to a full
 * queue waits until the stream's work drains to 7/8 of the depth. Threads
 * running a stream's commands (host callbacks) and the allocator's event
 * records never wait. The hooks run around each such wait, on the waiting
 * thread, with no runtime lock held: a binding releases its interpreter's
 * lock there (`begin` returns what `end` gets back). Either may be NULL;
 * they may be set before loom_init and last until replaced. */
void loom_set_queue_wait_hooks(void *(*begin)(void), void (*end)(void *token));
/* How many times a thread waited for room in the stream's full queue. */
uint64_t loom_stream_queue_waits(const loom_stream_t *stream);

/* ---- events ------------------------------------------------------------- */

enum { LOOM_EVENT_DEFAULT = 0, LOOM_EVENT_TIMING = 1 };

loom_status loom_event_create(int device, unsigned flags,
                              loom_event_t **out_event);
/* Adds a reference, released with loom_event_release: for holding an event
 * across a wait that another thread's release must not cut short. */
void loom_event_retain(loom_event_t *event);
void loom_event_release(loom_event_t *event);
/* Captures the stream's work so far; re-recording replaces the capture. */
loom_status loom_event_record(loom_event_t *event, loom_stream_t *stream);
/* LOOM_OK if the captured work is done (or the event never recorded),
 * LOOM_ERROR_NOT_READY otherwise. */
loom_status loom_event_query(loom_event_t *event);
loom_status loom_event_synchronize(loom_event_t *event);
/* Later work on `stream` waits for the work the event captures now: a
 * later loom_event_record of the same event, on any stream, does not change
 * what this wait waits for. */
loom_status loom_stream_wait_event(loom_stream_t *stream, loom_event_t *event);
/* Milliseconds between two completed, recorded timing events. */
loom_status loom_event_elapsed_ms(loom_event_t *start, loom_event_t *end,
                                  double *out_ms);

/* ---- kernels -------------------------------------------------------------- */

/* Kernels are named ("pointwise.binary", "nll_loss.forward"). A launch names
 * its kernel through a handle, looked up once and cached by the caller; the
 * driver maps the name to its implementation (the host driver's table is the
 * C kernel library), and kernels compiled at run time join the same
 * registry. Which ISA variant runs is the kernel family's choice. */
typedef struct loom_kernel loom_kernel_t;

#define LOOM_KERNEL_NAME_MAX 64

/* The kernel named `name`. The handle stays valid for the life of the
 * process (across loom_shutdown and a restart with another driver), so
 * callers may cache it. LOOM_ERROR_NOT_SUPPORTED when neither the running
 * driver nor a run-time registration provides the name. */
loom_status loom_kernel_lookup(const char *name, const loom_kernel_t **out_kernel);

/* The name the handle was looked up by (static for the process's life). */
const char *loom_kernel_name(const loom_kernel_t *kernel);

/* The host function a launch of `kernel` calls on the running driver (a
 * run-time registration's, else the driver's); LOOM_ERROR_INVALID_ARGUMENT
 * for a kernel that only plans. */
loom_status loom_kernel_function(const loom_kernel_t *kernel, loom_kernel_fn *out_fn);

/* Plans a launch of `kernel` for `args` (data pointers are not read):
 * fills `size` bytes at `out_plan` with the plan its family's contract in
 * loom/kernels/ describes. LOOM_ERROR_NOT_SUPPORTED if the kernel has no
 * planner on this driver. */
loom_status loom_kernel_plan(const loom_kernel_t *kernel, const loom_kernel_args *args,
                             void *out_plan, size_t size);

/* Registers `fn`, a host-callable kernel, under `name` (at most
 * LOOM_KERNEL_NAME_MAX - 1 characters); a name may be registered once.
 * For kernels compiled at run time. */
loom_status loom_kernel_register(const char *name, loom_kernel_fn fn);

/* Withdraws the registration of `fn` under `name` (LOOM_ERROR_INVALID_ARGUMENT
 * if `name` is not registered to `fn`), so that the code behind `fn` may be
 * unloaded and the name registered again. The handle stays valid; launches
 * by it fail until then. A launch of `fn` already queued still calls it. */
loom_status loom_kernel_unregister(const char *name, loom_kernel_fn fn);

/* Row maps of kernels registered at run time: a function with the
 * signature of kernels/registry.h's loom_row_map_fn, declared by the JIT
 * for a kernel it compiled (loom/jit.h's row_map_symbol) and asked for by
 * the host driver's adaptive eager, as it asks the library for its
 * row-wise kernels. A function declared before keeps its map; when the
 * table is full, `fn` gets none (its launches run unfused). Lock-free to
 * read, thread-safe; loom_kernel_forget_row_maps (when the code is
 * unmapped) forgets them all. */
struct loom_row_map;
typedef int (*loom_kernel_row_map_fn)(const loom_kernel_args *args, struct loom_row_map *out);
void loom_kernel_declare_row_map(loom_kernel_fn fn, loom_kernel_row_map_fn map);
loom_kernel_row_map_fn loom_kernel_row_map(loom_kernel_fn fn);
void loom_kernel_forget_row_maps(void);

/* ---- commands ------------------------------------------------------------ */

typedef struct loom_launch_desc {
  const char *name;             /* op name, static storage; used in errors */
  loom_kernel_fn fn;            /* a host function to call when `kernel` is NULL */
  const loom_tensor *tensors;   /* copied at enqueue */
  uint32_t num_tensors;
  const loom_scalar *scalars;   /* copied at enqueue */
  uint32_t num_scalars;
  int64_t range;                /* parallel range; 0 launches nothing */
  int64_t grain;                /* chunk size (>= 1); see kernel_abi.h */
  uint32_t flags;               /* LOOM_LAUNCH_* bits; 0: none */
  const loom_kernel_t *kernel;  /* the kernel to run; takes precedence over fn */
  uint64_t flops;               /* arithmetic of the whole launch, for the
                                   profiler; 0: not counted */
} loom_launch_desc;

enum {
  /* The launch may execute on the calling thread before loom_launch
   * returns, when the stream has nothing pending and the driver judges the
   * launch small: a tiny kernel costs less to run than to hand over. Order
   * and error reporting stay those of the stream (a failure is recorded on
   * it and raised at its next synchronization). Only for kernels that never
   * wait for the host. */
  LOOM_LAUNCH_MAY_RUN_INLINE = 1u << 0,
  /* The launch sets memory to a value (a memset): traced as a fill. */
  LOOM_LAUNCH_FILL = 1u << 1,
};

/* Enqueues a kernel launch. Returns (and clears) a pending asynchronous error
 * of the stream first, so errors surface at the next enqueue at the latest. */
loom_status loom_launch(loom_stream_t *stream, const loom_launch_desc *desc);

/* Copies `size` bytes in stream order. Either side may be device memory,
 * pinned host memory or pageable host memory:
 *  - a pageable source is staged before return, so the caller may reuse it;
 *  - a pageable destination is written before return (the call waits);
 *  - device and pinned memory on both sides: fully asynchronous. */
loom_status loom_memcpy(loom_stream_t *stream, void *dst, const void *src,
                        size_t size);

/* Enqueues fn(user) on the stream's executor, in order. The callback must not
 * enqueue on the same stream and wait. */
loom_status loom_host_callback(loom_stream_t *stream, void (*fn)(void *user),
                               void *user, const char *name);

/* ---- tracing (the profiler's source) -------------------------------------- */

/* While tracing is enabled, each kernel launch, copy and host callback
 * enqueued on a stream is recorded twice: once when it is enqueued (on the
 * calling thread) and once when it runs, timed by the driver where it
 * executes. Records go to a ring per stream; a full ring drops records and
 * counts them, it never blocks. Disabled (the default), a command costs
 * one relaxed atomic load. Commands of drivers built for an API version
 * below 3, and loom_run_now, are not traced. */
typedef enum loom_trace_kind {
  LOOM_TRACE_KERNEL = 0,   /* a kernel launch */
  LOOM_TRACE_FILL = 1,     /* a launch flagged LOOM_LAUNCH_FILL */
  LOOM_TRACE_COPY = 2,     /* loom_memcpy */
  LOOM_TRACE_CALLBACK = 3, /* loom_host_callback */
  LOOM_TRACE_ENQUEUE = 4,  /* the enqueue of one of the above */
} loom_trace_kind;

typedef struct loom_trace_record {
  uint32_t kind;           /* loom_trace_kind */
  int32_t device;
  uint64_t stream;         /* the stream's process-unique id */
  uint64_t sequence;       /* numbers traced commands from 1; a command and
                              its ENQUEUE record share it */
  uint64_t correlation;    /* loom_trace_correlation() of the enqueuing
                              thread at the enqueue */
  uint64_t start_ns, end_ns; /* loom_trace_now()'s clock: when it ran (for
                              ENQUEUE: the enqueuing call) */
  uint64_t bytes;          /* kernel: the bytes its tensors span, summed;
                              copy: its size */
  uint64_t flops;          /* loom_launch_desc.flops; 0: not counted */
  uint64_t thread;         /* ENQUEUE: the enqueuing thread's OS id */
  const char *name;        /* kernel: its registry name; copy: "memcpy HtoD"
                              (DtoH, DtoD, HtoH); ENQUEUE: the call */
  const char *op;          /* the name the enqueuer gave the command */
} loom_trace_record;

/* Starts tracing. A stream gets its ring at its first traced command, of
 * `records_per_stream` records (rounded up to a power of two, at least 64;
 * 0: 65536), and keeps that ring for its life. Discards the records and
 * the count of drops left from before. */
loom_status loom_trace_enable(size_t records_per_stream);
/* Stops tracing commands enqueued from now on; those already enqueued
 * still record when they run. Records stay until drained. */
void loom_trace_disable(void);
int loom_trace_enabled(void);
/* Moves up to `capacity` records into `out` and returns how many: each
 * stream's in the order its commands were enqueued (a command's record is
 * claimed at its enqueue), streams one after another, streams destroyed
 * since included. A record whose command has not run yet, and those after
 * it on its stream, wait for a later call. */
size_t loom_trace_drain(loom_trace_record *out, size_t capacity);
/* Records lost since loom_trace_enable: full rings, or no memory for one. */
uint64_t loom_trace_dropped(void);
/* The calling thread's correlation id, stamped on the commands it
 * enqueues (0: none): the profiler sets it to the operation it records. */
void loom_trace_set_correlation(uint64_t id);
uint64_t loom_trace_correlation(void);
/* The clock of trace records: CLOCK_MONOTONIC in nanoseconds. */
uint64_t loom_trace_now(void);

/* ---- testing ------------------------------------------------------------- */

/* Runs the parallel-for of `desc` synchronously on the calling thread and the
 * device's workers, bypassing the queues (used by tests and benchmarks). */
loom_status loom_run_now(int device, const loom_launch_desc *desc);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_HAL_H */
