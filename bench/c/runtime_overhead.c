/* runtime_overhead — what the loom runtime costs per operation.
 *
 * Measures, on device 0's default stream (best of several trials):
 *   enqueue_us      loom_launch of a one-chunk kernel, caller side only
 *   pipelined_us    launch + execute, many ops in flight, per op
 *   roundtrip_us    launch then synchronize, one op at a time
 *   malloc_free_us  loom_malloc + loom_free of 4 KiB (cache hit)
 *   d2h_small_us    256-byte device-to-pageable copy (waits)
 *   h2d_small_us    256-byte pageable-to-device copy (staged)
 *   parallel_us     a 64-chunk launch over 4 MiB of floats (y = 2x + 1)
 * PyTorch CPU eager spends about 2-4 us per tiny op; the runtime's share
 * of a loom op should stay well under that.
 *
 * Output: one JSON object on stdout.
 * Usage: runtime_overhead [--quick] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/hal.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int add_one(const loom_kernel_args *a, int64_t begin, int64_t end) {
  float *x = a->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) x[i] += 1.0f;
  return 0;
}

static int axpb(const loom_kernel_args *a, int64_t begin, int64_t end) {
  float *y = a->tensors[0].data;
  const float *x = a->tensors[1].data;
  for (int64_t i = begin; i < end; ++i) y[i] = 2.0f * x[i] + 1.0f;
  return 0;
}

#define CHECK(expr)                                                             \
  do {                                                                          \
    loom_status st_ = (expr);                                                   \
    if (st_ != LOOM_OK) {                                                       \
      fprintf(stderr, "%s: %s\n", #expr, loom_last_error());                    \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

int main(int argc, char **argv) {
  const int quick = argc > 1 && !strcmp(argv[1], "--quick");
  const int n = quick ? 20000 : 200000, trials = quick ? 3 : 5;
  loom_stream_t *s;
  CHECK(loom_stream_default(0, &s));
  float *tiny;
  CHECK(loom_malloc(0, 64 * sizeof(float), s, (void **)&tiny));
  loom_tensor t = {.data = tiny, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64}, .strides = {1}};
  loom_launch_desc d = {.name = "add_one", .fn = add_one, .tensors = &t, .num_tensors = 1,
                        .range = 64, .grain = 64};
  const int64_t big_n = 1 << 20;
  float *x, *y;
  CHECK(loom_malloc(0, big_n * sizeof(float), s, (void **)&x));
  CHECK(loom_malloc(0, big_n * sizeof(float), s, (void **)&y));
  loom_tensor big[2] = {{.data = y, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {big_n}, .strides = {1}},
                        {.data = x, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {big_n}, .strides = {1}}};
  loom_launch_desc par = {.name = "axpb", .fn = axpb, .tensors = big, .num_tensors = 2,
                          .range = big_n, .grain = big_n / 64};
  float host[64] = {0};
  double enqueue = 1e9, pipelined = 1e9, roundtrip = 1e9, mf = 1e9, d2h = 1e9, h2d = 1e9,
         parallel = 1e9;
  for (int trial = 0; trial < trials; ++trial) {
    double t0 = now();
    for (int i = 0; i < n; ++i) CHECK(loom_launch(s, &d));
    double t1 = now();
    CHECK(loom_stream_synchronize(s));
    double t2 = now();
    if ((t1 - t0) / n < enqueue) enqueue = (t1 - t0) / n;
    if ((t2 - t0) / n < pipelined) pipelined = (t2 - t0) / n;
    t0 = now();
    for (int i = 0; i < n / 20; ++i) {
      CHECK(loom_launch(s, &d));
      CHECK(loom_stream_synchronize(s));
    }
    t1 = now();
    if ((t1 - t0) / (n / 20) < roundtrip) roundtrip = (t1 - t0) / (n / 20);
    t0 = now();
    for (int i = 0; i < n; ++i) {
      void *p;
      CHECK(loom_malloc(0, 4096, s, &p));
      CHECK(loom_free(p));
    }
    t1 = now();
    if ((t1 - t0) / n < mf) mf = (t1 - t0) / n;
    t0 = now();
    for (int i = 0; i < n / 10; ++i) CHECK(loom_memcpy(s, host, tiny, sizeof host));
    t1 = now();
    if ((t1 - t0) / (n / 10) < d2h) d2h = (t1 - t0) / (n / 10);
    t0 = now();
    for (int i = 0; i < n / 10; ++i) CHECK(loom_memcpy(s, tiny, host, sizeof host));
    CHECK(loom_stream_synchronize(s));
    t1 = now();
    if ((t1 - t0) / (n / 10) < h2d) h2d = (t1 - t0) / (n / 10);
    t0 = now();
    for (int i = 0; i < 200; ++i) CHECK(loom_launch(s, &par));
    CHECK(loom_stream_synchronize(s));
    t1 = now();
    if ((t1 - t0) / 200 < parallel) parallel = (t1 - t0) / 200;
  }
  loom_device_props props;
  CHECK(loom_device_properties(0, &props));
  printf("{\"threads\": %d, \"enqueue_us\": %.3f, \"pipelined_us\": %.3f, \"roundtrip_us\": %.3f, "
         "\"malloc_free_us\": %.3f, \"d2h_small_us\": %.3f, \"h2d_small_us\": %.3f, "
         "\"parallel_us\": %.1f, \"parallel_gbps\": %.1f}\n",
         props.num_threads, enqueue * 1e6, pipelined * 1e6, roundtrip * 1e6, mf * 1e6, d2h * 1e6,
         h2d * 1e6, parallel * 1e6, 8.0 * (double)big_n / parallel / 1e9);
  CHECK(loom_free(tiny));
  CHECK(loom_free(x));
  CHECK(loom_free(y));
  loom_shutdown();
  return 0;
}
