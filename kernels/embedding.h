/* kernels/embedding.h — the gradient of an embedding lookup, without
 * atomics: indices are bucketed by row with a stable counting sort, then each
 * row of grad_weight adds its gradients in the order they occur. */
#ifndef LOOM_KERNELS_EMBEDDING_H
#define LOOM_KERNELS_EMBEDDING_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Range 1. tensors: [indices (any int dtype, contiguous, n elements),
 * offsets (int64, num_weights + 1, out), order (int64, n, out)];
 * scalars: [num_weights]. Afterwards the positions of the occurrences of row
 * r are order[offsets[r] .. offsets[r+1]) in increasing position. An index
 * outside [0, num_weights) fails with LOOM_ERROR_INVALID_ARGUMENT. */
int loom_embedding_backward_bucket(const loom_kernel_args *args,
                                   int64_t begin, int64_t end);

/* Range num_weights. tensors: [grad_output (n, D), any strides; offsets;
 * order; grad_weight (num_weights, D), contiguous];
 * scalars: [padding_idx (-1: none), scale_grad_by_freq]. Rows without
 * occurrences (and the padding row) become zero. */
int loom_embedding_backward_rows(const loom_kernel_args *args, int64_t begin,
                                 int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_EMBEDDING_H */
