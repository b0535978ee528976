/* kernels/pointwise/pointwise_trig.h — sin, cos, tan, atan2, atan, asin and acos of
 * float32 in double arithmetic alone: no library calls, so loops over them
 * vectorize, and every ISA build computes the same bits (the including
 * file turns off contraction).
 *
 * x = k pi/2 + r with k = round(x 2/pi) and r = (x - k P1) - k P2, where
 * P1 holds the first 33 bits of pi/2 (k P1 and x - k P1 are exact for
 * |k| < 2^20) and P2 the next 53. sin r and cos r on |r| <= pi/4 are
 * their Taylor series to r^11 and r^12 (truncation under 1e-11 relative),
 * and k mod 4 picks and signs one of them (tan divides them). Rounded once
 * to float, the result is within 0.5 ulp plus under 1e-3 ulp: the float
 * nearest the true value, but for ties closer than that. Past
 * LOOM_TRIG_MAX (and for inf and NaN) the callers use the C library. */
#ifndef LOOM_KERNELS_POINTWISE_TRIG_H
#define LOOM_KERNELS_POINTWISE_TRIG_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/pointwise/pointwise_exp.h" /* LOOM_PW_INLINE */

/* |x| up to which the reduction above holds (|k| < 2^17). */
#define LOOM_TRIG_MAX 131072.0f

/* k mod 4 (plus phase), sin r and cos r for |x| <= LOOM_TRIG_MAX: x a
 * float, or a double (whose reduction is then within an ulp of x). */
static inline LOOM_PW_INLINE int64_t loom_trig_reduce(double xd, int phase, double *sin_r,
                                                      double *cos_r) {
  const double shift = 6755399441055744.0; /* 1.5 * 2^52 */
  const double s = xd * 0.63661977236758134308 + shift;
  const double k = s - shift;
  int64_t bits; /* s's low bits hold k mod 4 */
  memcpy(&bits, &s, sizeof bits);
  const double r = (xd - k * 1.57079632673412561417e+00) - k * 6.07710050650619224932e-11;
  const double z = r * r;
  double ps = -1.0 / 39916800.0;
  ps = ps * z + 1.0 / 362880.0;
  ps = ps * z - 1.0 / 5040.0;
  ps = ps * z + 1.0 / 120.0;
  ps = ps * z - 1.0 / 6.0;
  *sin_r = r * (1.0 + z * ps); /* keeps the sign of r = -0 */
  double pc = 1.0 / 479001600.0;
  pc = pc * z - 1.0 / 3628800.0;
  pc = pc * z + 1.0 / 40320.0;
  pc = pc * z - 1.0 / 720.0;
  pc = pc * z + 1.0 / 24.0;
  pc = pc * z - 0.5;
  *cos_r = 1.0 + z * pc;
  return (bits + phase) & 3;
}

/* sin x (phase 0) or cos x (phase 1) for |x| <= LOOM_TRIG_MAX. */
static inline LOOM_PW_INLINE float loom_sincosf_arith(float x, int phase) {
  double s, c;
  const int64_t q = loom_trig_reduce(x, phase, &s, &c);
  const double v = (q & 1) ? c : s;
  return (float)((q & 2) ? -v : v);
}

/* tan x for |x| <= LOOM_TRIG_MAX: sin r / cos r, or -cos r / sin r in the
 * odd quadrants, divided once in double. */
static inline LOOM_PW_INLINE float loom_tanf_arith(float x) {
  double s, c;
  const int64_t q = loom_trig_reduce(x, 0, &s, &c);
  return (float)((q & 1) ? -c / s : s / c);
}

/* atan t for 0 <= t <= 1: above tan(pi/8), pi/4 + atan((t - 1) / (t + 1));
 * then the series u - u^3/3 + ... to u^29 on |u| <= tan(pi/8) (truncation
 * under 1e-13 relative). */
static inline LOOM_PW_INLINE double loom_datan01(double t) {
  const int big = t > 0.41421356237309504880;
  const double u = big ? (t - 1.0) / (t + 1.0) : t, z = u * u;
  double p = -1.0 / 29.0;
  p = p * z + 1.0 / 27.0;
  p = p * z - 1.0 / 25.0;
  p = p * z + 1.0 / 23.0;
  p = p * z - 1.0 / 21.0;
  p = p * z + 1.0 / 19.0;
  p = p * z - 1.0 / 17.0;
  p = p * z + 1.0 / 15.0;
  p = p * z - 1.0 / 13.0;
  p = p * z + 1.0 / 11.0;
  p = p * z - 1.0 / 9.0;
  p = p * z + 1.0 / 7.0;
  p = p * z - 1.0 / 5.0;
  p = p * z + 1.0 / 3.0;
  const double a = u - u * (z * p);
  return big ? 0.78539816339744830962 + a : a;
}

/* atan2(y, x) for finite y and x (zeros signed as the C library takes
 * them), in double: the smaller magnitude over the larger folds it onto
 * [0, pi/4], then octant and quadrant by pi/2 - a and pi - a. */
static inline LOOM_PW_INLINE double loom_datan2(double y, double x) {
  const double ay = y < 0.0 ? -y : y, ax = x < 0.0 ? -x : x;
  const double hi = ay > ax ? ay : ax, lo = ay > ax ? ax : ay;
  double a = loom_datan01(hi > 0.0 ? lo / hi : 0.0);
  a = ay > ax ? 1.57079632679489661923 - a : a;
  a = copysign(1.0, x) < 0.0 ? 3.14159265358979323846 - a : a;
  return copysign(a, y);
}

/* atan2, atan, asin and acos of floats within 0.5 ulp and a hair: atan2
 * and atan for finite arguments, asin and acos on [-1, 1] (with
 * sqrt(1 - x^2), whose x^2 is exact in double); the callers use the C
 * library elsewhere. */
static inline LOOM_PW_INLINE float loom_atan2f_arith(float y, float x) {
  return (float)loom_datan2(y, x);
}
static inline LOOM_PW_INLINE float loom_atanf_arith(float x) { return (float)loom_datan2(x, 1.0); }
static inline LOOM_PW_INLINE float loom_asinf_arith(float x) {
  const double d = x;
  return (float)loom_datan2(d, sqrt(1.0 - d * d));
}
static inline LOOM_PW_INLINE float loom_acosf_arith(float x) {
  const double d = x;
  return (float)loom_datan2(sqrt(1.0 - d * d), d);
}

#endif /* LOOM_KERNELS_POINTWISE_TRIG_H */
