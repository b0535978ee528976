/* Point to point: send, recv and all_to_all over channels.
 *
 * Each ordered pair of ranks (src, dst) has a channel in the segment: two
 * halves of chan_bytes and two counters, `sent` (chunks src put in) and
 * `acked` (chunks dst took out). Chunk k (from 1) of the pair goes through
 * half k & 1: the sender waits until chunk k - 2 was taken, copies, posts
 * sent = k; the receiver waits for sent >= k, copies out, posts acked = k.
 * Both sides number the pair's chunks by their own calls, so sends and
 * receives match in call order (tags are not looked at).
 *
 * all_to_all runs in rounds: round i sends chunk i of every outgoing
 * message, then receives chunk i of every incoming one. A sender in round i
 * waits only for its peers' receives of round i - 2, which they reach
 * without waiting for round i of anyone: no cycle, whatever the splits. */
#include <stdlib.h>

#include "runtime/ccl/ccl_internal.h"

static loom_status check_peer(const loom_ccl_comm_t *comm, const char *what, int peer) {
  if (peer < 0 || peer >= comm->world || peer == comm->rank)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: peer %d is not another rank of [0, %d)",
                      what, peer, comm->world);
  return LOOM_OK;
}

static loom_status check_memory(const loom_ccl_comm_t *comm, const char *what, const void *ptr,
                                size_t bytes) {
  if (bytes && (!ptr || loom_pointer_device(ptr) != comm->device))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "%s: the buffer is not memory of loom:%d (the communicator's device)", what,
                      comm->device);
  return LOOM_OK;
}

static loom_status copy(loom_ccl_comm_t *comm, void *dst, const void *src, size_t bytes) {
  return bytes ? loom_memcpy(comm->stream, dst, src, bytes) : LOOM_OK;
}

/* Enqueues chunk number ++send_seq[peer] of `bytes` (at most chan_bytes). */
static loom_status send_chunk(loom_ccl_work_t *work, int peer, const char *src, size_t bytes) {
  loom_ccl_comm_t *comm = work->comm;
  const uint32_t k = ++comm->send_seq[peer];
  loom_status st = ccl_enqueue_p2p(work, CCL_STEP_SEND_READY, peer, k);
  if (st == LOOM_OK) st = copy(comm, ccl_chan(comm, comm->rank, peer, (int)(k & 1)), src, bytes);
  if (st == LOOM_OK) st = ccl_enqueue_p2p(work, CCL_STEP_SEND_POST, peer, k);
  return st;
}

static loom_status recv_chunk(loom_ccl_work_t *work, int peer, char *dst, size_t bytes) {
  loom_ccl_comm_t *comm = work->comm;
  const uint32_t k = ++comm->recv_seq[peer];
  loom_status st = ccl_enqueue_p2p(work, CCL_STEP_RECV_WAIT, peer, k);
  if (st == LOOM_OK) st = copy(comm, dst, ccl_chan(comm, peer, comm->rank, (int)(k & 1)), bytes);
  if (st == LOOM_OK) st = ccl_enqueue_p2p(work, CCL_STEP_RECV_DONE, peer, k);
  return st;
}

/* Chunks of a message of `bytes` (at least one, so that an empty message
 * still pairs with its receive). */
static size_t chunks_of(const loom_ccl_comm_t *comm, size_t bytes) {
  return bytes == 0 ? 1 : (bytes + comm->chan_bytes - 1) / comm->chan_bytes;
}

static size_t chunk_bytes(const loom_ccl_comm_t *comm, size_t bytes, size_t i) {
  const size_t offset = i * comm->chan_bytes;
  return offset >= bytes ? 0 : (bytes - offset < comm->chan_bytes ? bytes - offset : comm->chan_bytes);
}

static loom_status point_to_point(loom_ccl_work_t *work, const char *what, void *buf, size_t count,
                                  loom_dtype dtype, int peer, int sending) {
  loom_status st = ccl_check_open(work, what);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  const size_t bytes = count * (size_t)loom_dtype_size(dtype);
  if (loom_dtype_size(dtype) == 0)
    return loom_error(LOOM_ERROR_NOT_SUPPORTED, "%s: unsupported dtype %d", what, (int)dtype);
  if ((st = check_peer(comm, what, peer)) || (st = check_memory(comm, what, buf, bytes))) return st;
  pthread_mutex_lock(&comm->lock);
  const size_t chunks = chunks_of(comm, bytes);
  for (size_t i = 0; i < chunks && st == LOOM_OK; ++i) {
    char *at = (char *)buf + i * comm->chan_bytes;
    st = sending ? send_chunk(work, peer, at, chunk_bytes(comm, bytes, i))
                 : recv_chunk(work, peer, at, chunk_bytes(comm, bytes, i));
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_send(loom_ccl_work_t *work, const void *buf, size_t count, loom_dtype dtype,
                          int peer) {
  return point_to_point(work, "loom_ccl_send", (void *)buf, count, dtype, peer, 1);
}

loom_status loom_ccl_recv(loom_ccl_work_t *work, void *buf, size_t count, loom_dtype dtype,
                          int peer) {
  return point_to_point(work, "loom_ccl_recv", buf, count, dtype, peer, 0);
}

loom_status loom_ccl_all_to_all(loom_ccl_work_t *work, const void *send, const size_t *send_counts,
                                const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                const size_t *recv_offsets, loom_dtype dtype) {
  const char *what = "loom_ccl_all_to_all";
  loom_status st = ccl_check_open(work, what);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  const size_t es = (size_t)loom_dtype_size(dtype);
  if (es == 0) return loom_error(LOOM_ERROR_NOT_SUPPORTED, "%s: unsupported dtype %d", what, (int)dtype);
  if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: counts or offsets are NULL", what);
  const int w = comm->world, me = comm->rank;
  for (int p = 0; p < w; ++p) {
    if ((st = check_memory(comm, what, (const char *)send + send_offsets[p] * es,
                           send_counts[p] * es)) ||
        (st = check_memory(comm, what, (char *)recv + recv_offsets[p] * es, recv_counts[p] * es)))
      return st;
  }
  if (send_counts[me] != recv_counts[me])
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "%s: rank %d sends itself %zu elements but expects %zu", what, me,
                      send_counts[me], recv_counts[me]);
  size_t rounds = 0;
  for (int p = 0; p < w; ++p) {
    if (p == me) continue;
    const size_t s = chunks_of(comm, send_counts[p] * es), r = chunks_of(comm, recv_counts[p] * es);
    rounds = s > rounds ? s : rounds;
    rounds = r > rounds ? r : rounds;
  }
  pthread_mutex_lock(&comm->lock);
  st = copy(comm, (char *)recv + recv_offsets[me] * es, (const char *)send + send_offsets[me] * es,
            send_counts[me] * es);
  for (size_t i = 0; i < rounds && st == LOOM_OK; ++i) {
    for (int d = 1; d < w && st == LOOM_OK; ++d) {
      const int p = (me + d) % w; /* each rank starts with its next neighbour */
      const size_t bytes = send_counts[p] * es;
      if (i < chunks_of(comm, bytes))
        st = send_chunk(work, p, (const char *)send + send_offsets[p] * es + i * comm->chan_bytes,
                        chunk_bytes(comm, bytes, i));
    }
    for (int d = 1; d < w && st == LOOM_OK; ++d) {
      const int p = (me - d + w) % w;
      const size_t bytes = recv_counts[p] * es;
      if (i < chunks_of(comm, bytes))
        st = recv_chunk(work, p, (char *)recv + recv_offsets[p] * es + i * comm->chan_bytes,
                        chunk_bytes(comm, bytes, i));
    }
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}
