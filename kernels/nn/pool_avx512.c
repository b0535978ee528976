/* kernels/nn/pool_avx512.c — the AVX-512 loops of pool.c's max and average
 * pooling: 16 output columns per pass, each lane taking the same taps in
 * the same order with the same comparisons or double additions as the
 * scalar loop, so the values and indices are the same. A row of unit
 * column stride and a stride of at most 2 is read with two loads and a
 * permute per tap; other rows with a gather. */
#include <immintrin.h>
#include <math.h>

#include "kernels/nn/pool_internal.h"

/* The 16 output columns from x0 of a row of ow: which lanes are live, and
 * each lane's first tap column (x0 + l) * s - p. */
typedef struct pool_cols {
  __mmask16 live;
  __m512i first;
} pool_cols;

static inline pool_cols pool_cols_at(int64_t x0, int64_t ow, int64_t s, int64_t p) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return (pool_cols){
      .live = ow - x0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ow - x0)) - 1u),
      .first = _mm512_sub_epi32(
          _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)x0)),
                             _mm512_set1_epi32((int32_t)s)),
          _mm512_set1_epi32((int32_t)p))};
}

/* The tap `shift` columns past each lane's first (*col), the live lanes
 * whose column lies inside the row's iw, and the columns' element offsets
 * at stride sw (*off). */
static inline __mmask16 pool_tap(const pool_cols *pc, int64_t shift, int64_t iw, int64_t sw,
                                 __m512i *col, __m512i *off) {
  *col = _mm512_add_epi32(pc->first, _mm512_set1_epi32((int32_t)shift));
  *off = sw == 1 ? *col : _mm512_mullo_epi32(*col, _mm512_set1_epi32((int32_t)sw));
  return pc->live & _mm512_cmpge_epi32_mask(*col, _mm512_setzero_si512()) &
         _mm512_cmplt_epi32_mask(*col, _mm512_set1_epi32((int32_t)iw));
}

/* Whether a row's taps come from loads and a permute (pool_row_taps). */
static inline int pool_loads(int64_t sw, int64_t s) { return sw == 1 && s <= 2; }

/* Lane l's column offset l * s from the first lane's, for pool_row_taps. */
static inline __m512i pool_lanes_s(int64_t s) {
  return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                            _mm512_set1_epi32((int32_t)s));
}

/* The lanes [0, n) of 16, n clamped to [0, 16]. */
static inline __mmask16 pool_first_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* The 16 lanes' taps of a unit-stride row at columns first + l * s
 * (s <= 2, so they span at most 31 columns): the 32 columns from the first
 * one inside the row (those past iw read as 0) permuted into place, no
 * element outside [0, iw) read. Lanes whose column lies outside the row
 * hold whatever the permute picks: the callers mask them. */
static inline __m512 pool_row_taps(const float *row, int64_t first, int64_t iw,
                                   __m512i lanes_s) {
  const int64_t base = first < 0 ? 0 : first;
  const __m512 lo = _mm512_maskz_loadu_ps(pool_first_lanes(iw - base), row + base);
  const __m512 hi = _mm512_maskz_loadu_ps(pool_first_lanes(iw - base - 16), row + base + 16);
  const __m512i at = _mm512_add_epi32(lanes_s, _mm512_set1_epi32((int32_t)(first - base)));
  return _mm512_permutex2var_ps(lo, at, hi);
}

void loom_pool_max_row_avx512(const float *in, const int64_t *rows, const int64_t *idx,
                              int64_t nrows, int64_t iw, int64_t sw, int64_t kw, int64_t s,
                              int64_t p, int64_t dil, int64_t ow, float *out, int64_t *ind) {
  const __m512i zero = _mm512_setzero_si512();
  const int loads = pool_loads(sw, s);
  const __m512i lanes_s = pool_lanes_s(s);
  for (int64_t x0 = 0; x0 < ow; x0 += 16) {
    const pool_cols pc = pool_cols_at(x0, ow, s, p);
    const __mmask16 live = pc.live;
    __m512 best = _mm512_set1_ps(-INFINITY);
    __m512i best_i = _mm512_set1_epi32(-1);
    for (int64_t r = 0; r < nrows; ++r) {
      const float *row = in + rows[r];
      const __m512i base = _mm512_set1_epi32((int32_t)idx[r]);
      for (int64_t c = 0; c < kw; ++c) {
        __m512i col, off;
        const __mmask16 in_row = pool_tap(&pc, c * dil, iw, sw, &col, &off);
        const __m512 v = loads ? pool_row_taps(row, x0 * s - p + c * dil, iw, lanes_s)
                               : _mm512_mask_i32gather_ps(best, in_row, off, row, 4);
        const __mmask16 take = in_row & (_mm512_cmplt_epi32_mask(best_i, zero) |
                                         _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                         _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
        best = _mm512_mask_mov_ps(best, take, v);
        best_i = _mm512_mask_mov_epi32(best_i, take, _mm512_add_epi32(base, col));
      }
    }
    /* no tap at all: index 0, as the scalar loop */
    best_i = _mm512_max_epi32(best_i, zero);
    _mm512_mask_storeu_ps(out + x0, live, best);
    _mm512_mask_storeu_epi64(ind + x0, (__mmask8)live,
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(best_i)));
    _mm512_mask_storeu_epi64(ind + x0 + 8, (__mmask8)(live >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(best_i, 1)));
  }
}

void loom_pool_avg_row_avx512(const float *in, const int64_t *rows, int64_t nrows, int64_t iw,
                              int64_t sw, int64_t kw, int64_t s, int64_t p, int64_t ow,
                              const int64_t *div, float *out) {
  const int loads = pool_loads(sw, s);
  const __m512i lanes_s = pool_lanes_s(s);
  for (int64_t x0 = 0; x0 < ow; x0 += 16) {
    const pool_cols pc = pool_cols_at(x0, ow, s, p);
    const __mmask16 live = pc.live;
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t r = 0; r < nrows; ++r) {
      const float *row = in + rows[r];
      for (int64_t c = 0; c < kw; ++c) {
        __m512i col, off;
        const __mmask16 in_row = pool_tap(&pc, c, iw, sw, &col, &off);
        const __m512 v = loads ? pool_row_taps(row, x0 * s - p + c, iw, lanes_s)
                               : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in_row, off, row, 4);
        /* the taps inside the image, as the scalar loop visits them */
        lo = _mm512_mask_add_pd(lo, (__mmask8)in_row, lo,
                                _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        hi = _mm512_mask_add_pd(hi, (__mmask8)(in_row >> 8), hi,
                                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                    _mm512_castps_pd(v), 1))));
      }
    }
    const __mmask8 l0 = (__mmask8)live, l1 = (__mmask8)(live >> 8);
    const __m512i d0 = _mm512_maskz_loadu_epi64(l0, div + x0);
    const __m512i d1 = _mm512_maskz_loadu_epi64(l1, div + x0 + 8);
    const __m512d nan = _mm512_set1_pd(NAN);
    lo = _mm512_mask_div_pd(nan, _mm512_test_epi64_mask(d0, d0), lo, _mm512_cvtepi64_pd(d0));
    hi = _mm512_mask_div_pd(nan, _mm512_test_epi64_mask(d1, d1), hi, _mm512_cvtepi64_pd(d1));
    _mm256_mask_storeu_ps(out + x0, l0, _mm512_cvtpd_ps(lo));
    _mm256_mask_storeu_ps(out + x0 + 8, l1, _mm512_cvtpd_ps(hi));
  }
}
