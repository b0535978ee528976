/* kernels/base/factory.h — the factory kernel (contract and name in
 * loom/kernels/factory.h). */
#ifndef LOOM_KERNELS_FACTORY_H
#define LOOM_KERNELS_FACTORY_H

#include "loom/kernel_abi.h"
#include "loom/kernels/factory.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_factory(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_FACTORY_H */
