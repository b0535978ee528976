// The CTC loss on loom: _ctc_loss and _ctc_loss_backward, with lengths as
// int lists or as tensors. torch.nn.functional.ctc_loss reaches them through
// the composite ctc_loss, which moves tensor lengths to the host and the
// targets to log_probs' device, and reduces with ops loom already runs.
#include <ATen/ATen.h>
#include <ATen/TensorUtils.h>
#include <torch/library.h>

#include <vector>

#include "loom/kernels/ctc_loss.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

void check_ctc_dtype(const at::Tensor& log_probs, const char* op) {
  const auto t = log_probs.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kDouble, "\"", op,
                              "\" not implemented for '", t, "'");
}

void check_same_dtype(const at::Tensor& t, const at::Tensor& log_probs, const char* op,
                      const char* what) {
  TORCH_CHECK(t.scalar_type() == log_probs.scalar_type(), op, ": expected ", what,
              " to have dtype ", log_probs.scalar_type(), " but got ", t.scalar_type());
}

// The kernels' scalars: blank, zero_infinity, then the lengths, which the
// host holds already (the composite and the .Tensor forms bring them here).
std::vector<loom_scalar> ctc_scalars(int64_t blank, bool zero_infinity,
                                     at::IntArrayRef input_lengths,
                                     at::IntArrayRef target_lengths) {
  std::vector<loom_scalar> sc;
  sc.reserve(2 + input_lengths.size() + target_lengths.size());
  sc.push_back(scalar_i(blank));
  sc.push_back(scalar_i(zero_infinity ? 1 : 0));
  for (int64_t len : input_lengths) sc.push_back(scalar_i(len));
  for (int64_t len : target_lengths) sc.push_back(scalar_i(len));
  return sc;
}

// The CPU backend's argument checks (dims, target dtype, blank, lengths
// against T and the targets) and output sizes, from PyTorch's meta kernel;
// its messages are the CPU's.
std::tuple<at::Tensor, at::Tensor> ctc_meta(const at::Tensor& log_probs,
                                            const at::Tensor& targets,
                                            at::IntArrayRef input_lengths,
                                            at::IntArrayRef target_lengths, int64_t blank) {
  // checked here so that the message names the tensor's own type, not meta's
  if (targets.scalar_type() != at::kLong)
    at::checkScalarType("ctc_loss_allocate_outputs", at::TensorArg(targets, "targets", 2),
                        at::kInt);
  return at::_ctc_loss(meta_like(log_probs), meta_like(targets), input_lengths,
                       target_lengths, blank, false);
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs,
                                            const at::Tensor& targets,
                                            at::IntArrayRef input_lengths,
                                            at::IntArrayRef target_lengths, int64_t blank,
                                            bool zero_infinity) {
  static const char* op = "_ctc_loss";
  TORCH_CHECK(log_probs.numel() > 0, "log_probs tensor must not be empty");
  check_ctc_dtype(log_probs, op);
  check_loom(targets, log_probs, op, "targets");
  auto [nll_m, alpha_m] = ctc_meta(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor nll = at::empty(nll_m.sizes(), log_probs.options());
  at::Tensor log_alpha = at::empty(alpha_m.sizes(), log_probs.options());
  const int64_t n = log_probs.size(1);
  const auto sc = ctc_scalars(blank, zero_infinity, input_lengths, target_lengths);
  const loom_tensor t[4] = {describe(log_probs, op), describe(targets, op),
                            describe(nll, op), describe(log_alpha, op)};
  launch(op, LOOM_KERNEL("ctc_loss.forward"), t, sc, n,
         grain_for(log_probs.size(0) * log_alpha.size(2)), log_probs.device().index());
  return {nll, log_alpha};
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs,
                             const at::Tensor& targets, at::IntArrayRef input_lengths,
                             at::IntArrayRef target_lengths,
                             const at::Tensor& neg_log_likelihood,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  static const char* op = "_ctc_loss_backward";
  check_ctc_dtype(log_probs, op);
  check_loom(grad, log_probs, op, "grad");
  check_loom(targets, log_probs, op, "targets");
  check_loom(neg_log_likelihood, log_probs, op, "neg_log_likelihood");
  check_loom(log_alpha, log_probs, op, "log_alpha");
  const auto alpha_m = std::get<1>(ctc_meta(log_probs, targets, input_lengths,
                                            target_lengths, blank));
  const int64_t n = log_probs.size(1);
  TORCH_CHECK(log_alpha.dim() == 3 && log_alpha.size(0) == n &&
                  log_alpha.size(1) == log_probs.size(0) &&
                  log_alpha.size(2) >= alpha_m.size(2),
              op, ": expected log_alpha of shape ", alpha_m.sizes(), " but got ",
              log_alpha.sizes());
  TORCH_CHECK(grad.dim() == 1 && grad.size(0) == n, op, ": expected grad of shape [", n,
              "] but got ", grad.sizes());
  TORCH_CHECK(neg_log_likelihood.dim() == 1 && neg_log_likelihood.size(0) == n, op,
              ": expected neg_log_likelihood of shape [", n, "] but got ",
              neg_log_likelihood.sizes());
  check_same_dtype(grad, log_probs, op, "grad");
  check_same_dtype(neg_log_likelihood, log_probs, op, "neg_log_likelihood");
  check_same_dtype(log_alpha, log_probs, op, "log_alpha");
  at::Tensor grad_lp = at::empty(log_probs.sizes(), log_probs.options());
  if (grad_lp.numel() == 0) return grad_lp;
  const int64_t width = log_alpha.size(2);
  // Per sample: two rows of betas and one row of collected alpha * beta.
  at::Tensor scratch =
      at::empty({n, 2 * width + log_probs.size(2)}, log_probs.options().dtype(at::kDouble));
  const auto sc = ctc_scalars(blank, zero_infinity, input_lengths, target_lengths);
  const loom_tensor t[7] = {describe(grad, op),       describe(log_probs, op),
                            describe(targets, op),    describe(neg_log_likelihood, op),
                            describe(log_alpha, op),  describe(grad_lp, op),
                            describe(scratch, op)};
  launch(op, LOOM_KERNEL("ctc_loss.backward"), t, sc, n, grain_for(log_probs.size(0) * width),
         log_probs.device().index());
  return grad_lp;
}

// Lengths given as tensors go to the host as int64, as the CPU backend takes them.
at::Tensor host_lengths(const at::Tensor& lengths, const char* what) {
  TORCH_CHECK(at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), what,
              " must be integral");
  return lengths.to(at::kCPU, at::kLong).contiguous();
}

at::IntArrayRef as_list(const at::Tensor& host) {
  return at::IntArrayRef(host.const_data_ptr<int64_t>(), host.numel());
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& log_probs,
                                                   const at::Tensor& targets,
                                                   const at::Tensor& input_lengths,
                                                   const at::Tensor& target_lengths,
                                                   int64_t blank, bool zero_infinity) {
  const at::Tensor il = host_lengths(input_lengths, "input_lengths");
  const at::Tensor tl = host_lengths(target_lengths, "target_lengths");
  return at::_ctc_loss(log_probs, targets, as_list(il), as_list(tl), blank, zero_infinity);
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs,
                                    const at::Tensor& targets,
                                    const at::Tensor& input_lengths,
                                    const at::Tensor& target_lengths,
                                    const at::Tensor& neg_log_likelihood,
                                    const at::Tensor& log_alpha, int64_t blank,
                                    bool zero_infinity) {
  const at::Tensor il = host_lengths(input_lengths, "input_lengths");
  const at::Tensor tl = host_lengths(target_lengths, "target_lengths");
  return at::_ctc_loss_backward(grad, log_probs, targets, as_list(il), as_list(tl),
                                neg_log_likelihood, log_alpha, blank, zero_infinity);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_ctc_loss", ctc_loss);
  LOOM_IMPL(m, "_ctc_loss.Tensor", ctc_loss_tensor);
  LOOM_IMPL(m, "_ctc_loss_backward", ctc_loss_backward);
  LOOM_IMPL(m, "_ctc_loss_backward.Tensor", ctc_loss_backward_tensor);
}

}  // namespace torch_loom::nn
