/* loom/kernels/histogram.h — the histogram kernel's name and argument
 * contract (histc, histogram). Every driver provides this name.
 *
 * "histogram.bins": range P = ceil(N / block). tensors: [partials (P, B),
 * input (N), weight (N; data NULL: every element counts 1), edges (B + 1,
 * increasing)], every one contiguous and of the input's dtype (float32 or
 * float64); scalars: [algorithm (loom_hist_algorithm), block]. Item p sets
 * partials[p] to the histogram of elements [p * block, (p + 1) * block),
 * added in element order in the element type. An element outside
 * [edges[0], edges[B]] (or NaN) is skipped; bin b holds [edges[b],
 * edges[b + 1]), the last bin also its right edge. The partials' column
 * sums are the histogram: with the block fixed by the caller, independent
 * of the thread count.
 *
 * The bin of element x, as the CPU selects it:
 *   LOOM_HIST_LINEAR (histc): trunc((x - edges[0]) * B / (edges[B] -
 *     edges[0])) in the element type;
 *   LOOM_HIST_LINEAR_SEARCH (histogram with a bin count): that position
 *     corrected by searching the edges next to it;
 *   LOOM_HIST_BINARY (histogram with bin edges): a binary search. */
#ifndef LOOM_KERNELS_HISTOGRAM_CONTRACT_H
#define LOOM_KERNELS_HISTOGRAM_CONTRACT_H

typedef enum loom_hist_algorithm {
  LOOM_HIST_LINEAR = 0,
  LOOM_HIST_LINEAR_SEARCH = 1,
  LOOM_HIST_BINARY = 2,
} loom_hist_algorithm;

#endif /* LOOM_KERNELS_HISTOGRAM_CONTRACT_H */
