/* kernels/index/embedding_bag.h — embedding_bag's kernels (contracts and
 * names in loom/kernels/embedding_bag.h). */
#ifndef LOOM_KERNELS_EMBEDDING_BAG_H
#define LOOM_KERNELS_EMBEDDING_BAG_H

#include "loom/kernel_abi.h"
#include "loom/kernels/embedding_bag.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_embedding_bag_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_embedding_bag_backward_rows(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_embedding_bag_backward_max(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_embedding_bag_psw_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_EMBEDDING_BAG_H */
