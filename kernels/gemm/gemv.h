/* kernels/gemm/gemv.h — the matrix-vector kernel (contract and name in
 * loom/kernels/gemv.h). */
#ifndef LOOM_KERNELS_GEMV_H
#define LOOM_KERNELS_GEMV_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/gemv.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_gemv_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GEMV_H */
