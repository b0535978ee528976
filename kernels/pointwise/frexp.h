/* kernels/pointwise/frexp.h — frexp's kernel (contract and name in
 * loom/kernels/frexp.h). */
#ifndef LOOM_KERNELS_FREXP_H
#define LOOM_KERNELS_FREXP_H

#include "loom/kernel_abi.h"
#include "loom/kernels/frexp.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_pointwise_frexp(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_FREXP_H */
