// Rearrangements built from views and one native copy or index_add:
// channel_shuffle, and unfold_backward (the gradient of Tensor.unfold).
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "common.h"
#include "register.h"

namespace torch_loom::rearrange {
namespace {

using at::Tensor;

// (N, g * c, ...) -> (N, c * g, ...): channel k * c + j moves to j * g + k.
Tensor channel_shuffle(const Tensor& self, c10::SymInt groups_sym) {
  const int64_t groups = groups_sym.expect_int();
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input with > 2 dims, but got input with "
              "sizes ", self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive. Value of "
              "groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c,
              " channels and ", groups, " groups.");
  std::vector<int64_t> split = self.sizes().vec();
  split[1] = c / groups;
  split.insert(split.begin() + 1, groups);
  Tensor out = at::empty(self.sizes(), self.options(), self.suggest_memory_format());
  out.view(self.sizes()).copy_(self.reshape(split).transpose(1, 2).reshape(self.sizes()));
  return out;
}

// grad_in has input_sizes with `dim` replaced by the window count and a
// last dim of `size`; window i element j adds into input index i * step + j.
Tensor unfold_backward(const Tensor& grad_in, c10::SymIntArrayRef input_sizes_sym, int64_t dim,
                       int64_t size, int64_t step) {
  std::vector<int64_t> input_sizes;
  for (const auto& s : input_sizes_sym) input_sizes.push_back(s.expect_int());
  dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(input_sizes.size()));
  Tensor result = at::zeros(input_sizes, grad_in.options());
  if (grad_in.numel() == 0) return result;
  if (input_sizes.empty()) return result.add_(grad_in.reshape({}));  // one window of one
  const auto longs = grad_in.options().dtype(at::kLong);
  Tensor index = (at::arange(grad_in.size(dim), longs).mul_(step).unsqueeze(1) +
                  at::arange(size, longs)).reshape({-1});
  // (..., windows * size, ...) against their input positions
  return result.index_add_(dim, index, grad_in.movedim(-1, dim + 1).flatten(dim, dim + 1));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "channel_shuffle", channel_shuffle);
  LOOM_IMPL(m, "unfold_backward", unfold_backward);
}

}  // namespace torch_loom::rearrange
