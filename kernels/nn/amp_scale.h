/* kernels/nn/amp_scale.h — gradient scaling's unscale-and-check and scale
 * update (contracts and names in loom/kernels/amp.h). */
#ifndef LOOM_KERNELS_AMP_SCALE_H
#define LOOM_KERNELS_AMP_SCALE_H

#include "loom/kernel_abi.h"
#include "loom/kernels/amp.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_amp_check_and_unscale(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_amp_update_scale(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_AMP_SCALE_H */
