/* 3-d grid sampling (F.grid_sample of 5-d inputs). The typed bodies are in
 * grid_sample3d.inc; this file reads the arguments and picks the type. The
 * CPU's kernel is unfused scalar code: so is this one. */
#pragma GCC optimize("fp-contract=off")

#include "kernels/nn/grid_sample3d.h"

#include <math.h>

#include "kernels/nn/grid_sample.h"
#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* The mode (nearest, padding, align) is the 2-d sampler's. */
typedef gs_params g3_params;

/* Offset of (n, a, b, c, k = 0) in a grid (N, D, H, W, 3). */
static int64_t g3_at(const loom_tensor *t, int64_t n, int64_t a, int64_t b, int64_t c) {
  return n * t->strides[0] + a * t->strides[1] + b * t->strides[2] + c * t->strides[3];
}

/* Offset of (n, ch, z, y, x) in an (N, C, D, H, W) tensor. */
static int64_t g3_in(const loom_tensor *t, int64_t n, int64_t ch, int64_t z, int64_t y,
                     int64_t x) {
  return n * t->strides[0] + ch * t->strides[1] + z * t->strides[2] + y * t->strides[3] +
         x * t->strides[4];
}

static int g3_inside(const loom_tensor *in, int64_t z, int64_t y, int64_t x) {
  return z >= 0 && z < in->sizes[2] && y >= 0 && y < in->sizes[3] && x >= 0 && x < in->sizes[4];
}

#define T float
#define GN(name) g3_##name##_f
#define FLOOR floorf
#define FMOD fmodf
#define NEARBYINT nearbyintf
#include "kernels/nn/grid_sample3d.inc"
#undef T
#undef GN
#undef FLOOR
#undef FMOD
#undef NEARBYINT
#define T double
#define GN(name) g3_##name##_d
#define FLOOR floor
#define FMOD fmod
#define NEARBYINT nearbyint
#include "kernels/nn/grid_sample3d.inc"
#undef T
#undef GN
#undef FLOOR
#undef FMOD
#undef NEARBYINT

static int g3_read(const loom_kernel_args *args, g3_params *q, unsigned tensors) {
  const int rc = gs_read_params(args, q, tensors);
  if (rc) return rc;
  for (unsigned i = 0; i < tensors; ++i) {
    const loom_tensor *t = &args->tensors[i];
    if (t->data == NULL && i == 0 && tensors == 5) continue; /* grad_input not wanted */
    if (t->rank != 5 || !loom_nn_is_float(t->dtype)) return LOOM_ERROR_INVALID_ARGUMENT;
  }
  return 0;
}

int loom_kernel_grid_sample3d(const loom_kernel_args *args, int64_t begin, int64_t end) {
  g3_params q;
  int rc = g3_read(args, &q, 3);
  if (rc) return rc;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1], *grid = &args->tensors[2];
  if (grid->sizes[4] != 3 || out->sizes[1] != in->sizes[1]) return LOOM_ERROR_INVALID_ARGUMENT;
  if (in->dtype == LOOM_FLOAT64)
    g3_forward_d(out, in, grid, &q, begin, end);
  else
    g3_forward_f(out, in, grid, &q, begin, end);
  return LOOM_OK;
}

int loom_kernel_grid_sample3d_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  g3_params q;
  int rc = g3_read(args, &q, 5);
  if (rc) return rc;
  const loom_tensor *gi = &args->tensors[0], *gg = &args->tensors[1], *go = &args->tensors[2],
                    *in = &args->tensors[3], *grid = &args->tensors[4];
  if (gi->data && gi->dtype != LOOM_FLOAT32 && gi->dtype != LOOM_FLOAT64)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (grid->sizes[4] != 3 || gg->sizes[4] != 3) return LOOM_ERROR_INVALID_ARGUMENT;
  if (in->dtype == LOOM_FLOAT64)
    g3_backward_d(gi, gg, go, in, grid, &q, begin, end);
  else
    g3_backward_f(gi, gg, go, in, grid, &q, begin, end);
  return LOOM_OK;
}

const loom_kernel_entry loom_grid_sample3d_kernels[] = {
    {"grid_sample3d.forward", loom_kernel_grid_sample3d, NULL},
    {"grid_sample3d.backward", loom_kernel_grid_sample3d_backward, NULL},
    {NULL, NULL, NULL},
};
