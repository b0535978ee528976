/* kernels/reduce/search.h — the searchsorted kernel (contract and name in
 * loom/kernels/search.h). */
#ifndef LOOM_KERNELS_SEARCH_H
#define LOOM_KERNELS_SEARCH_H

#include "loom/kernel_abi.h"
#include "loom/kernels/search.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_searchsorted(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_SEARCH_H */
