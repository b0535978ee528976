/* kernels/gemm/gemm.h — batched, packed, cache-blocked matrix multiply.
 *
 *   C[b1,b2] = alpha * A[b1,b2] @ B[b1,b2] + beta * Cin[b1,b2]
 *
 * Every operand is a rank-4 strided view (batch1, batch2, rows, cols); any
 * stride may be 0 (broadcast), so transposes, slices and batch broadcasting
 * cost nothing: the pack step reads through the strides. A and B are fp32,
 * bf16 or fp16; C and Cin are fp32, bf16 or fp16; accumulation is fp32.
 * beta == 0 ignores Cin (NaNs in it do not propagate), as in BLAS.
 *
 * A multiply is two launches on one stream, over the same arguments:
 *   tensors: [0] C, [1] A, [2] B, [3] workspace (bytes, plan.workspace_bytes),
 *            [4] Cin (optional; omit it when beta == 0)
 *   scalars: [0].i isa (loom_gemm_isa), optionally | LOOM_GEMM_IN_COMPUTE;
 *            [1].f alpha, [2].f beta
 *   1. loom_gemm_pack_kernel    over [0, plan.pack_range), grain plan.pack_grain
 *   2. loom_gemm_compute_kernel over [0, plan.compute_range), grain plan.compute_grain
 * The pack launch copies A and B into register-tile panels in the workspace
 * (each distinct matrix once, broadcast ones once), except what the compute
 * launch takes over under LOOM_GEMM_IN_COMPUTE; its range may then be 0,
 * and it need not be launched. The compute launch owns
 * disjoint tiles of C and walks K in a fixed order, so the result is bitwise
 * independent of the thread count and of the grain. */
#ifndef LOOM_KERNELS_GEMM_H
#define LOOM_KERNELS_GEMM_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_gemm_isa {
  LOOM_GEMM_GENERIC = 0,    /* portable C, always correct */
  LOOM_GEMM_AVX512 = 1,     /* fp32 FMA register tile; bf16/fp16 widened at pack */
  LOOM_GEMM_AVX512BF16 = 2, /* AVX512 for fp32, vdpbf16ps for bf16 operands */
  LOOM_GEMM_AMX = 3,        /* AVX512BF16, with AMX tiles for bf16 operands */
  LOOM_GEMM_ISA_COUNT = 4,
} loom_gemm_isa;

/* Added to the isa of a plan (and of both launches): the compute launch
 * may take over work of the pack launch. It reads full row panels of a
 * small, k-contiguous A where they lie, and, when one row tile covers C
 * (every B panel then serves one tile), packs each B panel itself just
 * before use, into the thread's cache instead of through memory. Only for
 * loom_gemm_compute_kernel and for the convolutions that read A in place
 * the same way and gather B themselves (loom_conv_gemm_kernel, the AMX
 * forward, loom_conv_padded_wgrad_kernel): the other users of the packed
 * operands must not pass it. */
enum { LOOM_GEMM_IN_COMPUTE = 0x100 };

/* Added with LOOM_GEMM_IN_COMPUTE, by loom_gemm_compute_kernel's users
 * only: when one column tile covers C (every A panel then serves one
 * tile), the compute launch packs each A panel itself too (plan.a_in_compute),
 * and the workspace holds no A. */
enum { LOOM_GEMM_A_IN_COMPUTE = 0x1000 };

/* Added to the isa: fp32 A and B are multiplied as bf16 on AMX tiles
 * (summing in fp32 as ever), each element rounded to the nearest bf16 as
 * it is packed; with LOOM_GEMM_A_LOW / LOOM_GEMM_B_LOW, that operand's
 * low part instead: x - bf16(x), rounded to bf16 (0 for infinities and
 * NaN, which the high part carries). The three products of the high and
 * low parts that matter sum to the fp32 product within about 2^-16 of
 * each element (PyTorch's "high" float32 matmul precision); the high parts
 * alone within 2^-8 ("medium"). Ignored without AMX or for other dtypes. */
enum { LOOM_GEMM_BF16_MATH = 0x200, LOOM_GEMM_A_LOW = 0x400, LOOM_GEMM_B_LOW = 0x800 };

/* Added to the isa: the threads the launches run on (0-255; 0 or 1 plan
 * for 2). It only sizes the compute tiles, so no result depends on it. */
#define LOOM_GEMM_WORKERS(n) ((int32_t)((n) > 255 ? 255 : (n) < 0 ? 0 : (n)) << 16)

/* The variant to use, chosen once from the CPU's features; LOOM_GEMM=
 * generic|avx512|avx512bf16|amx overrides it, capped at what the CPU runs. */
loom_gemm_isa loom_gemm_isa_selected(void);
/* 1 if this CPU (and OS) can run `isa`. */
int loom_gemm_isa_supported(loom_gemm_isa isa);
const char *loom_gemm_isa_name(loom_gemm_isa isa);

/* Everything both launches and the caller need to know, derived only from
 * the shapes, dtypes and broadcast pattern of C, A, B and the isa. */
typedef struct loom_gemm_plan {
  int32_t isa;
  int32_t packed_bf16; /* operands packed as bf16 k-pairs (else fp32) */
  int32_t bf16_math;   /* fp32 operands packed as bf16: LOOM_GEMM_BF16_MATH,
                          with LOOM_GEMM_A_LOW / LOOM_GEMM_B_LOW, or 0 */
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
} loom_gemm_plan;

/* Fills `out` for the given operands (ranks 4, matching sizes). Returns 0 or
 * a loom_status code (LOOM_ERROR_INVALID_ARGUMENT for bad ranks, sizes or
 * dtypes). Pure: kernels call it too. */
int loom_gemm_plan_init(const loom_tensor *c, const loom_tensor *a,
                        const loom_tensor *b, int32_t isa,
                        loom_gemm_plan *out);

int loom_gemm_pack_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end);
int loom_gemm_compute_kernel(const loom_kernel_args *args, int64_t begin,
                             int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GEMM_H */
