/* kernels/nn/norm.h — the normalization kernels (contracts and names in
 * loom/kernels/norm.h): layer norm in norm.c, batch norm in norm_batch.c,
 * group norm in norm_group.c. */
#ifndef LOOM_KERNELS_NORM_H
#define LOOM_KERNELS_NORM_H

#include "loom/kernel_abi.h"
#include "loom/kernels/norm.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_layer_norm_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_layer_norm_backward_input(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_layer_norm_backward_rows(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_layer_norm_backward_combine(const loom_kernel_args *args, int64_t begin, int64_t end);

int loom_batch_norm_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_batch_norm_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

int loom_group_norm_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_group_norm_backward_input(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_group_norm_backward_params(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_NORM_H */
