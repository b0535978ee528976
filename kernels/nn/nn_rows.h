/* kernels/nn/nn_rows.h — vectorizable fp32 primitives over contiguous rows, the
 * fast path of softmax and layer norm. Sums use 16 fixed lanes combined in a
 * fixed order, so a result depends on the row alone, never on threads.
 * Internal header: one generic build and one AVX-512 build of the same
 * source, picked once per call by loom_nn_rows(). */
#ifndef LOOM_KERNELS_NN_ROWS_H
#define LOOM_KERNELS_NN_ROWS_H

#include <stdint.h>

typedef struct loom_nn_rows_ops {
  /* max of x[0..n), NaN if any element is NaN; -inf for n == 0 */
  float (*max)(const float *x, int64_t n);
  /* sum of exp(x[i] - m), storing the terms in y (which may be x).
   * m must be finite. */
  float (*exp_sum)(const float *x, int64_t n, float m, float *y);
  /* y[i] = x[i] * a + b */
  void (*affine)(const float *x, int64_t n, float a, float b, float *y);
  /* sum of x[i], of x[i] * y[i] */
  float (*sum)(const float *x, int64_t n);
  float (*dot)(const float *x, const float *y, int64_t n);
  /* sum of (x[i] - c)^2 */
  float (*sq_dev)(const float *x, int64_t n, float c);
  /* softmax gradient: gi[i] = y[i] * (g[i] - dot) */
  void (*softmax_grad)(const float *g, const float *y, int64_t n, float dot,
                       float *gi);
  /* log-softmax gradient: gi[i] = g[i] - exp(y[i]) * sum; y <= 0 */
  void (*log_softmax_grad)(const float *g, const float *y, int64_t n,
                           float sum, float *gi);
  /* normalisation: y[i] = (x[i] - mean) * rstd * w[i] + b[i]; w and b may
   * be NULL (1 and 0) */
  void (*norm_apply)(const float *x, int64_t n, float mean, float rstd,
                     const float *w, const float *b, float *y);
  /* layer-norm gradient sums over a row with h = dy * w (w may be NULL):
   * out[0] = sum(h), out[1] = sum(h * (x - mean) * rstd) */
  void (*norm_grad_sums)(const float *dy, const float *x, const float *w,
                         int64_t n, float mean, float rstd, float out[2]);
  /* dx[i] = rstd * (h[i] - a - (x[i] - mean) * rstd * c) */
  void (*norm_grad_apply)(const float *dy, const float *x, const float *w,
                          int64_t n, float mean, float rstd, float a, float c,
                          float *dx);
  /* norm_grad_sums, and in the same pass norm_param_acc's sums (acc_w
   * required, acc_b may be NULL) */
  void (*norm_grad_sums_acc)(const float *dy, const float *x, const float *w, int64_t n,
                             float mean, float rstd, float out[2], float *acc_b, float *acc_w);
  /* one row's share of the layer-norm parameter gradients, per column
   * i < n, in float: acc_b[i] += dy[i] (acc_b may be NULL), acc_w[i] +=
   * dy[i] * ((x[i] - mean) * rstd); the accumulators do not overlap the row */
  void (*norm_param_acc)(const float *dy, const float *x, int64_t n, float mean, float rstd,
                         float *acc_b, float *acc_w);
  /* layer-norm forward of rows [0, rows) (rows <= LOOM_NN_NORM_ROWS), row r
   * at x + r * n and y + r * n: mean[r] = sum(x_r) / n (0 when rms), rstd[r]
   * = 1 / sqrt(sq_dev(x_r, mean[r]) / n + eps), y_r = norm_apply(x_r): each
   * row's value is the one those primitives give it, whatever the rows
   * beside it; the rows' sums run side by side */
  void (*norm_forward)(const float *x, int64_t rows, int64_t n, int rms, float eps,
                       const float *w, const float *b, float *y, float *mean, float *rstd);
} loom_nn_rows_ops;

#define LOOM_NN_NORM_ROWS 16

/* The best build for this CPU. */
const loom_nn_rows_ops *loom_nn_rows(void);

#endif /* LOOM_KERNELS_NN_ROWS_H */
