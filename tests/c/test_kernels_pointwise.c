/* The elementwise kernel against scalar references: strided, broadcast,
 * mixed-dtype and constant operands, odd chunkings, the integer corner cases,
 * and the AVX-512 build of every op against the generic one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/pointwise/pointwise_trig.h" /* LOOM_TRIG_FAST */
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

static loom_tensor tensor2d(void *data, int32_t dtype, int64_t r, int64_t c,
                            int64_t sr, int64_t sc) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 2};
  t.sizes[0] = r; t.sizes[1] = c; t.strides[0] = sr; t.strides[1] = sc;
  return t;
}

static loom_tensor tensor1d(void *data, int32_t dtype, int64_t n) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 1};
  t.sizes[0] = n; t.strides[0] = 1;
  return t;
}

/* The elementwise kernel over [0, range) in chunks of `grain`. */
static int run(loom_tensor *t, int nt, loom_scalar *s, int64_t range, int64_t grain) {
  return run_chunks(loom_kernel_pointwise, t, nt, s, LOOM_PW_CONST + 3, range, grain);
}

static void scalars(loom_scalar *s, int op, int kind, double p0) {
  memset(s, 0, sizeof(loom_scalar) * (LOOM_PW_CONST + 3));
  s[0].i = op;
  s[1].i = kind;
  if (kind == LOOM_PW_I64) s[LOOM_PW_PARAM].i = (int64_t)p0;
  else s[LOOM_PW_PARAM].f = p0;
}

/* Uniform in [-4, 4]. */
static float frand4(void) { return (float)rand() / RAND_MAX * 8.0f - 4.0f; }

/* out = a + alpha*b^T with b transposed, under chunkings that split rows. */
static void test_strided_add(void) {
  enum { R = 13, C = 29 };
  float a[R * C], b[C * R], out[R * C];
  for (int i = 0; i < R * C; ++i) { a[i] = frand4(); b[i] = frand4(); }
  loom_tensor t[3] = {tensor2d(out, LOOM_FLOAT32, R, C, C, 1),
                      tensor2d(a, LOOM_FLOAT32, R, C, C, 1),
                      tensor2d(b, LOOM_FLOAT32, R, C, 1, R)};
  loom_scalar s[LOOM_PW_CONST + 3];
  scalars(s, LOOM_PW_ADD, LOOM_PW_F32, 2.0);
  const int64_t grains[] = {1, 7, 64, 100000};
  for (int g = 0; g < 4; ++g) {
    memset(out, 0, sizeof out);
    CHECK(run(t, 3, s, R * C, grains[g]) == 0);
    int bad = 0;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        bad += out[r * C + c] != a[r * C + c] + 2.0f * b[c * R + r];
    CHECK(bad == 0);
  }
}

/* fp16 row broadcast against an fp32 column, compared in float; the result
 * is stored to bfloat16. */
static void test_mixed_broadcast(void) {
  enum { R = 5, C = 37 };
  uint16_t row[C], out[R * C];
  float col[R];
  for (int c = 0; c < C; ++c) row[c] = loom_f32_to_f16(frand4());
  for (int r = 0; r < R; ++r) col[r] = frand4();
  loom_tensor t[3] = {tensor2d(out, LOOM_BFLOAT16, R, C, C, 1),
                      tensor2d(row, LOOM_FLOAT16, R, C, 0, 1),
                      tensor2d(col, LOOM_FLOAT32, R, C, 1, 0)};
  loom_scalar s[LOOM_PW_CONST + 3];
  scalars(s, LOOM_PW_MUL, LOOM_PW_F32, 0);
  CHECK(run(t, 3, s, R * C, 16) == 0);
  int bad = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      bad += out[r * C + c] != loom_f32_to_bf16(loom_f16_to_f32(row[c]) * col[r]);
  CHECK(bad == 0);
}

/* A constant operand (data NULL) and a comparison stored to bool. */
static void test_constant_compare(void) {
  enum { N = 1000 };
  double a[N];
  uint8_t out[N];
  for (int i = 0; i < N; ++i) a[i] = frand4();
  loom_tensor t[3] = {tensor1d(out, LOOM_BOOL, N), tensor1d(a, LOOM_FLOAT64, N),
                      {.data = NULL, .dtype = LOOM_FLOAT64, .rank = 0}};
  loom_scalar s[LOOM_PW_CONST + 3];
  scalars(s, LOOM_PW_GT, LOOM_PW_F64, 0);
  s[LOOM_PW_CONST + 1].f = 0.5;
  CHECK(run(t, 3, s, N, 300) == 0);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += out[i] != (a[i] > 0.5);
  CHECK(bad == 0);
}

/* Integer ops wrap in the narrow type; division by zero is reported. */
static void test_integer(void) {
  int8_t a[4] = {127, -128, 7, -7}, b[4] = {1, 1, 2, 2}, out[4];
  loom_tensor t[3] = {tensor1d(out, LOOM_INT8, 4), tensor1d(a, LOOM_INT8, 4),
                      tensor1d(b, LOOM_INT8, 4)};
  loom_scalar s[LOOM_PW_CONST + 3];
  scalars(s, LOOM_PW_ADD, LOOM_PW_I64, 1);
  CHECK(run(t, 3, s, 4, 4) == 0);
  CHECK(out[0] == -128 && out[1] == -127 && out[2] == 9 && out[3] == -5);
  scalars(s, LOOM_PW_DIV_FLOOR, LOOM_PW_I64, 0);
  CHECK(run(t, 3, s, 4, 4) == 0);
  CHECK(out[2] == 3 && out[3] == -4);
  scalars(s, LOOM_PW_REMAINDER, LOOM_PW_I64, 0);
  CHECK(run(t, 3, s, 4, 4) == 0);
  CHECK(out[2] == 1 && out[3] == 1);
  b[2] = 0;
  CHECK(run(t, 3, s, 4, 4) == LOOM_ERROR_INVALID_ARGUMENT);
  int64_t x[2] = {INT64_MIN, 5}, y[2] = {-1, 70}, r[2];
  loom_tensor t64[3] = {tensor1d(r, LOOM_INT64, 2), tensor1d(x, LOOM_INT64, 2),
                        tensor1d(y, LOOM_INT64, 2)};
  scalars(s, LOOM_PW_DIV_TRUNC, LOOM_PW_I64, 0);
  CHECK(run(t64, 3, s, 1, 1) == 0 && r[0] == INT64_MIN);
  scalars(s, LOOM_PW_LSHIFT, LOOM_PW_I64, 0);
  CHECK(run(t64, 3, s, 2, 2) == 0 && r[1] == 0);
}

/* A few float ops against libm directly. */
static void test_float_reference(void) {
  enum { N = 257 };
  float a[N], out[N];
  for (int i = 0; i < N; ++i) a[i] = frand4();
  loom_tensor t[2] = {tensor1d(out, LOOM_FLOAT32, N), tensor1d(a, LOOM_FLOAT32, N)};
  loom_scalar s[LOOM_PW_CONST + 3];
  struct { int op; float (*ref)(float); } cases[] = {
      {LOOM_PW_EXP, expf}, {LOOM_PW_TANH, tanhf}, {LOOM_PW_FLOOR, floorf},
      {LOOM_PW_ERF, erff}, {LOOM_PW_ROUND, nearbyintf}, {LOOM_PW_ABS, fabsf}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    scalars(s, cases[c].op, LOOM_PW_F32, 0);
    CHECK(run(t, 2, s, N, 100) == 0);
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      float ref = cases[c].ref(a[i]);
      bad += fabsf(out[i] - ref) > 1e-6f * (1 + fabsf(ref));
    }
    CHECK(bad == 0);
  }
  /* erfinv inverts erf. */
  for (int i = 0; i < N; ++i) a[i] = frand4() / 4.1f;
  scalars(s, LOOM_PW_ERFINV, LOOM_PW_F32, 0);
  CHECK(run(t, 2, s, N, N) == 0);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += fabsf(erff(out[i]) - a[i]) > 1e-6f;
  CHECK(bad == 0);
}

/* The float32 GELU and its derivative against double precision, within
 * 10 ulp, the far negative tail included; the derivative Phi(x) + x phi(x)
 * in ulp of its terms' magnitude, as it cancels near its root at -0.75. */
static double ulp_of(double v) {
  const float r = (float)fabs(v);
  return (double)(nextafterf(r, INFINITY) - r);
}

static void test_gelu_accuracy(void) {
  enum { N = 24001 };
  static float x[N], g[N], y[N], dx[N];
  for (int i = 0; i < N; ++i) x[i] = -12.0f + 24.0f * (float)i / (N - 1), g[i] = 1.0f;
  const float *in[3] = {x, NULL, NULL}, *in2[3] = {g, x, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_GELU, N, y, in, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_GELU_BACKWARD, N, dx, in2, p) == 0);
  double worst = 0.0, worst_d = 0.0;
  for (int i = 0; i < N; ++i) {
    const double v = x[i], cdf = 0.5 * erfc(-v / sqrt(2.0));
    const double term = v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI), ref = v * cdf;
    if (fabs(ref) > 1e-30) worst = fmax(worst, fabs(y[i] - ref) / ulp_of(ref));
    if (cdf + fabs(term) > 1e-30)
      worst_d = fmax(worst_d, fabs(dx[i] - (cdf + term)) / ulp_of(cdf + fabs(term)));
  }
  CHECK(worst <= 10.0);
  CHECK(worst_d <= 10.0);
  /* NaN stays NaN; gelu(inf) = inf, gelu(-inf) = NaN (-inf * 0), as the
   * formula gives them */
  float sx[3] = {NAN, INFINITY, -INFINITY}, sy[3];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_GELU, 3, sy, sin_, p) == 0);
  CHECK(isnan(sy[0]) && sy[1] == INFINITY && isnan(sy[2]));
}

/* float32 erf and erfc against double precision over [-12, 12]: erf
 * within 4 ulp; erfc within 8 ulp down to the smallest normal float, and
 * within 4 of the smallest subnormal's steps below it. */
static void test_erf_accuracy(void) {
  enum { N = 48001 };
  static float x[N], e[N], c[N];
  for (int i = 0; i < N; ++i) x[i] = -12.0f + 24.0f * (float)i / (N - 1);
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_ERF, N, e, in, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_ERFC, N, c, in, p) == 0);
  double worst_e = 0.0, worst_c = 0.0, worst_abs = 0.0;
  for (int i = 0; i < N; ++i) {
    const double re = erf((double)x[i]), rc = erfc((double)x[i]);
    if (re != 0.0) worst_e = fmax(worst_e, fabs(e[i] - re) / ulp_of(re));
    if (rc >= 1.17549435e-38) worst_c = fmax(worst_c, fabs(c[i] - rc) / ulp_of(rc));
    else worst_abs = fmax(worst_abs, fabs(c[i] - rc) / 1.40129846e-45);
  }
  CHECK(worst_e <= 4.0);
  CHECK(worst_c <= 8.0);
  CHECK(worst_abs <= 4.0);
  float sx[4] = {NAN, INFINITY, -INFINITY, 0.0f}, se[4], sc[4];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_ERF, 4, se, sin_, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_ERFC, 4, sc, sin_, p) == 0);
  CHECK(isnan(se[0]) && se[1] == 1.0f && se[2] == -1.0f && se[3] == 0.0f);
  CHECK(isnan(sc[0]) && sc[1] == 0.0f && sc[2] == 2.0f && sc[3] == 1.0f);
}

/* float32 e^x against double precision within 1.2 ulp over its range,
 * subnormal results included; inf past 88.73, 0 below -104, NaN kept. */
static void test_exp_accuracy(void) {
  enum { N = 40001 };
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) x[i] = -103.9f + 192.6f * (float)i / (N - 1);
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_EXP, N, y, in, p) == 0);
  double worst = 0.0;
  for (int i = 0; i < N; ++i) worst = fmax(worst, fabs(y[i] - exp((double)x[i])) / ulp_of(exp((double)x[i])));
  CHECK(worst <= 1.2);
  float sx[6] = {NAN, INFINITY, -INFINITY, 88.8f, -104.5f, -0.0f}, sy[6];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_EXP, 6, sy, sin_, p) == 0);
  CHECK(isnan(sy[0]) && sy[1] == INFINITY && sy[2] == 0.0f && sy[3] == INFINITY &&
        sy[4] == 0.0f && sy[5] == 1.0f);
}

/* float32 tanh against double precision within 2.5 ulp, small arguments
 * (relative error) and saturation included; -0, NaN and infinities. */
static void test_tanh_accuracy(void) {
  enum { N = 30001 };
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) {
    const float u = -1.0f + 2.0f * (float)i / (N - 1);
    x[i] = i % 2 ? 12.0f * u : 1e-3f * u;
  }
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_TANH, N, y, in, p) == 0);
  double worst = 0.0;
  for (int i = 0; i < N; ++i)
    if (x[i] != 0.0f) worst = fmax(worst, fabs(y[i] - tanh((double)x[i])) / ulp_of(tanh((double)x[i])));
  CHECK(worst <= 2.5);
  float sx[4] = {NAN, INFINITY, -INFINITY, -0.0f}, sy[4];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_TANH, 4, sy, sin_, p) == 0);
  CHECK(isnan(sy[0]) && sy[1] == 1.0f && sy[2] == -1.0f && sy[3] == 0.0f && signbit(sy[3]));
}

/* float32 ln x over the whole range (subnormals included) within 2 ulp,
 * ln(1 + x) within 3.5 ulp, tiny arguments included; their special values. */
static void test_log_accuracy(void) {
  enum { N = 40001 };
  static float x[N], y[N], x1[N], y1[N];
  for (int i = 0; i < N; ++i) {
    x[i] = powf(2.0f, -148.0f + 275.0f * (float)i / (N - 1)) * (1.0f + 0.37f * (float)(i % 7));
    x1[i] = i % 2 ? -0.999f + 11.0f * (float)i / (N - 1) : 1e-30f * powf(1e28f, (float)i / (N - 1)) * (i % 4 ? 1 : -1);
  }
  const float *in[3] = {x, NULL, NULL}, *in1[3] = {x1, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_LOG, N, y, in, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_LOG1P, N, y1, in1, p) == 0);
  double worst = 0.0, worst1 = 0.0;
  for (int i = 0; i < N; ++i) {
    const double r = log((double)x[i]), r1 = log1p((double)x1[i]);
    if (isfinite(r) && r != 0.0) worst = fmax(worst, fabs(y[i] - r) / ulp_of(r));
    if (r1 != 0.0) worst1 = fmax(worst1, fabs(y1[i] - r1) / ulp_of(r1));
  }
  CHECK(worst <= 2.0);
  CHECK(worst1 <= 3.5);
  float sx[6] = {NAN, INFINITY, 0.0f, -0.0f, -1.0f, 1.0f}, sy[6];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_LOG, 6, sy, sin_, p) == 0);
  CHECK(isnan(sy[0]) && sy[1] == INFINITY && sy[2] == -INFINITY && sy[3] == -INFINITY &&
        isnan(sy[4]) && sy[5] == 0.0f);
  float tx[5] = {-1.0f, -2.0f, INFINITY, -0.0f, 1e-30f}, ty[5];
  const float *tin[3] = {tx, NULL, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_LOG1P, 5, ty, tin, p) == 0);
  CHECK(ty[0] == -INFINITY && isnan(ty[1]) && ty[2] == INFINITY && ty[3] == 0.0f &&
        signbit(ty[3]) && ty[4] == 1e-30f);
}

/* float32 softplus (beta 1, threshold 20), log-sigmoid and Mish against
 * double precision over [-100, 100]: within 4, 4 and 6 ulp. */
static void test_softplus_accuracy(void) {
  enum { N = 20001 };
  static float x[N], y[3][N];
  for (int i = 0; i < N; ++i) x[i] = -100.0f + 200.0f * (float)i / (N - 1);
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 1.0}, {.f = 20.0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_SOFTPLUS, N, y[0], in, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_LOG_SIGMOID, N, y[1], in, p) == 0);
  CHECK(loom_pw_apply_f32(LOOM_PW_MISH, N, y[2], in, p) == 0);
  double worst[3] = {0.0, 0.0, 0.0};
  for (int i = 0; i < N; ++i) {
    const double v = x[i], sp = v > 20.0 ? v : log1p(exp(v));
    const double ref[3] = {sp, -log1p(exp(-v)), v * tanh(log1p(exp(v)))};
    for (int k = 0; k < 3; ++k)
      if (fabs(ref[k]) > 1e-30) worst[k] = fmax(worst[k], fabs(y[k][i] - ref[k]) / ulp_of(ref[k]));
  }
  CHECK(worst[0] <= 4.0);
  CHECK(worst[1] <= 4.0);
  CHECK(worst[2] <= 6.0);
}

/* The AVX-512 build gives the generic build's bits for every op (any NaN
 * equals any NaN: operand order may pick another NaN's payload). */
static int same_f32(const float *x, const float *y, int n) {
  for (int i = 0; i < n; ++i)
    if (!(isnan(x[i]) && isnan(y[i])) && !test_same_bits(x + i, y + i, 4)) return 0;
  return 1;
}

/* float32 sin and cos against double precision up to |x| = 2^17 (hard
 * cases near multiples of pi/2 and tiny arguments included), in both ISA
 * builds: within 0.51 ulp past LOOM_TRIG_FAST, within the float form's
 * 0.80 up to it (tests/c/test_kernels_pointwise_sweep.c sweeps that range);
 * past 2^17, and for inf and NaN, the C library's values, while a block's
 * other elements keep theirs. */
static void test_sincos_accuracy(void) {
  enum { N = 60000 };
  static float x[N], y[2][N];
  for (int i = 0; i < N; ++i) {
    const float u = -1.0f + 2.0f * (float)i / (N - 1);
    const int k = i % 3;
    x[i] = k == 0 ? 131072.0f * u : (k == 1 ? 1e-3f * u : (float)(1.5707963267948966 * (i - N / 2)));
  }
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
      const double bound = fabsf(x[i]) <= LOOM_TRIG_FAST ? 0.80 : 0.51;
      if (ref != 0.0) worst = fmax(worst, fabs(y[0][i] - ref) / ulp_of(ref) / bound);
    }
    CHECK(worst <= 1.0);
    /* a block with large and special values: those take the C library,
     * the others the same values as in a block without them */
    float sx[7] = {x[5], 1e6f, INFINITY, x[6], NAN, -0.0f, -3e30f}, sy[7];
    const float *sin_[3] = {sx, NULL, NULL};
    CHECK(loom_pw_apply_f32_avx512(op, 7, sy, sin_, p) == 0);
    CHECK(sy[0] == y[0][5] && sy[3] == y[0][6] && isnan(sy[2]) && isnan(sy[4]));
    CHECK(sy[1] == (phase ? cosf(1e6f) : sinf(1e6f)) && sy[6] == (phase ? cosf(-3e30f) : sinf(-3e30f)));
    CHECK(phase ? sy[5] == 1.0f : (sy[5] == 0.0f && signbit(sy[5])));
  }
}

/* float32 e^x - 1, 2^x, sinh, cosh, tan, log2, log10, atan, asin and acos
 * against double precision within 0.51 ulp over their ranges (arguments
 * from 1e-30 up, overflow to inf included); special values. */
static void test_dexp_accuracy(void) {
  enum { N = 40000, F = 10 };
  static float x[N], y[F][N];
  for (int i = 0; i < N; ++i) {
    const float u = (float)i / (N - 1);
    x[i] = (i % 2 ? -1.0f : 1.0f) * (i % 4 < 2 ? 120.0f * u : ldexpf(1.0f + u, (int)(u * 100.0f) - 100));
  }
  const int ops[F] = {LOOM_PW_EXPM1, LOOM_PW_EXP2, LOOM_PW_SINH, LOOM_PW_COSH, LOOM_PW_TAN,
                      LOOM_PW_LOG2, LOOM_PW_LOG10, LOOM_PW_ATAN, LOOM_PW_ASIN, LOOM_PW_ACOS};
  double (*ref[F])(double) = {expm1, exp2, sinh, cosh, tan, log2, log10, atan, asin, acos};
  const float *in[3] = {x, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  for (int f = 0; f < F; ++f) {
    CHECK(loom_pw_apply_f32_avx512(ops[f], N, y[f], in, p) == 0);
    double worst = 0.0;
    for (int i = 0; i < N; ++i) {
      const double r = ref[f](x[i]);
      if (fabs(r) > 3.4028234663852886e38) {
        worst = fmax(worst, isinf(y[f][i]) && (y[f][i] > 0) == (r > 0) ? 0.0 : 1e9);
      } else if (r != 0.0 && fabs(r) >= 1.17549435e-38) {
        worst = fmax(worst, fabs(y[f][i] - r) / ulp_of(r));
      }
    }
    if (worst > 0.51) fprintf(stderr, "op %d: %.3f ulp\n", ops[f], worst);
    CHECK(worst <= 0.51);
  }
  float sx[4] = {NAN, -0.0f, INFINITY, -INFINITY}, sy[F][4];
  const float *sin_[3] = {sx, NULL, NULL};
  for (int f = 0; f < F; ++f) CHECK(loom_pw_apply_f32_avx512(ops[f], 4, sy[f], sin_, p) == 0);
  CHECK(isnan(sy[0][0]) && sy[0][1] == 0.0f && signbit(sy[0][1]) && sy[0][2] == INFINITY && sy[0][3] == -1.0f);
  CHECK(isnan(sy[1][0]) && sy[1][1] == 1.0f && sy[1][2] == INFINITY && sy[1][3] == 0.0f);
  CHECK(isnan(sy[2][0]) && sy[2][1] == 0.0f && signbit(sy[2][1]) && sy[2][2] == INFINITY && sy[2][3] == -INFINITY);
  CHECK(isnan(sy[3][0]) && sy[3][1] == 1.0f && sy[3][2] == INFINITY && sy[3][3] == INFINITY);
  CHECK(isnan(sy[4][0]) && sy[4][1] == 0.0f && signbit(sy[4][1]) && isnan(sy[4][2]) && isnan(sy[4][3]));
  for (int f = 5; f < 7; ++f)
    CHECK(isnan(sy[f][0]) && sy[f][1] == -INFINITY && sy[f][2] == INFINITY && isnan(sy[f][3]));
  CHECK(isnan(sy[7][0]) && sy[7][1] == 0.0f && signbit(sy[7][1]) && sy[7][2] == atanf(INFINITY) &&
        sy[7][3] == -atanf(INFINITY));
  CHECK(isnan(sy[8][0]) && sy[8][1] == 0.0f && signbit(sy[8][1]) && isnan(sy[8][2]) && isnan(sy[8][3]));
  CHECK(isnan(sy[9][0]) && sy[9][1] == acosf(0.0f) && isnan(sy[9][2]) && isnan(sy[9][3]));
  /* atan2 of signed zeros, infinities and random pairs, in both builds */
  enum { M = 4000 };
  static float ya[M], xa[M], t2[2][M];
  const float sp[6] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.5f};
  for (int i = 0; i < M; ++i) {
    ya[i] = i < 36 ? sp[i % 6] : x[(i * 7) % N];
    xa[i] = i < 36 ? sp[i / 6] : x[(i * 13 + 5) % N] * (i % 3 ? 1.0f : 1e-5f);
  }
  const float *in2[3] = {ya, xa, NULL};
  CHECK(loom_pw_apply_f32(LOOM_PW_ATAN2, M, t2[0], in2, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_ATAN2, M, t2[1], in2, p) == 0);
  CHECK(same_f32(t2[0], t2[1], M));
  double worst2 = 0.0;
  int bad2 = 0;
  for (int i = 0; i < M; ++i) {
    const float want = atan2f(ya[i], xa[i]);
    if (i < 36) {
      bad2 += !(isnan(want) ? isnan(t2[1][i]) : same_f32(&t2[1][i], &want, 1));
    } else {
      const double r = atan2((double)ya[i], (double)xa[i]);
      if (r != 0.0) worst2 = fmax(worst2, fabs(t2[1][i] - r) / ulp_of(r));
    }
  }
  CHECK(bad2 == 0);
  CHECK(worst2 <= 0.51);
  /* exact powers give exact logarithms */
  float px[4] = {8.0f, 0.125f, 1000.0f, 1.0f}, py[2][4];
  const float *pin[3] = {px, NULL, NULL};
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_LOG2, 4, py[0], pin, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_LOG10, 4, py[1], pin, p) == 0);
  CHECK(py[0][0] == 3.0f && py[0][1] == -3.0f && py[0][3] == 0.0f && py[1][2] == 3.0f && py[1][3] == 0.0f);
}

/* float32 fmod bit for bit equal to the C library's, in both ISA builds:
 * random pairs, dividends an ulp off multiples of the divisor, quotients
 * up to 2^29 and past it, zeros, infinities and NaN in the same blocks;
 * remainder and floor division take their fmod. */
static void test_fmod_exact(void) {
  enum { N = 30000 };
  static float a[N], b[N], y[2][N], r[N], f[N];
  uint32_t seed = 12345;
  for (int i = 0; i < N; ++i) {
    seed = seed * 1664525u + 1013904223u;
    b[i] = ldexpf(1.0f + (float)(seed >> 9) / 8388608.0f, (int)(seed % 40) - 20) * (seed & 1 ? -1 : 1);
    seed = seed * 1664525u + 1013904223u;
    const float k = (float)(seed % 100000) - 50000.0f + (i % 3 == 1 ? 5.36e8f : 0.0f);
    a[i] = i % 2 ? nextafterf(k * b[i], (seed >> 3) & 1 ? INFINITY : -INFINITY)
                 : ldexpf((float)(seed >> 8), (int)(seed % 30) - 40);
  }
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e-30f, 3.0f};
  for (int i = 0; i < 64; ++i) a[100 * i] = special[i % 8], b[100 * i + 1] = special[(i + 3) % 8];
  const float *in[3] = {a, b, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_FMOD, N, y[0], in, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_FMOD, N, y[1], in, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_REMAINDER, N, r, in, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_DIV_FLOOR, N, f, in, p) == 0);
  int bad = 0, bad_r = 0, bad_f = 0;
  for (int i = 0; i < N; ++i) {
    const float want = fmodf(a[i], b[i]);
    bad += !same_f32(&y[0][i], &want, 1) || !same_f32(&y[1][i], &want, 1);
    float rem = want;
    if (rem != 0 && (b[i] < 0) != (rem < 0)) rem += b[i];
    bad_r += !same_f32(&r[i], &rem, 1);
    /* PyTorch's floor division from that fmod */
    float div = (a[i] - want) / b[i], fl;
    if (want != 0 && (b[i] < 0) != (want < 0)) div -= 1.0f;
    fl = div != 0 ? floorf(div) + (div - floorf(div) > 0.5f) : copysignf(0.0f, a[i] / b[i]);
    if (b[i] == 0) fl = a[i] / b[i];
    bad_f += !same_f32(&f[i], &fl, 1);
  }
  CHECK(bad == 0);
  CHECK(bad_r == 0);
  CHECK(bad_f == 0);
}

/* float32 x^y (tensor and scalar exponents, scalar bases) against double
 * precision within 0.51 ulp where its arithmetic form holds, both builds
 * the same bits; negative bases with integral and fractional exponents,
 * overflow and underflow, and the C library's special values elsewhere
 * (zeros, infinities, NaN, huge exponents) in the same blocks. */
static void test_pow_accuracy(void) {
  enum { N = 40000 };
  static float x[N], e[N], y[2][N];
  uint32_t seed = 99;
  for (int i = 0; i < N; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const float u = (float)(seed >> 8) / 16777216.0f;
    x[i] = ldexpf(0.5f + u, (int)(seed % 60) - 30) * (i % 5 == 0 ? -1.0f : 1.0f);
    seed = seed * 1664525u + 1013904223u;
    e[i] = i % 5 == 0 ? (float)((int)(seed % 21) - 10) + (i % 10 == 0 ? 0.5f : 0.0f)
                      : ((float)(seed >> 8) / 16777216.0f - 0.5f) * 12.0f;
  }
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-42f, -1.0f, 3.0f};
  for (int i = 0; i < 64; ++i) x[300 * i] = special[i % 8], e[300 * i + 1] = special[(i + 3) % 8];
  e[7] = 200.0f, x[7] = 2.0f;   /* past the arithmetic range: inf */
  e[9] = -200.0f, x[9] = 2.0f;  /* and 0 */
  const float *in[3] = {x, e, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_POW, N, y[0], in, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_POW, N, y[1], in, p) == 0);
  CHECK(same_f32(y[0], y[1], N));
  double worst = 0.0;
  int bad = 0;
  for (int i = 0; i < N; ++i) {
    const double r = pow((double)x[i], (double)e[i]);
    if (isnan(r) || isinf(r) || r == 0.0 || fabs(r) > 3.4028234663852886e38) {
      const float want = powf(x[i], e[i]);
      bad += !(isnan(want) ? isnan(y[1][i]) : same_f32(&y[1][i], &want, 1));
    } else if (fabs(r) >= 1.17549435e-38) {
      worst = fmax(worst, fabs(y[1][i] - r) / ulp_of(r));
    }
  }
  if (worst > 0.51 || bad) fprintf(stderr, "pow: %.3f ulp, %d special values off\n", worst, bad);
  CHECK(worst <= 0.51);
  CHECK(bad == 0);
  CHECK(y[1][7] == INFINITY && y[1][9] == 0.0f);
  /* scalar exponent and scalar base */
  loom_scalar ps[4] = {{.f = 2.5}};
  const float *in1[3] = {x, NULL, NULL};
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_POW_SCALAR, N, y[0], in1, ps) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_RPOW_SCALAR, N, y[1], in1, ps) == 0);
  int bad_s = 0;
  for (int i = 0; i < 2000; ++i) {
    const double r0 = pow((double)x[i], 2.5), r1 = pow(2.5, (double)x[i]);
    bad_s += isnan(r0) ? !isnan(y[0][i]) : fabs(y[0][i] - r0) > 0.51 * ulp_of(r0) && !isinf(y[0][i]);
    bad_s += fabs(y[1][i] - r1) > 0.51 * ulp_of(r1) && !(isinf(y[1][i]) && r1 > 3.4e38) &&
             !(y[1][i] == 0.0f && r1 < 1e-45);
  }
  CHECK(bad_s == 0);
}

/* float32 erfinv against a double reference (two Newton steps on erf from
 * the result) within 0.51 ulp: the whole of (-1, 1) sampled, the floats
 * nearest +-1, tiny and subnormal arguments; special values. Both builds
 * the same bits. */
static void test_erfinv_accuracy(void) {
  enum { N = 60000 };
  static float y[N], r[2][N];
  for (int i = 0; i < N; ++i) {
    const float u = (float)i / N;
    y[i] = i % 3 == 0 ? u * 2.0f - 1.0f
         : i % 3 == 1 ? (i % 2 ? 1.0f : -1.0f) * (1.0f - ldexpf(1.0f + u, -1 - (i / 3) % 23))
                      : ldexpf(1.0f + u, -(int)((i / 3) % 150));
  }
  const float *in[3] = {y, NULL, NULL};
  loom_scalar p[4] = {{.f = 0}};
  CHECK(loom_pw_apply_f32(LOOM_PW_ERFINV, N, r[0], in, p) == 0);
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_ERFINV, N, r[1], in, p) == 0);
  CHECK(same_f32(r[0], r[1], N));
  double worst = 0.0;
  for (int i = 0; i < N; ++i) {
    if (!(fabsf(y[i]) < 1.0f)) continue;
    double x = r[1][i];
    for (int k = 0; k < 2; ++k) /* Newton on erf, in double */
      x -= (erf(x) - (double)y[i]) / (1.1283791670955126 * exp(-x * x));
    if (x != 0.0 && fabs(x) >= 1.17549435e-38) worst = fmax(worst, fabs(r[1][i] - x) / ulp_of(x));
  }
  if (worst > 0.51) fprintf(stderr, "erfinv: %.3f ulp\n", worst);
  CHECK(worst <= 0.51);
  float sx[7] = {1.0f, -1.0f, 1.5f, NAN, -0.0f, 1e-45f, -INFINITY}, sy[7];
  const float *sin_[3] = {sx, NULL, NULL};
  CHECK(loom_pw_apply_f32_avx512(LOOM_PW_ERFINV, 7, sy, sin_, p) == 0);
  CHECK(sy[0] == INFINITY && sy[1] == -INFINITY && isnan(sy[2]) && isnan(sy[3]) && isnan(sy[6]));
  CHECK(sy[4] == 0.0f && signbit(sy[4]) && sy[5] == 1e-45f);
}

static void test_isa_agreement(void) {
  enum { N = 203 };
  float fa[3][N], fo[2][N];
  double da[3][N], dd[2][N];
  int64_t ia[3][N], io[2][N];
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < N; ++i) {
      fa[k][i] = frand4();
      da[k][i] = frand4();
      ia[k][i] = rand() % 200 - 100 + (k == 1 && ia[k][i] == 0);
      if (k == 1 && ia[k][i] == 0) ia[k][i] = 3;
    }
  fa[0][0] = NAN; da[0][1] = INFINITY; fa[0][2] = -0.0f;
  const float *fin[3] = {fa[0], fa[1], fa[2]};
  const double *din[3] = {da[0], da[1], da[2]};
  const int64_t *iin[3] = {ia[0], ia[1], ia[2]};
  loom_scalar p[4] = {{.f = 0.25}, {.f = 1.5}, {.f = 1.0}, {.f = 0.0}};
  int mismatched = 0;
  for (int op = 0; op < LOOM_PW_OP_COUNT; ++op) {
    int r0 = loom_pw_apply_f32(op, N, fo[0], fin, p);
    int r1 = loom_pw_apply_f32_avx512(op, N, fo[1], fin, p);
    if (r0 != r1 || (!r0 && !same_f32(fo[0], fo[1], N))) {
      ++mismatched;
      fprintf(stderr, "f32 op %d differs between ISA builds\n", op);
    }
    r0 = loom_pw_apply_f64(op, N, dd[0], din, p);
    r1 = loom_pw_apply_f64_avx512(op, N, dd[1], din, p);
    if (r0 != r1 || (!r0 && !test_same_bits(dd[0], dd[1], sizeof dd[0]))) {
      ++mismatched;
      fprintf(stderr, "f64 op %d differs between ISA builds\n", op);
    }
    loom_scalar ip[4] = {{.i = 2}, {.i = 50}, {.i = 0}, {.i = 0}};
    r0 = loom_pw_apply_i64(op, N, io[0], iin, ip);
    r1 = loom_pw_apply_i64_avx512(op, N, io[1], iin, ip);
    if (r0 != r1 || (!r0 && !test_same_bits(io[0], io[1], sizeof io[0]))) {
      ++mismatched;
      fprintf(stderr, "i64 op %d differs between ISA builds\n", op);
    }
  }
  CHECK(mismatched == 0);
}

int main(void) {
  srand(7);
  test_strided_add();
  test_mixed_broadcast();
  test_constant_compare();
  test_integer();
  test_float_reference();
  test_isa_agreement();
  test_gelu_accuracy();
  test_erf_accuracy();
  test_exp_accuracy();
  test_tanh_accuracy();
  test_log_accuracy();
  test_softplus_accuracy();
  test_sincos_accuracy();
  test_fmod_exact();
  test_dexp_accuracy();
  test_pow_accuracy();
  test_erfinv_accuracy();
  TEST_MAIN_END();
}
