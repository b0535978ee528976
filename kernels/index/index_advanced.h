/* kernels/index/index_advanced.h — the kernels of advanced indexing and nonzero
 * (contracts and names in loom/kernels/index_advanced.h). */
#ifndef LOOM_KERNELS_INDEX_ADVANCED_H
#define LOOM_KERNELS_INDEX_ADVANCED_H

#include "loom/kernel_abi.h"
#include "loom/kernels/index_advanced.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_index_advanced(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_nonzero_count(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_nonzero_write(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_INDEX_ADVANCED_H */
