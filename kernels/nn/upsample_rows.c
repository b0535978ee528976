/* The float32 (bi)linear forward's rows (kernels/nn/upsample_rows.h). Built
 * as is for the baseline ISA and included by upsample_rows_avx2.c with
 * LOOM_US_ISA defined. */
/* Only the fused products fmaf names: every build rounds the same. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/nn/upsample_rows.h"

#ifdef LOOM_US_ISA
#define US_CAT2(a, b) a##b
#define US_CAT(a, b) US_CAT2(a, b)
#define US_NAME(base) US_CAT(base, LOOM_US_ISA)
#else
#define US_NAME(base) base
#endif

void US_NAME(loom_upsample_rows_f32)(const loom_tensor *out, const loom_tensor *in, int dims,
                                     const loom_us_tap *xt, const loom_us_tap *yt,
                                     int64_t begin, int64_t end) {
  const int64_t oh = out->sizes[2], ow = out->sizes[3];
  const float *src = (const float *)in->data;
  float *dst = (float *)out->data;
  const int64_t is3 = in->strides[3], os3 = out->strides[3];
  for (int64_t p = begin; p < end; ++p) {
    const int64_t ib = loom_us_at(in, p, 0, 0), ob = loom_us_at(out, p, 0, 0);
    for (int64_t y = 0; y < oh; ++y) {
      const loom_us_tap h = yt[y];
      const float *r0 = src + ib + h.i0 * in->strides[2];
      const float *r1 = src + ib + h.i1 * in->strides[2];
      float *o = dst + ob + y * out->strides[2];
      for (int64_t x = 0; x < ow; ++x) {
        const loom_us_tap w = xt[x];
        const float t0 = fmaf(r0[w.i0 * is3], w.l0, r0[w.i1 * is3] * w.l1);
        float v = t0;
        if (dims == 2) {
          const float t1 = fmaf(r1[w.i0 * is3], w.l0, r1[w.i1 * is3] * w.l1);
          v = fmaf(t0, h.l0, t1 * h.l1);
        }
        o[x * os3] = v;
      }
    }
  }
}
