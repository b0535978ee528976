/* kernels/nn/rnn.h — the fused LSTM and GRU cells (contracts and names in
 * loom/kernels/rnn.h). */
#ifndef LOOM_KERNELS_RNN_H
#define LOOM_KERNELS_RNN_H

#include "loom/kernel_abi.h"
#include "loom/kernels/rnn.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_lstm_cell_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_lstm_cell_backward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_gru_cell_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_gru_cell_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_RNN_H */
