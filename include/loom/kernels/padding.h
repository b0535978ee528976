/* loom/kernels/padding.h — the padding kernels' names and argument
 * contracts: reflection and replication padding of the last one to three
 * dims, forward and backward. Every driver provides these names.
 *
 * "padding.forward": tensors [0] out, [1] in; "padding.backward": tensors
 * [0] grad_in, [1] grad_out. Both rank 5 (N, C, D, H, W), any strides, any
 * float dtype (forward: any dtype). scalars: [0].i mode
 * (loom_padding_mode), [1..3].i the padding before D, H and W (negative
 * crops). range: N * C. Output position o of a padded dim reads input
 * o - before, reflected about the edges (without repeating them) or
 * clamped to them. The backward adds each output gradient into its input
 * element in output order, in the gradient's dtype, as the CPU backend
 * does. */
#ifndef LOOM_KERNELS_PADDING_CONTRACT_H
#define LOOM_KERNELS_PADDING_CONTRACT_H

typedef enum loom_padding_mode { LOOM_PAD_REFLECT, LOOM_PAD_REPLICATE } loom_padding_mode;

#endif /* LOOM_KERNELS_PADDING_CONTRACT_H */
