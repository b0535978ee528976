/* Work: a run of collectives on the communication stream, ended by an
 * event; and the host steps between its copies and kernels.
 *
 * A step is a host callback on the communication stream that posts this
 * rank's progress and waits for its peers' (sync.c). Once the work or the
 * communicator has failed, steps do nothing: the copies and kernels
 * enqueued between them still run, on staging data nobody reads. A failure
 * reaches the streams that wait for the work through a one-element check
 * launch after the event wait: it returns the work's status, which the
 * runtime records on that stream as an asynchronous error, raised at its
 * next synchronization, as a failed kernel's would be. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ccl/ccl_internal.h"

typedef struct ccl_step {
  loom_ccl_comm_t *comm;
  loom_ccl_work_t *work;
  ccl_step_kind kind;
  int peer;
  uint32_t seq; /* the step number (barrier) or the chunk number (channels) */
  ccl_signature sig;
} ccl_step;

static void work_release(loom_ccl_work_t *work) {
  if (atomic_fetch_sub(&work->refs, 1) != 1) return;
  if (work->event) loom_event_release(work->event);
  free(work);
}

static int sig_equal(const ccl_signature *a, const ccl_signature *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
         a->count == b->count && a->chunk == b->chunk;
}

static void describe(char *out, size_t size, const ccl_signature *s) {
  snprintf(out, size, "%s of %llu elements (dtype %d, op %s, root %d)", ccl_kind_name(s->kind),
           (unsigned long long)s->count, s->dtype, ccl_op_name(s->op), s->root);
}

static loom_status run_barrier(ccl_step *s) {
  loom_ccl_comm_t *comm = s->comm;
  const int parity = (int)(s->seq & 1);
  comm->sig[comm->rank * 2 + parity] = s->sig;
  ccl_post(&comm->step[comm->rank], s->seq);
  for (int p = 0; p < comm->world; ++p) {
    if (p == comm->rank) continue;
    loom_status st = ccl_wait(comm, &comm->step[p], s->seq, p, s->work->name);
    if (st != LOOM_OK) return st;
  }
  /* Every rank wrote its signature before posting this step, and none can
   * write this parity again before every rank posted the next step. */
  for (int p = 0; p < comm->world; ++p) {
    const ccl_signature *theirs = &comm->sig[p * 2 + parity];
    if (!sig_equal(theirs, &s->sig)) {
      char mine[160], other[160];
      describe(mine, sizeof mine, &s->sig);
      describe(other, sizeof other, theirs);
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "%s: collectives out of step: rank %d runs %s, rank %d runs %s",
                        s->work->name, comm->rank, mine, p, other);
    }
  }
  return LOOM_OK;
}

static loom_status run_step(ccl_step *s) {
  loom_ccl_comm_t *comm = s->comm;
  const int me = comm->rank, p = s->peer;
  switch (s->kind) {
    case CCL_STEP_BARRIER:
      return run_barrier(s);
    case CCL_STEP_SEND_READY: /* the half of chunk seq held chunk seq - 2 */
      return ccl_wait(comm, ccl_acked(comm, me, p), s->seq - 2, p, s->work->name);
    case CCL_STEP_SEND_POST:
      ccl_post(ccl_sent(comm, me, p), s->seq);
      return LOOM_OK;
    case CCL_STEP_RECV_WAIT:
      return ccl_wait(comm, ccl_sent(comm, p, me), s->seq, p, s->work->name);
    case CCL_STEP_RECV_DONE:
      ccl_post(ccl_acked(comm, p, me), s->seq);
      return LOOM_OK;
  }
  return LOOM_OK;
}

static void step_callback(void *user) {
  ccl_step *s = user;
  if (atomic_load(&s->work->status) == LOOM_OK && !atomic_load(&s->comm->failed)) {
    const loom_status st = run_step(s);
    if (st != LOOM_OK) ccl_fail(s->comm, s->work, st, "%s", loom_last_error());
  } else if (atomic_load(&s->work->status) == LOOM_OK) {
    /* Broken by an earlier piece of work: this one fails with its message. */
    pthread_mutex_lock(&s->comm->fail_lock);
    char message[CCL_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", s->comm->failure);
    const loom_status st = s->comm->failure_status;
    pthread_mutex_unlock(&s->comm->fail_lock);
    ccl_fail(s->comm, s->work, st, "%s: %s", s->work->name, message);
  }
  work_release(s->work);
  free(s);
}

static loom_status enqueue_step(loom_ccl_work_t *work, const ccl_step *proto) {
  ccl_step *s = malloc(sizeof *s);
  if (!s) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory", work->name);
  *s = *proto;
  s->comm = work->comm;
  s->work = work;
  atomic_fetch_add(&work->refs, 1);
  const loom_status st = loom_host_callback(work->comm->stream, step_callback, s, work->name);
  if (st != LOOM_OK) {
    atomic_fetch_sub(&work->refs, 1);
    free(s);
  }
  return st;
}

loom_status ccl_enqueue_barrier(loom_ccl_work_t *work, const ccl_signature *sig) {
  ccl_step s = {.kind = CCL_STEP_BARRIER, .seq = ++work->comm->next_step, .sig = *sig};
  return enqueue_step(work, &s);
}

loom_status ccl_enqueue_p2p(loom_ccl_work_t *work, ccl_step_kind kind, int peer, uint32_t seq) {
  ccl_step s = {.kind = kind, .peer = peer, .seq = seq};
  return enqueue_step(work, &s);
}

loom_status ccl_check_open(loom_ccl_work_t *work, const char *what) {
  if (!work) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: work is NULL", what);
  if (work->ended)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: the work has ended (loom_ccl_end)", what);
  return loom_ccl_comm_status(work->comm);
}

/* ---- the public calls --------------------------------------------------------- */

loom_status loom_ccl_begin(loom_ccl_comm_t *comm, loom_stream_t *after, const char *name,
                           loom_ccl_work_t **out_work) {
  if (!out_work) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_begin: out is NULL");
  *out_work = NULL;
  if (!comm) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_begin: comm is NULL");
  name = name ? name : "loomccl";
  loom_status st = loom_ccl_comm_status(comm);
  if (st != LOOM_OK) return st;
  if (after && loom_stream_device(after) != comm->device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: stream of loom:%d, communicator on loom:%d",
                      name, loom_stream_device(after), comm->device);
  loom_ccl_work_t *work = calloc(1, sizeof *work);
  if (!work) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory", name);
  atomic_init(&work->refs, 1);
  work->comm = comm;
  work->name = name;
  if (after && after != comm->stream) {
    loom_event_t *ready = NULL;
    if ((st = loom_event_create(comm->device, LOOM_EVENT_DEFAULT, &ready)) == LOOM_OK &&
        (st = loom_event_record(ready, after)) == LOOM_OK)
      st = loom_stream_wait_event(comm->stream, ready);
    if (ready) loom_event_release(ready);
    if (st != LOOM_OK) {
      free(work);
      return st;
    }
  }
  *out_work = work;
  return LOOM_OK;
}

loom_status loom_ccl_end(loom_ccl_work_t *work) {
  loom_status st = work ? LOOM_OK : loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_end: NULL");
  if (st != LOOM_OK) return st;
  if (work->ended) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: ended twice", work->name);
  work->ended = 1;
  if ((st = loom_event_create(work->comm->device, LOOM_EVENT_DEFAULT, &work->event)) != LOOM_OK)
    return st;
  return loom_event_record(work->event, work->comm->stream);
}

void loom_ccl_work_release(loom_ccl_work_t *work) {
  if (work) work_release(work);
}

loom_event_t *loom_ccl_work_event(const loom_ccl_work_t *work) {
  return work ? work->event : NULL;
}

static loom_status work_result(loom_ccl_work_t *work) {
  const int st = atomic_load(&work->status);
  return st == LOOM_OK ? LOOM_OK : loom_error((loom_status)st, "%s", work->message);
}

/* One element's launch on the waiting stream: the work's status. It holds
 * a reference, dropped here (it runs exactly once). */
static int check_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  loom_ccl_work_t *work = (loom_ccl_work_t *)(uintptr_t)args->scalars[0].u;
  const loom_status st = work_result(work);
  work_release(work);
  return st;
}

loom_status loom_ccl_work_wait(loom_ccl_work_t *work, loom_stream_t *stream) {
  if (!work || !stream)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_work_wait: NULL argument");
  if (!work->event) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: not ended", work->name);
  loom_status st = loom_stream_wait_event(stream, work->event);
  if (st != LOOM_OK) return st;
  loom_scalar arg;
  arg.u = (uint64_t)(uintptr_t)work;
  const loom_launch_desc check = {.name = "loomccl", .fn = check_kernel, .scalars = &arg,
                                  .num_scalars = 1, .range = 1, .grain = 1};
  atomic_fetch_add(&work->refs, 1);
  if ((st = loom_launch(stream, &check)) != LOOM_OK) atomic_fetch_sub(&work->refs, 1);
  return st;
}

loom_status loom_ccl_work_synchronize(loom_ccl_work_t *work) {
  if (!work || !work->event)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_work_synchronize: no ended work");
  const loom_status st = loom_event_synchronize(work->event);
  return st != LOOM_OK ? st : work_result(work);
}

loom_status loom_ccl_work_query(loom_ccl_work_t *work) {
  if (!work || !work->event)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_work_query: no ended work");
  const loom_status st = loom_event_query(work->event);
  return st != LOOM_OK ? st : work_result(work);
}
