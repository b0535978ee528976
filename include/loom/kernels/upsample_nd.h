/* loom/kernels/upsample_nd.h — the resampling kernels beyond nearest and
 * (bi)linear: bicubic 2-d, trilinear 3-d and the anti-aliased (separable
 * filter) bilinear and bicubic 2-d, forward and backward, with the CPU
 * backend's index and weight arithmetic (in float for float32 and the
 * 16-bit floats, in double for float64). Every driver provides these names.
 *
 * scalars (all of them): [0].i align_corners, [1].i filter (anti-aliased:
 * loom_upsample_filter), [2].i axis (anti-aliased pass: 2 rows, 3
 * columns), [3].f, [4].f, [5].f the scale factors the caller gave along
 * depth, height and width (<= 0: none, sizes decide; 2-d kernels read [4]
 * and [5], the pass reads the one of its axis).
 *
 * Tensors have any strides. Backward kernels overwrite grad_in (float32 or
 * float64), and each plane's shares add in output order (one plane per
 * launch item, so the sums never depend on the chunking). Range N * C.
 * "upsample.bicubic2d.forward": [0] out (N, C, OH, OW), [1] in (N, C, IH, IW).
 * "upsample.bicubic2d.backward": [0] grad_in (N, C, IH, IW), [1] grad_out.
 * "upsample.trilinear3d.forward": [0] out (N, C, OD, OH, OW), [1] in.
 * "upsample.trilinear3d.backward": [0] grad_in (N, C, ID, IH, IW), [1] grad_out.
 * "upsample.aa.pass": [0] out, [1] in, 4-d, equal but along the axis: one
 *   separable pass of the anti-aliased forward (the CPU resamples columns
 *   first, then rows, through an intermediate of the input's dtype, and
 *   skips an axis whose size is unchanged).
 * "upsample.aa.backward": [0] grad_in (N, C, IH, IW), [1] grad_out. */
#ifndef LOOM_KERNELS_UPSAMPLE_ND_CONTRACT_H
#define LOOM_KERNELS_UPSAMPLE_ND_CONTRACT_H

typedef enum loom_upsample_filter {
  LOOM_UPSAMPLE_FILTER_LINEAR, LOOM_UPSAMPLE_FILTER_CUBIC,
} loom_upsample_filter;

enum { LOOM_UPSAMPLE_ND_NUM_SCALARS = 6 };

#endif /* LOOM_KERNELS_UPSAMPLE_ND_CONTRACT_H */
