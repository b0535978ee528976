/* Resampling with the CPU backend's index and weight arithmetic: source
 * indices in float (nearest always, linear for float32 and the 16-bit
 * floats), linear weights in the opmath type and, where the CPU's generic
 * kernel stores them so, rounded to the tensor's dtype in the forward. */
#include "kernels/nn/upsample.h"

#include <math.h>
#include <string.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "kernels/nn/upsample_rows.h"
#include "base/cpu.h"
#include "loom/status.h"

typedef struct us_params {
  int mode, dims, align, round_weights;
  double scale[2];
} us_params;

/* One output coordinate's sources along an axis and their weights. */
typedef struct us_tap {
  int64_t i0, i1;
  double l0, l1;
} us_tap;

static int64_t us_nearest(const us_params *q, int axis, int64_t dst, int64_t in, int64_t out) {
  const int exact = q->mode == LOOM_UPSAMPLE_NEAREST_EXACT;
  if (!exact && out == in) return dst;
  if (!exact && out == 2 * in) return dst >> 1;
  const float scale = q->scale[axis] > 0 ? (float)(1.0 / q->scale[axis]) : (float)in / (float)out;
  const float f = exact ? (float)(((double)dst + 0.5) * (double)scale) : (float)dst * scale;
  const int64_t s = (int64_t)floorf(f);
  return s < in - 1 ? s : in - 1;
}

/* Linear taps in float (wide = 0) or double; `store` rounds the weights to
 * the dtype the CPU keeps them in. */
static us_tap us_linear(const us_params *q, int axis, int64_t dst, int64_t in, int64_t out,
                        int wide, int32_t store) {
  us_tap t = {dst, dst, 1.0, 0.0};
  if (out == in) return t;
  double real;
  if (wide) {
    const double scale = q->align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                                  : (q->scale[axis] > 0 ? 1.0 / q->scale[axis]
                                                        : (double)in / (double)out);
    real = q->align ? scale * (double)dst : fma(scale, (double)dst + 0.5, -0.5);
    if (!q->align && real < 0) real = 0;
  } else {
    const float scale = q->align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                                 : (q->scale[axis] > 0 ? (float)(1.0 / q->scale[axis])
                                                       : (float)in / (float)out);
    float r = q->align ? scale * (float)dst : fmaf(scale, (float)dst + 0.5f, -0.5f);
    if (!q->align && r < 0) r = 0;
    real = r;
  }
  int64_t i0 = (int64_t)floorf((float)real);
  if (i0 > in - 1) i0 = in - 1;
  double l1 = wide ? real - (double)i0 : (double)((float)real - (float)i0);
  l1 = l1 < 0 ? 0 : (l1 > 1 ? 1 : l1);
  t.i0 = i0;
  t.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  if (store == LOOM_FLOAT64) {
    t.l1 = l1;
    t.l0 = 1.0 - l1;
  } else { /* float, or a 16-bit float rounded from float */
    float f1 = (float)l1;
    if (store == LOOM_BFLOAT16) f1 = loom_bf16_to_f32(loom_f32_to_bf16(f1));
    if (store == LOOM_FLOAT16) f1 = loom_f16_to_f32(loom_f32_to_f16(f1));
    float f0 = 1.0f - f1;
    if (store == LOOM_BFLOAT16) f0 = loom_bf16_to_f32(loom_f32_to_bf16(f0));
    if (store == LOOM_FLOAT16) f0 = loom_f16_to_f32(loom_f32_to_f16(f0));
    t.l0 = f0;
    t.l1 = f1;
  }
  return t;
}

static int us_read(const loom_kernel_args *args, us_params *q) {
  if (args->num_tensors != 2 || args->num_scalars < LOOM_UPSAMPLE_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  q->mode = (int)args->scalars[0].i;
  q->dims = (int)args->scalars[1].i;
  q->align = args->scalars[2].i != 0;
  q->scale[0] = args->scalars[3].f;
  q->scale[1] = args->scalars[4].f;
  q->round_weights = args->num_scalars > 5 && args->scalars[5].i != 0;
  const loom_tensor *a = &args->tensors[0], *b = &args->tensors[1];
  if (q->mode < LOOM_UPSAMPLE_NEAREST || q->mode > LOOM_UPSAMPLE_LINEAR || q->dims < 1 ||
      q->dims > 2 || a->rank != 4 || b->rank != 4 || a->sizes[0] != b->sizes[0] ||
      a->sizes[1] != b->sizes[1] || !loom_nn_is_float(a->dtype) || !loom_nn_is_float(b->dtype) ||
      (q->dims == 1 && (a->sizes[2] != 1 || b->sizes[2] != 1)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}


/* Widest (and tallest) output whose taps the float32 linear path keeps on
 * the stack. */
#define US_MAX_ROW 2048

/* The linear forward of float32 planes, with the general loop's
 * arithmetic: the taps computed once per call, the rows in
 * kernels/upsample_rows.c. */
static void us_linear_f32(const us_params *q, const loom_tensor *out, const loom_tensor *in,
                          int64_t begin, int64_t end) {
  const int64_t oh = out->sizes[2], ow = out->sizes[3], ih = in->sizes[2], iw = in->sizes[3];
  loom_us_tap xt[US_MAX_ROW], yt[US_MAX_ROW];
  for (int64_t x = 0; x < ow; ++x) {
    const us_tap t = us_linear(q, 1, x, iw, ow, 0, LOOM_FLOAT32);
    xt[x] = (loom_us_tap){t.i0, t.i1, (float)t.l0, (float)t.l1};
  }
  for (int64_t y = 0; y < oh; ++y) {
    const us_tap t = us_linear(q, 0, y, ih, oh, 0, LOOM_FLOAT32);
    yt[y] = (loom_us_tap){t.i0, t.i1, (float)t.l0, (float)t.l1};
  }
  const uint32_t avx2_fma = LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA;
  if ((loom_cpu_features() & avx2_fma) == avx2_fma)
    loom_upsample_rows_f32_avx2(out, in, q->dims, xt, yt, begin, end);
  else
    loom_upsample_rows_f32(out, in, q->dims, xt, yt, begin, end);
}

int loom_kernel_upsample(const loom_kernel_args *args, int64_t begin, int64_t end) {
  us_params q;
  int rc = us_read(args, &q);
  if (rc) return rc;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const int64_t oh = out->sizes[2], ow = out->sizes[3], ih = in->sizes[2], iw = in->sizes[3];
  const int wide = in->dtype == LOOM_FLOAT64;
  if (q.mode == LOOM_UPSAMPLE_LINEAR && in->dtype == LOOM_FLOAT32 &&
      out->dtype == LOOM_FLOAT32 && ow <= US_MAX_ROW && oh <= US_MAX_ROW) {
    us_linear_f32(&q, out, in, begin, end);
    return LOOM_OK;
  }
  for (int64_t p = begin; p < end; ++p) {
    for (int64_t y = 0; y < oh; ++y) {
      if (q.mode != LOOM_UPSAMPLE_LINEAR) {
        const int64_t sy = q.dims == 2 ? us_nearest(&q, 0, y, ih, oh) : 0;
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t sx = us_nearest(&q, 1, x, iw, ow);
          loom_nn_store(out->data, out->dtype, loom_us_at(out, p, y, x),
                        loom_nn_load(in->data, in->dtype, loom_us_at(in, p, sy, sx)));
        }
        continue;
      }
      const int32_t store = q.round_weights ? in->dtype : (wide ? LOOM_FLOAT64 : LOOM_FLOAT32);
      const us_tap h = us_linear(&q, 0, y, ih, oh, wide, store);
      for (int64_t x = 0; x < ow; ++x) {
        const us_tap w = us_linear(&q, 1, x, iw, ow, wide, store);
        const double a00 = loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i0, w.i0));
        const double a01 = loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i0, w.i1));
        /* t0 * w0 + t1 * w1 with the product of the first pair fused, as
         * the CPU's compiled kernels evaluate it */
        double v;
        if (wide) {
          const double t0 = fma(a00, w.l0, a01 * w.l1);
          if (q.dims == 1) {
            v = t0;
          } else {
            const double a10 = loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i1, w.i0));
            const double a11 = loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i1, w.i1));
            v = fma(t0, h.l0, fma(a10, w.l0, a11 * w.l1) * h.l1);
          }
        } else {
          const float t0 = fmaf((float)a00, (float)w.l0, (float)a01 * (float)w.l1);
          if (q.dims == 1) {
            v = t0;
          } else {
            const float a10 = (float)loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i1, w.i0));
            const float a11 = (float)loom_nn_load(in->data, in->dtype, loom_us_at(in, p, h.i1, w.i1));
            const float t1 = fmaf(a10, (float)w.l0, a11 * (float)w.l1);
            v = fmaf(t0, (float)h.l0, t1 * (float)h.l1);
          }
        }
        loom_nn_store(out->data, out->dtype, loom_us_at(out, p, y, x), v);
      }
    }
  }
  return LOOM_OK;
}

int loom_kernel_upsample_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  us_params q;
  int rc = us_read(args, &q);
  if (rc) return rc;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1];
  const int64_t oh = go->sizes[2], ow = go->sizes[3], ih = gi->sizes[2], iw = gi->sizes[3];
  if (gi->dtype != LOOM_FLOAT32 && gi->dtype != LOOM_FLOAT64) return LOOM_ERROR_INVALID_ARGUMENT;
  const int wide = gi->dtype == LOOM_FLOAT64;
  for (int64_t p = begin; p < end; ++p) {
    for (int64_t y = 0; y < ih; ++y)
      for (int64_t x = 0; x < iw; ++x) loom_nn_store(gi->data, gi->dtype, loom_us_at(gi, p, y, x), 0.0);
    for (int64_t y = 0; y < oh; ++y) {
      const us_tap h = q.mode == LOOM_UPSAMPLE_LINEAR
                           ? us_linear(&q, 0, y, ih, oh, wide, gi->dtype)
                           : (us_tap){q.dims == 2 ? us_nearest(&q, 0, y, ih, oh) : 0, 0, 1.0, 0.0};
      for (int64_t x = 0; x < ow; ++x) {
        const double g = loom_nn_load(go->data, go->dtype, loom_us_at(go, p, y, x));
        if (q.mode != LOOM_UPSAMPLE_LINEAR) {
          const int64_t o = loom_us_at(gi, p, h.i0, us_nearest(&q, 1, x, iw, ow));
          loom_nn_store(gi->data, gi->dtype, o, loom_nn_load(gi->data, gi->dtype, o) + g);
          continue;
        }
        const us_tap w = us_linear(&q, 1, x, iw, ow, wide, gi->dtype);
        const int64_t taps = q.dims == 2 ? 4 : 2;
        const int64_t ys[4] = {h.i0, h.i0, h.i1, h.i1}, xs[4] = {w.i0, w.i1, w.i0, w.i1};
        const double hl[4] = {h.l0, h.l0, h.l1, h.l1}, wl[4] = {w.l0, w.l1, w.l0, w.l1};
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t o = loom_us_at(gi, p, q.dims == 2 ? ys[t] : 0, xs[t]);
          const double cur = loom_nn_load(gi->data, gi->dtype, o);
          /* acc += weight * g, fused as the CPU's compiled kernel does */
          if (wide) {
            const double wgt = q.dims == 2 ? hl[t] * wl[t] : wl[t];
            loom_nn_store(gi->data, gi->dtype, o, fma(wgt, g, cur));
          } else {
            const float wgt = q.dims == 2 ? (float)hl[t] * (float)wl[t] : (float)wl[t];
            loom_nn_store(gi->data, gi->dtype, o, (double)fmaf(wgt, (float)g, (float)cur));
          }
        }
      }
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_upsample_kernels[] = {
    {"upsample.forward", loom_kernel_upsample, NULL},
    {"upsample.backward", loom_kernel_upsample_backward, NULL},
    {NULL, NULL, NULL},
};
