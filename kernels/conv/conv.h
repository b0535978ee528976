/* kernels/conv/conv.h — the convolutions' entry points: im2col and col2im
 * (names and contracts in loom/kernels/im2col.h), the implicit-GEMM,
 * padded-row and Winograd convolutions with their packing and padding
 * helpers, and the planners (names, plans and contracts in
 * loom/kernels/conv.h). The arithmetic is the GEMM's (kernels/gemm/gemm.h).
 *
 * The fp32 kernels below are selectors (conv_select.c) over per-ISA
 * variants with generic twins (kernels/conv/conv_variants.h); the AMX ones run
 * on AMX CPUs only, where the planners send bf16. */
#ifndef LOOM_KERNELS_CONV_H
#define LOOM_KERNELS_CONV_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/conv.h"
#include "loom/kernels/im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_im2col_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_col2im_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
/* "im2col.nhwc_to_col", "im2col.nhwc_to_image" (im2col_nhwc.c). */
int loom_im2col_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_col2im_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "conv.pack_flipped": fp32, and bf16 for the AMX plan's A panels. */
int loom_conv_pack_flipped_kernel(const loom_kernel_args *args, int64_t begin,
                                  int64_t end);
int loom_conv_pack_flipped_amx_kernel(const loom_kernel_args *args, int64_t begin,
                                      int64_t end);

/* "conv.pad" */
int loom_conv_pad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "conv.implicit.forward": fp32 (any plan: the AVX-512 variant runs for
 * AVX-512 plans, a generic twin for the others), and bf16 on AMX tiles
 * (the plan's isa LOOM_GEMM_AMX, A packed by that plan). */
int loom_conv_gemm_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end);
int loom_conv_gemm_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "conv.implicit.weight_grad": fp32 (any plan; scalars[1] unused), and
 * bf16 on AMX tiles (dy packed by the AMX plan, not read in place). */
int loom_conv_wgrad_kernel(const loom_kernel_args *args, int64_t begin,
                           int64_t end);
int loom_conv_wgrad_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "conv.padded.forward", "conv.padded.weight_grad" (fp32, any plan). */
int loom_conv_padded_gemm_kernel(const loom_kernel_args *args, int64_t begin,
                                 int64_t end);
int loom_conv_padded_wgrad_kernel(const loom_kernel_args *args, int64_t begin,
                                  int64_t end);

/* "conv.winograd.*": kernels/conv/conv_winograd_avx512.c on CPUs whose GEMM
 * variant is AVX-512's, generic twins with the same bits but for the
 * micro-kernel's fused multiply-adds elsewhere (loom_gemm_isa_selected()). */
int loom_conv_winograd_weight_kernel(const loom_kernel_args *args, int64_t begin,
                                     int64_t end);
int loom_conv_winograd_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_wgrad_finish_kernel(const loom_kernel_args *args, int64_t begin,
                                           int64_t end);

/* The planners (conv_plan.c): "conv.forward.plan", "conv.input_grad.plan",
 * "conv.input_grad.phase", "conv.weight_grad.plan", for the GEMM variant
 * loom_gemm_isa_selected() names. The _for forms plan as `isa` (a
 * loom_gemm_isa) would, so that tests check the choices of variants this
 * CPU cannot run: planning runs none of them. */
int loom_conv_forward_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_conv_input_grad_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_conv_phase_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_conv_weight_grad_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_conv_forward_plan_for(const loom_kernel_args *args, int32_t isa,
                               loom_conv_forward_plan *out);
int loom_conv_input_grad_plan_for(const loom_kernel_args *args, int32_t isa,
                                  loom_conv_input_grad_plan *out);
int loom_conv_phase_plan_for(const loom_kernel_args *args, int32_t isa,
                             loom_conv_phase_plan *out);
int loom_conv_weight_grad_plan_for(const loom_kernel_args *args, int32_t isa,
                                   loom_conv_weight_grad_plan *out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_CONV_H */
