// multi_margin_loss and multilabel_margin_loss on loom, forward and backward: the CPU's shape checks,
// then one launch item per sample (loom/kernels/loss.h); the reduced loss
// adds the per-sample values in order in double, as the CPU does.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#include "loom/kernels/loss.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

struct MarginShape {
  int64_t nframe, dim;
};

MarginShape margin_check(const at::Tensor& input, const at::Tensor& target,
                         const at::Tensor& weight, const at::Scalar& p, int64_t reduction,
                         const char* op) {
  TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "only p == 1 and p == 2 supported");
  TORCH_CHECK(reduction >= 0 && reduction <= 2, op, ": ", reduction,
              " is not a valid value for reduction");
  const int64_t nd = input.dim();
  TORCH_CHECK((nd == 2 && input.size(1) != 0) || (nd == 1 && input.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ",
              input.sizes());
  MarginShape s{nd <= 1 ? 1 : input.size(0), nd == 0 ? 1 : input.size(nd - 1)};
  TORCH_CHECK(target.dim() <= 1 && target.numel() == s.nframe,
              "inconsistent target size, expected ", s.nframe, " but got ", target.sizes());
  TORCH_CHECK(!weight.defined() || (weight.dim() <= 1 && weight.numel() == s.dim),
              "inconsistent weight size, expected ", s.dim, " but got ", weight.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(
      input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble, "\"", op,
      "\" not implemented for '", input.scalar_type(), "'");
  TORCH_CHECK(target.scalar_type() == at::kLong, op, ": expected target of dtype Long but got ",
              target.scalar_type());
  TORCH_CHECK(!weight.defined() || weight.scalar_type() == input.scalar_type(), op,
              ": expected weight of dtype ", input.scalar_type(), " but got ",
              weight.scalar_type());
  check_loom(target, input, op, "target");
  check_loom(weight, input, op, "weight");
  return s;
}

// What the two backward adapters share once their op's checks passed:
// grad_input resized as the input (it must be contiguous), grad_output
// checked against the loss it is the gradient of (one value per sample when
// unreduced, else one) and brought to the input's dtype, the input as
// [nframe, dim] and the CPU's factor g (1 / dim, or 1 / (nframe * dim) for
// mean). Empty (no launch needed) when the input is.
struct MarginBackward {
  bool per_row;
  double g;
  at::Tensor go, x;
};

std::optional<MarginBackward> margin_backward_prepare(const at::Tensor& grad_output,
                                                      const at::Tensor& self,
                                                      const MarginShape& s, int64_t reduction,
                                                      at::Tensor& grad_input, const char* op) {
  check_loom(grad_output, self, op, "grad_output");
  grad_input.resize_as_(self);
  TORCH_CHECK(grad_input.is_contiguous(), op, ": grad_input must be contiguous");
  if (self.numel() == 0) return std::nullopt;
  const bool per_row = reduction == LOOM_REDUCTION_NONE && grad_output.dim() > 0;
  TORCH_CHECK(grad_output.numel() == (per_row ? s.nframe : 1), op, ": grad_output of size ",
              grad_output.sizes(), " does not match the loss");
  const double g = reduction == LOOM_REDUCTION_MEAN ? 1. / static_cast<double>(s.nframe * s.dim)
                                                    : 1. / static_cast<double>(s.dim);
  return MarginBackward{per_row, g, grad_output.to(self.scalar_type()).contiguous(),
                        self.contiguous().view({s.nframe, s.dim})};
}

at::Tensor& multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target,
                                  const at::Scalar& p, const at::Scalar& margin,
                                  const std::optional<at::Tensor>& weight_opt,
                                  int64_t reduction, at::Tensor& out) {
  static const char* op = "multi_margin_loss";
  const at::Tensor weight = value_or_undefined(weight_opt);
  const MarginShape s = margin_check(self, target, weight, p, reduction, op);
  const bool per_row = reduction == LOOM_REDUCTION_NONE && target.dim() > 0;
  if (per_row) out.resize_({s.nframe});
  else out.resize_({});
  if (self.numel() == 0) return out;
  const auto dev = self.device().index();
  const at::Tensor x = self.contiguous().view({s.nframe, s.dim});
  const at::Tensor t = target.contiguous().view({s.nframe});
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const bool direct = per_row && out.is_contiguous();
  at::Tensor rows = direct ? out
                           : at::empty({s.nframe}, self.options().dtype(per_row ? self.scalar_type()
                                                                                : at::kDouble));
  const loom_tensor d[4] = {describe(x, op), describe(t, op), describe_opt(w, op),
                            describe(rows, op)};
  const loom_scalar sc[2] = {scalar_i(p.toLong()), scalar_f(margin.toDouble())};
  launch(op, LOOM_KERNEL("multi_margin_loss.forward"), d, sc, s.nframe, grain_for(s.dim), dev);
  if (per_row) {
    if (!direct) out.copy_(rows);
    return out;
  }
  const loom_tensor f[2] = {describe(rows, op), describe(out, op)};
  const loom_scalar fs[1] = {
      scalar_f(reduction == LOOM_REDUCTION_MEAN ? static_cast<double>(s.nframe) : 1.0)};
  launch(op, LOOM_KERNEL("loss.sum_partials"), f, fs, 1, 1, dev);
  return out;
}

at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target,
                             const at::Scalar& p, const at::Scalar& margin,
                             const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out = at::empty({0}, self.options());
  return multi_margin_loss_out(self, target, p, margin, weight, reduction, out);
}

at::Tensor& multi_margin_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p,
                                           const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight_opt,
                                           int64_t reduction, at::Tensor& grad_input) {
  static const char* op = "multi_margin_loss_backward";
  const at::Tensor weight = value_or_undefined(weight_opt);
  const MarginShape s = margin_check(self, target, weight, p, reduction, op);
  const auto b = margin_backward_prepare(grad_output, self, s, reduction, grad_input, op);
  if (!b) return grad_input;
  const at::Tensor t = target.contiguous().view({s.nframe});
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const loom_tensor d[5] = {describe(b->go, op), describe(b->x, op), describe(t, op),
                            describe_opt(w, op), describe(grad_input.view({s.nframe, s.dim}), op)};
  // g travels as a double; the kernel rounds it to the input dtype as the CPU does
  const loom_scalar sc[4] = {scalar_i(p.toLong()), scalar_f(margin.toDouble()), scalar_f(b->g),
                             scalar_i(b->per_row)};
  launch(op, LOOM_KERNEL("multi_margin_loss.backward"), d, sc, s.nframe, grain_for(s.dim),
         self.device().index());
  return grad_input;
}

at::Tensor multi_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                      const at::Tensor& target, const at::Scalar& p,
                                      const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor grad_input = at::empty({0}, self.options());
  return multi_margin_loss_backward_out(grad_output, self, target, p, margin, weight, reduction,
                                        grad_input);
}

// ---- multilabel_margin_loss ---------------------------------------------------

MarginShape multilabel_check(const at::Tensor& input, const at::Tensor& target,
                             int64_t reduction, const char* op) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2, op, ": ", reduction,
              " is not a valid value for reduction");
  const int64_t nd = input.dim();
  TORCH_CHECK((nd == 2 && input.size(1) != 0) || (nd == 1 && input.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ",
              input.sizes());
  MarginShape s{1, 1};
  if (nd <= 1) {
    s.dim = nd == 0 ? 1 : input.size(0);
    TORCH_CHECK(target.dim() <= 1 && target.numel() == s.dim, "inconsistent target size: ",
                target.sizes(), " for input of size: ", input.sizes());
  } else {
    s.nframe = input.size(0);
    s.dim = input.size(1);
    TORCH_CHECK(target.dim() == 2 && target.size(0) == s.nframe && target.size(1) == s.dim,
                "inconsistent target size: ", target.sizes(), " for input of size: ",
                input.sizes());
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble, "\"", op,
      "\" not implemented for '", input.scalar_type(), "'");
  TORCH_CHECK(target.scalar_type() == at::kLong, op, ": expected target of dtype Long but got ",
              target.scalar_type());
  check_loom(target, input, op, "target");
  return s;
}

std::tuple<at::Tensor&, at::Tensor&> multilabel_forward_out(const at::Tensor& self,
                                                            const at::Tensor& target,
                                                            int64_t reduction, at::Tensor& out,
                                                            at::Tensor& is_target) {
  static const char* op = "multilabel_margin_loss_forward";
  const MarginShape s = multilabel_check(self, target, reduction, op);
  const bool per_row = reduction == LOOM_REDUCTION_NONE && target.dim() > 1;
  if (per_row) out.resize_({s.nframe});
  else out.resize_({});
  is_target.resize_as_(target);
  if (self.numel() == 0) return {out, is_target};
  TORCH_CHECK(out.scalar_type() == self.scalar_type() &&
                  is_target.scalar_type() == self.scalar_type(),
              op, ": expected output and is_target of dtype ", self.scalar_type());
  const at::Tensor x = self.contiguous().view({s.nframe, s.dim});
  const at::Tensor t = target.contiguous().view({s.nframe, s.dim});
  const bool direct = is_target.is_contiguous() && (!per_row || out.is_contiguous());
  at::Tensor ist = direct ? is_target : at::empty({s.nframe, s.dim}, self.options());
  at::Tensor res = direct ? out : at::empty(out.sizes(), self.options());
  const loom_tensor d[4] = {describe(x, op), describe(t, op),
                            describe(ist.view({s.nframe, s.dim}), op), describe(res, op)};
  const loom_scalar sc[2] = {scalar_i(per_row), scalar_i(reduction)};
  launch(op, LOOM_KERNEL("multilabel_margin_loss.forward"), d, sc, per_row ? s.nframe : 1,
         per_row ? grain_for(s.dim * s.dim) : 1, self.device().index());
  if (!direct) {
    is_target.copy_(ist.view(is_target.sizes()));
    out.copy_(res);
  }
  return {out, is_target};
}

std::tuple<at::Tensor, at::Tensor> multilabel_forward(const at::Tensor& self,
                                                      const at::Tensor& target,
                                                      int64_t reduction) {
  at::Tensor out = at::empty({0}, self.options());
  at::Tensor is_target = at::empty({0}, self.options());
  multilabel_forward_out(self, target, reduction, out, is_target);
  return {out, is_target};
}

at::Tensor& multilabel_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    const at::Tensor& target, int64_t reduction,
                                    const at::Tensor& is_target, at::Tensor& grad_input) {
  static const char* op = "multilabel_margin_loss_backward";
  const MarginShape s = multilabel_check(self, target, reduction, op);
  check_loom(is_target, self, op, "is_target");
  TORCH_CHECK(is_target.sizes() == target.sizes(), "inconsistent is_target size: ",
              is_target.sizes(), " for target of size: ", target.sizes());
  const auto b = margin_backward_prepare(grad_output, self, s, reduction, grad_input, op);
  if (!b) return grad_input;
  const at::Tensor t = target.contiguous().view({s.nframe, s.dim});
  const at::Tensor ist = is_target.to(self.scalar_type()).contiguous().view({s.nframe, s.dim});
  const loom_tensor d[5] = {describe(b->go, op), describe(b->x, op), describe(t, op),
                            describe(ist, op), describe(grad_input.view({s.nframe, s.dim}), op)};
  const loom_scalar sc[2] = {scalar_f(b->g), scalar_i(b->per_row)};
  launch(op, LOOM_KERNEL("multilabel_margin_loss.backward"), d, sc, s.nframe,
         grain_for(s.dim * s.dim), self.device().index());
  return grad_input;
}

at::Tensor multilabel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, int64_t reduction,
                               const at::Tensor& is_target) {
  at::Tensor grad_input = at::empty({0}, self.options());
  return multilabel_backward_out(grad_output, self, target, reduction, is_target, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "multi_margin_loss", multi_margin_loss);
  LOOM_IMPL(m, "multi_margin_loss.out", multi_margin_loss_out);
  LOOM_IMPL(m, "multi_margin_loss_backward", multi_margin_loss_backward);
  LOOM_IMPL(m, "multi_margin_loss_backward.grad_input", multi_margin_loss_backward_out);
  LOOM_IMPL(m, "multilabel_margin_loss_forward", multilabel_forward);
  LOOM_IMPL(m, "multilabel_margin_loss_forward.output", multilabel_forward_out);
  LOOM_IMPL(m, "multilabel_margin_loss_backward", multilabel_backward);
  LOOM_IMPL(m, "multilabel_margin_loss_backward.grad_input", multilabel_backward_out);
}

}  // namespace torch_loom::nn
