/* loom/kernels/search.h — the searchsorted kernel's name and argument
 * contract (searchsorted and bucketize). Every driver provides this name.
 *
 * "search.searchsorted": for each value, the index of the first boundary
 * >= it (right: > it) in its sorted row, by the CPU backend's binary
 * search (a NaN value lands past every number; NaN boundaries sort last).
 * tensors [0] out (int64 or int32, contiguous, input's numel), [1] input
 * (contiguous), [2] boundaries (contiguous, same dtype as input; rows of
 * length n), [3] sorter (int64 like boundaries, or data NULL).
 * scalars [0].i right, [1].i values per boundary row (0: one row for all).
 * range: numel(input). */
#ifndef LOOM_KERNELS_SEARCH_CONTRACT_H
#define LOOM_KERNELS_SEARCH_CONTRACT_H

#endif /* LOOM_KERNELS_SEARCH_CONTRACT_H */
