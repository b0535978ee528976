// loom::batch_norm_relu and loom::batch_norm_relu_backward: batch norm in
// training mode fused with the ReLU after it (and a residual added before
// the ReLU), and the backward of the pair, for the compiler
// (python/torch_loom/compiler/batchnorm.py). Bitwise what
// _native_batch_norm_legit_functional, add and relu give, and what
// threshold_backward(dy, y, 0) then native_batch_norm_backward give (the
// backward returns the masked gradient too, fourth, with keep_masked).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "loom/kernels/norm_batch_act.h"
#include "ops/nn/nn_batch_norm_nhwc.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

constexpr const char* kFwd = "loom::batch_norm_relu";
constexpr const char* kBwd = "loom::batch_norm_relu_backward";

// t as contiguous float32 [N, C, S] (a view of a contiguous tensor).
at::Tensor rows_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  int64_t s = 1;
  for (int64_t d = 2; d < c.dim(); ++d) s *= c.size(d);
  return c.view({c.size(0), c.size(1), s});
}

void check_input(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": expected a float32 input, got ",
              x.scalar_type());
  TORCH_CHECK(x.dim() >= 2, op, ": expected 2D or higher input (got ", x.dim(), "D input)");
}

void check_like(const at::Tensor& t, const at::Tensor& x, const char* op, const char* what) {
  if (!t.defined()) return;
  check_loom(t, x, op, what);
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.sizes() == x.sizes(), op, ": ", what,
              " must be float32 of the input's size ", x.sizes(), ", got ", t.scalar_type(), " ",
              t.sizes());
}

void check_channel(const at::Tensor& t, const at::Tensor& x, const char* op, const char* what) {
  if (!t.defined()) return;
  check_loom(t, x, op, what);
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1 && t.numel() == x.size(1), op,
              ": ", what, " must be float32 with ", x.size(1), " elements, got ",
              t.scalar_type(), " ", t.sizes());
}

at::Tensor contig(const at::Tensor& t) { return t.defined() ? t.contiguous() : t; }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_relu(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_,
    const std::optional<at::Tensor>& bias_, const at::Tensor& running_mean,
    const at::Tensor& running_var, const std::optional<at::Tensor>& residual_,
    double momentum, double eps) {
  check_input(input, kFwd);
  const at::Tensor weight = contig(value_or_undefined(weight_));
  const at::Tensor bias = contig(value_or_undefined(bias_));
  const at::Tensor residual = value_or_undefined(residual_);
  check_channel(weight, input, kFwd, "weight");
  check_channel(bias, input, kFwd, "bias");
  check_channel(running_mean, input, kFwd, "running_mean");
  check_channel(running_var, input, kFwd, "running_var");
  check_like(residual, input, kFwd, "residual");
  const int64_t C = input.size(1);
  const auto fmt = nhwc_input(input) ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(fmt));
  const auto st = input.options();
  at::Tensor save_mean = at::empty({C}, st), save_invstd = at::empty({C}, st);
  at::Tensor new_mean = running_mean.defined() ? at::empty({C}, st) : at::Tensor();
  at::Tensor new_var = running_var.defined() ? at::empty({C}, st) : at::Tensor();
  if (C == 0 || input.numel() == 0) {
    if (new_mean.defined()) new_mean.copy_(running_mean);
    if (new_var.defined()) new_var.copy_(running_var);
    save_mean.fill_(std::nan(""));
    save_invstd.fill_(std::nan(""));
    return {out, save_mean, save_invstd, new_mean, new_var};
  }
  if (nhwc_input(input)) {
    // channels-last: the norm.batch_nhwc_* kernels, ReLU (and residual) in the
    // normalising pass; the output keeps the input's layout
    NhwcFused fused;
    fused.relu = true;
    fused.new_mean = new_mean, fused.new_var = new_var;
    if (residual.defined()) fused.residual = residual.contiguous(at::MemoryFormat::ChannelsLast);
    nhwc_forward(input, weight, bias, contig(running_mean), contig(running_var), out, save_mean,
                 save_invstd, true, momentum, eps, kFwd, fused);
    return {out, save_mean, save_invstd, new_mean, new_var};
  }
  const at::Tensor x3 = rows_of(input), y3 = out.view(x3.sizes());
  const at::Tensor r3 = residual.defined() ? rows_of(residual) : residual;
  const loom_tensor t[11] = {
      describe(x3, kFwd), describe_opt(weight, kFwd), describe_opt(bias, kFwd),
      describe_opt(contig(running_mean), kFwd), describe_opt(contig(running_var), kFwd),
      describe_opt(r3, kFwd), describe(y3, kFwd), describe(save_mean, kFwd),
      describe(save_invstd, kFwd), describe_opt(new_mean, kFwd), describe_opt(new_var, kFwd)};
  const loom_scalar s[2] = {scalar_f(momentum), scalar_f(eps)};
  launch(kFwd, LOOM_KERNEL("norm.batch_relu_forward"), t, s, C, nchw_channel_grain(input),
         input.device().index());
  return {out, save_mean, save_invstd, new_mean, new_var};
}

std::vector<at::Tensor> bn_relu_backward(
    const at::Tensor& grad_out, const at::Tensor& output, const at::Tensor& input,
    const std::optional<at::Tensor>& weight_, const at::Tensor& save_mean,
    const at::Tensor& save_invstd, bool keep_masked) {
  check_input(input, kBwd);
  check_like(grad_out, input, kBwd, "grad_out");
  check_like(output, input, kBwd, "output");
  const at::Tensor weight = contig(value_or_undefined(weight_));
  check_channel(weight, input, kBwd, "weight");
  check_channel(save_mean, input, kBwd, "save_mean");
  check_channel(save_invstd, input, kBwd, "save_invstd");
  const int64_t C = input.size(1);
  const auto fmt = nhwc_input(input) ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  at::Tensor dx = at::empty(input.sizes(), input.options().memory_format(fmt));
  at::Tensor dw = at::empty({C}, input.options()), db = at::empty({C}, input.options());
  at::Tensor masked =
      keep_masked ? at::empty(input.sizes(), input.options().memory_format(fmt)) : at::Tensor();
  std::vector<at::Tensor> result = {dx, dw, db};
  if (keep_masked) result.push_back(masked);
  if (C == 0) return result;
  if (input.numel() == 0) {
    dw.zero_();
    db.zero_();
    return result;
  }
  if (nhwc_input(input)) {
    nhwc_backward(grad_out.contiguous(fmt), input, weight, at::Tensor(), at::Tensor(), save_mean,
                  save_invstd, dx, dw, db, true, 0.0, kBwd, output.contiguous(fmt), masked);
    return result;
  }
  const at::Tensor x3 = rows_of(input), dx3 = dx.view(x3.sizes());
  const loom_tensor t[10] = {
      describe(rows_of(grad_out), kBwd), describe(rows_of(output), kBwd), describe(x3, kBwd),
      describe_opt(weight, kBwd), describe(contig(save_mean), kBwd),
      describe(contig(save_invstd), kBwd), describe(dx3, kBwd), describe(dw, kBwd),
      describe(db, kBwd), keep_masked ? describe(masked.view(x3.sizes()), kBwd) : loom_tensor{}};
  launch(kBwd, LOOM_KERNEL("norm.batch_relu_backward"), t, {}, C,
         nchw_channel_grain(input), input.device().index());
  return result;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("batch_norm_relu(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, "
        "Tensor running_var, Tensor? residual, float momentum, float eps) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("batch_norm_relu_backward(Tensor grad_out, Tensor output, Tensor input, "
        "Tensor? weight, Tensor save_mean, Tensor save_invstd, bool keep_masked=False) -> "
        "Tensor[]");
}

TORCH_LIBRARY_IMPL(loom, PrivateUse1, m) {
  LOOM_IMPL(m, "batch_norm_relu", bn_relu);
  LOOM_IMPL(m, "batch_norm_relu_backward", bn_relu_backward);
}

}  // namespace torch_loom::nn
