/* The linear algebra kernels against their definitions: L L^T and P L U
 * rebuild A, op(A) X gives back B, the LU solve solves, the permutation
 * matrix is the one the pivots describe; the info values of matrices that
 * are not positive-definite or are singular; bad arguments and pivots
 * refused; chunking never changes a bit. Q R rebuilds A with Q orthonormal,
 * the reflectors applied equal the product formed; the Jacobi eigen- and
 * singular value decompositions rebuild their matrix with orthonormal
 * vectors, in order. fp64 and fp32, column-major with padded leading
 * dimensions. */
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

/* The LU with a source operand: each item copies its matrix (row-major
 * here, any strides allowed) into A first; the same bits as copying first.
 * A source of another dtype or shape is refused. */
static void test_lu_source(void) {
  enum { M = 11, NC = 9, LDA = 12 };
  double *src = malloc((size_t)(BATCH * M * NC) * sizeof(double));
  double *a = malloc((size_t)(BATCH * LDA * NC) * sizeof(double));
  double *ref = malloc((size_t)(BATCH * LDA * NC) * sizeof(double));
  int32_t piv[BATCH * NC], piv_ref[BATCH * NC], info[BATCH], info_ref[BATCH];
  fill(src, BATCH * M * NC);
  for (int64_t i = 0; i < BATCH * LDA * NC; ++i) a[i] = ref[i] = -7.0;
  for (int64_t b = 0; b < BATCH; ++b) /* ref: the row-major source, copied */
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < NC; ++j) ref[b * LDA * NC + i + j * LDA] = src[b * M * NC + i * NC + j];
  loom_tensor tr[3] = {mats(ref, BATCH, M, NC, LDA), ints2(piv_ref, BATCH, NC),
                       ints1(info_ref, BATCH)};
  CHECK_OK(run_chunks(loom_linalg_lu, tr, 3, NULL, 0, BATCH, BATCH));
  const int64_t ss[3] = {BATCH, M, NC};
  loom_tensor t[4] = {mats(a, BATCH, M, NC, LDA), ints2(piv, BATCH, NC), ints1(info, BATCH),
                      dense(src, LOOM_FLOAT64, 3, ss)};
  CHECK_OK(run_chunks(loom_linalg_lu, t, 4, NULL, 0, BATCH, 2));
  CHECK(memcmp(a, ref, (size_t)(BATCH * LDA * NC) * sizeof(double)) == 0);
  CHECK(memcmp(piv, piv_ref, sizeof piv) == 0);
  CHECK(memcmp(info, info_ref, sizeof info) == 0);
  t[3].dtype = LOOM_FLOAT32;
  CHECK_EQ_INT(run_chunks(loom_linalg_lu, t, 4, NULL, 0, BATCH, 1), LOOM_ERROR_INVALID_ARGUMENT);
  t[3].dtype = LOOM_FLOAT64;
  t[3].sizes[1] = M - 1;
  CHECK_EQ_INT(run_chunks(loom_linalg_lu, t, 4, NULL, 0, BATCH, 1), LOOM_ERROR_INVALID_ARGUMENT);
  free(src);
  free(a);
  free(ref);
}

/* The first pivot of a one-column LU of x (length m), and the index LAPACK's
 * i?amax picks: the first entry of largest magnitude, a NaN only in first
 * place. */
static int32_t first_pivot(const double *x, int64_t m) {
  double a[40];
  int32_t piv[1], info[1];
  memcpy(a, x, (size_t)m * sizeof(double));
  loom_tensor t[3] = {mats(a, 1, m, 1, m), ints2(piv, 1, 1), ints1(info, 1)};
  CHECK_OK(run_chunks(loom_linalg_lu, t, 3, NULL, 0, 1, 1));
  return piv[0];
}

static int32_t reference_amax(const double *x, int64_t m) {
  int64_t p = 0;
  for (int64_t i = 1; i < m; ++i)
    if (fabs(x[i]) > fabs(x[p])) p = i;
  return (int32_t)(p + 1);
}

/* Pivot choice: ties of magnitude (either sign) go to the first, wherever
 * it lies among the search's lanes and its tail; a NaN after the first
 * entry never wins, a NaN first always does. */
static void test_lu_pivot_choice(void) {
  double x[40];
  for (int64_t m = 1; m <= 40; m += 3) {
    for (int64_t at_i = 0; at_i < m; at_i += 2) {
      for (int64_t i = 0; i < m; ++i) x[i] = (i % 2 ? -0.25 : 0.25) * (double)((i * 7) % 5);
      x[at_i] = -3.0; /* the largest, then a later tie of the other sign */
      if (at_i + 5 < m) x[at_i + 5] = 3.0;
      CHECK_EQ_INT(first_pivot(x, m), (int32_t)(at_i + 1));
      CHECK_EQ_INT(first_pivot(x, m), reference_amax(x, m));
      if (at_i > 0) {
        x[at_i - 1] = NAN; /* ignored */
        CHECK_EQ_INT(first_pivot(x, m), (int32_t)(at_i + 1));
        x[0] = NAN; /* wins */
        CHECK_EQ_INT(first_pivot(x, m), 1);
      }
    }
  }
  for (int64_t i = 0; i < 40; ++i) x[i] = i % 2 ? -0.0 : 0.0; /* all zero: the first */
  CHECK_EQ_INT(first_pivot(x, 40), 1);
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

/* X op(A) = B (from the right) for every flag combination. */
static void test_trsm_right(void) {
  enum { ROWS = 6 };
  double a[N * LD], b[LD * N], x[LD * N];
  fill(a, N * LD);
  for (int i = 0; i < N; ++i) a[i + i * LD] = 3.0 + fabs(a[i + i * LD]);
  fill(b, LD * N);
  for (int flags = 0; flags < 8; ++flags) {
    const int upper = flags & 1, trans = (flags >> 1) & 1, unit = (flags >> 2) & 1;
    loom_scalar s[4] = {si(upper), si(trans), si(unit), si(1)};
    loom_tensor t[2] = {mats(a, 1, N, N, LD), mats(x, 1, ROWS, N, LD)};
    memcpy(x, b, sizeof x);
    CHECK_OK(run_chunks(loom_linalg_trsm, t, 2, s, 4, 1, 1));
    double err = 0;
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < N; ++j) {
        double sum = 0;
        for (int i = 0; i < N; ++i) {
          const int p = trans ? j : i, q = trans ? i : j; /* op(A)[i][j] = A[p][q] */
          const int in = upper ? q >= p : q <= p;
          const double v = p == q ? (unit ? 1.0 : a[p + q * LD]) : (in ? a[p + q * LD] : 0.0);
          sum += x[r + i * LD] * v;
        }
        err = fmax(err, fabs(sum - b[r + j * LD]));
      }
    CHECK_MSG(err < 1e-12, "flags %d: error %g", flags, err);
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

/* max |X^T X - I| over the k columns of the m-row x (leading dimension ld). */
static double orth_error(const double *x, int64_t m, int64_t k, int64_t ld) {
  double err = 0;
  for (int64_t p = 0; p < k; ++p)
    for (int64_t q = 0; q < k; ++q) {
      double s = 0;
      for (int64_t i = 0; i < m; ++i) s += x[i + p * ld] * x[i + q * ld];
      err = fmax(err, fabs(s - (p == q)));
    }
  return err;
}

/* geqrf, then Q from orgqr: Q R == A and Q^T Q == I; ormqr's Q^T A == R. */
static void test_qr(void) {
  enum { M = 11, Q = 7, L2 = 12 };
  double a[L2 * Q], f[L2 * Q], q[L2 * Q], c[L2 * Q], tau[Q];
  fill(a, L2 * Q);
  memcpy(f, a, sizeof a);
  const int64_t ts[2] = {1, Q};
  loom_tensor t[2] = {mats(f, 1, M, Q, L2), dense(tau, LOOM_FLOAT64, 2, ts)};
  CHECK_OK(run_chunks(loom_linalg_geqrf, t, 2, NULL, 0, 1, 1));
  memcpy(q, f, sizeof f);
  loom_tensor o[2] = {mats(q, 1, M, Q, L2), dense(tau, LOOM_FLOAT64, 2, ts)};
  CHECK_OK(run_chunks(loom_linalg_orgqr, o, 2, NULL, 0, 1, 1));
  CHECK_NEAR(orth_error(q, M, Q, L2), 0.0, 1e-13);
  double err = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < Q; ++j) {
      double s = 0;
      for (int k = 0; k <= j; ++k) s += q[i + k * L2] * f[k + j * L2];
      err = fmax(err, fabs(s - a[i + j * L2]));
    }
  CHECK_NEAR(err, 0.0, 1e-13);
  memcpy(c, a, sizeof a);
  loom_scalar sc[2] = {si(1), si(1)};
  loom_tensor r[3] = {mats(f, 1, M, Q, L2), dense(tau, LOOM_FLOAT64, 2, ts), mats(c, 1, M, Q, L2)};
  CHECK_OK(run_chunks(loom_linalg_ormqr, r, 3, sc, 2, 1, 1));
  err = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < Q; ++j)
      err = fmax(err, fabs(c[i + j * L2] - (i <= j ? f[i + j * L2] : 0.0)));
  CHECK_NEAR(err, 0.0, 1e-13);
}

/* Eigenvalues ascending, V orthonormal, A V == V diag(w); the upper
 * triangle alone is read when asked. */
static void test_eigh(void) {
  double a[N * LD], w0[N * LD], v[N * LD], w[N];
  int32_t info[1];
  make_spd(a, 1, N, LD);
  for (int i = 0; i < N; ++i) a[i + i * LD] -= 1.5; /* indefinite */
  memcpy(w0, a, sizeof a);
  for (int j = 0; j < N; ++j)
    for (int i = j + 1; i < N; ++i) w0[i + j * LD] = 99.0; /* the unread lower part */
  const int64_t ws[2] = {1, N};
  loom_scalar sc[1] = {si(1)};
  loom_tensor t[4] = {mats(w0, 1, N, N, LD), dense(w, LOOM_FLOAT64, 2, ws), mats(v, 1, N, N, LD),
                      ints1(info, 1)};
  CHECK_OK(run_chunks(loom_linalg_eigh, t, 4, sc, 1, 1, 1));
  CHECK_EQ_INT(info[0], 0);
  CHECK_NEAR(orth_error(v, N, N, LD), 0.0, 1e-13);
  double err = 0;
  for (int k = 0; k < N; ++k) {
    if (k) CHECK(w[k - 1] <= w[k]);
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int j = 0; j < N; ++j) s += a[i + j * LD] * v[j + k * LD];
      err = fmax(err, fabs(s - w[k] * v[i + k * LD]));
    }
  }
  CHECK_NEAR(err, 0.0, 1e-12);
}

/* A rank-deficient tall matrix: U (completed to m columns) and V
 * orthonormal, s descending, U diag(s) V^T == A. */
static void test_svd(void) {
  enum { M = 9, C = 5, R = 3 };
  double x[M * R], y[R * C], a[M * C], u[M * M], v[C * C], s[C];
  int32_t info[1];
  fill(x, M * R);
  fill(y, R * C);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < C; ++j) {
      double t = 0;
      for (int k = 0; k < R; ++k) t += x[i + k * M] * y[k + j * R];
      a[i + j * M] = u[i + j * M] = t;
    }
  const int64_t ss[2] = {1, C};
  loom_tensor t[4] = {mats(u, 1, M, M, M), dense(s, LOOM_FLOAT64, 2, ss), mats(v, 1, C, C, C),
                      ints1(info, 1)};
  CHECK_OK(run_chunks(loom_linalg_svd, t, 4, NULL, 0, 1, 1));
  CHECK_EQ_INT(info[0], 0);
  CHECK_NEAR(orth_error(u, M, M, M), 0.0, 1e-13);
  CHECK_NEAR(orth_error(v, C, C, C), 0.0, 1e-13);
  for (int k = 1; k < C; ++k) CHECK(s[k - 1] >= s[k]);
  CHECK(s[R] < 1e-12 * s[0]);
  double err = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < C; ++j) {
      double r = 0;
      for (int k = 0; k < C; ++k) r += u[i + k * M] * s[k] * v[j + k * C];
      err = fmax(err, fabs(r - a[i + j * M]));
    }
  CHECK_NEAR(err, 0.0, 1e-12);
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
  RUN_TEST(test_lu_pivot_choice);
  RUN_TEST(test_lu_source);
  RUN_TEST(test_trsm_f64);
  RUN_TEST(test_trsm_f32);
  RUN_TEST(test_trsm_right);
  RUN_TEST(test_lu_solve);
  RUN_TEST(test_bad_arguments);
  RUN_TEST(test_chunking);
  RUN_TEST(test_qr);
  RUN_TEST(test_eigh);
  RUN_TEST(test_svd);
  TEST_MAIN_END();
}
