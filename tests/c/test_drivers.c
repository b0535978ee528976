/* The drivers the HAL tests run over (see test_drivers.h), and "sync": a
 * minimal driver written only against loom/driver.h, with every optional
 * slot NULL. Its queues execute each command on the submitting thread,
 * before queue_submit returns; its memory is plain host memory. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test_drivers.h"

/* ---- the sync driver ---------------------------------------------------------- */

struct loom_driver_queue {
  loom_stream_t *owner;
};

static atomic_int segments_live;

static loom_status sync_init(void *ctx, const loom_driver_config *config, int *out_count) {
  *out_count = config->num_devices > 0 ? config->num_devices : 1;
  return LOOM_OK;
}

static loom_status sync_segment_alloc(void *ctx, int device, size_t size, void **out_ptr) {
  *out_ptr = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!*out_ptr) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "sync driver: no memory");
  atomic_fetch_add(&segments_live, 1);
  return LOOM_OK;
}

static void sync_segment_free(void *ctx, int device, void *ptr, size_t size) {
  atomic_fetch_sub(&segments_live, 1);
  free(ptr);
}

static loom_status sync_queue_create(void *ctx, int device, int priority, loom_stream_t *owner,
                                     loom_driver_queue **out_queue) {
  loom_driver_queue *q = calloc(1, sizeof *q);
  if (!q) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "sync driver: no memory");
  q->owner = owner;
  *out_queue = q;
  return LOOM_OK;
}

static void sync_queue_destroy(void *ctx, loom_driver_queue *q) { free(q); }

/* The chunks in order; the first failure is the stream's error, with the
 * kernel's own reason when it gave one. */
static void sync_launch(loom_driver_queue *q, const loom_command *c) {
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                 .num_tensors = c->u.launch.num_tensors,
                                 .tensors = c->u.launch.tensors,
                                 .num_scalars = c->u.launch.num_scalars,
                                 .scalars = c->u.launch.scalars,
                                 .range = c->u.launch.range, .grain = c->u.launch.grain};
  loom_clear_error();
  /* Stepping by chunk end: begin + grain may overflow. */
  for (int64_t begin = 0, end; begin < args.range; begin = end) {
    end = args.range - begin > args.grain ? begin + args.grain : args.range;
    const int rc = c->u.launch.fn(&args, begin, end);
    if (rc == 0) continue;
    const loom_status st = loom_kernel_status(rc);
    if (loom_last_error()[0])
      loom_driver_report_error(q->owner, st, "%s: %s", c->name, loom_last_error());
    else
      loom_driver_report_error(q->owner, st, "%s: %s (kernel returned %d on [%lld, %lld) of %lld)",
                               c->name, loom_status_name(st), rc, (long long)begin,
                               (long long)end, (long long)args.range);
    return;
  }
}

static loom_status sync_queue_submit(void *ctx, loom_driver_queue *q, const loom_command *c) {
  const uint64_t t0 = c->trace ? loom_trace_now() : 0;
  switch (c->kind) {
    case LOOM_COMMAND_LAUNCH:
      sync_launch(q, c);
      break;
    case LOOM_COMMAND_COPY:
      memmove(c->u.copy.dst, c->u.copy.src, c->u.copy.size);
      break;
    case LOOM_COMMAND_EVENT_RECORD:
      loom_driver_event_complete(c->u.event.event, c->u.event.sequence);
      break;
    case LOOM_COMMAND_EVENT_WAIT:
      loom_driver_event_wait(c->u.event.event, c->u.event.sequence);
      break;
    case LOOM_COMMAND_CALLBACK:
      c->u.callback.fn(c->u.callback.user);
      break;
  }
  if (c->trace) loom_driver_trace_report(c, t0, loom_trace_now());
  if (c->release) c->release(c->release_arg);
  return LOOM_OK;
}

static loom_status sync_queue_query(void *ctx, loom_driver_queue *q) { return LOOM_OK; }
static loom_status sync_queue_synchronize(void *ctx, loom_driver_queue *q) { return LOOM_OK; }

static const loom_driver sync_driver = {
    .api_version = LOOM_DRIVER_API_VERSION,
    .name = "sync",
    .init = sync_init,
    .segment_alloc = sync_segment_alloc,
    .segment_free = sync_segment_free,
    .queue_create = sync_queue_create,
    .queue_destroy = sync_queue_destroy,
    .queue_submit = sync_queue_submit,
    .queue_query = sync_queue_query,
    .queue_synchronize = sync_queue_synchronize,
};

const loom_driver *test_sync_driver(void) { return &sync_driver; }
int test_sync_segments_live(void) { return atomic_load(&segments_live); }

/* ---- the list -------------------------------------------------------------- */

static const test_driver drivers[] = {
    {.name = "host",
     .features = TEST_DRIVER_ASYNC | TEST_DRIVER_POOL | TEST_DRIVER_KERNELS |
                 TEST_DRIVER_ALIGNED_SEGMENTS},
    {.name = "guarded",
     .features = TEST_DRIVER_ASYNC | TEST_DRIVER_POOL | TEST_DRIVER_KERNELS |
                 TEST_DRIVER_ALIGNED_SEGMENTS | TEST_DRIVER_GUARDED},
    {.name = "sync", .features = 0},
};

static const test_driver *current;

/* 1 if LOOM_TEST_DRIVERS is unset or empty, or lists `name`. */
static int wanted(const char *name) {
  const char *list = getenv("LOOM_TEST_DRIVERS");
  if (!list || !*list) return 1;
  const size_t len = strlen(name);
  for (const char *p = list; *p;) {
    const size_t item = strcspn(p, ",");
    if (item == len && !strncmp(p, name, len)) return 1;
    p += item + (p[item] == ',');
  }
  return 0;
}

loom_status test_driver_start(int pass, const test_driver **out_driver) {
  static int registered;
  *out_driver = NULL;
  loom_shutdown();
  current = NULL;
  if (!registered) {
    loom_status st = loom_driver_register(&sync_driver);
    if (st != LOOM_OK) return st;
    registered = 1;
  }
  int seen = 0;
  for (size_t i = 0; i < sizeof drivers / sizeof *drivers; ++i) {
    if (!wanted(drivers[i].name) || seen++ != pass) continue;
    current = *out_driver = &drivers[i];
    setenv("LOOM_DRIVER", drivers[i].name, 1);
    return loom_init();
  }
  return LOOM_OK;
}

const test_driver *test_driver_current(void) { return current; }
