/* tests/c/test_util.h — the harness every C test uses.
 *
 * CHECK and its variants record a failure with its place and carry on.
 * RUN_TEST runs one test function and prints "ok", "FAIL" or "skip"; inside
 * a test, TEST_SKIP_IF returns early with a written reason. TEST_MAIN_END
 * prints "N passed, N failed, N skipped" and sets the exit status: non-zero
 * if any check failed, inside a test or not. `test_label`, when set (the
 * driver a runtime test runs on, see test_drivers.h), follows every report.
 *
 * Header-only: each test is one translation unit with its own counters. */
#ifndef LOOM_TESTS_C_TEST_UTIL_H
#define LOOM_TESTS_C_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/status.h"

#define TEST_UNUSED __attribute__((unused))

/* Checks passed and failed. */
static int test_passed TEST_UNUSED, test_failed TEST_UNUSED;
/* RUN_TEST outcomes; a skip outside RUN_TEST (a part of a test program
 * that cannot run here) counts as a skipped test too. */
static int test_tests_passed TEST_UNUSED, test_tests_failed TEST_UNUSED,
    test_skipped TEST_UNUSED;
/* Printed after every report when set, e.g. the driver's name. */
static const char *test_label TEST_UNUSED;
/* The test RUN_TEST runs now, and why it skipped (empty: it did not). */
static const char *test_current TEST_UNUSED;
static char test_skip_reason[256] TEST_UNUSED;

static inline void test_print_label(void) {
  if (test_label) fprintf(stderr, " [%s]", test_label);
  fputc('\n', stderr);
}

static inline void test_fail(const char *file, int line, const char *what) {
  ++test_failed;
  fprintf(stderr, "%s:%d: CHECK failed: %s", file, line, what);
  test_print_label();
}

static inline void test_fail_msg(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void test_fail_msg(const char *file, int line, const char *what, const char *fmt, ...) {
  ++test_failed;
  fprintf(stderr, "%s:%d: CHECK failed: %s: ", file, line, what);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  test_print_label();
}

#define CHECK(cond)                                         \
  do {                                                      \
    if (cond) ++test_passed;                                \
    else test_fail(__FILE__, __LINE__, #cond);              \
  } while (0)

/* CHECK with a printf-style explanation of the failure. */
#define CHECK_MSG(cond, ...)                                \
  do {                                                      \
    if (cond) ++test_passed;                                \
    else test_fail_msg(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                          \
  do {                                                                              \
    const long long va_ = (long long)(a), vb_ = (long long)(b);                     \
    if (va_ == vb_) ++test_passed;                                                  \
    else test_fail_msg(__FILE__, __LINE__, #a " == " #b, "%lld vs %lld", va_, vb_); \
  } while (0)

/* |a - b| <= tol; NaN on either side fails. */
#define CHECK_NEAR(a, b, tol)                                                     \
  do {                                                                            \
    const double va_ = (double)(a), vb_ = (double)(b), vt_ = (double)(tol);       \
    if (fabs(va_ - vb_) <= vt_) ++test_passed;                                    \
    else test_fail_msg(__FILE__, __LINE__, "|" #a " - " #b "| <= " #tol,          \
                       "%.9g vs %.9g (off by %.3g)", va_, vb_, fabs(va_ - vb_));  \
  } while (0)

/* A loom_status that must be LOOM_OK; prints the runtime's message if not. */
#define CHECK_OK(expr)                                                              \
  do {                                                                              \
    const loom_status st_ = (expr);                                                 \
    if (st_ == LOOM_OK) ++test_passed;                                              \
    else test_fail_msg(__FILE__, __LINE__, #expr, "returned %s: %s",                \
                       loom_status_name(st_), loom_last_error());                   \
  } while (0)

/* Records that the running test (or, outside RUN_TEST, a part of the
 * program) cannot run here, and why. */
static inline void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(test_skip_reason, sizeof test_skip_reason, fmt, ap);
  va_end(ap);
  if (test_current) return; /* RUN_TEST reports it */
  ++test_skipped;
  fprintf(stderr, "skip");
  if (test_label) fprintf(stderr, " [%s]", test_label);
  fprintf(stderr, ": %s\n", test_skip_reason);
  test_skip_reason[0] = '\0';
}

/* In a test function: skip the rest of it when `cond` holds. */
#define TEST_SKIP_IF(cond, ...)  \
  do {                           \
    if (cond) {                  \
      test_skip(__VA_ARGS__);    \
      return;                    \
    }                            \
  } while (0)

static inline void test_run(void (*fn)(void), const char *name) {
  const int failed_before = test_failed;
  test_current = name;
  test_skip_reason[0] = '\0';
  fn();
  test_current = NULL;
  const char *outcome = "ok  ";
  if (test_failed != failed_before) ++test_tests_failed, outcome = "FAIL";
  else if (test_skip_reason[0]) ++test_skipped, outcome = "skip";
  else ++test_tests_passed;
  fprintf(stderr, "%s %s", outcome, name);
  if (test_failed == failed_before && test_skip_reason[0]) {
    if (test_label) fprintf(stderr, " [%s]", test_label);
    fprintf(stderr, ": %s\n", test_skip_reason);
  } else {
    test_print_label();
  }
  test_skip_reason[0] = '\0';
}

#define RUN_TEST(fn) test_run(fn, #fn)

/* With RUN_TEST the counts are of tests (the checks follow in brackets);
 * without, of checks. */
static inline int test_main_end(void) {
  if (test_tests_passed + test_tests_failed > 0)
    printf("%d passed, %d failed, %d skipped (%d checks, %d failed)\n", test_tests_passed,
           test_tests_failed, test_skipped, test_passed + test_failed, test_failed);
  else
    printf("%d passed, %d failed, %d skipped (checks)\n", test_passed, test_failed,
           test_skipped);
  return test_failed ? 1 : 0;
}

#define TEST_MAIN_END() return test_main_end()

/* Monotonic seconds, for kernels that spin on the clock. */
static inline double test_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- near-equality ---------------------------------------------------------- */

/* The largest |a[i] - b[i]|; NaN anywhere gives infinity. */
static inline double test_max_abs_diff(const double *a, const double *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = fabs(a[i] - b[i]);
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

/* The largest |a[i] - b[i]| / (1e-3 + |b[i]|): relative error against the
 * reference b, absolute near zero; NaN anywhere gives infinity. */
static inline double test_max_rel(const double *a, const double *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = fabs(a[i] - b[i]) / (1e-3 + fabs(b[i]));
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

/* 1 if the two byte ranges are identical (bitwise equality: -0 differs
 * from 0, and a NaN equals itself). */
static inline int test_same_bits(const void *a, const void *b, size_t bytes) {
  return memcmp(a, b, bytes) == 0;
}

static inline int test_same_f32(float a, float b) { return test_same_bits(&a, &b, sizeof a); }

#endif /* LOOM_TESTS_C_TEST_UTIL_H */
