/* kernels/pointwise/pointwise_dexp.h — e^x - 1, 2^x, sinh, cosh, log2, log10 and x^y
 * of float32 in double arithmetic alone: no library calls, so loops over them
 * vectorize, and every ISA build computes the same bits (the including
 * file turns off contraction).
 *
 * x = k ln 2 + r with k = round(x / ln 2), r = (x - k L1) - k L2 (L1 the
 * first 32 bits of ln 2, so k L1 and x - k L1 are exact), |r| <= 0.347;
 * e^r - 1 is its Taylor series to r^12 (truncation under 6e-16 relative)
 * and 2^k is built from its exponent bits. e^x - 1 is that series itself
 * for k = 0, where it carries r's relative precision down to the smallest
 * float, and 2^k (1 + p) - 1 elsewhere, where it is at least 0.29 in size.
 * The double results are within a few 1e-16 relative, so each float is
 * within 0.5 ulp plus well under 1e-6 ulp of the true value. */
#ifndef LOOM_KERNELS_POINTWISE_DEXP_H
#define LOOM_KERNELS_POINTWISE_DEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/pointwise/pointwise_exp.h" /* LOOM_PW_INLINE, loom_log_m1, loom_log_e1 */

/* e^r - 1 for |r| <= ln 2 / 2. */
static inline LOOM_PW_INLINE double loom_dexp_poly(double r) {
  double p = 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  return r * (1.0 + r * p); /* -0 stays -0 */
}

/* k = round(x / ln 2) and e^r - 1 for x in [-110, 110] (not NaN). */
static inline LOOM_PW_INLINE double loom_dexp_split(double x, double *k) {
  const double shift = 6755399441055744.0; /* 1.5 * 2^52 */
  *k = (x * 1.44269504088896338700 + shift) - shift;
  const double r = (x - *k * 6.93147180369123816490e-01) - *k * 1.90821492927058770002e-10;
  return loom_dexp_poly(r);
}

/* 2^k for integral k in [-1022, 1023]. */
static inline LOOM_PW_INLINE double loom_dexp_pow2(double k) {
  const int64_t bits = ((int64_t)k + 1023) << 52;
  double v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* x clamped to [lo, hi], NaN taken as 0 (the callers return NaN for it):
 * e^x, e^x - 1 and their float results are saturated there. */
static inline LOOM_PW_INLINE double loom_dexp_clamp(float x, double lo, double hi) {
  const double d = x;
  return x != x ? 0.0 : (d < lo ? lo : (d > hi ? hi : d));
}

/* e^x for x in [-110, 110], not NaN. */
static inline LOOM_PW_INLINE double loom_dexp(double x) {
  double k;
  const double p = loom_dexp_split(x, &k);
  return loom_dexp_pow2(k) * (1.0 + p);
}

/* e^x - 1 within 0.5 ulp and a hair: -1 below -60, inf past 88.73. */
static inline LOOM_PW_INLINE float loom_expm1f_arith(float x) {
  double k;
  const double p = loom_dexp_split(loom_dexp_clamp(x, -60.0, 90.0), &k);
  const double v = k == 0.0 ? p : loom_dexp_pow2(k) * (1.0 + p) - 1.0;
  return x != x ? x : (float)v;
}

/* 2^x within 0.5 ulp and a hair (subnormal results rounded once). The
 * product x ln 2 rounds by at most 1e-14 in the exponent. */
static inline LOOM_PW_INLINE float loom_exp2f_arith(float x) {
  const double v = loom_dexp(loom_dexp_clamp(x, -160.0, 130.0) * 0.69314718055994530942);
  return x != x ? x : (float)v;
}

/* sinh x = (m + m / (m + 1)) / 2 with m = e^|x| - 1: no cancellation near
 * 0; inf past 89.41. */
static inline LOOM_PW_INLINE float loom_sinhf_arith(float x) {
  const float ax = x < 0.0f ? -x : x;
  double k;
  const double p = loom_dexp_split(loom_dexp_clamp(ax, 0.0, 91.0), &k);
  const double m = k == 0.0 ? p : loom_dexp_pow2(k) * (1.0 + p) - 1.0;
  const double v = 0.5 * (m + m / (m + 1.0));
  return x != x ? x : copysignf((float)v, x);
}

/* cosh x = (e + 1 / e) / 2 with e = e^|x|; inf past 89.41. */
static inline LOOM_PW_INLINE float loom_coshf_arith(float x) {
  const double e = loom_dexp(loom_dexp_clamp(x < 0.0f ? -x : x, 0.0, 91.0));
  return x != x ? x : (float)(0.5 * (e + 1.0 / e));
}

/* e ln 2 + ln m for m in [sqrt(1/2), sqrt(2)): ln m = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^15 (truncation
 * under 2e-14 relative). */
static inline LOOM_PW_INLINE double loom_dlog_me(double m, double e) {
  const double sd = (m - 1.0) / (m + 1.0), z = sd * sd;
  double p = 1.0 / 15.0;
  p = p * z + 1.0 / 13.0;
  p = p * z + 1.0 / 11.0;
  p = p * z + 1.0 / 9.0;
  p = p * z + 1.0 / 7.0;
  p = p * z + 1.0 / 5.0;
  p = p * z + 1.0 / 3.0;
  return e * 0.69314718055994530942 + 2.0 * sd * (1.0 + z * p);
}

/* ln x of a positive finite float in double, split as loom_logf_arith
 * splits it, m halved in double. */
static inline LOOM_PW_INLINE double loom_dlog(float x) {
  const float mf = loom_log_m1(x);
  const int halve = mf > 1.41421356f;
  const double m = halve ? 0.5 * (double)mf : (double)mf;
  return loom_dlog_me(m, (double)(loom_log_e1(x) + halve));
}

/* ln x of a positive normal double, within 2e-14 relative. */
static inline LOOM_PW_INLINE double loom_dlog_d(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  int64_t e = (int64_t)((b >> 52) & 0x7ffu) - 1023;
  const uint64_t mb = (b & 0xfffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  memcpy(&m, &mb, sizeof m);
  const int halve = m > 1.41421356237309504880;
  m = halve ? 0.5 * m : m;
  e += halve;
  return loom_dlog_me(m, (double)e);
}

/* log_b x = ln x * (1 / ln b) within 0.5 ulp and a hair: -inf at 0, NaN
 * below, inf and NaN as they are. */
static inline LOOM_PW_INLINE float loom_logbf_arith(float x, double inv_ln_b) {
  const float r = (float)(loom_dlog(x > 0.0f ? x : 1.0f) * inv_ln_b);
  return (x != x || x == INFINITY) ? x : (x < 0.0f ? NAN : (x == 0.0f ? -INFINITY : r));
}

/* Where loom_powf_arith holds: x a normal float (its biased exponent in
 * 1..254: not 0, subnormal, inf or NaN), y finite, and |y| (|e| + 1) ln 2
 * <= 109 for x's exponent e, which bounds |y ln|x|| by 110. */
static inline LOOM_PW_INLINE int loom_powf_ok(float x, float y) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  const int32_t be = (int32_t)((b >> 23) & 0xffu), e = be - 127;
  const float span = (float)((e < 0 ? -e : e) + 1) * 0.69314718f;
  return (be >= 1) & (be <= 254) & (fabsf(y) * span <= 109.0f);
}

/* x^y where loom_powf_ok: e^(y ln|x|) in double, |y ln|x|| <= 110, within
 * 3e-12 relative, so 0.5 ulp and a hair as a float (subnormal results
 * rounded once); a negative x takes the sign of an odd integral y and
 * gives NaN for a fractional one (|y| < 160 there: int32 holds it). */
static inline LOOM_PW_INLINE float loom_powf_arith(float x, float y) {
  const float r = (float)loom_dexp((double)y * loom_dlog(fabsf(x)));
  const int32_t yi = (int32_t)y;
  const float s = (yi & 1) ? -r : r, neg = (float)yi == y ? s : NAN;
  return x < 0.0f ? neg : r;
}

#endif /* LOOM_KERNELS_POINTWISE_DEXP_H */
