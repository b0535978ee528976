/* Group norm over contiguous x of shape [N, C, HxW]: row (n, g) is the
 * contiguous block of the C/G channels of group g in sample n. Built for
 * the baseline ISA and again by norm_group_avx512.c (LOOM_GN_ISA defined);
 * the entry points at the end pick the build once per call. No contraction:
 * both builds round alike. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/base/lanes.h"
#include "kernels/nn/nn_util.h"
#include "kernels/nn/norm.h"
#include "kernels/reduce/reduce.h"
#include "base/cpu.h"
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
  *mu = m;
  *var = n ? loom_lanes16_sqdev_f32(x, n, m) / (double)n : 0.0;
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

/* The sums of one channel's n floats in the backward, each in GN_LANES
 * lanes (i mod GN_LANES) folded: *sum_g = sum dy[i], *sum_gx = sum dy[i]
 * (x[i] - mu) rs. The AVX-512 build does the same operations on each lane
 * in two vectors, so both builds give the same bits. */
static void gn_sums_f32(const float *dy, const float *x, int64_t n, double mu, double rs,
                        double *sum_g, double *sum_gx) {
  double sg[GN_LANES] = {0}, sgx[GN_LANES] = {0};
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512d vm = _mm512_set1_pd(mu), vr = _mm512_set1_pd(rs);
  __m512d g0 = _mm512_setzero_pd(), g1 = _mm512_setzero_pd();
  __m512d q0 = _mm512_setzero_pd(), q1 = _mm512_setzero_pd();
  for (; i < n; i += GN_LANES) {
    __m512d d0, d1, x0, x1;
    __mmask8 k0, k1;
    loom_lanes16_load_pd(dy, i, n, &d0, &d1, &k0, &k1);
    loom_lanes16_load_pd(x, i, n, &x0, &x1, &k0, &k1);
    g0 = _mm512_mask_add_pd(g0, k0, g0, d0);
    g1 = _mm512_mask_add_pd(g1, k1, g1, d1);
    q0 = _mm512_mask_add_pd(q0, k0, q0, _mm512_mul_pd(_mm512_mul_pd(d0, _mm512_sub_pd(x0, vm)), vr));
    q1 = _mm512_mask_add_pd(q1, k1, q1, _mm512_mul_pd(_mm512_mul_pd(d1, _mm512_sub_pd(x1, vm)), vr));
  }
  _mm512_storeu_pd(sg, g0), _mm512_storeu_pd(sg + 8, g1);
  _mm512_storeu_pd(sgx, q0), _mm512_storeu_pd(sgx + 8, q1);
#else
  for (; i + GN_LANES <= n; i += GN_LANES)
    for (int j = 0; j < GN_LANES; ++j) {
      const double gv = (double)dy[i + j];
      sg[j] += gv;
      sgx[j] += gv * ((double)x[i + j] - mu) * rs;
    }
  for (int j = 0; i < n; ++i, ++j) {
    const double gv = (double)dy[i];
    sg[j] += gv;
    sgx[j] += gv * ((double)x[i] - mu) * rs;
  }
#endif
  *sum_g = loom_lanes16_fold_f64(sg);
  *sum_gx = loom_lanes16_fold_f64(sgx);
}

/* One pass over each row's channels gives their sums (kept for the
 * parameter gradients when asked); a second, dx. */
int GN_NAME(loom_group_norm_backward_input_impl)(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  gn_shape s;
  if (args->num_tensors < 8 || gn_shape_of(args, &s))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *mean = &args->tensors[2], *rstd = &args->tensors[3],
                    *w = &args->tensors[4], *dx = &args->tensors[5];
  double *sums_g = (double *)args->tensors[6].data, *sums_gx = (double *)args->tensors[7].data;
  if ((sums_g || sums_gx) &&
      (args->tensors[6].dtype != LOOM_FLOAT64 || args->tensors[7].dtype != LOOM_FLOAT64 ||
       !sums_g || !sums_gx))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t len = s.d * s.hw;
  const int f32 = dy->dtype == LOOM_FLOAT32 && x->dtype == LOOM_FLOAT32 &&
                  (!dx->data || dx->dtype == LOOM_FLOAT32);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t base = row * len, n = row / s.g, g = row % s.g;
    const double mu = loom_nn_load(mean->data, mean->dtype, row);
    const double rs = loom_nn_load(rstd->data, rstd->dtype, row);
    double sum_g = 0.0, sum_gx = 0.0; /* sum(dy*w), sum(dy*w*xhat) */
    for (int64_t k = 0; k < s.d; ++k) {
      const int64_t c = g * s.d + k;
      double pg = 0.0, pgx = 0.0;
      if (f32) {
        gn_sums_f32((const float *)dy->data + base + k * s.hw,
                    (const float *)x->data + base + k * s.hw, s.hw, mu, rs, &pg, &pgx);
      } else {
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
          const double gv = loom_nn_load(dy->data, dy->dtype, base + i);
          pg += gv;
          pgx += gv * (loom_nn_load(x->data, x->dtype, base + i) - mu) * rs;
        }
      }
      if (sums_g) sums_g[n * s.c + c] = pg, sums_gx[n * s.c + c] = pgx;
      const double wc = opt_load(w, c, 1.0);
      sum_g += wc * pg;
      sum_gx += wc * pgx;
    }
    if (!dx->data) continue;
    const double a = len ? sum_g / (double)len : 0.0;
    const double cc = len ? sum_gx / (double)len : 0.0;
    for (int64_t k = 0; k < s.d; ++k) {
      const double wc = opt_load(w, g * s.d + k, 1.0);
      if (f32) {
        const float *dyr = (const float *)dy->data + base, *xr = (const float *)x->data + base;
        float *dxr = (float *)dx->data + base;
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
          const double gv = (double)dyr[i] * wc, xh = ((double)xr[i] - mu) * rs;
          dxr[i] = (float)(rs * (gv - a - xh * cc));
        }
      } else {
        for (int64_t i = k * s.hw; i < (k + 1) * s.hw; ++i) {
          double gv = loom_nn_load(dy->data, dy->dtype, base + i) * wc;
          double xh = (loom_nn_load(x->data, x->dtype, base + i) - mu) * rs;
          loom_nn_store(dx->data, dx->dtype, base + i, rs * (gv - a - xh * cc));
        }
      }
    }
  }
  return LOOM_OK;
}

#ifndef LOOM_GN_ISA
int loom_group_norm_forward_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_backward_input_impl_avx512(const loom_kernel_args *, int64_t, int64_t);

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
  if (args->num_tensors < 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *sg = &args->tensors[0], *sgx = &args->tensors[1], *dw = &args->tensors[2],
                    *db = &args->tensors[3];
  const int64_t nb = args->scalars[0].i, c_n = args->scalars[1].i;
  if (sg->dtype != LOOM_FLOAT64 || sgx->dtype != LOOM_FLOAT64 || !sg->data || !sgx->data)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int64_t c = begin; c < end; ++c) {
    double acc_b = 0.0, acc_w = 0.0;
    for (int64_t n = 0; n < nb; ++n) {
      acc_b += ((const double *)sg->data)[n * c_n + c];
      acc_w += ((const double *)sgx->data)[n * c_n + c];
    }
    if (dw->data) loom_nn_store(dw->data, dw->dtype, c, acc_w);
    if (db->data) loom_nn_store(db->data, db->dtype, c, acc_b);
  }
  return LOOM_OK;
}
#endif
