/* kernels/conv_select.c — the fp32 convolution kernels of kernels/conv.h
 * whose AVX-512 variants have a generic twin (kernels/conv_variants.h):
 * each runs the variant its launch's GEMM plan, or for Winograd the GEMM
 * variant of the process, calls for. Both follow loom_gemm_isa_selected(),
 * so LOOM_CPU_FEATURES and LOOM_GEMM reach them, and a CPU without AVX-512
 * runs the same algorithms as one with it. */
#include "kernels/conv.h"
#include "kernels/conv_variants.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"

/* Whether the launch's plan (tensors [0..2], isa scalar [0]) runs the
 * AVX-512 fp32 micro-kernel, the only one the AVX-512 variants take. A bad
 * plan goes to the twin, which reports it. */
static int conv_plan_avx512(const loom_kernel_args *args) {
  loom_gemm_plan pl;
  if (args->num_tensors < 3 || args->num_scalars < 1 ||
      loom_gemm_plan_init(&args->tensors[0], &args->tensors[1], &args->tensors[2],
                          (int32_t)args->scalars[0].i, &pl) != 0)
    return 0;
  return loom_gemm_ukr_for(&pl) == loom_gemm_ukr_avx512_f32;
}

/* The Winograd kernels have no plan: the process's GEMM variant decides. */
static int conv_winograd_avx512(void) { return loom_gemm_isa_selected() != LOOM_GEMM_GENERIC; }

int loom_conv_gemm_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_plan_avx512(args) ? loom_conv_gemm_avx512(args, begin, end)
                                : loom_conv_gemm_generic(args, begin, end);
}

int loom_conv_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_plan_avx512(args) ? loom_conv_wgrad_avx512(args, begin, end)
                                : loom_conv_wgrad_generic(args, begin, end);
}

int loom_conv_padded_gemm_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_plan_avx512(args) ? loom_conv_padded_gemm_avx512(args, begin, end)
                                : loom_conv_padded_gemm_generic(args, begin, end);
}

int loom_conv_padded_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_plan_avx512(args) ? loom_conv_padded_wgrad_avx512(args, begin, end)
                                : loom_conv_padded_wgrad_generic(args, begin, end);
}

int loom_conv_winograd_weight_kernel(const loom_kernel_args *args, int64_t begin,
                                     int64_t end) {
  return conv_winograd_avx512() ? loom_conv_winograd_weight_avx512(args, begin, end)
                                : loom_conv_winograd_weight_generic(args, begin, end);
}

int loom_conv_winograd_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_winograd_avx512() ? loom_conv_winograd_avx512(args, begin, end)
                                : loom_conv_winograd_generic(args, begin, end);
}

int loom_conv_winograd_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return conv_winograd_avx512() ? loom_conv_winograd_wgrad_avx512(args, begin, end)
                                : loom_conv_winograd_wgrad_generic(args, begin, end);
}
