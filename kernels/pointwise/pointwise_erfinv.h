/* kernels/pointwise/pointwise_erfinv.h — erfinv of float32 in double arithmetic
 * alone: no library calls, so loops over it vectorize, and every ISA build
 * computes the same bits (the including file turns off contraction).
 *
 * erfinv(y) = y R(w), w = -ln(1 - y^2), over the whole of (-1, 1) with one
 * rational function R = P / Q of degree 8 over 8 in w. For float y, w runs
 * from 0 to 15.94 (at |y| = 1 - 2^-24, the last float before 1), and
 * erfinv(y) / y, even in y, is smooth in w over all of it: sqrt(pi)/2 at
 * w = 0, about sqrt(w) far out. R is fitted for relative error with
 * P(0) = sqrt(pi)/2 and Q(0) = 1, so tiny and subnormal y get
 * y sqrt(pi)/2 to double precision; it is within 1.7e-11 of erfinv(y) / y
 * (under 6e-13 for w < 1e-3). 1 - y^2 is formed as (1 - y)(1 + y), whose factors
 * are exact in double for a float y and whose product rounds once (w moves
 * by 1e-16 at most), and its logarithm is loom_dlog_d's (2e-14 relative).
 * Horner's rule in w loses no digits: the terms of P and of Q sum to at
 * most 1.2 and 2.2 times their totals. The double result is within 2e-11
 * relative, 3.4e-4 ulp of a float, before its one rounding.
 *
 * Measured over every float in [0, 1) against a long-double reference
 * (Newton steps on erfl and erfcl): within 0.5003 ulp, subnormal y and
 * the last floats before 1 included, and correctly rounded for all but
 * 4170 of the 1.07e9; the result is odd in y bit for bit. erfinv(+-1) = +-inf,
 * erfinv(+-0) = +-0, NaN for |y| > 1 and for NaN. */
#ifndef LOOM_KERNELS_POINTWISE_ERFINV_H
#define LOOM_KERNELS_POINTWISE_ERFINV_H

#include <math.h>

#include "kernels/pointwise/pointwise_dexp.h" /* loom_dlog_d */
#include "kernels/pointwise/pointwise_exp.h"  /* LOOM_PW_INLINE */

/* erfinv(y) / y as R(w) = P(w) / Q(w), w = -ln(1 - y^2) in [0, 15.95]. */
static inline LOOM_PW_INLINE double loom_erfinv_ratio(double w) {
  double p = -4.878824498335898e-09;
  p = p * w + 3.9448352117078147e-07;
  p = p * w + 4.6394848559864216e-06;
  p = p * w + 3.462221224117106e-05;
  p = p * w + 0.00027184113730930703;
  p = p * w + 0.0027520967752011094;
  p = p * w + 0.023736680666631226;
  p = p * w + 0.16021807088343984;
  p = p * w + 0.886226925452758;
  double q = -3.236887146957661e-10;
  q = q * w + -1.2298495925068142e-09;
  q = q * w + 2.728402024955909e-06;
  q = q * w + -6.97509208852752e-06;
  q = q * w + 0.0003991992592809013;
  q = q * w + -0.0023567494796886885;
  q = q * w + 0.034961009346347174;
  q = q * w + -0.08101265501779802;
  q = q * w + 1.0;
  return p / q;
}

/* erfinv(y) within 0.5003 ulp over (-1, 1); +-inf at +-1, NaN beyond and
 * for NaN, -0 for -0. */
static inline LOOM_PW_INLINE float loom_erfinvf_arith(float y) {
  const double d = (double)y;
  const double t = (1.0 - d) * (1.0 + d); /* 1 - y^2, one rounding */
  /* t is 0 at +-1, negative beyond and NaN for NaN: loom_dlog_d reads any
   * bits without trapping, and the choice below discards those lanes (a
   * choice of t here would make the compiler duplicate the log) */
  const double w = -loom_dlog_d(t);
  const float r = (float)(d * loom_erfinv_ratio(w));
  const float ay = fabsf(y);
  return ay < 1.0f ? r : (ay == 1.0f ? (y > 0.0f ? INFINITY : -INFINITY) : NAN);
}

#endif /* LOOM_KERNELS_POINTWISE_ERFINV_H */
