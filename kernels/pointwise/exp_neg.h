/* kernels/pointwise/exp_neg.h — exp(x) for x <= 0 in float, as a scalar and as 16
 * AVX-512 lanes that round alike: the exp of softmax rows (nn_rows.c) and
 * of attention tiles. Include only from translation units built without
 * floating-point contraction (#pragma GCC optimize("fp-contract=off")), or
 * the two forms may round differently. */
#ifndef LOOM_KERNELS_EXP_NEG_H
#define LOOM_KERNELS_EXP_NEG_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) for x <= 0 (Cephes polynomial, about 1 ulp); exactly 0 below the
 * smallest normal result, including x = -inf. Branch-free for vectors. The
 * reduction and the polynomial are fused multiply-adds (fmaf, exact in any
 * build; the AVX-512 form has them in hardware): a third fewer operations
 * than separate products and sums, in a chain of dependent steps. */
static inline float loom_exp_neg(float x) {
  const float lo = -87.33654f;
  const int tiny = !(x >= lo); /* also true for -inf */
  float xc = tiny ? lo : x;
  float fx = fmaf(xc, 1.44269504088896341f, 0.5f);
  float n = (float)(int32_t)fx;
  n = n > fx ? n - 1.0f : n;
  float r = fmaf(n, -0.693359375f, xc);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p * r, r, r) + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return tiny ? 0.0f : p * scale;
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* loom_exp_neg on 16 lanes, the same operations in the same order (the
 * scale by 2^n as one scalef: the same single rounding as the product). */
static inline __m512 loom_exp_neg16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  const __m512 xc = _mm512_mask_mov_ps(lo, keep, x);
  const __m512 fx =
      _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
  const __m512 n = _mm512_roundscale_ps(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}
#endif

#endif /* LOOM_KERNELS_EXP_NEG_H */
