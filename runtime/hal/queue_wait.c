/* Waits of submitting threads for room in a full queue (LOOM_QUEUE_DEPTH):
 * the binding's hooks around them, the threads that must not wait, and
 * each stream's count of waits. */
#include <stddef.h>

#include "runtime/hal/hal_internal.h"

static void *(*_Atomic wait_begin)(void);
static void (*_Atomic wait_end)(void *token);

/* Above 0 while this thread submits where it must not wait: under a runtime
 * lock that the thread it would wait for, or the binding's interpreter,
 * may need. */
static _Thread_local int no_wait_depth;

void loom_set_queue_wait_hooks(void *(*begin)(void), void (*end)(void *token)) {
  atomic_store(&wait_begin, begin);
  atomic_store(&wait_end, end);
}

uint64_t loom_stream_queue_waits(const loom_stream_t *stream) {
  if (!stream || stream->magic != LOOM_STREAM_MAGIC) return 0;
  return atomic_load_explicit(&stream->queue_waits, memory_order_relaxed);
}

int loom_driver_queue_may_wait(void) { return no_wait_depth == 0; }

void *loom_driver_queue_wait_begin(loom_stream_t *stream) {
  if (stream) atomic_fetch_add_explicit(&stream->queue_waits, 1, memory_order_relaxed);
  void *(*begin)(void) = atomic_load(&wait_begin);
  return begin ? begin() : NULL;
}

void loom_driver_queue_wait_end(loom_stream_t *stream, void *token) {
  (void)stream;
  void (*end)(void *) = atomic_load(&wait_end);
  if (end) end(token);
}

void loom_queue_no_wait_enter(void) { ++no_wait_depth; }
void loom_queue_no_wait_leave(void) { --no_wait_depth; }
