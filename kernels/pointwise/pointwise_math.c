/* The elementwise ops, instantiated for float, double and int64. Built as
 * is for the baseline ISA (always present, the reference), and included by
 * pointwise_math_avx512.c with LOOM_PW_ISA defined to build the same source
 * for AVX-512. */
/* No fused multiply-add contraction: each ISA build must round exactly as
 * the generic one does. No trapping math: floating-point exceptions are
 * never observed, so the compiler may compute both sides of a choice and
 * keep one, which is what lets the loops over kernels/pointwise/pointwise_exp.h's
 * functions vectorize (the values are the same either way). */
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include <float.h>
#include <stdint.h>
#include <tgmath.h>

#include "kernels/base/dtype.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/pointwise/pointwise_dexp.h"
#include "kernels/pointwise/pointwise_erfinv.h"
#include "kernels/pointwise/pointwise_exp.h"
#include "kernels/pointwise/pointwise_fmod.h"
#include "kernels/pointwise/pointwise_trig.h"
#include "loom/status.h"

#ifdef LOOM_PW_ISA
#define PW_CAT2(a, b) a##b
#define PW_CAT(a, b) PW_CAT2(a, b)
#define PW_NAME(base) PW_CAT(base, LOOM_PW_ISA)
#else
#define PW_NAME(base) base
#endif

/* e^x (and sigmoid, SiLU), ln x, ln(1 + x), tanh (and the tanh GELU),
 * softplus (and Mish, log-sigmoid), the exact GELU, e^x - 1 (and ELU),
 * 2^x, sinh, cosh, log2, log10, sin, cos, tan, atan, asin, acos, atan2,
 * fmod, pow and erfinv: float32 in arithmetic alone (sin and cos in float
 * up to |x| = LOOM_TRIG_FAST, in double beyond)
 * (kernels/pointwise/pointwise_exp.h, _dexp.h, _trig.h, _fmod.h, _erfinv.h),
 * whose loops vectorize, the GELU's tail keeping its precision; float64
 * through the C library. */
#define T float
#define FN PW_NAME(loom_pw_apply_f32)
#define PW_(name) pw_f32_##name
#define PW_EXP(x) loom_expf_arith(x)
#define PW_TANH(x) loom_tanhf_arith(x)
#define PW_SIGMOID(x) loom_sigmoidf_arith(x)
#define PW_LOG(x) loom_logf_arith(x)
#define PW_LOG1P(x) loom_log1pf_arith(x)
#define PW_SOFTPLUS(x) loom_softplus_arith(x)
#define PW_LOG1P_EXP(t) loom_log1p_exp_arith(t)
#define PW_GELU(x) loom_gelu_arith(x)
#define PW_ERF(x) loom_erff_arith(x)
#define PW_ERFC(x) loom_erfcf_arith(x)
#define PW_ERFINV(x) loom_erfinvf_arith(x)
#define PW_GELU_BACKWARD(g, x) loom_gelu_backward_arith(g, x)
#define PW_SINCOS(x, phase) loom_sincosf_arith(x, phase)
#define PW_SINCOS_MAX LOOM_TRIG_MAX
#define PW_SINCOS_FAST(x, phase) loom_sincosf_fast(x, phase)
#define PW_SINCOS_FAST_MAX LOOM_TRIG_FAST
#define PW_TAN(x) loom_tanf_arith(x)
#define PW_EXPM1(x) loom_expm1f_arith(x)
#define PW_EXP2(x) loom_exp2f_arith(x)
#define PW_SINH(x) loom_sinhf_arith(x)
#define PW_COSH(x) loom_coshf_arith(x)
#define PW_LOG2(x) loom_logbf_arith(x, 1.44269504088896340736)
#define PW_LOG10(x) loom_logbf_arith(x, 0.43429448190325182765)
#define PW_ATAN(x) loom_atanf_arith(x)
#define PW_ASIN(x) loom_asinf_arith(x)
#define PW_ACOS(x) loom_acosf_arith(x)
#define PW_ATAN2(y, x) loom_atan2f_arith(y, x)
#define PW_FMOD(a, b) loom_fmodf_arith(a, b)
#define PW_FMOD_OK(a, b) LOOM_FMODF_OK(a, b)
#define PW_POW(x, y) loom_powf_arith(x, y)
#define PW_POW_OK(x, y) loom_powf_ok(x, y)
#include "kernels/pointwise/pointwise_float.inc"

#define T double
#define FN PW_NAME(loom_pw_apply_f64)
#define PW_(name) pw_f64_##name
#define PW_EXP(x) exp(x)
#define PW_TANH(x) tanh(x)
#define PW_SIGMOID(x) (1.0 / (1.0 + exp(-(x))))
#define PW_LOG(x) log(x)
#define PW_LOG1P(x) log1p(x)
#define PW_SOFTPLUS(x) log1p(exp(x))
#define PW_LOG1P_EXP(t) log1p(exp(t))
#define PW_GELU(x) ((x) * 0.5 * (1.0 + erf((x) * 0.70710678118654752440)))
#define PW_ERF(x) erf(x)
#define PW_ERFC(x) erfc(x)
#define PW_ERFINV(x) pw_f64_erfinv(x)
#define PW_GELU_BACKWARD(g, x) pw_f64_gelu_backward(g, x)
#define PW_SINCOS(x, phase) ((phase) ? cos(x) : sin(x))
#define PW_SINCOS_MAX INFINITY
#define PW_SINCOS_FAST(x, phase) PW_SINCOS(x, phase)
#define PW_SINCOS_FAST_MAX INFINITY
#define PW_TAN(x) tan(x)
#define PW_EXPM1(x) expm1(x)
#define PW_EXP2(x) exp2(x)
#define PW_SINH(x) sinh(x)
#define PW_COSH(x) cosh(x)
#define PW_LOG2(x) log2(x)
#define PW_LOG10(x) log10(x)
#define PW_ATAN(x) atan(x)
#define PW_ASIN(x) asin(x)
#define PW_ACOS(x) acos(x)
#define PW_ATAN2(y, x) atan2(y, x)
#define PW_FMOD(a, b) fmod(a, b)
#define PW_FMOD_OK(a, b) 0
#define PW_POW(x, y) pow(x, y)
#define PW_POW_OK(x, y) 0
#include "kernels/pointwise/pointwise_float.inc"

#define FN_I PW_NAME(loom_pw_apply_i64)
#define PWI_(name) pw_i64_##name
#include "kernels/pointwise/pointwise_int.inc"
