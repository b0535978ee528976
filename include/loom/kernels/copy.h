/* loom/kernels/copy.h — the copy kernel's name and argument contract: copy
 * with dtype conversion between strided tensors. Every driver provides this
 * name.
 *
 * "copy.strided": tensors[0] = dst, tensors[1] = src with dst's sizes
 * (stride 0 where src broadcasts; a rank-0 src is broadcast to all of dst);
 * any pair of dtypes, converted as PyTorch's static casts do. No scalars.
 * The launch range is numel(dst); use LOOM_COPY_GRAIN as the grain. */
#ifndef LOOM_KERNELS_COPY_CONTRACT_H
#define LOOM_KERNELS_COPY_CONTRACT_H

#define LOOM_COPY_GRAIN 65536

#endif /* LOOM_KERNELS_COPY_CONTRACT_H */
