/* Complex reductions and scans (loom/kernels/reduce_complex.h): the
 * product, all and any of complex elements over trailing dims, and the
 * cumulative sum and product along a dim. Each output (or row) is computed
 * by one call with its elements in a fixed order, so results never depend
 * on the chunking or the thread count. */
#include <stdint.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/kernels/reduce_complex.h"
#include "loom/status.h"

/* The parts of complex element `i` (in elements from base) as doubles. */
static inline void cx_load(const void *base, int32_t dtype, int64_t i, double *re,
                           double *im) {
  if (dtype == LOOM_COMPLEX64) {
    const float *p = (const float *)base + 2 * i;
    *re = p[0];
    *im = p[1];
  } else {
    const double *p = (const double *)base + 2 * i;
    *re = p[0];
    *im = p[1];
  }
}

static inline void cx_store(void *base, int32_t dtype, int64_t i, double re, double im) {
  if (dtype == LOOM_COMPLEX64) {
    float *p = (float *)base + 2 * i;
    p[0] = (float)re;
    p[1] = (float)im;
  } else {
    double *p = (double *)base + 2 * i;
    p[0] = re;
    p[1] = im;
  }
}

/* acc *= (c, d) as c10::complex's operator*= computes it. */
static inline void cx_mul(double *ar, double *ai, double c, double d) {
  const double a = *ar, b = *ai;
  *ar = a * c - b * d;
  *ai = a * d + b * c;
}

static int cx_is_complex(int32_t dtype) {
  return dtype == LOOM_COMPLEX64 || dtype == LOOM_COMPLEX128;
}

static int kernel_reduce_complex(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const int op = (int)args->scalars[0].i;
  const int64_t r = args->scalars[1].i;
  if (op != LOOM_REDUCE_COMPLEX_PROD && op != LOOM_REDUCE_COMPLEX_ALL &&
      op != LOOM_REDUCE_COMPLEX_ANY)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (!cx_is_complex(in->dtype) || r < 0 || in->rank != out->rank + r ||
      in->rank > LOOM_MAX_DIMS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (op == LOOM_REDUCE_COMPLEX_PROD ? !cx_is_complex(out->dtype) : out->dtype != LOOM_BOOL)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int32_t d = 0; d < out->rank; ++d)
    if (in->sizes[d] != out->sizes[d]) return LOOM_ERROR_INVALID_ARGUMENT;
  const int32_t k = out->rank;
  int64_t count = 1;
  for (int32_t d = k; d < in->rank; ++d) count *= in->sizes[d];
  if (count > 0 && !in->data) return LOOM_ERROR_INVALID_ARGUMENT;
  for (int64_t o = begin; o < end; ++o) {
    /* the output's offsets in out and in */
    int64_t oo = 0, io = 0, rest = o;
    for (int32_t d = k - 1; d >= 0; --d) {
      const int64_t i = rest % out->sizes[d];
      rest /= out->sizes[d];
      oo += i * out->strides[d];
      io += i * in->strides[d];
    }
    double pr = 1.0, pi = 0.0;
    int all = 1, any = 0;
    int64_t idx[LOOM_MAX_DIMS] = {0};
    int64_t off = io;
    for (int64_t e = 0; e < count; ++e) {
      double re, im;
      cx_load(in->data, in->dtype, off, &re, &im);
      if (op == LOOM_REDUCE_COMPLEX_PROD) {
        cx_mul(&pr, &pi, re, im);
      } else {
        const int nz = re != 0.0 || im != 0.0;
        all &= nz;
        any |= nz;
      }
      /* the next element in row-major order over the reduced dims */
      for (int32_t d = in->rank - 1; d >= k; --d) {
        off += in->strides[d];
        if (++idx[d] < in->sizes[d]) break;
        off -= idx[d] * in->strides[d];
        idx[d] = 0;
      }
    }
    if (op == LOOM_REDUCE_COMPLEX_PROD)
      cx_store(out->data, out->dtype, oo, pr, pi);
    else
      ((uint8_t *)out->data)[oo] = (uint8_t)(op == LOOM_REDUCE_COMPLEX_ALL ? all : any);
  }
  return LOOM_OK;
}

static int kernel_scan_complex(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const int op = (int)args->scalars[0].i;
  const int32_t dim = (int32_t)args->scalars[1].i;
  if (op != LOOM_REDUCE_COMPLEX_CUMSUM && op != LOOM_REDUCE_COMPLEX_CUMPROD)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (!cx_is_complex(in->dtype) || !cx_is_complex(out->dtype) || in->rank != out->rank ||
      (in->rank > 0 && (dim < 0 || dim >= in->rank)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int32_t d = 0; d < in->rank; ++d)
    if (in->sizes[d] != out->sizes[d]) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t n = in->rank ? in->sizes[dim] : 1;
  const int64_t is = in->rank ? in->strides[dim] : 0, os = out->rank ? out->strides[dim] : 0;
  const int32_t skip = in->rank ? dim : -1;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t ib = loom_nn_offset(in, row, skip), ob = loom_nn_offset(out, row, skip);
    double ar = op == LOOM_REDUCE_COMPLEX_CUMPROD ? 1.0 : 0.0, ai = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double re, im;
      cx_load(in->data, in->dtype, ib + j * is, &re, &im);
      if (op == LOOM_REDUCE_COMPLEX_CUMSUM) {
        ar += re;
        ai += im;
      } else {
        cx_mul(&ar, &ai, re, im);
      }
      cx_store(out->data, out->dtype, ob + j * os, ar, ai);
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_reduce_complex_kernels[] = {
    {"reduce.complex", kernel_reduce_complex, NULL},
    {"scan.complex_rows", kernel_scan_complex, NULL},
    {NULL, NULL, NULL},
};
