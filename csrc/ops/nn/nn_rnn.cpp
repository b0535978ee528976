// The fused LSTM and GRU cells on loom. ATen's RNN code (nn.LSTM, nn.GRU,
// nn.LSTMCell, nn.GRUCell) calls _thnn_fused_lstm_cell / _thnn_fused_gru_cell
// for every time step on a device other than the CPU, and the CPU has no
// kernel for them, so the fallback cannot serve them. Arguments, outputs and
// workspace layouts are CUDA's (aten/src/ATen/native/cuda/RNN.cu): autograd
// passes the forward's workspace to these backwards. _thnn_fused_lstm_cell_backward
// is composite over the _impl registered here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "loom/kernels/rnn.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

using at::Tensor;

// The values one (batch row, column) position of a cell reads and writes,
// which sizes the chunks.
constexpr int64_t kCellWork = 16;

void check_type(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  if (!t.defined()) return;
  const at::ScalarType type = t.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble ||
                                  type == at::kHalf || type == at::kBFloat16,
                              "\"", op, "\" not implemented for '", type, "'");
  TORCH_CHECK(type == like.scalar_type(), op, ": expected ", what, " to have dtype ",
              like.scalar_type(), ", but got ", type);
  check_loom(t, like, op, what);
}

void check_2d(const Tensor& t, int64_t rows, int64_t cols, const char* op,
              const char* what) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, op,
              ": expected ", what, " of size [", rows, ", ", cols, "], but got ",
              t.sizes());
}

// The forward's arguments, as CUDA's checkSizes (factor 4 for the LSTM,
// 3 for the GRU) but with the previous state's exact shape: [batch, gates /
// factor]. Returns the hidden size.
int64_t check_cell(const char* op, int64_t factor, const Tensor& input_gates,
                   const Tensor& hidden_gates, const Tensor& input_bias,
                   const Tensor& hidden_bias, const Tensor& prev, const char* prev_name) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": expected input_gates to be 2-D [batch, ",
              factor, " * hidden_size], but got size ", input_gates.sizes());
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op,
              ": expected hidden_gates of the size of input_gates ", input_gates.sizes(),
              ", but got ", hidden_gates.sizes());
  const int64_t batch = input_gates.size(0), gates = input_gates.size(1);
  TORCH_CHECK(gates % factor == 0, op, ": the gate width ", gates,
              " is not a multiple of ", factor);
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": input_bias and hidden_bias must be given together");
  if (input_bias.defined()) {
    TORCH_CHECK(input_bias.dim() == 1 && input_bias.size(0) == gates, op,
                ": expected input_bias of size [", gates, "], but got ", input_bias.sizes());
    TORCH_CHECK(hidden_bias.sizes() == input_bias.sizes(), op,
                ": expected hidden_bias of size [", gates, "], but got ",
                hidden_bias.sizes());
  }
  check_2d(prev, batch, gates / factor, op, prev_name);
  check_type(input_gates, input_gates, op, "input_gates");
  check_type(hidden_gates, input_gates, op, "hidden_gates");
  check_type(input_bias, input_gates, op, "input_bias");
  check_type(hidden_bias, input_gates, op, "hidden_bias");
  check_type(prev, input_gates, op, prev_name);
  return gates / factor;
}

// ---- LSTM -------------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates,
                                             const Tensor& hidden_gates, const Tensor& cx,
                                             const std::optional<Tensor>& input_bias_opt,
                                             const std::optional<Tensor>& hidden_bias_opt) {
  static const char* op = "_thnn_fused_lstm_cell";
  const Tensor input_bias = value_or_undefined(input_bias_opt);
  const Tensor hidden_bias = value_or_undefined(hidden_bias_opt);
  check_cell(op, 4, input_gates, hidden_gates, input_bias, hidden_bias, cx, "cx");
  Tensor workspace = at::empty(input_gates.sizes(), input_gates.options());
  Tensor hy = at::empty(cx.sizes(), cx.options());
  Tensor cy = at::empty(cx.sizes(), cx.options());
  if (cx.numel() > 0) {
    const loom_tensor t[8] = {describe(input_gates, op), describe(hidden_gates, op),
                              describe_opt(input_bias, op), describe_opt(hidden_bias, op),
                              describe(cx, op), describe(hy, op), describe(cy, op),
                              describe(workspace, op)};
    launch(op, LOOM_KERNEL("rnn.lstm_cell_forward"), t, {}, cx.numel(), grain_for(kCellWork),
           cx.device().index());
  }
  return {hy, cy, workspace};
}

// Both gradients undefined (nothing reached hy or cy): undefined results,
// as on CUDA.
std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(
    const std::optional<Tensor>& grad_hy_opt, const std::optional<Tensor>& grad_cy_opt,
    const Tensor& cx, const Tensor& cy, const Tensor& workspace, bool has_bias) {
  static const char* op = "_thnn_fused_lstm_cell_backward_impl";
  const Tensor grad_hy = value_or_undefined(grad_hy_opt);
  const Tensor grad_cy = value_or_undefined(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {};
  const Tensor& grad = grad_hy.defined() ? grad_hy : grad_cy;
  TORCH_CHECK(grad.dim() == 2, op, ": expected ",
              grad_hy.defined() ? "grad_hy" : "grad_cy",
              " to be 2-D [batch, hidden_size], but got size ", grad.sizes());
  const int64_t batch = grad.size(0), hidden = grad.size(1);
  if (grad_hy.defined()) check_2d(grad_hy, batch, hidden, op, "grad_hy");
  if (grad_cy.defined()) check_2d(grad_cy, batch, hidden, op, "grad_cy");
  check_2d(cx, batch, hidden, op, "cx");
  check_2d(cy, batch, hidden, op, "cy");
  check_2d(workspace, batch, 4 * hidden, op, "workspace");
  check_type(workspace, workspace, op, "workspace");
  check_type(grad_hy, workspace, op, "grad_hy");
  check_type(grad_cy, workspace, op, "grad_cy");
  check_type(cx, workspace, op, "cx");
  check_type(cy, workspace, op, "cy");
  Tensor grad_gates = at::empty(workspace.sizes(), workspace.options());
  Tensor grad_cx = at::empty(cx.sizes(), cx.options());
  Tensor grad_bias = has_bias ? at::empty({4 * hidden}, workspace.options()) : Tensor();
  if (batch == 0) {  // the sum over an empty batch
    if (has_bias) grad_bias.zero_();
  } else if (hidden > 0) {
    const loom_tensor t[8] = {describe_opt(grad_hy, op), describe_opt(grad_cy, op),
                              describe(cx, op), describe(cy, op), describe(workspace, op),
                              describe(grad_gates, op), describe(grad_cx, op),
                              describe_opt(grad_bias, op)};
    launch(op, LOOM_KERNEL("rnn.lstm_cell_backward"), t, {}, hidden,
           grain_for(batch * kCellWork), workspace.device().index());
  }
  return {grad_gates, grad_cx, grad_bias};
}

// ---- GRU --------------------------------------------------------------------

std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                    const Tensor& hx,
                                    const std::optional<Tensor>& input_bias_opt,
                                    const std::optional<Tensor>& hidden_bias_opt) {
  static const char* op = "_thnn_fused_gru_cell";
  const Tensor input_bias = value_or_undefined(input_bias_opt);
  const Tensor hidden_bias = value_or_undefined(hidden_bias_opt);
  const int64_t hidden =
      check_cell(op, 3, input_gates, hidden_gates, input_bias, hidden_bias, hx, "hx");
  Tensor workspace = at::empty({hx.size(0), 5 * hidden}, hx.options());
  Tensor hy = at::empty(hx.sizes(), hx.options());
  if (hx.numel() > 0) {
    const loom_tensor t[7] = {describe(input_gates, op), describe(hidden_gates, op),
                              describe_opt(input_bias, op), describe_opt(hidden_bias, op),
                              describe(hx, op), describe(hy, op), describe(workspace, op)};
    launch(op, LOOM_KERNEL("rnn.gru_cell_forward"), t, {}, hx.numel(), grain_for(kCellWork),
           hx.device().index());
  }
  return {hy, workspace};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias) {
  static const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(grad_hy.dim() == 2, op,
              ": expected grad_hy to be 2-D [batch, hidden_size], but got size ",
              grad_hy.sizes());
  const int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
  check_2d(workspace, batch, 5 * hidden, op, "workspace");
  check_type(grad_hy, grad_hy, op, "grad_hy");
  check_type(workspace, grad_hy, op, "workspace");
  const auto options = workspace.options();
  Tensor grad_input_gates = at::empty({batch, 3 * hidden}, options);
  Tensor grad_hidden_gates = at::empty({batch, 3 * hidden}, options);
  Tensor grad_hx = at::empty(grad_hy.sizes(), grad_hy.options());
  Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = at::empty({3 * hidden}, options);
    grad_hidden_bias = at::empty({3 * hidden}, options);
  }
  if (batch == 0) {  // the sums over an empty batch
    if (has_bias) {
      grad_input_bias.zero_();
      grad_hidden_bias.zero_();
    }
  } else if (hidden > 0) {
    const loom_tensor t[7] = {describe(grad_hy, op), describe(workspace, op),
                              describe(grad_input_gates, op),
                              describe(grad_hidden_gates, op), describe(grad_hx, op),
                              describe_opt(grad_input_bias, op),
                              describe_opt(grad_hidden_bias, op)};
    launch(op, LOOM_KERNEL("rnn.gru_cell_backward"), t, {}, hidden,
           grain_for(batch * kCellWork), workspace.device().index());
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_thnn_fused_lstm_cell", lstm_cell);
  LOOM_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  LOOM_IMPL(m, "_thnn_fused_gru_cell", gru_cell);
  LOOM_IMPL(m, "_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace torch_loom::nn
