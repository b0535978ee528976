/* kernels/softmax.h — softmax and log-softmax along one dim, and their
 * gradients. Any float dtype per tensor, any strides. The launch range is the
 * number of rows: numel / sizes[dim] (1 for a rank-0 tensor). */
#ifndef LOOM_KERNELS_SOFTMAX_H
#define LOOM_KERNELS_SOFTMAX_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tensors: [input, output] (same sizes); scalars: [dim, log (0 or 1)]. */
int loom_softmax_forward(const loom_kernel_args *args, int64_t begin,
                         int64_t end);

/* tensors: [grad_output, output (the forward result), grad_input];
 * scalars: [dim, log (0 or 1)].
 * softmax:     grad_input = y * (g - sum(g * y))
 * log_softmax: grad_input = g - exp(y) * sum(g) */
int loom_softmax_backward(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_SOFTMAX_H */
