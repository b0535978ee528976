/* Stream priority where a device has a worker pool (the host and guarded
 * drivers): the pool's workers take chunks of a high-priority stream's
 * launch before those of a low-priority stream's, and a low-priority
 * stream's executor helps an open high-priority launch before running its
 * own chunks.
 *
 * No clock decides anything here. The device gets one worker
 * (LOOM_NUM_THREADS=2), and kernels that block on flags pin every thread
 * where the test wants it: a blocker launch holds the worker and its own
 * executor, and a launch whose chunk 0 blocks holds its executor, leaving
 * its other chunks queued. Chunks append their stream's tag to a log when
 * they start; the order of the log is the schedule. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "test_drivers.h"

enum { GATES = 8, CHUNKS = 6, LOG_CAPACITY = 64 };

#define NO_POOL                                                                           \
  "no worker pool: a launch runs its chunks in order on the submitting thread, so there " \
  "is no schedule for priority to order (and the blocking kernels would block the test)"

static atomic_int gate_open[GATES], gate_entered[GATES];
/* A chunk takes a slot (log_len), writes its tag, then counts it written
 * (log_written): the test reads tags only once they are all written. */
static atomic_int log_len, log_written;
static atomic_char log_tags[LOG_CAPACITY];

static void reset(void) {
  for (int i = 0; i < GATES; ++i) {
    atomic_store(&gate_open[i], 0);
    atomic_store(&gate_entered[i], 0);
  }
  atomic_store(&log_len, 0);
  atomic_store(&log_written, 0);
}

static void pass_gate(int g) {
  atomic_fetch_add(&gate_entered[g], 1);
  while (!atomic_load(&gate_open[g])) sched_yield();
}

/* Every chunk blocks at gate scalars[0]. */
static int block_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  pass_gate((int)args->scalars[0].i);
  return 0;
}

/* Chunk 0 blocks at gate scalars[1] (none if negative); every other chunk
 * logs tag scalars[0]. */
static int log_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const int g = (int)args->scalars[1].i;
  if (begin == 0 && g >= 0) {
    pass_gate(g);
    return 0;
  }
  const int at = atomic_fetch_add(&log_len, 1);
  if (at < LOG_CAPACITY) atomic_store(&log_tags[at], (char)args->scalars[0].i);
  atomic_fetch_add(&log_written, 1);
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec t = {0, (long)ms * 1000000L};
  nanosleep(&t, NULL);
}

/* Waits until *v reaches `want`; 0 if it did not within 10 s (a broken
 * scheduler shows here rather than as a hang). */
static int reaches(atomic_int *v, int want) {
  for (int i = 0; i < 10000 && atomic_load(v) < want; ++i) sleep_ms(1);
  return atomic_load(v) >= want;
}

/* Launches on `s` the blocker of gate g, over `chunks` chunks. */
static void launch_blocker(loom_stream_t *s, int g, loom_scalar *sc, int chunks) {
  sc[0].i = g;
  loom_launch_desc d = {.name = "block", .fn = block_kernel, .scalars = sc, .num_scalars = 1,
                        .range = chunks, .grain = 1};
  CHECK_OK(loom_launch(s, &d));
}

static void launch_logger(loom_stream_t *s, char tag, int hold_gate, loom_scalar *sc) {
  sc[0].i = tag;
  sc[1].i = hold_gate;
  loom_launch_desc d = {.name = "log", .fn = log_kernel, .scalars = sc, .num_scalars = 2,
                        .range = CHUNKS, .grain = 1};
  CHECK_OK(loom_launch(s, &d));
}

/* The log holds `n1` tags t1 and then `n2` tags t2. */
static int log_is(char t1, int n1, char t2, int n2) {
  if (atomic_load(&log_len) != n1 + n2 || atomic_load(&log_written) != n1 + n2) return 0;
  for (int i = 0; i < n1 + n2; ++i)
    if (atomic_load(&log_tags[i]) != (i < n1 ? t1 : t2)) return 0;
  return 1;
}

static void open_all(void) {
  for (int i = 0; i < GATES; ++i) atomic_store(&gate_open[i], 1);
}

/* With the worker busy, a low- and then a high-priority launch queue their
 * chunks; once free, the worker takes every high-priority chunk first. */
static void test_worker_takes_high_priority_first(void) {
  TEST_REQUIRE(TEST_DRIVER_POOL, NO_POOL);
  reset();
  loom_stream_t *x = NULL, *lo = NULL, *hi = NULL;
  CHECK_OK(loom_stream_create(0, 0, &x));
  CHECK_OK(loom_stream_create(0, 0, &lo));
  CHECK_OK(loom_stream_create(0, -1, &hi));
  loom_scalar sx[1], sl[2], sh[2];
  launch_blocker(x, 0, sx, 2); /* its executor and the worker */
  CHECK(reaches(&gate_entered[0], 2));
  launch_logger(lo, 'L', 1, sl);
  CHECK(reaches(&gate_entered[1], 1)); /* lo's executor holds chunk 0 */
  launch_logger(hi, 'H', 2, sh);
  CHECK(reaches(&gate_entered[2], 1)); /* hi's executor holds chunk 0 */
  atomic_store(&gate_open[0], 1);      /* the worker is free */
  CHECK(reaches(&log_written, 2 * (CHUNKS - 1)));
  CHECK(log_is('H', CHUNKS - 1, 'L', CHUNKS - 1));
  open_all();
  CHECK_OK(loom_stream_synchronize(x));
  CHECK_OK(loom_stream_synchronize(lo));
  CHECK_OK(loom_stream_synchronize(hi));
  loom_stream_release(hi);
  loom_stream_release(lo);
  loom_stream_release(x);
}

/* A low-priority executor finds a high-priority launch open with chunks
 * queued: it runs those before its own. */
static void test_executor_helps_high_priority_first(void) {
  TEST_REQUIRE(TEST_DRIVER_POOL, NO_POOL);
  reset();
  loom_stream_t *x = NULL, *lo = NULL, *hi = NULL;
  CHECK_OK(loom_stream_create(0, 0, &x));
  CHECK_OK(loom_stream_create(0, 0, &lo));
  CHECK_OK(loom_stream_create(0, -1, &hi));
  loom_scalar sx[1], sl[2], sh[2];
  launch_blocker(x, 0, sx, 2);
  CHECK(reaches(&gate_entered[0], 2));
  launch_logger(hi, 'H', 1, sh);
  CHECK(reaches(&gate_entered[1], 1));
  launch_logger(lo, 'L', -1, sl); /* nothing holds lo's executor */
  CHECK(reaches(&log_written, 2 * CHUNKS - 1));
  CHECK(log_is('H', CHUNKS - 1, 'L', CHUNKS));
  open_all();
  CHECK_OK(loom_stream_synchronize(x));
  CHECK_OK(loom_stream_synchronize(lo));
  CHECK_OK(loom_stream_synchronize(hi));
  loom_stream_release(hi);
  loom_stream_release(lo);
  loom_stream_release(x);
}

/* Between equal priorities the worker serves the launch opened first, and
 * a high-priority executor does not help a normal launch. */
static void test_equal_priorities_in_opening_order(void) {
  TEST_REQUIRE(TEST_DRIVER_POOL, NO_POOL);
  reset();
  loom_stream_t *x = NULL, *a = NULL, *b = NULL, *hi = NULL;
  CHECK_OK(loom_stream_create(0, 0, &x));
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  CHECK_OK(loom_stream_create(0, -1, &hi));
  loom_scalar sx[1], sa[2], sb[2], sh[2];
  launch_blocker(x, 0, sx, 2);
  CHECK(reaches(&gate_entered[0], 2));
  launch_logger(a, 'A', 1, sa);
  CHECK(reaches(&gate_entered[1], 1));
  launch_logger(b, 'B', 2, sb);
  CHECK(reaches(&gate_entered[2], 1));
  /* hi's own launch: its executor runs it alone (the worker is held), and
   * does not touch a's or b's chunks. */
  launch_logger(hi, 'H', -1, sh);
  CHECK_OK(loom_stream_synchronize(hi));
  CHECK(log_is('H', CHUNKS, 'A', 0));
  atomic_store(&log_len, 0);
  atomic_store(&log_written, 0);
  atomic_store(&gate_open[0], 1);
  CHECK(reaches(&log_written, 2 * (CHUNKS - 1)));
  CHECK(log_is('A', CHUNKS - 1, 'B', CHUNKS - 1));
  open_all();
  CHECK_OK(loom_stream_synchronize(x));
  CHECK_OK(loom_stream_synchronize(a));
  CHECK_OK(loom_stream_synchronize(b));
  loom_stream_release(hi);
  loom_stream_release(b);
  loom_stream_release(a);
  loom_stream_release(x);
}

/* The device has its executor and one worker (a driver without a pool
 * reports the calling thread alone). */
static void test_one_worker(void) {
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  CHECK_EQ_INT(props.num_threads, test_driver_has(TEST_DRIVER_POOL) ? 2 : 1);
}

int main(void) {
  unsetenv("LOOM_NUM_DEVICES");
  setenv("LOOM_NUM_THREADS", "2", 1);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_one_worker);
    RUN_TEST(test_worker_takes_high_priority_first);
    RUN_TEST(test_executor_helps_high_priority_first);
    RUN_TEST(test_equal_priorities_in_opening_order);
  }
  TEST_MAIN_END();
}
