/* kernels/fill.h — set every element of a strided tensor to one value.
 *
 * loom_kernel_fill: tensors[0] = dst (any dtype and strides); scalars[0].f
 * is the value for floating and complex dst (imaginary part in scalars[1].f
 * when num_scalars > 1), scalars[0].i for integral and bool dst. The launch
 * range is numel(dst); use LOOM_FILL_GRAIN as the grain. */
#ifndef LOOM_KERNELS_FILL_H
#define LOOM_KERNELS_FILL_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_FILL_GRAIN 65536

int loom_kernel_fill(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_FILL_H */
