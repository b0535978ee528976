/* The guarded driver: the host driver's table, with device memory at
 * addresses the host cannot dereference (see guarded_driver.h).
 *
 * Every slot that hands the host driver a command first translates the
 * device addresses in it (a launch's tensor descriptors, a copy's two
 * sides) to their aliases. Kernels receive device memory only through
 * tensor descriptors (scalars carry numbers, never addresses), so these are
 * all the addresses there are. */
#include <stdio.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "runtime/drivers/guarded/guarded_driver.h"
#include "runtime/drivers/guarded/guarded_internal.h"

/* Device address space per byte of device memory: room for the allocator's
 * segments however they fragment it, at no cost but address space. */
#define GUARDED_SPACE_FACTOR 4
#define GUARDED_MAX_SPACE ((size_t)16 << 40)

typedef struct guarded_context {
  const loom_driver *host;
  guarded_arena arena;
} guarded_context;

static guarded_context guarded_ctx = {.arena = {.lock = PTHREAD_MUTEX_INITIALIZER}};

static loom_status guarded_init(void *ctx, const loom_driver_config *config, int *out_count) {
  guarded_context *c = ctx;
  c->host = loom_host_driver();
  loom_status st = c->host->init(c->host->context, config, out_count);
  if (st != LOOM_OK) return st;
  const uint64_t devices = config->num_devices > 0 ? (uint64_t)config->num_devices : 1;
  const uint64_t limit = config->memory_limit;
  const uint64_t cap = GUARDED_MAX_SPACE / GUARDED_SPACE_FACTOR / devices;
  const size_t space = (size_t)((limit < cap ? limit : cap) * devices * GUARDED_SPACE_FACTOR);
  if ((st = guarded_arena_reserve(&c->arena, space)) != LOOM_OK) {
    c->host->shutdown(c->host->context);
    return st;
  }
  guarded_fault_install();
  guarded_fault_watch(c->arena.guard, c->arena.alias, c->arena.size);
  return LOOM_OK;
}

static void guarded_shutdown(void *ctx) {
  guarded_context *c = ctx;
  guarded_fault_watch(NULL, NULL, 0);
  c->host->shutdown(c->host->context);
  guarded_arena_release(&c->arena);
}

static loom_status guarded_device_properties(void *ctx, int device, loom_device_props *out) {
  guarded_context *c = ctx;
  loom_status st = c->host->device_properties(c->host->context, device, out);
  if (st != LOOM_OK) return st;
  const char *cpu = loom_cpu_name();
  snprintf(out->name, sizeof out->name, "loom guarded (%s)", *cpu ? cpu : "CPU");
  out->flags &= ~(uint32_t)LOOM_DEVICE_HOST_ADDRESSABLE; /* the point of this driver */
  return LOOM_OK;
}

static loom_status guarded_segment_alloc(void *ctx, int device, size_t size, void **out_ptr) {
  guarded_context *c = ctx;
  return guarded_arena_map(&c->arena, size, out_ptr);
}

static void guarded_segment_free(void *ctx, int device, void *ptr, size_t size) {
  guarded_context *c = ctx;
  guarded_arena_unmap(&c->arena, ptr, size);
}

/* A command as the host driver must see it. Launches of up to this many
 * tensors translate on the stack. */
#define GUARDED_STACK_TENSORS 8

typedef struct translated {
  loom_command command;
  loom_tensor stack[GUARDED_STACK_TENSORS];
  loom_tensor *heap;
} translated;

static loom_status translate(const guarded_arena *a, const loom_command *in, translated *out) {
  out->command = *in;
  out->heap = NULL;
  if (in->kind == LOOM_COMMAND_COPY) {
    out->command.u.copy.dst = guarded_to_alias(a, in->u.copy.dst);
    out->command.u.copy.src = guarded_to_alias(a, in->u.copy.src);
    return LOOM_OK;
  }
  if (in->kind != LOOM_COMMAND_LAUNCH || in->u.launch.num_tensors == 0) return LOOM_OK;
  const uint32_t n = in->u.launch.num_tensors;
  loom_tensor *t = out->stack;
  if (n > GUARDED_STACK_TENSORS && !(t = out->heap = malloc(n * sizeof *t)))
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory enqueuing", in->name);
  for (uint32_t i = 0; i < n; ++i) {
    t[i] = in->u.launch.tensors[i];
    /* A kernel on a discrete device reaches device memory only: host
     * memory here would work on the host driver and nowhere else. */
    if (t[i].data && !guarded_is_device(a, t[i].data) && loom_tensor_numel(&t[i]) > 0) {
      free(out->heap);
      out->heap = NULL;
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "%s: tensor %u of the launch is at %p, which is not device memory "
                        "(guarded driver)", in->name, i, t[i].data);
    }
    t[i].data = guarded_to_alias(a, t[i].data);
  }
  out->command.u.launch.tensors = t;
  return LOOM_OK;
}

static loom_status guarded_queue_create(void *ctx, int device, int priority, loom_stream_t *owner,
                                        loom_driver_queue **out_queue) {
  guarded_context *c = ctx;
  return c->host->queue_create(c->host->context, device, priority, owner, out_queue);
}

static void guarded_queue_destroy(void *ctx, loom_driver_queue *queue) {
  guarded_context *c = ctx;
  c->host->queue_destroy(c->host->context, queue);
}

/* The host driver copies descriptors at submission, so the translated ones
 * need live only as long as the call. */
static loom_status guarded_queue_submit(void *ctx, loom_driver_queue *queue,
                                        const loom_command *command) {
  guarded_context *c = ctx;
  translated t;
  loom_status st = translate(&c->arena, command, &t);
  if (st == LOOM_OK) st = c->host->queue_submit(c->host->context, queue, &t.command);
  free(t.heap);
  return st;
}

static loom_status guarded_queue_query(void *ctx, loom_driver_queue *queue) {
  guarded_context *c = ctx;
  return c->host->queue_query(c->host->context, queue);
}

static loom_status guarded_queue_synchronize(void *ctx, loom_driver_queue *queue) {
  guarded_context *c = ctx;
  return c->host->queue_synchronize(c->host->context, queue);
}

static loom_status guarded_run_now(void *ctx, int device, const loom_command *command) {
  guarded_context *c = ctx;
  translated t;
  loom_status st = translate(&c->arena, command, &t);
  if (st == LOOM_OK) st = c->host->run_now(c->host->context, device, &t.command);
  free(t.heap);
  return st;
}

static loom_status guarded_queue_run_inline(void *ctx, loom_driver_queue *queue,
                                            const loom_command *command) {
  guarded_context *c = ctx;
  translated t;
  loom_status st = translate(&c->arena, command, &t);
  if (st == LOOM_OK) st = c->host->queue_run_inline(c->host->context, queue, &t.command);
  free(t.heap);
  return st;
}

/* The host driver's kernels: they run on the translated addresses. */
static loom_status guarded_kernel_resolve(void *ctx, const char *name, loom_kernel_impl *out) {
  const loom_driver *host = loom_host_driver();
  return host->kernel_resolve(host->context, name, out);
}

static const loom_driver guarded_driver = {
    .api_version = LOOM_DRIVER_API_VERSION,
    .name = "guarded",
    .context = &guarded_ctx,
    .init = guarded_init,
    .shutdown = guarded_shutdown,
    .device_properties = guarded_device_properties,
    .segment_alloc = guarded_segment_alloc,
    .segment_free = guarded_segment_free,
    .queue_create = guarded_queue_create,
    .queue_destroy = guarded_queue_destroy,
    .queue_submit = guarded_queue_submit,
    .queue_query = guarded_queue_query,
    .queue_synchronize = guarded_queue_synchronize,
    .run_now = guarded_run_now,
    .queue_run_inline = guarded_queue_run_inline,
    .kernel_resolve = guarded_kernel_resolve,
};

const loom_driver *loom_guarded_driver(void) { return &guarded_driver; }
