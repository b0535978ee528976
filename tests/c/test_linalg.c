/* The linear algebra kernels against their definitions: L L^T and P L U
 * rebuild A, op(A) X gives back B, the LU solve solves, the permutation
 * matrix is the one the pivots describe; the info values of matrices that
 * are not positive-definite or are singular; bad arguments and pivots
 * refused; chunking never changes a bit. fp64 and fp32, column-major with
 * padded leading dimensions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linalg/linalg.h"
#include "kernel_test_util.h"
#include "loom/status.h"
#include "test_util.h"

enum { BATCH = 5, N = 13, LD = 16, K = 3 };

/* A batch of column-major matrices (leading dimension ld) in fp64. */
static loom_tensor mats(double *p, int64_t batch, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t sizes[3] = {batch, rows, cols}, strides[3] = {ld * cols, 1, ld};
  return tensor(p, LOOM_FLOAT64, 3, sizes, strides);
}

static loom_tensor ints1(int32_t *p, int64_t batch) {
  const int64_t s[1] = {batch};
  return dense(p, LOOM_INT32, 1, s);
}

static loom_tensor ints2(int32_t *p, int64_t batch, int64_t k) {
  const int64_t s[2] = {batch, k};
  return dense(p, LOOM_INT32, 2, s);
}

/* Symmetric positive-definite matrices: X X^T / n + I. */
static void make_spd(double *a, int64_t batch, int64_t n, int64_t ld) {
  double *x = malloc((size_t)(n * n) * sizeof(double));
  for (int64_t b = 0; b < batch; ++b) {
    fill(x, n * n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += x[i * n + k] * x[j * n + k];
        a[b * ld * n + i + j * ld] = s / (double)n + (i == j);
      }
  }
  free(x);
}

static double at(const double *a, int64_t ld, int64_t i, int64_t j) { return a[i + j * ld]; }

static void test_cholesky(void) {
  double *a = calloc(BATCH * LD * N, sizeof(double)), *l = calloc(BATCH * LD * N, sizeof(double));
  int32_t info[BATCH];
  make_spd(a, BATCH, N, LD);
  memcpy(l, a, BATCH * LD * N * sizeof(double));
  loom_tensor t[2] = {mats(l, BATCH, N, N, LD), ints1(info, BATCH)};
  CHECK_OK(run_chunks(loom_linalg_cholesky, t, 2, NULL, 0, BATCH, 2));
  double err = 0;
  for (int b = 0; b < BATCH; ++b) {
    const double *lb = l + b * LD * N, *ab = a + b * LD * N;
    CHECK_EQ_INT(info[b], 0);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        if (j > i) CHECK(at(lb, LD, i, j) == 0.0);
        double s = 0;
        for (int k = 0; k < N; ++k) s += at(lb, LD, i, k) * at(lb, LD, j, k);
        err = fmax(err, fabs(s - at(ab, LD, i, j)));
      }
  }
  CHECK_NEAR(err, 0.0, 1e-12);
  /* Not positive-definite at order 4 of matrix 2, NaN at order 1 of matrix 3. */
  memcpy(l, a, BATCH * LD * N * sizeof(double));
  l[2 * LD * N + 3 + 3 * LD] = -100.0;
  l[3 * LD * N] = NAN;
  CHECK_OK(run_chunks(loom_linalg_cholesky, t, 2, NULL, 0, BATCH, 1));
  CHECK_EQ_INT(info[0], 0);
  CHECK_EQ_INT(info[2], 4);
  CHECK_EQ_INT(info[3], 1);
  free(a);
  free(l);
}

/* P L U == A, and the permutation "linalg.lu_perm" writes is that P. */
static void test_lu_and_perm(int64_t m, int64_t n) {
  const int64_t k = m < n ? m : n, ld = m + 2;
  double *a = malloc((size_t)(BATCH * ld * n) * sizeof(double));
  double *lu = malloc((size_t)(BATCH * ld * n) * sizeof(double));
  double *p = malloc((size_t)(BATCH * m * m) * sizeof(double));
  int32_t *piv = malloc((size_t)(BATCH * k) * sizeof(int32_t)), info[BATCH];
  fill(a, BATCH * ld * n);
  memcpy(lu, a, (size_t)(BATCH * ld * n) * sizeof(double));
  loom_tensor t[3] = {mats(lu, BATCH, m, n, ld), ints2(piv, BATCH, k), ints1(info, BATCH)};
  CHECK_OK(run_chunks(loom_linalg_lu, t, 3, NULL, 0, BATCH, 3));
  const int64_t ps[3] = {BATCH, m, m};
  loom_tensor tp[2] = {ints2(piv, BATCH, k), dense(p, LOOM_FLOAT64, 3, ps)};
  CHECK_OK(run_chunks(loom_linalg_lu_perm, tp, 2, NULL, 0, BATCH, 1));
  double err = 0;
  for (int64_t b = 0; b < BATCH; ++b) {
    CHECK_EQ_INT(info[b], 0);
    const double *f = lu + b * ld * n, *ab = a + b * ld * n, *pb = p + b * m * m;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double plu = 0; /* (P L U)[i][j], with P row-major as written */
        for (int64_t r = 0; r < m; ++r) {
          const double pir = pb[i * m + r];
          if (pir == 0) continue;
          double s = 0;
          for (int64_t q = 0; q <= (r < j ? r : j) && q < k; ++q)
            s += (q == r ? 1.0 : at(f, ld, r, q)) * at(f, ld, q, j);
          plu += pir * s;
        }
        err = fmax(err, fabs(plu - at(ab, ld, i, j)));
      }
  }
  CHECK_NEAR(err, 0.0, 1e-12);
  free(a);
  free(lu);
  free(p);
  free(piv);
}

static void test_lu_singular(void) {
  double a[4 * 4];
  int32_t piv[4], info[1];
  for (int i = 0; i < 16; ++i) a[i] = frand();
  for (int i = 0; i < 4; ++i) a[i + 1 * 4] = 0.0; /* column 2 is zero */
  loom_tensor t[3] = {mats(a, 1, 4, 4, 4), ints2(piv, 1, 4), ints1(info, 1)};
  CHECK_OK(run_chunks(loom_linalg_lu, t, 3, NULL, 0, 1, 1));
  CHECK_EQ_INT(info[0], 2);
}

/* op(A) X = B for every flag combination, fp32 and fp64. */
static void test_trsm(int32_t dtype) {
  double a[N * LD], b[LD * K], x[LD * K];
  float af[N * LD], xf[LD * K];
  fill(a, N * LD);
  for (int i = 0; i < N; ++i) a[i + i * LD] = 3.0 + fabs(a[i + i * LD]);
  fill(b, LD * K);
  for (int flags = 0; flags < 8; ++flags) {
    const int upper = flags & 1, trans = (flags >> 1) & 1, unit = (flags >> 2) & 1;
    loom_scalar s[3] = {si(upper), si(trans), si(unit)};
    loom_tensor t[2] = {mats(a, 1, N, N, LD), mats(x, 1, N, K, LD)};
    memcpy(x, b, sizeof x);
    if (dtype == LOOM_FLOAT32) {
      for (int i = 0; i < N * LD; ++i) af[i] = (float)a[i];
      for (int i = 0; i < LD * K; ++i) xf[i] = (float)b[i];
      t[0].data = af, t[0].dtype = LOOM_FLOAT32;
      t[1].data = xf, t[1].dtype = LOOM_FLOAT32;
    }
    CHECK_OK(run_chunks(loom_linalg_trsm, t, 2, s, 3, 1, 1));
    if (dtype == LOOM_FLOAT32)
      for (int i = 0; i < LD * K; ++i) x[i] = xf[i];
    double err = 0;
    for (int c = 0; c < K; ++c)
      for (int i = 0; i < N; ++i) {
        double sum = 0;
        for (int j = 0; j < N; ++j) {
          const int r = trans ? j : i, q = trans ? i : j; /* op(A)[i][j] = A[r][q] */
          const int in = upper ? q >= r : q <= r;
          const double v = r == q ? (unit ? 1.0 : a[r + q * LD]) : (in ? a[r + q * LD] : 0.0);
          sum += v * x[j + c * LD];
        }
        err = fmax(err, fabs(sum - b[i + c * LD]));
      }
    CHECK_MSG(err < (dtype == LOOM_FLOAT32 ? 1e-4 : 1e-12), "flags %d: error %g", flags, err);
  }
}

static void test_lu_solve(void) {
  double a[N * LD], lu[N * LD], b[LD * K], x[LD * K];
  int32_t piv[N], info[1];
  fill(a, N * LD);
  fill(b, LD * K);
  memcpy(lu, a, sizeof a);
  loom_tensor tf[3] = {mats(lu, 1, N, N, LD), ints2(piv, 1, N), ints1(info, 1)};
  CHECK_OK(run_chunks(loom_linalg_lu, tf, 3, NULL, 0, 1, 1));
  for (int trans = 0; trans < 2; ++trans) {
    memcpy(x, b, sizeof x);
    loom_scalar s[1] = {si(trans)};
    loom_tensor t[3] = {mats(lu, 1, N, N, LD), ints2(piv, 1, N), mats(x, 1, N, K, LD)};
    CHECK_OK(run_chunks(loom_linalg_lu_solve, t, 3, s, 1, 1, 1));
    double err = 0;
    for (int c = 0; c < K; ++c)
      for (int i = 0; i < N; ++i) {
        double sum = 0;
        for (int j = 0; j < N; ++j)
          sum += (trans ? a[j + i * LD] : a[i + j * LD]) * x[j + c * LD];
        err = fmax(err, fabs(sum - b[i + c * LD]));
      }
    CHECK_NEAR(err, 0.0, 1e-10);
  }
  /* A pivot outside [1, n] is refused. */
  piv[3] = N + 1;
  loom_scalar s[1] = {si(0)};
  loom_tensor t[3] = {mats(lu, 1, N, N, LD), ints2(piv, 1, N), mats(x, 1, N, K, LD)};
  CHECK_EQ_INT(run_chunks(loom_linalg_lu_solve, t, 3, s, 1, 1, 1), LOOM_ERROR_INDEX_OUT_OF_RANGE);
  loom_tensor tp[2] = {ints2(piv, 1, N), mats(a, 1, N, N, N)};
  CHECK_EQ_INT(run_chunks(loom_linalg_lu_perm, tp, 2, NULL, 0, 1, 1),
               LOOM_ERROR_INDEX_OUT_OF_RANGE);
}

static void test_bad_arguments(void) {
  double a[16];
  int32_t info[1], piv[4];
  const int64_t sizes[3] = {1, 4, 4}, row_major[3] = {16, 4, 1};
  loom_tensor t[2] = {tensor(a, LOOM_FLOAT64, 3, sizes, row_major), ints1(info, 1)};
  CHECK_EQ_INT(run_chunks(loom_linalg_cholesky, t, 2, NULL, 0, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor r[3] = {mats(a, 1, 4, 4, 4), ints2(piv, 1, 4), ints1(info, 1)};
  r[0].dtype = LOOM_INT64;
  CHECK_EQ_INT(run_chunks(loom_linalg_lu, r, 3, NULL, 0, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  r[0].dtype = LOOM_FLOAT64;
  r[1].dtype = LOOM_INT64;
  CHECK_EQ_INT(run_chunks(loom_linalg_lu, r, 3, NULL, 0, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor s[2] = {mats(a, 1, 4, 4, 4), mats(a, 1, 3, 1, 3)}; /* B's rows != n */
  loom_scalar f[3] = {si(0), si(0), si(0)};
  CHECK_EQ_INT(run_chunks(loom_linalg_trsm, s, 2, f, 3, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
}

/* Every chunking gives the same bits (each matrix is worked alone). */
static void test_chunking(void) {
  enum { B = 7, M = 9 };
  double a[B * M * M], x1[B * M * M], x2[B * M * M];
  int32_t p1[B * M], p2[B * M], i1[B], i2[B];
  fill(a, B * M * M);
  memcpy(x1, a, sizeof a);
  memcpy(x2, a, sizeof a);
  loom_tensor t1[3] = {mats(x1, B, M, M, M), ints2(p1, B, M), ints1(i1, B)};
  loom_tensor t2[3] = {mats(x2, B, M, M, M), ints2(p2, B, M), ints1(i2, B)};
  CHECK_OK(run_chunks(loom_linalg_lu, t1, 3, NULL, 0, B, 1));
  CHECK_OK(run_chunks(loom_linalg_lu, t2, 3, NULL, 0, B, B));
  CHECK(!memcmp(x1, x2, sizeof x1) && !memcmp(p1, p2, sizeof p1) && !memcmp(i1, i2, sizeof i1));
}

static void test_lu_shapes(void) {
  test_lu_and_perm(N, N);
  test_lu_and_perm(9, 4);
  test_lu_and_perm(4, 9);
}

static void test_trsm_f64(void) { test_trsm(LOOM_FLOAT64); }
static void test_trsm_f32(void) { test_trsm(LOOM_FLOAT32); }

int main(void) {
  srand(5);
  RUN_TEST(test_cholesky);
  RUN_TEST(test_lu_shapes);
  RUN_TEST(test_lu_singular);
  RUN_TEST(test_trsm_f64);
  RUN_TEST(test_trsm_f32);
  RUN_TEST(test_lu_solve);
  RUN_TEST(test_bad_arguments);
  RUN_TEST(test_chunking);
  TEST_MAIN_END();
}
