/* kernels/copy.h — copy with dtype conversion between strided tensors.
 *
 * loom_kernel_copy: tensors[0] = dst, tensors[1] = src with dst's sizes
 * (stride 0 where src broadcasts; a rank-0 src is broadcast to all of dst);
 * any pair of dtypes, converted as PyTorch's static casts do. The launch
 * range is numel(dst); use LOOM_COPY_GRAIN as the grain. */
#ifndef LOOM_KERNELS_COPY_H
#define LOOM_KERNELS_COPY_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_COPY_GRAIN 65536

int loom_kernel_copy(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Moves n elements of `size` bytes (any size) from a strided run to
 * another, strides in bytes: the typed loop or memcpy that suits them. */
void loom_move_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, int64_t size);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_COPY_H */
