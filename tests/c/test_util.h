/* A tiny test harness for the C unit tests: CHECK records a failure and
 * carries on; TEST_MAIN_END prints "N passed, N failed" and sets the exit
 * status. */
#ifndef LOOM_TEST_UTIL_H
#define LOOM_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) {                                                              \
      ++test_passed;                                                         \
    } else {                                                                 \
      ++test_failed;                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                   \
  do {                                                                       \
    long long va_ = (long long)(a), vb_ = (long long)(b);                    \
    if (va_ == vb_) {                                                        \
      ++test_passed;                                                         \
    } else {                                                                 \
      ++test_failed;                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n",      \
              __FILE__, __LINE__, #a, #b, va_, vb_);                         \
    }                                                                        \
  } while (0)

/* Checks a loom_status is LOOM_OK, printing the runtime's message if not. */
#define CHECK_OK(expr)                                                       \
  do {                                                                       \
    loom_status st_ = (expr);                                                \
    if (st_ == LOOM_OK) {                                                    \
      ++test_passed;                                                         \
    } else {                                                                 \
      ++test_failed;                                                         \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__,     \
              #expr, loom_status_name(st_), loom_last_error());              \
    }                                                                        \
  } while (0)

#define RUN_TEST(fn)                                                         \
  do {                                                                       \
    int failed_before_ = test_failed;                                        \
    fn();                                                                    \
    fprintf(stderr, "%s %s\n", test_failed == failed_before_ ? "ok  " : "FAIL", #fn); \
  } while (0)

#define TEST_MAIN_END()                                                      \
  do {                                                                       \
    printf("%d passed, %d failed\n", test_passed, test_failed);              \
    return test_failed ? 1 : 0;                                              \
  } while (0)

/* Monotonic seconds, for kernels that spin on the clock. */
static inline double test_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
