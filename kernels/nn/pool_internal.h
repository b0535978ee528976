/* kernels/nn/pool_internal.h — what pool.c shares with its AVX-512 part. */
#ifndef LOOM_KERNELS_POOL_INTERNAL_H
#define LOOM_KERNELS_POOL_INTERNAL_H

#include <stdint.h>

/* One output row of a float32 max pooling, 16 columns at a time: output
 * column x takes the taps of rows rows[0..nrows) (element offsets of the
 * input rows in `in`, row r's index base idx[r], i.e. its (d * H + h) * W)
 * at columns x * s - p + c * dil for c < kw inside [0, iw), in that order;
 * a tap replaces the best so far if none is yet, if it is larger, or if it
 * is NaN. out and ind have unit column stride; the column offsets
 * (x * s - p + c * dil) * sw and the indices fit in 31 bits (AVX-512 CPUs
 * only). */
void loom_pool_max_row_avx512(const float *in, const int64_t *rows, const int64_t *idx,
                              int64_t nrows, int64_t iw, int64_t sw, int64_t kw, int64_t s,
                              int64_t p, int64_t dil, int64_t ow, float *out, int64_t *ind);

/* One output row of a float32 average pooling, 16 columns at a time:
 * column x sums, in double, the taps of rows rows[0..nrows) at columns
 * x * s - p + c for c < kw inside [0, iw), in that order, and stores
 * sum / div[x] (NaN where div[x] is 0) rounded to float. out has unit
 * column stride; the column offsets fit in 31 bits (AVX-512 CPUs only). */
void loom_pool_avg_row_avx512(const float *in, const int64_t *rows, int64_t nrows, int64_t iw,
                              int64_t sw, int64_t kw, int64_t s, int64_t p, int64_t ow,
                              const int64_t *div, float *out);

#endif /* LOOM_KERNELS_POOL_INTERNAL_H */
