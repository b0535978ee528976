/* kernels/base/fill.h — the fill kernel (contract and name in
 * loom/kernels/fill.h). */
#ifndef LOOM_KERNELS_FILL_H
#define LOOM_KERNELS_FILL_H

#include "loom/kernel_abi.h"
#include "loom/kernels/fill.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_fill(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_FILL_H */
