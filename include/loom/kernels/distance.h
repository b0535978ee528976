/* loom/kernels/distance.h — the pairwise p-norm distance kernels' names and
 * argument contracts (cdist's direct form, pdist). Every driver provides
 * this name.
 *
 * "distance.pairs": scalars: [mode (LOOM_DIST_*), p (.f, >= 0: 0 counts
 * differing columns, inf takes the largest difference)]; float32/float64,
 * every tensor contiguous and of one dtype. Each pair is accumulated over
 * the columns in order, in the element type.
 *   LOOM_DIST_CDIST: tensors [out (B, R1, R2), x1 (B, R1, M), x2 (B, R2, M)];
 *     range B * R1 (one row of out per item).
 *   LOOM_DIST_PDIST: tensors [out (N * (N - 1) / 2), x (N, M)]; range N:
 *     item i writes the pairs (i, j > i), in row-major order of the upper
 *     triangle.
 *
 * "distance.backward": the gradient with respect to the first operand, the
 * CPU's per-column sums in its order. scalars as above.
 *   LOOM_DIST_CDIST: tensors [grad_x1 (B, R1, M), grad (B, R1, R2),
 *     x1, x2, dist (B, R1, R2)]; range B * R1.
 *   LOOM_DIST_PDIST: tensors [grad_x (N, M), grad (pairs), x, dist
 *     (pairs)]; range M (one column per item). */
#ifndef LOOM_KERNELS_DISTANCE_CONTRACT_H
#define LOOM_KERNELS_DISTANCE_CONTRACT_H

enum { LOOM_DIST_CDIST = 0, LOOM_DIST_PDIST = 1 };

#endif /* LOOM_KERNELS_DISTANCE_CONTRACT_H */
