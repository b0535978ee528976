/* The per-device memory limit: out-of-memory, its message, cache release
 * and retry, and a device that stays usable afterwards. */
#include <stdlib.h>

#include "test_drivers.h"

#define MiB ((size_t)1 << 20)

static loom_memory_stats stats(void) {
  loom_memory_stats s;
  loom_memory_stats_get(0, &s);
  return s;
}

static void test_limit_reported(void) {
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  CHECK_EQ_INT(props.total_memory, 64 * MiB);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(loom_memory_info(0, &free_bytes, &total));
  CHECK_EQ_INT(total, 64 * MiB);
  CHECK_EQ_INT(free_bytes, 64 * MiB);
}

static void test_oom(void) {
  void *p = NULL, *big = NULL;
  CHECK_OK(loom_malloc(0, 30 * MiB, NULL, &p));
  loom_status st = loom_malloc(0, 100 * MiB, NULL, &big);
  CHECK_EQ_INT(st, LOOM_ERROR_OUT_OF_MEMORY);
  CHECK(big == NULL);
  const char *msg = loom_last_error();
  CHECK(strstr(msg, "tried to allocate 100.00 MiB on loom:0") != NULL);
  CHECK(strstr(msg, "34.00 MiB free of 64.00 MiB limit") != NULL);
  CHECK(strstr(msg, "30.00 MiB allocated") != NULL);
  CHECK(strstr(msg, "30.00 MiB reserved") != NULL);
  if (test_failed) fprintf(stderr, "message: %s\n", msg);
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.num_ooms, 1);
  CHECK_EQ_INT(s.num_alloc_retries, 1);
  CHECK(s.reserved_bytes[LOOM_POOL_ALL].peak <= (int64_t)(64 * MiB));
  /* Still usable. */
  void *q = NULL;
  CHECK_OK(loom_malloc(0, 20 * MiB, NULL, &q));
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_free(p));
}

static void test_cache_released_on_pressure(void) {
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_reset_accumulated(0));
  void *p = NULL;
  /* 40 MiB stays cached after the free ... */
  CHECK_OK(loom_malloc(0, 40 * MiB, NULL, &p));
  CHECK_OK(loom_free(p));
  CHECK(stats().reserved_bytes[LOOM_POOL_ALL].current >= (int64_t)(40 * MiB));
  /* ... and is given back when 50 MiB would not fit beside it. */
  CHECK_OK(loom_malloc(0, 50 * MiB, NULL, &p));
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.num_alloc_retries, 1);
  CHECK_EQ_INT(s.num_ooms, 0);
  CHECK(s.reserved_bytes[LOOM_POOL_ALL].current <= (int64_t)(64 * MiB));
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_EQ_INT(stats().reserved_bytes[LOOM_POOL_ALL].current, 0);
}

static void test_many_small_until_full(void) {
  /* Fill the device with 1 MiB blocks: the limit holds, then OOM. */
  void *blocks[80];
  int n = 0;
  while (n < 80 && loom_malloc(0, MiB, NULL, &blocks[n]) == LOOM_OK) ++n;
  CHECK(n >= 60 && n <= 64);
  CHECK(stats().reserved_bytes[LOOM_POOL_ALL].current <= (int64_t)(64 * MiB));
  for (int i = 0; i < n; ++i) CHECK_OK(loom_free(blocks[i]));
  CHECK_OK(loom_memory_empty_cache(0));
}

int main(void) {
  setenv("LOOM_MEMORY_LIMIT", "64M", 1);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_limit_reported);
    RUN_TEST(test_oom);
    RUN_TEST(test_cache_released_on_pressure);
    RUN_TEST(test_many_small_until_full);
  }
  TEST_MAIN_END();
}
