/* kernels/gemm/gemm.h — the GEMM's kernels, its planner and the variant
 * word they share (contracts and names in loom/kernels/gemm.h; the plan
 * struct lives there too).
 *
 * The launches' scalars[0].i is a variant word: the isa (loom_gemm_isa),
 * optionally | LOOM_GEMM_IN_COMPUTE and the other flags below. The pack
 * launch copies A and B into register-tile panels in the workspace (each
 * distinct matrix once, broadcast ones once), except what the compute
 * launch takes over under LOOM_GEMM_IN_COMPUTE; its range may then be 0.
 * The pack step reads through the strides. Other kernel families (the
 * convolutions) plan with loom_gemm_plan_init and launch these panels'
 * layout themselves. */
#ifndef LOOM_KERNELS_GEMM_H
#define LOOM_KERNELS_GEMM_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/gemm.h"

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
 * and the workspace holds no A. The workspace and the thread buffers are
 * then the GEMM's own: a large fp32 product may take k blocks of 512
 * (plan.kc) where a plan without this flag keeps 256, so its bits may
 * differ from that plan's (never with the worker count). */
enum { LOOM_GEMM_A_IN_COMPUTE = 0x1000 };

/* Added to the isa: fp32 A and B are multiplied as bf16 (on AMX tiles, or
 * by vdpbf16ps on AVX512BF16), summing in fp32 as ever, each element
 * rounded to the nearest bf16 (even on ties) as it is packed; with
 * LOOM_GEMM_A_LOW / LOOM_GEMM_B_LOW, that operand's low part instead:
 * x - bf16(x), rounded to bf16 (0 for infinities and NaN, which the high
 * part carries). The three products of the high and
 * low parts that matter sum to the fp32 product within about 2^-16 of
 * each element (PyTorch's "high" float32 matmul precision); the high parts
 * alone within 2^-8 ("medium"). vdpbf16ps and tdpbf16ps flush subnormal
 * bf16 inputs and sums to zero: magnitudes under 2^-126 are lost. Ignored
 * by the other variants and for other dtypes. Which precision each
 * variant serves: gemm_select.c. */
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

/* Fills the geometry of `out` for the given operands (ranks 4, matching
 * sizes) and variant word; the planner's answer stays 0. Returns 0 or a
 * loom_status code (LOOM_ERROR_INVALID_ARGUMENT for bad ranks, sizes or
 * dtypes). Pure: kernels call it too. */
int loom_gemm_plan_init(const loom_tensor *c, const loom_tensor *a,
                        const loom_tensor *b, int32_t isa,
                        loom_gemm_plan *out);

int loom_gemm_pack_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end);
int loom_gemm_compute_kernel(const loom_kernel_args *args, int64_t begin,
                             int64_t end);
/* "gemm.compute_epilogue" and "gemm.epilogue" (loom/kernels/gemm_epilogue.h;
 * gemm_epilogue.c). */
int loom_gemm_compute_epilogue_kernel(const loom_kernel_args *args, int64_t begin,
                                      int64_t end);
int loom_gemm_epilogue_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_gemm_f64_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_gemm_int_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "gemm.plan" (loom/kernels/gemm.h) for the variant loom_gemm_isa_selected()
 * names; loom_gemm_plan_for plans as `isa` would, so that tests check the
 * plans of variants this CPU cannot run (planning executes none of them). */
int loom_gemm_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_gemm_plan_for(const loom_kernel_args *args, loom_gemm_isa isa, loom_gemm_plan *out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GEMM_H */
