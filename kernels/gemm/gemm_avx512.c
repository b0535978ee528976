/* kernels/gemm/gemm_avx512.c — fp32 micro-kernel: a 12x32 register tile
 * (24 zmm accumulators) fed by two B loads and twelve A broadcasts per k,
 * enough independent FMAs to cover two FMA pipes of latency 4. A panel
 * with at most 4 or 8 live rows (the last of an M that is not a multiple
 * of 12) runs a 4- or 8-row tile instead of multiplying padding, and a
 * panel of at most 16 live columns (the last of an N that is not a
 * multiple of 32) a half-width one; every element still sums its k in the
 * same order, so the bits are the same. */
#include <immintrin.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/ukr_avx512.h"

enum { MR = LOOM_GEMM_AVX512_MR, NR = LOOM_GEMM_AVX512_NR };

/* The tiles are inlined into each entry point, where `wide` is constant:
 * a call would test it at every FMA. */
#define UKR_INLINE __attribute__((always_inline))

/* Rows [0, R) of the tile, R <= 8: the panel's A values are MR apart;
 * `wide` as for ukr_rows12 below. */
#define LOOM_GEMM_SMALL_TILE(R)                                                          \
  static inline UKR_INLINE void ukr_rows##R(int64_t kc, const float *a, const float *b,   \
                                            float *t, int64_t ldt, float alpha, int mr,  \
                                            __mmask16 m0, __mmask16 m1, int accumulate,  \
                                            const int wide) {                            \
    __m512 c[R][2];                                                                      \
    for (int i = 0; i < R; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();                 \
    for (int64_t k = 0; k < kc; ++k) {                                                   \
      __m512 b0 = _mm512_loadu_ps(b), b1 = wide ? _mm512_loadu_ps(b + 16) : b0;          \
      _mm_prefetch((const char *)(b + 32 * NR), _MM_HINT_T0);                            \
      if (wide) _mm_prefetch((const char *)(b + 32 * NR + 16), _MM_HINT_T0);             \
      for (int i = 0; i < R; ++i) {                                                      \
        __m512 av = _mm512_set1_ps(a[i]);                                                \
        c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);                                      \
        if (wide) c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);                            \
      }                                                                                  \
      a += MR;                                                                           \
      b += NR;                                                                           \
    }                                                                                    \
    loom_ukr_store(c, R, t, ldt, alpha, mr, m0, m1, accumulate);                         \
  }

LOOM_GEMM_SMALL_TILE(4)
LOOM_GEMM_SMALL_TILE(8)

/* The 12-row tile; A's value for row i, step k is a[i * si + k * sk]:
 * (1, MR) for a packed panel, (lda, 1) for rows read in place. A `wide`
 * of 0 multiplies only the panel's first 16 columns (nr <= 16: the last
 * panel of a C whose width is not a multiple of 32), in half the FMAs. */
static inline UKR_INLINE void ukr_rows12(int64_t kc, const float *a, int64_t si, int64_t sk,
                                         const float *b, float *t, int64_t ldt, float alpha,
                                         int mr, __mmask16 m0, __mmask16 m1, int accumulate,
                                         const int wide) {
  LOOM_UKR12_ACCUMULATORS;
#define LOOM_ROW(ci0, ci1, x)                          \
  do {                                                 \
    __m512 av = _mm512_set1_ps(x);                     \
    ci0 = _mm512_fmadd_ps(av, b0, ci0);                \
    if (wide) ci1 = _mm512_fmadd_ps(av, b1, ci1);      \
  } while (0)
  const float *a3 = a + 3 * si, *a6 = a + 6 * si, *a9 = a + 9 * si;
  /* Rows read in place: the next row panel's fetched a line a step, as
   * the bf16 tile does (gemm_avx512bf16.c; fp32 512^3, one thread, caches
   * flushed before each product: 2596-2664 -> 2595-2600 us; in cache level). */
  const float *next = a + MR * si;
  int row = 0;
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = wide ? _mm512_loadu_ps(b + 16) : b0;
    _mm_prefetch((const char *)(b + 32 * NR), _MM_HINT_T0);
    if (wide) _mm_prefetch((const char *)(b + 32 * NR + 16), _MM_HINT_T0);
    if (si == 1) {
      _mm_prefetch((const char *)(a + 16 * MR), _MM_HINT_T0);
    } else if (16 * (k / MR) < kc) {
      _mm_prefetch((const char *)(next + row * si), _MM_HINT_T0);
      if (++row == MR) row = 0, next += 16;
    }
    LOOM_UKR12_STEP(a, a3, a6, a9, si);
    a += sk, a3 += sk, a6 += sk, a9 += sk;
    b += NR;
  }
#undef LOOM_ROW
  LOOM_UKR12_STORE(t, ldt, alpha, mr, m0, m1, accumulate);
}

void loom_gemm_ukr_avx512_f32(int64_t kc, const void *ap, const void *bp,
                              float *t, int64_t ldt, float alpha, int mr,
                              int nr, int accumulate) {
  const float *a = (const float *)ap, *b = (const float *)bp;
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  if (mr <= 4 && nr <= 16)
    ukr_rows4(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate, 0);
  else if (mr <= 4)
    ukr_rows4(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate, 1);
  else if (mr <= 8 && nr <= 16)
    ukr_rows8(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate, 0);
  else if (mr <= 8)
    ukr_rows8(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate, 1);
  else if (nr <= 16)
    ukr_rows12(kc, a, 1, MR, b, t, ldt, alpha, mr, m0, m1, accumulate, 0);
  else
    ukr_rows12(kc, a, 1, MR, b, t, ldt, alpha, mr, m0, m1, accumulate, 1);
}

void loom_gemm_ukr_avx512_f32_rows(int64_t kc, const void *ap, int64_t lda,
                                   const void *bp, float *t, int64_t ldt,
                                   float alpha, int nr, int accumulate) {
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  const float *a = (const float *)ap, *b = (const float *)bp;
  if (nr <= 16)
    ukr_rows12(kc, a, lda, 1, b, t, ldt, alpha, MR, m0, m1, accumulate, 0);
  else
    ukr_rows12(kc, a, lda, 1, b, t, ldt, alpha, MR, m0, m1, accumulate, 1);
}
