/* The histogram kernel against bins counted from their definition in fp64
 * (bin b holds [edges[b], edges[b + 1]), the last also its right edge;
 * outside and NaN skipped), for the linear, searched and binary bin
 * selections, with and without weights; frexp against its definition
 * (mantissa * 2^exponent == x, 0.5 <= |mantissa| < 1) over normal,
 * subnormal and special values of every float dtype. Chunking never
 * changes a bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/pointwise/frexp.h"
#include "kernels/reduce/histogram.h"
#include "loom/kernels/pointwise.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* ---- histogram ------------------------------------------------------------------ */

enum { H_N = 5003, H_BLOCK = 700, H_P = (H_N + H_BLOCK - 1) / H_BLOCK };

/* The bin of x over nb bins of edges by their definition; -1 if none. */
static int64_t ref_bin(const double *edges, int64_t nb, double x) {
  if (!(x >= edges[0] && x <= edges[nb])) return -1;
  for (int64_t b = 0; b < nb; ++b)
    if (x >= edges[b] && x < edges[b + 1]) return b;
  return nb - 1; /* x == the right edge */
}

/* Runs histogram.bins in T over x (and w) and sums the partials in fp64. */
static void hist_case(int32_t dt, int algorithm, int weighted, const double *edges_d, int64_t nb) {
  const size_t es = dt == LOOM_FLOAT32 ? 4 : 8;
  double *x = malloc(H_N * sizeof(double)), *w = malloc(H_N * sizeof(double));
  double want[64] = {0}, got[64] = {0};
  for (int64_t i = 0; i < H_N; ++i) {
    x[i] = frand() * 3;
    w[i] = (frand() + 1) / 2;
  }
  /* every edge itself, just beside it, NaN and infinities (the linear
   * selection, histc's, divides and truncates: it may put a value within
   * rounding of an inner edge on either side, as the CPU's does, so it gets
   * only the outer edges) */
  for (int64_t b = 0; b <= nb; ++b) {
    if (algorithm == LOOM_HIST_LINEAR && b != 0 && b != nb) continue;
    x[3 * b] = edges_d[b];
    x[3 * b + 1] = dt == LOOM_FLOAT32 ? nextafterf((float)edges_d[b], -INFINITY)
                                      : nextafter(edges_d[b], -INFINITY);
    x[3 * b + 2] = dt == LOOM_FLOAT32 ? nextafterf((float)edges_d[b], INFINITY)
                                      : nextafter(edges_d[b], INFINITY);
  }
  x[H_N - 1] = NAN;
  x[H_N - 2] = INFINITY;
  x[H_N - 3] = -INFINITY;
  void *tx = malloc(H_N * es), *tw = malloc(H_N * es), *te = malloc((nb + 1) * es);
  void *part = malloc(H_P * nb * es), *first = malloc(H_P * nb * es);
  for (int64_t i = 0; i < H_N; ++i) {
    if (dt == LOOM_FLOAT32) {
      ((float *)tx)[i] = (float)x[i];
      ((float *)tw)[i] = (float)w[i];
      x[i] = ((float *)tx)[i];
      w[i] = ((float *)tw)[i];
    } else {
      ((double *)tx)[i] = x[i];
      ((double *)tw)[i] = w[i];
    }
  }
  double edges[65];
  for (int64_t b = 0; b <= nb; ++b) {
    if (dt == LOOM_FLOAT32) ((float *)te)[b] = (float)edges_d[b];
    else ((double *)te)[b] = edges_d[b];
    edges[b] = dt == LOOM_FLOAT32 ? (double)((float *)te)[b] : edges_d[b];
  }
  for (int64_t i = 0; i < H_N; ++i) {
    const int64_t b = ref_bin(edges, nb, x[i]);
    if (b >= 0) want[b] += weighted ? w[i] : 1.0;
  }
  const int64_t sp[2] = {H_P, nb}, sx[1] = {H_N}, se[1] = {nb + 1};
  loom_tensor t[4] = {dense(part, dt, 2, sp), dense(tx, dt, 1, sx),
                      weighted ? dense(tw, dt, 1, sx) : none(), dense(te, dt, 1, se)};
  loom_scalar s[2] = {si(algorithm), si(H_BLOCK)};
  const int64_t grains[3] = {H_P, 1, 2};
  for (int g = 0; g < 3; ++g) {
    memset(part, 0x5a, H_P * nb * es);
    CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, H_P, grains[g]), LOOM_OK);
    if (g == 0) memcpy(first, part, H_P * nb * es);
    else CHECK_MSG(memcmp(first, part, H_P * nb * es) == 0, "grain %lld changed bits",
                   (long long)grains[g]);
  }
  for (int64_t p = 0; p < H_P; ++p)
    for (int64_t b = 0; b < nb; ++b)
      got[b] += dt == LOOM_FLOAT32 ? ((float *)part)[p * nb + b] : ((double *)part)[p * nb + b];
  for (int64_t b = 0; b < nb; ++b) {
    if (weighted)
      CHECK_MSG(fabs(got[b] - want[b]) <= (dt == LOOM_FLOAT32 ? 1e-5 : 1e-12) * H_N,
                "algorithm %d weighted bin %lld: %.9g vs %.9g", algorithm, (long long)b, got[b],
                want[b]);
    else CHECK_MSG(got[b] == want[b], "algorithm %d bin %lld: %g vs %g", algorithm, (long long)b,
                   got[b], want[b]);
  }
  free(x);
  free(w);
  free(tx);
  free(tw);
  free(te);
  free(part);
  free(first);
}

static void test_histogram(void) {
  /* linear edges (as linspace lays them out: from the start for the first
   * half, from the end for the rest, in the dtype) over a range no power
   * of two divides, and uneven ones */
  double lin[17], uneven[6] = {-2.5, -1.0, -0.25, 0.0, 1.75, 2.0};
  for (int d = 0; d < 2; ++d) {
    const int32_t dt = d ? LOOM_FLOAT64 : LOOM_FLOAT32;
    for (int b = 0; b <= 16; ++b) {
      if (dt == LOOM_FLOAT32) {
        const float step = (2.9f - -1.3f) / 16;
        lin[b] = b < 8 ? -1.3f + step * (float)b : 2.9f - step * (float)(16 - b);
      } else {
        const double step = (2.9 - -1.3) / 16;
        lin[b] = b < 8 ? -1.3 + step * b : 2.9 - step * (16 - b);
      }
    }
    for (int weighted = 0; weighted < 2; ++weighted) {
      hist_case(dt, LOOM_HIST_LINEAR, weighted, lin, 16);
      hist_case(dt, LOOM_HIST_LINEAR_SEARCH, weighted, lin, 16);
      hist_case(dt, LOOM_HIST_BINARY, weighted, lin, 16);
      hist_case(dt, LOOM_HIST_BINARY, weighted, uneven, 5);
    }
    const double one[2] = {-1.0, 1.0};
    hist_case(dt, LOOM_HIST_LINEAR, 0, one, 1);
  }
}

static void test_histogram_bad_arguments(void) {
  float x[4] = {0}, e[3] = {0, 1, 2}, part[2];
  const int64_t sp[2] = {1, 2}, sx[1] = {4}, se[1] = {3}, se2[1] = {2};
  loom_tensor t[4] = {dense(part, LOOM_FLOAT32, 2, sp), dense(x, LOOM_FLOAT32, 1, sx), none(),
                      dense(e, LOOM_FLOAT32, 1, se)};
  loom_scalar s[2] = {si(LOOM_HIST_LINEAR), si(4)};
  CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, 1, 1), LOOM_OK);
  s[1] = si(3); /* blocks too small to cover the input */
  CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  s[1] = si(4);
  s[0] = si(7);
  CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  s[0] = si(LOOM_HIST_BINARY);
  t[3] = dense(e, LOOM_FLOAT32, 1, se2); /* edges not bins + 1 */
  CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  t[3] = dense(e, LOOM_FLOAT64, 1, se);
  CHECK_EQ_INT(run_chunks(loom_histogram_bins, t, 4, s, 2, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- frexp ---------------------------------------------------------------------- */

enum { F_N = 600 };

static void frexp_case(int32_t dt) {
  double v[F_N];
  const double special[12] = {0.0, -0.0, 1.0, -1.0, 0.5, 0.75, INFINITY, -INFINITY, NAN,
                              1e-45, 5e-324, 3e38};
  for (int i = 0; i < F_N; ++i) v[i] = i < 12 ? special[i] : frand() * pow(2.0, rand() % 200 - 100);
  const size_t es = loom_dtype_size(dt);
  unsigned char *x = malloc(F_N * es), *m = malloc(F_N * es), *first = malloc(F_N * es);
  int32_t *e = malloc(F_N * sizeof(int32_t));
  for (int i = 0; i < F_N; ++i) {
    if (dt == LOOM_FLOAT32) ((float *)x)[i] = (float)v[i];
    else if (dt == LOOM_FLOAT64) ((double *)x)[i] = v[i];
    else if (dt == LOOM_FLOAT16) ((uint16_t *)x)[i] = loom_f32_to_f16((float)v[i]);
    else ((uint16_t *)x)[i] = loom_f32_to_bf16((float)v[i]);
  }
  const int64_t sn[1] = {F_N};
  loom_tensor t[3] = {dense(m, dt, 1, sn), dense(e, LOOM_INT32, 1, sn), dense(x, dt, 1, sn)};
  for (int g = 0; g < 2; ++g) {
    CHECK_OK(run_chunks(loom_pointwise_frexp, t, 3, NULL, 0, F_N, g ? 7 : F_N));
    if (g == 0) memcpy(first, m, F_N * es);
    else CHECK(memcmp(first, m, F_N * es) == 0);
  }
  int bad = 0;
  for (int i = 0; i < F_N && bad < 5; ++i) {
    double xi, mi;
    if (dt == LOOM_FLOAT32) { xi = ((float *)x)[i]; mi = ((float *)m)[i]; }
    else if (dt == LOOM_FLOAT64) { xi = ((double *)x)[i]; mi = ((double *)m)[i]; }
    else if (dt == LOOM_FLOAT16) { xi = loom_f16_to_f32(((uint16_t *)x)[i]); mi = loom_f16_to_f32(((uint16_t *)m)[i]); }
    else { xi = loom_bf16_to_f32(((uint16_t *)x)[i]); mi = loom_bf16_to_f32(((uint16_t *)m)[i]); }
    int ok;
    if (isnan(xi)) ok = isnan(mi) && e[i] == 0;
    else if (isinf(xi) || xi == 0) ok = mi == xi && signbit(mi) == signbit(xi) && e[i] == 0;
    else ok = ldexp(mi, e[i]) == xi && fabs(mi) >= 0.5 && fabs(mi) < 1;
    if (!ok) {
      ++bad;
      fprintf(stderr, "  dtype %d: frexp(%.17g) gave %.17g, %d\n", dt, xi, mi, e[i]);
    }
  }
  CHECK(bad == 0);
  /* a strided, broadcast input: every row of [3, F_N] reads the same row */
  int32_t *e3 = malloc(3 * F_N * sizeof(int32_t));
  unsigned char *m3 = malloc(3 * F_N * es);
  const int64_t s3[2] = {3, F_N}, sb[2] = {0, 1};
  loom_tensor tb[3] = {dense(m3, dt, 2, s3), dense(e3, LOOM_INT32, 2, s3), tensor(x, dt, 2, s3, sb)};
  CHECK_OK(run_chunks(loom_pointwise_frexp, tb, 3, NULL, 0, 3 * F_N, 100));
  for (int r = 0; r < 3; ++r) {
    CHECK(memcmp(m3 + r * F_N * es, first, F_N * es) == 0);
    CHECK(memcmp(e3 + r * F_N, e, F_N * sizeof(int32_t)) == 0);
  }
  free(x);
  free(m);
  free(e);
  free(first);
  free(e3);
  free(m3);
}

static void test_frexp(void) {
  frexp_case(LOOM_FLOAT32);
  frexp_case(LOOM_FLOAT64);
  frexp_case(LOOM_FLOAT16);
  frexp_case(LOOM_BFLOAT16);
  /* a constant input (a CPU scalar) */
  float m[2];
  int32_t e[2];
  const int64_t s2[1] = {2};
  loom_scalar sc[LOOM_PW_CONST + 2] = {{0}};
  sc[LOOM_PW_CONST + 1] = sf(12.0);
  loom_tensor t[3] = {dense(m, LOOM_FLOAT32, 1, s2), dense(e, LOOM_INT32, 1, s2), none()};
  t[2].dtype = LOOM_FLOAT32;
  CHECK_OK(run_chunks(loom_pointwise_frexp, t, 3, sc, LOOM_PW_CONST + 2, 2, 2));
  CHECK(m[0] == 0.75f && e[0] == 4 && m[1] == 0.75f && e[1] == 4);
  /* an integer exponent dtype other than int32, or an integer input, is refused */
  int64_t e64[2];
  loom_tensor bad[3] = {dense(m, LOOM_FLOAT32, 1, s2), dense(e64, LOOM_INT64, 1, s2),
                        dense(m, LOOM_FLOAT32, 1, s2)};
  CHECK_EQ_INT(run_chunks(loom_pointwise_frexp, bad, 3, NULL, 0, 2, 2), LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor bad2[3] = {dense(e64, LOOM_INT64, 1, s2), dense(e, LOOM_INT32, 1, s2),
                         dense(e64, LOOM_INT64, 1, s2)};
  CHECK_EQ_INT(run_chunks(loom_pointwise_frexp, bad2, 3, NULL, 0, 2, 2), LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(37);
  RUN_TEST(test_histogram);
  RUN_TEST(test_histogram_bad_arguments);
  RUN_TEST(test_frexp);
  TEST_MAIN_END();
}
