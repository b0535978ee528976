/* The host driver: the machine's CPU cores as an asynchronous device.
 * "Device" memory is mapped host memory, so kernels get real pointers. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/registry.h"
#include "base/cpu.h"
#include "base/env.h"
#include "runtime/drivers/host/host_fuse.h"
#include "runtime/drivers/host/host_internal.h"

static host_context host_ctx;

static void host_shutdown(void *ctx) {
  host_context *c = ctx;
  host_fuse_region_hook(0);
  for (int d = 0; d < c->num_devices; ++d) host_pool_destroy(&c->devices[d].pool);
  free(c->devices);
  c->devices = NULL;
  c->num_devices = 0;
}

uint64_t host_queue_depth_from_env(void) {
  const char *text = getenv("LOOM_QUEUE_DEPTH");
  if (!text || !*text) return HOST_QUEUE_DEPTH_DEFAULT;
  char *end = NULL;
  const long long depth = strtoll(text, &end, 10);
  if (*end || depth < 0) {
    fprintf(stderr, "loom: LOOM_QUEUE_DEPTH=%s is not a count >= 0; using %d\n", text,
            HOST_QUEUE_DEPTH_DEFAULT);
    return HOST_QUEUE_DEPTH_DEFAULT;
  }
  return (uint64_t)depth;
}

static loom_status host_init(void *ctx, const loom_driver_config *config, int *out_count) {
  host_context *c = ctx;
  c->config = *config;
  c->queue_depth = host_queue_depth_from_env();
  c->devices = calloc((size_t)config->num_devices, sizeof *c->devices);
  if (!c->devices) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_init: out of host memory");
  /* Simulated devices share the cores: each gets an equal slice, at least
   * its executor. A process of a torchrun job uses loom:<LOCAL_RANK>: that
   * device gets all the process's threads, the others only executors. */
  int per_device = config->num_threads / config->num_devices;
  if (per_device < 1) per_device = 1;
  const int local_rank = loom_env_local_rank();
  const int used = local_rank < config->num_devices ? local_rank : -1;
  for (int d = 0; d < config->num_devices; ++d) {
    const int threads = used < 0 ? per_device : d == used ? config->num_threads : 1;
    c->devices[d].threads = threads;
    if (host_pool_init(&c->devices[d].pool, threads - 1) != 0) {
      c->num_devices = d;
      host_shutdown(c);
      return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_init: cannot start worker threads");
    }
    c->num_devices = d + 1;
  }
  *out_count = c->num_devices;
  host_fuse_region_hook(1); /* adaptive eager hears of freed blocks */
  return LOOM_OK;
}

static loom_status host_device_properties(void *ctx, int device, loom_device_props *out) {
  host_context *c = ctx;
  const char *cpu = loom_cpu_name();
  snprintf(out->name, sizeof out->name, "loom host (%s)", *cpu ? cpu : "CPU");
  out->num_threads = c->devices[device].pool.num_workers + 1;
  out->major = 1;
  out->minor = 0;
  out->features = loom_cpu_features();
  out->flags |= LOOM_DEVICE_HOST_ADDRESSABLE;
  return LOOM_OK;
}

static loom_status host_run_now(void *ctx, int device, const loom_command *command) {
  return host_execute_launch(ctx, device, 0, command, NULL);
}

/* The host driver's kernels are the C kernel library. */
static loom_status host_kernel_resolve(void *ctx, const char *name, loom_kernel_impl *out) {
  const loom_kernel_entry *e = loom_kernel_library_find(name);
  if (!e) return LOOM_ERROR_NOT_SUPPORTED;
  *out = (loom_kernel_impl){.fn = e->fn, .plan = e->plan};
  host_fuse_declare(e->fn, loom_kernel_library_flags(name));
  return LOOM_OK;
}

static const loom_driver host_driver = {
    .api_version = LOOM_DRIVER_API_VERSION,
    .name = "host",
    .context = &host_ctx,
    .init = host_init,
    .shutdown = host_shutdown,
    .device_properties = host_device_properties,
    .segment_alloc = host_segment_alloc,
    .segment_free = host_segment_free,
    .queue_create = host_queue_create,
    .queue_destroy = host_queue_destroy,
    .queue_submit = host_queue_submit,
    .queue_query = host_queue_query,
    .queue_synchronize = host_queue_synchronize,
    .run_now = host_run_now,
    .queue_run_inline = host_queue_run_inline,
    .kernel_resolve = host_kernel_resolve,
    .segment_detach = host_segment_detach,
};

const loom_driver *loom_host_driver(void) { return &host_driver; }
