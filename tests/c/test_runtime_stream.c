/* Streams, events and asynchronous errors of the HAL. */
#include <stdatomic.h>

#include "loom/hal.h"
#include "test_util.h"

/* Spins for scalars[0].f seconds; kernels may not call the OS to sleep. */
static int spin_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const double until = test_now() + args->scalars[0].f;
  while (test_now() < until) {
  }
  return 0;
}

/* Writes float(i) * scalars[0].f into tensor 0. */
static int fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *out = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) out[i] = (float)i * (float)args->scalars[0].f;
  return 0;
}

static int fail_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return begin >= 10 ? LOOM_ERROR_INVALID_ARGUMENT : 0;
}

static loom_launch_desc spin_desc(const loom_scalar *seconds) {
  return (loom_launch_desc){.name = "spin", .fn = spin_kernel, .scalars = seconds,
                            .num_scalars = 1, .range = 1, .grain = 1};
}

static void test_async_launch(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  loom_scalar seconds = {.f = 0.05};
  loom_launch_desc d = spin_desc(&seconds);
  CHECK_OK(loom_launch(s, &d));
  CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_stream_query(s));
  loom_stream_release(s);
}

static void test_fill_and_copy(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  const int64_t n = 100000;
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, n * sizeof(float), s, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {n}, .strides = {1}};
  loom_scalar k = {.f = 2.0};
  loom_launch_desc d = {.name = "fill", .fn = fill_kernel, .tensors = &t, .num_tensors = 1,
                        .scalars = &k, .num_scalars = 1, .range = n, .grain = 1000};
  CHECK_OK(loom_launch(s, &d));
  float *host = malloc(n * sizeof(float));
  CHECK_OK(loom_memcpy(s, host, dev, n * sizeof(float)));
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += host[i] != (float)i * 2.0f;
  CHECK_EQ_INT(bad, 0);
  free(host);
  CHECK_OK(loom_free(dev));
}

static void test_async_error(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  loom_launch_desc d = {.name = "aten::div", .fn = fail_kernel, .range = 100, .grain = 10};
  CHECK_OK(loom_launch(s, &d));
  loom_status st = loom_stream_synchronize(s);
  CHECK_EQ_INT(st, LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "aten::div") != NULL);
  CHECK(strstr(loom_last_error(), "LOOM_ERROR_INVALID_ARGUMENT") != NULL);
  /* Cleared: the stream works again. */
  CHECK_OK(loom_stream_synchronize(s));
  loom_scalar seconds = {.f = 0.0};
  loom_launch_desc ok = spin_desc(&seconds);
  CHECK_OK(loom_launch(s, &ok));
  CHECK_OK(loom_stream_synchronize(s));
  loom_stream_release(s);
}

static void test_events(void) {
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  loom_event_t *start = NULL, *end = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &start));
  CHECK_OK(loom_event_create(0, LOOM_EVENT_TIMING, &end));
  loom_scalar seconds = {.f = 0.02};
  loom_launch_desc d = spin_desc(&seconds);
  CHECK_OK(loom_event_record(start, a));
  CHECK_OK(loom_launch(a, &d));
  CHECK_OK(loom_event_record(end, a));
  CHECK_OK(loom_stream_wait_event(b, end));
  CHECK_OK(loom_stream_synchronize(b));
  CHECK_OK(loom_event_query(end));
  double ms = 0;
  CHECK_OK(loom_event_elapsed_ms(start, end, &ms));
  CHECK(ms > 0);
  loom_event_release(start);
  loom_event_release(end);
  loom_stream_release(a);
  loom_stream_release(b);
}

int main(void) {
  RUN_TEST(test_async_launch);
  RUN_TEST(test_fill_and_copy);
  RUN_TEST(test_async_error);
  RUN_TEST(test_events);
  loom_shutdown();
  TEST_MAIN_END();
}
