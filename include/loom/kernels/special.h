/* loom/kernels/special.h — the special functions' elementwise kernel: the
 * modified Bessel functions, Bessel and Airy functions, orthogonal
 * polynomials, ndtri, erfcx, log_ndtr and the shrink activations, over strided, broadcast operands of any floating
 * or integral dtype.
 *
 * "pointwise.special": the argument layout of "pointwise.apply"
 * (loom/kernels/pointwise.h): tensors[0] = out, tensors[1..] = inputs with
 * out's sizes (stride 0 where broadcast); an input with NULL `data` is the
 * constant scalars[LOOM_PW_CONST + k - 1].
 *   scalars[0].i  op (loom_special_op)
 *   scalars[1].i  compute kind: LOOM_PW_F32 or LOOM_PW_F64
 *   scalars[2].f  the op's parameter, where noted: [lambd]
 *   scalars[3..5] unused
 * The launch range is numel(out); use LOOM_PW_GRAIN. Each launch item
 * touches exactly its own elements of every operand. */
#ifndef LOOM_KERNELS_SPECIAL_CONTRACT_H
#define LOOM_KERNELS_SPECIAL_CONTRACT_H

#include "loom/kernels/pointwise.h"

typedef enum loom_special_op {
  /* unary: x = tensors[1] */
  LOOM_SPECIAL_I0, LOOM_SPECIAL_I0E, LOOM_SPECIAL_I1, LOOM_SPECIAL_I1E,
  LOOM_SPECIAL_NDTRI, LOOM_SPECIAL_SPHERICAL_BESSEL_J0, LOOM_SPECIAL_AIRY_AI,
  LOOM_SPECIAL_BESSEL_J0, LOOM_SPECIAL_BESSEL_J1, LOOM_SPECIAL_BESSEL_Y0,
  LOOM_SPECIAL_BESSEL_Y1, LOOM_SPECIAL_MODIFIED_BESSEL_I0,
  LOOM_SPECIAL_MODIFIED_BESSEL_I1, LOOM_SPECIAL_MODIFIED_BESSEL_K0,
  LOOM_SPECIAL_MODIFIED_BESSEL_K1, LOOM_SPECIAL_SCALED_MODIFIED_BESSEL_K0,
  LOOM_SPECIAL_SCALED_MODIFIED_BESSEL_K1,
  LOOM_SPECIAL_ERFCX /* exp(x^2) erfc(x) */, LOOM_SPECIAL_LOG_NDTR /* log Phi(x) */,
  LOOM_SPECIAL_HARDSHRINK /* [lambd] */, LOOM_SPECIAL_SOFTSHRINK /* [lambd] */,
  /* binary: x = tensors[1], n = tensors[2] (truncated to an integer; NaN,
   * infinite or out of range: a negative degree, giving 0) */
  LOOM_SPECIAL_CHEBYSHEV_T, LOOM_SPECIAL_CHEBYSHEV_U, LOOM_SPECIAL_CHEBYSHEV_V,
  LOOM_SPECIAL_CHEBYSHEV_W, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_T,
  LOOM_SPECIAL_SHIFTED_CHEBYSHEV_U, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_V,
  LOOM_SPECIAL_SHIFTED_CHEBYSHEV_W, LOOM_SPECIAL_HERMITE_H,
  LOOM_SPECIAL_HERMITE_HE, LOOM_SPECIAL_LAGUERRE_L, LOOM_SPECIAL_LEGENDRE_P,
  /* binary backward: grad = tensors[1], x = tensors[2] (the forward input) */
  LOOM_SPECIAL_SHRINK_BACKWARD /* [lambd]: grad where |x| > lambd, else 0 (NaN x: 0) */,
  LOOM_SPECIAL_OP_COUNT
} loom_special_op;

#define LOOM_SPECIAL_FIRST_BINARY LOOM_SPECIAL_CHEBYSHEV_T

#endif /* LOOM_KERNELS_SPECIAL_CONTRACT_H */
