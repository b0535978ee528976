/* kernels/pointwise_trig.h — sin, cos and tan of float32 in double arithmetic
 * alone: no library calls, so loops over them vectorize, and every ISA
 * build computes the same bits (the including file turns off
 * contraction).
 *
 * x = k pi/2 + r with k = round(x 2/pi) and r = (x - k P1) - k P2, where
 * P1 holds the first 33 bits of pi/2 (k P1 and x - k P1 are exact for
 * |k| < 2^20) and P2 the next 53. sin r and cos r on |r| <= pi/4 are
 * their Taylor series to r^11 and r^12 (truncation under 1e-11 relative),
 * and k mod 4 picks and signs one of them (tan divides them). Rounded
 * once to float, the
 * result is within 0.5 ulp plus under 1e-3 ulp: the float nearest the
 * true value, but for ties closer than that. Past LOOM_TRIG_MAX (and for
 * inf and NaN) the callers use the C library. */
#ifndef LOOM_KERNELS_POINTWISE_TRIG_H
#define LOOM_KERNELS_POINTWISE_TRIG_H

#include <stdint.h>
#include <string.h>

#include "kernels/pointwise_exp.h" /* LOOM_PW_INLINE */

/* |x| up to which the reduction above holds (|k| < 2^17). */
#define LOOM_TRIG_MAX 131072.0f

/* k mod 4 (plus phase), sin r and cos r for |x| <= LOOM_TRIG_MAX. */
static inline LOOM_PW_INLINE int64_t loom_trig_reduce(float x, int phase, double *sin_r,
                                                      double *cos_r) {
  const double xd = x, shift = 6755399441055744.0; /* 1.5 * 2^52 */
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

#endif /* LOOM_KERNELS_POINTWISE_TRIG_H */
