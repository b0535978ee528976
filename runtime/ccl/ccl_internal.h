/* loomccl's internals: the shared segment's layout, the communicator, the
 * work and the steps that run on the communication stream. */
#ifndef LOOM_CCL_INTERNAL_H
#define LOOM_CCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/ccl.h"

#define CCL_MAGIC 0x6c6f6f6d63636c31ull /* "loomccl1" */
#define CCL_MAX_WORLD 256
#define CCL_MESSAGE_MAX 512

/* A counter one process posts and others wait for: a futex word with a
 * count of sleepers (so a post wakes only when someone sleeps), alone on
 * its cache line. */
typedef struct ccl_word {
  _Atomic uint32_t value;
  _Atomic uint32_t waiters;
  char pad[56];
} ccl_word;

/* What a rank is running at a step, compared between ranks. */
typedef struct ccl_signature {
  uint32_t kind;  /* ccl_kind */
  int32_t dtype;
  int32_t op;
  int32_t root;
  uint64_t count; /* elements of the whole collective */
  uint64_t chunk; /* index of the chunk this step belongs to */
} ccl_signature;

/* A rank's state in gone[]: alive, left (destroyed its communicator), died
 * (its process ended without leaving), aborted (its communicator broke). */
enum { CCL_ALIVE = 0, CCL_LEFT = 1, CCL_DIED = 2, CCL_ABORTED = 3 };

typedef enum ccl_kind {
  CCL_KIND_BARRIER = 1,
  CCL_KIND_ALLREDUCE,
  CCL_KIND_ALLGATHER,
  CCL_KIND_REDUCE_SCATTER,
  CCL_KIND_BROADCAST,
  CCL_KIND_REDUCE,
  CCL_KIND_GATHER,
  CCL_KIND_SCATTER,
} ccl_kind;

/* The segment starts with this header; the offsets place the arrays that
 * follow (every one cache-line aligned). Written by rank 0 before any peer
 * receives the segment, read-only afterwards. */
typedef struct ccl_header {
  uint64_t magic;
  uint32_t version, world;
  uint64_t size;       /* bytes of the whole segment */
  uint64_t slot_bytes; /* staging bytes per rank and buffer half */
  uint64_t chan_bytes; /* bytes per point-to-point channel and half */
  char job_id[LOOM_CCL_JOB_ID_LEN + 1];
  uint64_t off_gone;   /* ccl_word[world] */
  uint64_t off_step;   /* ccl_word[world]: the last step each rank reached */
  uint64_t off_sig;    /* ccl_signature[world][2]: by step parity */
  uint64_t off_sent;   /* ccl_word[world * world]: chunks put in channel src->dst */
  uint64_t off_acked;  /* ccl_word[world * world]: chunks taken from it */
  uint64_t off_slots;  /* [world][2][slot_bytes] */
  uint64_t off_chans;  /* [world * world][2][chan_bytes] */
} ccl_header;

struct loom_ccl_comm {
  int rank, world, device;
  int host_addressable; /* kernels may read the segment directly */
  loom_stream_t *stream;
  uint64_t timeout_ns;
  const loom_kernel_t *reduce_kernel;

  /* The mapping of the segment and the arrays inside it. */
  char *base;
  size_t size;
  int registered; /* base is registered as pinned host memory */
  ccl_header *hdr;
  ccl_word *gone, *step, *sent, *acked;
  ccl_signature *sig;
  char *slots, *chans;
  size_t slot_bytes, chan_bytes;

  /* Enqueue-side counters, under `lock`: they advance as collectives are
   * enqueued, identically on every rank that makes the same calls. */
  pthread_mutex_t lock;
  uint32_t next_step;
  uint64_t next_half;
  uint32_t *send_seq, *recv_seq; /* per peer: chunks sent to / received from it */

  /* The first failure, set once by whoever meets it (under fail_lock). */
  pthread_mutex_t fail_lock;
  _Atomic int failed;
  loom_status failure_status;
  char failure[CCL_MESSAGE_MAX];

  /* Liveness: sockets to the peers (rank 0: one per peer; the others: one,
   * to rank 0; -1 where none), watched by a thread that marks a peer whose
   * socket closes without its having left as died. */
  int *socks;
  int stop_fd; /* eventfd that stops the watcher */
  pthread_t watcher;
  int watcher_started;
};

struct loom_ccl_work {
  _Atomic int refs;
  loom_ccl_comm_t *comm; /* valid until loom_ccl_end */
  const char *name;
  loom_event_t *event;   /* recorded at loom_ccl_end */
  int ended;
  _Atomic int status;    /* loom_status of the first failure */
  char message[CCL_MESSAGE_MAX];
};

/* ---- comm.c ---- */
/* Records a failure of `work` (may be NULL) and, the first time, of the
 * communicator, which then counts as aborted for the peers. */
void ccl_fail(loom_ccl_comm_t *comm, loom_ccl_work_t *work, loom_status status, const char *fmt,
              ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Wakes every sleeper on every word of the segment. */
void ccl_wake_all(loom_ccl_comm_t *comm);
void ccl_mark_gone(loom_ccl_comm_t *comm, int rank, int state);

/* ---- segment.c: the segment and the rendezvous ---- */
loom_status ccl_segment_join(loom_ccl_comm_t *comm, const loom_ccl_config *config,
                             size_t buffer_bytes);
void ccl_segment_unmap(loom_ccl_comm_t *comm);

/* ---- sync.c: waits and posts ---- */
void ccl_post(ccl_word *word, uint32_t value);
/* Waits until `word` reaches `target` (wrapping compare), while `peer`
 * lives and the communicator works, up to the timeout. */
loom_status ccl_wait(loom_ccl_comm_t *comm, ccl_word *word, uint32_t target, int peer,
                     const char *what);
void ccl_wake(ccl_word *word);

/* ---- work.c: steps on the communication stream ---- */
typedef enum ccl_step_kind {
  CCL_STEP_BARRIER,   /* post the step, wait for every rank, compare signatures */
  CCL_STEP_SEND_READY, /* wait until the peer freed the channel half of chunk `seq` */
  CCL_STEP_SEND_POST,  /* tell the peer chunk `seq` is in the channel */
  CCL_STEP_RECV_WAIT,  /* wait until chunk `seq` is in the channel from the peer */
  CCL_STEP_RECV_DONE,  /* tell the peer chunk `seq` was taken */
} ccl_step_kind;

loom_status ccl_enqueue_barrier(loom_ccl_work_t *work, const ccl_signature *sig);
loom_status ccl_enqueue_p2p(loom_ccl_work_t *work, ccl_step_kind kind, int peer, uint32_t seq);
/* LOOM_OK, or a status naming `work` when it may take no more collectives. */
loom_status ccl_check_open(loom_ccl_work_t *work, const char *what);

/* ---- collectives.c ---- */
/* The slot of `rank` for buffer half `half`. */
static inline char *ccl_slot(const loom_ccl_comm_t *comm, int rank, int half) {
  return comm->slots + ((size_t)rank * 2 + (size_t)half) * comm->slot_bytes;
}
static inline char *ccl_chan(const loom_ccl_comm_t *comm, int src, int dst, int half) {
  return comm->chans + (((size_t)src * (size_t)comm->world + (size_t)dst) * 2 + (size_t)half) *
                           comm->chan_bytes;
}
static inline ccl_word *ccl_sent(const loom_ccl_comm_t *comm, int src, int dst) {
  return &comm->sent[(size_t)src * (size_t)comm->world + (size_t)dst];
}
static inline ccl_word *ccl_acked(const loom_ccl_comm_t *comm, int src, int dst) {
  return &comm->acked[(size_t)src * (size_t)comm->world + (size_t)dst];
}
/* Launches "ccl.reduce" on `stream`: dst = the reduction of srcs[0 .. n)
 * in order, AVG dividing by `divisor`. */
loom_status ccl_launch_reduce(loom_stream_t *stream, const loom_kernel_t *kernel, void *dst,
                              const void *const *srcs, int n, size_t count, loom_dtype dtype,
                              const loom_ccl_reduction *r, int divisor);
loom_status ccl_check_dtype(const char *what, loom_dtype dtype);
loom_status ccl_check_reduction(const char *what, loom_dtype dtype, const loom_ccl_reduction *r);
const char *ccl_kind_name(uint32_t kind);
const char *ccl_op_name(int op);

#endif /* LOOM_CCL_INTERNAL_H */
