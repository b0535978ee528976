/* kernels/base/copy.h — the copy kernel (contract and name in loom/kernels/copy.h)
 * and the strided move the other kernel files share. */
#ifndef LOOM_KERNELS_COPY_H
#define LOOM_KERNELS_COPY_H

#include "loom/kernel_abi.h"
#include "loom/kernels/copy.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_copy(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Moves n elements of `size` bytes (any size) from a strided run to
 * another, strides in bytes: the typed loop or memcpy that suits them. */
void loom_move_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, int64_t size);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_COPY_H */
