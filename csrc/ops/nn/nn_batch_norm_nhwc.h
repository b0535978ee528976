// Channels-last batch norm's glue, shared by batch norm
// (nn_batch_norm.cpp) and its fusion with ReLU (nn_batch_norm_act.cpp): a
// 4-d channels-last input (not also contiguous) runs as [N*H*W, C] rows of
// contiguous channels (the norm.batch_nhwc_* kernels), without converting:
// the outputs keep its layout. And the chunking of the NCHW kernels.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

#include "ops/nn/nn_util.h"

namespace torch_loom::nn {

inline bool nhwc_input(const at::Tensor& t) {
  return t.dim() == 4 && t.numel() > 0 && t.size(1) > 0 &&
         t.is_contiguous(at::MemoryFormat::ChannelsLast) && !t.is_contiguous();
}

// A channels-last contiguous 4-d tensor as the [N*H*W, C] view of its memory.
inline at::Tensor nhwc_rows(const at::Tensor& t) {
  return t.permute({0, 2, 3, 1}).view({-1, t.size(1)});
}

// The chunks the rows' statistics split into: a function of the shape only
// (about 16K elements, at least 64 rows, each), never of the thread count.
inline int64_t nhwc_chunks(int64_t rows, int64_t c) {
  const int64_t per = std::max<int64_t>(64, (int64_t{1} << 14) / c);
  return std::max<int64_t>(1, (rows + per - 1) / per);
}

// The channels a chunk of the NCHW kernels (norm.batch_forward/backward,
// norm.batch_relu_forward/backward) takes. They walk a chunk's channels
// sample by sample, in blocks of up to 32, reading a sample's rows of the
// block as one run: a chunk takes an eighth of the channels (up to 32),
// which still leaves eight chunks to spread, and at least grain_for's
// share of work. A function of the shape only.
inline int64_t nchw_channel_grain(const at::Tensor& input) {
  const int64_t c = input.size(1);
  return std::max(grain_for(input.numel() / c), std::min<int64_t>(32, c / 8));
}

// The per-channel coefficients' dtype: float32 for float32 input (the fast
// loops), float64 otherwise.
inline at::ScalarType nhwc_coef_type(const at::Tensor& input) {
  return input.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
}

// What the fusion with ReLU adds to the forward: a residual (channels-last
// contiguous) added before the ReLU, and running statistics written apart
// from those read.
struct NhwcFused {
  at::Tensor residual;
  bool relu = false;
  at::Tensor new_mean, new_var;
};

// The forward into `out` (channels-last, as input), the saved statistics
// (training) and the running ones (moved in place, or into fused.new_*).
void nhwc_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                  const at::Tensor& running_mean, const at::Tensor& running_var,
                  const at::Tensor& out, const at::Tensor& save_mean,
                  const at::Tensor& save_invstd, bool training, double momentum, double eps,
                  const char* op, const NhwcFused& fused = {});

// The gradients asked for (dx, dw, db defined); grad_out channels-last
// contiguous. With relu_out, grad_out is first masked where relu_out <= 0
// (into `masked` when defined).
void nhwc_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
                   const at::Tensor& running_mean, const at::Tensor& running_var,
                   const at::Tensor& save_mean, const at::Tensor& save_invstd,
                   const at::Tensor& dx, const at::Tensor& dw, const at::Tensor& db,
                   bool training, double eps, const char* op,
                   const at::Tensor& relu_out = {}, const at::Tensor& masked = {});

}  // namespace torch_loom::nn
