/* Group norm over contiguous x of shape [N, C, HxW]: row (n, g) is the
 * contiguous block of the C/G channels of group g in sample n. Built for
 * the baseline ISA and again by norm_group_avx512.c (LOOM_GN_ISA defined);
 * the entry points at the end pick the build once per call. No contraction:
 * both builds round alike. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/lanes.h"
#include "kernels/nn_util.h"
#include "kernels/norm.h"
#include "kernels/reduce.h"
#include "runtime/base/cpu.h"
#include "loom/status.h"

#ifdef LOOM_GN_ISA
#define GN_CAT2(a, b) a##b
#define GN_CAT(a, b) GN_CAT2(a, b)
#define GN_NAME(base) GN_CAT(base, LOOM_GN_ISA)
#else
#define GN_NAME(base) base
#endif

typedef struct gn_shape {
  int64_t n, c, hw, g, d; /* d: channels per group */
} gn_shape;

static int gn_shape_of(const loom_kernel_args *args, gn_shape *out) {
  if (args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  gn_shape s = {.n = args->scalars[0].i, .c = args->scalars[1].i,
                .hw = args->scalars[2].i, .g = args->scalars[3].i};
  if (s.g <= 0 || s.c % s.g != 0) return LOOM_ERROR_INVALID_ARGUMENT;
  s.d = s.c / s.g;
  *out = s;
  return LOOM_OK;
}

static inline double opt_load(const loom_tensor *t, int64_t i, double dflt) {
  return t->data ? loom_nn_load(t->data, t->dtype, i) : dflt;
}

/* Lanes of the double sums below: lane j takes positions j, j + 16, ...,
 * folded pairwise; enough independent additions to run at vector speed. */
#define GN_LANES 16

/* Mean and biased variance of n floats, in double: the sum by the
 * reduction's 64-lane kernel, the squared deviations in GN_LANES lanes. */
static void gn_moments_f32(const float *x, int64_t n, int avx512, double *mu, double *var) {
  const double sum = avx512 ? loom_reduce_sum_f32_avx512(x, n, 0) : loom_reduce_sum_f32(x, n, 0);
  const double m = n ? sum / (double)n : 0.0;
  double a[GN_LANES] = {0};
  int64_t i = 0;
  for (; i + GN_LANES <= n; i += GN_LANES)
    for (int j = 0; j < GN_LANES; ++j) {
      const double d = (double)x[i + j] - m;
      a[j] += d * d;
    }
  for (int j = 0; i < n; ++i, ++j) {
    const double d = (double)x[i] - m;
    a[j] += d * d;
  }
  *mu = m;
  *var = n ? loom_lanes16_fold_f64(a) / (double)n : 0.0;
}

int GN_NAME(loom_group_norm_forward_impl)(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  gn_shape s;
  if (args->num_tensors < 6 || args->num_scalars < 5 || gn_shape_of(args, &s))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *w = &args->tensors[1],
                    *b = &args->tensors[2], *y = &args->tensors[3],
                    *mean = &args->tensors[4], *rstd = &args->tensors[5];
  const double eps = args->scalars[4].f;
  const int64_t len = s.d * s.hw;
  /* float32 rows: moments by gn_moments_f32, elements read and written
   * in place; other dtypes element by element in one chain */
  const int f32 = x->dtype == LOOM_FLOAT32 && y->dtype == LOOM_FLOAT32;
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t base = row * len, g = row % s.g;
    const float *xr = f32 ? (const float *)x->data + base : NULL;
    float *yr = f32 ? (float *)y->data + base : NULL;
    double mu = 0.0, var = 0.0;
    if (f32) {
      gn_moments_f32(xr, len, avx512, &mu, &var);
    } else {
      for (int64_t i = 0; i < len; ++i) mu += loom_nn_load(x->data, x->dtype, base + i);
      mu = len ? mu / (double)len : 0.0;
      for (int64_t i = 0; i < len; ++i) {
        double dd = loom_nn_load(x->data, x->dtype, base + i) - mu;
        var += dd * dd;
      }
      var = len ? var / (double)len : 0.0;
    }
    const double rs = 1.0 / sqrt(var + eps);
    loom_nn_store(mean->data, mean->dtype, row, mu);
    loom_nn_store(rstd->data, rstd->dtype, row, rs);
    for (int64_t k = 0; k < s.d; ++k) {
      const int64_t c = g * s.d + k;
      const double scale = rs * opt_load(w, c, 1.0), shift = opt_load(b, c, 0.0);
      if (f32) {
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i)
          yr[i] = (float)(((double)xr[i] - mu) * scale + shift);
      } else {
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i)
          loom_nn_store(y->data, y->dtype, base + i,
                        (loom_nn_load(x->data, x->dtype, base + i) - mu) * scale + shift);
      }
    }
  }
  return LOOM_OK;
}

/* sg[j] += w dy[i], sgx[j] += w dy[i] (x[i] - mu) rs for i = j mod
 * GN_LANES over n floats: the sums of the backward in lanes. */
static void gn_sums_f32(const float *dy, const float *x, int64_t n, double w, double mu,
                        double rs, double sg[GN_LANES], double sgx[GN_LANES]) {
  int64_t i = 0;
  for (; i + GN_LANES <= n; i += GN_LANES)
    for (int j = 0; j < GN_LANES; ++j) {
      const double gv = (double)dy[i + j] * w;
      sg[j] += gv;
      sgx[j] += gv * ((double)x[i + j] - mu) * rs;
    }
  for (int j = 0; i < n; ++i, ++j) {
    const double gv = (double)dy[i] * w;
    sg[j] += gv;
    sgx[j] += gv * ((double)x[i] - mu) * rs;
  }
}

int GN_NAME(loom_group_norm_backward_input_impl)(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  gn_shape s;
  if (args->num_tensors < 6 || gn_shape_of(args, &s))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *mean = &args->tensors[2], *rstd = &args->tensors[3],
                    *w = &args->tensors[4], *dx = &args->tensors[5];
  const int64_t len = s.d * s.hw;
  if (dy->dtype == LOOM_FLOAT32 && x->dtype == LOOM_FLOAT32 && dx->dtype == LOOM_FLOAT32) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t base = row * len, g = row % s.g;
      const double mu = loom_nn_load(mean->data, mean->dtype, row);
      const double rs = loom_nn_load(rstd->data, rstd->dtype, row);
      const float *dyr = (const float *)dy->data + base, *xr = (const float *)x->data + base;
      float *dxr = (float *)dx->data + base;
      double sg[GN_LANES] = {0}, sgx[GN_LANES] = {0};
      for (int64_t k = 0; k < s.d; ++k)
        gn_sums_f32(dyr + k * s.hw, xr + k * s.hw, s.hw, opt_load(w, g * s.d + k, 1.0), mu, rs,
                    sg, sgx);
      const double a = len ? loom_lanes16_fold_f64(sg) / (double)len : 0.0;
      const double cc = len ? loom_lanes16_fold_f64(sgx) / (double)len : 0.0;
      for (int64_t k = 0; k < s.d; ++k) {
        const double wc = opt_load(w, g * s.d + k, 1.0);
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
          const double gv = (double)dyr[i] * wc, xh = ((double)xr[i] - mu) * rs;
          dxr[i] = (float)(rs * (gv - a - xh * cc));
        }
      }
    }
    return LOOM_OK;
  }
  for (int64_t row = begin; row < end; ++row) {
    const int64_t base = row * len, g = row % s.g;
    const double mu = loom_nn_load(mean->data, mean->dtype, row);
    const double rs = loom_nn_load(rstd->data, rstd->dtype, row);
    double sum_g = 0.0, sum_gx = 0.0; /* sum(dy*w), sum(dy*w*xhat) */
    for (int64_t k = 0; k < s.d; ++k) {
      const double wc = opt_load(w, g * s.d + k, 1.0);
      for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
        double gv = loom_nn_load(dy->data, dy->dtype, base + i) * wc;
        sum_g += gv;
        sum_gx += gv * (loom_nn_load(x->data, x->dtype, base + i) - mu) * rs;
      }
    }
    const double a = len ? sum_g / (double)len : 0.0;
    const double cc = len ? sum_gx / (double)len : 0.0;
    for (int64_t k = 0; k < s.d; ++k) {
      const double wc = opt_load(w, g * s.d + k, 1.0);
      for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
        double gv = loom_nn_load(dy->data, dy->dtype, base + i) * wc;
        double xh = (loom_nn_load(x->data, x->dtype, base + i) - mu) * rs;
        loom_nn_store(dx->data, dx->dtype, base + i, rs * (gv - a - xh * cc));
      }
    }
  }
  return LOOM_OK;
}

int GN_NAME(loom_group_norm_backward_params_impl)(const loom_kernel_args *args,
                                    int64_t begin, int64_t end) {
  gn_shape s;
  if (args->num_tensors < 6 || gn_shape_of(args, &s))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *mean = &args->tensors[2], *rstd = &args->tensors[3],
                    *dw = &args->tensors[4], *db = &args->tensors[5];
  if (dy->dtype == LOOM_FLOAT32 && x->dtype == LOOM_FLOAT32) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t g = c / s.d;
      double sb[GN_LANES] = {0}, sw[GN_LANES] = {0};
      for (int64_t n = 0; n < s.n; ++n) {
        const int64_t row = n * s.g + g, base = (n * s.c + c) * s.hw;
        gn_sums_f32((const float *)dy->data + base, (const float *)x->data + base, s.hw, 1.0,
                    loom_nn_load(mean->data, mean->dtype, row),
                    loom_nn_load(rstd->data, rstd->dtype, row), sb, sw);
      }
      if (dw->data) loom_nn_store(dw->data, dw->dtype, c, loom_lanes16_fold_f64(sw));
      if (db->data) loom_nn_store(db->data, db->dtype, c, loom_lanes16_fold_f64(sb));
    }
    return LOOM_OK;
  }
  for (int64_t c = begin; c < end; ++c) {
    const int64_t g = c / s.d;
    double acc_w = 0.0, acc_b = 0.0;
    for (int64_t n = 0; n < s.n; ++n) {
      const int64_t row = n * s.g + g, base = (n * s.c + c) * s.hw;
      const double mu = loom_nn_load(mean->data, mean->dtype, row);
      const double rs = loom_nn_load(rstd->data, rstd->dtype, row);
      for (int64_t i = 0; i < s.hw; ++i) {
        double gv = loom_nn_load(dy->data, dy->dtype, base + i);
        acc_b += gv;
        acc_w += gv * (loom_nn_load(x->data, x->dtype, base + i) - mu) * rs;
      }
    }
    if (dw->data) loom_nn_store(dw->data, dw->dtype, c, acc_w);
    if (db->data) loom_nn_store(db->data, db->dtype, c, acc_b);
  }
  return LOOM_OK;
}

#ifndef LOOM_GN_ISA
int loom_group_norm_forward_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_backward_input_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_backward_params_impl_avx512(const loom_kernel_args *, int64_t, int64_t);

static int gn_avx512(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

int loom_group_norm_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return gn_avx512() ? loom_group_norm_forward_impl_avx512(args, begin, end)
                     : loom_group_norm_forward_impl(args, begin, end);
}

int loom_group_norm_backward_input(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return gn_avx512() ? loom_group_norm_backward_input_impl_avx512(args, begin, end)
                     : loom_group_norm_backward_input_impl(args, begin, end);
}

int loom_group_norm_backward_params(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return gn_avx512() ? loom_group_norm_backward_params_impl_avx512(args, begin, end)
                     : loom_group_norm_backward_params_impl(args, begin, end);
}
#endif
