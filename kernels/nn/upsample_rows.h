/* kernels/nn/upsample_rows.h — the inner loops of the float32 (bi)linear
 * forward, given each output column's and row's taps (upsample.c computes
 * them with the CPU's arithmetic). Built generic (upsample_rows.c, fmaf a
 * library call) and for AVX2 + FMA CPUs (upsample_rows_avx2.c, fmaf one
 * instruction); both round each fused product the same. */
#ifndef LOOM_KERNELS_UPSAMPLE_ROWS_H
#define LOOM_KERNELS_UPSAMPLE_ROWS_H

#include <stdint.h>

#include "loom/kernel_abi.h"

/* Element offset of (plane p = n * C + c, y, x) in an (N, C, H, W) tensor. */
static inline int64_t loom_us_at(const loom_tensor *t, int64_t p, int64_t y, int64_t x) {
  return (p / t->sizes[1]) * t->strides[0] + (p % t->sizes[1]) * t->strides[1] +
         y * t->strides[2] + x * t->strides[3];
}

/* Sources i0, i1 along one axis and their float weights. */
typedef struct loom_us_tap {
  int64_t i0, i1;
  float l0, l1;
} loom_us_tap;

/* Planes [begin, end) of out (N, C, OH, OW) from in (N, C, IH, IW), both
 * float32: out = (t0 h0 + t1 h1) with t = a0 w0 + a1 w1 along each row,
 * the first product of each pair fused; dims 1 uses rows' t0 alone. */
void loom_upsample_rows_f32(const loom_tensor *out, const loom_tensor *in, int dims,
                            const loom_us_tap *xt, const loom_us_tap *yt, int64_t begin,
                            int64_t end);
void loom_upsample_rows_f32_avx2(const loom_tensor *out, const loom_tensor *in, int dims,
                                 const loom_us_tap *xt, const loom_us_tap *yt, int64_t begin,
                                 int64_t end);

#endif /* LOOM_KERNELS_UPSAMPLE_ROWS_H */
