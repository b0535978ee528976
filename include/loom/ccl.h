/* loom/ccl.h — loomccl: collectives between the processes of one machine,
 * each driving one loom device.
 *
 * A communicator joins `world_size` processes that agree on a job id (made
 * by one of them with loom_ccl_make_job_id and handed to the others, e.g.
 * through PyTorch's c10d Store). It owns one shared memory segment
 * (memfd_create; private to the job: reachable by no path, handed only to
 * processes of the same user over a unix socket) through which every
 * collective passes, and runs on a communication stream the caller gives.
 *
 * Ordering: collectives are enqueued, never run, by these calls. A piece of
 * work (loom_ccl_work_t) starts after what the caller's stream had enqueued
 * when loom_ccl_begin was called, runs its collectives in call order on the
 * communication stream, and completes at loom_ccl_end. Every rank must make
 * the same collective calls in the same order (send/recv: matching pairs in
 * the same order on both sides). Reductions combine the ranks' values in
 * rank order 0, 1, ..., world_size - 1 with the same kernel on every rank,
 * so results are bitwise identical across ranks and from run to run.
 *
 * Faults: every wait for a peer is bounded by the communicator's timeout
 * and fails at once when a peer has died or left. A failure is recorded on
 * the work (loom_ccl_work_status, and an asynchronous error on every stream
 * that waited for it with loom_ccl_work_wait) and breaks the communicator:
 * later collectives fail at loom_ccl_begin with the first failure's
 * message, as a NCCL communicator aborts. */
#ifndef LOOM_CCL_H
#define LOOM_CCL_H

#include <stddef.h>
#include <stdint.h>

#include "loom/hal.h"
#include "loom/kernels/ccl.h" /* loom_ccl_op */

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_CCL_VERSION 1
/* A job id: this many lowercase hex digits (128 random bits). */
#define LOOM_CCL_JOB_ID_LEN 32

typedef struct loom_ccl_comm loom_ccl_comm_t;
typedef struct loom_ccl_work loom_ccl_work_t;

/* How values combine (accumulators, rounding, bool, NaN): loom/kernels/ccl.h. */
typedef struct loom_ccl_reduction {
  int32_t op;                /* loom_ccl_op */
  double factor;             /* PREMUL_SUM: the factor, unless factor_ptr */
  const void *factor_ptr;    /* PREMUL_SUM: NULL, or one element of the data's
                                dtype in device memory of the communicator's
                                device, read when the reduction runs */
} loom_ccl_reduction;

typedef struct loom_ccl_config {
  int rank, world_size;
  char job_id[LOOM_CCL_JOB_ID_LEN + 1]; /* the same on every rank */
  loom_stream_t *stream;   /* the communication stream (retained); its
                              device is the communicator's */
  uint64_t timeout_ms;     /* bound of every wait for a peer; 0: 30 minutes */
  size_t buffer_bytes;     /* staging bytes per rank and step (rank 0's value
                              counts); 0: 4 MiB */
} loom_ccl_config;

/* Writes a fresh job id (128 bits from getrandom) and its terminating NUL. */
loom_status loom_ccl_make_job_id(char out[LOOM_CCL_JOB_ID_LEN + 1]);

/* Joins the communicator: rank 0 creates the segment and listens on a unix
 * socket in the abstract namespace named after the user and the job; the
 * others connect (waiting for it up to the timeout) and receive the
 * segment. Both sides check the peer's credentials (same user) and the job
 * id. Returns once this rank holds the segment. */
loom_status loom_ccl_comm_create(const loom_ccl_config *config, loom_ccl_comm_t **out_comm);

/* Waits for the communicator's stream, tells the peers this rank left,
 * unmaps the segment and closes everything. NULL is a no-op. */
void loom_ccl_comm_destroy(loom_ccl_comm_t *comm);

/* Breaks the communicator now: its pending and later collectives fail
 * promptly on this rank, and the peers see this rank as gone. */
void loom_ccl_comm_abort(loom_ccl_comm_t *comm);

int loom_ccl_comm_rank(const loom_ccl_comm_t *comm);
int loom_ccl_comm_size(const loom_ccl_comm_t *comm);
int loom_ccl_comm_device(const loom_ccl_comm_t *comm);
loom_stream_t *loom_ccl_comm_stream(const loom_ccl_comm_t *comm);
/* LOOM_OK while the communicator works; else the status of the first
 * failure, with its message in loom_last_error(). */
loom_status loom_ccl_comm_status(const loom_ccl_comm_t *comm);

/* ---- work ------------------------------------------------------------------ */

/* Starts a piece of work named `name` (static storage; used in messages)
 * whose collectives run after what `after` (a stream of the communicator's
 * device; NULL: none) has enqueued so far. */
loom_status loom_ccl_begin(loom_ccl_comm_t *comm, loom_stream_t *after, const char *name,
                           loom_ccl_work_t **out_work);
/* Enqueues the end of the work: an event on the communication stream. No
 * collective may be added after it. */
loom_status loom_ccl_end(loom_ccl_work_t *work);
void loom_ccl_work_release(loom_ccl_work_t *work);

/* Makes later work on `stream` wait for the work (no host wait), and fail
 * there with the work's error if it failed. */
loom_status loom_ccl_work_wait(loom_ccl_work_t *work, loom_stream_t *stream);
/* Blocks until the work is done; its status. */
loom_status loom_ccl_work_synchronize(loom_ccl_work_t *work);
/* LOOM_ERROR_NOT_READY while running, else as loom_ccl_work_synchronize. */
loom_status loom_ccl_work_query(loom_ccl_work_t *work);
/* The event recorded at loom_ccl_end (borrowed; NULL before). */
loom_event_t *loom_ccl_work_event(const loom_ccl_work_t *work);

/* ---- collectives -----------------------------------------------------------
 * Buffers are contiguous device memory of the communicator's device, `count`
 * elements of `dtype`; a send buffer may be the receive buffer where both
 * have the same size (in place). Pointer arrays have world_size entries and
 * are copied. Each call checks its arguments and enqueues; errors while it
 * runs come through the work. */

loom_status loom_ccl_allreduce(loom_ccl_work_t *work, const void *send, void *recv, size_t count,
                               loom_dtype dtype, const loom_ccl_reduction *reduction);
/* recv[p] receives rank p's `count` elements. */
loom_status loom_ccl_allgather(loom_ccl_work_t *work, const void *send, void *const *recv,
                               size_t count, loom_dtype dtype);
/* recv = the reduction over the ranks of their send[rank] (count elements each). */
loom_status loom_ccl_reduce_scatter(loom_ccl_work_t *work, const void *const *send, void *recv,
                                    size_t count, loom_dtype dtype,
                                    const loom_ccl_reduction *reduction);
/* buf on `root` is copied into buf on every other rank. */
loom_status loom_ccl_broadcast(loom_ccl_work_t *work, void *buf, size_t count, loom_dtype dtype,
                               int root);
/* recv on `root` (ignored elsewhere) = the reduction of every rank's send. */
loom_status loom_ccl_reduce(loom_ccl_work_t *work, const void *send, void *recv, size_t count,
                            loom_dtype dtype, const loom_ccl_reduction *reduction, int root);
/* recv[p] on `root` (ignored elsewhere) receives rank p's send. */
loom_status loom_ccl_gather(loom_ccl_work_t *work, const void *send, void *const *recv,
                            size_t count, loom_dtype dtype, int root);
/* Rank p's recv receives send[p] of `root` (send ignored elsewhere). */
loom_status loom_ccl_scatter(loom_ccl_work_t *work, const void *const *send, void *recv,
                             size_t count, loom_dtype dtype, int root);
/* Rank r sends send_counts[p] elements at send + send_offsets[p] to rank p,
 * which receives them at recv + recv_offsets[r] (recv_counts[r] elements,
 * equal to what r sends). Offsets and counts in elements; send and recv
 * must not overlap. */
loom_status loom_ccl_all_to_all(loom_ccl_work_t *work, const void *send, const size_t *send_counts,
                                const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                const size_t *recv_offsets, loom_dtype dtype);
/* Point to point, matched in call order per pair of ranks (no tags). */
loom_status loom_ccl_send(loom_ccl_work_t *work, const void *buf, size_t count, loom_dtype dtype,
                          int peer);
loom_status loom_ccl_recv(loom_ccl_work_t *work, void *buf, size_t count, loom_dtype dtype,
                          int peer);
/* Every rank reaches it before any leaves it (in stream order). */
loom_status loom_ccl_barrier(loom_ccl_work_t *work);

/* Enqueues on `stream`: dst = the reduction of srcs[0 .. n) in that order
 * (count elements each, device memory of the stream's device; dst may be
 * one of them), with the collectives' kernel and rules; AVG divides the
 * sum by `divisor`. For reductions whose operands came from outside a
 * communicator (the partial results of other machines). */
loom_status loom_ccl_combine(loom_stream_t *stream, void *dst, const void *const *srcs, int n,
                             size_t count, loom_dtype dtype, const loom_ccl_reduction *reduction,
                             int divisor);

/* ---- device memory shared between processes (torch.multiprocessing) ----
 *
 * A shared region is device memory of one loom device that other processes
 * of the same user map too: a memfd (mode 0600, sealed against shrinking
 * and growing, close-on-exec), handed over as a descriptor (SCM_RIGHTS);
 * it has no path, and its memory goes with the last descriptor or mapping.
 * Each process holds a handle; the memory stays valid in a process until
 * its handle is released, whatever the others do (a producer that drops
 * its tensor leaves the consumers' views intact), and is freed once every
 * process released it or ended. Kernels and copies use it like any device
 * memory, so it needs a device whose memory the host can address
 * (LOOM_DEVICE_HOST_ADDRESSABLE): elsewhere LOOM_ERROR_NOT_SUPPORTED. */
typedef struct loom_ccl_shared loom_ccl_shared_t;

/* New zeroed region of `size` bytes (> 0) for `device`. */
loom_status loom_ccl_shared_create(int device, size_t size, loom_ccl_shared_t **out_shared);
/* Makes the device allocation starting at `ptr` (a caching-allocator
 * block) a region where it lies, without copying, when the allocator and
 * the driver can hand over the segment it fills (loom_memory_detach: the
 * host driver with LOOM_SHAREABLE_MEMORY=1, a block alone in its
 * segment): the region's size is the segment's, and the block must no
 * longer be freed (the region owns the memory). LOOM_ERROR_NOT_SUPPORTED,
 * changing nothing, otherwise: then create a region and copy. */
loom_status loom_ccl_shared_adopt(void *ptr, loom_ccl_shared_t **out_shared);
/* Maps the region behind `fd` (from another process's loom_ccl_shared_fd),
 * after checking it is a sealed private memfd of this user of `size`
 * bytes. The caller keeps `fd`: the handle holds its own duplicate. */
loom_status loom_ccl_shared_open(int device, int fd, size_t size, loom_ccl_shared_t **out_shared);
void *loom_ccl_shared_ptr(const loom_ccl_shared_t *shared);
size_t loom_ccl_shared_size(const loom_ccl_shared_t *shared);
int loom_ccl_shared_device(const loom_ccl_shared_t *shared);
/* The descriptor to hand to another process (owned by the handle). */
int loom_ccl_shared_fd(const loom_ccl_shared_t *shared);
/* Waits for the device's queued work (leaving any asynchronous error to its
 * stream), then unmaps and closes. NULL: no-op. */
void loom_ccl_shared_release(loom_ccl_shared_t *shared);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CCL_H */
