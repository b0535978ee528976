/* kernels/index/index.h — the kernel of indexing along one dim (contract and
 * name in loom/kernels/index.h). */
#ifndef LOOM_KERNELS_INDEX_H
#define LOOM_KERNELS_INDEX_H

#include "loom/kernel_abi.h"
#include "loom/kernels/index.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_index(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_INDEX_H */
