/* The communicator: creation (segment.c does the rendezvous), failure,
 * liveness and teardown.
 *
 * Liveness: each rank keeps its rendezvous connections (rank 0 one per
 * peer, the others one to rank 0) and a thread blocked in poll() on them.
 * A connection closes when its process exits, however it exits; if the
 * peer had not marked itself as left, the watcher marks it died in the
 * segment and wakes every sleeper, so the waits for it fail at once on
 * every rank (rank 0 watches everyone; the others watch rank 0). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/ccl/ccl_internal.h"

#define DEFAULT_TIMEOUT_MS (30ull * 60 * 1000)
#define DEFAULT_BUFFER_BYTES ((size_t)4 << 20)

loom_status loom_ccl_make_job_id(char out[LOOM_CCL_JOB_ID_LEN + 1]) {
  if (!out) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_make_job_id: out is NULL");
  unsigned char bytes[LOOM_CCL_JOB_ID_LEN / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno != EINTR)
      return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_ccl_make_job_id: getrandom failed: %s",
                        strerror(errno));
    if (n > 0) got += (size_t)n;
  }
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof bytes; ++i) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 15];
  }
  out[LOOM_CCL_JOB_ID_LEN] = 0;
  return LOOM_OK;
}

static int valid_job_id(const char *id) {
  for (int i = 0; i < LOOM_CCL_JOB_ID_LEN; ++i) {
    const char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return id[LOOM_CCL_JOB_ID_LEN] == 0;
}

void ccl_wake_all(loom_ccl_comm_t *comm) {
  const size_t w = (size_t)comm->world;
  for (size_t i = 0; i < w; ++i) {
    ccl_wake(&comm->gone[i]);
    ccl_wake(&comm->step[i]);
  }
  for (size_t i = 0; i < w * w; ++i) {
    ccl_wake(&comm->sent[i]);
    ccl_wake(&comm->acked[i]);
  }
}

void ccl_mark_gone(loom_ccl_comm_t *comm, int rank, int state) {
  uint32_t alive = CCL_ALIVE;
  if (atomic_compare_exchange_strong(&comm->gone[rank].value, &alive, (uint32_t)state))
    ccl_wake_all(comm);
}

void ccl_fail(loom_ccl_comm_t *comm, loom_ccl_work_t *work, loom_status status, const char *fmt,
              ...) {
  char message[CCL_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (work) {
    int ok = LOOM_OK;
    if (atomic_compare_exchange_strong(&work->status, &ok, (int)status))
      snprintf(work->message, sizeof work->message, "%s", message);
  }
  pthread_mutex_lock(&comm->fail_lock);
  const int first = !atomic_load(&comm->failed);
  if (first) {
    comm->failure_status = status;
    snprintf(comm->failure, sizeof comm->failure, "%s", message);
    atomic_store(&comm->failed, 1);
  }
  pthread_mutex_unlock(&comm->fail_lock);
  /* A broken communicator takes no further part: its peers must not wait
   * for it until their timeout. */
  if (first) ccl_mark_gone(comm, comm->rank, CCL_ABORTED);
}

static void *watch(void *arg) {
  loom_ccl_comm_t *comm = arg;
  const int n = comm->world;
  struct pollfd *fds = calloc((size_t)n + 1, sizeof *fds);
  int *ranks = calloc((size_t)n + 1, sizeof *ranks);
  if (!fds || !ranks) {
    free(fds);
    free(ranks);
    return NULL;
  }
  for (;;) {
    int count = 0;
    fds[count] = (struct pollfd){.fd = comm->stop_fd, .events = POLLIN};
    ranks[count++] = -1;
    for (int p = 0; p < n; ++p)
      if (comm->socks[p] >= 0) {
        fds[count] = (struct pollfd){.fd = comm->socks[p], .events = POLLIN | POLLRDHUP};
        ranks[count++] = p;
      }
    if (poll(fds, (nfds_t)count, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) break;
    for (int i = 1; i < count; ++i) {
      if (!fds[i].revents) continue;
      /* Peers send nothing after the rendezvous: any event is the end. */
      const int p = ranks[i];
      ccl_mark_gone(comm, p, CCL_DIED);
      close(comm->socks[p]);
      comm->socks[p] = -1;
    }
  }
  free(fds);
  free(ranks);
  return NULL;
}

static void close_socks(loom_ccl_comm_t *comm) {
  if (!comm->socks) return;
  for (int p = 0; p < comm->world; ++p)
    if (comm->socks[p] >= 0) close(comm->socks[p]);
  free(comm->socks);
  comm->socks = NULL;
}

/* Frees what create made; the watcher is stopped already. */
static void comm_free(loom_ccl_comm_t *comm) {
  close_socks(comm);
  if (comm->stop_fd >= 0) close(comm->stop_fd);
  ccl_segment_unmap(comm);
  if (comm->stream) loom_stream_release(comm->stream);
  pthread_mutex_destroy(&comm->lock);
  pthread_mutex_destroy(&comm->fail_lock);
  free(comm->send_seq);
  free(comm->recv_seq);
  free(comm);
}

loom_status loom_ccl_comm_create(const loom_ccl_config *config, loom_ccl_comm_t **out_comm) {
  if (!out_comm) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_comm_create: out is NULL");
  *out_comm = NULL;
  if (!config || !config->stream)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_comm_create: no config or stream");
  if (config->world_size < 1 || config->world_size > CCL_MAX_WORLD || config->rank < 0 ||
      config->rank >= config->world_size)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_ccl_comm_create: rank %d of world size %d (at most %d ranks)",
                      config->rank, config->world_size, CCL_MAX_WORLD);
  if (!valid_job_id(config->job_id))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_ccl_comm_create: the job id must be %d lowercase hex digits "
                      "(loom_ccl_make_job_id)", LOOM_CCL_JOB_ID_LEN);
  const int device = loom_stream_device(config->stream);
  loom_device_props props;
  loom_status st = loom_device_properties(device, &props);
  if (st != LOOM_OK) return st;
  const loom_kernel_t *reduce = NULL;
  if ((st = loom_kernel_lookup("ccl.reduce", &reduce)) != LOOM_OK) return st;

  loom_ccl_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_ccl_comm_create: out of memory");
  comm->rank = config->rank;
  comm->world = config->world_size;
  comm->device = device;
  comm->host_addressable = (props.flags & LOOM_DEVICE_HOST_ADDRESSABLE) != 0;
  comm->reduce_kernel = reduce;
  comm->timeout_ns = (config->timeout_ms ? config->timeout_ms : DEFAULT_TIMEOUT_MS) * 1000000ull;
  comm->stop_fd = -1;
  pthread_mutex_init(&comm->lock, NULL);
  pthread_mutex_init(&comm->fail_lock, NULL);
  loom_stream_retain(config->stream);
  comm->stream = config->stream;
  comm->socks = malloc((size_t)comm->world * sizeof *comm->socks);
  comm->send_seq = calloc((size_t)comm->world, sizeof *comm->send_seq);
  comm->recv_seq = calloc((size_t)comm->world, sizeof *comm->recv_seq);
  if (!comm->socks || !comm->send_seq || !comm->recv_seq) {
    comm_free(comm);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_ccl_comm_create: out of memory");
  }
  for (int p = 0; p < comm->world; ++p) comm->socks[p] = -1;
  const size_t buffer = config->buffer_bytes ? config->buffer_bytes : DEFAULT_BUFFER_BYTES;
  if ((st = ccl_segment_join(comm, config, buffer)) != LOOM_OK) {
    comm_free(comm);
    return st;
  }
  comm->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (comm->stop_fd < 0 || pthread_create(&comm->watcher, NULL, watch, comm) != 0) {
    comm_free(comm);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_ccl_comm_create: cannot start its watcher");
  }
  comm->watcher_started = 1;
  *out_comm = comm;
  return LOOM_OK;
}

void loom_ccl_comm_abort(loom_ccl_comm_t *comm) {
  if (!comm) return;
  ccl_fail(comm, NULL, LOOM_ERROR_DEVICE, "loomccl: the communicator was aborted");
}

void loom_ccl_comm_destroy(loom_ccl_comm_t *comm) {
  if (!comm) return;
  /* Every pending step is bounded by the timeout. */
  (void)loom_stream_synchronize(comm->stream);
  ccl_mark_gone(comm, comm->rank, CCL_LEFT);
  if (comm->watcher_started) {
    const uint64_t one = 1;
    (void)!write(comm->stop_fd, &one, sizeof one);
    pthread_join(comm->watcher, NULL);
  }
  comm_free(comm);
}

int loom_ccl_comm_rank(const loom_ccl_comm_t *comm) { return comm ? comm->rank : -1; }
int loom_ccl_comm_size(const loom_ccl_comm_t *comm) { return comm ? comm->world : 0; }
int loom_ccl_comm_device(const loom_ccl_comm_t *comm) { return comm ? comm->device : -1; }
loom_stream_t *loom_ccl_comm_stream(const loom_ccl_comm_t *comm) {
  return comm ? comm->stream : NULL;
}

loom_status loom_ccl_comm_status(const loom_ccl_comm_t *comm) {
  if (!comm) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_comm_status: NULL");
  if (!atomic_load(&((loom_ccl_comm_t *)comm)->failed)) return LOOM_OK;
  loom_ccl_comm_t *c = (loom_ccl_comm_t *)comm;
  pthread_mutex_lock(&c->fail_lock);
  const loom_status st = loom_error(c->failure_status, "%s", c->failure);
  pthread_mutex_unlock(&c->fail_lock);
  return st;
}
