/* loom/kernels/softmax.h — the softmax kernels' names and argument
 * contracts: softmax and log-softmax along one dim, and their gradients.
 * Every driver provides these names.
 *
 * Any float dtype per tensor, any strides. The launch range is the number of
 * rows: numel / sizes[dim] (1 for a rank-0 tensor). */
#ifndef LOOM_KERNELS_SOFTMAX_CONTRACT_H
#define LOOM_KERNELS_SOFTMAX_CONTRACT_H

/* "softmax.forward": tensors: [input, output] (same sizes);
 * scalars: [dim, log (0 or 1)].
 *
 * "softmax.backward": tensors: [grad_output, output (the forward result),
 * grad_input]; scalars: [dim, log (0 or 1)].
 * softmax:     grad_input = y * (g - sum(g * y))
 * log_softmax: grad_input = g - exp(y) * sum(g) */

#endif /* LOOM_KERNELS_SOFTMAX_CONTRACT_H */
