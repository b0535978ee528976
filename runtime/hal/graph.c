/* Graph capture and replay (loom/graph.h).
 *
 * A capturing stream points to its graph; the enqueuing calls (loom_launch,
 * loom_memcpy, loom_host_callback, loom_event_record, loom_stream_wait_event)
 * test that pointer once and, when set, hand their finished command here
 * instead of to the driver, and loom_malloc serves the stream from the
 * graph's pool. A node owns copies of the command's descriptors and
 * scalars, so a replay submits the stored commands to the driver as they
 * are: the work per command is the driver's own submission. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/graph.h"
#include "runtime/alloc/caching_allocator.h"
#include "runtime/hal/hal_internal.h"
#include "runtime/hal/trace.h"

typedef enum node_kind { NODE_COMMAND, NODE_EVENT_RECORD, NODE_EVENT_WAIT } node_kind;

typedef struct node {
  node_kind kind;
  loom_command cmd;            /* NODE_COMMAND; a launch's arrays point into `args` */
  void *args;                  /* owned copy of the launch's tensors, then scalars */
  loom_trace_kind trace_kind;  /* what tracing records at a replay */
  uint64_t flops;
  loom_event_t *event;         /* NODE_EVENT_*: retained */
  void (*release)(void *arg);  /* the command's release, run when the graph goes */
  void *release_arg;
} node;

/* The last replay on one stream, which the graph's end waits for. */
typedef struct replay_mark {
  uint64_t stream_id;
  loom_event_t *done;
} replay_mark;

struct loom_graph {
  atomic_int refs;
  loom_runtime *rt;
  int device;
  uint64_t pool;
  uint64_t stream_id; /* the stream that captured it (for messages) */
  pthread_mutex_t lock;
  node *nodes;
  size_t count, capacity;
  /* The first call refused during the capture. */
  loom_status refused;
  char message[512];
  replay_mark *marks;
  int num_marks, cap_marks;
};

struct loom_graph_exec {
  loom_graph_t *graph;
};

uint64_t loom_graph_pool_new(void) { return loom_next_object_id(); }

/* ---- capture ---------------------------------------------------------------- */

loom_status loom_stream_begin_capture(loom_stream_t *stream, uint64_t pool) {
  loom_status st = loom_check_stream(stream, "loom_stream_begin_capture");
  if (st != LOOM_OK) return st;
  if (loom_stream_capture(stream))
    return loom_error(LOOM_ERROR_NOT_PERMITTED,
                      "loom_stream_begin_capture: loom stream %llu is capturing already",
                      (unsigned long long)stream->id);
  loom_runtime *rt = stream->rt;
  loom_graph_t *g = calloc(1, sizeof *g);
  if (!g) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_stream_begin_capture: out of host memory");
  atomic_init(&g->refs, 1);
  g->rt = rt;
  g->device = stream->device;
  g->pool = pool ? pool : loom_graph_pool_new();
  g->stream_id = stream->id;
  pthread_mutex_init(&g->lock, NULL);
  if ((st = loom_allocator_pool_retain(rt->devices[g->device].allocator, g->pool)) != LOOM_OK) {
    pthread_mutex_destroy(&g->lock);
    free(g);
    return st;
  }
  loom_graph_t *none = NULL;
  if (!atomic_compare_exchange_strong(&stream->capture, &none, g)) {
    loom_graph_release(g);
    return loom_error(LOOM_ERROR_NOT_PERMITTED,
                      "loom_stream_begin_capture: loom stream %llu is capturing already",
                      (unsigned long long)stream->id);
  }
  atomic_store_explicit(&stream->capture_pool, g->pool, memory_order_release);
  return LOOM_OK;
}

int loom_stream_is_capturing(const loom_stream_t *stream) {
  return loom_check_stream(stream, "loom_stream_is_capturing") == LOOM_OK &&
         loom_stream_capture(stream) != NULL;
}

loom_status loom_stream_end_capture(loom_stream_t *stream, loom_graph_t **out_graph) {
  if (!out_graph)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_stream_end_capture: out_graph is NULL");
  *out_graph = NULL;
  loom_status st = loom_check_stream(stream, "loom_stream_end_capture");
  if (st != LOOM_OK) return st;
  atomic_store_explicit(&stream->capture_pool, 0, memory_order_release);
  loom_graph_t *g = atomic_exchange(&stream->capture, NULL);
  if (!g)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_stream_end_capture: loom stream %llu is not capturing",
                      (unsigned long long)stream->id);
  pthread_mutex_lock(&g->lock);
  const loom_status refused = g->refused;
  char message[sizeof g->message];
  memcpy(message, g->message, sizeof message);
  pthread_mutex_unlock(&g->lock);
  if (refused != LOOM_OK) {
    loom_graph_release(g);
    return loom_error(refused, "%s", message);
  }
  *out_graph = g;
  return LOOM_OK;
}

/* Under g->lock: a new node at the end, zeroed; NULL without memory. */
static node *append(loom_graph_t *g) {
  if (g->count == g->capacity) {
    const size_t cap = g->capacity ? 2 * g->capacity : 64;
    node *grown = realloc(g->nodes, cap * sizeof *grown);
    if (!grown) return NULL;
    g->nodes = grown;
    g->capacity = cap;
  }
  node *n = &g->nodes[g->count++];
  memset(n, 0, sizeof *n);
  return n;
}

static loom_status no_memory(const char *name) {
  return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory recording a graph",
                    name ? name : "graph capture");
}

loom_status loom_graph_capture_command(loom_stream_t *stream, const loom_command *cmd,
                                       loom_trace_kind kind, uint64_t flops) {
  loom_graph_t *g = loom_stream_capture(stream);
  if (!g) return loom_stream_submit(stream->rt, stream, cmd); /* the capture just ended */
  loom_command copy = *cmd;
  void *args = NULL;
  if (cmd->kind == LOOM_COMMAND_LAUNCH) {
    const size_t tb = (size_t)cmd->u.launch.num_tensors * sizeof(loom_tensor);
    const size_t sb = (size_t)cmd->u.launch.num_scalars * sizeof(loom_scalar);
    if (tb + sb) {
      if (!(args = malloc(tb + sb))) return no_memory(cmd->name);
      if (tb) memcpy(args, cmd->u.launch.tensors, tb);
      if (sb) memcpy((char *)args + tb, cmd->u.launch.scalars, sb);
      copy.u.launch.tensors = tb ? args : NULL;
      copy.u.launch.scalars = sb ? (const loom_scalar *)((char *)args + tb) : NULL;
    }
  }
  copy.release = NULL;
  copy.release_arg = NULL;
  copy.trace = NULL;
  pthread_mutex_lock(&g->lock);
  node *n = append(g);
  if (n) {
    *n = (node){.kind = NODE_COMMAND, .cmd = copy, .args = args, .trace_kind = kind,
                .flops = flops, .release = cmd->release, .release_arg = cmd->release_arg};
  }
  pthread_mutex_unlock(&g->lock);
  if (!n) {
    free(args);
    return no_memory(cmd->name);
  }
  return LOOM_OK;
}

loom_status loom_graph_capture_event(loom_stream_t *stream, loom_event_t *event, int wait) {
  loom_graph_t *g = loom_stream_capture(stream);
  if (!g) return wait ? loom_stream_wait_event(stream, event) : loom_event_record(event, stream);
  pthread_mutex_lock(&g->lock);
  if (wait) {
    /* Recorded in this capture, on this stream: stream order satisfies it. */
    for (size_t i = 0; i < g->count; ++i)
      if (g->nodes[i].kind == NODE_EVENT_RECORD && g->nodes[i].event == event) {
        pthread_mutex_unlock(&g->lock);
        return LOOM_OK;
      }
  }
  node *n = append(g);
  if (n) {
    loom_event_retain(event);
    n->kind = wait ? NODE_EVENT_WAIT : NODE_EVENT_RECORD;
    n->event = event;
    n->cmd.name = wait ? "event_wait" : "event_record";
  }
  pthread_mutex_unlock(&g->lock);
  return n ? LOOM_OK : no_memory(wait ? "loom_stream_wait_event" : "loom_event_record");
}

loom_status loom_graph_refuse(loom_stream_t *stream, const char *call) {
  loom_graph_t *g = loom_stream_capture(stream);
  char message[448]; /* leaves room for the capture's prefix in g->message */
  snprintf(message, sizeof message, "%s: not permitted while loom stream %llu captures a graph",
           call, (unsigned long long)stream->id);
  if (g) {
    pthread_mutex_lock(&g->lock);
    if (g->refused == LOOM_OK) {
      g->refused = LOOM_ERROR_NOT_PERMITTED;
      snprintf(g->message, sizeof g->message, "the capture failed: %s", message);
    }
    pthread_mutex_unlock(&g->lock);
  }
  return loom_error(LOOM_ERROR_NOT_PERMITTED, "%s", message);
}

/* ---- graphs ------------------------------------------------------------------- */

void loom_graph_retain(loom_graph_t *graph) {
  if (graph) atomic_fetch_add(&graph->refs, 1);
}

void loom_graph_release(loom_graph_t *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  /* Queued replays still read the graph's staged bytes and write its
   * pool: wait for them first. */
  for (int i = 0; i < g->num_marks; ++i) {
    (void)loom_event_synchronize(g->marks[i].done);
    loom_event_release(g->marks[i].done);
  }
  free(g->marks);
  for (size_t i = 0; i < g->count; ++i) {
    node *n = &g->nodes[i];
    free(n->args);
    if (n->event) loom_event_release(n->event);
    if (n->release) n->release(n->release_arg);
  }
  free(g->nodes);
  loom_device_state *dev = &g->rt->devices[g->device];
  /* At loom_shutdown the allocator goes before the streams (and a
   * capture left open with them). */
  if (dev->allocator && dev->default_stream)
    loom_allocator_pool_release(dev->allocator, g->pool, dev->default_stream->id);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

int loom_graph_device(const loom_graph_t *graph) { return graph ? graph->device : -1; }
uint64_t loom_graph_pool(const loom_graph_t *graph) { return graph ? graph->pool : 0; }
size_t loom_graph_num_commands(const loom_graph_t *graph) { return graph ? graph->count : 0; }

const char *loom_graph_command_name(const loom_graph_t *graph, size_t i) {
  if (!graph || i >= graph->count) return NULL;
  return graph->nodes[i].cmd.name ? graph->nodes[i].cmd.name : "command";
}

/* ---- executable graphs -------------------------------------------------------- */

loom_status loom_graph_instantiate(loom_graph_t *graph, loom_graph_exec_t **out_exec) {
  if (!out_exec)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_graph_instantiate: out_exec is NULL");
  *out_exec = NULL;
  if (!graph) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_graph_instantiate: graph is NULL");
  loom_graph_exec_t *e = calloc(1, sizeof *e);
  if (!e) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_graph_instantiate: out of host memory");
  loom_graph_retain(graph);
  e->graph = graph;
  *out_exec = e;
  return LOOM_OK;
}

void loom_graph_exec_release(loom_graph_exec_t *exec) {
  if (!exec) return;
  loom_graph_release(exec->graph);
  free(exec);
}

loom_graph_t *loom_graph_exec_graph(const loom_graph_exec_t *exec) {
  return exec ? exec->graph : NULL;
}

/* The event that marks the end of the latest replay on `stream`, made at
 * the first replay there; retained for the caller. */
static loom_status replay_mark_for(loom_graph_t *g, loom_stream_t *stream, loom_event_t **out) {
  *out = NULL;
  pthread_mutex_lock(&g->lock);
  for (int i = 0; i < g->num_marks; ++i)
    if (g->marks[i].stream_id == stream->id) *out = g->marks[i].done;
  loom_status st = LOOM_OK;
  if (!*out) {
    if (g->num_marks == g->cap_marks) {
      const int cap = g->cap_marks ? 2 * g->cap_marks : 4;
      replay_mark *grown = realloc(g->marks, (size_t)cap * sizeof *grown);
      if (grown) {
        g->marks = grown;
        g->cap_marks = cap;
      }
    }
    if (g->num_marks == g->cap_marks) {
      st = no_memory("loom_graph_launch");
    } else if ((st = loom_event_create(g->device, 0, out)) == LOOM_OK) {
      g->marks[g->num_marks++] = (replay_mark){.stream_id = stream->id, .done = *out};
    }
  }
  if (*out) loom_event_retain(*out);
  pthread_mutex_unlock(&g->lock);
  return st;
}

/* Submits one stored command, traced like its original enqueue when the
 * profiler records. */
static loom_status replay_command(loom_runtime *rt, loom_stream_t *stream, const node *n) {
  if (!loom_trace_on()) return loom_stream_submit(rt, stream, &n->cmd);
  loom_command cmd = n->cmd;
  loom_trace_record enqueue;
  const int traced = loom_trace_command(rt, stream, &cmd, n->trace_kind, n->flops, &enqueue);
  const loom_status st = loom_stream_submit(rt, stream, &cmd);
  if (traced) loom_trace_enqueued(stream, &cmd, st, &enqueue, "loom_graph_launch");
  return st;
}

loom_status loom_graph_launch(loom_graph_exec_t *exec, loom_stream_t *stream) {
  if (!exec) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_graph_launch: exec is NULL");
  loom_status st = loom_check_stream(stream, "loom_graph_launch");
  if (st != LOOM_OK) return st;
  loom_graph_t *g = exec->graph;
  if (stream->device != g->device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_graph_launch: a graph of loom:%d replayed on a stream of loom:%d",
                      g->device, stream->device);
  if (loom_stream_capture(stream))
    return loom_graph_refuse(stream, "loom_graph_launch (a replay inside a capture)");
  if ((st = loom_stream_take_error(stream)) != LOOM_OK) return st;
  loom_event_t *done;
  if ((st = replay_mark_for(g, stream, &done)) != LOOM_OK) return st;
  loom_runtime *rt = stream->rt;
  for (size_t i = 0; i < g->count && st == LOOM_OK; ++i) {
    const node *n = &g->nodes[i];
    switch (n->kind) {
      case NODE_COMMAND: st = replay_command(rt, stream, n); break;
      case NODE_EVENT_RECORD: st = loom_event_record(n->event, stream); break;
      case NODE_EVENT_WAIT: st = loom_stream_wait_event(stream, n->event); break;
    }
  }
  /* Also after a failed submission: what was queued must end before the
   * graph does. */
  char message[512];
  if (st != LOOM_OK) snprintf(message, sizeof message, "%s", loom_last_error());
  const loom_status marked = loom_event_record(done, stream);
  if (marked != LOOM_OK) (void)loom_stream_synchronize(stream);
  loom_event_release(done);
  if (st != LOOM_OK) return loom_error(st, "%s", message);
  return LOOM_OK;
}
