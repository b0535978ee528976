/* kernels/reduce/histogram.h — the histogram kernel (contract and name in
 * loom/kernels/histogram.h). */
#ifndef LOOM_KERNELS_HISTOGRAM_H
#define LOOM_KERNELS_HISTOGRAM_H

#include "loom/kernel_abi.h"
#include "loom/kernels/histogram.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_histogram_bins(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_HISTOGRAM_H */
