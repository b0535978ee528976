/* loom/kernels/index_advanced.h — the kernels of advanced indexing (x[i, j],
 * x[mask] and their assignments) and nonzero: names and argument
 * contracts. Every driver provides these names.
 *
 * "index_advanced.get_put": tensors [0] dst, [1] src, [2..2+k) k int64
 * index tensors, all of one shape (broadcast operands carry stride 0).
 * scalars [0].i mode (loom_index_advanced_mode), [1].i k, then the k sizes
 * of the indexed dims, then their k strides (elements) in the indexed
 * tensor. With e an element of the shape and off(e) = sum_j idx_j[e] *
 * stride_j (negative indices count from the end):
 *   GET      dst = the result, src = the indexed tensor restrided so that
 *            the indexed dims have stride 0: dst[e] = src[e + off(e)]
 *   PUT      dst = the indexed tensor restrided, src = the values:
 *            dst[e + off(e)] = src[e]
 *   PUT_ADD  as PUT with +=
 * PUT and PUT_ADD must run as one call (grain = range) so that writes to
 * one element land in element order. k is at most LOOM_INDEX_ADVANCED_MAX.
 * An index out of range returns LOOM_ERROR_INDEX_OUT_OF_RANGE.
 *
 * Nonzero runs in two passes over fixed chunks of the input's elements
 * (row-major), so the result does not depend on the thread count:
 * "index_advanced.nonzero_count": tensors [0] input, [1] counts (int64, one
 *   per chunk); scalars [0].i chunk length; range: chunks.
 * loom_nonzero_first_rows turns the counts into each chunk's first output
 *   row, on the host, and returns the total.
 * "index_advanced.nonzero_write": tensors [0] input, [1] first output row
 *   of each chunk (int64), [2] out (int64, rows x rank); scalars [0].i
 *   chunk length; range: chunks. Zero is 0, -0.0 or false; NaN is nonzero. */
#ifndef LOOM_KERNELS_INDEX_ADVANCED_CONTRACT_H
#define LOOM_KERNELS_INDEX_ADVANCED_CONTRACT_H

#include <stdint.h>

typedef enum loom_index_advanced_mode {
  LOOM_INDEX_ADVANCED_GET, LOOM_INDEX_ADVANCED_PUT, LOOM_INDEX_ADVANCED_PUT_ADD,
} loom_index_advanced_mode;

enum { LOOM_INDEX_ADVANCED_MAX = 6 };

/* The exclusive prefix sum of the chunks' counts, in place (host memory),
 * and the total: the first rows "index_advanced.nonzero_write" expects. */
static inline int64_t loom_nonzero_first_rows(int64_t *counts, int64_t chunks) {
  int64_t total = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n = counts[c];
    counts[c] = total;
    total += n;
  }
  return total;
}

#endif /* LOOM_KERNELS_INDEX_ADVANCED_CONTRACT_H */
