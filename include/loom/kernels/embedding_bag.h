/* loom/kernels/embedding_bag.h — embedding_bag's kernels, their names and
 * argument contracts. Every driver provides these names. Bags are ranges of
 * a 1-d int64 index list given by int64 offsets (B entries, or B + 1 with
 * include_last_offset: then the last is the end); an index equal to
 * padding_idx (-1: none) is skipped and not counted. Rows accumulate in
 * the element type (float32 or float64) in index order, as the CPU does.
 *
 * "embedding_bag.forward": range B. tensors: [out (B, D, contiguous),
 * offset2bag (N, int64, out: each index's bag; the caller sets it to -1
 * first, which indices after the last offset keep), bag_size (B, int64, out:
 * its counted indices), max_indices (B, D, int64, out; data NULL unless
 * mode is max), weight (W, D, any strides), indices (N), offsets,
 * per_sample_weights (N, contiguous; data NULL: none; sum only)];
 * scalars: [mode (LOOM_EMBAG_*), include_last_offset, padding_idx].
 * sum: the rows (times their weights, fused multiply-adds); mean: the sum
 * divided by the count; max: each column's largest (the first of equals;
 * a NaN only when first), max_indices the row it came from. An empty bag
 * is zeros (max_indices 0). An index outside [0, W) fails with
 * LOOM_ERROR_INDEX_OUT_OF_RANGE; offsets that do not start at 0, decrease
 * or pass N fail with LOOM_ERROR_INVALID_ARGUMENT.
 *
 * "embedding_bag.backward_rows" (sum and mean): range W. tensors:
 * [grad_weight (W, D, contiguous, out), grad (B, D, any strides),
 * offsets and order of the indices from "embedding.backward_bucket",
 * offset2bag, bag_size, per_sample_weights (or data NULL)]; scalars:
 * [mode, padding_idx, scale_grad_by_freq]. Row r adds scale * grad[bag]
 * over its occurrences in index order (those in no bag, -1, add nothing),
 * scale = 1 / r's number of occurrences (with scale_grad_by_freq) / bag
 * size (mean) * per-sample weight, formed in double and rounded once.
 *
 * "embedding_bag.backward_max": range D. tensors: [grad_weight (W, D,
 * contiguous, zeroed by the caller), grad (B, D), max_indices (B, D),
 * bag_size (B)]; column d adds grad[b, d] into row max_indices[b, d] for
 * each non-empty bag b in order.
 *
 * "embedding_bag.per_sample_weights_backward": range N. tensors: [out (N),
 * grad (B, D), weight (W, D), indices, offset2bag]; scalars: [padding_idx].
 * out[i] = the dot product of grad[bag of i] and weight[indices[i]] over
 * the columns in order (0 for the padding index). */
#ifndef LOOM_KERNELS_EMBEDDING_BAG_CONTRACT_H
#define LOOM_KERNELS_EMBEDDING_BAG_CONTRACT_H

enum { LOOM_EMBAG_SUM = 0, LOOM_EMBAG_MEAN = 1, LOOM_EMBAG_MAX = 2 };

#endif /* LOOM_KERNELS_EMBEDDING_BAG_CONTRACT_H */
