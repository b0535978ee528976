/* loom/kernels/gemv.h — matrix-vector products: the GEMM's operands when
 * the result is a single column,
 *
 *   C[b1,b2] (m x 1) = alpha * A[b1,b2] (m x k) @ B[b1,b2] (k x 1)
 *                      + beta * Cin[b1,b2],
 *
 * memory-bound, so a register tile would mostly multiply padding. "gemm.plan"
 * (loom/kernels/gemm.h) routes such products here and gives the range.
 * Operands are rank-4 strided views as for the GEMM (any strides, 0
 * broadcasts); A and B fp32, bf16 or fp16 of one dtype, C and Cin fp32,
 * bf16 or fp16, accumulation in fp32 in a fixed order (bitwise independent
 * of the chunking). Every driver provides this name.
 *
 * "gemv.compute": tensors: [0] C, [1] A, [2] B, [3] Cin (optional; omit
 * when beta == 0); scalars: [0].f alpha, [1].f beta;
 * range: batch1 * batch2 * ceil(m / LOOM_GEMV_ROWS), grain any. */
#ifndef LOOM_KERNELS_GEMV_CONTRACT_H
#define LOOM_KERNELS_GEMV_CONTRACT_H

enum { LOOM_GEMV_ROWS = 256 };

#endif /* LOOM_KERNELS_GEMV_CONTRACT_H */
