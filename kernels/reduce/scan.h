/* kernels/reduce/scan.h — the scan kernel (contract and name in
 * loom/kernels/scan.h). */
#ifndef LOOM_KERNELS_SCAN_H
#define LOOM_KERNELS_SCAN_H

#include "loom/kernel_abi.h"
#include "loom/kernels/scan.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_scan(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_SCAN_H */
