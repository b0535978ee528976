/* Batch norm (training statistics) fused with the ReLU after it, forward and
 * backward (contracts in loom/kernels/norm_batch_act.h). One call owns whole
 * channels; each channel's statistics and gradient sums are norm_batch.c's
 * (the same plane loops, norm_batch_rows.inc, and the backward's same walk
 * over blocks of channels, norm_batch_block.c), so the results are the
 * unfused sequence's bits. The forward writes relu(normalised (+ residual)) once,
 * instead of a normalised tensor a ReLU pass reads again; the backward masks
 * the output gradient while it sums it, instead of a threshold pass writing
 * a masked copy for batch norm's backward to read twice. */
#include "kernels/nn/norm.h"
#include "kernels/nn/norm_batch_act.h"
#include "kernels/nn/norm_batch_rows.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

#include <math.h>

#include "kernels/nn/norm_batch_act_rows.inc"

void loom_bna_row_affine_relu_avx512(float *y, const float *x, int64_t n, float m, float a,
                                     float b);
void loom_bna_row_affine_add_relu_avx512(float *y, const float *x, const float *r, int64_t n,
                                         float m, float a, float b);

static int bna_vec(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

/* A [N, C, S] float32 tensor whose rows [n, c, :] are contiguous (or NULL
 * data, an absent optional). */
static int bna_rows(const loom_tensor *t, const loom_tensor *like) {
  if (!t->data) return 1;
  if (t->dtype != LOOM_FLOAT32 || t->rank != 3) return 0;
  for (int d = 0; d < 3; ++d)
    if (t->sizes[d] != like->sizes[d]) return 0;
  return t->strides[2] == 1 || t->sizes[2] <= 1;
}

/* A float32 per-channel vector of c elements (or absent). */
static int bna_channel(const loom_tensor *t, int64_t c) {
  if (!t->data) return 1;
  return t->dtype == LOOM_FLOAT32 && t->rank == 1 && t->sizes[0] == c;
}

static inline const float *bna_row(const loom_tensor *t, int64_t n, int64_t c) {
  return (const float *)t->data + n * t->strides[0] + c * t->strides[1];
}

static inline float bna_at(const loom_tensor *t, int64_t c, float dflt) {
  return t->data ? ((const float *)t->data)[c * t->strides[0]] : dflt;
}

static inline void bna_set(const loom_tensor *t, int64_t c, double v) {
  if (t->data) ((float *)t->data)[c * t->strides[0]] = (float)v;
}

int loom_batch_norm_relu_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 11 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *w = &args->tensors[1], *b = &args->tensors[2],
                    *rm = &args->tensors[3], *rv = &args->tensors[4], *r = &args->tensors[5],
                    *y = &args->tensors[6], *sm = &args->tensors[7], *si = &args->tensors[8],
                    *rm_out = &args->tensors[9], *rv_out = &args->tensors[10];
  if (!x->data || !y->data || !bna_rows(x, x) || !bna_rows(y, x) || !bna_rows(r, x))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nb = x->sizes[0], nc = x->sizes[1], ns = x->sizes[2];
  const loom_tensor *chan[] = {w, b, rm, rv, sm, si, rm_out, rv_out};
  for (int k = 0; k < 8; ++k)
    if (!bna_channel(chan[k], nc)) return LOOM_ERROR_INVALID_ARGUMENT;
  const double momentum = args->scalars[0].f, eps = args->scalars[1].f;
  const int64_t count = nb * ns;
  const int vec = bna_vec();
  for (int64_t c0 = begin; c0 < end; c0 += LOOM_BN_CBLOCK) {
    const int64_t c1 = end - c0 < LOOM_BN_CBLOCK ? end : c0 + LOOM_BN_CBLOCK;
    double mean[LOOM_BN_CBLOCK], m2[LOOM_BN_CBLOCK];
    float m[LOOM_BN_CBLOCK], a[LOOM_BN_CBLOCK], bb[LOOM_BN_CBLOCK];
    loom_bn_block_stats(x, c0, c1, mean, m2);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      const double mu = mean[j], ssq = m2[j];
      const double var = count ? ssq / (double)count : 0.0;
      const double invstd = 1.0 / sqrt(var + eps);
      const double unbiased = ssq / (double)(count - 1);
      bna_set(sm, c, mu);
      bna_set(si, c, invstd);
      if (rm_out->data)
        bna_set(rm_out, c, (1.0 - momentum) * (double)bna_at(rm, c, 0.0f) + momentum * mu);
      if (rv_out->data) /* one value per channel gives 0/0 = NaN, as PyTorch does */
        bna_set(rv_out, c, (1.0 - momentum) * (double)bna_at(rv, c, 1.0f) + momentum * unbiased);
      const double scale = invstd * (double)bna_at(w, c, 1.0f);
      const double shift = (double)bna_at(b, c, 0.0f);
      loom_bn_affine_coef(mu, scale, shift, &m[j], &a[j], &bb[j]);
    }
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t j = c - c0;
        const float *xr = bna_row(x, n, c);
        float *yr = (float *)bna_row(y, n, c);
        if (r->data) {
          const float *rr = bna_row(r, n, c);
          if (vec) loom_bna_row_affine_add_relu_avx512(yr, xr, rr, ns, m[j], a[j], bb[j]);
          else loom_bna_row_affine_add_relu(yr, xr, rr, ns, m[j], a[j], bb[j]);
        } else if (vec) {
          loom_bna_row_affine_relu_avx512(yr, xr, ns, m[j], a[j], bb[j]);
        } else {
          loom_bna_row_affine_relu(yr, xr, ns, m[j], a[j], bb[j]);
        }
      }
  }
  return LOOM_OK;
}

int loom_batch_norm_relu_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 9) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *y = &args->tensors[1], *x = &args->tensors[2],
                    *w = &args->tensors[3], *sm = &args->tensors[4], *si = &args->tensors[5],
                    *dx = &args->tensors[6], *dw = &args->tensors[7], *db = &args->tensors[8];
  /* the masked gradient, kept for other readers (or dx holds it meanwhile) */
  const loom_tensor *keep = args->num_tensors > 9 && args->tensors[9].data ? &args->tensors[9]
                                                                          : dx;
  if (!x->data || !dy->data || !y->data || !dx->data || !sm->data || !si->data ||
      !bna_rows(x, x) || !bna_rows(dy, x) || !bna_rows(y, x) || !bna_rows(dx, x) ||
      !bna_rows(keep, x))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t nb = x->sizes[0], nc = x->sizes[1], ns = x->sizes[2];
  const loom_tensor *chan[] = {w, sm, si, dw, db};
  for (int k = 0; k < 5; ++k)
    if (!bna_channel(chan[k], nc)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t count = nb * ns;
  for (int64_t c0 = begin; c0 < end; c0 += LOOM_BN_CBLOCK) {
    const int64_t c1 = end - c0 < LOOM_BN_CBLOCK ? end : c0 + LOOM_BN_CBLOCK;
    double mu[LOOM_BN_CBLOCK], sg[LOOM_BN_CBLOCK] = {0}, sgx[LOOM_BN_CBLOCK] = {0};
    float m[LOOM_BN_CBLOCK], k1[LOOM_BN_CBLOCK], k2[LOOM_BN_CBLOCK], k3[LOOM_BN_CBLOCK];
    for (int64_t c = c0; c < c1; ++c) mu[c - c0] = (double)bna_at(sm, c, 0.0f);
    if (count) loom_bn_block_grad_sums(dy, x, y, keep, c0, c1, mu, sg, sgx);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      const double invstd = (double)bna_at(si, c, 1.0f);
      bna_set(dw, c, sgx[j] * invstd);
      bna_set(db, c, sg[j]);
      /* dx = (g - g_mean - (x - mu) * proj) * invstd * w, as g*k1 + (x - m)*k2 + k3 */
      const double g_mean = count ? sg[j] / (double)count : 0.0;
      const double proj = count ? sgx[j] * invstd * invstd / (double)count : 0.0;
      const double f = invstd * (double)bna_at(w, c, 1.0f);
      loom_bn_dx_coef(mu[j], f, proj, g_mean, &m[j], &k1[j], &k2[j], &k3[j]);
    }
    /* from the masked gradient: in place in dx, or read from where it is kept */
    loom_bn_block_dx(dx, keep, x, c0, c1, m, k1, k2, k3);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_norm_batch_act_kernels[] = {
    {"norm.batch_relu_forward", loom_batch_norm_relu_forward, NULL},
    {"norm.batch_relu_backward", loom_batch_norm_relu_backward, NULL},
    {NULL, NULL, NULL},
};
