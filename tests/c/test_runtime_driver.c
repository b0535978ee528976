/* The driver interface: registration and selection, and the whole HAL on
 * every driver, the minimal synchronous one (test_drivers.c, every optional
 * slot NULL) included. */
#include <stdint.h>
#include <stdlib.h>

#include "test_drivers.h"

static int square_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *x = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) {
    if (x[i] < 0) return LOOM_ERROR_INVALID_ARGUMENT;
    x[i] *= x[i];
  }
  return 0;
}

static void test_register_rejects_incomplete(void) {
  loom_driver broken = *test_sync_driver();
  broken.queue_submit = NULL;
  CHECK_EQ_INT(loom_driver_register(&broken), LOOM_ERROR_INVALID_ARGUMENT);
}

/* Without LOOM_DRIVER the most recently registered driver runs (the test
 * drivers registered sync); an unknown name refuses to start. */
static void test_selection(void) {
  const char *was = getenv("LOOM_DRIVER");
  char saved[32];
  snprintf(saved, sizeof saved, "%s", was ? was : "");
  unsetenv("LOOM_DRIVER");
  loom_shutdown();
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  CHECK(strcmp(props.driver, "sync") == 0);
  setenv("LOOM_DRIVER", "no-such-driver", 1);
  loom_shutdown();
  CHECK_EQ_INT(loom_init(), LOOM_ERROR_UNAVAILABLE);
  CHECK(strstr(loom_last_error(), "no-such-driver") != NULL);
  CHECK_EQ_INT(loom_device_count(), 0);
  setenv("LOOM_DRIVER", saved, 1);
  loom_shutdown();
  CHECK_OK(loom_init());
}

static int64_t segments(void) {
  loom_memory_stats s;
  loom_memory_stats_get(0, &s);
  return s.segment[LOOM_POOL_ALL].current;
}

/* Memory, copies both ways, launches through the queue and run_now, timing
 * events, and an asynchronous error with the stream usable afterwards. */
static void test_hal_round_trip(void) {
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  CHECK(strcmp(props.driver, test_driver_current()->name) == 0);
  CHECK_EQ_INT(loom_device_count(), 1);
  CHECK_OK(loom_memory_empty_cache(0));
  const int64_t segments_before = segments();
  const int sync_before = test_sync_segments_live();
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  enum { N = 1000 };
  float host[N], *dev = NULL;
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CHECK_OK(loom_malloc(0, sizeof host, s, (void **)&dev));
  CHECK_EQ_INT(segments() - segments_before, 1);
  if (!strcmp(props.driver, "sync")) CHECK_EQ_INT(test_sync_segments_live() - sync_before, 1);
  CHECK_OK(loom_memcpy(s, dev, host, sizeof host));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {N}, .strides = {1}};
  loom_launch_desc d = {.name = "square", .fn = square_kernel, .tensors = &t, .num_tensors = 1,
                        .range = N, .grain = 64};
  CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_run_now(0, &d)); /* sync: the front end's default, chunks in order */
  loom_event_t *a = NULL, *b = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &a));
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &b));
  CHECK_OK(loom_event_record(a, s));
  CHECK_OK(loom_event_record(b, s));
  double ms = -1;
  CHECK_OK(loom_event_synchronize(b));
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
  CHECK_EQ_INT(segments(), segments_before);
  CHECK_EQ_INT(test_sync_segments_live(), sync_before);
}

int main(void) {
  RUN_TEST(test_register_rejects_incomplete);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_hal_round_trip);
    RUN_TEST(test_selection);
  }
  TEST_MAIN_END();
}
