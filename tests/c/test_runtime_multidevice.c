/* LOOM_NUM_DEVICES=2: separate memory and statistics, cross-device copies,
 * and cross-device misuse rejected. */
#include <stdlib.h>

#include "test_drivers.h"

static int fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *out = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) out[i] = (float)(i + args->scalars[0].i);
  return 0;
}

static void test_two_devices(void) {
  CHECK_EQ_INT(loom_device_count(), 2);
  loom_device_props p0, p1;
  CHECK_OK(loom_device_properties(0, &p0));
  CHECK_OK(loom_device_properties(1, &p1));
  CHECK_EQ_INT(p1.index, 1);
  CHECK(p0.num_threads >= 1 && p1.num_threads >= 1);
}

static void test_separate_stats_and_copy(void) {
  enum { N = 50000 };
  loom_stream_t *s0 = NULL, *s1 = NULL;
  CHECK_OK(loom_stream_default(0, &s0));
  CHECK_OK(loom_stream_create(1, 0, &s1));
  CHECK_EQ_INT(loom_stream_device(s1), 1);
  float *a = NULL, *b = NULL;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s0, (void **)&a));
  CHECK_OK(loom_malloc(1, 3 * N * sizeof(float), s1, (void **)&b));
  CHECK_EQ_INT(loom_pointer_device(a), 0);
  CHECK_EQ_INT(loom_pointer_device(b + N), 1);
  loom_memory_stats m0, m1;
  CHECK_OK(loom_memory_stats_get(0, &m0));
  CHECK_OK(loom_memory_stats_get(1, &m1));
  CHECK_EQ_INT(m0.allocated_bytes[LOOM_POOL_ALL].current, 200192);
  CHECK_EQ_INT(m1.allocated_bytes[LOOM_POOL_ALL].current, 600064);
  loom_tensor t = {.data = a, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {N}, .strides = {1}};
  loom_scalar base = {.i = 5};
  loom_launch_desc d = {.name = "fill", .fn = fill_kernel, .tensors = &t, .num_tensors = 1,
                        .scalars = &base, .num_scalars = 1, .range = N, .grain = 1024};
  CHECK_OK(loom_launch(s0, &d));
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, 0, &e));
  CHECK_OK(loom_event_record(e, s0));
  CHECK_OK(loom_stream_wait_event(s1, e)); /* cross-device wait is allowed */
  CHECK_OK(loom_memcpy(s1, b + N, a, N * sizeof(float)));
  float *host = malloc(N * sizeof(float));
  CHECK_OK(loom_memcpy(s1, host, b + N, N * sizeof(float)));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += host[i] != (float)(i + 5);
  CHECK_EQ_INT(bad, 0);
  /* Misuse across devices. */
  CHECK_EQ_INT(loom_event_record(e, s1), LOOM_ERROR_INVALID_ARGUMENT);
  void *p = NULL;
  CHECK_EQ_INT(loom_malloc(0, 16, s1, &p), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_device_synchronize(1));
  loom_event_release(e);
  free(host);
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  loom_stream_release(s1);
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_stats_get(0, &m0));
  CHECK_OK(loom_memory_stats_get(1, &m1));
  CHECK_EQ_INT(m0.reserved_bytes[LOOM_POOL_ALL].current, 0);
  CHECK(m1.reserved_bytes[LOOM_POOL_ALL].current > 0); /* device 1 keeps its cache */
}

int main(void) {
  setenv("LOOM_NUM_DEVICES", "2", 1);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_two_devices);
    RUN_TEST(test_separate_stats_and_copy);
  }
  TEST_MAIN_END();
}
