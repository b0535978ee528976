/* kernels/reduce/sort.h — the sort kernel (contract and name in
 * loom/kernels/sort.h). */
#ifndef LOOM_KERNELS_SORT_H
#define LOOM_KERNELS_SORT_H

#include "loom/kernel_abi.h"
#include "loom/kernels/sort.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_sort(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_SORT_H */
