// Gradient scaling's two ops on loom (torch.amp.GradScaler("loom")): the
// unscale with its inf/NaN check, and the scale update. Both keep found_inf,
// the scale and the growth tracker in device memory and read them only in
// kernels, so a step never waits for the device.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include "loom/kernels/amp.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// A one-element tensor of `dtype` on loom (on `like`'s device, when given).
void check_state(const at::Tensor& t, at::ScalarType dtype, const char* what,
                 const char* op, const at::Tensor* like = nullptr) {
  TORCH_CHECK(t.device().is_privateuseone(), op, ": ", what,
              " must be a loom tensor, got one on ", t.device());
  TORCH_CHECK(t.numel() == 1, op, ": ", what,
              " must be a 1-element tensor, got ", t.numel(), " elements");
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", what, " must be a ", dtype,
              " tensor, got ", t.scalar_type());
  if (like) check_loom(t, *like, op, what);
}

void check_and_unscale(at::TensorList grads, at::Tensor& found_inf,
                       const at::Tensor& inv_scale) {
  const char* op = "_amp_foreach_non_finite_check_and_unscale_";
  if (grads.empty()) return;  // as on the CPU and CUDA: nothing to check
  check_state(found_inf, at::kFloat, "found_inf", op);
  check_state(inv_scale, at::kFloat, "inv_scale", op, &found_inf);
  for (const at::Tensor& g : grads) {
    TORCH_CHECK(g.layout() == at::kStrided, op,
                ": one of the gradients is not a strided tensor");
    check_loom(g, found_inf, op, "the gradients");
    check_float(g, op);
    TORCH_CHECK(at::has_internal_overlap(g) != at::MemOverlap::Yes, op,
                ": a gradient has elements that share memory; unscaling it "
                "in place is ambiguous");
  }
  const loom_tensor found = describe(found_inf, op), inv = describe(inv_scale, op);
  for (const at::Tensor& g : grads) {
    if (g.numel() == 0) continue;
    const loom_tensor t[3] = {describe(g, op), found, inv};
    launch(op, LOOM_KERNEL("amp.check_and_unscale"), t, {}, g.numel(), grain_for(1),
           g.device().index());
  }
}

at::Tensor& update_scale(at::Tensor& scale, at::Tensor& growth_tracker,
                         const at::Tensor& found_inf, double growth_factor,
                         double backoff_factor, int64_t growth_interval) {
  const char* op = "_amp_update_scale_";
  check_state(scale, at::kFloat, "current_scale", op);
  check_state(growth_tracker, at::kInt, "growth_tracker", op, &scale);
  check_state(found_inf, at::kFloat, "found_inf", op, &scale);
  const loom_tensor t[3] = {describe(scale, op), describe(growth_tracker, op),
                            describe(found_inf, op)};
  const loom_scalar s[3] = {scalar_f(growth_factor), scalar_f(backoff_factor),
                            scalar_i(growth_interval)};
  launch(op, LOOM_KERNEL("amp.update_scale"), t, s, 1, 1, scale.device().index());
  return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_amp_foreach_non_finite_check_and_unscale_", check_and_unscale);
  LOOM_IMPL(m, "_amp_update_scale_", update_scale);
}

}  // namespace torch_loom::nn
