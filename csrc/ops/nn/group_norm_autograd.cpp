// native_group_norm's autograd on loom.
//
// PyTorch's derivative of native_group_norm makes grad_output and the input
// NCHW-contiguous before calling the backward on every device but the CPU,
// so a backward there cannot tell that the input was channels-last and the
// input gradient comes back NCHW where the CPU's is channels-last. loom's
// own autograd saves the original input and hands loom's
// native_group_norm_backward both tensors in the input's memory format, so
// the gradient takes that format as on the CPU.
//
// Under create_graph (and whenever the mean or rstd outputs receive a
// gradient) the backward is written in differentiable tensor ops, as
// PyTorch's own formula is for that case, so double backward works.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gradients of native_group_norm's input, weight and bias from those of
// its three outputs, in differentiable ops. X is viewed as (N, G, D, HxW)
// with n = D*HxW elements per group; a channel's weight is gamma[g*D+d].
// With h = gamma*dY, dX = rstd*h - rstd/n*sum(h)
//                        - rstd^3/n*(X-mean)*sum(h*(X-mean)),
// plus dmean/n and -rstd^3*drstd*(X-mean)/n from the statistics' gradients.
std::array<at::Tensor, 3> differentiable_backward(
    const at::Tensor& dY, const at::Tensor& dmean, const at::Tensor& drstd,
    const at::Tensor& X, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& gamma, int64_t N, int64_t C, int64_t HxW, int64_t G,
    std::array<bool, 3> mask) {
  const int64_t D = C / G;
  const double inv_n = 1.0 / static_cast<double>(D * HxW);
  const at::Tensor x = X.reshape({N, G, D, HxW});
  const at::Tensor mu = mean.reshape({N, G, 1, 1});
  const at::Tensor rs = rstd.reshape({N, G, 1, 1});
  const at::Tensor g = gamma.defined() ? gamma.reshape({1, G, D, 1}) : at::Tensor();
  at::Tensor dx, dgamma, dbeta, dsx, dsum;
  if (dY.defined()) {
    const at::Tensor dy = dY.reshape({N, G, D, HxW});
    dsx = (dy * x).sum(3, /*keepdim=*/true);  // (N, G, D, 1)
    dsum = dy.sum(3, /*keepdim=*/true);
    if (mask[0]) {
      // sum(h) and sum(h*X) over each group.
      const at::Tensor sh = (g.defined() ? dsum * g : dsum).sum(2, true);
      const at::Tensor shx = (g.defined() ? dsx * g : dsx).sum(2, true);
      const at::Tensor rs3 = rs * rs * rs;
      const at::Tensor coef_x = (mu * sh - shx) * rs3 * inv_n;
      const at::Tensor shift = -coef_x * mu - sh * rs * inv_n;
      dx = (g.defined() ? rs * g : rs) * dy + coef_x * x + shift;
    }
  }
  if (mask[0] && (dmean.defined() || drstd.defined())) {
    at::Tensor extra;
    if (dmean.defined()) extra = dmean.reshape({N, G, 1, 1}) * inv_n;
    if (drstd.defined()) {
      const at::Tensor t = -(rs * rs * rs) * drstd.reshape({N, G, 1, 1}) * inv_n * (x - mu);
      extra = extra.defined() ? extra + t : t;
    }
    dx = dx.defined() ? dx + extra : extra.expand({N, G, D, HxW});
  }
  if (dx.defined()) dx = dx.reshape(X.sizes()).to(X.scalar_type());
  const auto popts_type = gamma.defined() ? gamma.scalar_type() : X.scalar_type();
  if (mask[1] && dY.defined())
    dgamma = ((dsx - dsum * mu) * rs).sum({0, 3}).reshape({C}).to(popts_type);
  if (mask[2] && dY.defined()) dbeta = dsum.sum({0, 3}).reshape({C}).to(popts_type);
  return {dx, dgamma, dbeta};
}

struct GroupNormFunction : public torch::autograd::Function<GroupNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias,
                               c10::SymInt N, c10::SymInt C, c10::SymInt HxW,
                               int64_t group, double eps) {
    // Gradients of outputs that took none stay undefined (most often those
    // of mean and rstd), which picks the backward below.
    ctx->set_materialize_grads(false);
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, mean, rstd] =
        at::native_group_norm_symint(input, weight, bias, N, C, HxW, group, eps);
    ctx->save_for_backward({input, value_or_undefined(weight), mean, rstd});
    ctx->saved_data["N"] = std::move(N);
    ctx->saved_data["C"] = std::move(C);
    ctx->saved_data["HxW"] = std::move(HxW);
    ctx->saved_data["group"] = group;
    ctx->saved_data["has_weight"] = weight.has_value() && weight->defined();
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return {y, mean, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1];
    const at::Tensor &mean = saved[2], &rstd = saved[3];
    const c10::SymInt N = ctx->saved_data["N"].toSymInt();
    const c10::SymInt C = ctx->saved_data["C"].toSymInt();
    const c10::SymInt HxW = ctx->saved_data["HxW"].toSymInt();
    const int64_t group = ctx->saved_data["group"].toInt();
    // The node's edges are those of the tensor arguments given: the input,
    // then the weight and the bias where present.
    const bool has_weight = ctx->saved_data["has_weight"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::array<bool, 3> mask = {
        ctx->needs_input_grad(0), has_weight && ctx->needs_input_grad(1),
        has_bias && ctx->needs_input_grad(has_weight ? 2 : 1)};
    const at::Tensor &dy = grads[0], &dmean = grads[1], &drstd = grads[2];
    at::Tensor dx, dw, db;
    if (at::GradMode::is_enabled() || dmean.defined() || drstd.defined()) {
      auto g = differentiable_backward(
          dy, dmean, drstd, input, mean, rstd, weight,
          N.guard_int(__FILE__, __LINE__), C.guard_int(__FILE__, __LINE__),
          HxW.guard_int(__FILE__, __LINE__), group, mask);
      dx = g[0], dw = g[1], db = g[2];
    } else if (dy.defined()) {
      // Both tensors in the input's memory format: loom's backward returns
      // the input gradient in that format.
      const auto format = input.suggest_memory_format();
      const std::optional<at::Tensor> w =
          weight.defined() ? std::optional<at::Tensor>(weight) : std::nullopt;
      std::tie(dx, dw, db) = at::native_group_norm_backward_symint(
          dy.contiguous(format), input.contiguous(format), mean, rstd, w, N, C, HxW,
          group, mask);
    }
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_autograd(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt N, c10::SymInt C,
    c10::SymInt HxW, int64_t group, double eps) {
  auto out = GroupNormFunction::apply(input, weight, bias, std::move(N), std::move(C),
                                      std::move(HxW), group, eps);
  return {out[0], out[1], out[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("native_group_norm", TORCH_FN(group_norm_autograd));
}

}  // namespace torch_loom::nn
