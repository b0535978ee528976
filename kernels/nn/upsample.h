/* kernels/nn/upsample.h — the resampling kernels (contracts and names in
 * loom/kernels/upsample.h). */
#ifndef LOOM_KERNELS_UPSAMPLE_H
#define LOOM_KERNELS_UPSAMPLE_H

#include "loom/kernel_abi.h"
#include "loom/kernels/upsample.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_upsample(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_upsample_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_UPSAMPLE_H */
