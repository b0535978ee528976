/* The elementary functions of "complex.apply" (exp, log, sqrt, reciprocal,
 * sin, cos, tanh, sigmoid, sgn) against their definitions in real arithmetic
 * over random complex64 / complex128 values, special values (infinities,
 * NaN, signed zeros) as C99's Annex G and PyTorch's CPU give them, a
 * strided operand, chunking that never changes a bit, and bad arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "loom/kernels/complex.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { N = 257 };
static const double kPi = 3.14159265358979323846;

static const int kOps[] = {LOOM_COMPLEX_EXP, LOOM_COMPLEX_LOG,  LOOM_COMPLEX_SQRT,
                           LOOM_COMPLEX_RECIPROCAL, LOOM_COMPLEX_SIN, LOOM_COMPLEX_COS,
                           LOOM_COMPLEX_TANH, LOOM_COMPLEX_SIGMOID, LOOM_COMPLEX_SGN};

static loom_kernel_fn kernel(void) {
  const loom_kernel_entry *e = loom_kernel_library_find("complex.apply");
  return e ? e->fn : NULL;
}

/* The definition of op at (a, b) in long double real arithmetic. */
static void reference(int op, long double a, long double b, long double *yr, long double *yi) {
  switch (op) {
    case LOOM_COMPLEX_EXP:
      *yr = expl(a) * cosl(b);
      *yi = expl(a) * sinl(b);
      break;
    case LOOM_COMPLEX_LOG:
      *yr = logl(hypotl(a, b));
      *yi = atan2l(b, a);
      break;
    case LOOM_COMPLEX_SQRT: { /* the principal root: re >= 0 */
      const long double m = hypotl(a, b);
      *yr = sqrtl((m + a) / 2);
      *yi = copysignl(sqrtl((m - a) / 2), b);
      break;
    }
    case LOOM_COMPLEX_RECIPROCAL: {
      const long double d = a * a + b * b;
      *yr = a / d;
      *yi = -b / d;
      break;
    }
    case LOOM_COMPLEX_SIN:
      *yr = sinl(a) * coshl(b);
      *yi = cosl(a) * sinhl(b);
      break;
    case LOOM_COMPLEX_COS:
      *yr = cosl(a) * coshl(b);
      *yi = -sinl(a) * sinhl(b);
      break;
    case LOOM_COMPLEX_TANH: {
      const long double d = coshl(2 * a) + cosl(2 * b);
      *yr = sinhl(2 * a) / d;
      *yi = sinl(2 * b) / d;
      break;
    }
    case LOOM_COMPLEX_SGN:
      *yr = a / hypotl(a, b);
      *yi = b / hypotl(a, b);
      break;
    default: { /* 1 / (1 + exp(-z)) */
      const long double er = 1 + expl(-a) * cosl(-b), ei = expl(-a) * sinl(-b);
      const long double d = er * er + ei * ei;
      *yr = er / d;
      *yi = -ei / d;
    }
  }
}

/* Runs op over n complex values x (interleaved) into y, in chunks. */
static int run(int op, int32_t dt, void *y, const void *x, int64_t n, int64_t xstride,
               int64_t grain) {
  const int64_t sizes[1] = {n}, ys[1] = {1}, xs[1] = {xstride};
  loom_tensor t[3] = {tensor(y, dt, 1, sizes, ys), tensor((void *)x, dt, 1, sizes, xs), none()};
  loom_scalar s[5] = {si(op), sf(0), sf(0), sf(1), sf(0)};
  return run_chunks(kernel(), t, 3, s, 5, n, grain);
}

static void check_random(int32_t dt) {
  const int f32 = dt == LOOM_COMPLEX64;
  const double tol = f32 ? 2e-6 : 1e-14;
  double v[2 * N];
  for (int64_t i = 0; i < 2 * N; ++i) v[i] = 4 * frand();
  float xf[4 * N], yf[2 * N], zf[2 * N];
  double xd[4 * N], yd[2 * N], zd[2 * N];
  /* the operand at stride 2 (every other complex value) */
  for (int64_t i = 0; i < N; ++i) {
    for (int k = 0; k < 2; ++k) {
      xf[4 * i + k] = (float)v[2 * i + k];
      xd[4 * i + k] = v[2 * i + k];
      xf[4 * i + 2 + k] = 1e30f;
      xd[4 * i + 2 + k] = 1e300;
    }
  }
  for (size_t o = 0; o < sizeof kOps / sizeof kOps[0]; ++o) {
    const int op = kOps[o];
    void *y = f32 ? (void *)yf : (void *)yd, *z = f32 ? (void *)zf : (void *)zd;
    const void *x = f32 ? (const void *)xf : (const void *)xd;
    CHECK_EQ_INT(run(op, dt, y, x, N, 2, N), LOOM_OK);
    CHECK_EQ_INT(run(op, dt, z, x, N, 2, 7), LOOM_OK);
    CHECK(memcmp(y, z, (f32 ? sizeof yf : sizeof yd)) == 0); /* chunking */
    for (int64_t i = 0; i < N; ++i) {
      const long double a = f32 ? xf[4 * i] : xd[4 * i];
      const long double b = f32 ? xf[4 * i + 1] : xd[4 * i + 1];
      long double rr, ri;
      reference(op, a, b, &rr, &ri);
      const double gr = f32 ? yf[2 * i] : yd[2 * i], gi = f32 ? yf[2 * i + 1] : yd[2 * i + 1];
      const double scale = 1 + fabs((double)rr) + fabs((double)ri);
      CHECK_NEAR(gr, (double)rr, tol * scale);
      CHECK_NEAR(gi, (double)ri, tol * scale);
    }
  }
}

static void test_random_values(void) {
  check_random(LOOM_COMPLEX64);
  check_random(LOOM_COMPLEX128);
}

/* One special value: the op's result matches (NaN matching NaN, zeros
 * their sign). */
static void special(int op, double a, double b, double wr, double wi) {
  for (int f32 = 0; f32 < 2; ++f32) {
    double gr, gi, er = wr, ei = wi;
    if (f32) {
      er = (float)wr;
      ei = (float)wi;
      float x[2] = {(float)a, (float)b}, y[2];
      CHECK_EQ_INT(run(op, LOOM_COMPLEX64, y, x, 1, 1, 1), LOOM_OK);
      gr = y[0];
      gi = y[1];
    } else {
      double x[2] = {a, b}, y[2];
      CHECK_EQ_INT(run(op, LOOM_COMPLEX128, y, x, 1, 1, 1), LOOM_OK);
      gr = y[0];
      gi = y[1];
    }
    const int same_r = (isnan(er) && isnan(gr)) || (gr == er && signbit(gr) == signbit(er));
    const int same_i = (isnan(ei) && isnan(gi)) || (gi == ei && signbit(gi) == signbit(ei));
    CHECK_MSG(same_r && same_i, "op %d at (%g, %g) f32=%d: got (%g, %g), want (%g, %g)", op,
              a, b, f32, gr, gi, wr, wi);
  }
}

static void test_special_values(void) {
  const double inf = INFINITY, nan = NAN;
  special(LOOM_COMPLEX_EXP, inf, 0, inf, 0);
  special(LOOM_COMPLEX_EXP, -inf, 0, 0, 0);
  special(LOOM_COMPLEX_EXP, 0, inf, nan, nan);
  special(LOOM_COMPLEX_EXP, -inf, inf, 0, 0);
  special(LOOM_COMPLEX_EXP, nan, 0, nan, 0);
  special(LOOM_COMPLEX_LOG, 0, 0, -inf, 0);
  special(LOOM_COMPLEX_LOG, -0.0, 0, -inf, kPi);
  special(LOOM_COMPLEX_LOG, -inf, 0, inf, kPi);
  special(LOOM_COMPLEX_LOG, nan, 0, nan, nan);
  special(LOOM_COMPLEX_SQRT, -inf, 0, 0, inf);
  special(LOOM_COMPLEX_SQRT, 0, inf, inf, inf);
  special(LOOM_COMPLEX_SQRT, -0.0, 0, 0, 0);
  special(LOOM_COMPLEX_RECIPROCAL, 0, 0, inf, nan);  /* 1 / 0, as PyTorch divides */
  special(LOOM_COMPLEX_RECIPROCAL, -0.0, 0, inf, nan); /* |-0| is +0 */
  special(LOOM_COMPLEX_RECIPROCAL, inf, 0, 0, 0);
  special(LOOM_COMPLEX_RECIPROCAL, -inf, 0, -0.0, -0.0);
  special(LOOM_COMPLEX_SIN, 0, inf, 0, inf);
  special(LOOM_COMPLEX_SIN, inf, 0, nan, 0);
  special(LOOM_COMPLEX_COS, 0, inf, inf, -0.0);
  special(LOOM_COMPLEX_TANH, inf, 1, 1, 0);
  special(LOOM_COMPLEX_TANH, -inf, 1, -1, 0);
  special(LOOM_COMPLEX_TANH, 0, nan, 0, nan);
  special(LOOM_COMPLEX_SIGMOID, inf, 0, 1, 0);
  special(LOOM_COMPLEX_SIGMOID, -inf, 0, 0, 0);
  special(LOOM_COMPLEX_SIGMOID, 0, 0, 0.5, 0);
  special(LOOM_COMPLEX_SGN, 0, 0, 0, 0);
  special(LOOM_COMPLEX_SGN, -3, 0, -1, 0);
}

static void test_bad_arguments(void) {
  float x[2] = {1, 2}, y[2];
  double yd[2];
  /* an unknown op */
  CHECK_EQ_INT(run(LOOM_COMPLEX_OP_COUNT, LOOM_COMPLEX64, y, x, 1, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);
  /* out and a of different dtypes */
  const int64_t sizes[1] = {1}, st[1] = {1};
  loom_tensor t[3] = {tensor(yd, LOOM_COMPLEX128, 1, sizes, st),
                      tensor(x, LOOM_COMPLEX64, 1, sizes, st), none()};
  loom_scalar s[5] = {si(LOOM_COMPLEX_EXP), sf(0), sf(0), sf(1), sf(0)};
  CHECK_EQ_INT(run_chunks(kernel(), t, 3, s, 5, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  /* a real operand */
  t[0] = tensor(y, LOOM_FLOAT32, 1, sizes, st);
  t[1] = tensor(x, LOOM_FLOAT32, 1, sizes, st);
  CHECK(run_chunks(kernel(), t, 3, s, 5, 1, 1) != LOOM_OK);
}

int main(void) {
  srand(11);
  if (!kernel()) {
    fprintf(stderr, "complex.apply is not in the kernel library\n");
    return 1;
  }
  RUN_TEST(test_random_values);
  RUN_TEST(test_special_values);
  RUN_TEST(test_bad_arguments);
  TEST_MAIN_END();
}
