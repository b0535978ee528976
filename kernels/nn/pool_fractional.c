/* Fractional max pooling's forward (contract in
 * loom/kernels/pool_fractional.h): each plane's window starts from its
 * random samples by the CPU's generate_intervals, in the input's float
 * type, and the windows' maxima (NaN wins, the first of equals stays) as
 * the CPU's loop finds them. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/kernels/pool_fractional.h"
#include "loom/status.h"

int loom_kernel_pool_fractional_max(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Start of output window i of `out` over `in` inputs with windows of
 * `pool`, given the plane's sample, in float (wide = 0) or double. */
static int64_t pf_start(double sample, int wide, int64_t in, int64_t out, int64_t pool,
                        int64_t i) {
  if (i == out - 1) return in - pool;
  if (wide) {
    const double alpha = (double)(in - pool) / (double)(out - 1);
    return (int64_t)(int)(((double)i + sample) * alpha) - (int64_t)(int)(sample * alpha);
  }
  const float s = (float)sample, alpha = (float)(in - pool) / (float)(out - 1);
  return (int64_t)(int)(((float)i + s) * alpha) - (int64_t)(int)(s * alpha);
}

static int64_t pf_at(const loom_tensor *t, int64_t p, int64_t z, int64_t y, int64_t x) {
  return (p / t->sizes[1]) * t->strides[0] + (p % t->sizes[1]) * t->strides[1] +
         z * t->strides[2] + y * t->strides[3] + x * t->strides[4];
}

int loom_kernel_pool_fractional_max(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 4 || args->num_scalars < LOOM_POOL_FRACTIONAL_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *ind = &args->tensors[1], *in = &args->tensors[2],
                    *smp = &args->tensors[3];
  const int dims = (int)args->scalars[0].i;
  const int64_t k[3] = {args->scalars[1].i, args->scalars[2].i, args->scalars[3].i};
  if ((dims != 2 && dims != 3) || out->rank != 5 || ind->rank != 5 || in->rank != 5 ||
      smp->rank != 3 || ind->dtype != LOOM_INT64 || !loom_nn_is_float(in->dtype) ||
      !loom_nn_is_float(out->dtype) || !loom_nn_is_float(smp->dtype) || smp->sizes[2] != dims ||
      (dims == 2 && k[0] != 1))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t it = in->sizes[2], ih = in->sizes[3], iw = in->sizes[4];
  const int64_t ot = out->sizes[2], oh = out->sizes[3], ow = out->sizes[4];
  const int64_t isz[3] = {it, ih, iw}, osz[3] = {ot, oh, ow};
  for (int a = 0; a < 3; ++a)
    if (k[a] < 0 || osz[a] < 1 || osz[a] + k[a] - 1 > isz[a]) return LOOM_ERROR_INVALID_ARGUMENT;
  const int wide = in->dtype == LOOM_FLOAT64;
  for (int64_t p = begin; p < end; ++p) {
    const int64_t sb = (p / smp->sizes[1]) * smp->strides[0] + (p % smp->sizes[1]) * smp->strides[1];
    double s[3] = {0, 0, 0}; /* time, height, width */
    for (int a = 0; a < dims; ++a) {
      const double v = loom_nn_load(smp->data, smp->dtype, sb + a * smp->strides[2]);
      s[dims == 3 ? a : 2 - a] = v;
    }
    for (int64_t z = 0; z < ot; ++z) {
      const int64_t z0 = dims == 3 ? pf_start(s[0], wide, it, ot, k[0], z) : 0;
      for (int64_t y = 0; y < oh; ++y) {
        const int64_t y0 = pf_start(s[1], wide, ih, oh, k[1], y);
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t x0 = pf_start(s[2], wide, iw, ow, k[2], x);
          double best = -INFINITY;
          int64_t at = (z0 * ih + y0) * iw + x0;
          for (int64_t c = z0; c < z0 + k[0]; ++c)
            for (int64_t b = y0; b < y0 + k[1]; ++b)
              for (int64_t a = x0; a < x0 + k[2]; ++a) {
                const double v = loom_nn_load(in->data, in->dtype, pf_at(in, p, c, b, a));
                if (v > best || isnan(v)) {
                  best = v;
                  at = (c * ih + b) * iw + a;
                }
              }
          loom_nn_store(out->data, out->dtype, pf_at(out, p, z, y, x), best);
          ((int64_t *)ind->data)[pf_at(ind, p, z, y, x)] = at;
        }
      }
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_pool_fractional_kernels[] = {
    {"pool.fractional_max.forward", loom_kernel_pool_fractional_max, NULL},
    {NULL, NULL, NULL},
};
