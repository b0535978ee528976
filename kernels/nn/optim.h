/* kernels/nn/optim.h — the fused optimizer steps (contracts and names in
 * loom/kernels/optim.h). */
#ifndef LOOM_KERNELS_OPTIM_H
#define LOOM_KERNELS_OPTIM_H

#include "loom/kernel_abi.h"
#include "loom/kernels/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_adam_step(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_sgd_step(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_OPTIM_H */
