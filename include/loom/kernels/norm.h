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
 * "norm.layer_backward_rows": grad_input (as "norm.layer_backward_input"
 * computes it) and the parameter gradients' partial sums in one pass over
 * the rows, in K chunks of R rows (the last one shorter): range K, R the
 * caller's, a function of the shape only. tensors: [dy, x, mean?, rstd,
 * weight?, dx?, part?]; scalars: [M, N, rms, R]. part is a contiguous
 * [K, 2, N] float32 (sums kept in float) or float64: part[k, 0, j] = sum of
 * dy[r, j], part[k, 1, j] = sum of dy[r, j] * xhat[r, j] over chunk k's rows
 * in row order (part[k, 0] is 0 with rms = 1).
 *
 * "norm.layer_backward_combine": grad_weight / grad_bias from those sums,
 * the K chunks added in chunk order in double: range N. tensors: [part,
 * dweight?, dbias?]; scalars: [K, N]. With K = 0 the gradients are 0. */

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

/* ---- batch norm over channels-last x viewed as [R, C] ---------------------
 * R = N*H*W rows whose C channels are contiguous (row stride any). The rows
 * split into K chunks, chunk k = [floor-balanced k*R/K, (k+1)*R/K): K is the
 * caller's, a function of the shape only; partial sums go to `part`, a
 * contiguous float64 [K, 2, C], and are combined per channel in chunk order,
 * so results do not depend on the thread count. `coef` is a contiguous
 * float32 (for float32 x) or float64 [3, C] / [4, C] tensor of per-channel
 * coefficients one launch passes to the next.
 *
 * "norm.batch_nhwc_stats": range K. tensors: [x, part]. part[k, 0, c]: the
 * chunk's sum of channel c; part[k, 1, c]: its squared deviations from the
 * chunk's own mean.
 *
 * "norm.batch_nhwc_finish": range C. tensors: [part? (training), weight?,
 * bias?, running_mean?, running_var?, save_mean?, save_invstd?, coef [3, C],
 * running_mean_out?, running_var_out?]; scalars: [training, momentum, eps,
 * R]. The statistics as "norm.batch_forward" forms and saves them; the
 * running stats move in place, or into the _out tensors when given; coef
 * holds m, a, b with y = (x - m) * a + b (m: the mean rounded to coef's
 * dtype, so x - m is exact for x near the mean).
 *
 * "norm.batch_nhwc_apply": range R. tensors: [x, coef [3, C], residual?, y];
 * scalars: [relu]. y = (x - m) * a + b (+ residual), then ReLU if relu,
 * each step rounded to y's dtype as the unfused ops round it.
 *
 * "norm.batch_nhwc_grad_sums": range K. tensors: [dy, x, mean, part, y?,
 * masked?]; mean: per channel (the saved mean in training, the running one
 * in eval). part[k, 0, c] = sum dy, part[k, 1, c] = sum dy * (x - mean). With
 * y (a ReLU's output), dy is first masked to 0 where y <= 0, and written to
 * masked when given.
 *
 * "norm.batch_nhwc_grad_finish": range C. tensors: [part? (needed for the
 * weight/bias gradients and in training), weight?, running_mean?,
 * running_var?, save_mean?, save_invstd?, dweight?, dbias?, coef? [4, C]];
 * scalars: [training, eps, R, C]. The parameter gradients, and coef m, k1,
 * k2, k3 with dx = dy * k1 + (x - m) * k2 + k3.
 *
 * "norm.batch_nhwc_dx": range R. tensors: [dy, x, coef [4, C], dx]; dx may be
 * dy (in place). */

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
