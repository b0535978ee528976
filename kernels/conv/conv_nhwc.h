/* kernels/conv/conv_nhwc.h — the channels-last bf16 convolutions
 * (kernels/conv/conv_nhwc_amx.c, conv_nhwc_avx512bf16.c): their entry
 * points, under the names and contracts of loom/kernels/conv_nhwc.h. The
 * copy and the weight's packing run on AVX512-BF16 and AMX CPUs alike; the
 * forward and the weight gradient are selectors (conv_select.c) over an AMX
 * variant and an AVX512-BF16 one (vdpbf16ps on zmm registers), which the
 * GEMM variant of the process (loom_gemm_isa_selected()) picks. */
#ifndef LOOM_KERNELS_CONV_NHWC_H
#define LOOM_KERNELS_CONV_NHWC_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/conv_nhwc.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_conv_nhwc_pad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_weight_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* The variants: _amx on AMX CPUs only, _avx512bf16 on AVX512-BF16 ones. */
int loom_conv_nhwc_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_wgrad_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_avx512bf16_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_conv_nhwc_wgrad_avx512bf16_kernel(const loom_kernel_args *args, int64_t begin,
                                           int64_t end);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_KERNELS_CONV_NHWC_H */
