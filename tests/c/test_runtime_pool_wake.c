/* The host pool's waits (runtime/drivers/host/host_pool.c), white-box: a
 * kicked worker wakes and, finding nothing to run, sleeps again; an owner
 * whose helper's last chunk outlasts its join spin sleeps until that chunk
 * is done, never returning before it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "runtime/drivers/host/host_internal.h"
#include "test_util.h"

/* Polls `cond` for up to 10 s (a loaded machine may hold a thread back). */
#define WAIT_FOR(cond)                                                            \
  do {                                                                            \
    const uint64_t wait_end_ = loom_now_ns() + 10000000000ull;                    \
    while (!(cond) && loom_now_ns() < wait_end_) {                                \
      struct timespec ts_ = {0, 100000};                                          \
      nanosleep(&ts_, NULL);                                                      \
    }                                                                             \
  } while (0)

static void test_kick_wakes_then_sleeps(void) {
  host_pool pool;
  CHECK_EQ_INT(host_pool_init(&pool, 1), 0);
  CHECK_EQ_INT(pool.num_workers, 1);
  WAIT_FOR(atomic_load(&pool.sleeping) == 1);
  CHECK_EQ_INT(atomic_load(&pool.sleeping), 1);
  for (int round = 0; round < 3; ++round) {
    WAIT_FOR(atomic_load(&pool.sleeping) == 1);
    const uint64_t naps = atomic_load(&pool.naps), kicks = atomic_load(&pool.kicks);
    host_pool_kick(&pool);
    CHECK(atomic_load(&pool.kicks) == kicks + 1);
    /* It can only nap again once awake; and it must, with nothing to run. */
    WAIT_FOR(atomic_load(&pool.naps) > naps && atomic_load(&pool.sleeping) == 1);
    CHECK_MSG(atomic_load(&pool.naps) > naps, "a kicked worker did not wake, or did not sleep again");
    CHECK_EQ_INT(atomic_load(&pool.sleeping), 1);
  }
  /* A kick finds no sleeper while the worker is busy: nothing to do. */
  host_pool_destroy(&pool);
}

/* The owner's chunks take 100 us, a helper's 5 ms: the owner runs out of
 * chunks long before a helper's ends, and its join spin (at most a chunk of
 * its own) runs out too. */
enum { SLOW_CHUNKS = 16 };
static pthread_t slow_owner;
static _Atomic int slow_done[SLOW_CHUNKS], slow_helped;

static int slow_helper_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)args;
  (void)end;
  const int helper = !pthread_equal(pthread_self(), slow_owner);
  const uint64_t until = loom_now_ns() + (helper ? 5000000 : 100000);
  while (loom_now_ns() < until) loom_cpu_relax();
  if (helper) atomic_store(&slow_helped, 1);
  atomic_store(&slow_done[begin], 1);
  return 0;
}

static void test_owner_waits_for_slow_helper(void) {
  host_pool pool;
  CHECK_EQ_INT(host_pool_init(&pool, 1), 0);
  slow_owner = pthread_self();
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .range = SLOW_CHUNKS,
                                 .grain = 1};
  int helped = 0;
  for (int rep = 0; rep < 10; ++rep) {
    for (int i = 0; i < SLOW_CHUNKS; ++i) atomic_store(&slow_done[i], 0);
    atomic_store(&slow_helped, 0);
    host_pool_kick(&pool);
    host_failure failure;
    CHECK_EQ_INT(host_pool_run(&pool, 0, slow_helper_kernel, &args, &failure), 0);
    /* Every chunk finished before the launch returned, the helper's too. */
    for (int i = 0; i < SLOW_CHUNKS; ++i) CHECK(atomic_load(&slow_done[i]) == 1);
    helped += atomic_load(&slow_helped);
  }
  /* On a loaded machine the worker may miss a launch, not all ten. */
  CHECK_MSG(helped > 0, "the worker never joined a launch of 1.6 ms");
  host_pool_destroy(&pool);
}

int main(void) {
  RUN_TEST(test_kick_wakes_then_sleeps);
  RUN_TEST(test_owner_waits_for_slow_helper);
  TEST_MAIN_END();
}
