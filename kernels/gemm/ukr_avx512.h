/* kernels/gemm/ukr_avx512.h — what the AVX-512 micro-kernels share: the
 * column masks of a tile and its store into T. Include only from files
 * built with AVX-512 flags. */
#ifndef LOOM_KERNELS_GEMM_UKR_AVX512_H
#define LOOM_KERNELS_GEMM_UKR_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes of the tile's two 16-column halves that hold columns < nr. */
static inline void loom_ukr_masks(int nr, __mmask16 *m0, __mmask16 *m1) {
  *m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
  *m1 = nr >= 32 ? (__mmask16)0xffff : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
}

/* T[i] (+)= alpha * c[i] for rows i < min(mr, rows), masked columns. */
static inline void loom_ukr_store(__m512 (*c)[2], int rows, float *t, int64_t ldt, float alpha,
                                  int mr, __mmask16 m0, __mmask16 m1, int accumulate) {
  __m512 va = _mm512_set1_ps(alpha);
  for (int i = 0; i < mr && i < rows; ++i) {
    float *r = t + i * ldt;
    __m512 t0 = _mm512_maskz_loadu_ps(accumulate ? m0 : 0, r);
    __m512 t1 = _mm512_maskz_loadu_ps(accumulate ? m1 : 0, r + 16);
    _mm512_mask_storeu_ps(r, m0, _mm512_fmadd_ps(va, c[i][0], t0));
    _mm512_mask_storeu_ps(r + 16, m1, _mm512_fmadd_ps(va, c[i][1], t1));
  }
}

#endif /* LOOM_KERNELS_GEMM_UKR_AVX512_H */
