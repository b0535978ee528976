/* kernels/conv/conv_nhwc.h — the channels-last bf16 convolutions on AMX tiles
 * (kernels/conv/conv_nhwc_amx.c; AMX CPUs only): their entry points, under the
 * names and contracts of loom/kernels/conv_nhwc.h. */
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

#ifdef __cplusplus
}
#endif

#endif /* LOOM_KERNELS_CONV_NHWC_H */
