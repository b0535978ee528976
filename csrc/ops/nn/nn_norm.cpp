// layer norm, RMS norm and group norm (forward and backward) on loom.
#include <ATen/ATen.h>
#include <limits>
#include <ATen/native/layer_norm.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include "loom/kernels/norm.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// Statistics are kept in float when a reduced-precision input meets a float
// weight (mixed precision), as the CPU backend does.
at::ScalarType stats_type(const at::Tensor& input, const at::Tensor& weight) {
  const bool reduced = input.scalar_type() == at::kBFloat16 ||
                       input.scalar_type() == at::kHalf;
  if (reduced && weight.defined() && weight.scalar_type() == at::kFloat)
    return at::kFloat;
  return input.scalar_type();
}

// The per-row statistics' shape: the input's, its normalized dims 1.
std::vector<int64_t> stats_shape(const at::Tensor& input, at::IntArrayRef normalized_shape) {
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  const size_t axis = shape.size() - normalized_shape.size();
  for (size_t d = axis; d < shape.size(); ++d) shape[d] = 1;
  return shape;
}

// The input gradient (when dx is defined) and the parameter gradients of
// layer norm (rms = false) or RMS norm over M rows of N: one pass over the
// rows in chunks of a size fixed by the shape, each chunk's column sums
// into its slice of a scratch tensor, the chunks then summed per column in
// chunk order, so the result does not depend on the thread count.
void norm_backward(const char* op, const at::Tensor& dy, const at::Tensor& x,
                   const at::Tensor& mu, const at::Tensor& rs, const at::Tensor& w,
                   const at::Tensor& dx, const at::Tensor& dw, const at::Tensor& db,
                   int64_t M, int64_t N, bool rms, c10::DeviceIndex dev) {
  if (N <= 0) return;
  const bool params = dw.defined() || db.defined();
  if (!params) {
    if (!dx.defined() || M <= 0) return;
    const loom_tensor t[6] = {describe(dy, op), describe(x, op), describe_opt(mu, op),
                              describe(rs, op), describe_opt(w, op), describe(dx, op)};
    const loom_scalar s[2] = {scalar_i(N), scalar_i(rms)};
    launch(op, LOOM_KERNEL("norm.layer_backward_input"), t, s, M, grain_for(N), dev);
    return;
  }
  // About 16K elements a chunk, at most 512 rows (the chunk's sums are
  // float) unless that makes more than 256 chunks.
  const int64_t rows = std::max<int64_t>(
      {1, std::min<int64_t>((int64_t{1} << 14) / N, 512), (M + 255) / 256});
  const int64_t chunks = M > 0 ? (M + rows - 1) / rows : 0;
  const auto part_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor part = at::empty({chunks, 2, N}, x.options().dtype(part_type));
  if (chunks > 0) {
    const loom_tensor t[7] = {describe(dy, op), describe(x, op), describe_opt(mu, op),
                              describe(rs, op), describe_opt(w, op), describe_opt(dx, op),
                              describe(part, op)};
    const loom_scalar s[4] = {scalar_i(M), scalar_i(N), scalar_i(rms), scalar_i(rows)};
    launch(op, LOOM_KERNEL("norm.layer_backward_rows"), t, s, chunks, 1, dev);
  }
  const loom_tensor t[3] = {describe_opt(part, op), describe_opt(dw, op), describe_opt(db, op)};
  const loom_scalar s[2] = {scalar_i(chunks), scalar_i(N)};
  launch(op, LOOM_KERNEL("norm.layer_backward_combine"), t, s, N,
         grain_for(std::max<int64_t>(1, 2 * chunks)), dev);
}

// ---- layer norm -------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, double eps) {
  static const char* op = "native_layer_norm";
  const auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = value_or_undefined(weight_opt);
  const at::Tensor bias = value_or_undefined(bias_opt);
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape,
                                                     weight, bias);
  check_float(input, op);
  check_loom(weight, input, op, "weight");
  check_loom(bias, input, op, "bias");
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  at::Tensor y = at::empty(input.sizes(), input.options());
  const std::vector<int64_t> stat_shape = stats_shape(input, normalized_shape);
  const auto st = input.options().dtype(stats_type(input, weight));
  at::Tensor mean = at::empty(stat_shape, st), rstd = at::empty(stat_shape, st);
  if (M > 0 && N > 0) {
    const loom_tensor t[6] = {describe(x, op), describe_opt(w, op),
                              describe_opt(b, op), describe(y, op),
                              describe(mean, op), describe(rstd, op)};
    const loom_scalar s[3] = {scalar_i(N), scalar_f(eps), scalar_i(0)};
    launch(op, LOOM_KERNEL("norm.layer_forward"), t, s, M, grain_for(N),
           input.device().index());
  }
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    c10::SymIntArrayRef normalized_shape_sym, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> mask) {
  static const char* op = "native_layer_norm_backward";
  const auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = value_or_undefined(weight_opt);
  const at::Tensor bias = value_or_undefined(bias_opt);
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape,
                                                     weight, bias);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  const at::Tensor dy = grad_out.contiguous(), x = input.contiguous();
  const at::Tensor mu = mean.contiguous(), rs = rstd.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (mask[1] && weight.defined())
    dw = at::empty(weight.sizes(), weight.options());
  if (mask[2] && bias.defined()) db = at::empty(bias.sizes(), bias.options());
  norm_backward(op, dy, x, mu, rs, w, dx, dw, db, M, N, false, input.device().index());
  return {dx, dw, db};
}

// ---- RMS norm ---------------------------------------------------------------
// The layer-norm kernels with no mean. As PyTorch's composite form: the
// statistic rstd = 1/sqrt(mean(x^2) + eps) in the computation type (float
// for 16-bit inputs, else the input's), eps defaulting to that type's
// epsilon; the output in the input's dtype.

at::ScalarType rms_stats_type(const at::Tensor& input) {
  const auto t = input.scalar_type();
  return t == at::kBFloat16 || t == at::kHalf ? at::kFloat : t;
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& input,
                                            at::IntArrayRef normalized_shape,
                                            const std::optional<at::Tensor>& weight_opt,
                                            std::optional<double> eps_opt) {
  static const char* op = "_fused_rms_norm";
  const at::Tensor weight = value_or_undefined(weight_opt);
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, at::Tensor());
  check_float(input, op);
  check_loom(weight, input, op, "weight");
  const at::ScalarType st = rms_stats_type(input);
  const double eps = eps_opt.has_value()
                         ? *eps_opt
                         : (st == at::kDouble ? std::numeric_limits<double>::epsilon()
                                              : std::numeric_limits<float>::epsilon());
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  at::Tensor y = at::empty(input.sizes(), input.options());
  const std::vector<int64_t> stat_shape = stats_shape(input, normalized_shape);
  at::Tensor rstd = at::empty(stat_shape, input.options().dtype(st));
  if (M > 0 && N > 0) {
    const loom_tensor t[6] = {describe(x, op), describe_opt(w, op), loom_tensor{},
                              describe(y, op), loom_tensor{}, describe(rstd, op)};
    const loom_scalar s[3] = {scalar_i(N), scalar_f(eps), scalar_i(1)};
    launch(op, LOOM_KERNEL("norm.layer_forward"), t, s, M, grain_for(N), input.device().index());
  }
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    std::array<bool, 2> mask) {
  static const char* op = "_fused_rms_norm_backward";
  const at::Tensor weight = value_or_undefined(weight_opt);
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, at::Tensor());
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  check_loom(rstd, input, op, "rstd");
  TORCH_CHECK(rstd.numel() == M, op, ": rstd has ", rstd.numel(), " elements, expected ", M);
  const at::Tensor dy = grad_out.contiguous(), x = input.contiguous(), rs = rstd.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  at::Tensor dx, dw;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (mask[1] && weight.defined()) dw = at::empty(weight.sizes(), weight.options());
  norm_backward(op, dy, x, at::Tensor(), rs, w, dx, dw, at::Tensor(), M, N, true,
                input.device().index());
  return {dx, dw};
}

// ---- group norm -------------------------------------------------------------

void check_group_norm(const at::Tensor& input, const at::Tensor& weight,
                      const at::Tensor& bias, int64_t N, int64_t C,
                      int64_t HxW, int64_t group, const char* op) {
  check_float(input, op);
  TORCH_CHECK(group > 0, op, ": Expected num groups to be greater than 0, got ",
              group);
  TORCH_CHECK(C % group == 0, "Expected number of channels in input to be ",
              "divisible by num_groups, but got input of shape ",
              input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, op, ": input of size ",
              input.sizes(), " does not have N*C*HxW = ", N, "*", C, "*",
              HxW, " elements");
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == C),
              "Expected weight to be a vector of size equal to the number of ",
              "channels in input, but got weight of shape ", weight.sizes(),
              " and input of shape ", input.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.numel() == C),
              "Expected bias to be a vector of size equal to the number of ",
              "channels in input, but got bias of shape ", bias.sizes(),
              " and input of shape ", input.sizes());
  check_loom(weight, input, op, "weight");
  check_loom(bias, input, op, "bias");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, c10::SymInt N_sym,
    c10::SymInt C_sym, c10::SymInt HxW_sym, int64_t group, double eps) {
  static const char* op = "native_group_norm";
  const int64_t N = N_sym.guard_int(__FILE__, __LINE__);
  const int64_t C = C_sym.guard_int(__FILE__, __LINE__);
  const int64_t HxW = HxW_sym.guard_int(__FILE__, __LINE__);
  const at::Tensor weight = value_or_undefined(weight_opt);
  const at::Tensor bias = value_or_undefined(bias_opt);
  check_group_norm(input, weight, bias, N, C, HxW, group, op);
  const at::Tensor x = input.contiguous();
  at::Tensor y = at::empty(input.sizes(), input.options());
  const auto st = input.options().dtype(stats_type(input, weight));
  at::Tensor mean = at::empty({N, group}, st), rstd = at::empty({N, group}, st);
  if (N > 0 && C > 0 && HxW > 0) {
    const loom_tensor t[6] = {describe(x, op), describe_opt(weight, op),
                              describe_opt(bias, op), describe(y, op),
                              describe(mean, op), describe(rstd, op)};
    const loom_scalar s[5] = {scalar_i(N), scalar_i(C), scalar_i(HxW),
                              scalar_i(group), scalar_f(eps)};
    launch(op, LOOM_KERNEL("norm.group_forward"), t, s, N * group,
           grain_for(C / group * HxW), input.device().index());
  }
  // The kernel runs on NCHW; the result takes the input's memory format,
  // as the CPU's does.
  return {y.contiguous(input.suggest_memory_format()), mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    c10::SymInt N_sym, c10::SymInt C_sym, c10::SymInt HxW_sym, int64_t group,
    std::array<bool, 3> mask) {
  static const char* op = "native_group_norm_backward";
  const int64_t N = N_sym.guard_int(__FILE__, __LINE__);
  const int64_t C = C_sym.guard_int(__FILE__, __LINE__);
  const int64_t HxW = HxW_sym.guard_int(__FILE__, __LINE__);
  const at::Tensor weight = value_or_undefined(weight_opt);
  check_group_norm(input, weight, at::Tensor(), N, C, HxW, group, op);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  const at::Tensor dy = grad_out.contiguous(), x = input.contiguous();
  const at::Tensor mu = mean.contiguous(), rs = rstd.contiguous();
  const bool work = N > 0 && C > 0 && HxW > 0;
  const auto dev = input.device().index();
  const loom_scalar s[4] = {scalar_i(N), scalar_i(C), scalar_i(HxW),
                            scalar_i(group)};
  // One pass gives each sample's and channel's sums (for dw and db), a
  // second dx; the parameter gradients then sum over the samples.
  const bool params = mask[1] || mask[2];
  at::Tensor dx, dw, db, sums;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (params) sums = at::empty({2, N, C}, input.options().dtype(at::kDouble));
  if ((mask[0] || params) && work) {
    const loom_tensor t[8] = {describe(dy, op), describe(x, op),
                              describe(mu, op), describe(rs, op),
                              describe_opt(weight, op), describe_opt(dx, op),
                              describe_opt(params ? sums[0] : at::Tensor(), op),
                              describe_opt(params ? sums[1] : at::Tensor(), op)};
    launch(op, LOOM_KERNEL("norm.group_backward_input"), t, s, N * group,
           grain_for(C / group * HxW), dev);
  }
  // A parameter gradient is returned with the input's dtype and C elements,
  // whether or not the weight exists, as the CPU backend does.
  const auto popts = weight.defined() ? weight.options() : input.options();
  if (mask[1]) dw = at::zeros({C}, popts);
  if (mask[2]) db = at::zeros({C}, popts);
  if (params && work) {
    const loom_tensor t[4] = {describe(sums[0], op), describe(sums[1], op),
                              describe_opt(dw, op), describe_opt(db, op)};
    const loom_scalar sp[2] = {scalar_i(N), scalar_i(C)};
    launch(op, LOOM_KERNEL("norm.group_backward_params"), t, sp, C, grain_for(N), dev);
  }
  if (dx.defined()) dx = dx.contiguous(input.suggest_memory_format());
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "native_layer_norm", layer_norm);
  LOOM_IMPL(m, "native_layer_norm_backward", layer_norm_backward);
  LOOM_IMPL(m, "_fused_rms_norm", rms_norm);
  LOOM_IMPL(m, "_fused_rms_norm_backward", rms_norm_backward);
  LOOM_IMPL(m, "native_group_norm", group_norm);
  LOOM_IMPL(m, "native_group_norm_backward", group_norm_backward);
}

}  // namespace torch_loom::nn
