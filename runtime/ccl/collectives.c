/* The collectives over the ranks' staging slots.
 *
 * Each rank owns a slot of the segment in two halves; a collective moves
 * its data in chunks that fit a half, and consecutive chunks (of any
 * collectives) alternate halves. A chunk is: copies into slots (loom_memcpy
 * on the communication stream: the segment is registered pinned, so they
 * are asynchronous), a barrier step, then copies out of slots or the
 * reduction kernel reading them. A half is written again only two chunks
 * later, after the barrier of the chunk between, which no rank posts
 * before it finished reading the half: one barrier per chunk suffices
 * (allreduce has two). The ranks' chunk sequences agree because every rank
 * makes the same calls; the barrier compares what they run.
 *
 * Reductions run the "ccl.reduce" kernel over the slots in rank order.
 * Allreduce splits each chunk into world_size parts: rank p reduces part p
 * of every slot into its own slot (which nobody else reads at that part),
 * and after a second barrier every rank copies the world_size reduced
 * parts out. Where the device cannot address host memory (a discrete
 * device, the guarded driver), the kernel's operands are first copied into
 * device scratch memory, allocated on the communication stream (its reuse
 * follows stream order). Zero copy would follow from device memory that is
 * itself memfd-backed: the same steps with the kernel reading the peers'
 * mapped buffers, and no slots. */
#include <stdlib.h>
#include <string.h>

#include "runtime/ccl/ccl_internal.h"

const char *ccl_kind_name(uint32_t kind) {
  static const char *const names[] = {"?", "barrier", "allreduce", "allgather", "reduce_scatter",
                                      "broadcast", "reduce", "gather", "scatter"};
  return kind < sizeof names / sizeof *names ? names[kind] : "?";
}

const char *ccl_op_name(int op) {
  static const char *const names[] = {"sum", "avg", "prod", "min", "max", "premul_sum"};
  return op >= 0 && op < LOOM_CCL_OP_COUNT ? names[op] : "-";
}

/* ---- checks -------------------------------------------------------------------- */

static int is_floating(loom_dtype d) {
  return d == LOOM_FLOAT32 || d == LOOM_FLOAT64 || d == LOOM_FLOAT16 || d == LOOM_BFLOAT16;
}

loom_status ccl_check_dtype(const char *what, loom_dtype dtype) {
  switch (dtype) {
    case LOOM_FLOAT32: case LOOM_FLOAT64: case LOOM_FLOAT16: case LOOM_BFLOAT16:
    case LOOM_INT8: case LOOM_UINT8: case LOOM_INT16: case LOOM_INT32: case LOOM_INT64:
    case LOOM_BOOL:
      return LOOM_OK;
    default:
      return loom_error(LOOM_ERROR_NOT_SUPPORTED, "%s: unsupported dtype %d", what, (int)dtype);
  }
}

loom_status ccl_check_reduction(const char *what, loom_dtype dtype, const loom_ccl_reduction *r) {
  if (!r || r->op < 0 || r->op >= LOOM_CCL_OP_COUNT)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: no valid reduction op", what);
  if (r->op == LOOM_CCL_PREMUL_SUM && !is_floating(dtype))
    return loom_error(LOOM_ERROR_NOT_SUPPORTED, "%s: premul_sum needs floating data", what);
  if (r->op == LOOM_CCL_AVG && dtype == LOOM_BOOL)
    return loom_error(LOOM_ERROR_NOT_SUPPORTED, "%s: avg of bool data", what);
  return LOOM_OK;
}

static loom_status check_buffer(const loom_ccl_comm_t *comm, const char *what, const void *ptr,
                                size_t count, const char *role) {
  if (count == 0) return LOOM_OK;
  if (!ptr) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s buffer is NULL", what, role);
  const int device = loom_pointer_device(ptr);
  if (device != comm->device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "%s: the %s buffer is not memory of loom:%d (the communicator's device)",
                      what, role, comm->device);
  return LOOM_OK;
}

static loom_status check_root(const loom_ccl_comm_t *comm, const char *what, int root) {
  if (root < 0 || root >= comm->world)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: root %d out of range [0, %d)", what, root,
                      comm->world);
  return LOOM_OK;
}

/* ---- enqueue helpers --------------------------------------------------------------- */

static loom_status copy(loom_ccl_comm_t *comm, void *dst, const void *src, size_t bytes) {
  return bytes && dst != src ? loom_memcpy(comm->stream, dst, src, bytes) : LOOM_OK;
}

static int in_segment(const loom_ccl_comm_t *comm, const void *p) {
  return (const char *)p >= comm->base && (const char *)p < comm->base + comm->size;
}

loom_status ccl_launch_reduce(loom_stream_t *stream, const loom_kernel_t *kernel, void *dst,
                              const void *const *srcs, int n, size_t count, loom_dtype dtype,
                              const loom_ccl_reduction *r, int divisor) {
  loom_tensor tensors[CCL_MAX_WORLD + 2];
  const loom_tensor proto = {.dtype = dtype, .rank = 1, .sizes = {(int64_t)count}, .strides = {1}};
  tensors[0] = proto;
  tensors[0].data = dst;
  for (int k = 0; k < n; ++k) {
    tensors[1 + k] = proto;
    tensors[1 + k].data = (void *)srcs[k];
  }
  uint32_t num = (uint32_t)n + 1;
  if (r->op == LOOM_CCL_PREMUL_SUM && r->factor_ptr) {
    tensors[num] = proto;
    tensors[num].sizes[0] = 1;
    tensors[num++].data = (void *)r->factor_ptr;
  }
  loom_scalar scalars[4];
  scalars[0].i = r->op;
  scalars[1].f = r->factor;
  scalars[2].i = divisor;
  scalars[3].i = n;
  const loom_launch_desc desc = {.name = "ccl.reduce", .kernel = kernel,
                                 .tensors = tensors, .num_tensors = num, .scalars = scalars,
                                 .num_scalars = 4, .range = (int64_t)count,
                                 .grain = LOOM_CCL_REDUCE_GRAIN};
  return loom_launch(stream, &desc);
}

static loom_status launch_reduce(loom_ccl_comm_t *comm, void *dst, const void *const *srcs, int n,
                                 size_t count, loom_dtype dtype, const loom_ccl_reduction *r) {
  return ccl_launch_reduce(comm->stream, comm->reduce_kernel, dst, srcs, n, count, dtype, r,
                           comm->world);
}

/* dst = the reduction of srcs[0 .. n) in order (count elements each); any
 * of them may lie in the segment. */
static loom_status reduce_to(loom_ccl_comm_t *comm, void *dst, const void *const *srcs, int n,
                             size_t count, loom_dtype dtype, const loom_ccl_reduction *r) {
  if (count == 0) return LOOM_OK;
  if (comm->host_addressable) return launch_reduce(comm, dst, srcs, n, count, dtype, r);
  /* Stage the operands (and a segment destination) through device memory. */
  const size_t bytes = count * (size_t)loom_dtype_size(dtype);
  char *scratch = NULL;
  loom_status st = loom_malloc(comm->device, bytes * ((size_t)n + 1), comm->stream,
                               (void **)&scratch);
  if (st != LOOM_OK) return st;
  const void *staged[CCL_MAX_WORLD] = {0};
  for (int k = 0; k < n && st == LOOM_OK; ++k) {
    staged[k] = scratch + (size_t)k * bytes;
    st = copy(comm, scratch + (size_t)k * bytes, srcs[k], bytes);
  }
  void *out = in_segment(comm, dst) ? scratch + (size_t)n * bytes : dst;
  if (st == LOOM_OK) st = launch_reduce(comm, out, staged, n, count, dtype, r);
  if (st == LOOM_OK && out != dst) st = copy(comm, dst, out, bytes);
  loom_free(scratch); /* reused only after the stream's work so far */
  return st;
}

/* The next buffer half, and the barrier that ends the writes of a chunk. */
static int next_half(loom_ccl_comm_t *comm) { return (int)(comm->next_half++ & 1); }

static loom_status barrier(loom_ccl_work_t *work, ccl_kind kind, size_t count, loom_dtype dtype,
                           int op, int root, size_t chunk) {
  const ccl_signature sig = {.kind = kind, .dtype = dtype, .op = op, .root = root,
                             .count = count, .chunk = chunk};
  return ccl_enqueue_barrier(work, &sig);
}

/* Elements per chunk: a chunk's `parts` parts of that many elements fill a half. */
static size_t chunk_elements(const loom_ccl_comm_t *comm, loom_dtype dtype, int parts) {
  const size_t n = comm->slot_bytes / ((size_t)parts * (size_t)loom_dtype_size(dtype));
  return n ? n : 1; /* a half holds at least 4096 bytes: never 0 in practice */
}

/* Runs `body` for each chunk [offset, offset + n) of `count` elements,
 * with the enqueue lock held. */
#define FOR_CHUNKS(comm, count, per, offset, n, k) \
  for (size_t offset = 0, n = 0, k = 0; offset < (count) && (n = (count) - offset < (per) ? (count) - offset : (per), 1); offset += n, ++k)

/* ---- the collectives ------------------------------------------------------------------ */

static loom_status begin_call(loom_ccl_work_t *work, const char *what, loom_dtype dtype) {
  loom_status st = ccl_check_open(work, what);
  if (st == LOOM_OK) st = ccl_check_dtype(what, dtype);
  return st;
}

loom_status loom_ccl_allreduce(loom_ccl_work_t *work, const void *send, void *recv, size_t count,
                               loom_dtype dtype, const loom_ccl_reduction *reduction) {
  const char *what = "loom_ccl_allreduce";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if ((st = ccl_check_reduction(what, dtype, reduction)) != LOOM_OK ||
      (st = check_buffer(comm, what, send, count, "send")) != LOOM_OK ||
      (st = check_buffer(comm, what, recv, count, "receive")) != LOOM_OK)
    return st;
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  const int w = comm->world, me = comm->rank;
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    const size_t lo = n * (size_t)me / (size_t)w, hi = n * (size_t)(me + 1) / (size_t)w;
    const void *parts[CCL_MAX_WORLD];
    for (int p = 0; p < w; ++p) parts[p] = ccl_slot(comm, p, half) + lo * es;
    if ((st = copy(comm, ccl_slot(comm, me, half), (const char *)send + offset * es, n * es)) ||
        (st = barrier(work, CCL_KIND_ALLREDUCE, count, dtype, reduction->op, 0, k)) ||
        (st = reduce_to(comm, ccl_slot(comm, me, half) + lo * es, parts, w, hi - lo, dtype,
                        reduction)) ||
        (st = barrier(work, CCL_KIND_ALLREDUCE, count, dtype, reduction->op, 1, k)))
      break;
    for (int p = 0; p < w && st == LOOM_OK; ++p) {
      const size_t plo = n * (size_t)p / (size_t)w, phi = n * (size_t)(p + 1) / (size_t)w;
      st = copy(comm, (char *)recv + (offset + plo) * es, ccl_slot(comm, p, half) + plo * es,
                (phi - plo) * es);
    }
    if (st != LOOM_OK) break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_allgather(loom_ccl_work_t *work, const void *send, void *const *recv,
                               size_t count, loom_dtype dtype) {
  const char *what = "loom_ccl_allgather";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if (!recv) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: recv is NULL", what);
  if ((st = check_buffer(comm, what, send, count, "send")) != LOOM_OK) return st;
  for (int p = 0; p < comm->world; ++p)
    if ((st = check_buffer(comm, what, recv[p], count, "receive")) != LOOM_OK) return st;
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    if ((st = copy(comm, ccl_slot(comm, comm->rank, half), (const char *)send + offset * es,
                   n * es)) ||
        (st = barrier(work, CCL_KIND_ALLGATHER, count, dtype, -1, 0, k)))
      break;
    for (int p = 0; p < comm->world && st == LOOM_OK; ++p)
      st = copy(comm, (char *)recv[p] + offset * es, ccl_slot(comm, p, half), n * es);
    if (st != LOOM_OK) break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_reduce_scatter(loom_ccl_work_t *work, const void *const *send, void *recv,
                                    size_t count, loom_dtype dtype,
                                    const loom_ccl_reduction *reduction) {
  const char *what = "loom_ccl_reduce_scatter";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if (!send) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: send is NULL", what);
  if ((st = ccl_check_reduction(what, dtype, reduction)) != LOOM_OK ||
      (st = check_buffer(comm, what, recv, count, "receive")) != LOOM_OK)
    return st;
  const int w = comm->world, me = comm->rank;
  for (int p = 0; p < w; ++p)
    if ((st = check_buffer(comm, what, send[p], count, "send")) != LOOM_OK) return st;
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, w);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    char *mine = ccl_slot(comm, me, half);
    for (int p = 0; p < w && st == LOOM_OK; ++p)
      st = copy(comm, mine + (size_t)p * n * es, (const char *)send[p] + offset * es, n * es);
    const void *parts[CCL_MAX_WORLD];
    for (int p = 0; p < w; ++p) parts[p] = ccl_slot(comm, p, half) + (size_t)me * n * es;
    if (st || (st = barrier(work, CCL_KIND_REDUCE_SCATTER, count, dtype, reduction->op, 0, k)) ||
        (st = reduce_to(comm, (char *)recv + offset * es, parts, w, n, dtype, reduction)))
      break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_broadcast(loom_ccl_work_t *work, void *buf, size_t count, loom_dtype dtype,
                               int root) {
  const char *what = "loom_ccl_broadcast";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if ((st = check_root(comm, what, root)) || (st = check_buffer(comm, what, buf, count, "data")))
    return st;
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    char *data = (char *)buf + offset * es;
    if ((comm->rank == root && (st = copy(comm, ccl_slot(comm, root, half), data, n * es))) ||
        (st = barrier(work, CCL_KIND_BROADCAST, count, dtype, -1, root, k)) ||
        (comm->rank != root && (st = copy(comm, data, ccl_slot(comm, root, half), n * es))))
      break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_reduce(loom_ccl_work_t *work, const void *send, void *recv, size_t count,
                            loom_dtype dtype, const loom_ccl_reduction *reduction, int root) {
  const char *what = "loom_ccl_reduce";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if ((st = check_root(comm, what, root)) || (st = ccl_check_reduction(what, dtype, reduction)) ||
      (st = check_buffer(comm, what, send, count, "send")) ||
      (comm->rank == root && (st = check_buffer(comm, what, recv, count, "receive"))))
    return st;
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    const void *parts[CCL_MAX_WORLD];
    for (int p = 0; p < comm->world; ++p) parts[p] = ccl_slot(comm, p, half);
    if ((st = copy(comm, ccl_slot(comm, comm->rank, half), (const char *)send + offset * es,
                   n * es)) ||
        (st = barrier(work, CCL_KIND_REDUCE, count, dtype, reduction->op, root, k)) ||
        (comm->rank == root &&
         (st = reduce_to(comm, (char *)recv + offset * es, parts, comm->world, n, dtype,
                         reduction))))
      break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_gather(loom_ccl_work_t *work, const void *send, void *const *recv,
                            size_t count, loom_dtype dtype, int root) {
  const char *what = "loom_ccl_gather";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if ((st = check_root(comm, what, root)) || (st = check_buffer(comm, what, send, count, "send")))
    return st;
  if (comm->rank == root) {
    if (!recv) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: recv is NULL on the root", what);
    for (int p = 0; p < comm->world; ++p)
      if ((st = check_buffer(comm, what, recv[p], count, "receive")) != LOOM_OK) return st;
  }
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    if ((st = copy(comm, ccl_slot(comm, comm->rank, half), (const char *)send + offset * es,
                   n * es)) ||
        (st = barrier(work, CCL_KIND_GATHER, count, dtype, -1, root, k)))
      break;
    for (int p = 0; p < comm->world && comm->rank == root && st == LOOM_OK; ++p)
      st = copy(comm, (char *)recv[p] + offset * es, ccl_slot(comm, p, half), n * es);
    if (st != LOOM_OK) break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_scatter(loom_ccl_work_t *work, const void *const *send, void *recv,
                             size_t count, loom_dtype dtype, int root) {
  const char *what = "loom_ccl_scatter";
  loom_status st = begin_call(work, what, dtype);
  if (st != LOOM_OK) return st;
  loom_ccl_comm_t *comm = work->comm;
  if ((st = check_root(comm, what, root)) ||
      (st = check_buffer(comm, what, recv, count, "receive")))
    return st;
  if (comm->rank == root) {
    if (!send) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: send is NULL on the root", what);
    for (int p = 0; p < comm->world; ++p)
      if ((st = check_buffer(comm, what, send[p], count, "send")) != LOOM_OK) return st;
  }
  const size_t es = (size_t)loom_dtype_size(dtype), per = chunk_elements(comm, dtype, 1);
  pthread_mutex_lock(&comm->lock);
  FOR_CHUNKS(comm, count, per, offset, n, k) {
    const int half = next_half(comm);
    for (int p = 0; p < comm->world && comm->rank == root && st == LOOM_OK; ++p)
      st = copy(comm, ccl_slot(comm, p, half), (const char *)send[p] + offset * es, n * es);
    if (st || (st = barrier(work, CCL_KIND_SCATTER, count, dtype, -1, root, k)) ||
        (st = copy(comm, (char *)recv + offset * es, ccl_slot(comm, comm->rank, half), n * es)))
      break;
  }
  pthread_mutex_unlock(&comm->lock);
  return st;
}

loom_status loom_ccl_barrier(loom_ccl_work_t *work) {
  loom_status st = ccl_check_open(work, "loom_ccl_barrier");
  if (st != LOOM_OK) return st;
  pthread_mutex_lock(&work->comm->lock);
  st = barrier(work, CCL_KIND_BARRIER, 0, LOOM_UINT8, -1, 0, 0);
  pthread_mutex_unlock(&work->comm->lock);
  return st;
}
