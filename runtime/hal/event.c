/* Events: captures of a stream's progress, for ordering and timing. */
#include <stdlib.h>

#include "runtime/base/clock.h"
#include "runtime/hal/hal_internal.h"

static loom_status check_event(const loom_event_t *event, const char *what) {
  if (!event) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: event is NULL", what);
  if (event->magic != LOOM_EVENT_MAGIC)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: not a live loom event", what);
  return LOOM_OK;
}

loom_status loom_event_create(int device, unsigned flags, loom_event_t **out_event) {
  if (!out_event) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_event_create: out_event is NULL");
  *out_event = NULL;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) return st;
  if (flags & ~(unsigned)LOOM_EVENT_TIMING)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_event_create: unknown flags 0x%x", flags);
  loom_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_event_create: out of host memory");
  ev->magic = LOOM_EVENT_MAGIC;
  atomic_init(&ev->refs, 1);
  ev->device = device;
  ev->flags = flags;
  pthread_mutex_init(&ev->lock, NULL);
  pthread_cond_init(&ev->cond, NULL);
  *out_event = ev;
  return LOOM_OK;
}

void loom_event_retain_internal(loom_event_t *event) { atomic_fetch_add(&event->refs, 1); }

void loom_event_release(loom_event_t *event) {
  if (!event || event->magic != LOOM_EVENT_MAGIC) return;
  if (atomic_fetch_sub(&event->refs, 1) != 1) return;
  event->magic = 0;
  pthread_cond_destroy(&event->cond);
  pthread_mutex_destroy(&event->lock);
  free(event);
}

static void release_event_arg(void *arg) { loom_event_release(arg); }

/* Under ev->lock: is `sequence` among the captures done out of order? */
static int done_ahead_has(const loom_event_t *ev, uint64_t sequence) {
  for (size_t i = 0; i < ev->done_ahead_len; ++i)
    if (ev->done_ahead[i] == sequence) return 1;
  return 0;
}

void loom_driver_event_complete(loom_event_t *ev, uint64_t sequence) {
  const uint64_t now = loom_now_ns();
  pthread_mutex_lock(&ev->lock);
  if (sequence == atomic_load(&ev->recorded)) atomic_store(&ev->completed_ns, now);
  uint64_t done = atomic_load(&ev->completed);
  if (sequence == done + 1) {
    /* The next in order: absorb the captures that finished before it. */
    done = sequence;
    size_t i = 0;
    while (i < ev->done_ahead_len) {
      if (ev->done_ahead[i] == done + 1) {
        ++done;
        ev->done_ahead[i] = ev->done_ahead[--ev->done_ahead_len];
        i = 0;
      } else {
        ++i;
      }
    }
    atomic_store(&ev->ahead, ev->done_ahead_len);
    atomic_store_explicit(&ev->completed, done, memory_order_release);
  } else if (sequence > done) {
    /* An earlier capture, recorded on another stream, is still pending:
     * waiters for it must not be released by this one. */
    if (ev->done_ahead_len == LOOM_EVENT_DONE_AHEAD) {
      /* Too many pending at once to remember: everything up to the
       * latest completion counts as done (never a hang; a waiter may be
       * released early). */
      uint64_t top = sequence;
      for (size_t i = 0; i < ev->done_ahead_len; ++i)
        if (ev->done_ahead[i] > top) top = ev->done_ahead[i];
      ev->done_ahead_len = 0;
      atomic_store(&ev->ahead, 0);
      atomic_store_explicit(&ev->completed, top, memory_order_release);
    } else {
      ev->done_ahead[ev->done_ahead_len++] = sequence;
      atomic_store_explicit(&ev->ahead, ev->done_ahead_len, memory_order_release);
    }
  }
  if (atomic_load(&ev->waiters)) pthread_cond_broadcast(&ev->cond);
  pthread_mutex_unlock(&ev->lock);
}

static int event_done(loom_event_t *ev, uint64_t sequence) {
  if (atomic_load_explicit(&ev->completed, memory_order_acquire) >= sequence) return 1;
  if (!atomic_load_explicit(&ev->ahead, memory_order_acquire)) return 0;
  pthread_mutex_lock(&ev->lock);
  const int done = done_ahead_has(ev, sequence);
  pthread_mutex_unlock(&ev->lock);
  return done;
}

void loom_driver_event_wait(loom_event_t *ev, uint64_t sequence) {
  /* Cross-stream waits are usually short: spin a little before sleeping. */
  loom_spin spin = loom_spin_start(20000);
  while (!event_done(ev, sequence))
    if (!loom_spin_more(&spin)) break;
  if (event_done(ev, sequence)) return;
  pthread_mutex_lock(&ev->lock);
  atomic_fetch_add(&ev->waiters, 1);
  while (atomic_load(&ev->completed) < sequence && !done_ahead_has(ev, sequence))
    pthread_cond_wait(&ev->cond, &ev->lock);
  atomic_fetch_sub(&ev->waiters, 1);
  pthread_mutex_unlock(&ev->lock);
}

loom_status loom_event_record(loom_event_t *event, loom_stream_t *stream) {
  loom_status st = check_event(event, "loom_event_record");
  if (st != LOOM_OK) return st;
  if ((st = loom_check_stream(stream, "loom_event_record")) != LOOM_OK) return st;
  if (event->device != stream->device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_event_record: event of loom:%d recorded on a stream of loom:%d",
                      event->device, stream->device);
  loom_runtime *rt = stream->rt;
  pthread_mutex_lock(&event->lock);
  const uint64_t sequence = ++event->next_sequence;
  atomic_store(&event->recorded, sequence);
  pthread_mutex_unlock(&event->lock);
  loom_event_retain_internal(event);
  const loom_command cmd = {.kind = LOOM_COMMAND_EVENT_RECORD, .name = "event_record",
                            .u.event = {.event = event, .sequence = sequence},
                            .release = release_event_arg, .release_arg = event};
  st = loom_stream_submit(rt, stream, &cmd);
  if (st != LOOM_OK) {
    /* Never leave a capture that cannot complete. */
    loom_driver_event_complete(event, sequence);
    loom_event_release(event);
  }
  return st;
}

loom_status loom_event_query(loom_event_t *event) {
  loom_status st = check_event(event, "loom_event_query");
  if (st != LOOM_OK) return st;
  return event_done(event, atomic_load(&event->recorded)) ? LOOM_OK : LOOM_ERROR_NOT_READY;
}

loom_status loom_event_synchronize(loom_event_t *event) {
  loom_status st = check_event(event, "loom_event_synchronize");
  if (st != LOOM_OK) return st;
  loom_driver_event_wait(event, atomic_load(&event->recorded));
  return LOOM_OK;
}

loom_status loom_stream_wait_event(loom_stream_t *stream, loom_event_t *event) {
  loom_status st = check_event(event, "loom_stream_wait_event");
  if (st != LOOM_OK) return st;
  if ((st = loom_check_stream(stream, "loom_stream_wait_event")) != LOOM_OK) return st;
  loom_runtime *rt = stream->rt;
  const uint64_t sequence = atomic_load(&event->recorded);
  if (event_done(event, sequence)) return LOOM_OK; /* nothing to wait for */
  loom_event_retain_internal(event);
  const loom_command cmd = {.kind = LOOM_COMMAND_EVENT_WAIT, .name = "event_wait",
                            .u.event = {.event = event, .sequence = sequence},
                            .release = release_event_arg, .release_arg = event};
  st = loom_stream_submit(rt, stream, &cmd);
  if (st != LOOM_OK) loom_event_release(event);
  return st;
}

loom_status loom_event_elapsed_ms(loom_event_t *start, loom_event_t *end, double *out_ms) {
  if (!out_ms) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_event_elapsed_ms: out_ms is NULL");
  *out_ms = 0;
  loom_status st = check_event(start, "loom_event_elapsed_ms");
  if (st != LOOM_OK) return st;
  if ((st = check_event(end, "loom_event_elapsed_ms")) != LOOM_OK) return st;
  if (!(start->flags & LOOM_EVENT_TIMING) || !(end->flags & LOOM_EVENT_TIMING))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_event_elapsed_ms: both events must be created with timing enabled");
  const uint64_t rs = atomic_load(&start->recorded), re = atomic_load(&end->recorded);
  if (!rs || !re)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_event_elapsed_ms: both events must be recorded first");
  if (!event_done(start, rs) || !event_done(end, re))
    return loom_error(LOOM_ERROR_NOT_READY, "loom_event_elapsed_ms: events have not completed");
  const double ns = (double)(int64_t)(atomic_load(&end->completed_ns) - atomic_load(&start->completed_ns));
  *out_ms = ns / 1e6;
  return LOOM_OK;
}
