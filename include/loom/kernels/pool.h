/* loom/kernels/pool.h — the pooling kernels' names and argument contracts:
 * pooling over (N, C, D, H, W) volumes, 2-d pooling as D = 1: max (with
 * indices), average, adaptive average and adaptive max, forward and
 * backward. One volume per parallel item, so every sum has a fixed order.
 * Every driver provides these names.
 *
 * Scalars (all .i): [0] mode (loom_pool_mode), [1..3] kernel (kd, kh,
 * kw), [4..6] stride, [7..9] padding, [10..12] dilation, [13]
 * count_include_pad, [14] divisor override (0: none). Adaptive modes
 * ignore [1..14]. Indices are int64 offsets (d * H + h) * W + w within
 * the input volume, as PyTorch's.
 *
 * "pool.forward": tensors [0] input, [1] output, [2] indices (max modes);
 * all rank 5, any strides. range: N*C.
 *
 * "pool.backward": tensors [0] grad_input (written whole), [1]
 * grad_output, [2] indices (max modes); rank 5, any strides. range: N*C.
 *
 * The same over channels-last volumes (C the innermost axis; any strides
 * work, unit-stride channels are the fast case), every channel of a row
 * per item, with pool.forward's values, indices and gradients bit for bit:
 *
 * "pool.forward_nhwc": tensors as "pool.forward". range: N*OD*OH (one
 * output row per item).
 *
 * "pool.backward_nhwc": tensors as "pool.backward"; each input element
 * gathers the shares of the outputs whose windows hold it (max modes: whose
 * index names it) in the outputs' order, so no two items write one
 * element. range: N*ID*IH (one grad_input row per item).
 *
 * "pool.max_backward_nhwc": max modes only; tensors as "pool.backward",
 * grad_input dense channels-last within each image (its memory written
 * whole); each image's gradient zeroed, then every output's gradient added
 * where its index points (an index outside the volume adds nowhere), in
 * the outputs' order: "pool.backward_nhwc"'s bits. range: N (one image per
 * item). */
#ifndef LOOM_KERNELS_POOL_CONTRACT_H
#define LOOM_KERNELS_POOL_CONTRACT_H

typedef enum loom_pool_mode {
  LOOM_POOL_MAX = 0,
  LOOM_POOL_AVG = 1,
  LOOM_POOL_ADAPTIVE_AVG = 2,
  LOOM_POOL_ADAPTIVE_MAX = 3,
} loom_pool_mode;

enum { LOOM_POOL_NUM_SCALARS = 15 };

#endif /* LOOM_KERNELS_POOL_CONTRACT_H */
