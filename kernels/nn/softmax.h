/* kernels/nn/softmax.h — the softmax kernels (contracts and names in
 * loom/kernels/softmax.h). */
#ifndef LOOM_KERNELS_SOFTMAX_H
#define LOOM_KERNELS_SOFTMAX_H

#include "loom/kernel_abi.h"
#include "loom/kernels/softmax.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_softmax_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_softmax_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_SOFTMAX_H */
