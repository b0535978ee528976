/* multi_margin_loss forward and backward: one row (sample) per launch
 * item, in the CPU's arithmetic (the row's sum in the input dtype, the
 * reduction over rows in double, in row order). Contracts in
 * loom/kernels/loss.h. */
#include "kernels/nn/loss_margin.h"

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/kernels/loss.h"
#include "loom/status.h"

static int mm_target(const loom_tensor *target, int64_t row, int64_t dim, int64_t *idx) {
  const int64_t t = loom_nn_load_index(target->data, target->dtype, row);
  if (t < 0 || t >= dim)
    return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE, "target out of range");
  *idx = t;
  return LOOM_OK;
}

/* The row sums for T = float and double. */
#define MM_FORWARD(NAME, T)                                                           \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {         \
    const loom_tensor *x = &args->tensors[0], *target = &args->tensors[1];            \
    const loom_tensor *w = &args->tensors[2], *out = &args->tensors[3];               \
    const int p = (int)args->scalars[0].i;                                            \
    const T margin = (T)args->scalars[1].f;                                           \
    const int64_t dim = x->sizes[1];                                                  \
    const T *wd = (const T *)w->data;                                                 \
    for (int64_t row = begin; row < end; ++row) {                                     \
      const T *in = (const T *)x->data + row * dim;                                   \
      int64_t ti;                                                                     \
      const int st = mm_target(target, row, dim, &ti);                                \
      if (st != LOOM_OK) return st;                                                   \
      const T input_target = in[ti];                                                  \
      T sum = 0;                                                                      \
      for (int64_t d = 0; d < dim; ++d) {                                             \
        if (d == ti) continue;                                                        \
        const T z = margin - input_target + in[d];                                    \
        if (z > 0) {                                                                  \
          T h = p == 1 ? z : z * z;                                                   \
          if (wd) h *= wd[ti];                                                        \
          sum += h;                                                                   \
        }                                                                             \
      }                                                                               \
      sum /= (T)dim;                                                                  \
      if (out->dtype == LOOM_FLOAT64) ((double *)out->data)[row] = (double)sum;       \
      else ((T *)out->data)[row] = sum;                                               \
    }                                                                                 \
    return LOOM_OK;                                                                   \
  }
MM_FORWARD(mm_forward_f32, float)
MM_FORWARD(mm_forward_f64, double)

int loom_multi_margin_loss_forward(const loom_kernel_args *args, int64_t begin,
                                   int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0];
  if (x->rank != 2 || args->tensors[3].rank < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  if (x->dtype == LOOM_FLOAT32) return mm_forward_f32(args, begin, end);
  if (x->dtype == LOOM_FLOAT64) return mm_forward_f64(args, begin, end);
  return LOOM_ERROR_NOT_SUPPORTED;
}

#define MM_BACKWARD(NAME, T)                                                          \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {         \
    const loom_tensor *go = &args->tensors[0], *x = &args->tensors[1];                \
    const loom_tensor *target = &args->tensors[2], *w = &args->tensors[3];            \
    const loom_tensor *gi = &args->tensors[4];                                        \
    const int p = (int)args->scalars[0].i;                                            \
    const T margin = (T)args->scalars[1].f, g = (T)args->scalars[2].f;                \
    const int per_row = args->scalars[3].i != 0;                                      \
    const int64_t dim = x->sizes[1];                                                  \
    const T *wd = (const T *)w->data;                                                 \
    for (int64_t row = begin; row < end; ++row) {                                     \
      const T *in = (const T *)x->data + row * dim;                                   \
      T *gr = (T *)gi->data + row * dim;                                              \
      int64_t ti;                                                                     \
      const int st = mm_target(target, row, dim, &ti);                                \
      if (st != LOOM_OK) return st;                                                   \
      const T input_target = in[ti];                                                  \
      T grad_target = 0;                                                              \
      for (int64_t d = 0; d < dim; ++d) {                                             \
        const T z = margin - input_target + in[d];                                    \
        if (d == ti) continue;                                                        \
        if (z > 0) {                                                                  \
          T h = p == 1 ? g : 2 * g * z;                                               \
          if (wd) h *= wd[ti];                                                        \
          grad_target -= h;                                                           \
          gr[d] = h;                                                                  \
        } else {                                                                      \
          gr[d] = 0;                                                                  \
        }                                                                             \
      }                                                                               \
      gr[ti] = grad_target;                                                           \
      const T scale = ((const T *)go->data)[per_row ? row : 0];                       \
      for (int64_t d = 0; d < dim; ++d) gr[d] *= scale;                               \
    }                                                                                 \
    return LOOM_OK;                                                                   \
  }
MM_BACKWARD(mm_backward_f32, float)
MM_BACKWARD(mm_backward_f64, double)

int loom_multi_margin_loss_backward(const loom_kernel_args *args, int64_t begin,
                                    int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[1];
  if (x->rank != 2 || args->tensors[4].dtype != x->dtype || args->tensors[0].dtype != x->dtype)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (x->dtype == LOOM_FLOAT32) return mm_backward_f32(args, begin, end);
  if (x->dtype == LOOM_FLOAT64) return mm_backward_f64(args, begin, end);
  return LOOM_ERROR_NOT_SUPPORTED;
}

const loom_kernel_entry loom_margin_loss_kernels[] = {
    {"multi_margin_loss.forward", loom_multi_margin_loss_forward, NULL},
    {"multi_margin_loss.backward", loom_multi_margin_loss_backward, NULL},
    {NULL, NULL, NULL},
};
