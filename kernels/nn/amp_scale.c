/* Gradient scaling (torch.amp.GradScaler): the unscale with its inf/NaN
 * check, and the scale update. Float arithmetic exactly as PyTorch's CPU
 * and CUDA kernels do it, so that a loom run skips the same steps and
 * keeps the same scale as theirs. */
#include "kernels/nn/amp_scale.h"

#include <float.h>
#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* inf or NaN: NaN compares false, and no branch keeps the loops vectorized. */
static inline int nonfinite_f(float v) { return !(fabsf(v) <= FLT_MAX); }
static inline int nonfinite_d(double v) { return !(fabs(v) <= DBL_MAX); }

/* Element i of the chunk: the dense case indexes directly. */
static inline int64_t elem(const loom_tensor *t, int dense, int64_t i) {
  return dense ? i : loom_nn_offset(t, i, -1);
}

static int unscale_f32(const loom_tensor *g, int dense, int64_t begin, int64_t end,
                       float s) {
  float *restrict x = g->data;
  int bad = 0;
  if (dense && s == 1.0f) {
    for (int64_t i = begin; i < end; ++i) bad |= nonfinite_f(x[i]);
  } else if (dense) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      bad |= nonfinite_f(v);
      x[i] = v * s;
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      float *p = x + elem(g, 0, i);
      bad |= nonfinite_f(*p);
      if (s != 1.0f) *p *= s;
    }
  }
  return bad;
}

static int unscale_f64(const loom_tensor *g, int dense, int64_t begin, int64_t end,
                       float s) {
  double *restrict x = g->data;
  const double sd = s; /* PyTorch multiplies doubles by the float scale widened */
  int bad = 0;
  for (int64_t i = begin; i < end; ++i) {
    double *p = x + elem(g, dense, i);
    bad |= nonfinite_d(*p);
    if (s != 1.0f) *p *= sd;
  }
  return bad;
}

/* fp16 and bf16: widened to float, checked, multiplied in float, rounded
 * back (to nearest even); with a scale of 1 the element is left as it is,
 * which is what the round trip gives for every finite value. */
static int unscale_half(const loom_tensor *g, int dense, int64_t begin, int64_t end,
                        float s) {
  uint16_t *restrict x = g->data;
  const int bf16 = g->dtype == LOOM_BFLOAT16;
  int bad = 0;
  for (int64_t i = begin; i < end; ++i) {
    uint16_t *p = x + elem(g, dense, i);
    const float v = bf16 ? loom_bf16_to_f32(*p) : loom_f16_to_f32(*p);
    bad |= nonfinite_f(v);
    if (s != 1.0f) *p = bf16 ? loom_f32_to_bf16(v * s) : loom_f32_to_f16(v * s);
  }
  return bad;
}

static int is_scalar_f32(const loom_tensor *t) {
  return t->data && t->dtype == LOOM_FLOAT32 && loom_nn_numel(t) == 1;
}

int loom_amp_check_and_unscale(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *g = &args->tensors[0], *found = &args->tensors[1],
                    *inv = &args->tensors[2];
  if (!is_scalar_f32(found) || !is_scalar_f32(inv))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "amp.check_and_unscale: found_inf and inv_scale must be "
                      "one-element float32 tensors");
  const float s = *(const float *)inv->data;
  const int dense = loom_nn_dense_from(g, 0);
  int bad;
  switch (g->dtype) {
    case LOOM_FLOAT32: bad = unscale_f32(g, dense, begin, end, s); break;
    case LOOM_FLOAT64: bad = unscale_f64(g, dense, begin, end, s); break;
    case LOOM_FLOAT16:
    case LOOM_BFLOAT16: bad = unscale_half(g, dense, begin, end, s); break;
    default:
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "amp.check_and_unscale: gradients must be floating point");
  }
  if (bad) {
    /* Other chunks may store at the same time; all store 1.0. */
    float one = 1.0f;
    __atomic_store((float *)found->data, &one, __ATOMIC_RELAXED);
  }
  return LOOM_OK;
}

int loom_amp_update_scale(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *scale_t = &args->tensors[0], *tracker_t = &args->tensors[1],
                    *found_t = &args->tensors[2];
  if (!is_scalar_f32(scale_t) || !is_scalar_f32(found_t) || !tracker_t->data ||
      tracker_t->dtype != LOOM_INT32 || loom_nn_numel(tracker_t) != 1)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "amp.update_scale: scale and found_inf must be one-element "
                      "float32 tensors, growth_tracker a one-element int32 tensor");
  if (begin > 0 || end < 1) return LOOM_OK;
  const double growth = args->scalars[0].f, backoff = args->scalars[1].f;
  const int64_t interval = args->scalars[2].i;
  float *scale = scale_t->data;
  int32_t *tracker = tracker_t->data;
  if (*(const float *)found_t->data != 0.0f) { /* NaN counts as found */
    *scale = (float)((double)*scale * backoff);
    *tracker = 0;
    return LOOM_OK;
  }
  /* The step succeeded. The increment wraps like PyTorch's int arithmetic
   * does in practice, without its overflow. */
  const int32_t successful = (int32_t)((uint32_t)*tracker + 1u);
  if ((int64_t)successful == interval) {
    const float grown = (float)((double)*scale * growth);
    if (isfinite(grown)) *scale = grown; /* never grow to inf */
    *tracker = 0;
  } else {
    *tracker = successful;
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_amp_scale_kernels[] = {
    {"amp.check_and_unscale", loom_amp_check_and_unscale, NULL},
    {"amp.update_scale", loom_amp_update_scale, NULL},
    {NULL, NULL, NULL},
};
