/* kernels/pool.h — 2-d pooling over (N, C, H, W) planes: max (with
 * indices), average, adaptive average and adaptive max, forward and
 * backward. One plane per parallel item, so every sum has a fixed order.
 *
 * Scalars (all .i): [0] mode (loom_pool_mode), [1..2] kernel (kh, kw),
 * [3..4] stride, [5..6] padding, [7..8] dilation, [9] count_include_pad,
 * [10] divisor override (0: none). Adaptive modes ignore [1..10]. Indices
 * are int64 offsets h * W + w within the input plane, as PyTorch's. */
#ifndef LOOM_KERNELS_POOL_H
#define LOOM_KERNELS_POOL_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_pool_mode {
  LOOM_POOL_MAX = 0,
  LOOM_POOL_AVG = 1,
  LOOM_POOL_ADAPTIVE_AVG = 2,
  LOOM_POOL_ADAPTIVE_MAX = 3,
} loom_pool_mode;

enum { LOOM_POOL_NUM_SCALARS = 11 };

/* tensors: [0] input, [1] output, [2] indices (max modes); all rank 4,
 * any strides. range: N*C. */
int loom_pool2d_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end);

/* tensors: [0] grad_input (written whole), [1] grad_output, [2] indices
 * (max modes); rank 4, any strides. range: N*C. */
int loom_pool2d_backward_kernel(const loom_kernel_args *args, int64_t begin,
                                int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_POOL_H */
