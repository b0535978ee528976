/* tests/c/test_drivers.h — the HAL tests run once per driver, as a
 * conformance suite does: the host driver, the guarded driver, and "sync",
 * a minimal driver written only against loom/driver.h (test_drivers.c).
 *
 *   TEST_FOR_EACH_DRIVER {
 *     RUN_TEST(test_a);
 *   }
 *
 * restarts the runtime on each driver in turn (loom_shutdown, LOOM_DRIVER,
 * loom_init) and labels every report with the driver's name. A test that
 * needs what a driver lacks skips itself there, saying why:
 *
 *   TEST_REQUIRE(TEST_DRIVER_POOL, "no worker pool: priority has nothing to order");
 *
 * LOOM_TEST_DRIVERS=host,sync narrows the list. */
#ifndef LOOM_TESTS_C_TEST_DRIVERS_H
#define LOOM_TESTS_C_TEST_DRIVERS_H

#include "loom/driver.h"
#include "loom/hal.h"
#include "test_util.h"

/* What a driver offers that some tests depend on. */
enum {
  /* Queues execute on threads of their own: work can be pending, and a
   * kernel or callback that waits for the test does not block the test. */
  TEST_DRIVER_ASYNC = 1u << 0,
  /* A worker pool per device: LOOM_NUM_THREADS, stream priority, affinity. */
  TEST_DRIVER_POOL = 1u << 1,
  /* Resolves the kernel library's names (kernel_resolve). */
  TEST_DRIVER_KERNELS = 1u << 2,
  /* Segments of 2 MiB or more start on a 2 MiB boundary (huge pages). */
  TEST_DRIVER_ALIGNED_SEGMENTS = 1u << 3,
  /* The host faults on device memory (LOOM_DRIVER=guarded). */
  TEST_DRIVER_GUARDED = 1u << 4,
};

typedef struct test_driver {
  const char *name; /* its LOOM_DRIVER name */
  unsigned features; /* TEST_DRIVER_* */
} test_driver;

/* Restarts the runtime on the pass-th listed driver and stores it in
 * *out_driver; *out_driver is NULL past the last (the runtime is then shut
 * down). Registers the sync driver the first time. */
loom_status test_driver_start(int pass, const test_driver **out_driver);

/* The driver the runtime was last started on by test_driver_start. */
const test_driver *test_driver_current(void);

/* The minimal synchronous driver, and how many segments it holds now. */
const loom_driver *test_sync_driver(void);
int test_sync_segments_live(void);

static inline int test_driver_has(unsigned features) {
  const test_driver *d = test_driver_current();
  return d && (d->features & features) == features;
}

/* The next driver's pass, or 0 when all have run. A driver that fails to
 * start is a failed check, and its pass is left out. */
static inline int test_driver_next(int *pass) {
  for (;;) {
    const test_driver *d = NULL;
    const loom_status st = test_driver_start((*pass)++, &d);
    test_label = d ? d->name : NULL;
    if (!d) return 0;
    if (st == LOOM_OK) {
      fprintf(stderr, "-- the %s driver\n", d->name);
      return 1;
    }
    CHECK_MSG(st == LOOM_OK, "loom_init: %s", loom_last_error());
  }
}

#define TEST_FOR_EACH_DRIVER for (int test_pass_ = 0; test_driver_next(&test_pass_);)

/* In a test function: skip it on a driver without `features`. */
#define TEST_REQUIRE(features, reason) TEST_SKIP_IF(!test_driver_has(features), "%s", reason)

#endif /* LOOM_TESTS_C_TEST_DRIVERS_H */
