/* kernels/nn/loss_margin.h — multi_margin_loss's and multilabel_margin_loss's kernels (contracts and
 * names in loom/kernels/loss.h). */
#ifndef LOOM_KERNELS_LOSS_MARGIN_H
#define LOOM_KERNELS_LOSS_MARGIN_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_multi_margin_loss_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_multi_margin_loss_backward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_multilabel_margin_loss_forward(const loom_kernel_args *args, int64_t begin,
                                        int64_t end);
int loom_multilabel_margin_loss_backward(const loom_kernel_args *args, int64_t begin,
                                         int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_LOSS_MARGIN_H */
