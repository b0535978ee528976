/* loom/kernels/segment_reduce.h — segment_reduce's kernels, their names and
 * argument contracts. Every driver provides these names.
 *
 * The data is viewed as (O, N, I) contiguous: O the product of the sizes
 * before the reduced axis, N its size, I the product of those after it.
 * Segments are given per outer row by int64 offsets (O, S + 1,
 * contiguous): segment s of row o covers [offsets[o, s], offsets[o, s+1]).
 * A segment outside [0, N] or with its end before its start fails with
 * LOOM_ERROR_INVALID_ARGUMENT. Launch items are (outer row, block of
 * LOOM_SEGMENT_BLOCK inner positions): range O * ceil(I / block), any grain;
 * each item walks its row's segments in order, so the bits depend on
 * nothing but the operands.
 *
 * "segment_reduce.forward": tensors [out (O, S, I), data (O, N, I),
 * offsets]; scalars [.i reduction (LOOM_SEGMENT_*), .i has_initial,
 * .f initial]. float32 or float64, computed in the dtype as the CPU does:
 * the initial value (or -inf, +inf, 0, 1) combined with the segment's
 * elements in order (max/min: a NaN element replaces the value, otherwise
 * the C++ std::max/std::min of the two); mean divides a non-NaN sum of a
 * non-empty segment by its length, and an empty one without initial is NaN.
 *
 * "segment_reduce.backward": tensors [grad_input (O, N, I), zero-filled by
 * the caller; grad (O, S, I); output (O, S, I); data (O, N, I); offsets];
 * scalars as forward. sum: the segment's gradient; mean: it divided by the
 * length; max/min: the gradient on the elements equal to the result (or
 * NaN), those of them that are positive divided by their count when it is
 * at least 2; prod: grad * output / x, or, for an x that is 0 or NaN, grad
 * times the product of the initial value and the other elements in order. */
#ifndef LOOM_KERNELS_SEGMENT_REDUCE_CONTRACT_H
#define LOOM_KERNELS_SEGMENT_REDUCE_CONTRACT_H

enum {
  LOOM_SEGMENT_SUM = 0,
  LOOM_SEGMENT_MEAN = 1,
  LOOM_SEGMENT_MAX = 2,
  LOOM_SEGMENT_MIN = 3,
  LOOM_SEGMENT_PROD = 4,
};

#define LOOM_SEGMENT_BLOCK 256

#endif /* LOOM_KERNELS_SEGMENT_REDUCE_CONTRACT_H */
