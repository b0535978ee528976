/* Contiguous sums for the reduction kernel: 16 interleaved double lanes,
 * added in a fixed order at the end, so the result depends only on the data
 * and its length. Built as is for the baseline ISA and included by
 * reduce_sum_avx512.c with LOOM_REDUCE_ISA defined. */
#pragma GCC optimize("fp-contract=off")

#include "kernels/lanes.h"
#include "kernels/reduce.h"

#ifdef LOOM_REDUCE_ISA
#define RS_CAT2(a, b) a##b
#define RS_CAT(a, b) RS_CAT2(a, b)
#define RS_NAME(base) RS_CAT(base, LOOM_REDUCE_ISA)
#else
#define RS_NAME(base) base
#endif

#define LANES 16
/* Elements the sum prefetches ahead: one stream per core does not keep
 * enough lines in flight on its own. */
#define RS_AHEAD (8192 / (int)sizeof(x[0]))

#define RS_DEFINE(NAME, T)                                          \
  double NAME(const T *x, int64_t n, int sq) {                      \
    double acc[LANES] = {0};                                        \
    int64_t i = 0;                                                  \
    if (sq) {                                                       \
      for (; i + LANES <= n; i += LANES)                            \
        for (int j = 0; j < LANES; ++j) {                           \
          double v = (double)x[i + j];                              \
          acc[j] += v * v;                                          \
        }                                                           \
      for (int j = 0; i < n; ++i, ++j) {                            \
        double v = (double)x[i];                                    \
        acc[j] += v * v;                                            \
      }                                                             \
    } else {                                                        \
      for (; i + LANES <= n; i += LANES) {                          \
        __builtin_prefetch(x + i + RS_AHEAD);                       \
        for (int j = 0; j < LANES; ++j) acc[j] += (double)x[i + j]; \
      }                                                             \
      for (int j = 0; i < n; ++i, ++j) acc[j] += (double)x[i];      \
    }                                                               \
    return loom_lanes16_fold_f64(acc);                              \
  }

RS_DEFINE(RS_NAME(loom_reduce_sum_f32), float)
RS_DEFINE(RS_NAME(loom_reduce_sum_f64), double)

/* acc[j] += x[j] for j < n: one row of a column sum, widened to double. */
void RS_NAME(loom_reduce_cols_f32)(double *restrict acc, const float *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += (double)x[j];
}

void RS_NAME(loom_reduce_cols_f64)(double *restrict acc, const double *restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}
