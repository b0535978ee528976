/* loom/kernels/ccl.h — the collectives' reduction kernel (runtime/ccl,
 * loom/ccl.h): combine the ranks' buffers element by element, in rank
 * order, with one rounding at the end.
 *
 * "ccl.reduce": tensors[0] = dst; tensors[1 .. n] = the n inputs in rank
 * order; optionally tensors[n + 1] = the PREMUL_SUM factor (one element of
 * the data's dtype). All contiguous, with range elements of one dtype
 * (float32, float64, float16, bfloat16, int8..int64, uint8, bool); dst may
 * be one of the inputs. scalars[0].i = the loom_ccl_op (loom/ccl.h),
 * scalars[1].f = the PREMUL_SUM factor when no factor tensor is given,
 * scalars[2].i = the AVG divisor, scalars[3].i = n. The launch range is the
 * element count; use LOOM_CCL_REDUCE_GRAIN as the grain.
 *
 * Accumulation: float16, bfloat16 and float32 in float, float64 in double,
 * integers in 64 bits (wrapping as two's complement, then truncated to the
 * type), bool as or (SUM, MAX) / and (PROD, MIN). AVG divides the sum by
 * the divisor (integers: truncated toward zero); PREMUL_SUM multiplies each
 * input by the factor, rounded to the accumulator's type, before adding;
 * MAX and MIN propagate NaN as torch.maximum and torch.minimum do. Integer
 * and bool data reject PREMUL_SUM, bool rejects AVG
 * (LOOM_ERROR_NOT_SUPPORTED). */
#ifndef LOOM_KERNELS_CCL_CONTRACT_H
#define LOOM_KERNELS_CCL_CONTRACT_H

#define LOOM_CCL_REDUCE_GRAIN 16384

/* Reductions, with PyTorch's ReduceOp meanings. Values are part of the
 * contract. */
typedef enum loom_ccl_op {
  LOOM_CCL_SUM = 0,
  LOOM_CCL_AVG = 1,        /* the sum divided by the divisor */
  LOOM_CCL_PROD = 2,
  LOOM_CCL_MIN = 3,
  LOOM_CCL_MAX = 4,
  LOOM_CCL_PREMUL_SUM = 5, /* the sum of factor * x (floating only) */
  LOOM_CCL_OP_COUNT = 6,
} loom_ccl_op;

#endif /* LOOM_KERNELS_CCL_CONTRACT_H */
