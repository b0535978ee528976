/* kernels/nn/weight_norm.h — the weight normalization kernels (contracts and
 * names in loom/kernels/weight_norm.h). */
#ifndef LOOM_KERNELS_WEIGHT_NORM_H
#define LOOM_KERNELS_WEIGHT_NORM_H

#include "loom/kernel_abi.h"
#include "loom/kernels/weight_norm.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_weight_norm_rows_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_weight_norm_rows_backward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_weight_norm_cols_partials(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_weight_norm_cols_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_weight_norm_cols_backward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_weight_norm_cols_apply(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_WEIGHT_NORM_H */
