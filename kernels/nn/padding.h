/* kernels/nn/padding.h — the padding kernels (contracts and names in
 * loom/kernels/padding.h). */
#ifndef LOOM_KERNELS_PADDING_H
#define LOOM_KERNELS_PADDING_H

#include "loom/kernel_abi.h"
#include "loom/kernels/padding.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_padding(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_padding_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_PADDING_H */
