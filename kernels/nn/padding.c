/* Reflection and replication padding: every output element reads (or, in
 * the backward, adds into) one input element. */
#include "kernels/nn/padding.h"

#include <string.h>

#include "kernels/base/copy.h"
#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

static int64_t pad_source(int mode, int64_t o, int64_t before, int64_t in) {
  int64_t i = o - before;
  if (mode == LOOM_PAD_REPLICATE) return i < 0 ? 0 : (i >= in ? in - 1 : i);
  if (i < 0) i = -i;
  if (i >= in) i = 2 * (in - 1) - i;
  return i;
}

static int pad_check(const loom_kernel_args *args) {
  if (args->num_tensors != 2 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *b = &args->tensors[1];
  const int mode = (int)args->scalars[0].i;
  if (a->rank != 5 || b->rank != 5 || a->dtype != b->dtype || a->sizes[0] != b->sizes[0] ||
      a->sizes[1] != b->sizes[1] || (mode != LOOM_PAD_REFLECT && mode != LOOM_PAD_REPLICATE))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

/* Offset of plane p of an (N, C, D, H, W) tensor. */
static int64_t pad_plane(const loom_tensor *t, int64_t p) {
  return (p / t->sizes[1]) * t->strides[0] + (p % t->sizes[1]) * t->strides[1];
}

int loom_kernel_padding(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int rc = pad_check(args);
  if (rc) return rc;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const int mode = (int)args->scalars[0].i;
  const int64_t es = loom_dtype_size(out->dtype), before = args->scalars[3].i;
  const int64_t ow = out->sizes[4], iw = in->sizes[4];
  const int64_t os = out->strides[4] * es, is = in->strides[4] * es;
  /* each output row: the input row's run in the middle, its reflected or
   * repeated elements at the ends */
  const int64_t lo = before < 0 ? 0 : before, hi = before + iw < ow ? before + iw : ow;
  for (int64_t p = begin; p < end; ++p)
    for (int64_t d = 0; d < out->sizes[2]; ++d) {
      const int64_t sd = pad_source(mode, d, args->scalars[1].i, in->sizes[2]);
      for (int64_t h = 0; h < out->sizes[3]; ++h) {
        const int64_t sh = pad_source(mode, h, args->scalars[2].i, in->sizes[3]);
        char *o = (char *)out->data + (pad_plane(out, p) + d * out->strides[2] + h * out->strides[3]) * es;
        const char *x = (const char *)in->data + (pad_plane(in, p) + sd * in->strides[2] + sh * in->strides[3]) * es;
        for (int64_t w = 0; w < lo; ++w)
          memcpy(o + w * os, x + pad_source(mode, w, before, iw) * is, (size_t)es);
        if (hi > lo) loom_move_run(o + lo * os, os, x + (lo - before) * is, is, hi - lo, es);
        for (int64_t w = hi > lo ? hi : lo; w < ow; ++w)
          memcpy(o + w * os, x + pad_source(mode, w, before, iw) * is, (size_t)es);
      }
    }
  return LOOM_OK;
}

int loom_kernel_padding_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int rc = pad_check(args);
  if (rc) return rc;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1];
  if (!loom_nn_is_float(gi->dtype)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int mode = (int)args->scalars[0].i;
  for (int64_t p = begin; p < end; ++p) {
    const int64_t gp = pad_plane(gi, p), op = pad_plane(go, p);
    for (int64_t d = 0; d < gi->sizes[2]; ++d)
      for (int64_t h = 0; h < gi->sizes[3]; ++h) {
        const int64_t row = gp + d * gi->strides[2] + h * gi->strides[3];
        for (int64_t w = 0; w < gi->sizes[4]; ++w)
          loom_nn_store(gi->data, gi->dtype, row + w * gi->strides[4], 0.0);
      }
    for (int64_t d = 0; d < go->sizes[2]; ++d) {
      const int64_t sd = pad_source(mode, d, args->scalars[1].i, gi->sizes[2]);
      for (int64_t h = 0; h < go->sizes[3]; ++h) {
        const int64_t sh = pad_source(mode, h, args->scalars[2].i, gi->sizes[3]);
        const int64_t grow = gp + sd * gi->strides[2] + sh * gi->strides[3];
        const int64_t orow = op + d * go->strides[2] + h * go->strides[3];
        for (int64_t w = 0; w < go->sizes[4]; ++w) {
          const int64_t sw = pad_source(mode, w, args->scalars[3].i, gi->sizes[4]);
          const int64_t o = grow + sw * gi->strides[4];
          /* (float) first: the CPU adds 16-bit floats in float */
          const double sum = loom_nn_load(gi->data, gi->dtype, o) +
                             loom_nn_load(go->data, go->dtype, orow + w * go->strides[4]);
          loom_nn_store(gi->data, gi->dtype, o, gi->dtype == LOOM_FLOAT64 ? sum : (double)(float)sum);
        }
      }
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_padding_kernels[] = {
    {"padding.forward", loom_kernel_padding, NULL},
    {"padding.backward", loom_kernel_padding_backward, NULL},
    {NULL, NULL, NULL},
};
