/* kernels/conv/conv_variants.h — the per-ISA variants behind the fp32
 * implicit-GEMM, padded-row and Winograd convolutions of kernels/conv.h.
 * Each public kernel there is a selector (conv_select.c) that runs one of
 * these; they take its arguments and keep its contract. Internal: for the
 * selectors and the tests that hold the variants against each other.
 *
 * _avx512: AVX-512 CPUs only. _generic: plain C for any CPU, the same
 * algorithm: the same gathers, transforms and k order, around the micro-
 * kernel of the plan the isa scalar gives (kernels/gemm), so that with an
 * AVX-512 plan a twin gives its AVX-512 variant's bits. The selectors give
 * the twins only plans of the generic GEMM, whose micro-kernel multiplies
 * and adds where AVX-512 fuses the two. */
#ifndef LOOM_KERNELS_CONV_VARIANTS_H
#define LOOM_KERNELS_CONV_VARIANTS_H

#include <stdint.h>

#include "kernels/gemm/gemm_internal.h"
#include "loom/kernel_abi.h"

int loom_conv_gemm_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_gemm_generic(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end);

int loom_conv_padded_gemm_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_padded_gemm_generic(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_padded_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_padded_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end);

int loom_conv_winograd_weight_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_weight_generic(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end);

/* The Winograd twins have no plan: their GEMMs take `ukr`, a micro-kernel
 * over 12-row panels of A and 32-column panels of B, [k][12] and [k][32]
 * (loom_gemm_ukr_avx512_f32's format). The _generic entry points pass
 * loom_conv_ukr12x32_generic. */
int loom_conv_winograd_with(const loom_kernel_args *args, int64_t begin, int64_t end,
                            loom_gemm_ukr_fn ukr);
int loom_conv_winograd_wgrad_with(const loom_kernel_args *args, int64_t begin, int64_t end,
                                  loom_gemm_ukr_fn ukr);
int loom_conv_winograd_generic(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_winograd_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end);

/* loom_gemm_ukr_avx512_f32's contract in plain C: products summed in k
 * order from zero, then added to T, multiplies and adds apart. */
void loom_conv_ukr12x32_generic(int64_t kc, const void *ap, const void *bp, float *t,
                                int64_t ldt, float alpha, int mr, int nr, int accumulate);

#endif /* LOOM_KERNELS_CONV_VARIANTS_H */
