/* kernels/pointwise_exp.h — e^x, ln x, ln(1 + x), tanh, softplus, erf,
 * erfc, and the exact GELU and its derivative, in float32 arithmetic
 * alone: no library calls, so loops over them vectorize, and every ISA
 * build computes the same bits (the including file turns off
 * contraction). Each function states its accuracy, measured against
 * double precision.
 *
 * erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2), with P the degree-9
 * Chebyshev fit of Numerical Recipes (relative error under 1.2e-7 for all
 * z >= 0), and z^2 carried as an exact sum of two floats, whose low part
 * joins the exponent only after its large part has been reduced by ln 2:
 * erfc's steep tail would otherwise turn z^2's rounding into tens of ulp.
 * The GELU and erfc use it alone (2 - erfc(-z) below 0); erf, which goes
 * to 0 with x, takes its Taylor series to x^17 up to |x| = 1/2 (truncated
 * below 1e-9 relative). Measured against double precision over [-12, 12]:
 * GELU within 6.2 ulp, its tail included (the C library's erf in
 * x/2 (1 + erf(x/sqrt 2)) loses all digits below x = -5); the derivative
 * within 4.4 ulp of its terms' size (it cancels near its root at -0.75);
 * erf within 3 ulp; erfc within 6 ulp over the normal floats. */
#ifndef LOOM_KERNELS_POINTWISE_EXP_H
#define LOOM_KERNELS_POINTWISE_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Inlined into every loop that uses them, however many: a call left in a
 * loop keeps it from vectorizing. */
#define LOOM_PW_INLINE __attribute__((always_inline))

/* 2^k e^r for |r| <= ln 2 / 2 and k in [-150, 128]: e^r by its Taylor
 * series to r^7, 2^k as two normal powers of two, so that only the last
 * product rounds, to a subnormal, a normal or inf. */
static inline LOOM_PW_INLINE float loom_exp_kr(float k, float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ki = (int32_t)k, k1 = ki / 2, k2 = ki - k1;
  const int32_t b1 = (k1 + 127) * (1 << 23), b2 = (k2 + 127) * (1 << 23);
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

/* round(x / ln 2) for x in [-104, 89], by the 1.5 * 2^23 shift. */
static inline LOOM_PW_INLINE float loom_exp_k(float x) {
  return (x * 1.44269504f + 12582912.0f) - 12582912.0f;
}

/* e^x within 1.2 ulp over the whole float range (subnormal results
 * included), inf past 88.73, NaN for NaN. */
static inline LOOM_PW_INLINE float loom_expf_arith(float x) {
  const float xc = x != x ? 0.0f : (x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x));
  const float k = loom_exp_k(xc);
  const float r = (xc - k * 0.693145752f) - k * 1.42860677e-6f; /* ln 2 in two parts */
  const float e = loom_exp_kr(k, r);
  return x != x ? x : (x < -104.0f ? 0.0f : e);
}

/* e^(a + b) for a <= 0 and a + b <= 0, b not NaN, without a + b's rounding:
 * a - k ln 2 is formed first, where a's low bits survive, then b joins
 * the small remainder. 0 below e^-104. */
static inline LOOM_PW_INLINE float loom_exp_sum(float a, float b) {
  const float s = a + b, sc = s < -104.0f ? -104.0f : s;
  const float k = loom_exp_k(sc);
  const float r = ((a - k * 0.693145752f) - k * 1.42860677e-6f) + b;
  const float e = loom_exp_kr(k, r);
  return s < -104.0f ? 0.0f : e;
}

/* tanh(x) = expm1(2|x|) / (expm1(2|x|) + 2), signed as x: expm1 from its
 * Taylor series up to 0.7, past that from e^y - 1, which then loses at
 * most a bit. Within 3 ulp; +-1 from |x| = 9 on. */
static inline LOOM_PW_INLINE float loom_tanhf_arith(float x) {
  const float ax = fabsf(x), a = ax < 9.0f ? ax : 9.0f; /* NaN: 9, then x itself */
  const float y = 2.0f * a;
  float p = 1.0f / 39916800.0f; /* y^11 / 11! */
  p = p * y + 1.0f / 3628800.0f;
  p = p * y + 1.0f / 362880.0f;
  p = p * y + 1.0f / 40320.0f;
  p = p * y + 1.0f / 5040.0f;
  p = p * y + 1.0f / 720.0f;
  p = p * y + 1.0f / 120.0f;
  p = p * y + 1.0f / 24.0f;
  p = p * y + 1.0f / 6.0f;
  p = p * y + 0.5f;
  p = p * y + 1.0f;
  const float big = loom_expf_arith(y) - 1.0f; /* both computed: no branch in the loop */
  const float em1 = y <= 0.7f ? y * p : big;
  const float t = em1 / (em1 + 2.0f);
  uint32_t tb, xb; /* t with x's sign */
  memcpy(&tb, &t, sizeof tb);
  memcpy(&xb, &x, sizeof xb);
  tb |= xb & 0x80000000u;
  float r;
  memcpy(&r, &tb, sizeof r);
  return x != x ? x : r;
}

/* fe ln 2 + ln m for m in [sqrt(1/2), sqrt(2)]: ln m = 2 atanh(s),
 * s = (m - 1) / (m + 1), by its series to s^13; ln 2 in two parts. */
static inline LOOM_PW_INLINE float loom_log_reduced(float m, float fe) {
  const float s = (m - 1.0f) / (m + 1.0f), z = s * s;
  float p = 1.0f / 13.0f;
  p = p * z + 1.0f / 11.0f;
  p = p * z + 1.0f / 9.0f;
  p = p * z + 1.0f / 7.0f;
  p = p * z + 1.0f / 5.0f;
  p = p * z + 1.0f / 3.0f;
  const float lm = 2.0f * s + 2.0f * s * (z * p);
  return fe * 0.693145752f + (lm + fe * 1.42860677e-6f);
}

/* ln x within 2 ulp: x = 2^e m with m in [sqrt(1/2), sqrt(2)), then
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), by its series to s^13 (|s| <=
 * 0.172, truncated below 1e-10). Subnormals are scaled by 2^23 first;
 * ln 0 = -inf, ln of a negative number NaN, ln inf = inf. */
/* x > 0 finite as 2^e m1 with m1 in [1, 2) (subnormals scaled by 2^23
 * first): m1 and e, each a function of its own, which loops over them
 * vectorize. (Arithmetic on both sides of each choice, then a choice of
 * values: a conditional operation could trap, which keeps the loop from
 * vectorizing.) */
static inline LOOM_PW_INLINE uint32_t loom_log_bits(float x) {
  const float scaled = x * 8388608.0f, xs = x < 1.17549435e-38f ? scaled : x;
  uint32_t b;
  memcpy(&b, &xs, sizeof b);
  return b;
}
static inline LOOM_PW_INLINE float loom_log_m1(float x) {
  const uint32_t mb = (loom_log_bits(x) & 0x7fffffu) | 0x3f800000u;
  float m;
  memcpy(&m, &mb, sizeof m);
  return m;
}
static inline LOOM_PW_INLINE int32_t loom_log_e1(float x) {
  return (int32_t)((loom_log_bits(x) >> 23) & 0xffu) - 127 - (x < 1.17549435e-38f ? 23 : 0);
}

static inline LOOM_PW_INLINE float loom_logf_arith(float x) {
  float m = loom_log_m1(x);
  int32_t e = loom_log_e1(x);
  const int halve = m > 1.41421356f;
  const float half_m = 0.5f * m;
  m = halve ? half_m : m;
  e += halve;
  const float r = loom_log_reduced(m, (float)e);
  /* NaN and inf are their own logarithms; four outcomes at most in one
   * choice, which is what the compiler's if-conversion takes */
  return (x != x || x == INFINITY) ? x : (x < 0.0f ? NAN : (x == 0.0f ? -INFINITY : r));
}

/* ln(1 + x): ln u scaled by x / (u - 1), u = 1 + x, which undoes u's
 * rounding; x itself where u rounds to 1. */
static inline LOOM_PW_INLINE float loom_log1pf_arith(float x) {
  const float u = 1.0f + x, d = u - 1.0f;
  const float r = loom_logf_arith(u) * (x / (d != 0.0f ? d : 1.0f));
  return d == 0.0f ? x : (x == INFINITY ? x : r);
}

/* ln(1 + e) for e in [0, 1], as ln u * e / (u - 1), u = 1 + e in [1, 2]:
 * ln u needs no exponent taken apart, which keeps loops that compose it
 * with e^x vectorizing. */
static inline LOOM_PW_INLINE float loom_log1p_unit(float e) {
  const float u = 1.0f + e, d = u - 1.0f;
  const int big = u > 1.41421356f;
  const float half_u = 0.5f * u;
  const float lu = loom_log_reduced(big ? half_u : u, big ? 1.0f : 0.0f);
  const float r = lu * (e / (d != 0.0f ? d : 1.0f));
  return d == 0.0f ? e : r;
}

/* ln(1 + e^t) for t <= 0 (NaN for NaN). */
static inline LOOM_PW_INLINE float loom_log1p_exp_arith(float t) {
  return loom_log1p_unit(loom_expf_arith(t));
}

/* Softplus ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|), which neither
 * overflows nor cancels: within 3 ulp. */
static inline LOOM_PW_INLINE float loom_softplus_arith(float x) {
  return (x > 0.0f ? x : 0.0f) + loom_log1p_exp_arith(-fabsf(x));
}

/* x * x = hi + lo exactly (Dekker's product), for |x| <= 2^12. */
static inline LOOM_PW_INLINE void loom_square_exact(float x, float *hi, float *lo) {
  const float c = 4097.0f * x, xh = c - (c - x), xl = x - xh;
  *hi = x * x;
  *lo = ((xh * xh - *hi) + 2.0f * xh * xl) + xl * xl;
}

/* erf for |x| <= 1/2: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)),
 * the polynomial in z = x^2 evaluated in pairs of terms (Estrin's
 * scheme): a shorter chain of dependent operations than Horner's. */
static inline LOOM_PW_INLINE float loom_erf_small(float x) {
  const float z = x * x, z2 = z * z, z4 = z2 * z2;
  const float c01 = 1.0f - z * (1.0f / 3.0f), c23 = 1.0f / 10.0f - z * (1.0f / 42.0f);
  const float c45 = 1.0f / 216.0f - z * (1.0f / 1320.0f);
  const float c67 = 1.0f / 9360.0f - z * (1.0f / 75600.0f);
  const float c8 = 1.0f / 342720.0f; /* n = 8: 8! * 17 */
  const float lo4 = c01 + z2 * c23, hi4 = c45 + z2 * c67;
  const float p = lo4 + z4 * (hi4 + z4 * c8);
  return 1.12837917f * (x * p);
}

/* erfc(z) for z >= 0 given z^2 = hi + lo, as t e^(-z^2 + P(t)), P in
 * Estrin's scheme. */
static inline LOOM_PW_INLINE float loom_erfc_tail(float z, float hi, float lo) {
  const float t = 1.0f / (1.0f + 0.5f * z), t2 = t * t, t4 = t2 * t2;
  const float c01 = -1.26551223f + t * 1.00002368f, c23 = 0.37409196f + t * 0.09678418f;
  const float c45 = -0.18628806f + t * 0.27886807f, c67 = -1.13520398f + t * 1.48851587f;
  const float c89 = -0.82215223f + t * 0.17087277f;
  const float p = (c01 + t2 * c23) + t4 * ((c45 + t2 * c67) + t4 * c89);
  return t * loom_exp_sum(-hi, p - lo);
}

/* erfc(w), with w^2 = hi + lo: the tail's formula, mirrored (2 - erfc(-w))
 * for negative w. Near 0 erfc is near 1, so the formula's relative error
 * holds there too, and no series is needed. */
static inline LOOM_PW_INLINE float loom_erfc_sq(float w, float hi, float lo) {
  const float a = w < 0.0f ? -w : w;
  const float tail = loom_erfc_tail(a < 16.0f ? a : 16.0f, hi, lo);
  return w < 0.0f ? 2.0f - tail : tail;
}

/* erf(x): the series up to |x| = 1/2, 1 - erfc(|x|) beyond, signed as x;
 * +-1 from |x| = 4.5 on (erf rounds to 1 from 3.92). */
static inline LOOM_PW_INLINE float loom_erff_arith(float x) {
  const float a = fabsf(x), ac = a < 4.5f ? a : 4.5f; /* NaN: 4.5, then x itself */
  float hi, lo;
  loom_square_exact(ac, &hi, &lo);
  const float xs = x < -0.5f ? -0.5f : (x > 0.5f ? 0.5f : x);
  const float small = loom_erf_small(xs);
  const float big = 1.0f - loom_erfc_tail(ac, hi, lo);
  return x != x ? x : (a <= 0.5f ? small : (x < 0.0f ? -big : big));
}

/* erfc(x), relative to its own size in the tail: 0 from x = 10.06 on
 * (past the smallest subnormal), 2 below -3.9. */
static inline LOOM_PW_INLINE float loom_erfcf_arith(float x) {
  const float xc = x != x ? 0.0f : (x < -16.0f ? -16.0f : (x > 16.0f ? 16.0f : x));
  float hi, lo;
  loom_square_exact(xc, &hi, &lo);
  const float r = loom_erfc_sq(xc, hi, lo);
  return x != x ? x : r;
}

/* GELU x Phi(x) = x/2 erfc(-x / sqrt 2), with (x / sqrt 2)^2 = x^2 / 2
 * exact; and its derivative Phi(x) + x phi(x), phi(x) = e^(-x^2/2) /
 * sqrt(2 pi), times g. As the formulas give them: gelu(inf) = inf,
 * gelu(-inf) = NaN (-inf * 0), and both derivatives at infinity NaN. */
static inline LOOM_PW_INLINE float loom_gelu_arith(float x) {
  const float xc = x != x ? 0.0f : (x < -32.0f ? -32.0f : (x > 32.0f ? 32.0f : x));
  float hi, lo;
  loom_square_exact(xc, &hi, &lo);
  const float cdf2 = loom_erfc_sq(-0.70710678f * xc, 0.5f * hi, 0.5f * lo); /* 2 Phi(x) */
  return x * 0.5f * cdf2;
}

static inline LOOM_PW_INLINE float loom_gelu_backward_arith(float g, float x) {
  const float xc = x != x ? 0.0f : (x < -32.0f ? -32.0f : (x > 32.0f ? 32.0f : x));
  float hi, lo;
  loom_square_exact(xc, &hi, &lo);
  const float cdf2 = loom_erfc_sq(-0.70710678f * xc, 0.5f * hi, 0.5f * lo);
  const float pdf = 0.39894228f * loom_expf_arith(-0.5f * hi) * (1.0f - 0.5f * lo);
  const float d = 0.5f * cdf2 + x * pdf; /* x: infinities give NaN, as x * 0 */
  return x != x ? x : g * d;
}

#endif /* LOOM_KERNELS_POINTWISE_EXP_H */
