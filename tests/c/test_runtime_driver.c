/* The driver interface: a minimal driver written only against
 * loom/driver.h, with every optional slot NULL, runs the whole HAL. Its
 * queues execute each command synchronously at submission. */
#include <stdint.h>
#include <stdlib.h>

#include "loom/driver.h"
#include "loom/hal.h"
#include "test_util.h"

struct loom_driver_queue {
  loom_stream_t *owner;
  int submitted;
};

static int segments_live;

static loom_status sync_init(void *ctx, const loom_driver_config *config, int *out_count) {
  *out_count = 1;
  return LOOM_OK;
}

static loom_status sync_segment_alloc(void *ctx, int device, size_t size, void **out_ptr) {
  *out_ptr = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!*out_ptr) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "sync driver: no memory");
  ++segments_live;
  return LOOM_OK;
}

static void sync_segment_free(void *ctx, int device, void *ptr, size_t size) {
  --segments_live;
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

static loom_status sync_queue_submit(void *ctx, loom_driver_queue *q, const loom_command *c) {
  ++q->submitted;
  switch (c->kind) {
    case LOOM_COMMAND_LAUNCH: {
      const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                     .num_tensors = c->u.launch.num_tensors,
                                     .tensors = c->u.launch.tensors,
                                     .num_scalars = c->u.launch.num_scalars,
                                     .scalars = c->u.launch.scalars,
                                     .range = c->u.launch.range, .grain = c->u.launch.grain};
      for (int64_t b = 0; b < args.range; b += args.grain) {
        int rc = c->u.launch.fn(&args, b, b + args.grain < args.range ? b + args.grain : args.range);
        if (rc) {
          loom_driver_report_error(q->owner, loom_kernel_status(rc), "%s: %s", c->name,
                                   loom_status_name(loom_kernel_status(rc)));
          break;
        }
      }
      break;
    }
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

static int square_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *x = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) {
    if (x[i] < 0) return LOOM_ERROR_INVALID_ARGUMENT;
    x[i] *= x[i];
  }
  return 0;
}

static void test_register_rejects_incomplete(void) {
  loom_driver broken = sync_driver;
  broken.queue_submit = NULL;
  CHECK_EQ_INT(loom_driver_register(&broken), LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_hal_on_minimal_driver(void) {
  CHECK_OK(loom_driver_register(&sync_driver));
  loom_shutdown(); /* the next call starts on the new driver */
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  CHECK(strcmp(props.driver, "sync") == 0);
  CHECK_EQ_INT(loom_device_count(), 1);
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  enum { N = 1000 };
  float host[N], *dev = NULL;
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CHECK_OK(loom_malloc(0, sizeof host, s, (void **)&dev));
  CHECK_EQ_INT(segments_live, 1);
  CHECK_OK(loom_memcpy(s, dev, host, sizeof host));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {N}, .strides = {1}};
  loom_launch_desc d = {.name = "square", .fn = square_kernel, .tensors = &t, .num_tensors = 1,
                        .range = N, .grain = 64};
  CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_run_now(0, &d)); /* the front end's default: chunks in order */
  loom_event_t *a = NULL, *b = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &a));
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &b));
  CHECK_OK(loom_event_record(a, s));
  CHECK_OK(loom_event_record(b, s));
  double ms = -1;
  CHECK_OK(loom_event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 0);
  CHECK_OK(loom_memcpy(s, host, dev, sizeof host));
  CHECK(host[3] == 81.0f);
  host[5] = -1;
  CHECK_OK(loom_memcpy(s, dev, host, sizeof host));
  CHECK_OK(loom_launch(s, &d));
  CHECK_EQ_INT(loom_stream_synchronize(s), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "square") != NULL);
  CHECK_OK(loom_stream_synchronize(s));
  loom_event_release(a);
  loom_event_release(b);
  CHECK_OK(loom_free(dev));
  loom_stream_release(s);
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_EQ_INT(segments_live, 0);
}

int main(void) {
  RUN_TEST(test_register_rejects_incomplete);
  RUN_TEST(test_hal_on_minimal_driver);
  loom_shutdown();
  TEST_MAIN_END();
}
