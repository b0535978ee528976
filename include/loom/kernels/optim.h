/* loom/kernels/optim.h — the fused optimizer steps' names and argument
 * contracts. Every driver provides these names.
 *
 * One launch per parameter tensor, elementwise over contiguous tensors of
 * the same numel. Optional tensors (max_exp_avg_sq without amsgrad,
 * grad_scale, found_inf, lr as a tensor) are passed with data == NULL. With
 * found_inf holding a non-zero value nothing is written; with grad_scale the
 * gradient is divided by it and written back unscaled, as PyTorch's fused
 * kernels do. */
#ifndef LOOM_KERNELS_OPTIM_CONTRACT_H
#define LOOM_KERNELS_OPTIM_CONTRACT_H

/* "optim.adam_step": Adam / AdamW. Range numel.
 * tensors: [param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq?, step (one
 *           element, already incremented), grad_scale?, found_inf?, lr?]
 * scalars: [lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
 *           decoupled (1: AdamW)].
 *
 * "optim.sgd_step": SGD with momentum. Range numel.
 * tensors: [param, grad, momentum_buffer?, grad_scale?, found_inf?, lr?]
 * scalars: [weight_decay, momentum, lr, dampening, nesterov, maximize,
 *           is_first_step]. */

#endif /* LOOM_KERNELS_OPTIM_CONTRACT_H */
