/* loom/kernels/pool_fractional.h — fractional max pooling's forward
 * kernel name and argument contract (F.fractional_max_pool2d/3d, with the
 * CPU backend's interval arithmetic in the input's float type: float, or
 * double for float64). The backward is "pool.backward" in an adaptive max
 * mode (loom/kernels/pool.h): each output's gradient added at its index.
 * Every driver provides these names.
 *
 * scalars (all .i): [0] dims (2 or 3), [1..3] pool size (kt, kh, kw; kt
 * 1 for 2-d).
 * "pool.fractional_max.forward": tensors [0] out (N, C, OT, OH, OW), [1]
 *   indices (int64, as out; offsets (t * H + h) * W + w in the input
 *   volume), [2] input (N, C, T, H, W; 2-d as T = 1), [3] random samples
 *   (N, C, dims) in [0, 1): for 2-d the width's then the height's, for
 *   3-d the time's, the height's, the width's. Any strides. range N * C. */
#ifndef LOOM_KERNELS_POOL_FRACTIONAL_CONTRACT_H
#define LOOM_KERNELS_POOL_FRACTIONAL_CONTRACT_H

enum { LOOM_POOL_FRACTIONAL_NUM_SCALARS = 4 };

#endif /* LOOM_KERNELS_POOL_FRACTIONAL_CONTRACT_H */
