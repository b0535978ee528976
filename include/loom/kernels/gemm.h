/* loom/kernels/gemm.h — the GEMM's names and argument contracts: batched,
 * packed, cache-blocked matrix multiply,
 *
 *   C[b1,b2] = alpha * A[b1,b2] @ B[b1,b2] + beta * Cin[b1,b2]
 *
 * Every operand is a rank-4 strided view (batch1, batch2, rows, cols); any
 * stride may be 0 (broadcast), so transposes, slices and batch broadcasting
 * cost nothing. A and B are fp32, bf16 or fp16 of one dtype; C and Cin are
 * fp32, bf16 or fp16; accumulation is fp32. beta == 0 ignores Cin (NaNs in
 * it do not propagate), as in BLAS. Every driver provides these names.
 *
 * A product is planned first, then launched as its plan says: the family
 * chooses the variant (on the host driver, from the CPU's features capped
 * by LOOM_GEMM and LOOM_CPU_FEATURES), whether a single result column goes
 * to the GEMV (loom/kernels/gemv.h), which orientation pads its tiles least
 * and how fp32 operands are multiplied, so the caller never does.
 *
 * "gemm.plan" (a planner): tensors: [0] C, [1] A, [2] B (shapes, dtypes,
 * strides; data is never read); scalars: [0].i the math asked for fp32
 * operands (LOOM_GEMM_MATH_*), [1].i the threads the launches run on (it
 * only sizes the tiles: no result depends on it). Fills a loom_gemm_plan.
 * With plan.transposed, every launch below takes C^T, B^T as A, A^T as B
 * and Cin^T (each with its last two dims swapped): the same product,
 * computed as C^T = B^T A^T. Then, by plan.route:
 *  - LOOM_GEMM_ROUTE_GEMV: "gemv.compute" over [0, compute_range), grain
 *    compute_grain (loom/kernels/gemv.h);
 *  - LOOM_GEMM_ROUTE_TILES: for each pass p < plan.passes, "gemm.pack" then
 *    "gemm.compute" over the same arguments, every pass after the first
 *    adding to C (Cin = C, beta = 1):
 *      tensors: [0] C, [1] A, [2] B, [3] workspace (bytes, at least
 *               workspace_bytes), [4] Cin (optional; omit it when beta == 0)
 *      scalars: [0].i plan.pass_variant[p], [1].f alpha, [2].f beta
 *    "gemm.pack" over [0, pack_range), grain pack_grain (a range of 0 need
 *    not be launched), "gemm.compute" over [0, compute_range), grain
 *    compute_grain. The compute launch owns disjoint tiles of C and walks
 *    K in a fixed order, so the result is bitwise independent of the thread
 *    count and of the grain.
 * A plan with nothing to compute (an empty C) has ranges of 0.
 *
 * "gemm.f64": the float64 product, unplanned: tensors [0] C, [1] A, [2] B,
 * [3] Cin (optional; ignored when beta == 0), all float64 rank-4 views;
 * scalars [0].f alpha, [1].f beta; range batch1 * batch2 * rows of C, any
 * grain. Each element sums its products in k order in double, so the
 * result is bitwise independent of the thread count and of the grain.
 *
 * "gemm.int": the integer and bool product, unplanned, with gemm.f64's
 * tensors and range, all of one dtype (int8, uint8, int16, int32, int64,
 * bool); scalars [0].i alpha, [1].i beta, already converted to the dtype's
 * range. Integers wrap: sums and products modulo 2^32 (2^64 for int64),
 * truncated to the dtype. Bool: (alpha and OR_k A[i,k] and B[k,j]) or
 * (beta and Cin). Exact, so independent of the thread count and grain. */
#ifndef LOOM_KERNELS_GEMM_CONTRACT_H
#define LOOM_KERNELS_GEMM_CONTRACT_H

#include <stdint.h>

/* How fp32 A and B are multiplied (PyTorch's float32 matmul precision):
 * exactly ("highest"); as the product of their bf16 roundings, within about
 * 2^-8 of each element ("medium"); or as the three products of their high
 * and low bf16 parts that matter, within about 2^-16 ("high"). A variant
 * that has no bf16 products, and every other dtype, computes exactly; the
 * plan's `math` says which was chosen. */
enum {
  LOOM_GEMM_MATH_EXACT = 0,
  LOOM_GEMM_MATH_BF16 = 1,
  LOOM_GEMM_MATH_BF16X3 = 2,
};

enum { LOOM_GEMM_ROUTE_TILES = 0, LOOM_GEMM_ROUTE_GEMV = 1 };

enum { LOOM_GEMM_MAX_PASSES = 3 };

/* Everything the launches and their caller need, derived only from the
 * shapes, dtypes and broadcast pattern of C, A, B and the variant. The
 * first part is the tiled multiply's geometry, which the kernels derive
 * again from their arguments; the last part is the planner's answer to the
 * caller (zero in the family's internal plans). */
typedef struct loom_gemm_plan {
  int32_t isa;         /* the variant (the family's own numbering) */
  int32_t packed_bf16; /* operands packed as bf16 k-pairs (else fp32) */
  int32_t bf16_math;   /* nonzero: fp32 operands are packed as bf16 parts */
  int32_t mr, nr;      /* register tile */
  int32_t use_acc;     /* C's tiles accumulate in the thread's fp32 buffer */
  int32_t a_in_place;  /* full row panels of A are read where they lie */
  int32_t b_in_compute; /* B's panels are packed by the compute launch */
  int32_t a_in_compute; /* A's panels are packed by the compute launch */
  int32_t a_tail_in_compute; /* the partial last row panel of an A read in
                                place is packed by the compute launch */
  int32_t rows_outer;   /* a tile's row panels are its outer loop (B packed) */
  int64_t batch1, batch2, m, n, k;
  int64_t kp;          /* k rounded up to the pack's k granule */
  int64_t kc;          /* k block walked per pass over a C tile */
  int64_t m_panels, n_panels;
  int64_t a_count1, a_count2, b_count1, b_count2; /* distinct packed matrices */
  int64_t a_bytes, b_bytes; /* one packed A / B matrix */
  int64_t a_offset, b_offset, workspace_bytes;
  int64_t pack_units_a, pack_range, pack_grain;
  int64_t mt, nt, m_tiles, n_tiles, compute_range, compute_grain;
  /* Row tiles [0, m_tiles_tall) hold mt rows of C, the others mt - mr:
   * tile i starts after the rows of the tiles before it. The last one
   * ends at C's last row. */
  int64_t m_tiles_tall;
  /* ---- the planner's answer ("gemm.plan") ---- */
  int32_t route;       /* LOOM_GEMM_ROUTE_* */
  int32_t transposed;  /* launch on the transposed operands (see above) */
  int32_t math;        /* LOOM_GEMM_MATH_* the launches compute */
  int32_t passes;      /* launch pairs of the tiled route, 1 to MAX_PASSES */
  int32_t pass_variant[LOOM_GEMM_MAX_PASSES]; /* scalars[0].i of each pass */
} loom_gemm_plan;

#endif /* LOOM_KERNELS_GEMM_CONTRACT_H */
