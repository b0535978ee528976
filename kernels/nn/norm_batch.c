/* Batch norm over x viewed as [N, C, S]: one call owns whole channels, so a
 * channel's sums always run in the same (n, s) order. */
#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/nn/norm.h"
#include "kernels/nn/norm_batch_rows.h"
#include "kernels/nn/norm_batch_nhwc.h"
#include "loom/status.h"
#include "base/cpu.h"

#include "kernels/nn/norm_batch_rows.inc"

/* fp32 tensors whose [n, c, :] rows are contiguous take the row loops. */
static int bn_rows(const loom_tensor *t) {
  return !t->data || (t->dtype == LOOM_FLOAT32 && (t->strides[2] == 1 || t->sizes[2] <= 1));
}

static int bn_vec(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

static inline int64_t bn_at(const loom_tensor *t, int64_t n, int64_t c,
                            int64_t s) {
  return n * t->strides[0] + c * t->strides[1] + s * t->strides[2];
}

static inline int bn_reduced(int32_t dtype) {
  return dtype == LOOM_BFLOAT16 || dtype == LOOM_FLOAT16;
}

/* v rounded to `dtype` (bfloat16 or float16). */
static inline double bn_round(double v, int32_t dtype) {
  uint16_t bits;
  loom_nn_store(&bits, dtype, 0, v);
  return loom_nn_load(&bits, dtype, 0);
}

static inline double opt_load(const loom_tensor *t, int64_t i, double dflt) {
  return t->data ? loom_nn_load(t->data, t->dtype, i) : dflt;
}

/* A channel's training statistics from its mean *mu and the sum of squared
 * deviations ssq of its `count` values: the saved mean and invstd (sm, si)
 * and the running statistics (read from rm, rv, moved by momentum, written to
 * rm_out, rv_out, or in place where those are NULL) are written for channel
 * c, and *mu, *invstd become what the output is normalised with. */
void loom_bn_finish_stats(const loom_tensor *rm, const loom_tensor *rv, const loom_tensor *rm_out,
                          const loom_tensor *rv_out, const loom_tensor *sm, const loom_tensor *si,
                          int64_t c, int64_t count, double momentum, double eps, double ssq,
                          double *mu, double *invstd) {
  if (!rm_out) rm_out = rm;
  if (!rv_out) rv_out = rv;
  const double var = count ? ssq / (double)count : 0.0;
  double m = *mu, is = 1.0 / sqrt(var + eps);
  /* The mean and invstd the output is normalized with: those saved. */
  double mu_used = m, unbiased = ssq / (double)(count - 1);
  if (sm->data && sm->dtype == LOOM_BFLOAT16) {
    /* bfloat16 statistics: the CPU keeps the mean and the sum of
     * squares in bfloat16 and divides them there (bfloat16 / integer
     * rounds), then takes invstd in float from the rounded variance;
     * the running statistics take the rounded values too. */
    m = mu_used = bn_round(m, LOOM_BFLOAT16);
    const float ssq_r = (float)bn_round(ssq, LOOM_BFLOAT16);
    const float v = count ? (float)bn_round(ssq_r / (float)count, LOOM_BFLOAT16) : 0.0f;
    is = bn_round(1.0f / sqrtf(v + (float)eps), LOOM_BFLOAT16);
    unbiased = bn_round(ssq_r / (float)(count - 1), LOOM_BFLOAT16);
  } else if (sm->data && sm->dtype == LOOM_FLOAT16) {
    /* float16 statistics: computed in float, the output normalized with
     * the saved (rounded) mean and invstd. */
    mu_used = bn_round(m, LOOM_FLOAT16);
    const float v = count ? (float)ssq / (float)count : 0.0f;
    is = bn_round(1.0f / sqrtf(v + (float)eps), LOOM_FLOAT16);
  }
  if (sm->data) loom_nn_store(sm->data, sm->dtype, c, m);
  if (si->data) loom_nn_store(si->data, si->dtype, c, is);
  if (rm->data) {
    double old = loom_nn_load(rm->data, rm->dtype, c);
    loom_nn_store(rm_out->data, rm_out->dtype, c, (1.0 - momentum) * old + momentum * m);
  }
  if (rv->data) {
    /* one value per channel gives 0/0 = NaN, as PyTorch does */
    double old = loom_nn_load(rv->data, rv->dtype, c);
    loom_nn_store(rv_out->data, rv_out->dtype, c, (1.0 - momentum) * old + momentum * unbiased);
  }
  *mu = mu_used;
  *invstd = is;
}

/* The forward's float32 rows path: channels [begin, end) in blocks walked
 * sample by sample (norm_batch_block.c). */
static void bn_forward_rows(const loom_tensor *x, const loom_tensor *w, const loom_tensor *b,
                            const loom_tensor *rm, const loom_tensor *rv, const loom_tensor *y,
                            const loom_tensor *sm, const loom_tensor *si, int training,
                            double momentum, double eps, int64_t begin, int64_t end) {
  const int64_t nb = x->sizes[0], ns = x->sizes[2], count = nb * ns;
  const int vec = bn_vec();
  for (int64_t c0 = begin; c0 < end; c0 += LOOM_BN_CBLOCK) {
    const int64_t c1 = end - c0 < LOOM_BN_CBLOCK ? end : c0 + LOOM_BN_CBLOCK;
    double mean[LOOM_BN_CBLOCK], m2[LOOM_BN_CBLOCK];
    float m[LOOM_BN_CBLOCK], a[LOOM_BN_CBLOCK], bb[LOOM_BN_CBLOCK];
    if (training) loom_bn_block_stats(x, c0, c1, mean, m2);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      double mu, invstd;
      if (training) {
        mu = mean[j];
        loom_bn_finish_stats(rm, rv, NULL, NULL, sm, si, c, count, momentum, eps, m2[j], &mu,
                             &invstd);
      } else {
        mu = opt_load(rm, c, 0.0);
        invstd = 1.0 / sqrt(opt_load(rv, c, 1.0) + eps);
      }
      loom_bn_affine_coef(mu, invstd * opt_load(w, c, 1.0), opt_load(b, c, 0.0), &m[j], &a[j],
                          &bb[j]);
    }
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t c = c0; c < c1; ++c) {
        const float *xr = (const float *)x->data + bn_at(x, n, c, 0);
        float *yr = (float *)y->data + bn_at(y, n, c, 0);
        const int64_t j = c - c0;
        if (vec) loom_bn_row_affine_avx512(yr, xr, ns, m[j], a[j], bb[j]);
        else loom_bn_row_affine(yr, xr, ns, m[j], a[j], bb[j]);
      }
  }
}

int loom_batch_norm_forward(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  if (args->num_tensors < 8 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *w = &args->tensors[1],
                    *b = &args->tensors[2], *rm = &args->tensors[3],
                    *rv = &args->tensors[4], *y = &args->tensors[5],
                    *sm = &args->tensors[6], *si = &args->tensors[7];
  if (x->rank != 3 || y->rank != 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const int training = args->scalars[0].i != 0;
  const double momentum = args->scalars[1].f, eps = args->scalars[2].f;
  const int64_t nb = x->sizes[0], ns = x->sizes[2];
  const int64_t count = nb * ns;
  if (bn_rows(x) && bn_rows(y)) {
    bn_forward_rows(x, w, b, rm, rv, y, sm, si, training, momentum, eps, begin, end);
    return LOOM_OK;
  }
  for (int64_t c = begin; c < end; ++c) {
    double mu, invstd;
    if (training) {
      double sum = 0.0, ssq = 0.0;
      for (int64_t n = 0; n < nb; ++n)
        for (int64_t s = 0; s < ns; ++s)
          sum += loom_nn_load(x->data, x->dtype, bn_at(x, n, c, s));
      mu = count ? sum / (double)count : 0.0;
      for (int64_t n = 0; n < nb; ++n)
        for (int64_t s = 0; s < ns; ++s) {
          double d = loom_nn_load(x->data, x->dtype, bn_at(x, n, c, s)) - mu;
          ssq += d * d;
        }
      loom_bn_finish_stats(rm, rv, NULL, NULL, sm, si, c, count, momentum, eps, ssq, &mu,
                           &invstd);
    } else {
      mu = opt_load(rm, c, 0.0);
      invstd = 1.0 / sqrt(opt_load(rv, c, 1.0) + eps);
    }
    const double scale = invstd * opt_load(w, c, 1.0);
    const double shift = opt_load(b, c, 0.0);
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t s = 0; s < ns; ++s) {
        double v = loom_nn_load(x->data, x->dtype, bn_at(x, n, c, s));
        loom_nn_store(y->data, y->dtype, bn_at(y, n, c, s), (v - mu) * scale + shift);
      }
  }
  return LOOM_OK;
}

/* The backward's float32 rows path: channels [begin, end) in blocks walked
 * sample by sample (norm_batch_block.c). */
static void bn_backward_rows(const loom_tensor *dy, const loom_tensor *x, const loom_tensor *w,
                             const loom_tensor *rm, const loom_tensor *rv, const loom_tensor *sm,
                             const loom_tensor *si, const loom_tensor *dx, const loom_tensor *dw,
                             const loom_tensor *db, int training, double eps, int64_t begin,
                             int64_t end) {
  const int64_t count = x->sizes[0] * x->sizes[2];
  for (int64_t c0 = begin; c0 < end; c0 += LOOM_BN_CBLOCK) {
    const int64_t c1 = end - c0 < LOOM_BN_CBLOCK ? end : c0 + LOOM_BN_CBLOCK;
    double mu[LOOM_BN_CBLOCK], invstd[LOOM_BN_CBLOCK];
    double sg[LOOM_BN_CBLOCK] = {0}, sgx[LOOM_BN_CBLOCK] = {0};
    float m[LOOM_BN_CBLOCK], k1[LOOM_BN_CBLOCK], k2[LOOM_BN_CBLOCK], k3[LOOM_BN_CBLOCK];
    for (int64_t c = c0; c < c1; ++c) {
      if (training) {
        mu[c - c0] = opt_load(sm, c, 0.0);
        invstd[c - c0] = opt_load(si, c, 1.0);
      } else {
        mu[c - c0] = opt_load(rm, c, 0.0);
        invstd[c - c0] = 1.0 / sqrt(opt_load(rv, c, 1.0) + eps);
      }
    }
    if (count) loom_bn_block_grad_sums(dy, x, NULL, NULL, c0, c1, mu, sg, sgx);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      if (dw->data) loom_nn_store(dw->data, dw->dtype, c, sgx[j] * invstd[j]);
      if (db->data) loom_nn_store(db->data, db->dtype, c, sg[j]);
      /* dx = (g - g_mean - (x - mu) * proj) * invstd * w, as g*k1 + (x - m)*k2 + k3 */
      const double g_mean = training && count ? sg[j] / (double)count : 0.0;
      const double proj =
          training && count ? sgx[j] * invstd[j] * invstd[j] / (double)count : 0.0;
      loom_bn_dx_coef(mu[j], invstd[j] * opt_load(w, c, 1.0), proj, g_mean, &m[j], &k1[j],
                      &k2[j], &k3[j]);
    }
    if (dx->data) loom_bn_block_dx(dx, dy, x, c0, c1, m, k1, k2, k3);
  }
}

int loom_batch_norm_backward(const loom_kernel_args *args, int64_t begin,
                             int64_t end) {
  if (args->num_tensors < 10 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *w = &args->tensors[2], *rm = &args->tensors[3],
                    *rv = &args->tensors[4], *sm = &args->tensors[5],
                    *si = &args->tensors[6], *dx = &args->tensors[7],
                    *dw = &args->tensors[8], *db = &args->tensors[9];
  if (x->rank != 3 || dy->rank != 3 || (dx->data && dx->rank != 3))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int training = args->scalars[0].i != 0;
  const double eps = args->scalars[1].f;
  const int64_t nb = x->sizes[0], ns = x->sizes[2];
  const int64_t count = nb * ns;
  if (bn_rows(x) && bn_rows(dy) && bn_rows(dx)) {
    bn_backward_rows(dy, x, w, rm, rv, sm, si, dx, dw, db, training, eps, begin, end);
    return LOOM_OK;
  }
  for (int64_t c = begin; c < end; ++c) {
    double mu, invstd;
    if (training) {
      mu = opt_load(sm, c, 0.0);
      invstd = opt_load(si, c, 1.0);
    } else {
      mu = opt_load(rm, c, 0.0);
      invstd = 1.0 / sqrt(opt_load(rv, c, 1.0) + eps);
    }
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t s = 0; s < ns; ++s) {
        double g = loom_nn_load(dy->data, dy->dtype, bn_at(dy, n, c, s));
        sum_dy += g;
        sum_dy_xmu += g * (loom_nn_load(x->data, x->dtype, bn_at(x, n, c, s)) - mu);
      }
    const double wc = opt_load(w, c, 1.0);
    if (dw->data) loom_nn_store(dw->data, dw->dtype, c, sum_dy_xmu * invstd);
    if (db->data) loom_nn_store(db->data, db->dtype, c, sum_dy);
    if (!dx->data) continue;
    if (training) {
      const double g_mean = count ? sum_dy / (double)count : 0.0;
      const double proj = count ? sum_dy_xmu * invstd * invstd / (double)count : 0.0;
      for (int64_t n = 0; n < nb; ++n)
        for (int64_t s = 0; s < ns; ++s) {
          double g = loom_nn_load(dy->data, dy->dtype, bn_at(dy, n, c, s));
          double xmu = loom_nn_load(x->data, x->dtype, bn_at(x, n, c, s)) - mu;
          loom_nn_store(dx->data, dx->dtype, bn_at(dx, n, c, s),
                        (g - g_mean - xmu * proj) * invstd * wc);
        }
    } else {
      for (int64_t n = 0; n < nb; ++n)
        for (int64_t s = 0; s < ns; ++s) {
          double g = loom_nn_load(dy->data, dy->dtype, bn_at(dy, n, c, s));
          loom_nn_store(dx->data, dx->dtype, bn_at(dx, n, c, s), g * invstd * wc);
        }
    }
  }
  return LOOM_OK;
}
