/* Cumulative ops: one row per iteration, scanned in element order. */
#include "kernels/reduce/scan.h"

#include <math.h>

#include "kernels/base/convert.h"
#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* Side-by-side rows a float32 sum or product scans together. */
#define SCAN_COLS 64

static void scan_store(const loom_tensor *t, int64_t off, int integral,
                       double f, int64_t i) {
  char *dst = (char *)t->data + off * loom_dtype_size(t->dtype);
  if (integral) loom_pw_store(LOOM_PW_I64, dst, t->dtype, 0, &i, 1);
  else loom_pw_store(LOOM_PW_F64, dst, t->dtype, 0, &f, 1);
}

/* log(exp(x) + exp(acc)) as the CPU's logcumsumexp computes it: the larger
 * plus log1p(exp(smaller - larger)); a NaN acc stays, equal infinities give
 * x. */
static double scan_log_add_exp(double x, double acc) {
  const double lo = acc != acc ? acc : (acc < x ? acc : x);
  const double hi = acc != acc ? acc : (x < acc ? acc : x);
  if (lo != hi || isfinite(lo)) return log1p(exp(lo - hi)) + hi;
  return x;
}

int loom_kernel_scan(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const loom_tensor *idx = &args->tensors[2];
  const int op = (int)args->scalars[0].i;
  const int32_t dim = (int32_t)args->scalars[1].i;
  if (in->rank != out->rank || (in->rank > 0 && (dim < 0 || dim >= in->rank)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t n = in->rank ? in->sizes[dim] : 1;
  const int64_t is = in->rank ? in->strides[dim] : 0, os = out->rank ? out->strides[dim] : 0;
  const int64_t xs = idx->data && idx->rank ? idx->strides[dim] : 0;
  const int integral = loom_dtype_is_integral(in->dtype);
  if (op == LOOM_SCAN_LOGCUMSUMEXP && integral) return LOOM_ERROR_INVALID_ARGUMENT;
  const int32_t skip = in->rank ? dim : -1;
  if ((op == LOOM_SCAN_CUMSUM || op == LOOM_SCAN_CUMPROD) && in->dtype == LOOM_FLOAT32 &&
      out->dtype == LOOM_FLOAT32) {
    /* the general loop's arithmetic (a double accumulator, rounded once per
     * element) without its per-element loads and stores through dtype
     * switches */
    for (int64_t row = begin; row < end; ++row) {
      const float *x = (const float *)in->data + loom_nn_offset(in, row, skip);
      float *y = (float *)out->data + loom_nn_offset(out, row, skip);
      /* rows that lie side by side (a scan over dim 0 of a matrix) are
       * scanned SCAN_COLS at a time, each with its own accumulator: every
       * cache line read then serves them all */
      int64_t b = 1;
      while (b < SCAN_COLS && row + b < end &&
             loom_nn_offset(in, row + b, skip) == loom_nn_offset(in, row, skip) + b &&
             loom_nn_offset(out, row + b, skip) == loom_nn_offset(out, row, skip) + b)
        ++b;
      if (b > 1) {
        double acc[SCAN_COLS];
        for (int64_t j = 0; j < b; ++j) acc[j] = op == LOOM_SCAN_CUMPROD ? 1.0 : 0.0;
        for (int64_t k = 0; k < n; ++k) {
          const float *xk = x + k * is;
          float *yk = y + k * os;
          if (op == LOOM_SCAN_CUMSUM)
            for (int64_t j = 0; j < b; ++j) yk[j] = (float)(acc[j] += (double)xk[j]);
          else
            for (int64_t j = 0; j < b; ++j) yk[j] = (float)(acc[j] *= (double)xk[j]);
        }
        row += b - 1;
        continue;
      }
      double acc = op == LOOM_SCAN_CUMPROD ? 1.0 : 0.0;
      if (op == LOOM_SCAN_CUMSUM)
        for (int64_t k = 0; k < n; ++k) y[k * os] = (float)(acc += (double)x[k * is]);
      else
        for (int64_t k = 0; k < n; ++k) y[k * os] = (float)(acc *= (double)x[k * is]);
    }
    return LOOM_OK;
  }
  if ((op == LOOM_SCAN_CUMMAX || op == LOOM_SCAN_CUMMIN) && in->dtype == LOOM_FLOAT32 &&
      out->dtype == LOOM_FLOAT32 && (!idx->data || idx->dtype == LOOM_INT64)) {
    /* the general loop's choices on float32 values read and written as
     * they are: a NaN wins and stays, ties move the index on */
    const int max = op == LOOM_SCAN_CUMMAX;
    for (int64_t row = begin; row < end; ++row) {
      const float *x = (const float *)in->data + loom_nn_offset(in, row, skip);
      float *y = (float *)out->data + loom_nn_offset(out, row, skip);
      int64_t *ip = idx->data ? (int64_t *)idx->data + loom_nn_offset(idx, row, skip) : NULL;
      float best = 0.0f;
      int64_t best_i = 0;
      for (int64_t k = 0; k < n; ++k) {
        const float v = x[k * is];
        if (k == 0 || v != v || (best == best && (max ? v >= best : v <= best))) {
          best = v;
          best_i = k;
        }
        y[k * os] = best;
        if (ip) ip[k * xs] = best_i;
      }
    }
    return LOOM_OK;
  }
  for (int64_t row = begin; row < end; ++row) {
    const int64_t ib = loom_nn_offset(in, row, skip), ob = loom_nn_offset(out, row, skip);
    const int64_t xb = idx->data ? loom_nn_offset(idx, row, skip) : 0;
    double acc = op == LOOM_SCAN_CUMPROD ? 1.0 : op == LOOM_SCAN_LOGCUMSUMEXP ? -INFINITY : 0.0;
    uint64_t iacc = op == LOOM_SCAN_CUMPROD ? 1u : 0u;
    int64_t best_i = 0, ibest = 0;
    double best = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      int64_t xi = 0;
      double xf = 0.0;
      if (integral) xi = loom_nn_load_index(in->data, in->dtype, ib + k * is);
      else xf = loom_nn_load(in->data, in->dtype, ib + k * is);
      switch (op) {
        case LOOM_SCAN_CUMSUM:
          if (integral) iacc += (uint64_t)xi; else acc += xf;
          break;
        case LOOM_SCAN_CUMPROD:
          if (integral) iacc *= (uint64_t)xi; else acc *= xf;
          break;
        case LOOM_SCAN_LOGCUMSUMEXP: acc = scan_log_add_exp(xf, acc); break;
        default: { /* cummax / cummin: NaN wins and stays; ties move on */
          const int max = op == LOOM_SCAN_CUMMAX;
          if (k == 0) {
            best = xf; ibest = xi; best_i = 0;
          } else if (integral) {
            if (max ? xi >= ibest : xi <= ibest) { ibest = xi; best_i = k; }
          } else if (xf != xf || (best == best && (max ? xf >= best : xf <= best))) {
            best = xf; best_i = k;
          }
          if (idx->data) {
            int64_t *ip = (int64_t *)idx->data;
            ip[xb + k * xs] = best_i;
          }
          scan_store(out, ob + k * os, integral, best, ibest);
          continue;
        }
      }
      scan_store(out, ob + k * os, integral, acc, (int64_t)iacc);
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_scan_kernels[] = {
    {"scan.rows", loom_kernel_scan, NULL},
    {NULL, NULL, NULL},
};
