/* kernels/nn/pool.h — the pooling kernels (contracts and names in
 * loom/kernels/pool.h). */
#ifndef LOOM_KERNELS_POOL_H
#define LOOM_KERNELS_POOL_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_pool_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pool_backward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pool_nhwc_forward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pool_nhwc_backward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pool_nhwc_max_backward_kernel(const loom_kernel_args *args, int64_t begin,
                                       int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_POOL_H */
