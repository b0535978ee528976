/* kernels/nn/pool_internal.h — what pool.c shares with its AVX-512 part
 * and with the channels-last kernels (pool_nhwc.c). */
#ifndef LOOM_KERNELS_POOL_INTERNAL_H
#define LOOM_KERNELS_POOL_INTERNAL_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/pool.h"
#include "loom/status.h"

/* The launch's scalars (loom/kernels/pool.h). */
typedef struct loom_pool_params {
  int64_t mode, k[3], s[3], p[3], d[3], include_pad, divisor;
} loom_pool_params;

static inline int loom_pool_params_read(const loom_kernel_args *args, loom_pool_params *q) {
  if (args->num_scalars < LOOM_POOL_NUM_SCALARS) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_scalar *s = args->scalars;
  q->mode = s[0].i;
  for (int i = 0; i < 3; ++i) {
    q->k[i] = s[1 + i].i, q->s[i] = s[4 + i].i;
    q->p[i] = s[7 + i].i, q->d[i] = s[10 + i].i;
  }
  q->include_pad = s[13].i, q->divisor = s[14].i;
  if (q->mode < LOOM_POOL_MAX || q->mode > LOOM_POOL_ADAPTIVE_MAX)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int adaptive = q->mode == LOOM_POOL_ADAPTIVE_AVG || q->mode == LOOM_POOL_ADAPTIVE_MAX;
  if (!adaptive)
    for (int i = 0; i < 3; ++i)
      if (q->k[i] < 1 || q->s[i] < 1 || q->d[i] < 1 || q->p[i] < 0)
        return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

/* The window of output o along `axis` (0: depth, 1: rows, 2: columns):
 * input taps start + t*step for t < count, all inside [0, n_in); pad_size
 * is its extent counting the padding, for count_include_pad. */
typedef struct loom_pool_window {
  int64_t start, step, count, pad_size;
} loom_pool_window;

static inline loom_pool_window loom_pool_window_of(const loom_pool_params *q, int axis,
                                                   int64_t o, int64_t n_out, int64_t n_in) {
  loom_pool_window w = {.step = 1};
  if (q->mode == LOOM_POOL_ADAPTIVE_AVG || q->mode == LOOM_POOL_ADAPTIVE_MAX) {
    int64_t a = (o * n_in) / n_out, b = ((o + 1) * n_in + n_out - 1) / n_out;
    w.start = a, w.count = b - a, w.pad_size = b - a;
    return w;
  }
  if (q->mode == LOOM_POOL_AVG) {
    int64_t a = o * q->s[axis] - q->p[axis];
    int64_t b = a + q->k[axis];
    if (b > n_in + q->p[axis]) b = n_in + q->p[axis];
    w.pad_size = b - a;
    if (a < 0) a = 0;
    if (b > n_in) b = n_in;
    w.start = a, w.count = b > a ? b - a : 0;
    return w;
  }
  /* max: dilated taps, skipping those in the padding */
  int64_t a = o * q->s[axis] - q->p[axis];
  int64_t t0 = 0, t1 = q->k[axis];
  while (t0 < t1 && a + t0 * q->d[axis] < 0) ++t0;
  while (t1 > t0 && a + (t1 - 1) * q->d[axis] >= n_in) --t1;
  w.start = a + t0 * q->d[axis], w.step = q->d[axis], w.count = t1 - t0;
  return w;
}

static inline int64_t loom_pool_divisor(const loom_pool_params *q, const loom_pool_window *w) {
  if (q->mode == LOOM_POOL_AVG && q->divisor) return q->divisor;
  if (q->mode == LOOM_POOL_AVG && q->include_pad)
    return w[0].pad_size * w[1].pad_size * w[2].pad_size;
  return w[0].count * w[1].count * w[2].count;
}

/* The outputs along `axis` whose windows may hold input position v: [*lo,
 * *hi] (empty when *lo > *hi), every output whose window holds v among
 * them (a max's dilated window may skip v: its index says). */
static inline void loom_pool_cover(const loom_pool_params *q, int axis, int64_t v, int64_t n_out,
                                   int64_t n_in, int64_t *lo, int64_t *hi) {
  int64_t a, b;
  if (q->mode == LOOM_POOL_ADAPTIVE_AVG || q->mode == LOOM_POOL_ADAPTIVE_MAX) {
    a = v * n_out / n_in, b = ((v + 1) * n_out - 1) / n_in;
  } else {
    const int64_t reach = q->mode == LOOM_POOL_AVG ? q->k[axis] - 1 : (q->k[axis] - 1) * q->d[axis];
    const int64_t first = v + q->p[axis] - reach, s = q->s[axis];
    a = first <= 0 ? 0 : (first + s - 1) / s, b = (v + q->p[axis]) / s;
  }
  *lo = a < 0 ? 0 : a, *hi = b >= n_out ? n_out - 1 : b;
}

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

/* The channels-last loops (pool_nhwc_loops.inc), over the c channels of
 * one position, unit-stride, float32, built for the baseline and (suffix
 * _avx512) for AVX-512 CPUs; the same operations per channel in the same
 * order either way.
 *
 * max_first / max_taps: out and ind take the first tap's values (at in)
 * and index, then each of n taps at in + off[t] with index idx[t]
 * replaces the best so far where it is larger or NaN.
 * avg_taps: acc[j] += (double)in[off[t] + j] for t < n in order.
 * max_grad: gi[j] += go[j] where ind[j] == target (gi never -0.0).
 * avg_grad: gi[j] = (float)((double)gi[j] + (double)go[j] / div). */
#define LOOM_POOL_NHWC_LOOPS(sfx)                                                              \
  void loom_pool_nhwc_max_first##sfx(const float *in, int64_t index, int64_t c, float *out,   \
                                     int64_t *ind);                                           \
  void loom_pool_nhwc_max_taps##sfx(const float *in, const int64_t *off, const int64_t *idx,  \
                                    int64_t n, int64_t c, float *out, int64_t *ind);          \
  void loom_pool_nhwc_avg_taps##sfx(const float *in, const int64_t *off, int64_t n, int64_t c, \
                                    double *acc);                                             \
  void loom_pool_nhwc_max_grad##sfx(const float *go, const int64_t *ind, int64_t target,      \
                                    int64_t c, float *gi);                                    \
  void loom_pool_nhwc_avg_grad##sfx(const float *go, double div, int64_t c, float *gi);
LOOM_POOL_NHWC_LOOPS(_generic)
LOOM_POOL_NHWC_LOOPS(_avx512)
#undef LOOM_POOL_NHWC_LOOPS

#endif /* LOOM_KERNELS_POOL_INTERNAL_H */
