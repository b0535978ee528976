/* Contiguous sums for the reduction kernel: 64 interleaved double lanes
 * (lane l takes elements l, l + 64, ...), folded pairwise at the end, so the
 * result depends only on the data and its length. Sixty-four lanes keep
 * eight independent vector additions in flight, enough to run at cache
 * speed. Built as is for the baseline ISA and included by
 * reduce_sum_avx512.c with LOOM_REDUCE_ISA defined, where the lanes are
 * eight AVX-512 registers added in the same order. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/base/dtype.h"
#include "kernels/base/lanes.h"
#include "kernels/pointwise/pointwise_dexp.h"
#include "kernels/reduce/reduce.h"

#ifdef LOOM_REDUCE_ISA
#include <immintrin.h>
#define RS_CAT2(a, b) a##b
#define RS_CAT(a, b) RS_CAT2(a, b)
#define RS_NAME(base) RS_CAT(base, LOOM_REDUCE_ISA)
#else
#define RS_NAME(base) base
#endif

#define LANES 64
/* Elements the sum prefetches ahead: one stream per core does not keep
 * enough lines in flight on its own. */
#define RS_AHEAD (8192 / (int)sizeof(x[0]))
/* Every cache line of the block of LANES elements at p. */
#define RS_PREFETCH(p)                                                      \
  for (int l = 0; l < LANES * (int)sizeof(*(p)); l += 64)                   \
  __builtin_prefetch((const char *)(p) + l)

/* Contiguous float32 sums (not of squares) take whole blocks of
 * RS_FBLOCK elements in 64 float lanes first, each lane's 16 terms added
 * in float and the lane's partial then added to its double lane: float
 * additions read twice as many elements per instruction as widening ones.
 * A block whose partials are not all finite (an overflow, or an inf or NaN
 * among its elements) is added again in double lanes instead, so a sum
 * that fits in double never overflows in a partial. */
#define RS_FBLOCK 1024

/* The lanes' tail (elements past the last full block) and fold. */
#define RS_FINISH(x, i, n, sq, acc)                        \
  do {                                                     \
    for (int j = 0; i < n; ++i, ++j) {                     \
      double v = (double)x[i];                             \
      acc[j] += sq ? v * v : v;                            \
    }                                                      \
    return loom_lanes_fold_f64(acc, LANES);                \
  } while (0)

#ifdef LOOM_REDUCE_ISA
/* Eight vectors of eight double lanes from 64 elements at p. */
static inline void rs_widen_f32(const float *p, __m512d v[8]) {
  for (int r = 0; r < 8; ++r) v[r] = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8 * r));
}
static inline void rs_widen_f64(const double *p, __m512d v[8]) {
  for (int r = 0; r < 8; ++r) v[r] = _mm512_loadu_pd(p + 8 * r);
}
/* The lanes of vector r that the tail's t < 64 elements fill. */
static inline __mmask8 rs_tail_mask(int64_t t, int r) {
  const int64_t k = t - 8 * r;
  return k >= 8 ? (__mmask8)0xff : k <= 0 ? 0 : (__mmask8)((1u << k) - 1u);
}
/* The masked lanes of eight vectors from the tail's t < 64 elements at p. */
static inline void rs_widen_tail_f32(const float *p, int64_t t, __m512d v[8], __mmask8 m[8]) {
  for (int r = 0; r < 8; ++r) {
    m[r] = rs_tail_mask(t, r);
    v[r] = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m[r], p + 8 * r));
  }
}
static inline void rs_widen_tail_f64(const double *p, int64_t t, __m512d v[8], __mmask8 m[8]) {
  for (int r = 0; r < 8; ++r) {
    m[r] = rs_tail_mask(t, r);
    v[r] = _mm512_maskz_loadu_pd(m[r], p + 8 * r);
  }
}

/* loom_lanes_fold_f64 of the 64 lanes held as a[r] lane q = lane 8r + q:
 * the tree's first three levels add whole registers, the last three
 * lanes within one, in the same pairs. */
static inline double rs_fold8(__m512d a0, __m512d a1, __m512d a2, __m512d a3, __m512d a4,
                              __m512d a5, __m512d a6, __m512d a7) {
  a0 = _mm512_add_pd(a0, a4), a1 = _mm512_add_pd(a1, a5);
  a2 = _mm512_add_pd(a2, a6), a3 = _mm512_add_pd(a3, a7);
  a0 = _mm512_add_pd(a0, a2), a1 = _mm512_add_pd(a1, a3);
  a0 = _mm512_add_pd(a0, a1);
  const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(a0), _mm512_extractf64x4_pd(a0, 1));
  const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}
static inline double rs_fold(const __m512d a[8]) {
  return rs_fold8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}

/* The whole RS_FBLOCK blocks at the start of x[0, n) into the lanes a;
 * returns the elements taken. */
static inline int64_t rs_fblocks_f32(const float *x, int64_t n, __m512d a[8]) {
  int64_t i = 0;
  for (; i + RS_FBLOCK <= n; i += RS_FBLOCK) {
    __m512 f[4];
    for (int r = 0; r < 4; ++r) f[r] = _mm512_setzero_ps();
    for (int64_t k = i; k < i + RS_FBLOCK; k += LANES) {
      RS_PREFETCH(x + k + RS_AHEAD);
      for (int r = 0; r < 4; ++r) f[r] = _mm512_add_ps(f[r], _mm512_loadu_ps(x + k + 16 * r));
    }
    __mmask16 bad = 0; /* lanes that are inf or NaN */
    for (int r = 0; r < 4; ++r) bad |= _mm512_fpclass_ps_mask(f[r], 0x99);
    if (!bad) {
      for (int r = 0; r < 4; ++r) {
        a[2 * r] = _mm512_add_pd(a[2 * r], _mm512_cvtps_pd(_mm512_castps512_ps256(f[r])));
        a[2 * r + 1] = _mm512_add_pd(a[2 * r + 1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(f[r], 1)));
      }
    } else {
      __m512d v[8];
      for (int64_t k = i; k < i + RS_FBLOCK; k += LANES) {
        rs_widen_f32(x + k, v);
        for (int r = 0; r < 8; ++r) a[r] = _mm512_add_pd(a[r], v[r]);
      }
    }
  }
  return i;
}
static inline int64_t rs_fblocks_f64(const double *x, int64_t n, __m512d a[8]) {
  (void)x, (void)n, (void)a;
  return 0;
}

#define RS_DEFINE(NAME, T, WIDEN, WIDEN_TAIL, FBLOCKS)                    \
  double NAME(const T *x, int64_t n, int sq) {                            \
    __m512d a[8], v[8];                                                   \
    __mmask8 m[8];                                                        \
    for (int r = 0; r < 8; ++r) a[r] = _mm512_setzero_pd();               \
    int64_t i = 0;                                                        \
    if (sq) {                                                             \
      for (; i + LANES <= n; i += LANES) {                                \
        WIDEN(x + i, v);                                                  \
        for (int r = 0; r < 8; ++r)                                       \
          a[r] = _mm512_add_pd(a[r], _mm512_mul_pd(v[r], v[r]));          \
      }                                                                   \
    } else {                                                              \
      i = FBLOCKS(x, n, a);                                               \
      for (; i + LANES <= n; i += LANES) {                                \
        RS_PREFETCH(x + i + RS_AHEAD);                                    \
        WIDEN(x + i, v);                                                  \
        for (int r = 0; r < 8; ++r) a[r] = _mm512_add_pd(a[r], v[r]);    \
      }                                                                   \
    }                                                                     \
    if (i < n) { /* the tail into its lanes only (-0.0 stays -0.0) */    \
      WIDEN_TAIL(x + i, n - i, v, m);                                     \
      for (int r = 0; r < 8; ++r)                                         \
        a[r] = _mm512_mask_add_pd(a[r], m[r], a[r],                       \
                                  sq ? _mm512_mul_pd(v[r], v[r]) : v[r]); \
    }                                                                     \
    return rs_fold(a);                                                    \
  }
RS_DEFINE(RS_NAME(loom_reduce_sum_f32), float, rs_widen_f32, rs_widen_tail_f32, rs_fblocks_f32)
RS_DEFINE(RS_NAME(loom_reduce_sum_f64), double, rs_widen_f64, rs_widen_tail_f64, rs_fblocks_f64)

/* loom_reduce_sum_f32(x, n, 0) for n < RS_FBLOCK, the same bits: its
 * 64-element blocks and tail in the same lanes, folded in its tree, held
 * in registers; the general sum's setup costs more than a row this short. */
/* Lane vector r of the block at x + i: whole, or the tail's t < 64 elements
 * masked (lanes past them stay as they are). */
#define RS_SHORT_LANES(r) (_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8 * (r))))
#define RS_SHORT_TAIL(acc, r)                                                           \
  do {                                                                                  \
    const __mmask8 m_ = rs_tail_mask(n - i, r);                                          \
    acc = _mm512_mask_add_pd(acc, m_, acc,                                              \
                             _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m_, x + i + 8 * (r)))); \
  } while (0)
double RS_NAME(loom_reduce_sum_short_f32)(const float *x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    a0 = _mm512_add_pd(a0, RS_SHORT_LANES(0)), a1 = _mm512_add_pd(a1, RS_SHORT_LANES(1));
    a2 = _mm512_add_pd(a2, RS_SHORT_LANES(2)), a3 = _mm512_add_pd(a3, RS_SHORT_LANES(3));
    a4 = _mm512_add_pd(a4, RS_SHORT_LANES(4)), a5 = _mm512_add_pd(a5, RS_SHORT_LANES(5));
    a6 = _mm512_add_pd(a6, RS_SHORT_LANES(6)), a7 = _mm512_add_pd(a7, RS_SHORT_LANES(7));
  }
  if (i < n) {
    RS_SHORT_TAIL(a0, 0); RS_SHORT_TAIL(a1, 1); RS_SHORT_TAIL(a2, 2); RS_SHORT_TAIL(a3, 3);
    RS_SHORT_TAIL(a4, 4); RS_SHORT_TAIL(a5, 5); RS_SHORT_TAIL(a6, 6); RS_SHORT_TAIL(a7, 7);
  }
  return rs_fold8(a0, a1, a2, a3, a4, a5, a6, a7);
}
#undef RS_SHORT_LANES
#undef RS_SHORT_TAIL
#else
/* rs_fblocks_f32 of the AVX-512 build, lane for lane. */
static int64_t rs_fblocks_f32(const float *x, int64_t n, double *acc) {
  int64_t i = 0;
  for (; i + RS_FBLOCK <= n; i += RS_FBLOCK) {
    float f[LANES] = {0};
    for (int64_t k = i; k < i + RS_FBLOCK; k += LANES) {
      RS_PREFETCH(x + k + RS_AHEAD);
      for (int j = 0; j < LANES; ++j) f[j] += x[k + j];
    }
    int finite = 1;
    for (int j = 0; j < LANES; ++j) finite &= isfinite(f[j]) != 0;
    if (finite) {
      for (int j = 0; j < LANES; ++j) acc[j] += (double)f[j];
    } else {
      for (int64_t k = i; k < i + RS_FBLOCK; k += LANES)
        for (int j = 0; j < LANES; ++j) acc[j] += (double)x[k + j];
    }
  }
  return i;
}
static int64_t rs_fblocks_f64(const double *x, int64_t n, double *acc) {
  (void)x, (void)n, (void)acc;
  return 0;
}

#define RS_DEFINE(NAME, T, FBLOCKS)                                 \
  double NAME(const T *x, int64_t n, int sq) {                      \
    double acc[LANES] = {0};                                        \
    int64_t i = 0;                                                  \
    if (sq) {                                                       \
      for (; i + LANES <= n; i += LANES)                            \
        for (int j = 0; j < LANES; ++j) {                           \
          double v = (double)x[i + j];                              \
          acc[j] += v * v;                                          \
        }                                                           \
    } else {                                                        \
      i = FBLOCKS(x, n, acc);                                       \
      for (; i + LANES <= n; i += LANES) {                          \
        RS_PREFETCH(x + i + RS_AHEAD);                              \
        for (int j = 0; j < LANES; ++j) acc[j] += (double)x[i + j]; \
      }                                                             \
    }                                                               \
    RS_FINISH(x, i, n, sq, acc);                                    \
  }
RS_DEFINE(RS_NAME(loom_reduce_sum_f32), float, rs_fblocks_f32)
RS_DEFINE(RS_NAME(loom_reduce_sum_f64), double, rs_fblocks_f64)

double RS_NAME(loom_reduce_sum_short_f32)(const float *x, int64_t n) {
  return RS_NAME(loom_reduce_sum_f32)(x, n, 0);
}
#endif

/* The sum of e^(x[i] - r) for x[i] <= r finite (r their max): the terms
 * in double arithmetic that vectorizes (kernels/pointwise/pointwise_dexp.h), those
 * below e^-110 taken as 0 (under the last bit of a sum that holds the
 * max's 1), added 256 at a time in the lanes of the contiguous sum. */
#define RS_EXP_SUM(NAME, T)                                        \
  double NAME(const T *x, int64_t n, double r) {                   \
    double term[256], sum = 0.0;                                   \
    for (int64_t i0 = 0; i0 < n; i0 += 256) {                      \
      const int64_t m = n - i0 < 256 ? n - i0 : 256;               \
      for (int64_t i = 0; i < m; ++i) {                            \
        const double t = (double)x[i0 + i] - r;                    \
        term[i] = t < -110.0 ? 0.0 : loom_dexp(t > 0.0 ? 0.0 : t); \
      }                                                            \
      sum += RS_NAME(loom_reduce_sum_f64)(term, m, 0);             \
    }                                                              \
    return sum;                                                    \
  }
RS_EXP_SUM(RS_NAME(loom_reduce_exp_sum_f64), double)
RS_EXP_SUM(RS_NAME(loom_reduce_exp_sum_f32), float)

/* Contiguous bfloat16 sums (sq: of squares, exact in float) in float32,
 * as PyTorch accumulates 16-bit floats: blocks of RS_BF16_BLOCK elements
 * in 64 float lanes (lane l takes elements l, l + 64, ...) folded
 * pairwise, each block's sum added in double, so a lane never holds more
 * than 64 terms. The AVX-512 build keeps the lanes in four registers and
 * adds in the same order. */
#define RS_BF16_BLOCK 4096
#ifdef LOOM_REDUCE_ISA
/* Sixteen bfloat16 at p widened to float (their bits are a float's top
 * half); the first t only, the rest 0. */
static inline __m512 rs_bf16x16(const uint16_t *p, int64_t t) {
  const __mmask16 m = t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << t) - 1u);
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
static float rs_bf16_block(const uint16_t *p, int64_t m, int sq) {
  __m512 a[4];
  for (int r = 0; r < 4; ++r) a[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < m; i += LANES)
    for (int r = 0; r < 4; ++r) {
      const int64_t t = m - i - 16 * r;
      if (t <= 0) break;
      const __m512 v = rs_bf16x16(p + i + 16 * r, t);
      a[r] = _mm512_add_ps(a[r], sq ? _mm512_mul_ps(v, v) : v);
    }
  a[0] = _mm512_add_ps(a[0], a[2]);
  a[1] = _mm512_add_ps(a[1], a[3]);
  a[0] = _mm512_add_ps(a[0], a[1]);
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a[0]),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[0]), 1)));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}
#else
static float rs_bf16_block(const uint16_t *p, int64_t m, int sq) {
  float acc[LANES] = {0};
  for (int64_t i = 0; i < m; ++i) {
    const float v = loom_bf16_to_f32(p[i]);
    acc[i % LANES] += sq ? v * v : v;
  }
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
#endif

double RS_NAME(loom_reduce_sum_bf16)(const uint16_t *x, int64_t n, int sq) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += RS_BF16_BLOCK)
    total += (double)rs_bf16_block(x + b, n - b < RS_BF16_BLOCK ? n - b : RS_BF16_BLOCK, sq);
  return total;
}

/* Contiguous products in double, lanes as the sums keep them: lane l
 * multiplies elements l, l + 64, ..., and the lanes fold pairwise. A
 * product has no -0.0 to keep apart from a lane's start (x * 1 is x), so
 * one loop serves both builds. */
#define RS_PROD(NAME, T)                                                      \
  double NAME(const T *x, int64_t n) {                                        \
    double acc[LANES];                                                        \
    for (int j = 0; j < LANES; ++j) acc[j] = 1.0;                             \
    int64_t i = 0;                                                            \
    for (; i + LANES <= n; i += LANES)                                        \
      for (int j = 0; j < LANES; ++j) acc[j] *= (double)x[i + j];             \
    for (int j = 0; i < n; ++i, ++j) acc[j] *= (double)x[i];                  \
    return loom_lanes_fold_mul_f64(acc, LANES);                               \
  }
RS_PROD(RS_NAME(loom_reduce_prod_f32), float)
RS_PROD(RS_NAME(loom_reduce_prod_f64), double)

/* acc[j] *= x[j] for j < n: one row of a column product, in double. */
void RS_NAME(loom_reduce_cols_prod_f32)(double *restrict acc, const float *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] *= (double)x[j];
}

void RS_NAME(loom_reduce_cols_prod_f64)(double *restrict acc, const double *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] *= x[j];
}

/* acc[j] += e^(x[j] - r[j]) for j < n, r[j] finite and at least every
 * x[j] of its column (a column's max; 0 for a column whose max is not
 * finite, whose result the caller takes from the max): the term as
 * loom_reduce_exp_sum_f64 forms it, NaN and terms below e^-110 as 0. */
void RS_NAME(loom_reduce_cols_exp_f32)(double *restrict acc, const float *restrict x,
                                       const double *restrict r, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const double t = (double)x[j] - r[j];
    const int zero = !(t >= -110.0);
    acc[j] += zero ? 0.0 : loom_dexp(zero ? -110.0 : (t > 0.0 ? 0.0 : t));
  }
}

/* acc[j] += x[j] for j < n: one row of a column sum, widened to double. */
void RS_NAME(loom_reduce_cols_f32)(double *restrict acc, const float *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += (double)x[j];
}

/* acc[j] += x[k * stride + j] for k < rows in order, j < n <= 64: a block
 * of a column sum's rows, each still widened and added as by
 * loom_reduce_cols_f32, with the sums in registers across the rows. */
void RS_NAME(loom_reduce_cols_rows_f32)(double *restrict acc, const float *restrict x,
                                        int64_t stride, int64_t rows, int64_t n) {
#ifdef LOOM_REDUCE_ISA
  __m512d a[8];
  __mmask8 m[8];
  for (int r = 0; r < 8; ++r) {
    const int64_t left = n - 8 * r;
    m[r] = left >= 8 ? (__mmask8)0xff : left <= 0 ? 0 : (__mmask8)((1u << left) - 1u);
    a[r] = _mm512_maskz_loadu_pd(m[r], acc + 8 * r);
  }
  const int lines = (int)((n * (int64_t)sizeof(float) + 63) / 64);
  if (n == 64) {
    /* a whole strip without masks: eight of them (one more than there are
     * mask registers) kept the sums in memory (1024 x 768 over dim 0: 57
     * against 69 us; 1024 x 256: 14 against 20) */
    for (int64_t k = 0; k < rows; ++k) {
      const float *row = x + k * stride;
      for (int l = 0; l <= lines; ++l) __builtin_prefetch((const char *)(row + 4 * stride) + 64 * l);
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r)
        a[r] = _mm512_add_pd(a[r], _mm512_cvtps_pd(_mm256_loadu_ps(row + 8 * r)));
    }
  }
  for (int64_t k = 0; k < rows && n != 64; ++k) {
    const float *row = x + k * stride;
    /* each row starts a new page, where the hardware's prefetch stops;
     * past the matrix's end the prefetches only cost their issue */
    for (int l = 0; l <= lines; ++l) __builtin_prefetch((const char *)(row + 4 * stride) + 64 * l);
    for (int r = 0; r < 8; ++r)
      if (m[r])
        a[r] = _mm512_add_pd(a[r], _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m[r], row + 8 * r)));
  }
  for (int r = 0; r < 8; ++r) _mm512_mask_storeu_pd(acc + 8 * r, m[r], a[r]);
#else
  for (int64_t k = 0; k < rows; ++k) RS_NAME(loom_reduce_cols_f32)(acc, x + k * stride, n);
#endif
}

void RS_NAME(loom_reduce_cols_bf16)(double *restrict acc, const uint16_t *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += (double)loom_bf16_to_f32(x[j]);
}

void RS_NAME(loom_reduce_cols_f64)(double *restrict acc, const double *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}

/* One row of a column max (max 1) or min: best[j] and idx[j] take x[j] and
 * k where x[j] is better, as rd_block_f decides it: a NaN wins and stays,
 * and equal values keep the earlier index. idx may be NULL. */
void RS_NAME(loom_reduce_cols_extreme_f32)(float *restrict best, int64_t *restrict idx,
                                           const float *restrict x, int64_t n, int64_t k,
                                           int max) {
  int64_t j = 0;
#ifdef LOOM_REDUCE_ISA
  const __m512i kv = _mm512_set1_epi64(k);
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(best + j);
    const __mmask16 better = max ? _mm512_cmp_ps_mask(v, b, _CMP_GT_OQ)
                                 : _mm512_cmp_ps_mask(v, b, _CMP_LT_OQ);
    const __mmask16 take = _mm512_cmp_ps_mask(b, b, _CMP_ORD_Q) &
                           (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | better);
    _mm512_storeu_ps(best + j, _mm512_mask_mov_ps(b, take, v));
    if (idx) {
      _mm512_mask_storeu_epi64(idx + j, (__mmask8)take, kv);
      _mm512_mask_storeu_epi64(idx + j + 8, (__mmask8)(take >> 8), kv);
    }
  }
#endif
  for (; j < n; ++j) {
    const float v = x[j], b = best[j];
    if (b == b && (v != v || (max ? v > b : v < b))) {
      best[j] = v;
      if (idx) idx[j] = k;
    }
  }
}

/* The value loom_reduce_extreme_f32 returns, without its index: running
 * extremes in lanes and a NaN flag, no choice of index per element. Where
 * a scan in order could return another value of the same size (the first
 * NaN, or the first of 0.0 and -0.0), that value is found by a scan. */
float RS_NAME(loom_reduce_extreme_value_f32)(const float *x, int64_t n, int max) {
  float m = x[0];
  int nan = 0;
  int64_t i = 0;
#ifdef LOOM_REDUCE_ISA
  if (n >= 32) {
    __m512 b0 = _mm512_set1_ps(x[0]), b1 = b0;
    __mmask16 un = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
      b0 = max ? _mm512_max_ps(b0, v0) : _mm512_min_ps(b0, v0);
      b1 = max ? _mm512_max_ps(b1, v1) : _mm512_min_ps(b1, v1);
      un |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q);
    }
    b0 = max ? _mm512_max_ps(b0, b1) : _mm512_min_ps(b0, b1);
    m = max ? _mm512_reduce_max_ps(b0) : _mm512_reduce_min_ps(b0);
    nan = un != 0;
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    m = (max ? v > m : v < m) ? v : m;
    nan |= v != v;
  }
  if (nan || m == 0.0f)
    for (i = 0; i < n; ++i)
      if (nan ? x[i] != x[i] : x[i] == 0.0f) return x[i];
  return m;
}

/* The max (max 1) or min of n > 0 contiguous floats and the index of its
 * first occurrence, as a scan in order finds them: a NaN wins and stays,
 * and equal values keep the earlier index. The AVX-512 build keeps 16
 * lanes, each such a scan of its own elements, and takes the lanes' best
 * with the smallest index. */
float RS_NAME(loom_reduce_extreme_f32)(const float *x, int64_t n, int max, int64_t *index) {
  float best = x[0];
  int64_t at = 0, j = 1;
#ifdef LOOM_REDUCE_ISA
  if (n >= 32) {
    __m512 b = _mm512_loadu_ps(x);
    __m512i bi = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i ji = bi;
    const __m512i step = _mm512_set1_epi32(16);
    /* 32-bit indices: the caller cuts runs below 2^31 elements */
    for (j = 16; j + 16 <= n; j += 16) {
      ji = _mm512_add_epi32(ji, step);
      const __m512 v = _mm512_loadu_ps(x + j);
      const __mmask16 better = max ? _mm512_cmp_ps_mask(v, b, _CMP_GT_OQ)
                                   : _mm512_cmp_ps_mask(v, b, _CMP_LT_OQ);
      const __mmask16 take = _mm512_cmp_ps_mask(b, b, _CMP_ORD_Q) &
                             (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | better);
      b = _mm512_mask_mov_ps(b, take, v);
      bi = _mm512_mask_mov_epi32(bi, take, ji);
    }
    float lb[16];
    int32_t li[16];
    _mm512_storeu_ps(lb, b);
    _mm512_storeu_si512(li, bi);
    best = lb[0];
    at = li[0];
    for (int l = 1; l < 16; ++l) {
      const float v = lb[l];
      const int nan_v = v != v, nan_b = best != best;
      const int win = nan_b ? (nan_v && li[l] < at)
                            : (nan_v || (max ? v > best : v < best) || (v == best && li[l] < at));
      if (win) {
        best = v;
        at = li[l];
      }
    }
  }
#endif
  /* the tail continues the scan in order */
  for (; j < n; ++j) {
    const float v = x[j];
    if (best == best && (v != v || (max ? v > best : v < best))) {
      best = v;
      at = j;
    }
  }
  *index = at;
  return best;
}

