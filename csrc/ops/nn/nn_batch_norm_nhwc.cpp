// Channels-last batch norm's launches (declared in nn_batch_norm_nhwc.h).
#include "ops/nn/nn_batch_norm_nhwc.h"

#include "loom/kernels/norm.h"
#include "ops/nn/nn_util.h"

namespace torch_loom::nn {

void nhwc_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                  const at::Tensor& running_mean, const at::Tensor& running_var,
                  const at::Tensor& out, const at::Tensor& save_mean,
                  const at::Tensor& save_invstd, bool training, double momentum, double eps,
                  const char* op, const NhwcFused& fused) {
  const int64_t C = input.size(1);
  const at::Tensor x2 = nhwc_rows(input), y2 = nhwc_rows(out);
  const int64_t R = x2.size(0);
  const auto dev = input.device().index();
  at::Tensor part;
  if (training) {
    part = at::empty({nhwc_chunks(R, C), 2, C}, input.options().dtype(at::kDouble));
    const loom_tensor ts[2] = {describe(x2, op), describe(part, op)};
    launch(op, LOOM_KERNEL("norm.batch_nhwc_stats"), ts, {}, part.size(0), 1, dev);
  }
  const at::Tensor coef = at::empty({3, C}, input.options().dtype(nhwc_coef_type(input)));
  const loom_tensor tf[10] = {
      describe_opt(part, op), describe_opt(weight, op), describe_opt(bias, op),
      describe_opt(running_mean, op), describe_opt(running_var, op),
      describe_opt(save_mean, op), describe_opt(save_invstd, op), describe(coef, op),
      describe_opt(fused.new_mean, op), describe_opt(fused.new_var, op)};
  const loom_scalar sf[4] = {scalar_i(training), scalar_f(momentum), scalar_f(eps), scalar_i(R)};
  launch(op, LOOM_KERNEL("norm.batch_nhwc_finish"), tf, sf, C, C, dev);
  const at::Tensor r2 = fused.residual.defined() ? nhwc_rows(fused.residual) : at::Tensor();
  const loom_tensor ta[4] = {describe(x2, op), describe(coef, op), describe_opt(r2, op),
                             describe(y2, op)};
  const loom_scalar sa[1] = {scalar_i(fused.relu)};
  launch(op, LOOM_KERNEL("norm.batch_nhwc_apply"), ta, sa, R, grain_for(C), dev);
}

void nhwc_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
                   const at::Tensor& running_mean, const at::Tensor& running_var,
                   const at::Tensor& save_mean, const at::Tensor& save_invstd,
                   const at::Tensor& dx, const at::Tensor& dw, const at::Tensor& db,
                   bool training, double eps, const char* op, const at::Tensor& relu_out,
                   const at::Tensor& masked) {
  const int64_t C = input.size(1);
  const at::Tensor x2 = nhwc_rows(input), g2 = nhwc_rows(grad_out);
  const int64_t R = x2.size(0);
  const auto dev = input.device().index();
  const auto c = [](const at::Tensor& t) { return t.defined() ? t.contiguous() : t; };
  const at::Tensor rm = c(running_mean), rv = c(running_var), sm = c(save_mean),
                   si = c(save_invstd);
  // behind a ReLU, the masked gradient goes to `masked`, or to dx until the
  // input gradient overwrites it in place
  const at::Tensor m2 = !relu_out.defined() ? at::Tensor()
                        : masked.defined()  ? nhwc_rows(masked)
                                            : nhwc_rows(dx);
  at::Tensor part;
  if (training || dw.defined() || db.defined() || relu_out.defined()) {
    part = at::empty({nhwc_chunks(R, C), 2, C}, input.options().dtype(at::kDouble));
    const at::Tensor y2 = relu_out.defined() ? nhwc_rows(relu_out) : at::Tensor();
    const loom_tensor ts[6] = {describe(g2, op), describe(x2, op),
                               describe(training ? sm : rm, op), describe(part, op),
                               describe_opt(y2, op), describe_opt(m2, op)};
    launch(op, LOOM_KERNEL("norm.batch_nhwc_grad_sums"), ts, {}, part.size(0), 1, dev);
  }
  at::Tensor coef;
  if (dx.defined()) coef = at::empty({4, C}, input.options().dtype(nhwc_coef_type(input)));
  const loom_tensor tf[9] = {
      describe_opt(part, op), describe_opt(weight, op), describe_opt(rm, op),
      describe_opt(rv, op), describe_opt(sm, op), describe_opt(si, op),
      describe_opt(dw, op), describe_opt(db, op), describe_opt(coef, op)};
  const loom_scalar sf[4] = {scalar_i(training), scalar_f(eps), scalar_i(R), scalar_i(C)};
  launch(op, LOOM_KERNEL("norm.batch_nhwc_grad_finish"), tf, sf, C, C, dev);
  if (!dx.defined()) return;
  const loom_tensor td[4] = {describe(m2.defined() ? m2 : g2, op), describe(x2, op),
                             describe(coef, op), describe(nhwc_rows(dx), op)};
  launch(op, LOOM_KERNEL("norm.batch_nhwc_dx"), td, {}, R, grain_for(C), dev);
}

}  // namespace torch_loom::nn
