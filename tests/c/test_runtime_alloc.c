/* The caching allocator: exact statistics, splitting, reuse, record_stream
 * deferral, empty_cache, the memory limit and out-of-memory. */
#include <stdlib.h>

#include "loom/hal.h"
#include "test_util.h"

#define MiB ((size_t)1 << 20)

static loom_memory_stats stats(void) {
  loom_memory_stats s;
  loom_memory_stats_get(0, &s);
  return s;
}

static void test_stats_exact(void) {
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_reset_accumulated(0));
  CHECK_OK(loom_memory_reset_peak(0));
  void *p = NULL, *q = NULL;
  CHECK_OK(loom_malloc(0, 1000, NULL, &p)); /* rounds to 1024, small pool */
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_SMALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_LARGE].current, 0);
  CHECK_EQ_INT(s.allocated_bytes[LOOM_POOL_ALL].current, 1024);
  CHECK_EQ_INT(s.requested_bytes[LOOM_POOL_ALL].current, 1000);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_SMALL].current, 2 * MiB);
  CHECK_EQ_INT(s.segment[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.active_bytes[LOOM_POOL_ALL].current, 1024);
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.inactive_split_bytes[LOOM_POOL_ALL].current, 2 * MiB - 1024);
  CHECK_EQ_INT(s.num_device_alloc, 1);
  /* The second block is carved from the same segment, right after. */
  CHECK_OK(loom_malloc(0, 512, NULL, &q));
  CHECK((char *)q == (char *)p + 1024);
  CHECK_EQ_INT(stats().segment[LOOM_POOL_ALL].current, 1);
  CHECK_OK(loom_free(p));
  s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].allocated, 2);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].freed, 1);
  CHECK_EQ_INT(s.allocated_bytes[LOOM_POOL_ALL].peak, 1536);
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 2);
  CHECK_OK(loom_free(q));
  s = stats();
  /* Everything coalesced back into one whole, unsplit segment. */
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.active[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 2 * MiB);
  /* Reuse of the cached segment: no new device allocation. */
  CHECK_OK(loom_malloc(0, 4096, NULL, &p));
  CHECK_EQ_INT(stats().num_device_alloc, 1);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
  s = stats();
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.segment[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.num_device_free, 1);
  CHECK_OK(loom_memory_reset_peak(0));
  CHECK_EQ_INT(stats().allocated_bytes[LOOM_POOL_ALL].peak, 0);
}

static void test_large_pool(void) {
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 3 * MiB, NULL, &p));
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_LARGE].current, 1);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_LARGE].current, 20 * MiB);
  CHECK_EQ_INT(loom_pointer_device((char *)p + 12345), 0);
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(loom_pointer_device(p), -1);
  CHECK_OK(loom_memory_empty_cache(0));
}

static void test_bad_free(void) {
  int x;
  CHECK_EQ_INT(loom_free(&x), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_free(NULL));
  void *p = NULL;
  CHECK_EQ_INT(loom_malloc(7, 16, NULL, &p), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_malloc(0, 0, NULL, &p));
  CHECK(p == NULL);
}

int main(void) {
  RUN_TEST(test_stats_exact);
  RUN_TEST(test_large_pool);
  RUN_TEST(test_bad_free);
  loom_shutdown();
  TEST_MAIN_END();
}
