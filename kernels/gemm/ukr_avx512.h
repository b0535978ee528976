/* kernels/gemm/ukr_avx512.h — what the AVX-512 micro-kernels share: the
 * column masks of a tile, the 12-row tile's accumulators and k step, and
 * its store into T (fp32, or rounded to bf16). Include only from files
 * built with AVX-512 flags. */
#ifndef LOOM_KERNELS_GEMM_UKR_AVX512_H
#define LOOM_KERNELS_GEMM_UKR_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm/gemm_internal.h"

/* Lanes of the tile's two 16-column halves that hold columns < nr. */
static inline void loom_ukr_masks(int nr, __mmask16 *m0, __mmask16 *m1) {
  *m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
  *m1 = nr >= 32 ? (__mmask16)0xffff : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
}

/* fp32 bits to bf16 bits as loom_f32_to_bf16 (kernels/base/dtype.h)
 * rounds, nearest even with NaN quieted, in the low half of each lane. */
static inline __m512i loom_ukr_bf16_rne(__m512i b) {
  const __m512i hi = _mm512_srli_epi32(b, 16);
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
      16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

/* Row i of T (+)= alpha * (c0, c1), masked columns; with
 * LOOM_GEMM_UKR_BF16_OUT in `accumulate`, T is bf16 and gets alpha * c
 * rounded as loom_f32_to_bf16 (the fp32 value a zeroed T would hold). */
static inline void loom_ukr_store_row(float *t, int64_t ldt, int i, __m512 c0, __m512 c1,
                                      __m512 va, __mmask16 m0, __mmask16 m1, int accumulate) {
  if (accumulate & LOOM_GEMM_UKR_BF16_OUT) {
    uint16_t *r = (uint16_t *)t + i * ldt;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 v0 = _mm512_fmadd_ps(va, c0, zero), v1 = _mm512_fmadd_ps(va, c1, zero);
    _mm256_mask_storeu_epi16(r, m0, _mm512_cvtepi32_epi16(loom_ukr_bf16_rne(_mm512_castps_si512(v0))));
    _mm256_mask_storeu_epi16(r + 16, m1,
                             _mm512_cvtepi32_epi16(loom_ukr_bf16_rne(_mm512_castps_si512(v1))));
    return;
  }
  float *r = t + i * ldt;
  const __m512 t0 = _mm512_maskz_loadu_ps(accumulate ? m0 : 0, r);
  const __m512 t1 = _mm512_maskz_loadu_ps(accumulate ? m1 : 0, r + 16);
  _mm512_mask_storeu_ps(r, m0, _mm512_fmadd_ps(va, c0, t0));
  _mm512_mask_storeu_ps(r + 16, m1, _mm512_fmadd_ps(va, c1, t1));
}

/* T[i] (+)= alpha * c[i] for rows i < min(mr, rows), masked columns, as
 * loom_ukr_store_row. */
static inline void loom_ukr_store(__m512 (*c)[2], int rows, float *t, int64_t ldt, float alpha,
                                  int mr, __mmask16 m0, __mmask16 m1, int accumulate) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int i = 0; i < mr && i < rows; ++i)
    loom_ukr_store_row(t, ldt, i, c[i][0], c[i][1], va, m0, m1, accumulate);
}

/* The 12-row tile's 24 accumulators, c00 ... cb1 (row, half), zeroed. */
#define LOOM_UKR12_ACCUMULATORS                                          \
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();          \
  __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();          \
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();          \
  __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();          \
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();          \
  __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();          \
  __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps();          \
  __m512 c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();          \
  __m512 c80 = _mm512_setzero_ps(), c81 = _mm512_setzero_ps();          \
  __m512 c90 = _mm512_setzero_ps(), c91 = _mm512_setzero_ps();          \
  __m512 ca0 = _mm512_setzero_ps(), ca1 = _mm512_setzero_ps();          \
  __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps()

/* One k step of the 12-row tile: the including file's LOOM_ROW(acc0, acc1,
 * A value) for rows 0-11. The rows come from four bases a, a3, a6, a9 (rows
 * 0, 3, 6, 9) with steps of 1, 2, 4 or 8 rows of `si`, which x86 addressing
 * takes as they are: twelve row pointers would not all stay in registers. */
#define LOOM_UKR12_STEP(a, a3, a6, a9, si) \
  do {                                     \
    LOOM_ROW(c00, c01, a[0]);              \
    LOOM_ROW(c10, c11, a[si]);             \
    LOOM_ROW(c20, c21, a[2 * si]);         \
    LOOM_ROW(c30, c31, a3[0]);             \
    LOOM_ROW(c40, c41, a[4 * si]);         \
    LOOM_ROW(c50, c51, a3[2 * si]);        \
    LOOM_ROW(c60, c61, a6[0]);             \
    LOOM_ROW(c70, c71, a3[4 * si]);        \
    LOOM_ROW(c80, c81, a[8 * si]);         \
    LOOM_ROW(c90, c91, a9[0]);             \
    LOOM_ROW(ca0, ca1, a9[si]);            \
    LOOM_ROW(cb0, cb1, a9[2 * si]);        \
  } while (0)

/* Rows i < mr of the 12-row tile stored as loom_ukr_store_row does, from
 * the accumulators where they are: an array of them for loom_ukr_store
 * went through the stack, 24 stores and loads a call. */
#define LOOM_UKR12_STORE(t, ldt, alpha, mr, m0, m1, accumulate)                        \
  do {                                                                                 \
    const __m512 va_ = _mm512_set1_ps(alpha);                                          \
    const int mr_ = (mr);                                                              \
    if (mr_ > 0) loom_ukr_store_row(t, ldt, 0, c00, c01, va_, m0, m1, accumulate);     \
    if (mr_ > 1) loom_ukr_store_row(t, ldt, 1, c10, c11, va_, m0, m1, accumulate);     \
    if (mr_ > 2) loom_ukr_store_row(t, ldt, 2, c20, c21, va_, m0, m1, accumulate);     \
    if (mr_ > 3) loom_ukr_store_row(t, ldt, 3, c30, c31, va_, m0, m1, accumulate);     \
    if (mr_ > 4) loom_ukr_store_row(t, ldt, 4, c40, c41, va_, m0, m1, accumulate);     \
    if (mr_ > 5) loom_ukr_store_row(t, ldt, 5, c50, c51, va_, m0, m1, accumulate);     \
    if (mr_ > 6) loom_ukr_store_row(t, ldt, 6, c60, c61, va_, m0, m1, accumulate);     \
    if (mr_ > 7) loom_ukr_store_row(t, ldt, 7, c70, c71, va_, m0, m1, accumulate);     \
    if (mr_ > 8) loom_ukr_store_row(t, ldt, 8, c80, c81, va_, m0, m1, accumulate);     \
    if (mr_ > 9) loom_ukr_store_row(t, ldt, 9, c90, c91, va_, m0, m1, accumulate);     \
    if (mr_ > 10) loom_ukr_store_row(t, ldt, 10, ca0, ca1, va_, m0, m1, accumulate);   \
    if (mr_ > 11) loom_ukr_store_row(t, ldt, 11, cb0, cb1, va_, m0, m1, accumulate);   \
  } while (0)

#endif /* LOOM_KERNELS_GEMM_UKR_AVX512_H */
