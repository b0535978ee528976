/* loom/kernels/loss.h — the loss kernels' names and argument contracts:
 * negative log-likelihood (1d/2d/nd) and the pointwise losses (mse, smooth
 * L1, Huber, binary cross-entropy). Every driver provides these names.
 *
 * Reductions follow at::Reduction: 0 none, 1 mean, 2 sum. Reduced sums are
 * deterministic: the pointwise losses sum fixed blocks of LOOM_LOSS_BLOCK
 * elements into partials, then add the partials in order. */
#ifndef LOOM_KERNELS_LOSS_CONTRACT_H
#define LOOM_KERNELS_LOSS_CONTRACT_H

enum { LOOM_REDUCTION_NONE = 0, LOOM_REDUCTION_MEAN = 1, LOOM_REDUCTION_SUM = 2 };

/* ---- "nll_loss.forward": nll_loss over input [N, C, S], target [N, S] ----
 * (any strides) tensors: [input, target, weight?, out, total_weight];
 * scalars: [reduction, ignore_index].
 * reduction none: range N*S, out has N*S contiguous elements.
 * mean/sum: range 1, out and total_weight are scalars. A target outside
 * [0, C) that is not ignore_index fails with LOOM_ERROR_INVALID_ARGUMENT.
 *
 * "nll_loss.backward": range N*S; writes all of grad_input [N, C, S]
 * (contiguous). tensors: [grad_output, target, weight?, total_weight,
 * grad_input]; scalars: [reduction, ignore_index]. grad_output has N*S
 * contiguous elements for reduction none, else one. */

/* ---- pointwise losses over same-shaped input/target (any strides) -------- */
enum {
  LOOM_LOSS_MSE = 0,
  LOOM_LOSS_SMOOTH_L1 = 1, /* param: beta */
  LOOM_LOSS_HUBER = 2,     /* param: delta */
  LOOM_LOSS_BCE = 3,       /* weight optional; input must lie in [0, 1] */
};

#define LOOM_LOSS_BLOCK 4096

/* "pointwise_loss.forward": tensors: [input, target, weight?, out];
 * scalars: [kind, reduction, param].
 * none: range numel, out has the input's shape (any strides).
 * mean/sum: range ceil(numel / LOOM_LOSS_BLOCK); out is a contiguous fp64
 * tensor receiving one partial sum per block.
 *
 * "loss.sum_partials": adds fp64 partials in order into the scalar out,
 * divided by `divisor` (1 for sum, numel for mean). Range 1.
 * tensors: [partials, out]; scalars: [divisor (f)].
 *
 * "pointwise_loss.backward": range numel. tensors: [grad_output, input,
 * target, weight?, grad_input]; scalars: [kind, reduction, param].
 * grad_output is one element for mean/sum, else input-shaped (any
 * strides). */

/* ---- multi_margin_loss over input [N, C] (contiguous, float32/float64) ----
 * "multi_margin_loss.forward": range N. tensors: [input, target (int64, N),
 * weight (C, contiguous, input dtype; data NULL: none), out (N contiguous:
 * the input dtype, or fp64 partials for "loss.sum_partials")]; scalars:
 * [p (1 or 2), margin (f)]. out[n] = sum over d != t of
 * max(0, margin - x[t] + x[d])^p * w[t], divided by C, in the input dtype.
 * A target outside [0, C) fails with LOOM_ERROR_INDEX_OUT_OF_RANGE.
 *
 * "multi_margin_loss.backward": range N; writes all of grad_input [N, C]
 * (contiguous). tensors: [grad_output (input dtype; N contiguous elements
 * if per_row, else one), input, target, weight?, grad_input]; scalars:
 * [p, margin (f), g (f: 1/C, or 1/(N*C) for mean), per_row]. */

/* ---- multilabel_margin_loss over input [N, C] (contiguous, float32/float64),
 * target [N, C] int64 (a row's targets: its leading entries >= 0) ----
 * "multilabel_margin_loss.forward": tensors: [input, target, is_target
 * ([N, C], input dtype, out: 1 at each target class), out (input dtype)];
 * scalars: [per_row, reduction]. per_row: range N, out[n] the row's loss;
 * else range 1, out[0] the rows' double sum / C (/ N for mean). A target
 * >= C fails with LOOM_ERROR_INDEX_OUT_OF_RANGE.
 *
 * "multilabel_margin_loss.backward": range N; writes all of grad_input
 * [N, C] (contiguous). tensors: [grad_output (N contiguous elements if
 * per_row, else one), input, target, is_target, grad_input]; scalars:
 * [g (f: 1/C, or 1/(N*C) for mean), per_row]. */

#endif /* LOOM_KERNELS_LOSS_CONTRACT_H */
