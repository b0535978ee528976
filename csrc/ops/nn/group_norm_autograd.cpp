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
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

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

// The backward node of one native_group_norm call. A plain autograd node,
// as PyTorch's generated ones are, so functorch's transforms (grad, vjp,
// vmap) run through it as through every other op.
struct GroupNormBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable input, weight, mean, rstd;
  c10::SymInt N, C, HxW;
  int64_t group = 0;
  bool has_weight = false, has_bias = false;

  std::string name() const override { return "NativeGroupNormBackward0"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input.reset_data();
    weight.reset_data();
    mean.reset_data();
    rstd.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const at::Tensor x = input.unpack(), w = weight.unpack();
    const at::Tensor mu = mean.unpack(getptr()), rs = rstd.unpack(getptr());
    // The edges are those of the input, then the weight and the bias where
    // given.
    const size_t w_edge = 1, b_edge = has_weight ? 2 : 1;
    const std::array<bool, 3> mask = {task_should_compute_output(0),
                                      has_weight && task_should_compute_output(w_edge),
                                      has_bias && task_should_compute_output(b_edge)};
    const at::Tensor &dy = grads[0], &dmean = grads[1], &drstd = grads[2];
    at::Tensor dx, dw, db;
    if (at::GradMode::is_enabled() || dmean.defined() || drstd.defined()) {
      auto g = differentiable_backward(
          dy, dmean, drstd, x, mu, rs, w, N.guard_int(__FILE__, __LINE__),
          C.guard_int(__FILE__, __LINE__), HxW.guard_int(__FILE__, __LINE__), group, mask);
      dx = g[0], dw = g[1], db = g[2];
    } else if (dy.defined()) {
      // Both tensors in the input's memory format: loom's backward returns
      // the input gradient in that format.
      const auto format = x.suggest_memory_format();
      const std::optional<at::Tensor> wo =
          w.defined() ? std::optional<at::Tensor>(w) : std::nullopt;
      std::tie(dx, dw, db) = at::native_group_norm_backward_symint(
          dy.contiguous(format), x.contiguous(format), mu, rs, wo, N, C, HxW, group, mask);
    }
    torch::autograd::variable_list out = {dx};
    if (has_weight) out.push_back(dw);
    if (has_bias) out.push_back(db);
    return out;
  }
};

bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// native_group_norm in differentiable tensor ops, for forward-mode AD
// (dual tensors), which those ops carry through.
std::tuple<at::Tensor, at::Tensor, at::Tensor> composite_forward(
    const at::Tensor& input, const at::Tensor& w, const at::Tensor& b, int64_t N, int64_t C,
    int64_t HxW, int64_t G, double eps) {
  const at::Tensor x = input.reshape({N, G, (C / G) * HxW});
  const at::Tensor mean = x.mean(-1);
  const at::Tensor rstd = (x.var(-1, /*unbiased=*/false) + eps).rsqrt();
  at::Tensor y = ((x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)).reshape({N, C, HxW});
  if (w.defined()) y = y * w.reshape({1, C, 1});
  if (b.defined()) y = y + b.reshape({1, C, 1});
  y = y.reshape(input.sizes()).contiguous(input.suggest_memory_format());
  return {y.to(input.scalar_type()), mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_autograd(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt N, c10::SymInt C,
    c10::SymInt HxW, int64_t group, double eps) {
  namespace ag = torch::autograd;
  const at::Tensor w = given(weight) ? *weight : at::Tensor();
  const at::Tensor b = given(bias) ? *bias : at::Tensor();
  if (ag::isFwGradDefined(input) || ag::isFwGradDefined(weight) || ag::isFwGradDefined(bias))
    return composite_forward(input, w, b, N.guard_int(__FILE__, __LINE__),
                             C.guard_int(__FILE__, __LINE__), HxW.guard_int(__FILE__, __LINE__),
                             group, eps);
  c10::intrusive_ptr<GroupNormBackward> node;
  if (ag::compute_requires_grad(input, w, b)) {
    node = c10::make_intrusive<GroupNormBackward>();
    ag::edge_list edges = ag::collect_next_edges(input);
    if (w.defined()) edges.push_back(ag::impl::gradient_edge(w));
    if (b.defined()) edges.push_back(ag::impl::gradient_edge(b));
    node->set_next_edges(std::move(edges));
    node->has_weight = w.defined();
    node->has_bias = b.defined();
  }
  at::Tensor y, mean, rstd;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    std::tie(y, mean, rstd) =
        at::native_group_norm_symint(input, weight, bias, N, C, HxW, group, eps);
  }
  if (node) {
    ag::set_history(ag::variable_list{y, mean, rstd}, node);
    node->input = ag::SavedVariable(input, false);
    node->weight = ag::SavedVariable(w, false);
    node->mean = ag::SavedVariable(mean, true);
    node->rstd = ag::SavedVariable(rstd, true);
    node->N = std::move(N);
    node->C = std::move(C);
    node->HxW = std::move(HxW);
    node->group = group;
  }
  return {y, mean, rstd};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("native_group_norm", TORCH_FN(group_norm_autograd));
}

}  // namespace torch_loom::nn
