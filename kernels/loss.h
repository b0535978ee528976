/* kernels/loss.h — loss functions: negative log-likelihood (1d/2d/nd) and
 * the pointwise losses (mse, smooth L1, Huber, binary cross-entropy).
 *
 * Reductions follow at::Reduction: 0 none, 1 mean, 2 sum. Reduced sums are
 * deterministic: the pointwise losses sum fixed blocks of LOOM_LOSS_BLOCK
 * elements into partials, then add the partials in order. */
#ifndef LOOM_KERNELS_LOSS_H
#define LOOM_KERNELS_LOSS_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LOOM_REDUCTION_NONE = 0, LOOM_REDUCTION_MEAN = 1, LOOM_REDUCTION_SUM = 2 };

/* ---- nll_loss over input [N, C, S] and target [N, S] (any strides) ------
 * Forward. tensors: [input, target, weight?, out, total_weight];
 * scalars: [reduction, ignore_index].
 * reduction none: range N*S, out has N*S contiguous elements.
 * mean/sum: range 1, out and total_weight are scalars. A target outside
 * [0, C) that is not ignore_index fails with LOOM_ERROR_INVALID_ARGUMENT. */
int loom_nll_loss_forward(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

/* Backward, range N*S; writes all of grad_input [N, C, S] (contiguous).
 * tensors: [grad_output, target, weight?, total_weight, grad_input];
 * scalars: [reduction, ignore_index]. grad_output has N*S contiguous
 * elements for reduction none, else one. */
int loom_nll_loss_backward(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

/* ---- pointwise losses over same-shaped input/target (any strides) -------- */
enum {
  LOOM_LOSS_MSE = 0,
  LOOM_LOSS_SMOOTH_L1 = 1, /* param: beta */
  LOOM_LOSS_HUBER = 2,     /* param: delta */
  LOOM_LOSS_BCE = 3,       /* weight optional; input must lie in [0, 1] */
};

#define LOOM_LOSS_BLOCK 4096

/* tensors: [input, target, weight?, out]; scalars: [kind, reduction, param].
 * none: range numel, out has the input's shape (any strides).
 * mean/sum: range ceil(numel / LOOM_LOSS_BLOCK); out is a contiguous fp64
 * tensor receiving one partial sum per block. */
int loom_pointwise_loss_forward(const loom_kernel_args *args, int64_t begin,
                                int64_t end);

/* Adds fp64 partials in order into the scalar out, divided by `divisor`
 * (1 for sum, numel for mean). Range 1.
 * tensors: [partials, out]; scalars: [divisor (f)]. */
int loom_loss_sum_partials(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

/* Range numel. tensors: [grad_output, input, target, weight?, grad_input];
 * scalars: [kind, reduction, param]. grad_output is one element for mean/sum,
 * else input-shaped (any strides). */
int loom_pointwise_loss_backward(const loom_kernel_args *args, int64_t begin,
                                 int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_LOSS_H */
