/* kernels/base/lanes.h — the fixed fold of accumulator lanes. Sums that keep
 * lane l of n for elements l, l + n, l + 2n, ... and fold them with these
 * add (or multiply) in an order that depends only on the length, whatever
 * the ISA build or the chunking. */
#ifndef LOOM_KERNELS_LANES_H
#define LOOM_KERNELS_LANES_H

#include <stdint.h>

/* acc[0] + ... + acc[n - 1] as a pairwise tree, n a power of two; acc is
 * overwritten. */
static inline double loom_lanes_fold_f64(double *acc, int n) {
  for (int w = n / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/* acc[0] * ... * acc[n - 1] in the same pairwise tree. */
static inline double loom_lanes_fold_mul_f64(double *acc, int n) {
  for (int w = n / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] *= acc[j + w];
  return acc[0];
}

static inline double loom_lanes16_fold_f64(double *acc) {
  return loom_lanes_fold_f64(acc, 16);
}

static inline float loom_lanes16_fold_f32(float *acc) {
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

#ifdef __AVX512F__
#include <immintrin.h>

/* Floats [i, i + 16) of x as two vectors of doubles (lanes past n zero),
 * and the masks of the lanes below n. */
static inline void loom_lanes16_load_pd(const float *x, int64_t i, int64_t n, __m512d *lo,
                                        __m512d *hi, __mmask8 *k0, __mmask8 *k1) {
  const int64_t left = n - i;
  const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
  const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
  *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  *k0 = (__mmask8)m, *k1 = (__mmask8)(m >> 8);
}
#endif

/* sum_i (x[i] - mu)^2 of n floats in double, lane i mod 16, folded. The
 * AVX-512 build does the same operations on each lane in two vectors, so
 * both builds give the same bits. Include from translation units built
 * without floating-point contraction. */
static inline double loom_lanes16_sqdev_f32(const float *x, int64_t n, double mu) {
  double q[16] = {0};
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512d vm = _mm512_set1_pd(mu);
  __m512d q0 = _mm512_setzero_pd(), q1 = _mm512_setzero_pd();
  for (; i < n; i += 16) {
    __m512d x0, x1;
    __mmask8 k0, k1;
    loom_lanes16_load_pd(x, i, n, &x0, &x1, &k0, &k1);
    const __m512d d0 = _mm512_sub_pd(x0, vm), d1 = _mm512_sub_pd(x1, vm);
    q0 = _mm512_mask_add_pd(q0, k0, q0, _mm512_mul_pd(d0, d0));
    q1 = _mm512_mask_add_pd(q1, k1, q1, _mm512_mul_pd(d1, d1));
  }
  _mm512_storeu_pd(q, q0);
  _mm512_storeu_pd(q + 8, q1);
#else
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const double d = (double)x[i + l] - mu;
      q[l] += d * d;
    }
  for (int l = 0; i < n; ++i, ++l) {
    const double d = (double)x[i] - mu;
    q[l] += d * d;
  }
#endif
  return loom_lanes16_fold_f64(q);
}

#endif /* LOOM_KERNELS_LANES_H */
