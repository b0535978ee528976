/* kernels/nn/distance.h — the pairwise distance kernels (contracts and name in
 * loom/kernels/distance.h). */
#ifndef LOOM_KERNELS_DISTANCE_H
#define LOOM_KERNELS_DISTANCE_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_distance_pairs(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_distance_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_DISTANCE_H */
