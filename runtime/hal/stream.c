/* Streams: in-order command queues with an asynchronous-error slot. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/graph.h"
#include "runtime/alloc/caching_allocator.h"
#include "runtime/hal/hal_internal.h"
#include "runtime/hal/trace.h"

static _Atomic uint64_t next_object_id = 1;

uint64_t loom_next_object_id(void) { return atomic_fetch_add(&next_object_id, 1); }

loom_status loom_stream_create_internal(loom_runtime *rt, int device, int priority,
                                        int is_default, loom_stream_t **out) {
  loom_stream_t *s = calloc(1, sizeof *s);
  if (!s) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_stream_create: out of host memory");
  s->magic = LOOM_STREAM_MAGIC;
  atomic_init(&s->refs, 1);
  s->rt = rt;
  s->device = device;
  s->priority = priority;
  s->is_default = is_default;
  s->id = loom_next_object_id();
  pthread_mutex_init(&s->error_lock, NULL);
  loom_status st = rt->driver->queue_create(rt->driver->context, device, priority, s, &s->queue);
  if (st != LOOM_OK) {
    pthread_mutex_destroy(&s->error_lock);
    free(s);
    return st;
  }
  loom_device_state *dev = &rt->devices[device];
  pthread_mutex_lock(&dev->streams_lock);
  s->next = dev->streams;
  if (dev->streams) dev->streams->prev = s;
  dev->streams = s;
  pthread_mutex_unlock(&dev->streams_lock);
  *out = s;
  return LOOM_OK;
}

void loom_stream_destroy_internal(loom_runtime *rt, loom_stream_t *s) {
  loom_device_state *dev = &rt->devices[s->device];
  pthread_mutex_lock(&dev->streams_lock);
  if (s->prev) s->prev->next = s->next; else dev->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&dev->streams_lock);
  rt->driver->queue_destroy(rt->driver->context, s->queue);
  loom_trace_stream_destroyed(s);
  /* A capture never ended goes with its stream. */
  loom_graph_release(atomic_exchange(&s->capture, NULL));
  /* Cached blocks of a stream that no longer exists would never be handed
   * out again: give them to the default stream. */
  if (!s->is_default && dev->allocator && dev->default_stream)
    loom_allocator_retire_stream(dev->allocator, s->id, dev->default_stream->id);
  s->magic = 0;
  pthread_mutex_destroy(&s->error_lock);
  free(s);
}

loom_status loom_stream_create(int device, int priority, loom_stream_t **out_stream) {
  if (!out_stream) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_stream_create: out_stream is NULL");
  *out_stream = NULL;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) return st;
  return loom_stream_create_internal(rt, device, priority, 0, out_stream);
}

loom_status loom_stream_default(int device, loom_stream_t **out_stream) {
  if (!out_stream) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_stream_default: out_stream is NULL");
  *out_stream = NULL;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) return st;
  *out_stream = rt->devices[device].default_stream;
  return LOOM_OK;
}

/* The default stream is borrowed and lives until shutdown, so counting
 * references on it would only invite a double destroy. */
void loom_stream_retain(loom_stream_t *stream) {
  if (!stream || stream->magic != LOOM_STREAM_MAGIC || stream->is_default) return;
  atomic_fetch_add(&stream->refs, 1);
}

void loom_stream_release(loom_stream_t *stream) {
  if (!stream || stream->magic != LOOM_STREAM_MAGIC || stream->is_default) return;
  if (atomic_fetch_sub(&stream->refs, 1) != 1) return;
  loom_stream_destroy_internal(stream->rt, stream);
}

int loom_stream_device(const loom_stream_t *stream) {
  return stream && stream->magic == LOOM_STREAM_MAGIC ? stream->device : -1;
}

int loom_stream_priority(const loom_stream_t *stream) {
  return stream && stream->magic == LOOM_STREAM_MAGIC ? stream->priority : 0;
}

uint64_t loom_stream_id(const loom_stream_t *stream) {
  return stream && stream->magic == LOOM_STREAM_MAGIC ? stream->id : 0;
}

void loom_driver_report_error(loom_stream_t *stream, loom_status status, const char *fmt, ...) {
  pthread_mutex_lock(&stream->error_lock);
  if (!atomic_load(&stream->has_error)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stream->error_message, sizeof stream->error_message, fmt, ap);
    va_end(ap);
    stream->error = status;
    atomic_store(&stream->has_error, 1);
  }
  pthread_mutex_unlock(&stream->error_lock);
}

loom_status loom_stream_take_error(loom_stream_t *stream) {
  if (!atomic_load_explicit(&stream->has_error, memory_order_acquire)) return LOOM_OK;
  pthread_mutex_lock(&stream->error_lock);
  loom_status st = LOOM_OK;
  if (atomic_load(&stream->has_error)) {
    st = loom_error(stream->error, "%s", stream->error_message);
    atomic_store(&stream->has_error, 0);
  }
  pthread_mutex_unlock(&stream->error_lock);
  return st;
}

loom_status loom_stream_submit(loom_runtime *rt, loom_stream_t *stream, const loom_command *command) {
  return rt->driver->queue_submit(rt->driver->context, stream->queue, command);
}

loom_status loom_stream_query(loom_stream_t *stream) {
  loom_status st = loom_check_stream(stream, "loom_stream_query");
  if (st != LOOM_OK) return st;
  if (loom_stream_capture(stream)) return loom_graph_refuse(stream, "loom_stream_query");
  loom_runtime *rt = stream->rt;
  st = loom_stream_take_error(stream);
  if (st != LOOM_OK) return st;
  return rt->driver->queue_query(rt->driver->context, stream->queue);
}

loom_status loom_stream_synchronize(loom_stream_t *stream) {
  loom_status st = loom_check_stream(stream, "loom_stream_synchronize");
  if (st != LOOM_OK) return st;
  if (loom_stream_capture(stream)) return loom_graph_refuse(stream, "loom_stream_synchronize");
  loom_runtime *rt = stream->rt;
  st = rt->driver->queue_synchronize(rt->driver->context, stream->queue);
  loom_status err = loom_stream_take_error(stream);
  return err != LOOM_OK ? err : st;
}

/* ---- commands ------------------------------------------------------------ */

static loom_status check_launch(const loom_launch_desc *desc, const char *what) {
  if (!desc) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: desc is NULL", what);
  const char *name = desc->name ? desc->name : "kernel";
  if (!desc->fn && !desc->kernel)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: neither a kernel nor a function", name);
  if (desc->range < 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: negative range %lld", name, (long long)desc->range);
  if (desc->grain < 1)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: grain %lld must be >= 1", name, (long long)desc->grain);
  if (desc->num_tensors && !desc->tensors)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %u tensors but tensors is NULL", name, desc->num_tensors);
  if (desc->num_scalars && !desc->scalars)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %u scalars but scalars is NULL", name, desc->num_scalars);
  return LOOM_OK;
}

/* The command for `desc` on `driver`: a named kernel resolves to the
 * driver's implementation. */
static loom_status launch_command(const loom_launch_desc *desc, const loom_driver *driver,
                                  loom_command *out) {
  loom_kernel_fn fn = desc->fn;
  if (desc->kernel) {
    loom_status st = loom_kernel_fn_for(desc->kernel, driver, &fn);
    if (st != LOOM_OK) return st;
  }
  *out = (loom_command){
      .kind = LOOM_COMMAND_LAUNCH,
      .name = desc->name ? desc->name : loom_kernel_name(desc->kernel),
      .u.launch = {.fn = fn, .tensors = desc->tensors, .num_tensors = desc->num_tensors,
                   .scalars = desc->scalars, .num_scalars = desc->num_scalars,
                   .range = desc->range, .grain = desc->grain, .kernel = desc->kernel},
  };
  return LOOM_OK;
}

/* Runs `cmd` inline when the launch allows it and the driver takes it,
 * else submits it. Inlined in both of loom_launch's paths. */
static inline __attribute__((always_inline)) loom_status submit_launch(loom_runtime *rt, loom_stream_t *stream,
                                        const loom_launch_desc *desc, const loom_command *cmd) {
  if ((desc->flags & LOOM_LAUNCH_MAY_RUN_INLINE) && rt->driver->queue_run_inline &&
      rt->driver->queue_run_inline(rt->driver->context, stream->queue, cmd) == LOOM_OK)
    return LOOM_OK;
  return loom_stream_submit(rt, stream, cmd);
}

loom_status loom_launch(loom_stream_t *stream, const loom_launch_desc *desc) {
  loom_status st = loom_check_stream(stream, "loom_launch");
  if (st != LOOM_OK) return st;
  if ((st = check_launch(desc, "loom_launch")) != LOOM_OK) return st;
  loom_runtime *rt = stream->rt;
  if ((st = loom_stream_take_error(stream)) != LOOM_OK) return st;
  if (desc->range == 0) return LOOM_OK;
  loom_command cmd;
  if ((st = launch_command(desc, rt->driver, &cmd)) != LOOM_OK) return st;
  const loom_trace_kind kind = desc->flags & LOOM_LAUNCH_FILL ? LOOM_TRACE_FILL : LOOM_TRACE_KERNEL;
  if (__builtin_expect(loom_stream_capture(stream) != NULL, 0))
    return loom_graph_capture_command(stream, &cmd, kind, desc->flops);
  if (!loom_trace_on()) return submit_launch(rt, stream, desc, &cmd);
  loom_trace_record enqueue;
  const int traced = loom_trace_command(rt, stream, &cmd, kind, desc->flops, &enqueue);
  st = submit_launch(rt, stream, desc, &cmd);
  if (traced) loom_trace_enqueued(stream, &cmd, st, &enqueue, "loom_launch");
  return st;
}

loom_status loom_host_callback(loom_stream_t *stream, void (*fn)(void *user), void *user,
                               const char *name) {
  loom_status st = loom_check_stream(stream, "loom_host_callback");
  if (st != LOOM_OK) return st;
  if (!fn) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_host_callback: fn is NULL");
  loom_runtime *rt = stream->rt;
  loom_command cmd = {.kind = LOOM_COMMAND_CALLBACK,
                      .name = name ? name : "host_callback",
                      .u.callback = {.fn = fn, .user = user}};
  if (loom_stream_capture(stream))
    return loom_graph_capture_command(stream, &cmd, LOOM_TRACE_CALLBACK, 0);
  if (!loom_trace_on()) return loom_stream_submit(rt, stream, &cmd);
  loom_trace_record enqueue;
  const int traced = loom_trace_command(rt, stream, &cmd, LOOM_TRACE_CALLBACK, 0, &enqueue);
  st = loom_stream_submit(rt, stream, &cmd);
  if (traced) loom_trace_enqueued(stream, &cmd, st, &enqueue, "loom_host_callback");
  return st;
}

loom_status loom_run_now(int device, const loom_launch_desc *desc) {
  loom_status st = check_launch(desc, "loom_run_now");
  if (st != LOOM_OK) return st;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  if ((st = loom_check_device(rt, device)) != LOOM_OK) return st;
  if (desc->range == 0) return LOOM_OK;
  loom_command cmd;
  if ((st = launch_command(desc, rt->driver, &cmd)) != LOOM_OK) return st;
  if (rt->driver->run_now) return rt->driver->run_now(rt->driver->context, device, &cmd);
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                 .num_tensors = desc->num_tensors, .tensors = desc->tensors,
                                 .num_scalars = desc->num_scalars, .scalars = desc->scalars,
                                 .range = desc->range, .grain = desc->grain};
  /* Stepping by chunk end, never begin + grain: a huge grain must not
   * overflow. */
  loom_clear_error();
  for (int64_t begin = 0, end; begin < desc->range; begin = end) {
    end = desc->range - begin > desc->grain ? begin + desc->grain : desc->range;
    int rc = cmd.u.launch.fn(&args, begin, end);
    if (rc != 0 && loom_last_error()[0]) {
      char reason[512];
      snprintf(reason, sizeof reason, "%s", loom_last_error());
      return loom_error(loom_kernel_status(rc), "%s: %s", cmd.name, reason);
    }
    if (rc != 0)
      return loom_error(loom_kernel_status(rc), "%s: %s (kernel returned %d on [%lld, %lld) of %lld)",
                        cmd.name, loom_status_name(loom_kernel_status(rc)), rc, (long long)begin,
                        (long long)end, (long long)desc->range);
  }
  return LOOM_OK;
}
