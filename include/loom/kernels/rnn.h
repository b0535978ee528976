/* loom/kernels/rnn.h — the fused LSTM and GRU cells' names and argument
 * contracts: the pointwise part of one time step, after the gate matmuls
 * (PyTorch's _thnn_fused_lstm_cell and _thnn_fused_gru_cell, with their
 * backward). Every driver provides these names.
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
 * the dtype of the first output. An optional tensor has data == NULL. No
 * kernel takes scalars. */
#ifndef LOOM_KERNELS_RNN_CONTRACT_H
#define LOOM_KERNELS_RNN_CONTRACT_H

/* "rnn.lstm_cell_forward": range B*H, element b*H + j.
 * tensors: [input_gates, hidden_gates, input_bias?, hidden_bias?, cx [B, H],
 * hy [B, H] (out), cy [B, H] (out), workspace [B, 4H] (out)]. The biases are
 * both given or both absent.
 *
 * "rnn.lstm_cell_backward": range H: a chunk owns columns [begin, end) of
 * every gate and walks the batch in order, so the bias gradient (the gate
 * gradients as stored, summed over the batch) is the same however the range
 * is split. tensors: [grad_hy?, grad_cy?, cx, cy, workspace, grad_gates
 * [B, 4H] (out), grad_cx [B, H] (out), grad_bias? [4H] (out)]. An absent
 * grad_hy or grad_cy counts as zero.
 *
 * "rnn.gru_cell_forward": range B*H. tensors: [input_gates, hidden_gates,
 * input_bias?, hidden_bias?, hx [B, H], hy [B, H] (out), workspace [B, 5H]
 * (out)].
 *
 * "rnn.gru_cell_backward": range H, columns as for the LSTM.
 * tensors: [grad_hy [B, H], workspace, grad_input_gates [B, 3H] (out),
 * grad_hidden_gates [B, 3H] (out), grad_hx [B, H] (out), grad_input_bias?
 * [3H] (out), grad_hidden_bias? [3H] (out)]; the bias gradients are both
 * wanted or neither. */

#endif /* LOOM_KERNELS_RNN_CONTRACT_H */
