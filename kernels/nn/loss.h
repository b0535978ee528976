/* kernels/nn/loss.h — the loss kernels (contracts and names in
 * loom/kernels/loss.h). */
#ifndef LOOM_KERNELS_LOSS_H
#define LOOM_KERNELS_LOSS_H

#include "loom/kernel_abi.h"
#include "loom/kernels/loss.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_nll_loss_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_nll_loss_backward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pointwise_loss_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_loss_sum_partials(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pointwise_loss_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_LOSS_H */
