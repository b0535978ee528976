/* loom/kernels/norm.h — the normalization kernels' names and argument
 * contracts: layer norm (and RMS norm), batch norm, group norm, forward and
 * backward. Every driver provides these names.
 *
 * Any float dtype per tensor (mixed input/weight dtypes are fine). An
 * optional tensor (weight, bias, running stats, an output that is not
 * wanted) is passed with data == NULL. Statistics are computed in two passes
 * (mean, then squared deviations) in double. */
#ifndef LOOM_KERNELS_NORM_CONTRACT_H
#define LOOM_KERNELS_NORM_CONTRACT_H

/* ---- layer norm / RMS norm over contiguous rows of length N ---------------
 * Range: M rows. Row r of x/y starts at element r*N; mean/rstd hold one value
 * per row (element r). weight/bias have N elements. With rms = 1 there is no
 * mean (mean may be NULL) and rstd = 1/sqrt(mean(x^2) + eps).
 *
 * "norm.layer_forward": tensors: [x, weight?, bias?, y, mean?, rstd];
 * scalars: [N, eps, rms].
 *
 * "norm.layer_backward_input": grad_input, per row.
 * tensors: [dy, x, mean?, rstd, weight?, dx]; scalars: [N, rms].
 *
 * "norm.layer_backward_params": grad_weight / grad_bias, per column: range
 * N, each column summed over the M rows in row order.
 * tensors: [dy, x, mean?, rstd, dweight?, dbias?]; scalars: [M, N, rms]. */

/* ---- batch norm over x viewed as [N, C, S] (any strides) ------------------
 * Range: C channels.
 *
 * "norm.batch_forward":
 * tensors: [x, weight?, bias?, running_mean?, running_var?, y, save_mean?,
 *           save_invstd?]
 * scalars: [training, momentum, eps]
 * Training: batch statistics (biased variance for normalising), saved as
 * mean and 1/sqrt(var + eps); running stats, if given, move by momentum
 * towards mean and the unbiased variance. Eval: running stats normalise.
 *
 * "norm.batch_backward":
 * tensors: [dy, x, weight?, running_mean?, running_var?, save_mean?,
 *           save_invstd?, dx?, dweight?, dbias?]
 * scalars: [training, eps]. Training uses the saved statistics, eval the
 * running ones. */

/* ---- group norm over contiguous x of shape [N, C, HxW] --------------------
 * G groups of C/G channels; mean/rstd are [N, G].
 *
 * "norm.group_forward": range N*G. tensors: [x, weight?, bias?, y, mean,
 * rstd]; scalars: [N, C, HxW, G, eps].
 *
 * "norm.group_backward_input": grad_input, and the sums the parameter
 * gradients need, range N*G.
 * tensors: [dy, x, mean, rstd, weight?, dx?, sum_dy?, sum_dy_xhat?]; the
 * sums are float64 [N, C] (both or neither): per sample and channel,
 * sum dy and sum dy * (x - mean) * rstd. scalars: [N, C, HxW, G].
 *
 * "norm.group_backward_params": grad_weight / grad_bias from those sums,
 * over N in order; range C.
 * tensors: [sum_dy, sum_dy_xhat, dweight?, dbias?]; scalars: [N, C]. */

#endif /* LOOM_KERNELS_NORM_CONTRACT_H */
