/* kernels/nn/upsample_nd.h — the bicubic, trilinear and anti-aliased
 * resampling kernels (contracts and names in loom/kernels/upsample_nd.h). */
#ifndef LOOM_KERNELS_UPSAMPLE_ND_H
#define LOOM_KERNELS_UPSAMPLE_ND_H

#include "loom/kernel_abi.h"
#include "loom/kernels/upsample_nd.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_upsample_bicubic2d(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_upsample_bicubic2d_backward(const loom_kernel_args *args, int64_t begin,
                                            int64_t end);
int loom_kernel_upsample_trilinear3d(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_upsample_trilinear3d_backward(const loom_kernel_args *args, int64_t begin,
                                              int64_t end);
int loom_kernel_upsample_aa_pass(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_upsample_aa_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_UPSAMPLE_ND_H */
