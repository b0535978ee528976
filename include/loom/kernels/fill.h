/* loom/kernels/fill.h — the fill kernel's name and argument contract: set
 * every element of a strided tensor to one value. Every driver provides
 * this name.
 *
 * "fill.strided": tensors[0] = dst (any dtype and strides); scalars[0].f
 * is the value for floating and complex dst (imaginary part in scalars[1].f
 * when num_scalars > 1), scalars[0].i for integral and bool dst. The launch
 * range is numel(dst); use LOOM_FILL_GRAIN as the grain. */
#ifndef LOOM_KERNELS_FILL_CONTRACT_H
#define LOOM_KERNELS_FILL_CONTRACT_H

#define LOOM_FILL_GRAIN 65536

#endif /* LOOM_KERNELS_FILL_CONTRACT_H */
