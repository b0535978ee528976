// Fused Adam/AdamW/SGD steps on loom (optimizer(fused=True)): one kernel
// launch per parameter tensor, no intermediate tensors.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "loom/kernels/optim.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

void check_same(const at::Tensor& p, const at::Tensor& t, const char* op,
                const char* what) {
  TORCH_CHECK(t.sizes() == p.sizes(), op, ": ", what, " of size ", t.sizes(),
              " does not match the parameter of size ", p.sizes());
  TORCH_CHECK(t.is_contiguous(), op, ": ", what,
              " must be contiguous on loom");
  check_loom(t, p, op, what);
}

void check_lists(size_t n, std::initializer_list<size_t> sizes, const char* op) {
  for (size_t s : sizes)
    TORCH_CHECK(s == n, op, ": all tensor lists must have the same length (",
                n, " vs ", s, ")");
}

// lr as a device descriptor when it lives on loom, else as a plain number.
loom_tensor lr_tensor(const std::optional<at::Tensor>& lr, const at::Tensor& like,
                      double* lr_value, const char* op) {
  if (!lr.has_value()) return loom_tensor{};
  if (lr->device().type() == c10::DeviceType::PrivateUse1)
    return describe(*lr, op);
  *lr_value = lr->item<double>();
  return loom_tensor{};
}

void adam_common(at::TensorList params, at::TensorList grads,
                 at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList max_exp_avg_sqs, at::TensorList steps,
                 double lr, const std::optional<at::Tensor>& lr_t, double beta1,
                 double beta2, double weight_decay, double eps, bool amsgrad,
                 bool maximize, const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf, bool decoupled,
                 const char* op) {
  const size_t n = params.size();
  check_lists(n, {grads.size(), exp_avgs.size(), exp_avg_sqs.size(), steps.size()}, op);
  if (amsgrad) check_lists(n, {max_exp_avg_sqs.size()}, op);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    check_float(p, op);
    TORCH_CHECK(p.is_contiguous(), op, ": parameters must be contiguous on loom");
    check_same(p, grads[i], op, "grad");
    check_same(p, exp_avgs[i], op, "exp_avg");
    check_same(p, exp_avg_sqs[i], op, "exp_avg_sq");
    if (amsgrad) check_same(p, max_exp_avg_sqs[i], op, "max_exp_avg_sq");
    TORCH_CHECK(steps[i].numel() == 1, op, ": state_step must have one element");
    if (p.numel() == 0) continue;
    double lr_value = lr;
    const loom_tensor lrd = lr_tensor(lr_t, p, &lr_value, op);
    const loom_tensor t[9] = {
        describe(p, op), describe(grads[i], op), describe(exp_avgs[i], op),
        describe(exp_avg_sqs[i], op),
        amsgrad ? describe(max_exp_avg_sqs[i], op) : loom_tensor{},
        describe(steps[i], op),
        grad_scale.has_value() ? describe(*grad_scale, op) : loom_tensor{},
        found_inf.has_value() ? describe(*found_inf, op) : loom_tensor{}, lrd};
    const loom_scalar s[8] = {scalar_f(lr_value), scalar_f(beta1), scalar_f(beta2),
                              scalar_f(weight_decay), scalar_f(eps), scalar_i(amsgrad),
                              scalar_i(maximize), scalar_i(decoupled)};
    launch(op, LOOM_KERNEL("optim.adam_step"), t, s, p.numel(), grain_for(1),
           p.device().index());
  }
}

void fused_adamw(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                 at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                 at::TensorList state_steps, double lr, double beta1, double beta2,
                 double weight_decay, double eps, bool amsgrad, bool maximize,
                 const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  adam_common(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
              std::nullopt, beta1, beta2, weight_decay, eps, amsgrad, maximize,
              grad_scale, found_inf, true, "_fused_adamw_");
}

void fused_adamw_tensor_lr(at::TensorList self, at::TensorList grads,
                           at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                           at::TensorList max_exp_avg_sqs, at::TensorList state_steps,
                           const at::Tensor& lr, double beta1, double beta2,
                           double weight_decay, double eps, bool amsgrad, bool maximize,
                           const std::optional<at::Tensor>& grad_scale,
                           const std::optional<at::Tensor>& found_inf) {
  adam_common(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, 0.0,
              lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
              found_inf, true, "_fused_adamw_.tensor_lr");
}

void fused_adam(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                at::TensorList state_steps, double lr, double beta1, double beta2,
                double weight_decay, double eps, bool amsgrad, bool maximize,
                const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  adam_common(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
              std::nullopt, beta1, beta2, weight_decay, eps, amsgrad, maximize,
              grad_scale, found_inf, false, "_fused_adam_");
}

void fused_adam_tensor_lr(at::TensorList self, at::TensorList grads,
                          at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                          at::TensorList max_exp_avg_sqs, at::TensorList state_steps,
                          const at::Tensor& lr, double beta1, double beta2,
                          double weight_decay, double eps, bool amsgrad, bool maximize,
                          const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf) {
  adam_common(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, 0.0,
              lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
              found_inf, false, "_fused_adam_.tensor_lr");
}

void sgd_common(at::TensorList params, at::TensorList grads, at::TensorList bufs,
                double weight_decay, double momentum, double lr,
                const std::optional<at::Tensor>& lr_t, double dampening,
                bool nesterov, bool maximize, bool is_first_step,
                const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf, const char* op) {
  const size_t n = params.size();
  check_lists(n, {grads.size()}, op);
  const bool use_buf = momentum != 0.0;
  if (use_buf) check_lists(n, {bufs.size()}, op);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    check_float(p, op);
    TORCH_CHECK(p.is_contiguous(), op, ": parameters must be contiguous on loom");
    check_same(p, grads[i], op, "grad");
    if (use_buf) check_same(p, bufs[i], op, "momentum_buffer");
    if (p.numel() == 0) continue;
    double lr_value = lr;
    const loom_tensor lrd = lr_tensor(lr_t, p, &lr_value, op);
    const loom_tensor t[6] = {
        describe(p, op), describe(grads[i], op),
        use_buf ? describe(bufs[i], op) : loom_tensor{},
        grad_scale.has_value() ? describe(*grad_scale, op) : loom_tensor{},
        found_inf.has_value() ? describe(*found_inf, op) : loom_tensor{}, lrd};
    const loom_scalar s[7] = {scalar_f(weight_decay), scalar_f(momentum),
                              scalar_f(lr_value), scalar_f(dampening),
                              scalar_i(nesterov), scalar_i(maximize),
                              scalar_i(is_first_step)};
    launch(op, LOOM_KERNEL("optim.sgd_step"), t, s, p.numel(), grain_for(1),
           p.device().index());
  }
}

void fused_sgd(at::TensorList self, at::TensorList grads, at::TensorList bufs,
               double weight_decay, double momentum, double lr, double dampening,
               bool nesterov, bool maximize, bool is_first_step,
               const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  sgd_common(self, grads, bufs, weight_decay, momentum, lr, std::nullopt, dampening,
             nesterov, maximize, is_first_step, grad_scale, found_inf, "_fused_sgd_");
}

void fused_sgd_tensor_lr(at::TensorList self, at::TensorList grads,
                         at::TensorList bufs, double weight_decay, double momentum,
                         const at::Tensor& lr, double dampening, bool nesterov,
                         bool maximize, bool is_first_step,
                         const std::optional<at::Tensor>& grad_scale,
                         const std::optional<at::Tensor>& found_inf) {
  sgd_common(self, grads, bufs, weight_decay, momentum, 0.0, lr, dampening,
             nesterov, maximize, is_first_step, grad_scale, found_inf,
             "_fused_sgd_.tensor_lr");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_fused_adamw_", fused_adamw);
  LOOM_IMPL(m, "_fused_adamw_.tensor_lr", fused_adamw_tensor_lr);
  LOOM_IMPL(m, "_fused_adam_", fused_adam);
  LOOM_IMPL(m, "_fused_adam_.tensor_lr", fused_adam_tensor_lr);
  LOOM_IMPL(m, "_fused_sgd_", fused_sgd);
  LOOM_IMPL(m, "_fused_sgd_.tensor_lr", fused_sgd_tensor_lr);
}

}  // namespace torch_loom::nn
