/* loom/kernels/complex.h — the complex elementwise kernel's name and
 * argument contract: the arithmetic of complex64 / complex128 tensors
 * (and building them from real pairs). Every driver provides this name.
 *
 * "complex.apply": tensors[0] out, [1] a, [2] b (data NULL when the op has
 *   one operand or b is the constant scalars[1..2]); all of out's shape
 *   (broadcast operands with stride 0). scalars[0].i op (loom_complex_op),
 *   [1].f, [2].f the constant b (re, im) when tensors[2].data is NULL,
 *   [3].f, [4].f alpha (re, im) for ADD/SUB. The range is numel(out); use
 *   LOOM_COMPLEX_GRAIN.
 *   ADD, SUB, MUL, DIV: a, b, out complex of one dtype (out = a op alpha b
 *     for ADD/SUB); division as PyTorch's (scaled by the larger of |re b|,
 *     |im b|).
 *   NEG, CONJ: a, out complex of one dtype.
 *   ABS, ANGLE: a complex, out its real type (hypot, atan2).
 *   POLAR: a = magnitude, b = angle, both real; out the complex type.
 *   COMPLEX: a = real part, b = imaginary part, both real; out complex.
 *   EXP, LOG, SQRT, RECIPROCAL, SIN, COS, TANH, SIGMOID: a, out complex of
 *     one dtype; as PyTorch's CPU computes them (std::complex, i.e. C99's
 *     cexp, clog, csqrt, csin, ccos, ctanh, special values included;
 *     reciprocal as 1 / a and sigmoid as 1 / (1 + exp(-a)) with the
 *     division above).
 *   SINH, COSH, TAN, ASIN, ACOS, ATAN, ASINH, ACOSH, ATANH: a, out complex
 *     of one dtype; C99's csinh, ccosh, ctan, casin, cacos, catan, casinh,
 *     cacosh, catanh (what std::complex calls).
 *   RSQRT: a, out complex of one dtype; 1 / csqrt(a) with the division
 *     above.
 *   SGN: a, out complex of one dtype; a / |a| (0 where a is 0).
 *   POW: a, b (or the constant), out complex of one dtype; a ** b as
 *     std::pow of two std::complex computes it (C99's cpow). */
#ifndef LOOM_KERNELS_COMPLEX_CONTRACT_H
#define LOOM_KERNELS_COMPLEX_CONTRACT_H

#define LOOM_COMPLEX_GRAIN 32768

typedef enum loom_complex_op {
  LOOM_COMPLEX_ADD = 0,
  LOOM_COMPLEX_SUB = 1,
  LOOM_COMPLEX_MUL = 2,
  LOOM_COMPLEX_DIV = 3,
  LOOM_COMPLEX_NEG = 4,
  LOOM_COMPLEX_CONJ = 5,
  LOOM_COMPLEX_ABS = 6,
  LOOM_COMPLEX_ANGLE = 7,
  LOOM_COMPLEX_POLAR = 8,
  LOOM_COMPLEX_MAKE = 9,
  LOOM_COMPLEX_EXP = 10,
  LOOM_COMPLEX_LOG = 11,
  LOOM_COMPLEX_SQRT = 12,
  LOOM_COMPLEX_RECIPROCAL = 13,
  LOOM_COMPLEX_SIN = 14,
  LOOM_COMPLEX_COS = 15,
  LOOM_COMPLEX_TANH = 16,
  LOOM_COMPLEX_SIGMOID = 17,
  LOOM_COMPLEX_SGN = 18,
  LOOM_COMPLEX_POW = 19,
  LOOM_COMPLEX_SINH = 20,
  LOOM_COMPLEX_COSH = 21,
  LOOM_COMPLEX_TAN = 22,
  LOOM_COMPLEX_ASIN = 23,
  LOOM_COMPLEX_ACOS = 24,
  LOOM_COMPLEX_ATAN = 25,
  LOOM_COMPLEX_ASINH = 26,
  LOOM_COMPLEX_ACOSH = 27,
  LOOM_COMPLEX_ATANH = 28,
  LOOM_COMPLEX_RSQRT = 29,
  LOOM_COMPLEX_OP_COUNT = 30,
} loom_complex_op;

#endif /* LOOM_KERNELS_COMPLEX_CONTRACT_H */
