/* kernels/nn/ctc_loss.h — the CTC loss kernels (contracts and names in
 * loom/kernels/ctc_loss.h). */
#ifndef LOOM_KERNELS_CTC_LOSS_H
#define LOOM_KERNELS_CTC_LOSS_H

#include "loom/kernel_abi.h"
#include "loom/kernels/ctc_loss.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_ctc_loss_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_ctc_loss_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_CTC_LOSS_H */
