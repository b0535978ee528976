// The fused weight normalization on loom: _weight_norm_interface and its
// backward, which torch._weight_norm (nn.utils.weight_norm and the
// parametrization) calls for dim 0 and the last dim; other dims take the
// composite v * (g / norm_except_dim(v)) of ops loom already runs.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "loom/kernels/weight_norm.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// The norms stay in float for 16-bit g, as the CPU and CUDA backends keep them.
at::ScalarType norm_type(const at::Tensor& g) {
  const auto t = g.scalar_type();
  return t == at::kBFloat16 || t == at::kHalf ? at::kFloat : t;
}

// v seen as [M, N] with one norm per row (dim 0) or per column (last dim).
struct WnShape {
  bool rows;
  int64_t m, n;
};

WnShape check_weight_norm(const at::Tensor& v, const at::Tensor& g, int64_t dim,
                          const char* op) {
  check_float(v, op);
  check_loom(g, v, op, "g");
  TORCH_CHECK(v.dim() >= 1, op, ": expected v to have at least one dimension");
  TORCH_CHECK(dim == 0 || dim == v.dim() - 1, op,
              ": fused kernels can only be applied for first or last dim, got dim ",
              dim, " for v of ", v.dim(), " dimensions");
  TORCH_CHECK(g.scalar_type() == v.scalar_type(), op, ": expected g to have v's dtype ",
              v.scalar_type(), " but got ", g.scalar_type());
  TORCH_CHECK(g.numel() == v.size(dim), op, ": expected g to hold one element per index of ",
              "dim ", dim, " of v (", v.size(dim), ") but got ", g.numel(), " of shape ",
              g.sizes());
  if (dim == 0) {
    const int64_t m = v.size(0);
    return {true, m, m == 0 ? 0 : v.numel() / m};
  }
  const int64_t n = v.size(-1);
  return {false, n == 0 ? 0 : v.numel() / n, n};
}

// Rows per block of the column partial sums: a function of the shape only.
int64_t rows_per_block(int64_t n) {
  return std::max<int64_t>(1, LOOM_WEIGHT_NORM_BLOCK / std::max<int64_t>(1, n));
}

// partials[k][j] = sum over block k's rows of x[i][j] * y[i][j].
at::Tensor column_partials(const at::Tensor& x, const at::Tensor& y, const WnShape& s,
                           const char* op) {
  const int64_t rows = rows_per_block(s.n);
  const int64_t blocks = (s.m + rows - 1) / rows;
  at::Tensor part = at::empty({blocks, s.n}, x.options().dtype(at::kDouble));
  const loom_tensor t[3] = {describe(x, op), describe(y, op), describe(part, op)};
  const loom_scalar sc[3] = {scalar_i(s.m), scalar_i(s.n), scalar_i(rows)};
  launch(op, LOOM_KERNEL("weight_norm.cols_partials"), t, sc, blocks, 1, x.device().index());
  return part;
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface(const at::Tensor& v_in,
                                                         const at::Tensor& g_in,
                                                         int64_t dim) {
  static const char* op = "_weight_norm_interface";
  const WnShape s = check_weight_norm(v_in, g_in, dim, op);
  const at::Tensor v = v_in.contiguous(), g = g_in.contiguous();
  at::Tensor w = at::empty(v.sizes(), v.options());
  at::Tensor norm = at::empty(g.sizes(), g.options().dtype(norm_type(g)));
  if (v.numel() == 0) return {w, norm.zero_()};
  const auto dev = v.device().index();
  if (s.rows) {
    const loom_tensor t[4] = {describe(v, op), describe(g, op), describe(w, op),
                              describe(norm, op)};
    const loom_scalar sc[1] = {scalar_i(s.n)};
    launch(op, LOOM_KERNEL("weight_norm.rows_forward"), t, sc, s.m, grain_for(s.n), dev);
    return {w, norm};
  }
  const at::Tensor part = column_partials(v, v, s, op);
  at::Tensor coef = at::empty({1, s.n}, v.options().dtype(at::kDouble));
  const loom_tensor tf[4] = {describe(part, op), describe(g, op), describe(norm, op),
                             describe(coef, op)};
  launch(op, LOOM_KERNEL("weight_norm.cols_forward"), tf, {}, s.n, grain_for(part.size(0)),
         dev);
  const loom_tensor ta[4] = {describe(v, op), loom_tensor{}, describe(coef, op),
                             describe(w, op)};
  const loom_scalar sc[1] = {scalar_i(s.n)};
  launch(op, LOOM_KERNEL("weight_norm.cols_apply"), ta, sc, s.m, grain_for(s.n), dev);
  return {w, norm};
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface_backward(
    const at::Tensor& grad_w_in, const at::Tensor& saved_v_in, const at::Tensor& saved_g_in,
    const at::Tensor& saved_norms_in, int64_t dim) {
  static const char* op = "_weight_norm_interface_backward";
  const WnShape s = check_weight_norm(saved_v_in, saved_g_in, dim, op);
  check_loom(grad_w_in, saved_v_in, op, "grad_w");
  check_loom(saved_norms_in, saved_v_in, op, "saved_norms");
  TORCH_CHECK(grad_w_in.sizes() == saved_v_in.sizes(), op, ": expected grad_w of v's shape ",
              saved_v_in.sizes(), " but got ", grad_w_in.sizes());
  TORCH_CHECK(grad_w_in.scalar_type() == saved_v_in.scalar_type(), op,
              ": expected grad_w to have v's dtype ", saved_v_in.scalar_type(), " but got ",
              grad_w_in.scalar_type());
  TORCH_CHECK(saved_norms_in.numel() == saved_g_in.numel() &&
                  at::isFloatingType(saved_norms_in.scalar_type()),
              op, ": expected saved_norms to be a float tensor of ", saved_g_in.numel(),
              " elements but got ", saved_norms_in.scalar_type(), " of shape ",
              saved_norms_in.sizes());
  const at::Tensor gw = grad_w_in.contiguous(), v = saved_v_in.contiguous();
  const at::Tensor g = saved_g_in.contiguous(), norm = saved_norms_in.contiguous();
  at::Tensor grad_v = at::empty(v.sizes(), v.options());
  at::Tensor grad_g = at::empty(g.sizes(), g.options());
  if (v.numel() == 0) return {grad_v, grad_g.zero_()};
  const auto dev = v.device().index();
  const loom_scalar sc[1] = {scalar_i(s.n)};
  if (s.rows) {
    const loom_tensor t[6] = {describe(gw, op), describe(v, op), describe(g, op),
                              describe(norm, op), describe(grad_v, op), describe(grad_g, op)};
    launch(op, LOOM_KERNEL("weight_norm.rows_backward"), t, sc, s.m, grain_for(s.n), dev);
    return {grad_v, grad_g};
  }
  const at::Tensor part = column_partials(gw, v, s, op);
  at::Tensor coef = at::empty({2, s.n}, v.options().dtype(at::kDouble));
  const loom_tensor tf[5] = {describe(part, op), describe(g, op), describe(norm, op),
                             describe(grad_g, op), describe(coef, op)};
  launch(op, LOOM_KERNEL("weight_norm.cols_backward"), tf, {}, s.n, grain_for(part.size(0)),
         dev);
  const loom_tensor ta[4] = {describe(gw, op), describe(v, op), describe(coef, op),
                             describe(grad_v, op)};
  launch(op, LOOM_KERNEL("weight_norm.cols_apply"), ta, sc, s.m, grain_for(s.n), dev);
  return {grad_v, grad_g};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_weight_norm_interface", weight_norm_interface);
  LOOM_IMPL(m, "_weight_norm_interface_backward", weight_norm_interface_backward);
}

}  // namespace torch_loom::nn
