/* loom/kernels/weight_norm.h — the weight normalization kernels' names and
 * argument contracts: w = v * g / ||v||, the fused forms behind
 * torch._weight_norm (dim 0 and the last dim), forward and backward. Every
 * driver provides these names.
 *
 * v, w, grad_w and grad_v are contiguous and seen as [M, N]:
 *  - "rows" (dim 0): one norm per row; M = v.size(0), N = numel / M;
 *  - "columns" (the last dim): one norm per column; N = v.size(-1),
 *    M = numel / N.
 * g and grad_g hold one contiguous element per norm (M for rows, N for
 * columns); norm likewise, in float for 16-bit v and g, else in their dtype.
 * Any float dtype; sums run in double in an order fixed by the shape alone
 * (columns: rows in order within blocks of rows_per_block rows, then the
 * blocks in order), so results never depend on the threads or the chunking.
 * Division by a zero norm gives inf/NaN, as in PyTorch. */
#ifndef LOOM_KERNELS_WEIGHT_NORM_CONTRACT_H
#define LOOM_KERNELS_WEIGHT_NORM_CONTRACT_H

/* About this many elements per block of rows in the column partial sums. */
#define LOOM_WEIGHT_NORM_BLOCK 16384

/* ---- rows (dim 0): range M, everything of a row in one call -------------
 * "weight_norm.rows_forward": tensors: [v, g, w, norm]; scalars: [N].
 *
 * "weight_norm.rows_backward": grad_g = sum(grad_w * v) / norm;
 * grad_v = a * grad_w - b * v with a = g / norm, b = a * grad_g / norm.
 * tensors: [grad_w, v, g, norm, grad_v, grad_g]; scalars: [N]. */

/* ---- columns (last dim): three launches ---------------------------------
 * 1. "weight_norm.cols_partials": range ceil(M / rows_per_block). partials
 *    is a contiguous double tensor [blocks, N]: partials[k][j] = sum over
 *    the rows i of block k of x[i][j] * y[i][j].
 *    tensors: [x, y, partials]; scalars: [M, N, rows_per_block].
 *
 * 2a. "weight_norm.cols_forward": forward coefficients, range N:
 *     norm[j] = sqrt(sum_k partials[k][j]), coef[0][j] = g[j] / norm[j].
 *     coef is a contiguous double [1, N].
 *     tensors: [partials, g, norm, coef].
 *
 * 2b. "weight_norm.cols_backward": backward coefficients, range N: with
 *     s = sum_k partials[k][j] (of grad_w * v), grad_g[j] = s / norm[j],
 *     coef[0][j] = a = g / norm, coef[1][j] = b = a * grad_g / norm. coef is
 *     a contiguous double [2, N].
 *     tensors: [partials, g, norm, grad_g, coef].
 *
 * 3. "weight_norm.cols_apply": range M: out[i][j] = coef[0][j] * x[i][j] -
 *    coef[1][j] * y[i][j] (without y: coef[0][j] * x[i][j]; coef then needs
 *    one row). tensors: [x, y?, coef, out]; scalars: [N]. */

#endif /* LOOM_KERNELS_WEIGHT_NORM_CONTRACT_H */
