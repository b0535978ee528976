// F.grid_sample of 5-d inputs on loom (aten::grid_sampler_3d and its
// backward): trilinear ("bilinear") and nearest sampling with zeros /
// border / reflection padding in the grid_sample3d kernels. The CPU
// backend's checks (GridSamplerUtils.h) run first; results are contiguous,
// as the CPU's.
#include <ATen/ATen.h>
#include <ATen/native/GridSamplerUtils.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "loom/kernels/grid_sample3d.h"
#include "register.h"

namespace torch_loom::grid_sample3d {
namespace {

using at::Tensor;

std::array<loom_scalar, 3> scalars(int64_t interpolation, int64_t padding, bool align) {
  return {scalar_i(interpolation), scalar_i(padding), scalar_i(align)};
}

void check(const Tensor& input, const Tensor& grid, int64_t interpolation, int64_t padding,
           const char* op) {
  at::native::check_grid_sampler_common(input, grid);
  at::native::check_grid_sampler_3d(input, grid, interpolation);
  TORCH_CHECK(interpolation == 0 || interpolation == 1, op,
              "(): unknown interpolation mode ", interpolation);
  TORCH_CHECK(padding >= 0 && padding <= 2, op, "(): unknown padding mode ", padding);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()), "\"", op,
                              "\" not implemented for '", input.scalar_type(), "'");
}

Tensor grid_sampler_3d(const Tensor& input, const Tensor& grid, int64_t interpolation,
                       int64_t padding, bool align) {
  const char* op = "grid_sampler_3d";
  check(input, grid, interpolation, padding, op);
  Tensor out = at::empty(
      {input.size(0), input.size(1), grid.size(1), grid.size(2), grid.size(3)}, input.options());
  if (out.numel() == 0) return out;
  const loom_tensor ts[3] = {describe(out, op), describe(input, op), describe(grid, op)};
  launch(op, LOOM_KERNEL("grid_sample3d.forward"), ts, scalars(interpolation, padding, align),
         out.size(0) * out.size(2), 1);
  return out;
}

std::tuple<Tensor, Tensor> grid_sampler_3d_backward(const Tensor& grad_output,
                                                    const Tensor& input, const Tensor& grid,
                                                    int64_t interpolation, int64_t padding,
                                                    bool align, std::array<bool, 2> mask) {
  const char* op = "grid_sampler_3d_backward";
  check(input, grid, interpolation, padding, op);
  // The input gradient sums in float32 (float64 for float64) per image.
  const at::ScalarType acc = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  Tensor gi = mask[0] ? at::empty(input.sizes(), input.options().dtype(acc)) : Tensor();
  Tensor gg = at::empty(grid.sizes(), grid.options());
  if (input.numel() > 0 && grid.numel() > 0) {
    const loom_tensor ts[5] = {gi.defined() ? describe(gi, op) : loom_tensor{}, describe(gg, op),
                               describe(grad_output, op), describe(input, op),
                               describe(grid, op)};
    launch(op, LOOM_KERNEL("grid_sample3d.backward"), ts, scalars(interpolation, padding, align),
           input.size(0), 1);
  } else {
    if (gi.defined()) gi.zero_();
    gg.zero_();
  }
  return {gi.defined() ? gi.to(input.scalar_type()) : gi, gg};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "grid_sampler_3d", grid_sampler_3d);
  LOOM_IMPL(m, "grid_sampler_3d_backward", grid_sampler_3d_backward);
}

}  // namespace torch_loom::grid_sample3d
