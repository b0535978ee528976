/* kernels/conv/conv_select.c — the convolutions' named entry points
 * (loom/kernels/conv.h), and the fp32 kernels of kernels/conv/conv.h whose
 * AVX-512 variants have a generic twin (kernels/conv/conv_variants.h):
 * each runs the variant its launch's GEMM plan, or for Winograd the GEMM
 * variant of the process, calls for. Both follow loom_gemm_isa_selected(),
 * so LOOM_CPU_FEATURES and LOOM_GEMM reach them, and a CPU without AVX-512
 * runs the same algorithms as one with it. */
#include "kernels/conv/conv.h"
#include "kernels/conv/conv_nhwc.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/registry.h"
#include "loom/status.h"

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

/* The channels-last bf16 kernels: AMX tiles where the process runs AMX,
 * vdpbf16ps where it runs AVX512-BF16 (the planners choose them only
 * there); nothing else runs them. */
int loom_conv_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  switch (loom_gemm_isa_selected()) {
    case LOOM_GEMM_AMX: return loom_conv_nhwc_amx_kernel(args, begin, end);
    case LOOM_GEMM_AVX512BF16: return loom_conv_nhwc_avx512bf16_kernel(args, begin, end);
    default: return LOOM_ERROR_NOT_SUPPORTED;
  }
}

int loom_conv_nhwc_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  switch (loom_gemm_isa_selected()) {
    case LOOM_GEMM_AMX: return loom_conv_nhwc_wgrad_amx_kernel(args, begin, end);
    case LOOM_GEMM_AVX512BF16: return loom_conv_nhwc_wgrad_avx512bf16_kernel(args, begin, end);
    default: return LOOM_ERROR_NOT_SUPPORTED;
  }
}

/* The names of loom/kernels/conv_nhwc.h. */
const loom_kernel_entry loom_conv_nhwc_kernels[] = {
    {"conv_nhwc.pad", loom_conv_nhwc_pad_kernel, NULL},
    {"conv_nhwc.weight", loom_conv_nhwc_weight_kernel, NULL},
    {"conv_nhwc.forward", loom_conv_nhwc_kernel, NULL},
    {"conv_nhwc.weight_grad", loom_conv_nhwc_wgrad_kernel, NULL},
    {NULL, NULL, NULL},
};

/* The names of loom/kernels/conv.h. The AMX kernels take the bf16 launches,
 * which the planners give only where AMX runs. */

static int conv_pack_flipped(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return args->num_tensors > 4 && args->tensors[4].dtype == LOOM_BFLOAT16
             ? loom_conv_pack_flipped_amx_kernel(args, begin, end)
             : loom_conv_pack_flipped_kernel(args, begin, end);
}

static int conv_implicit_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return args->num_tensors > 0 && args->tensors[0].dtype == LOOM_BFLOAT16
             ? loom_conv_gemm_amx_kernel(args, begin, end)
             : loom_conv_gemm_kernel(args, begin, end);
}

static int conv_implicit_weight_grad(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return args->num_tensors > 0 && args->tensors[0].dtype == LOOM_BFLOAT16
             ? loom_conv_wgrad_amx_kernel(args, begin, end)
             : loom_conv_wgrad_kernel(args, begin, end);
}

const loom_kernel_entry loom_conv_kernels[] = {
    {"conv.forward.plan", NULL, loom_conv_forward_planner},
    {"conv.input_grad.plan", NULL, loom_conv_input_grad_planner},
    {"conv.input_grad.phase", NULL, loom_conv_phase_planner},
    {"conv.weight_grad.plan", NULL, loom_conv_weight_grad_planner},
    {"conv.pack", loom_gemm_pack_kernel, NULL},
    {"conv.pack_flipped", conv_pack_flipped, NULL},
    {"conv.pad", loom_conv_pad_kernel, NULL},
    {"conv.implicit.forward", conv_implicit_forward, NULL},
    {"conv.implicit.weight_grad", conv_implicit_weight_grad, NULL},
    {"conv.padded.forward", loom_conv_padded_gemm_kernel, NULL},
    {"conv.padded.weight_grad", loom_conv_padded_wgrad_kernel, NULL},
    {"conv.winograd.weight", loom_conv_winograd_weight_kernel, NULL},
    {"conv.winograd.forward", loom_conv_winograd_kernel, NULL},
    {"conv.winograd.weight_grad", loom_conv_winograd_wgrad_kernel, NULL},
    {"conv.winograd.weight_grad_finish", loom_conv_winograd_wgrad_finish_kernel, NULL},
    {NULL, NULL, NULL},
};
