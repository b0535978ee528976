/* loom/kernels/upsample.h — the resampling kernels' names and argument
 * contracts: nearest, nearest-exact and (bi)linear resampling of (N, C, H,
 * W) images, forward and backward, with the CPU backend's index and weight
 * arithmetic (float, or double for linear float64). Every driver provides
 * these names.
 *
 * scalars: [0].i mode (loom_upsample_mode), [1].i dims (1: W only, 2: H
 * and W), [2].i align_corners (linear), [3].f scale_h, [4].f scale_w (the
 * scale factors the caller gave; <= 0: none, sizes decide), [5].i whether
 * the forward rounds linear weights to a 16-bit input's dtype (the CPU's
 * generic kernel does; its kernel for small or channels-last images
 * keeps them in float).
 *
 * "upsample.forward": tensors [0] out (N, C, OH, OW), [1] in (N, C, IH,
 *   IW); any strides (H = 1 when dims is 1); range N * C.
 * "upsample.backward": tensors [0] grad_in (N, C, IH, IW; float32 or
 *   float64, overwritten), [1] grad_out (N, C, OH, OW); range N * C. Each
 *   plane's shares add in output order. */
#ifndef LOOM_KERNELS_UPSAMPLE_CONTRACT_H
#define LOOM_KERNELS_UPSAMPLE_CONTRACT_H

typedef enum loom_upsample_mode {
  LOOM_UPSAMPLE_NEAREST, LOOM_UPSAMPLE_NEAREST_EXACT, LOOM_UPSAMPLE_LINEAR,
} loom_upsample_mode;

enum { LOOM_UPSAMPLE_NUM_SCALARS = 6 };

#endif /* LOOM_KERNELS_UPSAMPLE_CONTRACT_H */
