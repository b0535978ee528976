/* loom/graph.h — graph capture and replay: the commands a stream would run,
 * recorded once and replayed with one call.
 *
 * While a stream captures, what is enqueued on it (kernel launches with
 * their descriptors and scalars, copies, event records and waits, host
 * callbacks) is recorded into a graph instead of being run. Memory that
 * loom_malloc hands out for the capturing stream comes from the capture's
 * private pool, which lives as long as the graphs that use it, so that
 * replays find the same addresses. Calls that would wait for the captured
 * work, or read its results on the host, cannot work while nothing runs:
 * they fail with LOOM_ERROR_NOT_PERMITTED naming the call, and the capture
 * then ends with that error. The stream stays usable.
 *
 *   loom_stream_begin_capture(s, 0);          // 0: a new private pool
 *   ... loom_malloc / loom_launch / loom_memcpy on s ...
 *   loom_stream_end_capture(s, &graph);
 *   loom_graph_instantiate(graph, &exec);
 *   loom_graph_launch(exec, s);               // as often as needed
 *
 * Not permitted on a capturing stream: loom_stream_synchronize,
 * loom_stream_query, loom_device_synchronize of its device (it fails after
 * synchronizing the other streams), a copy to pageable host memory (the
 * caller would read it on return), a replay (graphs do not nest). A copy
 * from pageable host memory records the bytes it had at capture. A wait
 * for an event recorded in the same capture is already satisfied by stream
 * order and records nothing; a wait for any other event waits, at each
 * replay, for that event's latest record at the time of the replay. Only
 * the capturing stream is captured: other streams cannot join a capture.
 *
 * Everything here is thread-safe; graphs must be released before
 * loom_shutdown. */
#ifndef LOOM_GRAPH_H
#define LOOM_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "loom/hal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_graph loom_graph_t;           /* a captured sequence */
typedef struct loom_graph_exec loom_graph_exec_t; /* its executable form */

/* A fresh pool id, never 0, unique for the process's life. A pool exists
 * while a capture or graph uses it: graphs captured with the same id share
 * its memory (replay them in the order they were captured). */
uint64_t loom_graph_pool_new(void);

/* Starts capturing `stream` into a new graph whose allocations come from
 * pool `pool` (0: a new one). LOOM_ERROR_NOT_PERMITTED if the stream is
 * capturing already. */
loom_status loom_stream_begin_capture(loom_stream_t *stream, uint64_t pool);

/* 1 while `stream` captures, else 0. */
int loom_stream_is_capturing(const loom_stream_t *stream);

/* Ends the capture of `stream`; the stream runs what is enqueued on it
 * again. On success *out_graph receives the graph (one reference). If a
 * call was refused during the capture, returns its status with its message
 * ("...: not permitted while loom stream ... captures a graph") and no
 * graph. LOOM_ERROR_INVALID_ARGUMENT if the stream was not capturing. */
loom_status loom_stream_end_capture(loom_stream_t *stream, loom_graph_t **out_graph);

void loom_graph_retain(loom_graph_t *graph);
/* Dropping the last reference (the executable forms hold one each) waits
 * for the replays launched so far, then releases the graph's pool share:
 * a pool no graph uses any more returns its unused memory to the driver,
 * and memory still allocated from it becomes ordinary memory of the
 * device's default stream. */
void loom_graph_release(loom_graph_t *graph);

int loom_graph_device(const loom_graph_t *graph);
uint64_t loom_graph_pool(const loom_graph_t *graph);
/* Commands recorded, and the name of the i-th (NULL past the end). */
size_t loom_graph_num_commands(const loom_graph_t *graph);
const char *loom_graph_command_name(const loom_graph_t *graph, size_t i);

/* The executable form of `graph` (which it keeps alive). */
loom_status loom_graph_instantiate(loom_graph_t *graph, loom_graph_exec_t **out_exec);
void loom_graph_exec_release(loom_graph_exec_t *exec);
loom_graph_t *loom_graph_exec_graph(const loom_graph_exec_t *exec);

/* Enqueues the graph's commands on `stream` (a stream of the graph's
 * device), in their captured order, with no work per command above the
 * driver. Returns (and clears) a pending asynchronous error of the stream
 * first, as loom_launch does. */
loom_status loom_graph_launch(loom_graph_exec_t *exec, loom_stream_t *stream);

/* Records `event` on the stream's real queue even while the stream
 * captures: it then completes once the work enqueued before the capture
 * is done. For the allocator, which guards the reuse of freed blocks with
 * events and must not have them captured. It never waits for room in a
 * full queue (the allocator records under its lock). */
loom_status loom_event_record_uncaptured(loom_event_t *event, loom_stream_t *stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GRAPH_H */
