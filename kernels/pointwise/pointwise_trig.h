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
 * LOOM_TRIG_MAX (and for inf and NaN) the callers use the C library.
 *
 * sin and cos up to |x| = LOOM_TRIG_FAST, the common range, run in float
 * alone (twice the lanes of a double vector): k = round(x 2/pi) as above,
 * r = x - k (P1 + P2 + P3) with P1 = 0x1.922p0 (12 bits) and P2 =
 * -0x1.2aeep-18 (16 bits), so that k P1, x - k P1 and k P2 are exact for
 * |k| < 256, and r carried as hi + lo: hi the rounded difference, lo its
 * rounding error (Knuth's two-sum, exact) less k P3 (P3 = pi/2 - P1 - P2
 * to 24 bits; what it leaves out, times k, is under 2^-50). sin r = hi +
 * (lo (1 - hi^2/2) + hi^3 S(hi^2)), cos r = 1 - hi^2/2 - lo hi + hi^4
 * C(hi^2), S and C the Taylor series to r^9 and r^10 (truncation under 3e-9
 * relative), 1 - hi^2/2 formed exactly (hi^2/2 = m^2/2 + (hi - m)(hi + m)/2,
 * m = hi's leading 12 bits, m^2 exact, and 1 - m^2/2 as a rounded sum and
 * its exact error). Measured against double precision over every float
 * up to LOOM_TRIG_FAST: sin within 0.78 ulp, cos within 0.80
 * (tests/c/test_kernels_pointwise_sweep.c). */
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

/* sin x (phase 0) or cos x (phase 1) for |x| <= LOOM_TRIG_MAX, in double. */
static inline LOOM_PW_INLINE float loom_sincosf_exact(float x, int phase) {
  double s, c;
  const int64_t q = loom_trig_reduce(x, phase, &s, &c);
  const double v = (q & 1) ? c : s;
  return (float)((q & 2) ? -v : v);
}

/* |x| up to which loom_sincosf_fast holds (|k| <= 255). */
#define LOOM_TRIG_FAST 400.0f

/* sin x (phase 0) or cos x (phase 1) for |x| <= LOOM_TRIG_FAST, in float
 * (the header's comment); a float of no use elsewhere, computed without
 * traps. */
static inline LOOM_PW_INLINE float loom_sincosf_fast(float x, int phase) {
  const float j = x * 0x1.45f306p-1f + 12582912.0f; /* 2/pi; 1.5 * 2^23 */
  const float k = j - 12582912.0f;
  uint32_t jb; /* j's low bits hold k mod 4 */
  memcpy(&jb, &j, sizeof jb);
  const uint32_t q = (jb + (uint32_t)phase) & 3u;
  const float t1 = x - k * 0x1.922p0f;  /* exact */
  const float p2 = k * -0x1.2aeep-18f;  /* exact */
  const float hi = t1 - p2, bb = hi - t1; /* two-sum: hi + e = t1 - p2 */
  const float e = (t1 - (hi - bb)) + (-p2 - bb);
  const float lo = e - k * -0x1.e973dcp-35f;
  const float z = hi * hi;
  float ps = 1.0f / 362880.0f;
  ps = ps * z - 1.0f / 5040.0f;
  ps = ps * z + 1.0f / 120.0f;
  ps = ps * z - 1.0f / 6.0f;
  const float sn = hi + (lo - (0.5f * z) * lo + hi * (z * ps));
  float pc = -1.0f / 3628800.0f;
  pc = pc * z + 1.0f / 40320.0f;
  pc = pc * z - 1.0f / 720.0f;
  pc = pc * z + 1.0f / 24.0f;
  uint32_t mb;
  memcpy(&mb, &hi, sizeof mb);
  mb &= 0xfffff000u;
  float m;
  memcpy(&m, &mb, sizeof m);
  const float h2 = 0.5f * (m * m);              /* exact */
  const float c0 = 1.0f - h2, ce = (1.0f - c0) - h2; /* c0 + ce = 1 - h2 */
  const float cs = c0 + ((ce - (0.5f * (hi - m)) * (hi + m)) + ((z * z) * pc - hi * lo));
  const float v = (q & 1u) ? cs : sn, sv = (q & 2u) ? -v : v;
  return (phase == 0 && x == 0.0f) ? x : sv; /* sin(-0) = -0, which hi + 0 loses */
}

/* sin x (phase 0) or cos x (phase 1) for |x| <= LOOM_TRIG_MAX: the float
 * form up to LOOM_TRIG_FAST, the double one beyond. A loop over it computes
 * both; the library's takes the float form alone where a block allows. */
static inline LOOM_PW_INLINE float loom_sincosf_arith(float x, int phase) {
  const float f = loom_sincosf_fast(x, phase), d = loom_sincosf_exact(x, phase);
  return fabsf(x) <= LOOM_TRIG_FAST ? f : d;
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
