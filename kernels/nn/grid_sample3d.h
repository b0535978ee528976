/* kernels/nn/grid_sample3d.h — the 3-d grid sampling kernels (contracts
 * and names in loom/kernels/grid_sample3d.h). */
#ifndef LOOM_KERNELS_GRID_SAMPLE3D_H
#define LOOM_KERNELS_GRID_SAMPLE3D_H

#include "loom/kernel_abi.h"
#include "loom/kernels/grid_sample3d.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_grid_sample3d(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_grid_sample3d_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GRID_SAMPLE3D_H */
