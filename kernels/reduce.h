/* kernels/reduce.h — reductions over trailing dims, with a fixed summation
 * order so that results never depend on the thread count.
 *
 * loom_kernel_reduce:
 *   tensors[0]  out: the values (rank k; data NULL when not wanted)
 *   tensors[1]  in:  rank k + r; its first k dims have out's sizes, the last
 *               r dims are reduced (the caller permutes the reduced dims last)
 *   tensors[2]  second output or data NULL: int64 indices (max/min/arg*) or
 *               the mean (var/std with mean)
 *   tensors[3]  scratch for two-stage reductions: float64, contiguous,
 *               numel(out) * parts * LOOM_REDUCE_STATE_DOUBLES (stages 1, 2)
 *   scalars[0].i op (loom_reduce_op)  [1].i r  [2].f parameter (correction
 *               for var/std, p for norm)  [3].i parts per output
 *               [4].i stage: 0 reduce whole, 1 partials into scratch,
 *               2 combine scratch in order into the outputs
 * Stage 0 and 2: the range is numel(out). Stage 1: the range is
 * numel(out) * parts; part j of an output covers reduced elements
 * [j * part, (j + 1) * part) in row-major order, where part is
 * loom_reduce_part(count) of the count reduced into each output, and parts
 * must be ceil(count / part).
 * Every output is reduced by one call in a fixed order either way.
 * Float inputs accumulate in double, integral ones in int64 (wrapping). */
#ifndef LOOM_KERNELS_REDUCE_H
#define LOOM_KERNELS_REDUCE_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements per part when each output's `count` elements are reduced in
 * two stages: 64K, or a 32nd of count rounded up to 64K when that is more.
 * Every part starts a new stream, whose first lines come before the
 * prefetch runs ahead; long parts pay that less often (a sum of 16M
 * floats in parts of 512K: 31.2 against 28.9 GB/s in parts of 64K,
 * alternated in one process). Set by the shape alone. */
#define LOOM_REDUCE_PART_UNIT 65536
static inline int64_t loom_reduce_part(int64_t count) {
  const int64_t part = (count / 32 + LOOM_REDUCE_PART_UNIT - 1) / LOOM_REDUCE_PART_UNIT *
                       LOOM_REDUCE_PART_UNIT;
  return part > LOOM_REDUCE_PART_UNIT ? part : LOOM_REDUCE_PART_UNIT;
}
#define LOOM_REDUCE_STATE_DOUBLES 6

typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM, LOOM_REDUCE_NANSUM, LOOM_REDUCE_MEAN, LOOM_REDUCE_PROD,
  LOOM_REDUCE_MAX, LOOM_REDUCE_MIN, /* values and indices */
  LOOM_REDUCE_VAR, LOOM_REDUCE_STD, LOOM_REDUCE_NORM, LOOM_REDUCE_LOGSUMEXP,
  LOOM_REDUCE_ALL, LOOM_REDUCE_ANY,
  LOOM_REDUCE_OP_COUNT
} loom_reduce_op;

int loom_kernel_reduce(const loom_kernel_args *args, int64_t begin,
                       int64_t end);

/* Contiguous sums in double with 64 interleaved lanes (fixed order), per ISA;
 * sq selects the sum of squares. */
double loom_reduce_sum_f32(const float *x, int64_t n, int sq);
double loom_reduce_sum_f64(const double *x, int64_t n, int sq);
double loom_reduce_sum_f32_avx512(const float *x, int64_t n, int sq);
double loom_reduce_sum_f64_avx512(const double *x, int64_t n, int sq);
double loom_reduce_sum_bf16(const uint16_t *x, int64_t n, int sq);
double loom_reduce_sum_bf16_avx512(const uint16_t *x, int64_t n, int sq);
/* The sum of e^(x[i] - r) over finite x[i] <= r, r their max (fixed order). */
double loom_reduce_exp_sum_f64(const double *x, int64_t n, double r);
double loom_reduce_exp_sum_f64_avx512(const double *x, int64_t n, double r);
double loom_reduce_exp_sum_f32(const float *x, int64_t n, double r);
double loom_reduce_exp_sum_f32_avx512(const float *x, int64_t n, double r);
/* Contiguous products in double, 64 interleaved lanes folded pairwise. */
double loom_reduce_prod_f32(const float *x, int64_t n);
double loom_reduce_prod_f64(const double *x, int64_t n);
double loom_reduce_prod_f32_avx512(const float *x, int64_t n);
double loom_reduce_prod_f64_avx512(const double *x, int64_t n);
/* acc[j] *= x[j] for j < n (one row of a column product). */
void loom_reduce_cols_prod_f32(double *acc, const float *x, int64_t n);
void loom_reduce_cols_prod_f64(double *acc, const double *x, int64_t n);
void loom_reduce_cols_prod_f32_avx512(double *acc, const float *x, int64_t n);
void loom_reduce_cols_prod_f64_avx512(double *acc, const double *x, int64_t n);
/* acc[j] += e^(x[j] - r[j]) (one row of a column logsumexp; r[j] finite,
 * the column's max or 0; NaN and terms below e^-110 count 0). */
void loom_reduce_cols_exp_f32(double *acc, const float *x, const double *r, int64_t n);
void loom_reduce_cols_exp_f32_avx512(double *acc, const float *x, const double *r, int64_t n);
/* acc[j] += x[j] for j < n (one row of a column sum). */
void loom_reduce_cols_f32(double *acc, const float *x, int64_t n);
void loom_reduce_cols_f64(double *acc, const double *x, int64_t n);
void loom_reduce_cols_bf16(double *acc, const uint16_t *x, int64_t n);
void loom_reduce_cols_bf16_avx512(double *acc, const uint16_t *x, int64_t n);
void loom_reduce_cols_f32_avx512(double *acc, const float *x, int64_t n);
/* The same over rows k < `rows` at x + k * stride, in order, n <= 64. */
void loom_reduce_cols_rows_f32(double *acc, const float *x, int64_t stride, int64_t rows,
                               int64_t n);
void loom_reduce_cols_rows_f32_avx512(double *acc, const float *x, int64_t stride,
                                      int64_t rows, int64_t n);
void loom_reduce_cols_f64_avx512(double *acc, const double *x, int64_t n);
/* One row of a column max (max 1) or min over n float32 columns: best[j]
 * and idx[j] take x[j] and k where x[j] is better (a NaN wins and stays;
 * equal values keep the earlier index). idx may be NULL. */
void loom_reduce_cols_extreme_f32(float *best, int64_t *idx, const float *x, int64_t n,
                                  int64_t k, int max);
void loom_reduce_cols_extreme_f32_avx512(float *best, int64_t *idx, const float *x,
                                         int64_t n, int64_t k, int max);
/* The max (max 1) or min of n > 0 contiguous floats (n < 2^31), and in
 * *index the position of its first occurrence (a NaN wins and stays). */
float loom_reduce_extreme_f32(const float *x, int64_t n, int max, int64_t *index);
float loom_reduce_extreme_f32_avx512(const float *x, int64_t n, int max, int64_t *index);
/* The same value without its index. */
float loom_reduce_extreme_value_f32(const float *x, int64_t n, int max);
float loom_reduce_extreme_value_f32_avx512(const float *x, int64_t n, int max);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_REDUCE_H */
