/* The front end's side of tracing (loom_trace_* in loom/hal.h): what the
 * enqueuing calls do while the profiler records. Not a public header. */
#ifndef LOOM_HAL_TRACE_H
#define LOOM_HAL_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

#include "runtime/hal/hal_internal.h"

/* Nonzero while loom_trace_enable is in effect. */
extern atomic_int loom_trace_active;

/* The one test an enqueue makes when tracing is off. */
static inline int loom_trace_on(void) {
  return atomic_load_explicit(&loom_trace_active, memory_order_relaxed);
}

/* Marks `cmd`, about to be submitted to `stream`, as traced (kind, the
 * launch's flops) and returns the enqueue's start time; 0 when it cannot
 * be traced (a driver older than API version 3, no memory for the
 * stream's ring: then it counts a drop). */
uint64_t loom_trace_command(loom_runtime *rt, loom_stream_t *stream, loom_command *cmd,
                            loom_trace_kind kind, uint64_t flops);

/* Records the enqueue of the traced `cmd` by `call`, begun at `start`
 * (what loom_trace_command returned), ending now. */
void loom_trace_enqueued(const loom_command *cmd, uint64_t start, const char *call);

/* The stream is being destroyed and its queue has drained: its ring goes
 * when drained (now, if empty). */
void loom_trace_stream_destroyed(loom_stream_t *stream);

/* Frees every ring, drained or not (loom_shutdown, once the streams are
 * gone). */
void loom_trace_shutdown(void);

#endif
