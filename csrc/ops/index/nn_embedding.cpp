// embedding on loom: the forward is a row lookup launched under its own
// name (so a bad index names embedding); the backward buckets the indices,
// then reduces each row of the gradient in occurrence order (no atomics, so
// deterministic).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "loom/kernels/embedding.h"
#include "loom/kernels/index.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

void check_indices(const at::Tensor& indices, const char* op) {
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "Expected tensor for argument #1 'indices' to have one of the ",
              "following scalar types: Long, Int; but got ",
              indices.scalar_type(), " instead (while checking arguments for ",
              op, ")");
}

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices,
                     c10::SymInt padding_idx, bool scale_grad_by_freq,
                     bool sparse) {
  static const char* op = "embedding";
  TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  check_indices(indices, op);
  check_loom(indices, weight, op, "indices");
  std::vector<int64_t> shape = indices.sizes().vec();
  shape.push_back(weight.size(1));
  at::Tensor out = at::empty(shape, weight.options());
  if (out.numel() == 0) return out;
  const int64_t n = indices.numel(), d = weight.size(1);
  const at::Tensor rows = out.view({n, d});
  const at::Tensor idx = indices.reshape({n});
  const loom_tensor t[3] = {describe(rows, op), describe(weight, op), describe(idx, op)};
  // index_select along dim 0; the kernel checks each index against the rows.
  const loom_scalar s[4] = {scalar_i(LOOM_INDEX_SELECT), scalar_i(0), scalar_i(0),
                            scalar_i(0)};
  launch(op, LOOM_KERNEL("index.along_dim"), t, s, n * d, grain_for(1), weight.device().index());
  return out;
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output,
                                    const at::Tensor& indices,
                                    int64_t num_weights, int64_t padding_idx,
                                    bool scale_grad_by_freq) {
  static const char* op = "embedding_dense_backward";
  check_indices(indices, "embedding_backward");
  check_float(grad_output, op);
  check_loom(indices, grad_output, op, "indices");
  TORCH_CHECK(num_weights >= 0, op, ": num_weights must be non-negative");
  const int64_t n = indices.numel();
  TORCH_CHECK(grad_output.dim() >= 1 && grad_output.numel() ==
                  n * grad_output.size(-1) &&
                  grad_output.dim() == indices.dim() + 1,
              op, ": grad_output of size ", grad_output.sizes(),
              " does not match indices of size ", indices.sizes());
  const int64_t d = grad_output.size(-1);
  at::Tensor grad_weight = at::empty({num_weights, d}, grad_output.options());
  if (num_weights == 0 || d == 0) return grad_weight;
  const auto dev = grad_output.device().index();
  const auto long_opts = grad_output.options().dtype(at::kLong);
  at::Tensor offsets = at::empty({num_weights + 1}, long_opts);
  at::Tensor order = at::empty({std::max<int64_t>(n, 1)}, long_opts);
  const at::Tensor idx = indices.contiguous().view({n});
  const at::Tensor go = grad_output.reshape({n, d});
  if (n > 0) {
    const loom_tensor t[3] = {describe(idx, op), describe(offsets, op),
                              describe(order, op)};
    const loom_scalar s[1] = {scalar_i(num_weights)};
    launch(op, LOOM_KERNEL("embedding.backward_bucket"), t, s, 1, 1, dev);
  } else {
    offsets.zero_();
  }
  loom_tensor t[4] = {n > 0 ? describe(go, op) : loom_tensor{},
                      describe(offsets, op), describe(order, op),
                      describe(grad_weight, op)};
  if (n == 0) {  // the kernel only needs the row shape of grad_output
    t[0].rank = 2;
    t[0].dtype = t[3].dtype;
  }
  const loom_scalar s[2] = {scalar_i(padding_idx), scalar_i(scale_grad_by_freq)};
  launch(op, LOOM_KERNEL("embedding.backward_rows"), t, s, num_weights, grain_for(d), dev);
  return grad_weight;
}

// embedding's max_norm: the rows the indices name, scaled in place down to
// max_norm. The indices are bucketed by row (which also checks them), then
// each named row is renormed once, as the CPU's sorted unique pass does.
at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices,
                              double max_norm, double norm_type) {
  static const char* op = "embedding_renorm_";
  TORCH_CHECK(self.dim() == 2, "Expected 2-dimensional tensor, but got ", self.dim(),
              "-dimensional tensor for argument #1 'self' (while checking "
              "arguments for embedding_renorm_)");
  check_indices(indices, op);
  check_float(self, op);
  check_loom(indices, self, op, "indices");
  const int64_t n = indices.numel(), num_weights = self.size(0);
  if (n == 0 || self.numel() == 0) return self;
  const auto dev = self.device().index();
  const auto long_opts = self.options().dtype(at::kLong);
  at::Tensor offsets = at::empty({num_weights + 1}, long_opts);
  at::Tensor order = at::empty({n}, long_opts);
  const at::Tensor idx = indices.contiguous().view({n});
  {
    const loom_tensor t[3] = {describe(idx, op), describe(offsets, op), describe(order, op)};
    const loom_scalar s[1] = {scalar_i(num_weights)};
    launch(op, LOOM_KERNEL("embedding.backward_bucket"), t, s, 1, 1, dev);
  }
  const loom_tensor t[2] = {describe(offsets, op), describe(self, op)};
  const loom_scalar s[2] = {scalar_f(max_norm), scalar_f(norm_type)};
  launch(op, LOOM_KERNEL("embedding.renorm_rows"), t, s, num_weights,
         grain_for(self.size(1)), dev);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "embedding", embedding);
  LOOM_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
  LOOM_IMPL(m, "embedding_renorm_", embedding_renorm_);
}

}  // namespace torch_loom::nn
