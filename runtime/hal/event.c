/* Events: captures of a stream's progress, for ordering and timing.
 *
 * Each record is a capture with its own sequence number; a stream wait
 * holds the sequence the event had when the wait was enqueued, so a later
 * record (on any stream) never releases it: only that capture's completion
 * does (CUDA semantics). Captures on one stream complete in order, captures
 * on different streams in any order, so an event tracks the contiguous
 * prefix of completed sequences plus, for the window of sequences beyond it,
 * one bit per capture that completed ahead of the prefix. The window grows
 * at record time, where running out of memory can still be reported; a
 * completion never allocates. */
#include <stdlib.h>

#include "base/clock.h"
#include "loom/graph.h"
#include "runtime/hal/hal_internal.h"

#define LOOM_EVENT_MAGIC 0x4c45564eu /* "LEVN" */
#define WINDOW_MIN_BITS 64

struct loom_event {
  uint32_t magic;
  atomic_int refs; /* the user's plus one per queued command */
  int device;
  unsigned flags;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t next_sequence;        /* the latest capture's sequence (under lock) */
  _Atomic uint64_t recorded;     /* the same, for readers without the lock */
  _Atomic uint64_t completed;    /* every capture up to this one is done */
  _Atomic uint64_t completed_ns; /* CLOCK_MONOTONIC of the latest capture's completion */
  atomic_int waiters;
  /* Bit (s mod window_bits) is set when capture s, in (completed,
   * next_sequence], is done; next_sequence - completed <= window_bits.
   * Under lock. The first 64 bits need no allocation. */
  uint64_t *done_bits;
  uint64_t window_bits; /* a power of two */
  uint64_t inline_bits;
  /* How many bits are set. Written after `completed` when the prefix
   * absorbs them, and read before it, so that a reader seeing 0 also sees
   * the prefix that absorbed them. */
  atomic_size_t ahead;
};

/* Bit of capture `sequence` in a window of `window` bits (a power of two). */
static int bit_get(const uint64_t *bits, uint64_t window, uint64_t sequence) {
  const uint64_t i = sequence & (window - 1);
  return (int)((bits[i / 64] >> (i % 64)) & 1u);
}

static void bit_put(uint64_t *bits, uint64_t window, uint64_t sequence, int on) {
  const uint64_t i = sequence & (window - 1);
  const uint64_t mask = (uint64_t)1 << (i % 64);
  if (on) bits[i / 64] |= mask; else bits[i / 64] &= ~mask;
}

static int bit_test(const loom_event_t *ev, uint64_t sequence) {
  return bit_get(ev->done_bits, ev->window_bits, sequence);
}

static void bit_set(loom_event_t *ev, uint64_t sequence, int on) {
  bit_put(ev->done_bits, ev->window_bits, sequence, on);
}

/* Under ev->lock: makes room for sequences up to next_sequence + 1. */
static loom_status grow_window(loom_event_t *ev) {
  const uint64_t completed = atomic_load(&ev->completed);
  const uint64_t need = ev->next_sequence + 1 - completed;
  if (need <= ev->window_bits) return LOOM_OK;
  uint64_t bits = ev->window_bits;
  while (bits < need) bits *= 2;
  uint64_t *grown = calloc(bits / 64, sizeof *grown);
  if (!grown)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY,
                      "loom_event_record: out of host memory (%llu captures pending)",
                      (unsigned long long)(need - 1));
  for (uint64_t s = completed + 1; s <= ev->next_sequence; ++s)
    if (bit_test(ev, s)) bit_put(grown, bits, s, 1);
  if (ev->done_bits != &ev->inline_bits) free(ev->done_bits);
  ev->done_bits = grown;
  ev->window_bits = bits;
  return LOOM_OK;
}

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
  ev->done_bits = &ev->inline_bits;
  ev->window_bits = WINDOW_MIN_BITS;
  pthread_mutex_init(&ev->lock, NULL);
  pthread_cond_init(&ev->cond, NULL);
  *out_event = ev;
  return LOOM_OK;
}

void loom_event_retain(loom_event_t *event) {
  if (!event || event->magic != LOOM_EVENT_MAGIC) return;
  atomic_fetch_add(&event->refs, 1);
}

void loom_event_release(loom_event_t *event) {
  if (!event || event->magic != LOOM_EVENT_MAGIC) return;
  if (atomic_fetch_sub(&event->refs, 1) != 1) return;
  event->magic = 0;
  pthread_cond_destroy(&event->cond);
  pthread_mutex_destroy(&event->lock);
  if (event->done_bits != &event->inline_bits) free(event->done_bits);
  free(event);
}

static void release_event_arg(void *arg) { loom_event_release(arg); }

void loom_driver_event_complete(loom_event_t *ev, uint64_t sequence) {
  const uint64_t now = loom_now_ns();
  pthread_mutex_lock(&ev->lock);
  if (sequence == ev->next_sequence) atomic_store(&ev->completed_ns, now);
  uint64_t done = atomic_load(&ev->completed);
  if (sequence > done && !bit_test(ev, sequence)) {
    bit_set(ev, sequence, 1);
    size_t ahead = atomic_load(&ev->ahead) + 1;
    if (sequence == done + 1) {
      /* The next in order: absorb the captures that finished before it. */
      while (done < ev->next_sequence && bit_test(ev, done + 1)) {
        bit_set(ev, ++done, 0);
        --ahead;
      }
      atomic_store(&ev->completed, done);
    }
    atomic_store(&ev->ahead, ahead);
  }
  if (atomic_load(&ev->waiters)) pthread_cond_broadcast(&ev->cond);
  pthread_mutex_unlock(&ev->lock);
}

/* Under ev->lock. */
static int done_locked(const loom_event_t *ev, uint64_t sequence) {
  return atomic_load(&ev->completed) >= sequence || bit_test(ev, sequence);
}

static int event_done(loom_event_t *ev, uint64_t sequence) {
  const size_t ahead = atomic_load(&ev->ahead);
  if (atomic_load(&ev->completed) >= sequence) return 1;
  if (!ahead) return 0;
  pthread_mutex_lock(&ev->lock);
  const int done = done_locked(ev, sequence);
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
  while (!done_locked(ev, sequence)) pthread_cond_wait(&ev->cond, &ev->lock);
  atomic_fetch_sub(&ev->waiters, 1);
  pthread_mutex_unlock(&ev->lock);
}

/* Records `event` on the real queue of `stream` (never captured). */
static loom_status record_on_queue(loom_event_t *event, loom_stream_t *stream) {
  loom_runtime *rt = stream->rt;
  loom_status st;
  pthread_mutex_lock(&event->lock);
  if ((st = grow_window(event)) != LOOM_OK) {
    pthread_mutex_unlock(&event->lock);
    return st;
  }
  const uint64_t sequence = ++event->next_sequence;
  atomic_store(&event->recorded, sequence);
  pthread_mutex_unlock(&event->lock);
  loom_event_retain(event);
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

static loom_status check_record(loom_event_t *event, loom_stream_t *stream, const char *what) {
  loom_status st = check_event(event, what);
  if (st != LOOM_OK) return st;
  if ((st = loom_check_stream(stream, what)) != LOOM_OK) return st;
  if (event->device != stream->device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "%s: event of loom:%d recorded on a stream of loom:%d", what,
                      event->device, stream->device);
  return LOOM_OK;
}

loom_status loom_event_record(loom_event_t *event, loom_stream_t *stream) {
  loom_status st = check_record(event, stream, "loom_event_record");
  if (st != LOOM_OK) return st;
  if (loom_stream_capture(stream)) return loom_graph_capture_event(stream, event, 0);
  return record_on_queue(event, stream);
}

loom_status loom_event_record_uncaptured(loom_event_t *event, loom_stream_t *stream) {
  loom_status st = check_record(event, stream, "loom_event_record_uncaptured");
  if (st != LOOM_OK) return st;
  loom_queue_no_wait_enter(); /* the allocator records under its lock */
  st = record_on_queue(event, stream);
  loom_queue_no_wait_leave();
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
  if (loom_stream_capture(stream)) return loom_graph_capture_event(stream, event, 1);
  loom_runtime *rt = stream->rt;
  const uint64_t sequence = atomic_load(&event->recorded);
  if (event_done(event, sequence)) return LOOM_OK; /* nothing to wait for */
  loom_event_retain(event);
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
