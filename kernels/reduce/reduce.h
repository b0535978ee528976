/* kernels/reduce/reduce.h — the reduction kernels (contract and name in
 * loom/kernels/reduce.h), and the contiguous row and column loops that
 * they and the norm kernels share, per ISA. */
#ifndef LOOM_KERNELS_REDUCE_H
#define LOOM_KERNELS_REDUCE_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/reduce.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_reduce(const loom_kernel_args *args, int64_t begin,
                       int64_t end);

/* Contiguous sums in double with 64 interleaved lanes (fixed order), per ISA;
 * sq selects the sum of squares. */
double loom_reduce_sum_f32(const float *x, int64_t n, int sq);
double loom_reduce_sum_f64(const double *x, int64_t n, int sq);
double loom_reduce_sum_f32_avx512(const float *x, int64_t n, int sq);
double loom_reduce_sum_f64_avx512(const double *x, int64_t n, int sq);
/* loom_reduce_sum_f32(x, n, 0) for n < 1024, the same bits, cheaper */
double loom_reduce_sum_short_f32(const float *x, int64_t n);
double loom_reduce_sum_short_f32_avx512(const float *x, int64_t n);
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
