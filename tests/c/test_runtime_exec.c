/* Kernel execution: chunk boundaries independent of the thread count, and
 * many host threads allocating, launching and copying at once. */
#define _GNU_SOURCE /* sched_getcpu, CPU sets */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_drivers.h"

/* out[i] = begin * 1000003 + end for every i of the chunk: a fingerprint of
 * the chunk boundaries. */
static int boundary_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int64_t *out = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) out[i] = begin * 1000003 + end;
  return 0;
}

enum { RANGE = 100003, GRAIN = 997 };

static void run_boundaries(int64_t *host, int via_stream) {
  int64_t *dev = NULL;
  CHECK_OK(loom_malloc(0, RANGE * sizeof(int64_t), NULL, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_INT64, .rank = 1, .sizes = {RANGE}, .strides = {1}};
  loom_launch_desc d = {.name = "boundaries", .fn = boundary_kernel, .tensors = &t,
                        .num_tensors = 1, .range = RANGE, .grain = GRAIN};
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  if (via_stream) CHECK_OK(loom_launch(s, &d));
  else CHECK_OK(loom_run_now(0, &d));
  CHECK_OK(loom_memcpy(s, host, dev, RANGE * sizeof(int64_t)));
  CHECK_OK(loom_free(dev));
}

static void test_determinism_across_thread_counts(void) {
  int64_t *one = malloc(RANGE * sizeof *one), *two = malloc(RANGE * sizeof *two);
  int64_t *two_now = malloc(RANGE * sizeof *two_now);
  loom_device_props props;
  /* A driver without a pool reports one thread whatever LOOM_NUM_THREADS
   * says; the chunks must be the same either way. */
  const int pool = test_driver_has(TEST_DRIVER_POOL);
  setenv("LOOM_NUM_THREADS", "1", 1);
  loom_shutdown();
  CHECK_OK(loom_device_properties(0, &props));
  CHECK_EQ_INT(props.num_threads, 1);
  run_boundaries(one, 1);
  setenv("LOOM_NUM_THREADS", "2", 1);
  loom_shutdown();
  CHECK_OK(loom_device_properties(0, &props));
  CHECK_EQ_INT(props.num_threads, pool ? 2 : 1);
  run_boundaries(two, 1);
  run_boundaries(two_now, 0);
  int bad = 0;
  for (int64_t i = 0; i < RANGE; ++i) {
    const int64_t begin = i / GRAIN * GRAIN, end = begin + GRAIN < RANGE ? begin + GRAIN : RANGE;
    bad += one[i] != begin * 1000003 + end;
    bad += two[i] != one[i];
    bad += two_now[i] != one[i];
  }
  CHECK_EQ_INT(bad, 0);
  free(one);
  free(two);
  free(two_now);
  unsetenv("LOOM_NUM_THREADS");
}

static int fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int32_t *out = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) out[i] = (int32_t)(args->scalars[0].i + i);
  return 0;
}

typedef struct worker_arg {
  int index, use_default_stream, failures;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  loom_stream_t *s = NULL;
  if (w->use_default_stream) loom_stream_default(0, &s);
  else if (loom_stream_create(0, 0, &s) != LOOM_OK) {
    w->failures++;
    return NULL;
  }
  int32_t *host = malloc(70000 * sizeof *host);
  for (int it = 0; it < 150; ++it) {
    const int64_t n = 1 + (it * 7919 + w->index * 104729) % 70000;
    int32_t *dev = NULL;
    if (loom_malloc(0, n * sizeof(int32_t), s, (void **)&dev) != LOOM_OK) {
      w->failures++;
      continue;
    }
    loom_tensor t = {.data = dev, .dtype = LOOM_INT32, .rank = 1, .sizes = {n}, .strides = {1}};
    loom_scalar base = {.i = it * 1000 + w->index};
    loom_launch_desc d = {.name = "fill", .fn = fill_kernel, .tensors = &t, .num_tensors = 1,
                          .scalars = &base, .num_scalars = 1, .range = n, .grain = 4096};
    if (loom_launch(s, &d) != LOOM_OK) w->failures++;
    if (loom_memcpy(s, host, dev, n * sizeof(int32_t)) != LOOM_OK) w->failures++;
    for (int64_t i = 0; i < n; ++i)
      if (host[i] != (int32_t)(base.i + i)) {
        w->failures++;
        break;
      }
    /* Free while the next iteration's work may already be queued. */
    if (loom_free(dev) != LOOM_OK) w->failures++;
    (void)loom_pointer_device(dev);
  }
  free(host);
  if (!w->use_default_stream) {
    loom_stream_synchronize(s);
    loom_stream_release(s);
  }
  return NULL;
}

static void test_concurrent_threads(void) {
  enum { THREADS = 5 };
  pthread_t threads[THREADS];
  worker_arg args[THREADS];
  CHECK_OK(loom_memory_reset_accumulated(0));
  for (int i = 0; i < THREADS; ++i) {
    args[i] = (worker_arg){.index = i, .use_default_stream = i < 2};
    pthread_create(&threads[i], NULL, worker, &args[i]);
  }
  for (int i = 0; i < THREADS; ++i) {
    pthread_join(threads[i], NULL);
    CHECK_EQ_INT(args[i].failures, 0);
  }
  loom_memory_stats s;
  CHECK_OK(loom_memory_stats_get(0, &s));
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.allocated_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.active_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].allocated, THREADS * 150);
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_stats_get(0, &s));
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 0);
}

static int fail_at_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return begin == args->scalars[0].i ? LOOM_ERROR_NOT_SUPPORTED : 0;
}

static int count_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int64_t *calls = args->tensors[0].data;
  __atomic_fetch_add(calls, 1, __ATOMIC_RELAXED);
  return begin == 0 && end == args->range ? 0 : LOOM_ERROR_INTERNAL;
}

/* A grain larger than the range (even INT64_MAX) is one chunk. */
static void test_huge_grain(void) {
  int64_t *calls = NULL, count = 0;
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  CHECK_OK(loom_malloc(0, sizeof *calls, NULL, (void **)&calls));
  CHECK_OK(loom_memcpy(s, calls, &count, sizeof count));
  loom_tensor t = {.data = calls, .dtype = LOOM_INT64};
  loom_launch_desc d = {.name = "count", .fn = count_kernel, .tensors = &t, .num_tensors = 1,
                        .range = INT64_MAX - 5, .grain = INT64_MAX};
  CHECK_OK(loom_run_now(0, &d));
  CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_memcpy(s, &count, calls, sizeof count));
  CHECK_EQ_INT(count, 2);
  CHECK_OK(loom_free(calls));
}

static void test_run_now_error(void) {
  loom_scalar at = {.i = 50};
  loom_launch_desc d = {.name = "fail_at", .fn = fail_at_kernel, .scalars = &at,
                        .num_scalars = 1, .range = 100, .grain = 10};
  CHECK_EQ_INT(loom_run_now(0, &d), LOOM_ERROR_NOT_SUPPORTED);
  CHECK(strstr(loom_last_error(), "fail_at: LOOM_ERROR_NOT_SUPPORTED") != NULL);
  CHECK(strstr(loom_last_error(), "[50, 60)") != NULL);
}

/* Fails on the chunk holding element scalars[0], saying why. */
static int bad_index_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const int64_t at = args->scalars[0].i;
  if (at < begin || at >= end) return 0;
  return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE, "index %lld is out of bounds",
                    (long long)(at * 10));
}

/* A kernel's own reason reaches the stream's error, whichever thread ran the
 * failing chunk, and the stream is clean afterwards. */
static void test_kernel_reason(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  for (int64_t at = 0; at < 1000; at += 333) {
    loom_scalar sc = {.i = at};
    loom_launch_desc d = {.name = "lookup", .fn = bad_index_kernel, .scalars = &sc,
                          .num_scalars = 1, .range = 1000, .grain = 7};
    CHECK_OK(loom_launch(s, &d));
    CHECK_EQ_INT(loom_stream_synchronize(s), LOOM_ERROR_INDEX_OUT_OF_RANGE);
    char want[64];
    snprintf(want, sizeof want, "lookup: index %lld is out of bounds", (long long)(at * 10));
    CHECK(strstr(loom_last_error(), want) != NULL);
    CHECK_OK(loom_stream_synchronize(s));
    CHECK_EQ_INT(loom_run_now(0, &d), LOOM_ERROR_INDEX_OUT_OF_RANGE);
    CHECK(strstr(loom_last_error(), want) != NULL);
  }
  /* a kernel that gives no reason still gets the runtime's description */
  loom_scalar at = {.i = 50};
  loom_launch_desc f = {.name = "fail_at", .fn = fail_at_kernel, .scalars = &at,
                        .num_scalars = 1, .range = 100, .grain = 10};
  CHECK_OK(loom_launch(s, &f));
  CHECK_EQ_INT(loom_stream_synchronize(s), LOOM_ERROR_NOT_SUPPORTED);
  CHECK(strstr(loom_last_error(), "fail_at: LOOM_ERROR_NOT_SUPPORTED") != NULL);
  loom_stream_release(s);
}

/* The pool keeps its workers off the CPU of the thread that owns a launch
 * (host_pool.c): each chunk records where it ran, and a worker's chunk its
 * own allowed CPUs. Chunks spin 1 ms, so the worker joins. */
enum { AFF_CHUNKS = 24 };
static pthread_t aff_owner;
static int aff_cpu[AFF_CHUNKS], aff_is_owner[AFF_CHUNKS];
static cpu_set_t aff_mask[AFF_CHUNKS];

static int affinity_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)args;
  const int owner = pthread_equal(pthread_self(), aff_owner);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000L);
  aff_cpu[begin] = sched_getcpu();
  aff_is_owner[begin] = owner;
  if (!owner) sched_getaffinity(0, sizeof aff_mask[begin], &aff_mask[begin]);
  (void)end;
  return 0;
}

static void test_workers_kept_off_the_owner(void) {
  TEST_REQUIRE(TEST_DRIVER_POOL,
               "no worker pool: every chunk runs on the calling thread, so there are no "
               "workers to keep off its CPU");
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  setenv("LOOM_NUM_THREADS", "2", 1);
  loom_shutdown();
  loom_launch_desc d = {.name = "affinity", .fn = affinity_kernel, .range = AFF_CHUNKS,
                        .grain = 1};
  aff_owner = pthread_self();
  int worker_chunks = 0;
  for (int rep = 0; rep < 3; ++rep) {
    memset(aff_is_owner, 0, sizeof aff_is_owner);
    CHECK_OK(loom_run_now(0, &d));
    int owner_cpu = -1;
    for (int i = 0; i < AFF_CHUNKS && owner_cpu < 0; ++i)
      if (aff_is_owner[i]) owner_cpu = aff_cpu[i];
    for (int i = 0; i < AFF_CHUNKS; ++i) {
      if (aff_is_owner[i] || owner_cpu < 0 || CPU_COUNT(&mine) < 2) continue;
      ++worker_chunks;
      CHECK(!CPU_ISSET(owner_cpu, &aff_mask[i]));
      CHECK(CPU_COUNT(&aff_mask[i]) >= 1 && aff_cpu[i] != owner_cpu);
    }
  }
  if (CPU_COUNT(&mine) >= 2) CHECK(worker_chunks > 0);
  else printf("  (one CPU: the worker has nowhere else to go)\n");
  unsetenv("LOOM_NUM_THREADS");
  loom_shutdown();
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_determinism_across_thread_counts);
    RUN_TEST(test_concurrent_threads);
    RUN_TEST(test_run_now_error);
    RUN_TEST(test_huge_grain);
    RUN_TEST(test_kernel_reason);
    RUN_TEST(test_workers_kept_off_the_owner);
  }
  TEST_MAIN_END();
}
