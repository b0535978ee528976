/* "reduce.complex" and "scan.complex_rows": products, all/any and the
 * cumulative sum and product of complex64 / complex128 against the
 * definitions in long double, over a permuted (strided) input, chunking
 * that never changes a bit, empty reductions, and bad arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "loom/kernels/reduce_complex.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { R = 6, K = 13 }; /* a [R, K] input; rows reduced or scanned */

static loom_kernel_fn find(const char *name) {
  const loom_kernel_entry *e = loom_kernel_library_find(name);
  return e ? e->fn : NULL;
}

/* x[r][k] of a [R, K] complex input held as [K, R] (column-major). */
static void values(double *x) {
  for (int i = 0; i < 2 * R * K; ++i) x[i] = 0.5 + 0.7 * frand();
  x[2 * (3 * R + 1)] = 0; /* element (1, 3) is zero: any/all see it */
  x[2 * (3 * R + 1) + 1] = 0;
  x[2 * (5 * R + 2)] = 0; /* element (2, 5) is imaginary, nonzero */
}

static void test_prod_all_any(void) {
  static double x[2 * R * K];
  values(x);
  float xf[2 * R * K];
  for (int i = 0; i < 2 * R * K; ++i) xf[i] = (float)x[i];
  const int64_t sizes[2] = {R, K}, strides[2] = {1, R}, osz[1] = {R}, ost[1] = {1};
  for (int wide = 0; wide < 2; ++wide) {
    const int32_t dt = wide ? LOOM_COMPLEX128 : LOOM_COMPLEX64;
    double yd[2 * R], yd2[2 * R];
    float yf[2 * R], yf2[2 * R];
    loom_tensor t[2] = {tensor(wide ? (void *)yd : (void *)yf, dt, 1, osz, ost),
                        tensor(wide ? (void *)x : (void *)xf, dt, 2, sizes, strides)};
    loom_scalar s[2] = {si(LOOM_REDUCE_COMPLEX_PROD), si(1)};
    CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, R, R));
    t[0].data = wide ? (void *)yd2 : (void *)yf2;
    CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, R, 1));
    CHECK(memcmp(wide ? (void *)yd : (void *)yf, wide ? (void *)yd2 : (void *)yf2,
                 (size_t)(wide ? sizeof yd : sizeof yf)) == 0);
    for (int r = 0; r < R; ++r) {
      long double pr = 1, pi = 0;
      for (int k = 0; k < K; ++k) {
        const int i = 2 * (k * R + r);
        const long double a = wide ? x[i] : xf[i], b = wide ? x[i + 1] : xf[i + 1];
        const long double nr = pr * a - pi * b;
        pi = pr * b + pi * a;
        pr = nr;
      }
      const double gr = wide ? yd[2 * r] : yf[2 * r], gi = wide ? yd[2 * r + 1] : yf[2 * r + 1];
      const double tol = wide ? 1e-14 : 1e-6;
      CHECK_NEAR(gr, (double)pr, tol);
      CHECK_NEAR(gi, (double)pi, tol);
    }
    uint8_t all[R], any[R];
    t[1] = tensor(wide ? (void *)x : (void *)xf, dt, 2, sizes, strides);
    t[0] = tensor(all, LOOM_BOOL, 1, osz, ost);
    s[0] = si(LOOM_REDUCE_COMPLEX_ALL);
    CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, R, 2));
    t[0].data = any;
    s[0] = si(LOOM_REDUCE_COMPLEX_ANY);
    CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, R, 2));
    for (int r = 0; r < R; ++r) {
      CHECK_EQ_INT(all[r], r != 1);
      CHECK_EQ_INT(any[r], 1);
    }
  }
  /* nothing reduced into each output: the product is 1, all true, any false */
  const int64_t esz[2] = {2, 0}, est[2] = {1, 1}, o2[1] = {2};
  float y[4] = {9, 9, 9, 9};
  uint8_t b[2] = {0, 0};
  loom_tensor t[2] = {tensor(y, LOOM_COMPLEX64, 1, o2, ost),
                      tensor(NULL, LOOM_COMPLEX64, 2, esz, est)};
  loom_scalar s[2] = {si(LOOM_REDUCE_COMPLEX_PROD), si(1)};
  CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, 2, 1));
  CHECK(y[0] == 1 && y[1] == 0 && y[2] == 1 && y[3] == 0);
  t[0] = tensor(b, LOOM_BOOL, 1, o2, ost);
  s[0] = si(LOOM_REDUCE_COMPLEX_ALL);
  CHECK_OK(run_chunks(find("reduce.complex"), t, 2, s, 2, 2, 1));
  CHECK(b[0] == 1 && b[1] == 1);
}

static void test_scans(void) {
  static double x[2 * R * K];
  values(x);
  const int64_t sizes[2] = {R, K}, strides[2] = {1, R}, dst[2] = {K, 1};
  for (int op = LOOM_REDUCE_COMPLEX_CUMSUM; op <= LOOM_REDUCE_COMPLEX_CUMPROD; ++op) {
    float y[2 * R * K], y2[2 * R * K];
    float xf[2 * R * K];
    for (int i = 0; i < 2 * R * K; ++i) xf[i] = (float)x[i];
    loom_tensor t[2] = {tensor(y, LOOM_COMPLEX64, 2, sizes, dst),
                        tensor(xf, LOOM_COMPLEX64, 2, sizes, strides)};
    loom_scalar s[2] = {si(op), si(1)};
    CHECK_OK(run_chunks(find("scan.complex_rows"), t, 2, s, 2, R, R));
    t[0].data = y2;
    CHECK_OK(run_chunks(find("scan.complex_rows"), t, 2, s, 2, R, 1));
    CHECK(memcmp(y, y2, sizeof y) == 0);
    for (int r = 0; r < R; ++r) {
      double ar = op == LOOM_REDUCE_COMPLEX_CUMPROD ? 1 : 0, ai = 0;
      for (int k = 0; k < K; ++k) {
        const double a = xf[2 * (k * R + r)], b = xf[2 * (k * R + r) + 1];
        if (op == LOOM_REDUCE_COMPLEX_CUMSUM) {
          ar += a;
          ai += b;
        } else {
          const double nr = ar * a - ai * b;
          ai = ar * b + ai * a;
          ar = nr;
        }
        /* the double accumulator rounded once per prefix */
        CHECK(y[2 * (r * K + k)] == (float)ar && y[2 * (r * K + k) + 1] == (float)ai);
      }
    }
  }
}

static void test_bad_arguments(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  const int64_t sz[1] = {2}, st[1] = {1};
  loom_tensor t[2] = {tensor(y, LOOM_FLOAT32, 1, sz, st), tensor(x, LOOM_FLOAT32, 1, sz, st)};
  loom_scalar s[2] = {si(LOOM_REDUCE_COMPLEX_CUMSUM), si(0)};
  CHECK_EQ_INT(run_chunks(find("scan.complex_rows"), t, 2, s, 2, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);                        /* real operands */
  t[0].dtype = t[1].dtype = LOOM_COMPLEX64;
  s[1] = si(1);
  CHECK_EQ_INT(run_chunks(find("scan.complex_rows"), t, 2, s, 2, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);                        /* a dim past the rank */
  s[0] = si(LOOM_REDUCE_COMPLEX_PROD);
  s[1] = si(1);
  CHECK_EQ_INT(run_chunks(find("reduce.complex"), t, 2, s, 2, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);                        /* ranks do not add up */
  s[0] = si(LOOM_REDUCE_COMPLEX_OP_COUNT);
  CHECK_EQ_INT(run_chunks(find("reduce.complex"), t, 2, s, 2, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);                        /* an unknown op */
}

int main(void) {
  srand(5);
  if (!find("reduce.complex") || !find("scan.complex_rows")) {
    fprintf(stderr, "the complex reductions are not in the kernel library\n");
    return 1;
  }
  RUN_TEST(test_prod_all_any);
  RUN_TEST(test_scans);
  RUN_TEST(test_bad_arguments);
  TEST_MAIN_END();
}
