/* Weight normalization. Every row is read in pieces staged as doubles, so
 * one loop serves every float dtype and the dtype switch runs once per
 * piece, not per element. */
#include "kernels/nn/weight_norm.h"

#include <math.h>
#include <string.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

#define WN_PIECE 256

static void wn_load(double *dst, const loom_tensor *t, int64_t off, int64_t n) {
  switch (t->dtype) {
    case LOOM_FLOAT32: {
      const float *p = (const float *)t->data + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
      break;
    }
    case LOOM_FLOAT64:
      memcpy(dst, (const double *)t->data + off, (size_t)n * sizeof(double));
      break;
    case LOOM_BFLOAT16: {
      const uint16_t *p = (const uint16_t *)t->data + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = loom_bf16_to_f32(p[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = loom_nn_load(t->data, t->dtype, off + i);
  }
}

static void wn_store(const loom_tensor *t, int64_t off, const double *src, int64_t n) {
  switch (t->dtype) {
    case LOOM_FLOAT32: {
      float *p = (float *)t->data + off;
      for (int64_t i = 0; i < n; ++i) p[i] = (float)src[i];
      break;
    }
    case LOOM_FLOAT64:
      memcpy((double *)t->data + off, src, (size_t)n * sizeof(double));
      break;
    default:
      for (int64_t i = 0; i < n; ++i) loom_nn_store(t->data, t->dtype, off + i, src[i]);
  }
}

/* sum of x[i] * y[i] over a row of n elements from `off`; x == y reads once.
 * Term i goes to partial sum i mod 4: four chains of additions, in an order
 * fixed by n alone. */
static double wn_row_dot(const loom_tensor *x, const loom_tensor *y, int64_t off,
                         int64_t n) {
  double xb[WN_PIECE], yb[WN_PIECE], s[4] = {0.0, 0.0, 0.0, 0.0};
  const int same = x->data == y->data && x->dtype == y->dtype;
  for (int64_t p = 0; p < n; p += WN_PIECE) {
    const int64_t len = n - p < WN_PIECE ? n - p : WN_PIECE;
    wn_load(xb, x, off + p, len);
    const double *yv = xb;
    if (!same) {
      wn_load(yb, y, off + p, len);
      yv = yb;
    }
    for (int64_t i = 0; i < len; ++i) s[i & 3] += xb[i] * yv[i];
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Every tensor these kernels take is a dense run of float elements. */
static int wn_float(const loom_tensor *t) {
  return t->data && loom_nn_is_float(t->dtype) && loom_nn_dense_from(t, 0);
}

/* ---- rows ------------------------------------------------------------------ */

int loom_weight_norm_rows_forward(const loom_kernel_args *args, int64_t begin,
                                  int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *v = &args->tensors[0], *g = &args->tensors[1],
                    *w = &args->tensors[2], *norm = &args->tensors[3];
  const int64_t n = args->scalars[0].i;
  if (!wn_float(v) || !wn_float(g) || !wn_float(w) || !wn_float(norm) || n < 0 ||
      loom_nn_numel(v) != args->range * n || loom_nn_numel(w) != args->range * n ||
      loom_nn_numel(g) < args->range || loom_nn_numel(norm) < args->range)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm: bad tensor arguments");
  double buf[WN_PIECE];
  for (int64_t r = begin; r < end; ++r) {
    const double nrm = sqrt(wn_row_dot(v, v, r * n, n));
    loom_nn_store(norm->data, norm->dtype, r, nrm);
    const double a = loom_nn_load(g->data, g->dtype, r) / nrm;
    for (int64_t p = 0; p < n; p += WN_PIECE) {
      const int64_t len = n - p < WN_PIECE ? n - p : WN_PIECE;
      wn_load(buf, v, r * n + p, len);
      for (int64_t i = 0; i < len; ++i) buf[i] *= a;
      wn_store(w, r * n + p, buf, len);
    }
  }
  return LOOM_OK;
}

int loom_weight_norm_rows_backward(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *gw = &args->tensors[0], *v = &args->tensors[1],
                    *g = &args->tensors[2], *norm = &args->tensors[3],
                    *gv = &args->tensors[4], *gg = &args->tensors[5];
  const int64_t n = args->scalars[0].i, m = args->range;
  if (!wn_float(gw) || !wn_float(v) || !wn_float(g) || !wn_float(norm) ||
      !wn_float(gv) || !wn_float(gg) || n < 0 || loom_nn_numel(gw) != m * n ||
      loom_nn_numel(v) != m * n || loom_nn_numel(gv) != m * n ||
      loom_nn_numel(g) < m || loom_nn_numel(norm) < m || loom_nn_numel(gg) < m)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm backward: bad tensor arguments");
  double wb[WN_PIECE], vb[WN_PIECE];
  for (int64_t r = begin; r < end; ++r) {
    const double nrm = loom_nn_load(norm->data, norm->dtype, r);
    const double grad_g = wn_row_dot(gw, v, r * n, n) / nrm;
    loom_nn_store(gg->data, gg->dtype, r, grad_g);
    const double a = loom_nn_load(g->data, g->dtype, r) / nrm;
    const double b = a * grad_g / nrm;
    for (int64_t p = 0; p < n; p += WN_PIECE) {
      const int64_t len = n - p < WN_PIECE ? n - p : WN_PIECE;
      wn_load(wb, gw, r * n + p, len);
      wn_load(vb, v, r * n + p, len);
      for (int64_t i = 0; i < len; ++i) wb[i] = a * wb[i] - b * vb[i];
      wn_store(gv, r * n + p, wb, len);
    }
  }
  return LOOM_OK;
}

/* ---- columns --------------------------------------------------------------- */

int loom_weight_norm_cols_partials(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *y = &args->tensors[1],
                    *part = &args->tensors[2];
  const int64_t m = args->scalars[0].i, n = args->scalars[1].i,
                rows = args->scalars[2].i;
  if (!wn_float(x) || !wn_float(y) || !part->data || part->dtype != LOOM_FLOAT64 ||
      m < 0 || n < 0 || rows < 1 || loom_nn_numel(x) != m * n ||
      loom_nn_numel(y) != m * n || args->range != (m + rows - 1) / rows ||
      loom_nn_numel(part) < args->range * n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm: bad partial sum arguments");
  const int same = x->data == y->data && x->dtype == y->dtype;
  double xb[WN_PIECE], yb[WN_PIECE];
  for (int64_t k = begin; k < end; ++k) {
    double *acc = (double *)part->data + k * n;
    memset(acc, 0, (size_t)n * sizeof(double));
    const int64_t r1 = (k + 1) * rows < m ? (k + 1) * rows : m;
    for (int64_t r = k * rows; r < r1; ++r) {
      for (int64_t p = 0; p < n; p += WN_PIECE) {
        const int64_t len = n - p < WN_PIECE ? n - p : WN_PIECE;
        wn_load(xb, x, r * n + p, len);
        const double *yv = xb;
        if (!same) {
          wn_load(yb, y, r * n + p, len);
          yv = yb;
        }
        for (int64_t i = 0; i < len; ++i) acc[p + i] += xb[i] * yv[i];
      }
    }
  }
  return LOOM_OK;
}

/* Column j's sum over the blocks' partials, in block order. */
static double wn_col_sum(const loom_tensor *part, int64_t j) {
  const int64_t blocks = part->sizes[0], n = part->sizes[1];
  const double *p = (const double *)part->data;
  double s = 0.0;
  for (int64_t k = 0; k < blocks; ++k) s += p[k * n + j];
  return s;
}

static int wn_check_coef(const loom_tensor *part, const loom_tensor *coef,
                         int64_t rows, int64_t n) {
  return part->data && part->dtype == LOOM_FLOAT64 && part->rank == 2 &&
         part->sizes[1] == n && loom_nn_dense_from(part, 0) && coef->data &&
         coef->dtype == LOOM_FLOAT64 && loom_nn_numel(coef) >= rows * n;
}

int loom_weight_norm_cols_forward(const loom_kernel_args *args, int64_t begin,
                                  int64_t end) {
  if (args->num_tensors < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *part = &args->tensors[0], *g = &args->tensors[1],
                    *norm = &args->tensors[2], *coef = &args->tensors[3];
  const int64_t n = args->range;
  if (!wn_check_coef(part, coef, 1, n) || !wn_float(g) || !wn_float(norm) ||
      loom_nn_numel(g) < n || loom_nn_numel(norm) < n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm: bad norm arguments");
  double *a = (double *)coef->data;
  for (int64_t j = begin; j < end; ++j) {
    const double nrm = sqrt(wn_col_sum(part, j));
    loom_nn_store(norm->data, norm->dtype, j, nrm);
    a[j] = loom_nn_load(g->data, g->dtype, j) / nrm;
  }
  return LOOM_OK;
}

int loom_weight_norm_cols_backward(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 5) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *part = &args->tensors[0], *g = &args->tensors[1],
                    *norm = &args->tensors[2], *gg = &args->tensors[3],
                    *coef = &args->tensors[4];
  const int64_t n = args->range;
  if (!wn_check_coef(part, coef, 2, n) || !wn_float(g) || !wn_float(norm) ||
      !wn_float(gg) || loom_nn_numel(g) < n || loom_nn_numel(norm) < n ||
      loom_nn_numel(gg) < n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm backward: bad norm arguments");
  double *a = (double *)coef->data, *b = a + n;
  for (int64_t j = begin; j < end; ++j) {
    const double nrm = loom_nn_load(norm->data, norm->dtype, j);
    const double grad_g = wn_col_sum(part, j) / nrm;
    loom_nn_store(gg->data, gg->dtype, j, grad_g);
    a[j] = loom_nn_load(g->data, g->dtype, j) / nrm;
    b[j] = a[j] * grad_g / nrm;
  }
  return LOOM_OK;
}

int loom_weight_norm_cols_apply(const loom_kernel_args *args, int64_t begin,
                                int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *y = &args->tensors[1],
                    *coef = &args->tensors[2], *out = &args->tensors[3];
  const int64_t n = args->scalars[0].i, m = args->range;
  const int has_y = y->data != NULL;
  if (!wn_float(x) || (has_y && !wn_float(y)) || !wn_float(out) || n < 0 ||
      !coef->data || coef->dtype != LOOM_FLOAT64 ||
      loom_nn_numel(coef) < (has_y ? 2 : 1) * n || loom_nn_numel(x) != m * n ||
      (has_y && loom_nn_numel(y) != m * n) || loom_nn_numel(out) != m * n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "weight_norm: bad apply arguments");
  const double *a = (const double *)coef->data, *b = a + n;
  double xb[WN_PIECE], yb[WN_PIECE];
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t p = 0; p < n; p += WN_PIECE) {
      const int64_t len = n - p < WN_PIECE ? n - p : WN_PIECE;
      wn_load(xb, x, r * n + p, len);
      if (has_y) {
        wn_load(yb, y, r * n + p, len);
        for (int64_t i = 0; i < len; ++i) xb[i] = a[p + i] * xb[i] - b[p + i] * yb[i];
      } else {
        for (int64_t i = 0; i < len; ++i) xb[i] *= a[p + i];
      }
      wn_store(out, r * n + p, xb, len);
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_weight_norm_kernels[] = {
    {"weight_norm.rows_forward", loom_weight_norm_rows_forward, NULL},
    {"weight_norm.rows_backward", loom_weight_norm_rows_backward, NULL},
    {"weight_norm.cols_partials", loom_weight_norm_cols_partials, NULL},
    {"weight_norm.cols_forward", loom_weight_norm_cols_forward, NULL},
    {"weight_norm.cols_backward", loom_weight_norm_cols_backward, NULL},
    {"weight_norm.cols_apply", loom_weight_norm_cols_apply, NULL},
    {NULL, NULL, NULL},
};
