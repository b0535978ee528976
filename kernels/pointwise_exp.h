/* kernels/pointwise_exp.h — e^x, ln x, ln(1 + x), tanh, softplus, and the
 * exact GELU and its derivative, in float32 arithmetic alone: no library calls, so
 * loops over them vectorize, and every ISA build computes the same bits
 * (the including file turns off contraction). Each function states its
 * accuracy, measured against double precision.
 *
 * The GELU's erf(x) for |x| <= 1/2 is its Taylor series to x^17 (truncated below
 * 1e-9 relative). Beyond, erfc(z) = t exp(-z^2) exp(P(t)), t = 1/(1 + z/2),
 * with P the degree-9 Chebyshev fit of Numerical Recipes (relative error
 * under 1.2e-7 for all z >= 0), and z^2 carried as an exact sum of two
 * floats: erfc's steep tail would otherwise turn z^2's rounding into tens
 * of ulp. Measured against double precision over [-12, 12]: GELU within
 * 8.6 ulp, its tail included (the C library's erf in x/2 (1 + erf(x/sqrt 2))
 * loses all digits below x = -5); the derivative within 5 ulp away from its
 * root near -0.75, where it cancels. */
#ifndef LOOM_KERNELS_POINTWISE_EXP_H
#define LOOM_KERNELS_POINTWISE_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Inlined into every loop that uses them, however many: a call left in a
 * loop keeps it from vectorizing. */
#define LOOM_PW_INLINE __attribute__((always_inline))

/* e^x within 1.2 ulp over the whole float range (subnormal results
 * included), inf past 88.73, NaN for NaN. */
static inline LOOM_PW_INLINE float loom_expf_arith(float x) {
  const float xc = x != x ? 0.0f : (x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x));
  /* k = round(x / ln 2), by the 1.5 * 2^23 shift */
  const float k = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = (xc - k * 0.693145752f) - k * 1.42860677e-6f; /* ln 2 in two parts */
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^k as two normal powers of two, k in [-150, 128]: only the last
   * product rounds, to a subnormal, a normal or inf */
  const int32_t ki = (int32_t)k, k1 = ki / 2, k2 = ki - k1;
  const int32_t b1 = (k1 + 127) * (1 << 23), b2 = (k2 + 127) * (1 << 23);
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  const float e = p * s1 * s2;
  return x != x ? x : (x < -104.0f ? 0.0f : e);
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
static inline LOOM_PW_INLINE float loom_logf_arith(float x) {
  /* (Arithmetic on both sides of each choice, then a choice of values: a
   * conditional operation could trap, which keeps the loop from
   * vectorizing.) */
  const int sub = x < 1.17549435e-38f;
  const float scaled = x * 8388608.0f, xs = sub ? scaled : x;
  uint32_t b;
  memcpy(&b, &xs, sizeof b);
  int32_t e = (int32_t)((b >> 23) & 0xffu) - 127 - (sub ? 23 : 0);
  const uint32_t mb = (b & 0x7fffffu) | 0x3f800000u;
  float m;
  memcpy(&m, &mb, sizeof m);
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

/* erf for |x| <= 1/2: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)). */
static inline LOOM_PW_INLINE float loom_erf_small(float x) {
  const float z = x * x;
  float p = 1.0f / 342720.0f; /* n = 8: 8! * 17 */
  p = p * z - 1.0f / 75600.0f;
  p = p * z + 1.0f / 9360.0f;
  p = p * z - 1.0f / 1320.0f;
  p = p * z + 1.0f / 216.0f;
  p = p * z - 1.0f / 42.0f;
  p = p * z + 1.0f / 10.0f;
  p = p * z - 1.0f / 3.0f;
  p = p * z + 1.0f;
  return 1.12837917f * (x * p);
}

/* erfc(z) for z >= 0 given z^2 = hi + lo. */
static inline LOOM_PW_INLINE float loom_erfc_tail(float z, float hi, float lo) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * loom_expf_arith(-hi) * loom_expf_arith(p - lo);
}

/* erfc(w), with w^2 = hi + lo: 1 - erf near 0, the tail's formula beyond,
 * mirrored (2 - erfc(-w)) for negative w. */
static inline LOOM_PW_INLINE float loom_erfc_sq(float w, float hi, float lo) {
  const float a = w < 0.0f ? -w : w;
  const float ws = w < -0.5f ? -0.5f : (w > 0.5f ? 0.5f : w);
  const float small = 1.0f - loom_erf_small(ws);
  const float tail = loom_erfc_tail(a < 16.0f ? a : 16.0f, hi, lo);
  return a <= 0.5f ? small : (w < 0.0f ? 2.0f - tail : tail);
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
