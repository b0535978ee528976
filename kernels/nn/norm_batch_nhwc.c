/* Batch norm over channels-last x viewed as [R, C] (R = N*H*W rows, the C
 * channels of a row contiguous); contracts in loom/kernels/norm.h.
 *
 * The statistics and gradient sums split the rows into K chunks that the
 * caller fixes from the shape alone: each chunk's per-channel partial sums
 * (vectorized across channels) go to a float64 [K, 2, C] tensor, and one
 * launch over the channels combines them in chunk order. So every result is
 * independent of how the chunks were spread over threads. */
#include <math.h>

#include "base/cpu.h"
#include "kernels/nn/nn_util.h"
#include "kernels/nn/norm_batch_nhwc.h"
#include "kernels/nn/norm_batch_rows.h"
#include "kernels/registry.h"
#include "loom/status.h"

#include "kernels/nn/norm_batch_nhwc_loops.inc"

static int bnh_vec(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

/* A float32 [R, C] tensor whose rows are contiguous (or absent). */
static int bnh_f32(const loom_tensor *t) {
  return !t->data || (t->dtype == LOOM_FLOAT32 && t->rank == 2 &&
                      (t->strides[1] == 1 || t->sizes[1] <= 1));
}

static int bnh_2d(const loom_tensor *t, int64_t r, int64_t c) {
  return t->rank == 2 && t->sizes[0] == r && t->sizes[1] == c;
}

/* The first row of chunk k of K over R rows. */
static inline int64_t bnh_chunk(int64_t k, int64_t nk, int64_t r) { return r / nk * k + r % nk * k / nk; }

/* A float64 [K, 2, C] contiguous partial-sum tensor. */
static int bnh_part_ok(const loom_tensor *p, int64_t c) {
  return p->data && p->dtype == LOOM_FLOAT64 && p->rank == 3 && p->sizes[0] >= 1 &&
         p->sizes[1] == 2 && p->sizes[2] == c && p->strides[2] == 1 &&
         p->strides[1] == c && p->strides[0] == 2 * c;
}

/* A contiguous [rows, C] coefficient tensor, float32 or float64. */
static int bnh_coef_ok(const loom_tensor *t, int64_t rows, int64_t c) {
  return t->data && (t->dtype == LOOM_FLOAT32 || t->dtype == LOOM_FLOAT64) && t->rank == 2 &&
         t->sizes[0] == rows && t->sizes[1] == c && t->strides[1] == 1 && t->strides[0] == c;
}

static inline double opt_at(const loom_tensor *t, int64_t i, double dflt) {
  return t->data ? loom_nn_load(t->data, t->dtype, i * t->strides[0]) : dflt;
}

static inline double at2(const loom_tensor *t, int64_t r, int64_t c) {
  return loom_nn_load(t->data, t->dtype, r * t->strides[0] + c * t->strides[1]);
}

int loom_bnh_stats(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *p = &args->tensors[1];
  if (x->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nr = x->sizes[0], nc = x->sizes[1];
  if (!bnh_part_ok(p, nc)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nk = p->sizes[0];
  const int fast = bnh_f32(x), vec = bnh_vec();
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r0 = bnh_chunk(k, nk, nr), r1 = bnh_chunk(k + 1, nk, nr);
    double *sum = (double *)p->data + k * 2 * nc, *m2 = sum + nc;
    if (r1 <= r0) {
      for (int64_t c = 0; c < nc; ++c) sum[c] = 0.0, m2[c] = 0.0;
      continue;
    }
    if (fast) {
      for (int64_t c0 = 0; c0 < nc; c0 += LOOM_BNH_BLOCK) {
        const int64_t nb = nc - c0 < LOOM_BNH_BLOCK ? nc - c0 : LOOM_BNH_BLOCK;
        const float *xb = (const float *)x->data + c0;
        if (vec) loom_bnh_stats_f32_avx512(xb, x->strides[0], r0, r1, nb, sum + c0, m2 + c0);
        else loom_bnh_stats_f32(xb, x->strides[0], r0, r1, nb, sum + c0, m2 + c0);
      }
      continue;
    }
    for (int64_t c = 0; c < nc; ++c) {
      double s = 0.0, q = 0.0;
      for (int64_t r = r0; r < r1; ++r) s += at2(x, r, c);
      const double m = s / (double)(r1 - r0);
      for (int64_t r = r0; r < r1; ++r) {
        const double d = at2(x, r, c) - m;
        q += d * d;
      }
      sum[c] = s, m2[c] = q;
    }
  }
  return LOOM_OK;
}

int loom_bnh_finish(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 8 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *p = &args->tensors[0], *w = &args->tensors[1], *b = &args->tensors[2],
                    *rm = &args->tensors[3], *rv = &args->tensors[4], *sm = &args->tensors[5],
                    *si = &args->tensors[6], *coef = &args->tensors[7];
  const int training = args->scalars[0].i != 0;
  const double momentum = args->scalars[1].f, eps = args->scalars[2].f;
  const int64_t nr = args->scalars[3].i, nc = coef->rank == 2 ? coef->sizes[1] : -1;
  if (!bnh_coef_ok(coef, 3, nc) || (training && !bnh_part_ok(p, nc)) || nr < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nk = training ? p->sizes[0] : 0;
  const double *part = training ? (const double *)p->data : 0;
  /* running statistics written apart from those read, when given */
  const loom_tensor *rm_out = args->num_tensors > 9 && args->tensors[8].data ? &args->tensors[8] : 0;
  const loom_tensor *rv_out = args->num_tensors > 9 && args->tensors[9].data ? &args->tensors[9] : 0;
  for (int64_t c = begin; c < end; ++c) {
    double mu, invstd;
    if (training) {
      /* the chunks' sums, then their squared deviations about the mean
       * (each chunk's own plus its mean's offset), in chunk order */
      double s = 0.0, q = 0.0;
      for (int64_t k = 0; k < nk; ++k) s += part[k * 2 * nc + c];
      mu = s / (double)nr;
      for (int64_t k = 0; k < nk; ++k) {
        const int64_t n = bnh_chunk(k + 1, nk, nr) - bnh_chunk(k, nk, nr);
        if (n <= 0) continue;
        const double d = part[k * 2 * nc + c] / (double)n - mu;
        q += part[k * 2 * nc + nc + c] + (double)n * d * d;
      }
      loom_bn_finish_stats(rm, rv, rm_out, rv_out, sm, si, c, nr, momentum, eps, q, &mu, &invstd);
    } else {
      mu = opt_at(rm, c, 0.0);
      invstd = 1.0 / sqrt(opt_at(rv, c, 1.0) + eps);
    }
    const double scale = invstd * opt_at(w, c, 1.0), shift = opt_at(b, c, 0.0);
    /* y = (x - m) * a + b, about the mean as the NCHW rows work */
    if (coef->dtype == LOOM_FLOAT32) {
      float *o = (float *)coef->data;
      loom_bn_affine_coef(mu, scale, shift, &o[c], &o[nc + c], &o[2 * nc + c]);
    } else {
      double *o = (double *)coef->data;
      o[c] = mu, o[nc + c] = scale, o[2 * nc + c] = shift;
    }
  }
  return LOOM_OK;
}

int loom_bnh_apply(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *coef = &args->tensors[1],
                    *res = &args->tensors[2], *y = &args->tensors[3];
  const int relu = args->scalars[0].i != 0;
  if (x->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nr = x->sizes[0], nc = x->sizes[1];
  if (!bnh_2d(y, nr, nc) || (res->data && !bnh_2d(res, nr, nc)) || !bnh_coef_ok(coef, 3, nc))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (bnh_f32(x) && bnh_f32(y) && bnh_f32(res) && coef->dtype == LOOM_FLOAT32) {
    const float *m = (const float *)coef->data, *a = m + nc, *b = a + nc;
    const float *r = res->data ? (const float *)res->data : 0;
    const int64_t ldr = res->data ? res->strides[0] : 0;
    if (bnh_vec())
      loom_bnh_apply_f32_avx512((float *)y->data, y->strides[0], (const float *)x->data,
                                x->strides[0], r, ldr, begin, end, nc, m, a, b, relu);
    else
      loom_bnh_apply_f32((float *)y->data, y->strides[0], (const float *)x->data, x->strides[0],
                         r, ldr, begin, end, nc, m, a, b, relu);
    return LOOM_OK;
  }
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      double v = (at2(x, r, c) - loom_nn_load(coef->data, coef->dtype, c)) *
                     loom_nn_load(coef->data, coef->dtype, nc + c) +
                 loom_nn_load(coef->data, coef->dtype, 2 * nc + c);
      if (res->data) v += at2(res, r, c);
      if (relu && v <= 0.0) v = 0.0; /* NaN passes, as the ReLU lets it */
      loom_nn_store(y->data, y->dtype, r * y->strides[0] + c * y->strides[1], v);
    }
  return LOOM_OK;
}

int loom_bnh_grad_sums(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 6) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *g = &args->tensors[0], *x = &args->tensors[1], *mean = &args->tensors[2],
                    *p = &args->tensors[3], *y = &args->tensors[4], *gm = &args->tensors[5];
  if (x->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nr = x->sizes[0], nc = x->sizes[1];
  if (!bnh_2d(g, nr, nc) || (y->data && !bnh_2d(y, nr, nc)) || (gm->data && !bnh_2d(gm, nr, nc)) ||
      !bnh_part_ok(p, nc) || !mean->data || mean->rank != 1 || mean->sizes[0] != nc)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nk = p->sizes[0];
  const int fast = bnh_f32(g) && bnh_f32(x) && bnh_f32(y) && bnh_f32(gm), vec = bnh_vec();
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r0 = bnh_chunk(k, nk, nr), r1 = bnh_chunk(k + 1, nk, nr);
    double *sg = (double *)p->data + k * 2 * nc, *sgx = sg + nc;
    for (int64_t c0 = 0; c0 < nc; c0 += LOOM_BNH_BLOCK) {
      const int64_t nb = nc - c0 < LOOM_BNH_BLOCK ? nc - c0 : LOOM_BNH_BLOCK;
      double mu[LOOM_BNH_BLOCK];
      for (int64_t j = 0; j < nb; ++j) mu[j] = opt_at(mean, c0 + j, 0.0);
      if (fast) {
        const float *yb = y->data ? (const float *)y->data + c0 : 0;
        float *mb = gm->data ? (float *)gm->data + c0 : 0;
        const int64_t ldy = y->data ? y->strides[0] : 0, ldm = gm->data ? gm->strides[0] : 0;
        (vec ? loom_bnh_grad_sums_f32_avx512 : loom_bnh_grad_sums_f32)(
            (const float *)g->data + c0, g->strides[0], (const float *)x->data + c0,
            x->strides[0], yb, ldy, mb, ldm, r0, r1, nb, mu, sg + c0, sgx + c0);
        continue;
      }
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t c = c0 + j;
        double a = 0.0, q = 0.0;
        for (int64_t r = r0; r < r1; ++r) {
          double gv = at2(g, r, c);
          if (y->data) {
            if (at2(y, r, c) <= 0.0) gv = 0.0;
            if (gm->data)
              loom_nn_store(gm->data, gm->dtype, r * gm->strides[0] + c * gm->strides[1], gv);
          }
          a += gv;
          q += gv * (at2(x, r, c) - mu[j]);
        }
        sg[c] = a, sgx[c] = q;
      }
    }
  }
  return LOOM_OK;
}

int loom_bnh_grad_finish(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *p = &args->tensors[0], *w = &args->tensors[1], *rm = &args->tensors[2],
                    *rv = &args->tensors[3], *sm = &args->tensors[4], *si = &args->tensors[5],
                    *dw = &args->tensors[6], *db = &args->tensors[7], *coef = &args->tensors[8];
  const int training = args->scalars[0].i != 0;
  const double eps = args->scalars[1].f;
  const int64_t nr = args->scalars[2].i, nc = args->scalars[3].i;
  if ((p->data && !bnh_part_ok(p, nc)) || (coef->data && !bnh_coef_ok(coef, 4, nc)) || nr < 1 ||
      end > nc || (training && !p->data && coef->data))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nk = p->data ? p->sizes[0] : 0;
  const double *part = p->data ? (const double *)p->data : 0;
  for (int64_t c = begin; c < end; ++c) {
    double mu, invstd;
    if (training) {
      mu = opt_at(sm, c, 0.0);
      invstd = opt_at(si, c, 1.0);
    } else {
      mu = opt_at(rm, c, 0.0);
      invstd = 1.0 / sqrt(opt_at(rv, c, 1.0) + eps);
    }
    double sg = 0.0, sgx = 0.0;
    for (int64_t k = 0; k < nk; ++k) sg += part[k * 2 * nc + c], sgx += part[k * 2 * nc + nc + c];
    if (dw->data) loom_nn_store(dw->data, dw->dtype, c * dw->strides[0], sgx * invstd);
    if (db->data) loom_nn_store(db->data, db->dtype, c * db->strides[0], sg);
    if (!coef->data) continue;
    /* dx = (g - g_mean - (x - mu) * proj) * invstd * w, as
     * g*k1 + (x - m)*k2 + k3 about the mean as the NCHW rows work */
    const double g_mean = training ? sg / (double)nr : 0.0;
    const double proj = training ? sgx * invstd * invstd / (double)nr : 0.0;
    const double f = invstd * opt_at(w, c, 1.0);
    if (coef->dtype == LOOM_FLOAT32) {
      float *o = (float *)coef->data;
      loom_bn_dx_coef(mu, f, proj, g_mean, &o[c], &o[nc + c], &o[2 * nc + c], &o[3 * nc + c]);
    } else {
      double *o = (double *)coef->data;
      o[c] = mu, o[nc + c] = f, o[2 * nc + c] = -proj * f, o[3 * nc + c] = -g_mean * f;
    }
  }
  return LOOM_OK;
}

int loom_bnh_dx(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *g = &args->tensors[0], *x = &args->tensors[1], *coef = &args->tensors[2],
                    *dx = &args->tensors[3];
  if (x->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nr = x->sizes[0], nc = x->sizes[1];
  if (!bnh_2d(g, nr, nc) || !bnh_2d(dx, nr, nc) || !bnh_coef_ok(coef, 4, nc))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (bnh_f32(g) && bnh_f32(x) && bnh_f32(dx) && coef->dtype == LOOM_FLOAT32) {
    const float *k = (const float *)coef->data;
    (bnh_vec() ? loom_bnh_dx_f32_avx512 : loom_bnh_dx_f32)(
        (float *)dx->data, dx->strides[0], (const float *)g->data, g->strides[0],
        (const float *)x->data, x->strides[0], begin, end, nc, k, k + nc, k + 2 * nc, k + 3 * nc);
    return LOOM_OK;
  }
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      const double v =
          at2(g, r, c) * loom_nn_load(coef->data, coef->dtype, nc + c) +
          (at2(x, r, c) - loom_nn_load(coef->data, coef->dtype, c)) *
              loom_nn_load(coef->data, coef->dtype, 2 * nc + c) +
          loom_nn_load(coef->data, coef->dtype, 3 * nc + c);
      loom_nn_store(dx->data, dx->dtype, r * dx->strides[0] + c * dx->strides[1], v);
    }
  return LOOM_OK;
}

const loom_kernel_entry loom_norm_batch_nhwc_kernels[] = {
    {"norm.batch_nhwc_stats", loom_bnh_stats, NULL},
    {"norm.batch_nhwc_finish", loom_bnh_finish, NULL},
    {"norm.batch_nhwc_apply", loom_bnh_apply, NULL},
    {"norm.batch_nhwc_grad_sums", loom_bnh_grad_sums, NULL},
    {"norm.batch_nhwc_grad_finish", loom_bnh_grad_finish, NULL},
    {"norm.batch_nhwc_dx", loom_bnh_dx, NULL},
    {NULL, NULL, NULL},
};
