/* kernels/gemm/gemm_avx512bf16.c — bf16 micro-kernel: vdpbf16ps multiplies
 * pairs of bf16 (exact products) and accumulates in fp32, so one instruction
 * does twice the work of an fp32 FMA. Same 12x32 tile as the fp32 kernel,
 * and the same 4- and 8-row tiles for a short last row panel; each step
 * consumes one k-pair. */
#include <immintrin.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/ukr_avx512.h"

enum { MR = LOOM_GEMM_BF16_MR, NR = LOOM_GEMM_BF16_NR };

/* Rows [0, R) of the tile, R <= 8: the panel's A pairs are MR apart. */
#define LOOM_GEMM_SMALL_TILE(R)                                                        \
  static void ukr_rows##R(int64_t kc, const uint32_t *a, const uint16_t *b, float *t,  \
                          int64_t ldt, float alpha, int mr, __mmask16 m0, __mmask16 m1, \
                          int accumulate) {                                            \
    __m512 c[R][2];                                                                    \
    for (int i = 0; i < R; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();               \
    for (int64_t k = 0; k < kc; ++k) {                                                 \
      __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);                                   \
      __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 32);                              \
      _mm_prefetch((const char *)(b + 64 * NR), _MM_HINT_T0);                          \
      _mm_prefetch((const char *)(b + 64 * NR + 32), _MM_HINT_T0);                     \
      for (int i = 0; i < R; ++i) {                                                    \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[i]);                          \
        c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);                                   \
        c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);                                   \
      }                                                                                \
      a += MR;                                                                         \
      b += 2 * NR;                                                                     \
    }                                                                                  \
    loom_ukr_store(c, R, t, ldt, alpha, mr, m0, m1, accumulate);                           \
  }

LOOM_GEMM_SMALL_TILE(4)
LOOM_GEMM_SMALL_TILE(8)

/* The 12-row tile; A's pair for row i, step k is a[i * si + k * sk]:
 * (1, MR) for a packed panel, (lda / 2, 1) for rows read in place. */
static inline void ukr_rows12(int64_t kc, const uint32_t *a, int64_t si, int64_t sk,
                              const uint16_t *b, float *t, int64_t ldt, float alpha,
                              int mr, __mmask16 m0, __mmask16 m1, int accumulate) {
  LOOM_UKR12_ACCUMULATORS;
#define LOOM_ROW(ci0, ci1, x)                                        \
  do {                                                               \
    __m512bh av = (__m512bh)_mm512_set1_epi32((int)(x));             \
    ci0 = _mm512_dpbf16_ps(ci0, av, b0);                             \
    ci1 = _mm512_dpbf16_ps(ci1, av, b1);                             \
  } while (0)
  const uint32_t *a3 = a + 3 * si, *a6 = a + 6 * si, *a9 = a + 9 * si;
  /* Rows read in place: the next row panel's (MR rows on) are fetched a
   * line a step, row by row, while this one runs. The hardware prefetcher
   * misses them, twelve runs of kc / 16 lines each, when A is out of cache
   * (bf16 512^3, one thread, caches flushed before each product: 1350 ->
   * 1300 us; in cache, level). */
  const uint32_t *next = a + MR * si;
  int row = 0;
  for (int64_t k = 0; k < kc; ++k) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 32);
    _mm_prefetch((const char *)(b + 64 * NR), _MM_HINT_T0);
    _mm_prefetch((const char *)(b + 64 * NR + 32), _MM_HINT_T0);
    if (si == 1) {
      _mm_prefetch((const char *)(a + 16 * MR), _MM_HINT_T0);
    } else if (16 * (k / MR) < kc) {
      _mm_prefetch((const char *)(next + row * si), _MM_HINT_T0);
      if (++row == MR) row = 0, next += 16;
    }
    LOOM_UKR12_STEP(a, a3, a6, a9, si);
    a += sk, a3 += sk, a6 += sk, a9 += sk;
    b += 2 * NR;
  }
#undef LOOM_ROW
  LOOM_UKR12_STORE(t, ldt, alpha, mr, m0, m1, accumulate);
}

void loom_gemm_ukr_avx512bf16_bf16(int64_t kc, const void *ap, const void *bp,
                                   float *t, int64_t ldt, float alpha, int mr,
                                   int nr, int accumulate) {
  const uint32_t *a = (const uint32_t *)ap; /* one bf16 pair per row */
  const uint16_t *b = (const uint16_t *)bp;
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  if (mr <= 4) {
    ukr_rows4(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate);
    return;
  }
  if (mr <= 8) {
    ukr_rows8(kc, a, b, t, ldt, alpha, mr, m0, m1, accumulate);
    return;
  }
  ukr_rows12(kc, a, 1, MR, b, t, ldt, alpha, mr, m0, m1, accumulate);
}

void loom_gemm_ukr_avx512bf16_bf16_rows(int64_t kc, const void *ap, int64_t lda,
                                        const void *bp, float *t, int64_t ldt,
                                        float alpha, int nr, int accumulate) {
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  ukr_rows12(kc, (const uint32_t *)ap, lda / 2, 1, (const uint16_t *)bp, t, ldt, alpha,
             MR, m0, m1, accumulate);
}
