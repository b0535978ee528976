/* gemm.int against products summed from their definition in wrapping
 * uint64 arithmetic (every integer dtype, bool, transposed B, Cin), and
 * its argument checks; segment_reduce's forward and backward against
 * sums, means and products from their definition (offsets, empty
 * segments, inner blocks), with every chunking giving the same bits;
 * igamma/igammac against closed forms: P(1, x) = 1 - e^-x,
 * P(1/2, x) = erf(sqrt x), Q(n, x) = e^-x sum_{k<n} x^k / k!. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pointwise/igamma.h"
#include "kernels/registry.h"
#include "loom/kernels/segment_reduce.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

static loom_kernel_fn find(const char *name) {
  const loom_kernel_entry *e = loom_kernel_library_find(name);
  return e ? e->fn : NULL;
}

/* ---- gemm.int ------------------------------------------------------------------- */

enum { GM = 7, GK = 300, GN = 9 };

static int64_t load_int(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
    case LOOM_INT8: return ((const int8_t *)p)[i];
    case LOOM_UINT8: return ((const uint8_t *)p)[i];
    case LOOM_INT16: return ((const int16_t *)p)[i];
    case LOOM_INT32: return ((const int32_t *)p)[i];
    case LOOM_BOOL: return ((const uint8_t *)p)[i];
    default: return ((const int64_t *)p)[i];
  }
}

static void store_int(void *p, int32_t dt, int64_t i, int64_t v) {
  switch (dt) {
    case LOOM_INT8: ((int8_t *)p)[i] = (int8_t)(uint8_t)v; break;
    case LOOM_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case LOOM_INT16: ((int16_t *)p)[i] = (int16_t)(uint16_t)v; break;
    case LOOM_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case LOOM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: ((int64_t *)p)[i] = v;
  }
}

static int64_t wrap(int32_t dt, uint64_t v) {
  switch (dt) {
    case LOOM_INT8: return (int8_t)(uint8_t)v;
    case LOOM_UINT8: return (uint8_t)v;
    case LOOM_INT16: return (int16_t)(uint16_t)v;
    case LOOM_INT32: return (int32_t)(uint32_t)v;
    case LOOM_BOOL: return v != 0;
    default: return (int64_t)v;
  }
}

static void gemm_int_case(int32_t dt, int64_t alpha, int64_t beta) {
  const loom_kernel_fn fn = find("gemm.int");
  CHECK(fn != NULL);
  if (!fn) return;
  int64_t *a = malloc(GM * GK * 8), *b = malloc(GK * GN * 8), *c = malloc(GM * GN * 8);
  int64_t *out = malloc(GM * GN * 8);
  for (int64_t i = 0; i < GM * GK; ++i) store_int(a, dt, i, rand() - RAND_MAX / 2);
  for (int64_t i = 0; i < GK * GN; ++i) store_int(b, dt, i, rand() - RAND_MAX / 2);
  for (int64_t i = 0; i < GM * GN; ++i) store_int(c, dt, i, rand() - RAND_MAX / 2);
  /* B stored transposed (n, k): its rows are strided */
  const int64_t sa[4] = {1, 1, GM, GK}, sta[4] = {0, 0, GK, 1};
  const int64_t sb[4] = {1, 1, GK, GN}, stb[4] = {0, 0, 1, GK};
  const int64_t sc[4] = {1, 1, GM, GN}, stc[4] = {0, 0, GN, 1};
  for (int grain = 1; grain <= GM; grain += 3) {
    memset(out, 0x5a, GM * GN * 8);
    loom_tensor t[4] = {tensor(out, dt, 4, sc, stc), tensor(a, dt, 4, sa, sta),
                        tensor(b, dt, 4, sb, stb), tensor(c, dt, 4, sc, stc)};
    loom_scalar s[2] = {si(alpha), si(beta)};
    CHECK_OK(run_chunks(fn, t, 4, s, 2, GM, grain));
    int bad = 0;
    for (int64_t i = 0; i < GM; ++i)
      for (int64_t j = 0; j < GN; ++j) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < GK; ++k) {
          const int64_t x = load_int(a, dt, i * GK + k), y = load_int(b, dt, j * GK + k);
          acc = dt == LOOM_BOOL ? (acc || (x && y)) : acc + (uint64_t)x * (uint64_t)y;
        }
        const int64_t cin = load_int(c, dt, i * GN + j);
        const int64_t want =
            dt == LOOM_BOOL ? ((alpha && acc) || (beta && cin))
                            : wrap(dt, (uint64_t)alpha * acc + (beta ? (uint64_t)beta * (uint64_t)cin : 0));
        bad += load_int(out, dt, i * GN + j) != want;
      }
    CHECK_EQ_INT(bad, 0);
  }
  free(a);
  free(b);
  free(c);
  free(out);
}

static void test_gemm_int(void) {
  const int32_t dts[] = {LOOM_INT8, LOOM_UINT8, LOOM_INT16, LOOM_INT32, LOOM_INT64, LOOM_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; ++d) {
    gemm_int_case(dts[d], 1, 0);
    gemm_int_case(dts[d], -3, 5);
    gemm_int_case(dts[d], 0, 1);
  }
  /* mixed dtypes and a float dtype are refused */
  int64_t buf[16] = {0};
  const int64_t s[4] = {1, 1, 2, 2}, st[4] = {0, 0, 2, 1};
  loom_tensor t[3] = {tensor(buf, LOOM_INT32, 4, s, st), tensor(buf, LOOM_INT64, 4, s, st),
                      tensor(buf, LOOM_INT32, 4, s, st)};
  loom_scalar sc[2] = {si(1), si(0)};
  CHECK_EQ_INT(run_chunks(find("gemm.int"), t, 3, sc, 2, 2, 1), LOOM_ERROR_INVALID_ARGUMENT);
  t[0].dtype = t[1].dtype = t[2].dtype = LOOM_FLOAT32;
  CHECK_EQ_INT(run_chunks(find("gemm.int"), t, 3, sc, 2, 2, 1), LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- segment_reduce ---------------------------------------------------------------- */

enum { SO = 2, SN = 23, SI = 300, SS = 5 };

static void test_segment_reduce(void) {
  const loom_kernel_fn fwd = find("segment_reduce.forward"), bwd = find("segment_reduce.backward");
  CHECK(fwd != NULL && bwd != NULL);
  if (!fwd || !bwd) return;
  double *x = malloc(SO * SN * SI * 8), *y = malloc(SO * SS * SI * 8), *y1 = malloc(SO * SS * SI * 8);
  double *g = malloc(SO * SS * SI * 8), *gi = malloc(SO * SN * SI * 8), *gi1 = malloc(SO * SN * SI * 8);
  fill(x, SO * SN * SI);
  fill(g, SO * SS * SI);
  const int64_t off[SO][SS + 1] = {{0, 4, 4, 11, 20, 23}, {1, 1, 9, 9, 15, 22}};
  const int64_t xs[3] = {SO, SN, SI}, ys[3] = {SO, SS, SI}, os[2] = {SO, SS + 1};
  const int64_t blocks = (SI + LOOM_SEGMENT_BLOCK - 1) / LOOM_SEGMENT_BLOCK;
  for (int red = LOOM_SEGMENT_SUM; red <= LOOM_SEGMENT_PROD; ++red) {
    loom_scalar s[3] = {si(red), si(1), sf(0.5)};
    loom_tensor tf[3] = {dense(y, LOOM_FLOAT64, 3, ys), dense(x, LOOM_FLOAT64, 3, xs),
                         dense((void *)off, LOOM_INT64, 2, os)};
    CHECK_OK(run_chunks(fwd, tf, 3, s, 3, SO * blocks, 1));
    tf[0].data = y1;
    CHECK_OK(run_chunks(fwd, tf, 3, s, 3, SO * blocks, SO * blocks));
    CHECK(memcmp(y, y1, SO * SS * SI * 8) == 0);
    memset(gi, 0, SO * SN * SI * 8);
    memset(gi1, 0, SO * SN * SI * 8);
    loom_tensor tb[5] = {dense(gi, LOOM_FLOAT64, 3, xs), dense(g, LOOM_FLOAT64, 3, ys),
                         dense(y, LOOM_FLOAT64, 3, ys), dense(x, LOOM_FLOAT64, 3, xs),
                         dense((void *)off, LOOM_INT64, 2, os)};
    CHECK_OK(run_chunks(bwd, tb, 5, s, 3, SO * blocks, 1));
    tb[0].data = gi1;
    CHECK_OK(run_chunks(bwd, tb, 5, s, 3, SO * blocks, 3));
    CHECK(memcmp(gi, gi1, SO * SN * SI * 8) == 0);
    if (red == LOOM_SEGMENT_MAX || red == LOOM_SEGMENT_MIN) continue;
    double err = 0, gerr = 0;
    for (int64_t o = 0; o < SO; ++o)
      for (int64_t sg = 0; sg < SS; ++sg)
        for (int64_t i = 0; i < SI; ++i) {
          const int64_t b = off[o][sg], e = off[o][sg + 1];
          double v = red == LOOM_SEGMENT_PROD ? 0.5 : 0.5;
          for (int64_t j = b; j < e; ++j) {
            const double xv = x[(o * SN + j) * SI + i];
            v = red == LOOM_SEGMENT_PROD ? v * xv : v + xv;
          }
          if (red == LOOM_SEGMENT_MEAN && e > b) v /= (double)(e - b);
          err = fmax(err, fabs(v - y[(o * SS + sg) * SI + i]));
          for (int64_t j = b; j < e; ++j) {
            const double gv = g[(o * SS + sg) * SI + i], xv = x[(o * SN + j) * SI + i];
            const double want = red == LOOM_SEGMENT_SUM    ? gv
                                : red == LOOM_SEGMENT_MEAN ? gv / (double)(e - b)
                                                           : gv * y[(o * SS + sg) * SI + i] / xv;
            gerr = fmax(gerr, fabs(want - gi[(o * SN + j) * SI + i]) / (1 + fabs(want)));
          }
        }
    CHECK_NEAR(err, 0.0, 1e-12);
    CHECK_NEAR(gerr, 0.0, 1e-9);
  }
  /* a segment past the data is refused */
  const int64_t bad_off[SO][SS + 1] = {{0, 4, 4, 11, 20, 24}, {0, 1, 9, 9, 15, 22}};
  loom_scalar s[3] = {si(LOOM_SEGMENT_SUM), si(0), sf(0)};
  loom_tensor tf[3] = {dense(y, LOOM_FLOAT64, 3, ys), dense(x, LOOM_FLOAT64, 3, xs),
                       dense((void *)bad_off, LOOM_INT64, 2, os)};
  CHECK_EQ_INT(run_chunks(fwd, tf, 3, s, 3, SO * blocks, 1), LOOM_ERROR_INVALID_ARGUMENT);
  free(x);
  free(y);
  free(y1);
  free(g);
  free(gi);
  free(gi1);
}

/* ---- igamma ------------------------------------------------------------------------ */

static void test_igamma(void) {
  double err = 0;
  for (int i = 1; i <= 400; ++i) {
    const double x = i * 0.05;
    err = fmax(err, fabs(loom_igamma(1.0, x) - (-expm1(-x))));
    err = fmax(err, fabs(loom_igammac(1.0, x) - exp(-x)));
    err = fmax(err, fabs(loom_igamma(0.5, x) - erf(sqrt(x))));
    err = fmax(err, fabs(loom_igammac(0.5, x) - erfc(sqrt(x))));
    for (int n = 2; n <= 40; n += 7) {
      double term = 1, sum = 1;
      for (int k = 1; k < n; ++k) sum += term *= x / k;
      const double q = exp(-x) * sum;
      err = fmax(err, fabs(loom_igammac((double)n, x) - q) / fmax(q, 1e-300) * fmin(q, 1.0));
      err = fmax(err, fabs(loom_igamma((double)n, x) + loom_igammac((double)n, x) - 1.0));
    }
  }
  CHECK_NEAR(err, 0.0, 1e-13);
  CHECK(isnan(loom_igamma(-1.0, 1.0)) && isnan(loom_igammac(1.0, NAN)));
  CHECK(loom_igamma(0.0, 1.0) == 1.0 && loom_igammac(2.0, 0.0) == 1.0);
  CHECK(loom_igamma(3.0, INFINITY) == 1.0 && loom_igammac(INFINITY, 2.0) == 1.0);
}

int main(void) {
  srand(41);
  RUN_TEST(test_gemm_int);
  RUN_TEST(test_segment_reduce);
  RUN_TEST(test_igamma);
  TEST_MAIN_END();
}
