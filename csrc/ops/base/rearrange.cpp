// Rearrangements built from views and one native copy or index_add:
// channel_shuffle, pixel_shuffle / pixel_unshuffle, and unfold_backward
// (the gradient of Tensor.unfold). Their outputs take the input's memory
// format, as on the CPU.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/PixelShuffle.h>
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

// (*, C r^2, H, W) -> (*, C, H r, W r) (`up`), or back: output channel
// c * r^2 + i * r + j holds position (h r + i, w r + j) of channel c. The
// output's split view takes the input's permuted view in one copy.
Tensor pixel_rearrange(const Tensor& self, int64_t r, bool up) {
  const int64_t nd = self.dim();
  std::vector<int64_t> lead(self.sizes().begin(), self.sizes().end() - 3);
  const int64_t c = self.size(-3), h = self.size(-2), w = self.size(-1);
  // The shuffled side as (*, C, r, r, H, W), the plain side as (*, C, H, r, W, r).
  const int64_t cs = up ? c / (r * r) : c, hs = up ? h : h / r, ws = up ? w : w / r;
  std::vector<int64_t> shuffled = lead, plain = lead, out_sizes = lead;
  for (int64_t v : {cs, r, r, hs, ws}) shuffled.push_back(v);
  for (int64_t v : {cs, hs, r, ws, r}) plain.push_back(v);
  if (up) {
    for (int64_t v : {cs, hs * r, ws * r}) out_sizes.push_back(v);
  } else {
    for (int64_t v : {cs * r * r, hs, ws}) out_sizes.push_back(v);
  }
  const int64_t b = static_cast<int64_t>(lead.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < b; ++i) perm.push_back(i);
  // shuffled -> plain: (C, r, r, H, W) -> (C, H, r, W, r); plain -> shuffled inverts it
  const std::vector<int64_t> to_plain = {0, 3, 1, 4, 2}, to_shuffled = {0, 2, 4, 1, 3};
  for (int64_t i : up ? to_plain : to_shuffled) perm.push_back(b + i);
  Tensor out = at::empty(out_sizes, self.options(),
                         nd == 4 ? self.suggest_memory_format() : at::MemoryFormat::Contiguous);
  if (out.numel() == 0) return out;
  out.view(up ? plain : shuffled).copy_(self.reshape(up ? shuffled : plain).permute(perm));
  return out;
}

Tensor pixel_shuffle(const Tensor& self, int64_t upscale_factor) {
  at::native::check_pixel_shuffle_shapes(self, upscale_factor);
  return pixel_rearrange(self, upscale_factor, true);
}

Tensor pixel_unshuffle(const Tensor& self, int64_t downscale_factor) {
  at::native::check_pixel_unshuffle_shapes(self, downscale_factor);
  return pixel_rearrange(self, downscale_factor, false);
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
  LOOM_IMPL(m, "pixel_shuffle", pixel_shuffle);
  LOOM_IMPL(m, "pixel_unshuffle", pixel_unshuffle);
  LOOM_IMPL(m, "unfold_backward", unfold_backward);
}

}  // namespace torch_loom::rearrange
