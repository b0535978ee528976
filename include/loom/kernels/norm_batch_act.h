/* loom/kernels/norm_batch_act.h — batch norm (training statistics) fused
 * with the ReLU that follows it, and the backward of the pair: the names and
 * argument contracts. float32 tensors whose [n, c, :] rows are contiguous
 * (x viewed as [N, C, S], as "norm.batch_forward" views it); an optional
 * tensor is passed with data == NULL.
 *
 * The results are bitwise those of the unfused library sequence: batch
 * norm's statistics and normalisation as "norm.batch_forward" computes them,
 * then (residual add, then) ReLU per element, each rounded to float; and
 * backward, threshold_backward(dy, y, 0) fed to "norm.batch_backward".
 * Each call owns whole channels, so results do not depend on the thread
 * count. Range: C channels.
 *
 * "norm.batch_relu_forward":
 * tensors: [x, weight?, bias?, running_mean_in?, running_var_in?,
 *           residual?, y, save_mean, save_invstd, running_mean_out?,
 *           running_var_out?]
 * scalars: [momentum, eps]
 * y = relu(batch_norm(x) + residual). The running statistics are read from
 * the _in tensors and written, moved by momentum towards the batch mean and
 * the unbiased variance, to the _out tensors (which may be the same).
 *
 * "norm.batch_relu_backward":
 * tensors: [dy, y, x, weight?, save_mean, save_invstd, dx, dweight?, dbias?,
 *           masked?]
 * scalars: []
 * The gradients of batch norm (training statistics) at x, for the output
 * gradient dy masked where y <= 0 (y: the ReLU's output). The masked
 * gradient is written to `masked` when given (other ops read it: a residual
 * block's shortcut); otherwise dx holds it until the input gradient
 * overwrites it. */
#ifndef LOOM_KERNELS_NORM_BATCH_ACT_CONTRACT_H
#define LOOM_KERNELS_NORM_BATCH_ACT_CONTRACT_H
#endif /* LOOM_KERNELS_NORM_BATCH_ACT_CONTRACT_H */
