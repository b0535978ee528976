/* multi_margin_loss and multilabel_margin_loss, forward and backward: one row (sample) per launch
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

/* multilabel_margin_loss: a row's targets are its leading indices >= 0. */
static int ml_mark(const int64_t *tg, int64_t dim, void *is_target, int32_t dtype,
                   int64_t base) {
  for (int64_t d = 0; d < dim; ++d) loom_nn_store(is_target, dtype, base + d, 0.0);
  for (int64_t d = 0; d < dim; ++d) {
    if (tg[d] < 0) break;
    if (tg[d] >= dim) return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE, "target out of range");
    loom_nn_store(is_target, dtype, base + tg[d], 1.0);
  }
  return LOOM_OK;
}

#define ML_FORWARD(NAME, T)                                                           \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {         \
    const loom_tensor *x = &args->tensors[0], *target = &args->tensors[1];            \
    const loom_tensor *ist = &args->tensors[2], *out = &args->tensors[3];             \
    const int per_row = args->scalars[0].i != 0;                                      \
    const int mean = args->scalars[1].i == LOOM_REDUCTION_MEAN;                       \
    const int64_t nframe = x->sizes[0], dim = x->sizes[1];                            \
    double total = 0;                                                                 \
    if (!per_row && begin != 0) return LOOM_OK;                                       \
    for (int64_t row = per_row ? begin : 0; row < (per_row ? end : nframe); ++row) {  \
      const T *in = (const T *)x->data + row * dim;                                   \
      const int64_t *tg = (const int64_t *)target->data + row * dim;                  \
      const T *it = (const T *)ist->data + row * dim;                                 \
      const int st = ml_mark(tg, dim, ist->data, ist->dtype, row * dim);              \
      if (st != LOOM_OK) return st;                                                   \
      double sum = 0;                                                                 \
      for (int64_t dt = 0; dt < dim; ++dt) {                                          \
        if (tg[dt] < 0) break;                                                        \
        const T input_target = in[tg[dt]];                                            \
        for (int64_t d = 0; d < dim; ++d) {                                           \
          if (!it[d]) {                                                               \
            const T z = 1 - input_target + in[d];                                     \
            if (z > 0) sum += z;                                                      \
          }                                                                           \
        }                                                                             \
      }                                                                               \
      if (per_row) {                                                                  \
        T r = (T)sum;                                                                 \
        r /= (T)dim;                                                                  \
        ((T *)out->data)[row] = r;                                                    \
      } else {                                                                        \
        total += sum;                                                                 \
      }                                                                               \
    }                                                                                 \
    if (!per_row) {                                                                   \
      total /= (double)dim;                                                           \
      if (mean) total /= (double)nframe;                                              \
      ((T *)out->data)[0] = (T)total;                                                 \
    }                                                                                 \
    return LOOM_OK;                                                                   \
  }
ML_FORWARD(ml_forward_f32, float)
ML_FORWARD(ml_forward_f64, double)

int loom_multilabel_margin_loss_forward(const loom_kernel_args *args, int64_t begin,
                                        int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0];
  if (x->rank != 2 || args->tensors[1].dtype != LOOM_INT64 || args->tensors[2].dtype != x->dtype ||
      args->tensors[3].dtype != x->dtype)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (x->dtype == LOOM_FLOAT32) return ml_forward_f32(args, begin, end);
  if (x->dtype == LOOM_FLOAT64) return ml_forward_f64(args, begin, end);
  return LOOM_ERROR_NOT_SUPPORTED;
}

#define ML_BACKWARD(NAME, T)                                                          \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {         \
    const loom_tensor *go = &args->tensors[0], *x = &args->tensors[1];                \
    const loom_tensor *target = &args->tensors[2], *ist = &args->tensors[3];          \
    const loom_tensor *gi = &args->tensors[4];                                        \
    const T g = (T)args->scalars[0].f;                                                \
    const int per_row = args->scalars[1].i != 0;                                      \
    const int64_t dim = x->sizes[1];                                                  \
    for (int64_t row = begin; row < end; ++row) {                                     \
      const T *in = (const T *)x->data + row * dim;                                   \
      const int64_t *tg = (const int64_t *)target->data + row * dim;                  \
      const T *it = (const T *)ist->data + row * dim;                                 \
      T *gr = (T *)gi->data + row * dim;                                              \
      for (int64_t d = 0; d < dim; ++d) gr[d] = 0;                                    \
      for (int64_t dt = 0; dt < dim; ++dt) {                                          \
        const int64_t ti = tg[dt];                                                    \
        if (ti < 0) break;                                                            \
        if (ti >= dim)                                                                \
          return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE, "target out of range");    \
        const T input_target = in[ti];                                                \
        for (int64_t d = 0; d < dim; ++d) {                                           \
          if (!it[d]) {                                                               \
            const T z = 1 - input_target + in[d];                                     \
            if (z > 0) {                                                              \
              gr[ti] -= g;                                                            \
              gr[d] += g;                                                             \
            }                                                                         \
          }                                                                           \
        }                                                                             \
      }                                                                               \
      const T scale = ((const T *)go->data)[per_row ? row : 0];                       \
      for (int64_t d = 0; d < dim; ++d) gr[d] *= scale;                               \
    }                                                                                 \
    return LOOM_OK;                                                                   \
  }
ML_BACKWARD(ml_backward_f32, float)
ML_BACKWARD(ml_backward_f64, double)

int loom_multilabel_margin_loss_backward(const loom_kernel_args *args, int64_t begin,
                                         int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[1];
  if (x->rank != 2 || args->tensors[2].dtype != LOOM_INT64 || args->tensors[0].dtype != x->dtype ||
      args->tensors[3].dtype != x->dtype || args->tensors[4].dtype != x->dtype)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (x->dtype == LOOM_FLOAT32) return ml_backward_f32(args, begin, end);
  if (x->dtype == LOOM_FLOAT64) return ml_backward_f64(args, begin, end);
  return LOOM_ERROR_NOT_SUPPORTED;
}

const loom_kernel_entry loom_margin_loss_kernels[] = {
    {"multilabel_margin_loss.forward", loom_multilabel_margin_loss_forward, NULL},
    {"multilabel_margin_loss.backward", loom_multilabel_margin_loss_backward, NULL},
    {"multi_margin_loss.forward", loom_multi_margin_loss_forward, NULL},
    {"multi_margin_loss.backward", loom_multi_margin_loss_backward, NULL},
    {NULL, NULL, NULL},
};
