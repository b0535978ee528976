/* Dense sweeps of the elementwise kernel's float32 sin, cos
 * (kernels/pointwise/pointwise_trig.h: the float form up to |x| =
 * LOOM_TRIG_FAST), tanh and sigmoid (pointwise_exp.h) against double precision: every
 * 263rd float of the range and its negative (every float with
 * LOOM_TEST_EXHAUSTIVE=1, minutes), the generic build's bits equal to the
 * AVX-512 build's; past LOOM_TRIG_FAST the double form's values, and a block
 * mixing the ranges giving each element the value it has alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pointwise/pointwise.h"
#include "kernels/pointwise/pointwise_trig.h"
#include "loom/status.h"
#include "test_util.h"

/* The worst errors measured over every float of the ranges (the
 * exhaustive sweeps): sin 0.7774 ulp (at 0x1.03f86cp+8), cos 0.7940 (at
 * 0x1.984c86p-1), tanh 2.4245 (at 0x1.ff395cp-6), sigmoid 2.4019 (at
 * -0x1.0a111ap+2). */
#define FAST_ULP 0.80
#define TANH_ULP 2.5
#define SIGMOID_ULP 2.5

static double ulp_of(double v) {
  int e;
  frexp(fabs(v), &e);
  return ldexp(1.0, (e < -125 ? -125 : e) - 24);
}

static int same_f32(const float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(isnan(x[i]) && isnan(y[i])) && !test_same_bits(x + i, y + i, 4)) return 0;
  return 1;
}

static double ref_sin(double x) { return sin(x); }
static double ref_cos(double x) { return cos(x); }
static double ref_tanh(double x) { return tanh(x); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The worst error in ulp of `op` against `ref` over every `step`-th float
 * in [0, lim] and its negative (every float with LOOM_TEST_EXHAUSTIVE=1),
 * in blocks; counts blocks whose generic and AVX-512 bits differ. */
static double sweep(int op, double (*ref)(double), float lim, float *worst_x, int64_t *count,
                    int64_t *differ) {
  const char *ex = getenv("LOOM_TEST_EXHAUSTIVE");
  const uint32_t step = (ex && ex[0] == '1') ? 1 : 263;
  uint32_t top;
  memcpy(&top, &lim, sizeof top);
  enum { B = 4096 };
  static float x[B], y[2][B];
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  double worst = 0.0;
  *count = *differ = 0;
  uint32_t b = 0;
  while (b <= top) {
    int n = 0;
    for (; n < B && b <= top; n += 2, b = (top - b < step) ? top + 1 : b + step) {
      memcpy(&x[n], &b, sizeof x[n]);
      x[n + 1] = -x[n];
    }
    *count += n;
    CHECK(loom_pw_apply_f32(op, n, y[0], in, p) == 0);
    CHECK(loom_pw_apply_f32_avx512(op, n, y[1], in, p) == 0);
    *differ += !same_f32(y[0], y[1], n);
    for (int i = 0; i < n; ++i) {
      const double r = ref((double)x[i]);
      const double err = r == 0.0 ? (y[0][i] != 0.0f) * 1e9 : fabs(y[0][i] - r) / ulp_of(r);
      if (err > worst) {
        worst = err;
        *worst_x = x[i];
      }
    }
  }
  return worst;
}

/* sin and cos over the float form's range. */
static void test_sincos_sweep(void) {
  float wx[2] = {0.0f, 0.0f};
  int64_t count, differ[2];
  const double ws = sweep(LOOM_PW_SIN, ref_sin, LOOM_TRIG_FAST, &wx[0], &count, &differ[0]);
  const double wc = sweep(LOOM_PW_COS, ref_cos, LOOM_TRIG_FAST, &wx[1], &count, &differ[1]);
  fprintf(stderr, "sin, cos over %lld floats in [-%g, %g]: within %.4f and %.4f ulp (at %a, %a)\n",
          (long long)count, LOOM_TRIG_FAST, LOOM_TRIG_FAST, ws, wc, wx[0], wx[1]);
  CHECK(differ[0] == 0 && differ[1] == 0);
  CHECK(ws <= FAST_ULP && wc <= FAST_ULP);
  /* the reduction's k stays under 256 */
  CHECK(0.63661977f * LOOM_TRIG_FAST < 255.5f);
}

/* tanh over [-10, 10] (+-1 beyond). */
static void test_tanh_sweep(void) {
  float wx = 0.0f;
  int64_t count, differ;
  const double w = sweep(LOOM_PW_TANH, ref_tanh, 10.0f, &wx, &count, &differ);
  fprintf(stderr, "tanh over %lld floats in [-10, 10]: within %.4f ulp (at %a)\n",
          (long long)count, w, wx);
  CHECK(differ == 0);
  CHECK(w <= TANH_ULP);
}

/* sigmoid over [-110, 110]: the subnormal results below -87 and 0 below
 * -103.9 included. */
static void test_sigmoid_sweep(void) {
  float wx = 0.0f;
  int64_t count, differ;
  const double w = sweep(LOOM_PW_SIGMOID, ref_sigmoid, 110.0f, &wx, &count, &differ);
  fprintf(stderr, "sigmoid over %lld floats in [-110, 110]: within %.4f ulp (at %a)\n",
          (long long)count, w, wx);
  CHECK(differ == 0);
  CHECK(w <= SIGMOID_ULP);
  const float s[5] = {NAN, INFINITY, -INFINITY, -0.0f, -100.0f};
  float y[5];
  const float *in[3] = {s, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_SIGMOID, 5, y, in, p) == 0);
  CHECK(isnan(y[0]) && y[1] == 1.0f && y[2] == 0.0f && y[3] == 0.5f);
  CHECK(fabs(y[4] - 3.720076e-44) <= 1.4e-45);
}

/* Past LOOM_TRIG_FAST the double form as before, within 0.51 ulp. */
static void test_beyond(void) {
  enum { N = 20000 };
  static float x[N], y[2][N];
  for (int i = 0; i < N; ++i) {
    const float u = (float)i / N;
    x[i] = (i % 2 ? -1.0f : 1.0f) * (LOOM_TRIG_FAST + (LOOM_TRIG_MAX - LOOM_TRIG_FAST) * u * u);
  }
  x[0] = nextafterf(LOOM_TRIG_FAST, INFINITY);
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  for (int phase = 0; phase < 2; ++phase) {
    const int op = phase ? LOOM_PW_COS : LOOM_PW_SIN;
    CHECK(loom_pw_apply_f32(op, N, y[0], in, p) == 0);
    CHECK(loom_pw_apply_f32_avx512(op, N, y[1], in, p) == 0);
    CHECK(same_f32(y[0], y[1], N));
    double worst = 0.0;
    for (int i = 0; i < N; ++i) {
      const double ref = phase ? cos((double)x[i]) : sin((double)x[i]);
      worst = fmax(worst, fabs(y[0][i] - ref) / ulp_of(ref));
      if (y[0][i] != loom_sincosf_exact(x[i], phase)) worst = 99.0;
    }
    CHECK(worst <= 0.51);
  }
}

/* A block's elements keep the values they have alone, whichever of the
 * three loops (float form, both forms, the C library) the block takes. */
static void test_mixed_blocks(void) {
  enum { N = 700 };
  static float x[N], y[2][N], one[2];
  for (int i = 0; i < N; ++i) x[i] = (float)(i - N / 2) * 1.37f;  /* to +-480 */
  x[N - 1] = 3e5f;
  x[N - 2] = NAN;
  x[N - 3] = -INFINITY;
  x[N - 4] = LOOM_TRIG_FAST;
  x[N - 5] = -LOOM_TRIG_FAST;
  loom_scalar p[4] = {{.f = 0}};
  for (int phase = 0; phase < 2; ++phase) {
    const int op = phase ? LOOM_PW_COS : LOOM_PW_SIN;
    for (int len = N; len >= N - 6; len -= 3) { /* with and without the C library's values */
      const float *in[3] = {x, NULL, NULL};
      CHECK(loom_pw_apply_f32(op, len, y[0], in, p) == 0);
      CHECK(loom_pw_apply_f32_avx512(op, len, y[1], in, p) == 0);
      int bad = !same_f32(y[0], y[1], len);
      for (int i = 0; i < len; ++i) {
        const float *in1[3] = {x + i, NULL, NULL};
        CHECK(loom_pw_apply_f32_avx512(op, 1, one, in1, p) == 0);
        bad += !same_f32(one, y[0] + i, 1);
      }
      CHECK(bad == 0);
    }
    CHECK(y[0][N - 1] == (phase ? cosf(3e5f) : sinf(3e5f)));
    CHECK(isnan(y[0][N - 2]) && isnan(y[0][N - 3]));
  }
  /* signed zero and the smallest arguments */
  const float z[4] = {-0.0f, 1e-30f, -1.4e-45f, 0.0f};
  float zs[4], zc[4];
  const float *zin[3] = {z, NULL, NULL};
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_SIN, 4, zs, zin, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_COS, 4, zc, zin, p) == 0);
  CHECK(zs[0] == 0.0f && signbit(zs[0]) && zs[1] == 1e-30f && zs[2] == -1.4e-45f);
  CHECK(zs[3] == 0.0f && !signbit(zs[3]));
  CHECK(zc[0] == 1.0f && zc[1] == 1.0f && zc[2] == 1.0f && zc[3] == 1.0f);
}

int main(void) {
  RUN_TEST(test_sincos_sweep);
  RUN_TEST(test_tanh_sweep);
  RUN_TEST(test_sigmoid_sweep);
  RUN_TEST(test_beyond);
  RUN_TEST(test_mixed_blocks);
  TEST_MAIN_END();
}
