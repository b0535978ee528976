/* kernels/optim.h — fused optimizer steps, one launch per parameter tensor,
 * elementwise over contiguous tensors of the same numel. Optional tensors
 * (max_exp_avg_sq without amsgrad, grad_scale, found_inf, lr as a tensor) are
 * passed with data == NULL. With found_inf holding a non-zero value nothing
 * is written; with grad_scale the gradient is divided by it and written back
 * unscaled, as PyTorch's fused kernels do. */
#ifndef LOOM_KERNELS_OPTIM_H
#define LOOM_KERNELS_OPTIM_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adam / AdamW. Range numel.
 * tensors: [param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq?, step (one
 *           element, already incremented), grad_scale?, found_inf?, lr?]
 * scalars: [lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
 *           decoupled (1: AdamW)]. */
int loom_adam_step(const loom_kernel_args *args, int64_t begin, int64_t end);

/* SGD with momentum. Range numel.
 * tensors: [param, grad, momentum_buffer?, grad_scale?, found_inf?, lr?]
 * scalars: [weight_decay, momentum, lr, dampening, nesterov, maximize,
 *           is_first_step]. */
int loom_sgd_step(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_OPTIM_H */
