// batch norm (training and eval, running-stat update) and its gradient on
// loom, under every name the dispatcher reaches it by.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "loom/kernels/norm.h"
#include "ops/nn/nn_batch_norm_nhwc.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// x as [N, C, S]: a view whenever the layout allows (contiguous and
// channels-last both do), so the kernel reads the caller's memory.
at::Tensor as_ncs(const at::Tensor& t) {
  const int64_t n = t.size(0), c = t.dim() > 1 ? t.size(1) : 1;
  int64_t s = 1;
  for (int64_t d = 2; d < t.dim(); ++d) s *= t.size(d);
  return t.reshape({n, c, s});
}

void check_channels(const at::Tensor& t, int64_t c, const char* op,
                    const char* what) {
  if (!t.defined()) return;
  TORCH_CHECK(t.numel() == c, op, ": ", what, " should contain ", c,
              " elements not ", t.numel());
}

at::ScalarType bn_stats_type(const at::Tensor& input, const at::Tensor& weight) {
  const bool reduced = input.scalar_type() == at::kBFloat16 ||
                       input.scalar_type() == at::kHalf;
  if (reduced && weight.defined() && weight.scalar_type() == at::kFloat)
    return at::kFloat;
  return input.scalar_type();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_forward(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& running_mean, const at::Tensor& running_var,
    bool training, double momentum, double eps, const char* op) {
  check_float(input, op);
  TORCH_CHECK(input.dim() >= 2, op, ": expected 2D or higher input (got ",
              input.dim(), "D input)");
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()),
              "running_mean must be defined in evaluation mode");
  const int64_t C = input.size(1);
  check_channels(weight, C, op, "weight");
  check_channels(bias, C, op, "bias");
  check_channels(running_mean, C, op, "running_mean");
  check_channels(running_var, C, op, "running_var");
  for (const at::Tensor* t : {&weight, &bias, &running_mean, &running_var})
    check_loom(*t, input, op, "parameters");
  for (const at::Tensor* t : {&running_mean, &running_var})
    TORCH_CHECK(!t->defined() || t->is_contiguous(), op,
                ": running statistics must be contiguous");
  at::Tensor out = at::empty_like(input, input.suggest_memory_format());
  const auto st = input.options().dtype(bn_stats_type(input, weight));
  at::Tensor save_mean = at::empty({training ? C : 0}, st);
  at::Tensor save_invstd = at::empty({training ? C : 0}, st);
  if (nhwc_input(input)) {
    TORCH_INTERNAL_ASSERT(out.is_contiguous(at::MemoryFormat::ChannelsLast));
    nhwc_forward(input, weight.defined() ? weight.contiguous() : weight,
                 bias.defined() ? bias.contiguous() : bias, running_mean, running_var, out,
                 save_mean, save_invstd, training, momentum, eps, op);
  } else if (C > 0) {
    const at::Tensor x3 = as_ncs(input), y3 = as_ncs(out);
    TORCH_INTERNAL_ASSERT(y3.data_ptr() == out.data_ptr() || out.numel() == 0);
    const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    const loom_tensor t[8] = {
        describe(x3, op), describe_opt(w, op), describe_opt(b, op),
        describe_opt(running_mean, op), describe_opt(running_var, op),
        describe(y3, op), describe_opt(save_mean, op),
        describe_opt(save_invstd, op)};
    const loom_scalar s[3] = {scalar_i(training), scalar_f(momentum),
                              scalar_f(eps)};
    launch(op, LOOM_KERNEL("norm.batch_forward"), t, s, C,
           nchw_channel_grain(input), input.device().index());
  }
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    const at::Tensor& weight, const at::Tensor& running_mean,
    const at::Tensor& running_var, const at::Tensor& save_mean,
    const at::Tensor& save_invstd, bool training, double eps,
    std::array<bool, 3> mask, const char* op) {
  check_float(input, op);
  TORCH_CHECK(input.dim() >= 2, op, ": expected 2D or higher input (got ",
              input.dim(), "D input)");
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  const int64_t C = input.size(1);
  if (training) {
    TORCH_CHECK(save_mean.defined() && save_invstd.defined(), op,
                ": saved statistics are required in training mode");
  } else {
    TORCH_CHECK(running_mean.defined() && running_var.defined(),
                "running_mean must be defined in evaluation mode");
  }
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty_like(input, input.suggest_memory_format());
  const auto popts = weight.defined() ? weight.options() : input.options();
  if (mask[1]) dw = at::empty({C}, popts);
  if (mask[2]) db = at::empty({C}, popts);
  if (C == 0) return {dx, dw, db};
  if (nhwc_input(input)) {
    nhwc_backward(grad_out.contiguous(at::MemoryFormat::ChannelsLast), input,
                  weight.defined() ? weight.contiguous() : weight, running_mean, running_var,
                  save_mean, save_invstd, dx, dw, db, training, eps, op);
    return {dx, dw, db};
  }
  const at::Tensor dy3 = as_ncs(grad_out), x3 = as_ncs(input);
  const at::Tensor dx3 = dx.defined() ? as_ncs(dx) : dx;
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const auto c = [](const at::Tensor& t) { return t.defined() ? t.contiguous() : t; };
  const loom_tensor t[10] = {
      describe(dy3, op), describe(x3, op), describe_opt(w, op),
      describe_opt(c(running_mean), op), describe_opt(c(running_var), op),
      describe_opt(c(save_mean), op), describe_opt(c(save_invstd), op),
      describe_opt(dx3, op), describe_opt(dw, op), describe_opt(db, op)};
  const loom_scalar s[2] = {scalar_i(training), scalar_f(eps)};
  launch(op, LOOM_KERNEL("norm.batch_backward"), t, s, C, nchw_channel_grain(input),
         input.device().index());
  return {dx, dw, db};
}

// ---- the dispatcher's names -------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_native(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  return bn_forward(input, value_or_undefined(weight), value_or_undefined(bias),
                    value_or_undefined(running_mean),
                    value_or_undefined(running_var), training, momentum, eps,
                    "native_batch_norm");
}

// A forward's (output, saved mean, saved invstd) into out= tensors.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> to_outs(
    const std::tuple<at::Tensor, at::Tensor, at::Tensor>& r, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd) {
  const auto& [o, m, v] = r;
  out.resize_(o.sizes()).copy_(o);
  save_mean.resize_(m.sizes()).copy_(m);
  save_invstd.resize_(v.sizes()).copy_(v);
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
    at::Tensor& save_invstd) {
  return to_outs(bn_native(input, weight, bias, running_mean, running_var, training, momentum,
                           eps),
                 out, save_mean, save_invstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool training, double momentum, double eps) {
  return bn_forward(input, value_or_undefined(weight), value_or_undefined(bias),
                    running_mean, running_var, training, momentum, eps,
                    "_native_batch_norm_legit");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum,
    double eps) {
  TORCH_CHECK(training, "_native_batch_norm_legit.no_stats: running_mean ",
              "must be defined in evaluation mode");
  return bn_forward(input, value_or_undefined(weight), value_or_undefined(bias),
                    at::Tensor(), at::Tensor(), true, momentum, eps,
                    "_native_batch_norm_legit.no_stats");
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> legit_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool training, double momentum, double eps, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd) {
  return to_outs(legit(input, weight, bias, running_mean, running_var, training, momentum, eps),
                 out, save_mean, save_invstd);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> legit_no_stats_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps,
    at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  return to_outs(legit_no_stats(input, weight, bias, training, momentum, eps), out, save_mean,
                 save_invstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
    at::Tensor& running_var, double momentum, double eps) {
  auto [o, m, v] = bn_forward(input, value_or_undefined(weight),
                              value_or_undefined(bias), running_mean,
                              running_var, true, momentum, eps,
                              "_batch_norm_with_update");
  return {o, m, v, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean,
    const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  return bn_backward(grad_out, input, value_or_undefined(weight),
                     value_or_undefined(running_mean),
                     value_or_undefined(running_var),
                     value_or_undefined(save_mean),
                     value_or_undefined(save_invstd), train, eps, mask,
                     "native_batch_norm_backward");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    const at::Tensor& weight, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean,
    const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> mask, const at::Tensor& reserve) {
  // save_var holds 1/sqrt(var + eps), as the forward saved it.
  return bn_backward(grad_out, input, weight, value_or_undefined(running_mean),
                     value_or_undefined(running_var),
                     value_or_undefined(save_mean), value_or_undefined(save_var),
                     update, eps, mask, "batch_norm_backward");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "native_batch_norm", bn_native);
  LOOM_IMPL(m, "native_batch_norm.out", native_batch_norm_out);
  LOOM_IMPL(m, "_native_batch_norm_legit", legit);
  LOOM_IMPL(m, "_native_batch_norm_legit.no_stats", legit_no_stats);
  LOOM_IMPL(m, "_native_batch_norm_legit.out", legit_out);
  LOOM_IMPL(m, "_native_batch_norm_legit.no_stats_out", legit_no_stats_out);
  LOOM_IMPL(m, "_batch_norm_with_update", with_update);
  LOOM_IMPL(m, "native_batch_norm_backward", native_batch_norm_backward);
  LOOM_IMPL(m, "batch_norm_backward", batch_norm_backward);
}

}  // namespace torch_loom::nn
