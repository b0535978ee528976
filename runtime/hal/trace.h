/* The front end's side of tracing (loom_trace_* in loom/hal.h): what the
 * enqueuing calls do while the profiler records. Not a public header. */
#ifndef LOOM_HAL_TRACE_H
#define LOOM_HAL_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

#include "runtime/hal/hal_internal.h"

/* Nonzero while loom_trace_enable is in effect. */
extern atomic_int loom_trace_active;

/* The one test an enqueue makes when tracing is off; the traced path is
 * the unlikely one. */
static inline int loom_trace_on(void) {
  return __builtin_expect(atomic_load_explicit(&loom_trace_active, memory_order_relaxed), 0);
}

/* Marks `cmd`, about to be submitted to `stream`, as traced: claims the
 * record of its execution in the stream's ring (kind, the launch's flops)
 * for the driver to complete, and fills *enqueue with the record of this
 * enqueue, begun now. 0 when it cannot be traced (a driver older than API
 * version 3, a full ring, no memory for the ring: counted as drops). */
int loom_trace_command(loom_runtime *rt, loom_stream_t *stream, loom_command *cmd,
                       loom_trace_kind kind, uint64_t flops, loom_trace_record *enqueue);

/* After the enqueuing `call` returned `status` for the traced `cmd`:
 * records the enqueue, ending now, or (on failure) withdraws the record
 * of an execution that will never happen. */
void loom_trace_enqueued(loom_stream_t *stream, loom_command *cmd, loom_status status,
                         loom_trace_record *enqueue, const char *call);

/* The stream is being destroyed and its queue has drained: its ring goes
 * when drained (now, if empty). */
void loom_trace_stream_destroyed(loom_stream_t *stream);

/* Frees every ring, drained or not (loom_shutdown, once the streams are
 * gone). */
void loom_trace_shutdown(void);

#endif
