/* kernels/rnn.h — the fused LSTM and GRU cells: the pointwise part of one
 * time step, after the gate matmuls (PyTorch's _thnn_fused_lstm_cell and
 * _thnn_fused_gru_cell, with their backward).
 *
 * Layouts are CUDA's, since autograd hands the workspace of the forward to
 * the backward:
 *   LSTM: gates [B, 4H] in the order i, f, g, o; workspace [B, 4H] holds the
 *         activated gates i, f, g, o.
 *   GRU:  gates [B, 3H] in the order r, z, n; workspace [B, 5H] holds r, z,
 *         n, hx and hn + b_hn (the hidden n gate with its bias).
 * Gate and state tensors are rank 2, biases rank 1, any strides; outputs
 * may be strided too. Every tensor has a float dtype. The arithmetic runs
 * in float for float32, bfloat16 and float16 (CUDA's accscalar_t: each
 * result is rounded once, when stored) and in double for float64, chosen by
 * the dtype of the first output. An optional tensor has data == NULL. */
#ifndef LOOM_KERNELS_RNN_H
#define LOOM_KERNELS_RNN_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Range B*H, element b*H + j. tensors: [input_gates, hidden_gates,
 * input_bias?, hidden_bias?, cx [B, H], hy [B, H] (out), cy [B, H] (out),
 * workspace [B, 4H] (out)]. The biases are both given or both absent. */
int loom_lstm_cell_forward(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

/* Range H: a chunk owns columns [begin, end) of every gate and walks the
 * batch in order, so the bias gradient (the gate gradients as stored,
 * summed over the batch) is the same however the range is split.
 * tensors: [grad_hy?, grad_cy?, cx, cy, workspace, grad_gates [B, 4H] (out),
 * grad_cx [B, H] (out), grad_bias? [4H] (out)]. An absent grad_hy or grad_cy
 * counts as zero. */
int loom_lstm_cell_backward(const loom_kernel_args *args, int64_t begin,
                            int64_t end);

/* Range B*H. tensors: [input_gates, hidden_gates, input_bias?, hidden_bias?,
 * hx [B, H], hy [B, H] (out), workspace [B, 5H] (out)]. */
int loom_gru_cell_forward(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

/* Range H, columns as for the LSTM. tensors: [grad_hy [B, H], workspace,
 * grad_input_gates [B, 3H] (out), grad_hidden_gates [B, 3H] (out),
 * grad_hx [B, H] (out), grad_input_bias? [3H] (out),
 * grad_hidden_bias? [3H] (out)]; the bias gradients are both wanted or
 * neither. */
int loom_gru_cell_backward(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_RNN_H */
