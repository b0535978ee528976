/* kernels/nn/norm_batch_act.h — batch norm fused with ReLU, forward and
 * backward (contracts and names in loom/kernels/norm_batch_act.h). */
#ifndef LOOM_KERNELS_NORM_BATCH_ACT_H
#define LOOM_KERNELS_NORM_BATCH_ACT_H

#include "loom/kernel_abi.h"
#include "loom/kernels/norm_batch_act.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_batch_norm_relu_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_batch_norm_relu_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_NORM_BATCH_ACT_H */
