/* loom/kernels/embedding.h — the embedding gradient's kernels, their names
 * and argument contracts. Every driver provides these names. The gradient
 * needs no atomics: indices are bucketed by row with a stable counting
 * sort, then each row of grad_weight adds its gradients in the order they
 * occur. (The forward lookup is "index.along_dim", loom/kernels/index.h.)
 *
 * "embedding.backward_bucket": range 1. tensors: [indices (any int dtype,
 * contiguous, n elements), offsets (int64, num_weights + 1, out), order
 * (int64, n, out)]; scalars: [num_weights]. Afterwards the positions of the
 * occurrences of row r are order[offsets[r] .. offsets[r+1]) in increasing
 * position. An index outside [0, num_weights) fails with
 * LOOM_ERROR_INVALID_ARGUMENT.
 *
 * "embedding.backward_rows": range num_weights. tensors: [grad_output
 * (n, D), any strides; offsets; order; grad_weight (num_weights, D),
 * contiguous]; scalars: [padding_idx (-1: none), scale_grad_by_freq]. Rows
 * without occurrences (and the padding row) become zero.
 *
 * "embedding.renorm_rows" (embedding_renorm_, in place): range num_weights.
 * tensors: [offsets (from "embedding.backward_bucket" of the indices),
 * weight (num_weights, D, float dtype, any strides)]; scalars: [max_norm
 * (.f), norm_type (.f)]. Each row that some index names and whose
 * norm_type-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7). */
#ifndef LOOM_KERNELS_EMBEDDING_CONTRACT_H
#define LOOM_KERNELS_EMBEDDING_CONTRACT_H

#endif /* LOOM_KERNELS_EMBEDDING_CONTRACT_H */
