// F.grid_sample on loom (aten::grid_sampler_2d and its backward): bilinear
// and nearest sampling with zeros / border / reflection padding run in
// the grid_sample kernels; bicubic sampling runs on the CPU. The CPU
// backend's checks (GridSamplerUtils.h) run first.
#include <ATen/ATen.h>
#include <ATen/native/GridSamplerUtils.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "loom/kernels/grid_sample.h"
#include "register.h"

namespace torch_loom::grid_sample {
namespace {

using at::Tensor;

constexpr int64_t kBicubic = 2;

std::array<loom_scalar, 3> scalars(int64_t interpolation, int64_t padding, bool align) {
  return {scalar_i(interpolation), scalar_i(padding), scalar_i(align)};
}

Tensor grid_sampler_2d(const Tensor& input, const Tensor& grid, int64_t interpolation,
                       int64_t padding, bool align) {
  at::native::check_grid_sampler_common(input, grid);
  at::native::check_grid_sampler_2d(input, grid);
  if (interpolation == kBicubic)
    return at::grid_sampler_2d(input.cpu(), grid.cpu(), interpolation, padding, align)
        .to(input.device());
  Tensor out = at::empty({input.size(0), input.size(1), grid.size(1), grid.size(2)},
                         input.options());
  if (out.numel() == 0) return out;
  const loom_tensor ts[3] = {describe(out, "grid_sampler_2d"), describe(input, "grid_sampler_2d"),
                             describe(grid, "grid_sampler_2d")};
  launch("grid_sampler_2d", LOOM_KERNEL("grid_sample.forward"), ts,
         scalars(interpolation, padding, align), out.size(0) * out.size(2), 1);
  return out;
}

std::tuple<Tensor, Tensor> grid_sampler_2d_backward(const Tensor& grad_output,
                                                    const Tensor& input, const Tensor& grid,
                                                    int64_t interpolation, int64_t padding,
                                                    bool align, std::array<bool, 2> mask) {
  at::native::check_grid_sampler_common(input, grid);
  at::native::check_grid_sampler_2d(input, grid);
  if (interpolation == kBicubic) {
    auto [gi, gg] = at::grid_sampler_2d_backward(grad_output.cpu(), input.cpu(), grid.cpu(),
                                                 interpolation, padding, align, mask);
    return {gi.defined() ? gi.to(input.device()) : gi, gg.to(input.device())};
  }
  // The input gradient sums in float32 (float64 for float64) per image.
  const at::ScalarType acc = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  Tensor gi = at::empty(input.sizes(), input.options().dtype(acc));
  Tensor gg = at::empty(grid.sizes(), grid.options());
  if (input.numel() > 0 && grid.numel() > 0) {
    const loom_tensor ts[5] = {describe(gi, "grid_sampler_2d_backward"),
                               describe(gg, "grid_sampler_2d_backward"),
                               describe(grad_output, "grid_sampler_2d_backward"),
                               describe(input, "grid_sampler_2d_backward"),
                               describe(grid, "grid_sampler_2d_backward")};
    launch("grid_sampler_2d_backward", LOOM_KERNEL("grid_sample.backward"), ts,
           scalars(interpolation, padding, align), input.size(0), 1);
  } else {
    gi.zero_();
    gg.zero_();
  }
  return {mask[0] ? gi.to(input.scalar_type()) : Tensor(), gg};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "grid_sampler_2d", grid_sampler_2d);
  LOOM_IMPL(m, "grid_sampler_2d_backward", grid_sampler_2d_backward);
}

}  // namespace torch_loom::grid_sample
