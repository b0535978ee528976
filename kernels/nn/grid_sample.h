/* kernels/nn/grid_sample.h — the 2-d grid sampling kernels (contracts and
 * names in loom/kernels/grid_sample.h). */
#ifndef LOOM_KERNELS_GRID_SAMPLE_H
#define LOOM_KERNELS_GRID_SAMPLE_H

#include "loom/kernel_abi.h"
#include "loom/kernels/grid_sample.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_grid_sample(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_grid_sample_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GRID_SAMPLE_H */
