/* Streams, events and asynchronous errors of the HAL. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "test_drivers.h"

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

static int always_fail_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return LOOM_ERROR_INVALID_ARGUMENT;
}

/* Spins until the test opens the gate: asynchrony checks that cannot be
 * fooled by a slow or busy machine. Open the gate before any call that
 * waits for the stream. */
static atomic_int gate;

/* Why a test that uses the gate cannot run on a synchronous driver. */
#define GATED                                                                       \
  "commands run inside their submission: a kernel that spins until the test opens " \
  "its gate would spin on the test's own thread forever"

static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  while (!atomic_load(&gate)) {
  }
  return 0;
}

static const loom_launch_desc gate_desc = {.name = "gate", .fn = gate_kernel, .range = 1,
                                           .grain = 1};

static loom_launch_desc spin_desc(const loom_scalar *seconds) {
  return (loom_launch_desc){.name = "spin", .fn = spin_kernel, .scalars = seconds,
                            .num_scalars = 1, .range = 1, .grain = 1};
}

static void test_async_launch(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(s, &gate_desc));
  CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY);
  CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY);
  atomic_store(&gate, 1);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_stream_query(s));
  loom_stream_release(s);
}

/* x[i] read through a copy on `s` (which waits for it). */
static float element(loom_stream_t *s, const float *x, int i) {
  float v = -1.0f;
  CHECK_OK(loom_memcpy(s, &v, x + i, sizeof v));
  return v;
}

/* LOOM_LAUNCH_MAY_RUN_INLINE: on an idle stream the host driver runs a tiny
 * launch before returning; a failure is recorded on the stream, not
 * returned by the launch. */
static void test_inline_launch(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *x = NULL;
  CHECK_OK(loom_malloc(0, 16 * sizeof(float), s, (void **)&x));
  loom_tensor t = {.data = x, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {16}, .strides = {1}};
  loom_scalar two = {.f = 2.0};
  loom_launch_desc fill = {.name = "fill", .fn = fill_kernel, .tensors = &t, .num_tensors = 1,
                           .scalars = &two, .num_scalars = 1, .range = 16, .grain = 16,
                           .flags = LOOM_LAUNCH_MAY_RUN_INLINE};
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_launch(s, &fill));
  CHECK_OK(loom_stream_query(s)); /* ran inline (sync: at submission): nothing left queued */
  CHECK(element(s, x, 15) == 30.0f);
  /* an inline failure surfaces at the next synchronization */
  loom_launch_desc fail = {.name = "fail", .fn = always_fail_kernel, .range = 1, .grain = 1,
                           .flags = LOOM_LAUNCH_MAY_RUN_INLINE};
  CHECK_OK(loom_launch(s, &fail));
  CHECK_EQ_INT(loom_stream_synchronize(s), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "fail: ") != NULL);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_free(x));
  loom_stream_release(s);
}

/* Behind pending work an inline launch waits its turn on the executor. */
static void test_inline_launch_waits_its_turn(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  loom_stream_t *s = NULL, *peek = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  CHECK_OK(loom_stream_create(0, 0, &peek)); /* reads x without waiting for s */
  float *x = NULL;
  CHECK_OK(loom_malloc(0, 16 * sizeof(float), s, (void **)&x));
  loom_tensor t = {.data = x, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {16}, .strides = {1}};
  loom_scalar k = {.f = 2.0};
  loom_launch_desc fill = {.name = "fill", .fn = fill_kernel, .tensors = &t, .num_tensors = 1,
                           .scalars = &k, .num_scalars = 1, .range = 16, .grain = 16,
                           .flags = LOOM_LAUNCH_MAY_RUN_INLINE};
  CHECK_OK(loom_launch(s, &fill));
  CHECK_OK(loom_stream_synchronize(s));
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(s, &gate_desc));
  k.f = 3.0;
  CHECK_OK(loom_launch(s, &fill));
  CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY);
  CHECK(element(peek, x, 15) == 30.0f);
  atomic_store(&gate, 1);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK(element(s, x, 15) == 45.0f);
  CHECK_OK(loom_free(x));
  loom_stream_release(peek);
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

/* Waits for the gate, then stores 1 into tensor 0 (an int32). */
static int slow_set_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  gate_kernel(args, begin, end);
  *(volatile int32_t *)args->tensors[0].data = 1;
  return 0;
}

/* tensor 1 := tensor 0 + 1 (int32 scalars). */
static int plus_one_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  *(int32_t *)args->tensors[1].data = *(volatile int32_t *)args->tensors[0].data + 1;
  return 0;
}

static void test_cross_stream_order(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, -1, &b));
  CHECK_EQ_INT(loom_stream_priority(b), -1);
  int32_t *x = NULL;
  CHECK_OK(loom_malloc(0, 2 * sizeof(int32_t), a, (void **)&x));
  const int32_t zeros[2] = {0, 0};
  CHECK_OK(loom_memcpy(a, x, zeros, sizeof zeros));
  loom_tensor tx = {.data = x, .dtype = LOOM_INT32}, ty = {.data = x + 1, .dtype = LOOM_INT32};
  loom_tensor both[2] = {tx, ty};
  loom_launch_desc set = {.name = "slow_set", .fn = slow_set_kernel, .tensors = &tx,
                          .num_tensors = 1, .range = 1, .grain = 1};
  loom_launch_desc add = {.name = "plus_one", .fn = plus_one_kernel, .tensors = both,
                          .num_tensors = 2, .range = 1, .grain = 1};
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));
  CHECK_OK(loom_event_query(e)); /* never recorded: complete */
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(a, &set));
  CHECK_OK(loom_event_record(e, a));
  CHECK_EQ_INT(loom_event_query(e), LOOM_ERROR_NOT_READY);
  CHECK_OK(loom_stream_wait_event(b, e));
  CHECK_OK(loom_launch(b, &add));
  CHECK_EQ_INT(loom_stream_query(b), LOOM_ERROR_NOT_READY); /* held by the event */
  atomic_store(&gate, 1);
  int32_t out[2] = {0, 0};
  CHECK_OK(loom_memcpy(b, out, x, sizeof out));
  CHECK_EQ_INT(out[0], 1);
  CHECK_EQ_INT(out[1], 2);
  CHECK_OK(loom_event_synchronize(e));
  double ms;
  CHECK_EQ_INT(loom_event_elapsed_ms(e, e, &ms), LOOM_ERROR_INVALID_ARGUMENT); /* no timing */
  loom_event_release(e);
  CHECK_OK(loom_free(x));
  loom_stream_release(a);
  loom_stream_release(b);
}

/* An event re-recorded on an idle stream while its first capture is still
 * pending: a stream that waited on the first capture stays held until that
 * capture completes, not until the later one does. */
static void test_event_rerecorded_on_another_stream(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  loom_stream_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  CHECK_OK(loom_stream_create(0, 0, &c));
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(a, &gate_desc));
  CHECK_OK(loom_event_record(e, a));     /* capture 1: behind the gate */
  CHECK_OK(loom_stream_wait_event(c, e)); /* c waits for capture 1 */
  CHECK_OK(loom_event_record(e, b));     /* capture 2: b is idle */
  CHECK_OK(loom_stream_synchronize(b));  /* capture 2 is done */
  CHECK_EQ_INT(loom_event_query(e), LOOM_OK);
  /* Give a wrongly released c ample time to drain; the gate holds a. */
  for (int i = 0; i < 50 && loom_stream_query(c) == LOOM_ERROR_NOT_READY; ++i) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  CHECK_EQ_INT(loom_stream_query(c), LOOM_ERROR_NOT_READY); /* still held */
  CHECK_EQ_INT(loom_stream_query(a), LOOM_ERROR_NOT_READY);
  atomic_store(&gate, 1);
  CHECK_OK(loom_stream_synchronize(c));
  CHECK_OK(loom_stream_synchronize(a));
  CHECK_OK(loom_event_synchronize(e));
  loom_event_release(e);
  loom_stream_release(a);
  loom_stream_release(b);
  loom_stream_release(c);
}

/* Pageable source: staged, so overwriting it right away is safe even while
 * the copy still waits behind a gated kernel. */
static void test_memcpy_pageable_source_staged(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  enum { N = 4096 };
  unsigned char *dev = NULL, *pageable = malloc(N), *back = malloc(N);
  CHECK_OK(loom_malloc(0, N, s, (void **)&dev));
  memset(pageable, 1, N);
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(s, &gate_desc));
  CHECK_OK(loom_memcpy(s, dev, pageable, N));
  memset(pageable, 2, N);
  CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY); /* the copy has not run yet */
  atomic_store(&gate, 1);
  CHECK_OK(loom_memcpy(s, back, dev, N));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += back[i] != 1;
  CHECK_EQ_INT(bad, 0);
  free(pageable);
  free(back);
  CHECK_OK(loom_free(dev));
  loom_stream_release(s);
}

static void test_memcpy_kinds(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  enum { N = 4096 };
  unsigned char *dev = NULL, *dev2 = NULL, *pinned = NULL;
  CHECK_OK(loom_malloc(0, N, s, (void **)&dev));
  CHECK_OK(loom_malloc(0, N, s, (void **)&dev2));
  CHECK_OK(loom_host_malloc(N, (void **)&pinned));
  unsigned char *pageable = malloc(N), *back = malloc(N);
  loom_scalar seconds = {.f = 0.03};
  loom_launch_desc slow = {.name = "slow", .fn = spin_kernel, .scalars = &seconds,
                           .num_scalars = 1, .range = 1, .grain = 1};
  /* Pageable to device. */
  memset(pageable, 1, N);
  CHECK_OK(loom_memcpy(s, dev, pageable, N));
  /* Device to device, then device to pinned (asynchronous). */
  CHECK_OK(loom_memcpy(s, dev2, dev, N));
  memset(pinned, 0, N);
  CHECK_OK(loom_memcpy(s, pinned, dev2, N));
  CHECK_OK(loom_stream_synchronize(s));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += pinned[i] != 1;
  CHECK_EQ_INT(bad, 0);
  /* Pinned to device, then pageable destination: written on return. */
  memset(pinned, 7, N);
  CHECK_OK(loom_memcpy(s, dev, pinned, N));
  CHECK_OK(loom_launch(s, &slow));
  CHECK_OK(loom_memcpy(s, back, dev, N));
  bad = 0;
  for (int i = 0; i < N; ++i) bad += back[i] != 7;
  CHECK_EQ_INT(bad, 0);
  /* Interior pointers and ranges past a block's end. */
  CHECK_OK(loom_memcpy(s, back, dev + 100, N - 100));
  CHECK_EQ_INT(loom_memcpy(s, back, dev + 100, N), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "loom_memcpy") != NULL);
  CHECK_EQ_INT(loom_memcpy(NULL, back, dev, N), LOOM_ERROR_INVALID_ARGUMENT);
  free(pageable);
  free(back);
  CHECK_OK(loom_host_free(pinned));
  CHECK_OK(loom_free(dev));
  CHECK_OK(loom_free(dev2));
  loom_stream_release(s);
}

typedef struct order_log {
  int values[8];
  atomic_int count;
} order_log;

static order_log callback_log;

static void log_callback(void *user) {
  int i = atomic_load(&callback_log.count);
  if (i < 8) callback_log.values[i] = (int)(intptr_t)user;
  atomic_store(&callback_log.count, i + 1);
}

static void test_host_callbacks_in_order(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  loom_scalar seconds = {.f = 0.01};
  loom_launch_desc slow = spin_desc(&seconds);
  atomic_store(&callback_log.count, 0);
  for (int i = 0; i < 4; ++i) {
    if (i == 2) CHECK_OK(loom_launch(s, &slow));
    CHECK_OK(loom_host_callback(s, log_callback, (void *)(intptr_t)i, "log"));
  }
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_EQ_INT(callback_log.count, 4);
  for (int i = 0; i < 4; ++i) CHECK_EQ_INT(callback_log.values[i], i);
  loom_stream_release(s);
}

/* Threads that synchronize at different points of a long queue: each
 * returns once the commands it saw submitted are done, whichever waiter's
 * wake-up comes first, and none is left asleep. */
static atomic_int counted;

static int count_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  spin_kernel(args, begin, end);
  atomic_fetch_add(&counted, 1);
  return 0;
}

typedef struct syncer {
  loom_stream_t *stream;
  pthread_t thread;
  int submitted, seen;
  loom_status status;
} syncer;

static void *syncer_main(void *arg) {
  syncer *y = arg;
  y->status = loom_stream_synchronize(y->stream);
  y->seen = atomic_load(&counted);
  return NULL;
}

static void test_concurrent_synchronizers(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, GATED);
  enum { WAITERS = 4, PER_WAITER = 8 };
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  const loom_scalar seconds = {.f = 2e-4};
  const loom_launch_desc count = {.name = "count", .fn = count_kernel, .scalars = &seconds,
                                  .num_scalars = 1, .range = 1, .grain = 1};
  atomic_store(&counted, 0);
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(s, &gate_desc)); /* all waiters asleep before any completes */
  syncer y[WAITERS];
  for (int w = 0; w < WAITERS; ++w) {
    for (int i = 0; i < PER_WAITER; ++i) CHECK_OK(loom_launch(s, &count));
    y[w] = (syncer){.stream = s, .submitted = (w + 1) * PER_WAITER};
    CHECK(pthread_create(&y[w].thread, NULL, syncer_main, &y[w]) == 0);
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL); /* it waits on its own target */
  }
  atomic_store(&gate, 1);
  for (int w = WAITERS - 1; w >= 0; --w) {
    CHECK(pthread_join(y[w].thread, NULL) == 0);
    CHECK_OK(y[w].status);
    CHECK(y[w].seen >= y[w].submitted);
  }
  CHECK_EQ_INT(atomic_load(&counted), WAITERS * PER_WAITER);
  loom_stream_release(s);
}

static void test_bad_arguments(void) {
  loom_stream_t *s = NULL;
  CHECK_EQ_INT(loom_stream_create(3, 0, &s), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(strstr(loom_last_error(), "invalid device index 3") != NULL);
  CHECK_OK(loom_stream_default(0, &s));
  loom_launch_desc d = {.name = "bad_grain", .fn = fail_kernel, .range = 10, .grain = 0};
  CHECK_EQ_INT(loom_launch(s, &d), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "bad_grain") != NULL);
  d = (loom_launch_desc){.name = "empty", .fn = fail_kernel, .range = 0, .grain = 1};
  CHECK_OK(loom_launch(s, &d));
  CHECK_EQ_INT(loom_launch(NULL, &d), LOOM_ERROR_INVALID_ARGUMENT);
  loom_event_t *e = NULL;
  CHECK_EQ_INT(loom_event_create(0, 0x80, &e), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_event_record(NULL, s), LOOM_ERROR_INVALID_ARGUMENT);
  loom_device_props props;
  CHECK_EQ_INT(loom_device_properties(-1, &props), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_device_properties(0, &props));
  CHECK(strcmp(props.driver, test_driver_current()->name) == 0);
  CHECK(props.num_threads >= 1);
  CHECK_EQ_INT(loom_device_count(), 1);
  CHECK(strcmp(loom_status_name(LOOM_ERROR_NOT_READY), "LOOM_ERROR_NOT_READY") == 0);
}

static void test_error_surfaces_at_launch_and_device_sync(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  loom_launch_desc bad = {.name = "aten::remainder", .fn = fail_kernel, .range = 100, .grain = 10};
  loom_scalar seconds = {.f = 0.0};
  loom_launch_desc ok = spin_desc(&seconds);
  atomic_store(&callback_log.count, 0);
  CHECK_OK(loom_launch(s, &bad));
  CHECK_OK(loom_host_callback(s, log_callback, NULL, "after"));
  /* Wait for the failure without synchronizing (which would clear it);
   * the callback after the failing kernel still runs. */
  while (atomic_load(&callback_log.count) < 1) {
  }
  CHECK_EQ_INT(loom_launch(s, &ok), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "aten::remainder") != NULL);
  CHECK_OK(loom_launch(s, &bad));
  CHECK_EQ_INT(loom_device_synchronize(0), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "aten::remainder") != NULL);
  CHECK_OK(loom_device_synchronize(0));
  loom_stream_release(s);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_async_launch);
    RUN_TEST(test_inline_launch);
    RUN_TEST(test_inline_launch_waits_its_turn);
    RUN_TEST(test_fill_and_copy);
    RUN_TEST(test_async_error);
    RUN_TEST(test_events);
    RUN_TEST(test_cross_stream_order);
    RUN_TEST(test_event_rerecorded_on_another_stream);
    RUN_TEST(test_memcpy_pageable_source_staged);
    RUN_TEST(test_memcpy_kinds);
    RUN_TEST(test_host_callbacks_in_order);
    RUN_TEST(test_concurrent_synchronizers);
    RUN_TEST(test_bad_arguments);
    RUN_TEST(test_error_surfaces_at_launch_and_device_sync);
  }
  TEST_MAIN_END();
}
