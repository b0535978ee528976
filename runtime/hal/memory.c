/* Front end of device memory: validation, then the device's allocator. */
#include <stdlib.h>
#include <string.h>

#include "runtime/alloc/caching_allocator.h"
#include "runtime/hal/hal_internal.h"
#include "runtime/hal/trace.h"

static loom_status device_allocator(int device, loom_allocator **out, const char *what) {
  *out = NULL;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) {
    /* loom_error formats into the buffer loom_last_error() reads from */
    char reason[512];
    snprintf(reason, sizeof reason, "%s", loom_last_error());
    return loom_error(st, "%s: %s", what, reason);
  }
  *out = rt->devices[device].allocator;
  return LOOM_OK;
}

loom_status loom_malloc(int device, size_t size, loom_stream_t *stream, void **out_ptr) {
  if (!out_ptr) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_malloc: out_ptr is NULL");
  *out_ptr = NULL;
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_malloc");
  if (st != LOOM_OK) return st;
  if (!stream) {
    stream = loom_runtime_get()->devices[device].default_stream;
  } else {
    if ((st = loom_check_stream(stream, "loom_malloc")) != LOOM_OK) return st;
    if (stream->device != device)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "loom_malloc: stream of loom:%d used for memory on loom:%d",
                        stream->device, device);
  }
  if (size == 0) return LOOM_OK;
  /* A capturing stream allocates from its graph's pool. */
  const uint64_t pool = atomic_load_explicit(&stream->capture_pool, memory_order_acquire);
  return loom_allocator_malloc(a, size, stream, pool ? pool : stream->id, out_ptr);
}

loom_status loom_free(void *ptr) {
  if (!ptr) return LOOM_OK;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  int device = loom_allocator_owner(ptr, NULL);
  if (device < 0 || device >= rt->num_devices)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_free: %p is not loom device memory", ptr);
  return loom_allocator_free(rt->devices[device].allocator, ptr);
}

loom_status loom_record_stream(void *ptr, loom_stream_t *stream) {
  loom_status st = loom_check_stream(stream, "loom_record_stream");
  if (st != LOOM_OK) return st;
  if (!ptr) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_record_stream: ptr is NULL");
  loom_runtime *rt = stream->rt;
  int device = loom_allocator_owner(ptr, NULL);
  if (device < 0 || device >= rt->num_devices)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_record_stream: %p is not loom device memory", ptr);
  return loom_allocator_record_stream(rt->devices[device].allocator, ptr, stream, stream->id);
}

loom_status loom_memory_detach(void *ptr, int *out_fd, size_t *out_size) {
  if (!ptr || !out_fd || !out_size)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_detach: NULL argument");
  *out_fd = -1;
  *out_size = 0;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  const int device = loom_allocator_owner(ptr, NULL);
  if (device < 0 || device >= rt->num_devices)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_detach: %p is not loom device memory",
                      ptr);
  return loom_allocator_detach(rt->devices[device].allocator, ptr, out_fd, out_size);
}

int loom_pointer_device(const void *ptr) {
  if (!ptr) return -1;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return -1;
  int device = loom_allocator_owner(ptr, NULL);
  if (device < 0 || device >= rt->num_devices) return -1;
  return loom_allocator_extent(rt->devices[device].allocator, ptr) ? device : -1;
}

loom_status loom_memory_stats_get(int device, loom_memory_stats *out) {
  if (!out) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_stats_get: out is NULL");
  memset(out, 0, sizeof *out);
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_stats_get");
  if (st != LOOM_OK) return st;
  loom_allocator_stats(a, out);
  return LOOM_OK;
}

loom_status loom_memory_reset_peak(int device) {
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_reset_peak");
  if (st == LOOM_OK) loom_allocator_reset_peak(a);
  return st;
}

loom_status loom_memory_reset_accumulated(int device) {
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_reset_accumulated");
  if (st == LOOM_OK) loom_allocator_reset_accumulated(a);
  return st;
}

loom_status loom_memory_empty_cache(int device) {
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_empty_cache");
  if (st == LOOM_OK) loom_allocator_empty_cache(a);
  return st;
}

loom_status loom_memory_info(int device, size_t *out_free, size_t *out_total) {
  if (!out_free || !out_total)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_info: out pointer is NULL");
  *out_free = *out_total = 0;
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_info");
  if (st == LOOM_OK) loom_allocator_info(a, out_free, out_total);
  return st;
}

/* ---- snapshots and events ------------------------------------------------ */

loom_status loom_memory_snapshot(int device, loom_memory_segment_fn fn, void *user) {
  if (!fn) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_snapshot: fn is NULL");
  loom_allocator *a;
  loom_status st = device_allocator(device, &a, "loom_memory_snapshot");
  if (st != LOOM_OK) return st;
  return loom_allocator_snapshot(a, fn, user);
}

loom_status loom_memory_block_query(const void *ptr, int *out_device, uint64_t *out_stream_id,
                                    loom_memory_block_info *out_block) {
  if (!out_device || !out_stream_id || !out_block)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_memory_block_query: out pointer is NULL");
  *out_device = -1;
  *out_stream_id = 0;
  memset(out_block, 0, sizeof *out_block);
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  const int device = ptr ? loom_allocator_owner(ptr, NULL) : -1;
  if (device < 0 || device >= rt->num_devices)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_memory_block_query: %p is not loom device memory", ptr);
  loom_status st = loom_allocator_block_query(rt->devices[device].allocator, ptr, out_stream_id,
                                              out_block);
  if (st == LOOM_OK) *out_device = device;
  return st;
}

loom_status loom_memory_set_observer(const loom_memory_observer *observer) {
  if (observer && !observer->fn)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memory_set_observer: fn is NULL");
  loom_allocator_set_observer(observer);
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return LOOM_OK; /* no allocator: nobody can be calling it */
  for (int d = 0; d < rt->num_devices; ++d)
    if (rt->devices[d].allocator) loom_allocator_quiesce(rt->devices[d].allocator);
  return LOOM_OK;
}

/* ---- copies ------------------------------------------------------------- */

/* Device memory must lie inside one live block, whole. */
static loom_status check_device_range(loom_runtime *rt, int device, const void *ptr, size_t size,
                                      const char *side) {
  size_t extent = loom_allocator_extent(rt->devices[device].allocator, ptr);
  if (extent < size)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_memcpy: %s range [%p, +%zu) is not inside one live block of loom:%d",
                      side, ptr, size, device);
  return LOOM_OK;
}

/* A traced copy's name, by where its sides live. */
static const char *copy_name(int dst_on_device, int src_on_device) {
  if (dst_on_device) return src_on_device ? "memcpy DtoD" : "memcpy HtoD";
  return src_on_device ? "memcpy DtoH" : "memcpy HtoH";
}

/* Enqueues the checked copy `cmd`, staging or waiting as its pageable
 * sides require. Inlined in both of loom_memcpy's paths: the untraced one
 * must cost what it did before tracing existed. */
static inline __attribute__((always_inline)) loom_status submit_copy(loom_runtime *rt, loom_stream_t *stream, loom_command *cmd,
                               int dst_pageable, int src_pageable) {
  /* A copy from or to pageable memory is synchronous for the caller's
   * buffer anyway; on an idle stream it is cheapest done right here. */
  if ((dst_pageable || src_pageable) && rt->driver->queue_run_inline &&
      rt->driver->queue_run_inline(rt->driver->context, stream->queue, cmd) == LOOM_OK)
    return LOOM_OK;
  loom_status st;
  if (dst_pageable) {
    /* The caller reads dst on return: run in order, then wait. */
    if ((st = loom_stream_submit(rt, stream, cmd)) != LOOM_OK) return st;
    return loom_stream_synchronize(stream);
  }
  if (src_pageable) {
    const size_t size = cmd->u.copy.size;
    void *staging = malloc(size);
    if (!staging)
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY,
                        "loom_memcpy: out of host memory staging %zu bytes", size);
    memcpy(staging, cmd->u.copy.src, size);
    cmd->u.copy.src = staging;
    cmd->release = free;
    cmd->release_arg = staging;
  }
  st = loom_stream_submit(rt, stream, cmd);
  if (st != LOOM_OK && cmd->release) cmd->release(cmd->release_arg);
  return st;
}

/* A copy enqueued on a capturing stream: the caller would read a pageable
 * destination on return, which nothing has written; a pageable source is
 * staged into memory the graph keeps, so replays copy what it held now. */
static loom_status capture_copy(loom_stream_t *stream, loom_command *cmd, int dst_on_device,
                                int src_on_device, int dst_pageable, int src_pageable) {
  if (dst_pageable)
    return loom_graph_refuse(stream, "loom_memcpy to pageable host memory (a host read)");
  cmd->name = copy_name(dst_on_device, src_on_device);
  if (src_pageable) {
    void *staging = malloc(cmd->u.copy.size);
    if (!staging)
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY,
                        "loom_memcpy: out of host memory staging %zu bytes", cmd->u.copy.size);
    memcpy(staging, cmd->u.copy.src, cmd->u.copy.size);
    cmd->u.copy.src = staging;
    cmd->release = free;
    cmd->release_arg = staging;
  }
  loom_status st = loom_graph_capture_command(stream, cmd, LOOM_TRACE_COPY, 0);
  if (st != LOOM_OK && cmd->release) cmd->release(cmd->release_arg);
  return st;
}

loom_status loom_memcpy(loom_stream_t *stream, void *dst, const void *src, size_t size) {
  loom_status st = loom_check_stream(stream, "loom_memcpy");
  if (st != LOOM_OK) return st;
  loom_runtime *rt = stream->rt;
  if ((st = loom_stream_take_error(stream)) != LOOM_OK) return st;
  if (size == 0) return LOOM_OK;
  if (!dst || !src) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_memcpy: NULL pointer");
  const int dst_dev = loom_allocator_owner(dst, NULL), src_dev = loom_allocator_owner(src, NULL);
  if (dst_dev >= 0 && (st = check_device_range(rt, dst_dev, dst, size, "destination")) != LOOM_OK)
    return st;
  if (src_dev >= 0 && (st = check_device_range(rt, src_dev, src, size, "source")) != LOOM_OK)
    return st;
  const int dst_pageable = dst_dev < 0 && !loom_host_is_pinned(dst);
  const int src_pageable = src_dev < 0 && !loom_host_is_pinned(src);
  loom_command cmd = {.kind = LOOM_COMMAND_COPY, .name = "memcpy",
                      .u.copy = {.dst = dst, .src = src, .size = size}};
  if (__builtin_expect(loom_stream_capture(stream) != NULL, 0))
    return capture_copy(stream, &cmd, dst_dev >= 0, src_dev >= 0, dst_pageable, src_pageable);
  if (!loom_trace_on()) return submit_copy(rt, stream, &cmd, dst_pageable, src_pageable);
  cmd.name = copy_name(dst_dev >= 0, src_dev >= 0);
  loom_trace_record enqueue;
  const int traced = loom_trace_command(rt, stream, &cmd, LOOM_TRACE_COPY, 0, &enqueue);
  st = submit_copy(rt, stream, &cmd, dst_pageable, src_pageable);
  if (traced) loom_trace_enqueued(stream, &cmd, st, &enqueue, "loom_memcpy");
  return st;
}
