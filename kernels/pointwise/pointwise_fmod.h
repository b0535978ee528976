/* kernels/pointwise/pointwise_fmod.h — fmod of float32 in double arithmetic alone:
 * no library call, so loops over it vectorize, and every ISA build
 * computes the same bits.
 *
 * fmod(a, b) = a - q b with q = trunc(a / b), |q| < 2^29 here. The double
 * quotient truncates to q: a and q b are both multiples of b's last bit,
 * so a / b lies at least 2^-24 below the next integer, more than the
 * spacing of doubles below 2^29, and rounding cannot reach it. q b is
 * exact (29 + 24 bits), and so is a - q b: a multiple of b's last bit
 * below |b|. The result is fmod's exact value, its zero signed as a is.
 * LOOM_FMODF_OK says where this holds; the callers use the C library
 * elsewhere (larger quotients, b = 0 or inf, NaN). */
#ifndef LOOM_KERNELS_POINTWISE_FMOD_H
#define LOOM_KERNELS_POINTWISE_FMOD_H

#include <float.h>
#include <math.h>

#include "kernels/pointwise/pointwise_exp.h" /* LOOM_PW_INLINE */

#define LOOM_FMODF_OK(a, b) (fabsf(a) < 536870912.0f * fabsf(b) && fabsf(b) <= FLT_MAX)

static inline LOOM_PW_INLINE float loom_fmodf_arith(float a, float b) {
  const double ad = a, bd = b;
  return (float)copysign(ad - trunc(ad / bd) * bd, ad);
}

#endif /* LOOM_KERNELS_POINTWISE_FMOD_H */
