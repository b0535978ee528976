/* loom/kernels/pointwise.h — the elementwise kernel's name and argument
 * contract: unary, binary and ternary ops and their backward forms over
 * strided, broadcast operands of any dtype. Every driver provides this name.
 *
 * "pointwise.apply": tensors[0] = out, tensors[1..] = inputs, all with
 * out's sizes (stride 0 where an input broadcasts; rank 0 broadcasts to all).
 * An input whose `data` is NULL is a constant: its value is
 * scalars[LOOM_PW_CONST + k - 1] (k = its tensor index).
 *   scalars[0].i  op (loom_pw_op)
 *   scalars[1].i  compute kind (loom_pw_kind): inputs are converted to it,
 *                 the op runs in it, the result is converted to out's dtype
 *   scalars[2..5] op parameters, in the compute kind's member (.f or .i)
 *                 unless the op says otherwise
 * The launch range is numel(out); use LOOM_PW_GRAIN. Integer division or
 * remainder by zero returns LOOM_ERROR_INVALID_ARGUMENT. */
#ifndef LOOM_KERNELS_POINTWISE_CONTRACT_H
#define LOOM_KERNELS_POINTWISE_CONTRACT_H

#define LOOM_PW_GRAIN 32768
#define LOOM_PW_PARAM 2
#define LOOM_PW_CONST 6
#define LOOM_PW_MAX_INPUTS 3

typedef enum loom_pw_kind {
  LOOM_PW_F32 = 0, /* float32, float16, bfloat16 run in float */
  LOOM_PW_F64 = 1,
  LOOM_PW_I64 = 2, /* every integral dtype and bool runs in int64 */
} loom_pw_kind;

/* Parameters p0..p3 in brackets. */
typedef enum loom_pw_op {
  /* unary */
  LOOM_PW_IDENTITY, LOOM_PW_ABS, LOOM_PW_NEG, LOOM_PW_SIGN, LOOM_PW_EXP,
  LOOM_PW_EXP2, LOOM_PW_EXPM1, LOOM_PW_LOG, LOOM_PW_LOG2, LOOM_PW_LOG10,
  LOOM_PW_LOG1P, LOOM_PW_SQRT, LOOM_PW_RSQRT, LOOM_PW_SQUARE, LOOM_PW_SIN,
  LOOM_PW_COS, LOOM_PW_TAN, LOOM_PW_ASIN, LOOM_PW_ACOS, LOOM_PW_ATAN,
  LOOM_PW_SINH, LOOM_PW_COSH, LOOM_PW_TANH, LOOM_PW_ASINH, LOOM_PW_ACOSH,
  LOOM_PW_ATANH, LOOM_PW_SIGMOID, LOOM_PW_LOGIT /* [eps, <0: none] */,
  LOOM_PW_ERF, LOOM_PW_ERFC, LOOM_PW_ERFINV, LOOM_PW_FLOOR, LOOM_PW_CEIL,
  LOOM_PW_ROUND, LOOM_PW_ROUND_DECIMALS /* [.i decimals] */, LOOM_PW_TRUNC,
  LOOM_PW_FRAC, LOOM_PW_RECIPROCAL, LOOM_PW_RELU, LOOM_PW_GELU,
  LOOM_PW_GELU_TANH, LOOM_PW_SILU, LOOM_PW_MISH,
  LOOM_PW_SOFTPLUS /* [beta, threshold] */, LOOM_PW_LEAKY_RELU /* [slope] */,
  LOOM_PW_ELU /* [alpha, scale, input_scale] */,
  LOOM_PW_HARDTANH /* [min, max] */, LOOM_PW_HARDSIGMOID, LOOM_PW_HARDSWISH,
  LOOM_PW_CLAMP /* [min, max]: NaN input propagates */,
  LOOM_PW_NAN_TO_NUM /* [nan, posinf, neginf] */, LOOM_PW_ISNAN,
  LOOM_PW_ISINF, LOOM_PW_ISPOSINF, LOOM_PW_ISNEGINF, LOOM_PW_ISFINITE,
  LOOM_PW_SIGNBIT, LOOM_PW_LOGICAL_NOT, LOOM_PW_BITWISE_NOT, LOOM_PW_LGAMMA,
  LOOM_PW_DIGAMMA, LOOM_PW_SINC, LOOM_PW_ANGLE,
  LOOM_PW_THRESHOLD /* x <= p0 ? p1 : x */, LOOM_PW_LOG_SIGMOID, LOOM_PW_ENTR,
  LOOM_PW_POLYGAMMA /* [.i n >= 1] */,
  LOOM_PW_POW_SCALAR /* x ** p0 */, LOOM_PW_RPOW_SCALAR /* p0 ** x */,
  /* binary: a = tensors[1], b = tensors[2] */
  LOOM_PW_ADD /* a + p0*b */, LOOM_PW_SUB /* a - p0*b */, LOOM_PW_MUL,
  LOOM_PW_DIV, LOOM_PW_DIV_TRUNC, LOOM_PW_DIV_FLOOR, LOOM_PW_REMAINDER,
  LOOM_PW_FMOD, LOOM_PW_POW, LOOM_PW_ATAN2, LOOM_PW_MAXIMUM, LOOM_PW_MINIMUM,
  LOOM_PW_FMAX, LOOM_PW_FMIN, LOOM_PW_EQ, LOOM_PW_NE, LOOM_PW_LT, LOOM_PW_LE,
  LOOM_PW_GT, LOOM_PW_GE, LOOM_PW_LOGICAL_AND, LOOM_PW_LOGICAL_OR,
  LOOM_PW_LOGICAL_XOR, LOOM_PW_BITWISE_AND, LOOM_PW_BITWISE_OR,
  LOOM_PW_BITWISE_XOR, LOOM_PW_LSHIFT, LOOM_PW_RSHIFT, LOOM_PW_COPYSIGN,
  LOOM_PW_HYPOT, LOOM_PW_XLOGY, LOOM_PW_LERP_SCALAR /* a + p0*(b-a) */,
  LOOM_PW_CLAMP_MIN_T, LOOM_PW_CLAMP_MAX_T, LOOM_PW_LOGADDEXP, LOOM_PW_LOGADDEXP2,
  LOOM_PW_HEAVISIDE /* a == 0 ? b : a > 0 */, LOOM_PW_XLOG1PY,
  /* xlogy (p0 = 0) / xlog1py (p0 = 1) of float16 (p1 = 0) or bfloat16
   * (p1 = 1): the log rounded to the dtype before the product, as the CPU
   * computes them */
  LOOM_PW_XLOGY_16BIT /* [log1p, bf16] */,
  LOOM_PW_ZETA /* Hurwitz zeta(a, b) */,
  LOOM_PW_NEXTAFTER /* the next T after a towards b (float and double) */,
  LOOM_PW_IGAMMA /* regularized lower incomplete gamma P(a, b), in double */,
  LOOM_PW_IGAMMAC /* regularized upper incomplete gamma Q(a, b), in double */,
  /* backward: a = grad, b = the forward input (or result where noted) */
  LOOM_PW_THRESHOLD_BACKWARD /* [threshold] */,
  LOOM_PW_SIGMOID_BACKWARD /* b = result */,
  LOOM_PW_TANH_BACKWARD /* b = result */, LOOM_PW_GELU_BACKWARD,
  LOOM_PW_GELU_TANH_BACKWARD, LOOM_PW_SILU_BACKWARD,
  LOOM_PW_HARDSWISH_BACKWARD, LOOM_PW_LEAKY_RELU_BACKWARD /* [slope] */,
  LOOM_PW_ELU_BACKWARD /* [alpha, scale, input_scale, .f is_result] */,
  LOOM_PW_SOFTPLUS_BACKWARD /* [beta, threshold] */,
  LOOM_PW_HARDTANH_BACKWARD /* [min, max] */, LOOM_PW_HARDSIGMOID_BACKWARD,
  LOOM_PW_MISH_BACKWARD, LOOM_PW_LOGIT_BACKWARD /* [eps] */,
  LOOM_PW_LOG_SIGMOID_BACKWARD,
  /* ternary: a, b, c = tensors[1..3] */
  LOOM_PW_WHERE /* a ? b : c */, LOOM_PW_LERP /* a + c*(b-a) */,
  LOOM_PW_ADDCMUL /* a + p0*b*c */, LOOM_PW_ADDCDIV /* a + p0*b/c */,
  LOOM_PW_CLAMP_T /* clamp(a, b, c) */,
  LOOM_PW_OP_COUNT
} loom_pw_op;

#endif /* LOOM_KERNELS_POINTWISE_CONTRACT_H */
