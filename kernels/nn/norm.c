/* Layer norm and RMS norm over contiguous rows. */
#include <math.h>

#include "kernels/nn/nn_rows.h"
#include "kernels/nn/nn_util.h"
#include "kernels/nn/norm.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* The fp32 fast path applies when every given tensor is fp32. */
static int all_f32(const loom_tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i)
    if (ts[i]->data && ts[i]->dtype != LOOM_FLOAT32) return 0;
  return 1;
}

static inline const float *f32_or_null(const loom_tensor *t) {
  return t->data ? (const float *)t->data : NULL;
}

/* bf16/fp16 rows up to this length are staged through float buffers. */
#define LN_ROW_BUFFER 8192

static int all_f32_like(const loom_tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i)
    if (ts[i]->data && !loom_nn_is_f32_like(ts[i]->dtype)) return 0;
  return 1;
}

/* An optional vector of n elements as floats in buf, or NULL if absent. */
static const float *stage_vector(float *buf, const loom_tensor *t, int64_t n) {
  if (!t->data) return NULL;
  loom_nn_load_row_f32(buf, t->data, t->dtype, 0, n);
  return buf;
}

/* Columns of grad_weight/grad_bias accumulated together per pass over the
 * rows: wide enough to stream rows, small enough for the stack. */
#define LN_COLUMN_BLOCK 256
#define LN_ROW_BLOCK 64

int loom_layer_norm_forward(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *w = &args->tensors[1],
                    *b = &args->tensors[2], *y = &args->tensors[3],
                    *mean = &args->tensors[4], *rstd = &args->tensors[5];
  const int64_t n = args->scalars[0].i;
  const double eps = args->scalars[1].f;
  const int rms = args->scalars[2].i != 0;
  const loom_tensor *const all[6] = {x, w, b, y, mean, rstd};
  if (all_f32(all, 6)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = (const float *)x->data + r * n;
      const float mu = rms ? 0.0f : ops->sum(xr, n) / (float)n;
      const float var = ops->sq_dev(xr, n, mu) / (float)n;
      const float rs = 1.0f / sqrtf(var + (float)eps);
      if (mean->data) ((float *)mean->data)[r] = mu;
      ((float *)rstd->data)[r] = rs;
      ops->norm_apply(xr, n, mu, rs, f32_or_null(w), f32_or_null(b),
                      (float *)y->data + r * n);
    }
    return LOOM_OK;
  }
  const loom_tensor *const rows[4] = {x, w, b, y};
  if (n <= LN_ROW_BUFFER && all_f32_like(rows, 4)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    float xbuf[LN_ROW_BUFFER], ybuf[LN_ROW_BUFFER], wbuf[LN_ROW_BUFFER], bbuf[LN_ROW_BUFFER];
    const float *wf = stage_vector(wbuf, w, n), *bfp = stage_vector(bbuf, b, n);
    for (int64_t r = begin; r < end; ++r) {
      loom_nn_load_row_f32(xbuf, x->data, x->dtype, r * n, n);
      const float mu = rms ? 0.0f : ops->sum(xbuf, n) / (float)n;
      const float var = ops->sq_dev(xbuf, n, mu) / (float)n;
      const float rs = 1.0f / sqrtf(var + (float)eps);
      if (mean->data) loom_nn_store(mean->data, mean->dtype, r, mu);
      loom_nn_store(rstd->data, rstd->dtype, r, rs);
      ops->norm_apply(xbuf, n, mu, rs, wf, bfp, ybuf);
      loom_nn_store_row_f32(y->data, y->dtype, r * n, ybuf, n);
    }
    return LOOM_OK;
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t base = r * n;
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j) mu += loom_nn_load(x->data, x->dtype, base + j);
      mu /= (double)n;
    }
    for (int64_t j = 0; j < n; ++j) {
      double d = loom_nn_load(x->data, x->dtype, base + j) - mu;
      var += d * d;
    }
    var /= (double)n;
    const double rs = 1.0 / sqrt(var + eps);
    if (mean->data) loom_nn_store(mean->data, mean->dtype, r, mu);
    loom_nn_store(rstd->data, rstd->dtype, r, rs);
    for (int64_t j = 0; j < n; ++j) {
      double v = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      if (w->data) v *= loom_nn_load(w->data, w->dtype, j);
      if (b->data) v += loom_nn_load(b->data, b->dtype, j);
      loom_nn_store(y->data, y->dtype, base + j, v);
    }
  }
  return LOOM_OK;
}

int loom_layer_norm_backward_input(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *mean = &args->tensors[2], *rstd = &args->tensors[3],
                    *w = &args->tensors[4], *dx = &args->tensors[5];
  const int64_t n = args->scalars[0].i;
  const int rms = args->scalars[1].i != 0;
  const loom_tensor *const all[6] = {dy, x, mean, rstd, w, dx};
  if (all_f32(all, 6)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    for (int64_t r = begin; r < end; ++r) {
      const float mu = (rms || !mean->data) ? 0.0f : ((const float *)mean->data)[r];
      const float rs = ((const float *)rstd->data)[r];
      const float *dyr = (const float *)dy->data + r * n;
      const float *xr = (const float *)x->data + r * n;
      float sums[2];
      ops->norm_grad_sums(dyr, xr, f32_or_null(w), n, mu, rs, sums);
      ops->norm_grad_apply(dyr, xr, f32_or_null(w), n, mu, rs,
                           rms ? 0.0f : sums[0] / (float)n, sums[1] / (float)n,
                           (float *)dx->data + r * n);
    }
    return LOOM_OK;
  }
  const loom_tensor *const rows[4] = {dy, x, w, dx};
  if (n <= LN_ROW_BUFFER && all_f32_like(rows, 4)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    float dybuf[LN_ROW_BUFFER], xbuf[LN_ROW_BUFFER], wbuf[LN_ROW_BUFFER];
    const float *wf = stage_vector(wbuf, w, n);
    for (int64_t r = begin; r < end; ++r) {
      const float mu = (rms || !mean->data) ? 0.0f : (float)loom_nn_load(mean->data, mean->dtype, r);
      const float rs = (float)loom_nn_load(rstd->data, rstd->dtype, r);
      loom_nn_load_row_f32(dybuf, dy->data, dy->dtype, r * n, n);
      loom_nn_load_row_f32(xbuf, x->data, x->dtype, r * n, n);
      float sums[2];
      ops->norm_grad_sums(dybuf, xbuf, wf, n, mu, rs, sums);
      ops->norm_grad_apply(dybuf, xbuf, wf, n, mu, rs, rms ? 0.0f : sums[0] / (float)n,
                           sums[1] / (float)n, dybuf);
      loom_nn_store_row_f32(dx->data, dx->dtype, r * n, dybuf, n);
    }
    return LOOM_OK;
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t base = r * n;
    const double mu = (rms || !mean->data) ? 0.0 : loom_nn_load(mean->data, mean->dtype, r);
    const double rs = loom_nn_load(rstd->data, rstd->dtype, r);
    double sum_g = 0.0, sum_gx = 0.0; /* sum(dy*w), sum(dy*w*xhat) */
    for (int64_t j = 0; j < n; ++j) {
      double g = loom_nn_load(dy->data, dy->dtype, base + j);
      if (w->data) g *= loom_nn_load(w->data, w->dtype, j);
      double xh = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      sum_g += g;
      sum_gx += g * xh;
    }
    const double a = rms ? 0.0 : sum_g / (double)n, c = sum_gx / (double)n;
    for (int64_t j = 0; j < n; ++j) {
      double g = loom_nn_load(dy->data, dy->dtype, base + j);
      if (w->data) g *= loom_nn_load(w->data, w->dtype, j);
      double xh = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      loom_nn_store(dx->data, dx->dtype, base + j, rs * (g - a - xh * c));
    }
  }
  return LOOM_OK;
}

int loom_layer_norm_backward_params(const loom_kernel_args *args,
                                    int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dy = &args->tensors[0], *x = &args->tensors[1],
                    *mean = &args->tensors[2], *rstd = &args->tensors[3],
                    *dw = &args->tensors[4], *db = &args->tensors[5];
  const int64_t m = args->scalars[0].i, n = args->scalars[1].i;
  const int rms = args->scalars[2].i != 0;
  double acc_w[LN_COLUMN_BLOCK], acc_b[LN_COLUMN_BLOCK];
  const loom_tensor *const ins[4] = {dy, x, mean, rstd};
  const int fast = all_f32(ins, 4);
  const int bf16 = dy->dtype == LOOM_BFLOAT16 && x->dtype == LOOM_BFLOAT16;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  for (int64_t j0 = begin; j0 < end; j0 += LN_COLUMN_BLOCK) {
    const int64_t j1 = j0 + LN_COLUMN_BLOCK < end ? j0 + LN_COLUMN_BLOCK : end;
    for (int64_t j = j0; j < j1; ++j) acc_w[j - j0] = acc_b[j - j0] = 0.0;
    for (int64_t r0 = 0; fast && r0 < m; r0 += LN_ROW_BLOCK) {
      /* rows in blocks, their statistics read once */
      const int64_t rows = m - r0 < LN_ROW_BLOCK ? m - r0 : LN_ROW_BLOCK;
      double mus[LN_ROW_BLOCK], rss[LN_ROW_BLOCK];
      for (int64_t r = 0; r < rows; ++r) {
        mus[r] = (rms || !mean->data) ? 0.0 : loom_nn_load(mean->data, mean->dtype, r0 + r);
        rss[r] = loom_nn_load(rstd->data, rstd->dtype, r0 + r);
      }
      ops->norm_param_sums((const float *)dy->data + r0 * n + j0,
                           (const float *)x->data + r0 * n + j0, n, rows, j1 - j0, mus, rss,
                           acc_b, acc_w);
    }
    for (int64_t r = 0; !fast && r < m; ++r) {
      const double mu = (rms || !mean->data) ? 0.0 : loom_nn_load(mean->data, mean->dtype, r);
      const double rs = loom_nn_load(rstd->data, rstd->dtype, r);
      if (bf16) {
        const uint16_t *dyr = (const uint16_t *)dy->data + r * n;
        const uint16_t *xr = (const uint16_t *)x->data + r * n;
        for (int64_t j = j0; j < j1; ++j) {
          const double g = loom_bf16_to_f32(dyr[j]);
          acc_b[j - j0] += g;
          acc_w[j - j0] += g * (loom_bf16_to_f32(xr[j]) - mu) * rs;
        }
        continue;
      }
      for (int64_t j = j0; j < j1; ++j) {
        double g = loom_nn_load(dy->data, dy->dtype, r * n + j);
        acc_b[j - j0] += g;
        acc_w[j - j0] += g * (loom_nn_load(x->data, x->dtype, r * n + j) - mu) * rs;
      }
    }
    for (int64_t j = j0; j < j1; ++j) {
      if (dw->data) loom_nn_store(dw->data, dw->dtype, j, acc_w[j - j0]);
      if (db->data) loom_nn_store(db->data, db->dtype, j, acc_b[j - j0]);
    }
  }
  return LOOM_OK;
}

/* The whole family's names, batch norm (norm_batch.c) and group norm
 * (norm_group.c) included. */
const loom_kernel_entry loom_norm_kernels[] = {
    {"norm.layer_forward", loom_layer_norm_forward, NULL},
    {"norm.layer_backward_input", loom_layer_norm_backward_input, NULL},
    {"norm.layer_backward_params", loom_layer_norm_backward_params, NULL},
    {"norm.batch_forward", loom_batch_norm_forward, NULL},
    {"norm.batch_backward", loom_batch_norm_backward, NULL},
    {"norm.group_forward", loom_group_norm_forward, NULL},
    {"norm.group_backward_input", loom_group_norm_backward_input, NULL},
    {"norm.group_backward_params", loom_group_norm_backward_params, NULL},
    {NULL, NULL, NULL},
};
