// Loss functions on loom: nll_loss (1d/2d), mse, smooth L1, Huber, binary
// cross-entropy, forward and backward. cross_entropy reaches us as
// log_softmax + nll_loss.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "loom/kernels/loss.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// ---- nll_loss -----------------------------------------------------------------

void check_target_type(const at::Tensor& target) {
  TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
              "expected target dtype to be Long or Byte, but got ",
              target.scalar_type());
}

void check_reduction(int64_t reduction, const char* op) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2, op, ": ", reduction,
              " is not a valid value for reduction");
}

// input [N, C, S] and target [N, S] views, and the shape of an unreduced loss.
struct NllShape {
  at::Tensor input, target;
  std::vector<int64_t> loss_shape;
};

NllShape nll_shape_1d(const at::Tensor& self, const at::Tensor& target,
                      const at::Tensor& weight) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  TORCH_CHECK(target.dim() <= 1,
              "0D or 1D target tensor expected, multi-target not supported");
  const bool no_batch_dim = self.dim() == 1 && target.dim() == 0;
  TORCH_CHECK(no_batch_dim || (self.size(0) == target.size(0)),
              "size mismatch (got input: ", self.sizes(), ", target: ",
              target.sizes(), ")");
  const int64_t n_classes = self.size(-1);
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == n_classes),
              "weight tensor should be defined either for all ", n_classes,
              " classes or no classes but got weight tensor of shape: ",
              weight.sizes());
  check_target_type(target);
  NllShape s;
  s.input = (self.dim() == 1 ? self.unsqueeze(0) : self).unsqueeze(-1);
  s.target = target.reshape({s.input.size(0), 1});
  if (self.dim() == 2) s.loss_shape = {self.size(0)};
  return s;
}

NllShape nll_shape_2d(const at::Tensor& self, const at::Tensor& target,
                      const at::Tensor& weight) {
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got "
              "targets of dimension: ", target.dim());
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got "
              "input of dimension: ", self.dim());
  TORCH_CHECK(!weight.defined() || weight.numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
                  self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ",
              target.sizes(), ", input ", self.sizes());
  check_target_type(target);
  NllShape s;
  s.input = self.reshape({self.size(0), self.size(1), self.size(2) * self.size(3)});
  s.target = target.reshape({target.size(0), target.size(1) * target.size(2)});
  s.loss_shape = {self.size(0), self.size(2), self.size(3)};
  return s;
}

std::tuple<at::Tensor, at::Tensor> nll_forward_common(
    const at::Tensor& self, const NllShape& s, const at::Tensor& weight,
    int64_t reduction, int64_t ignore_index, const char* op) {
  check_float(self, op);
  check_reduction(reduction, op);
  check_loom(s.target, self, op, "target");
  check_loom(weight, self, op, "weight");
  const bool none = reduction == LOOM_REDUCTION_NONE;
  at::Tensor out = none ? at::empty(s.loss_shape, self.options())
                        : at::empty({}, self.options());
  // total_weight stays 0 when unreduced, as the CPU backend leaves it.
  at::Tensor total_weight = none ? at::zeros({}, self.options())
                                 : at::empty({}, self.options());
  const int64_t items = s.target.size(0) * s.target.size(1);
  if (none && items == 0) return {out, total_weight};
  const loom_tensor t[5] = {describe(s.input, op), describe(s.target, op),
                            describe_opt(weight, op), describe(out, op),
                            describe(total_weight, op)};
  const loom_scalar sc[2] = {scalar_i(reduction), scalar_i(ignore_index)};
  if (none)
    launch(op, LOOM_KERNEL("nll_loss.forward"), t, sc, items, grain_for(1),
           self.device().index());
  else
    launch(op, LOOM_KERNEL("nll_loss.forward"), t, sc, 1, 1, self.device().index());
  return {out, total_weight};
}

at::Tensor nll_backward_common(const at::Tensor& grad_output,
                               const at::Tensor& self, const NllShape& s,
                               const at::Tensor& weight, int64_t reduction,
                               int64_t ignore_index,
                               const at::Tensor& total_weight, const char* op) {
  check_float(self, op);
  check_reduction(reduction, op);
  const int64_t items = s.target.size(0) * s.target.size(1);
  if (reduction == LOOM_REDUCTION_NONE) {
    TORCH_CHECK(grad_output.numel() == items, op,
                ": Expected a tensor of ", items, " elements for grad_output ",
                "but got one of size ", grad_output.sizes());
  } else {
    TORCH_CHECK(grad_output.numel() == 1, op,
                ": Expected a single element grad_output tensor, but got: ",
                grad_output.sizes());
  }
  TORCH_CHECK(total_weight.numel() == 1, op,
              ": expected total_weight to be a single element tensor, got: ",
              total_weight.sizes(), " (", total_weight.numel(), " elements)");
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (items == 0 || self.numel() == 0) return grad_input.zero_();
  const at::Tensor go = grad_output.contiguous();
  const at::Tensor gi3 = grad_input.view(s.input.sizes());
  const loom_tensor t[5] = {describe(go, op), describe(s.target, op),
                            describe_opt(weight, op), describe(total_weight, op),
                            describe(gi3, op)};
  const loom_scalar sc[2] = {scalar_i(reduction), scalar_i(ignore_index)};
  launch(op, LOOM_KERNEL("nll_loss.backward"), t, sc, items, grain_for(s.input.size(1)),
         self.device().index());
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> nll_forward_1d(
    const at::Tensor& self, const at::Tensor& target,
    const std::optional<at::Tensor>& weight_opt, int64_t reduction,
    int64_t ignore_index) {
  const at::Tensor weight = value_or_undefined(weight_opt);
  return nll_forward_common(self, nll_shape_1d(self, target, weight), weight,
                            reduction, ignore_index, "nll_loss_forward");
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(
    const at::Tensor& self, const at::Tensor& target,
    const std::optional<at::Tensor>& weight, int64_t reduction,
    int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  auto [o, w] = nll_forward_1d(self, target, weight, reduction, ignore_index);
  output.resize_(o.sizes()).copy_(o);
  total_weight.resize_(w.sizes()).copy_(w);
  return {output, total_weight};
}

at::Tensor nll_backward_1d(const at::Tensor& grad_output,
                             const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight_opt,
                             int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  const at::Tensor weight = value_or_undefined(weight_opt);
  return nll_backward_common(grad_output, self, nll_shape_1d(self, target, weight),
                             weight, reduction, ignore_index, total_weight,
                             "nll_loss_backward");
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output,
                                  const at::Tensor& self,
                                  const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight,
                                  int64_t reduction, int64_t ignore_index,
                                  const at::Tensor& total_weight,
                                  at::Tensor& grad_input) {
  at::Tensor r = nll_backward_1d(grad_output, self, target, weight, reduction,
                                   ignore_index, total_weight);
  return grad_input.resize_(r.sizes()).copy_(r);
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(
    const at::Tensor& self, const at::Tensor& target,
    const std::optional<at::Tensor>& weight_opt, int64_t reduction,
    int64_t ignore_index) {
  const at::Tensor weight = value_or_undefined(weight_opt);
  return nll_forward_common(self, nll_shape_2d(self, target, weight), weight,
                            reduction, ignore_index, "nll_loss2d_forward");
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output,
                               const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight_opt,
                               int64_t reduction, int64_t ignore_index,
                               const at::Tensor& total_weight) {
  const at::Tensor weight = value_or_undefined(weight_opt);
  return nll_backward_common(grad_output, self, nll_shape_2d(self, target, weight),
                             weight, reduction, ignore_index, total_weight,
                             "nll_loss2d_backward");
}

// ---- pointwise losses -----------------------------------------------------------

at::Tensor pointwise_forward(const at::Tensor& self, const at::Tensor& target,
                             const at::Tensor& weight, int64_t kind,
                             int64_t reduction, double param,
                             const char* op) {
  check_float(self, op);
  check_reduction(reduction, op);
  check_loom(target, self, op, "target");
  check_loom(weight, self, op, "weight");
  // The bce target and weight take the input's shape; the others broadcast.
  const auto shape = kind == LOOM_LOSS_BCE
                         ? self.sizes().vec()
                         : at::infer_size(self.sizes(), target.sizes());
  const at::Tensor x = self.expand(shape), y = target.expand(shape);
  const at::Tensor w = weight.defined() ? weight.expand(shape) : weight;
  const auto type = at::result_type(self, target);
  const auto dev = self.device().index();
  const int64_t numel = x.numel();
  const loom_scalar sc[3] = {scalar_i(kind), scalar_i(reduction), scalar_f(param)};
  if (reduction == LOOM_REDUCTION_NONE) {
    // Laid out as the CPU's elementwise iteration over input and target
    // lays it out (bce: as the input).
    at::Tensor out = kind == LOOM_LOSS_BCE ? at::empty_like(self, self.options().dtype(type))
                                           : empty_elementwise({x, y}, type);
    if (numel == 0) return out;
    const loom_tensor t[4] = {describe(x, op), describe(y, op),
                              describe_opt(w, op), describe(out, op)};
    launch(op, LOOM_KERNEL("pointwise_loss.forward"), t, sc, numel, grain_for(1), dev);
    return out;
  }
  at::Tensor out = at::empty({}, self.options().dtype(type));
  const int64_t blocks = (numel + LOOM_LOSS_BLOCK - 1) / LOOM_LOSS_BLOCK;
  at::Tensor partials = at::empty({std::max<int64_t>(blocks, 1)},
                                  self.options().dtype(at::kDouble));
  if (blocks == 0) {
    partials.zero_();
  } else {
    const loom_tensor t[4] = {describe(x, op), describe(y, op),
                              describe_opt(w, op), describe(partials, op)};
    launch(op, LOOM_KERNEL("pointwise_loss.forward"), t, sc, blocks, 1, dev);
  }
  const loom_tensor f[2] = {describe(partials, op), describe(out, op)};
  const double divisor =
      reduction == LOOM_REDUCTION_MEAN ? static_cast<double>(numel) : 1.0;
  const loom_scalar fs[1] = {scalar_f(divisor)};
  launch(op, LOOM_KERNEL("loss.sum_partials"), f, fs, 1, 1, dev);
  return out;
}

at::Tensor pointwise_backward(const at::Tensor& grad_output,
                              const at::Tensor& self, const at::Tensor& target,
                              const at::Tensor& weight, int64_t kind,
                              int64_t reduction, double param,
                              const char* op) {
  check_float(self, op);
  check_reduction(reduction, op);
  auto shape = kind == LOOM_LOSS_BCE
                   ? self.sizes().vec()
                   : at::infer_size(self.sizes(), target.sizes());
  if (reduction == LOOM_REDUCTION_NONE)
    shape = at::infer_size(shape, grad_output.sizes());
  else
    TORCH_CHECK(grad_output.numel() == 1, op,
                ": expected a single element grad_output, got ",
                grad_output.sizes());
  const at::Tensor x = self.expand(shape), y = target.expand(shape);
  const at::Tensor w = weight.defined() ? weight.expand(shape) : weight;
  const at::Tensor go =
      reduction == LOOM_REDUCTION_NONE ? grad_output.expand(shape) : grad_output;
  // bce's gradient is laid out as the input, the others' contiguous, as
  // the CPU's backward kernels allocate them.
  const auto gtype = self.options().dtype(at::result_type(self, target));
  at::Tensor gi = kind == LOOM_LOSS_BCE ? at::empty_like(self, gtype) : at::empty(shape, gtype);
  if (gi.numel() == 0) return gi;
  const loom_tensor t[5] = {describe(go, op), describe(x, op), describe(y, op),
                            describe_opt(w, op), describe(gi, op)};
  const loom_scalar sc[3] = {scalar_i(kind), scalar_i(reduction), scalar_f(param)};
  launch(op, LOOM_KERNEL("pointwise_loss.backward"), t, sc, gi.numel(), grain_for(1),
         self.device().index());
  return gi;
}

at::Tensor mse_forward(const at::Tensor& self, const at::Tensor& target,
                    int64_t reduction) {
  return pointwise_forward(self, target, at::Tensor(), LOOM_LOSS_MSE, reduction,
                           0.0, "mse_loss");
}
at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target,
                         int64_t reduction, at::Tensor& out) {
  at::Tensor r = mse_forward(self, target, reduction);
  return out.resize_(r.sizes()).copy_(r);
}
at::Tensor mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, int64_t reduction) {
  return pointwise_backward(grad_output, self, target, at::Tensor(),
                            LOOM_LOSS_MSE, reduction, 0.0, "mse_loss_backward");
}

at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target,
                          int64_t reduction, double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  return pointwise_forward(self, target, at::Tensor(), LOOM_LOSS_SMOOTH_L1,
                           reduction, beta, "smooth_l1_loss");
}
at::Tensor smooth_l1_loss_backward(const at::Tensor& grad_output,
                                   const at::Tensor& self,
                                   const at::Tensor& target, int64_t reduction,
                                   double beta) {
  return pointwise_backward(grad_output, self, target, at::Tensor(),
                            LOOM_LOSS_SMOOTH_L1, reduction, beta,
                            "smooth_l1_loss_backward");
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target,
                      int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return pointwise_forward(self, target, at::Tensor(), LOOM_LOSS_HUBER,
                           reduction, delta, "huber_loss");
}
at::Tensor huber_loss_backward(const at::Tensor& grad_output,
                               const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta) {
  return pointwise_backward(grad_output, self, target, at::Tensor(),
                            LOOM_LOSS_HUBER, reduction, delta,
                            "huber_loss_backward");
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight,
                                int64_t reduction) {
  return pointwise_forward(self, target, value_or_undefined(weight),
                           LOOM_LOSS_BCE, reduction, 0.0,
                           "binary_cross_entropy");
}
at::Tensor binary_cross_entropy_backward(const at::Tensor& grad_output,
                                         const at::Tensor& self,
                                         const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight,
                                         int64_t reduction) {
  return pointwise_backward(grad_output, self, target, value_or_undefined(weight),
                            LOOM_LOSS_BCE, reduction, 0.0,
                            "binary_cross_entropy_backward");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "nll_loss_forward", nll_forward_1d);
  LOOM_IMPL(m, "nll_loss_forward.output", nll_loss_forward_out);
  LOOM_IMPL(m, "nll_loss_backward", nll_backward_1d);
  LOOM_IMPL(m, "nll_loss_backward.grad_input", nll_loss_backward_out);
  LOOM_IMPL(m, "nll_loss2d_forward", nll_loss2d_forward);
  LOOM_IMPL(m, "nll_loss2d_backward", nll_loss2d_backward);
  LOOM_IMPL(m, "mse_loss", mse_forward);
  LOOM_IMPL(m, "mse_loss.out", mse_loss_out);
  LOOM_IMPL(m, "mse_loss_backward", mse_loss_backward);
  LOOM_IMPL(m, "smooth_l1_loss", smooth_l1_loss);
  LOOM_IMPL(m, "smooth_l1_loss_backward", smooth_l1_loss_backward);
  LOOM_IMPL(m, "huber_loss", huber_loss);
  LOOM_IMPL(m, "huber_loss_backward", huber_loss_backward);
  LOOM_IMPL(m, "binary_cross_entropy", binary_cross_entropy);
  LOOM_IMPL(m, "binary_cross_entropy_backward", binary_cross_entropy_backward);
}

}  // namespace torch_loom::nn
