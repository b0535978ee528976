/* Bicubic 2-d, trilinear 3-d and anti-aliased 2-d resampling, forward and
 * backward, one (N, C) plane per launch item. The typed arithmetic is in
 * upsample_nd.inc (float for float32 and the 16-bit floats, double for
 * float64); this file reads the arguments and picks the type. */
/* Only the products FMA() names are fused: every build rounds the same. */
#pragma GCC optimize("fp-contract=off")

#include "kernels/nn/upsample_nd.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

typedef struct un_params {
  int align, filter, axis;
  double scale[3]; /* depth, height, width */
} un_params;

static int64_t un_at4(const loom_tensor *t, int64_t p, int64_t y, int64_t x) {
  return (p / t->sizes[1]) * t->strides[0] + (p % t->sizes[1]) * t->strides[1] +
         y * t->strides[2] + x * t->strides[3];
}

static int64_t un_at5(const loom_tensor *t, int64_t p, int64_t z, int64_t y, int64_t x) {
  return (p / t->sizes[1]) * t->strides[0] + (p % t->sizes[1]) * t->strides[1] +
         z * t->strides[2] + y * t->strides[3] + x * t->strides[4];
}

/* Zeroes plane p of a 4-d or 5-d gradient. */
static void un_zero_plane(const loom_tensor *t, int64_t p) {
  const int r = t->rank;
  const int64_t d = r == 5 ? t->sizes[2] : 1, h = t->sizes[r - 2], w = t->sizes[r - 1];
  for (int64_t z = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        loom_nn_store(t->data, t->dtype,
                      r == 5 ? un_at5(t, p, z, y, x) : un_at4(t, p, y, x), 0.0);
}

#define T float
#define UN(name) un_##name##_f
#define FMA fmaf
#include "kernels/nn/upsample_nd.inc"
#undef T
#undef UN
#undef FMA
#define T double
#define UN(name) un_##name##_d
#define FMA fma
#include "kernels/nn/upsample_nd.inc"
#undef T
#undef UN
#undef FMA

/* Arguments of every kernel here: two tensors of `rank` dims, same N and
 * C, float dtypes (a gradient float32 or float64). */
static int un_read(const loom_kernel_args *args, un_params *q, int rank, int backward) {
  if (args->num_tensors != 2 || args->num_scalars < LOOM_UPSAMPLE_ND_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  q->align = args->scalars[0].i != 0;
  q->filter = (int)args->scalars[1].i;
  q->axis = (int)args->scalars[2].i;
  for (int i = 0; i < 3; ++i) q->scale[i] = args->scalars[3 + i].f;
  const loom_tensor *a = &args->tensors[0], *b = &args->tensors[1];
  if (a->rank != rank || b->rank != rank || a->sizes[0] != b->sizes[0] ||
      a->sizes[1] != b->sizes[1] || !loom_nn_is_float(a->dtype) || !loom_nn_is_float(b->dtype) ||
      (q->filter != LOOM_UPSAMPLE_FILTER_LINEAR && q->filter != LOOM_UPSAMPLE_FILTER_CUBIC))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (backward && a->dtype != LOOM_FLOAT32 && a->dtype != LOOM_FLOAT64)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int d = 2; d < rank; ++d)
    if (a->sizes[d] < 1 || b->sizes[d] < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

/* The arithmetic's type: the gradient's for a backward, else the input's. */
#define UN_DISPATCH(rank, backward, name)                                              \
  un_params q;                                                                         \
  int rc = un_read(args, &q, rank, backward);                                          \
  if (rc) return rc;                                                                   \
  const loom_tensor *t0 = &args->tensors[0], *t1 = &args->tensors[1];                  \
  if ((backward ? t0 : t1)->dtype == LOOM_FLOAT64)                                     \
    un_##name##_d(t0, t1, &q, begin, end);                                             \
  else                                                                                 \
    un_##name##_f(t0, t1, &q, begin, end);                                             \
  return LOOM_OK;

int loom_kernel_upsample_bicubic2d(const loom_kernel_args *args, int64_t begin, int64_t end) {
  UN_DISPATCH(4, 0, bicubic_forward)
}

int loom_kernel_upsample_bicubic2d_backward(const loom_kernel_args *args, int64_t begin,
                                            int64_t end) {
  UN_DISPATCH(4, 1, bicubic_backward)
}

int loom_kernel_upsample_trilinear3d(const loom_kernel_args *args, int64_t begin, int64_t end) {
  UN_DISPATCH(5, 0, trilinear_forward)
}

int loom_kernel_upsample_trilinear3d_backward(const loom_kernel_args *args, int64_t begin,
                                              int64_t end) {
  UN_DISPATCH(5, 1, trilinear_backward)
}

int loom_kernel_upsample_aa_pass(const loom_kernel_args *args, int64_t begin, int64_t end) {
  un_params q;
  int rc = un_read(args, &q, 4, 0);
  if (rc) return rc;
  const loom_tensor *o = &args->tensors[0], *i = &args->tensors[1];
  const int other = q.axis == 2 ? 3 : 2;
  if ((q.axis != 2 && q.axis != 3) || o->sizes[other] != i->sizes[other])
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (i->dtype == LOOM_FLOAT64)
    un_aa_pass_d(o, i, &q, begin, end);
  else
    un_aa_pass_f(o, i, &q, begin, end);
  return LOOM_OK;
}

int loom_kernel_upsample_aa_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  UN_DISPATCH(4, 1, aa_backward)
}
#undef UN_DISPATCH

const loom_kernel_entry loom_upsample_nd_kernels[] = {
    {"upsample.bicubic2d.forward", loom_kernel_upsample_bicubic2d, NULL},
    {"upsample.bicubic2d.backward", loom_kernel_upsample_bicubic2d_backward, NULL},
    {"upsample.trilinear3d.forward", loom_kernel_upsample_trilinear3d, NULL},
    {"upsample.trilinear3d.backward", loom_kernel_upsample_trilinear3d_backward, NULL},
    {"upsample.aa.pass", loom_kernel_upsample_aa_pass, NULL},
    {"upsample.aa.backward", loom_kernel_upsample_aa_backward, NULL},
    {NULL, NULL, NULL},
};
