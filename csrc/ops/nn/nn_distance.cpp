// Pairwise distances on loom: _cdist_forward (the matrix-product form for
// p = 2 goes through _euclidean_dist, as on the CPU; otherwise the direct
// "distance.pairs" kernel), _pdist_forward, and their backward passes
// ("distance.backward").
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <cmath>

#include "loom/kernels/distance.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

void check_dist_dtype(const at::Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
                              "\"", op, "\" not implemented for '", t.scalar_type(), "'");
}

at::Tensor cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p,
                         std::optional<int64_t> compute_mode) {
  static const char* op = "_cdist_forward";
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ",
              x1.size(-1), " X2: ", x2.size(-1));
  TORCH_CHECK(at::isFloatingType(x1.scalar_type()),
              "cdist only supports floating-point dtypes, X1 got: ", x1.scalar_type());
  TORCH_CHECK(at::isFloatingType(x2.scalar_type()),
              "cdist only supports floating-point dtypes, X2 got: ", x2.scalar_type());
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  check_loom(x2, x1, op, "x2");
  const int64_t mode = compute_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 2, "possible modes: 0, 1, 2, but was: ", mode);
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), op, ": X1 and X2 must have the same dtype");
  const int64_t r1 = x1.size(-2), r2 = x2.size(-2), c1 = x1.size(-1);
  const auto batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2),
                                    x2.sizes().slice(0, x2.dim() - 2));
  const int64_t nb = c10::multiply_integers(batch);
  std::vector<int64_t> e1(batch), e2(batch), shape(batch);
  e1.insert(e1.end(), {r1, c1});
  e2.insert(e2.end(), {r2, c1});
  shape.insert(shape.end(), {r1, r2});
  if (r1 == 0 || r2 == 0 || nb == 0) return at::empty(shape, x1.options());
  if (c1 == 0) return at::zeros(shape, x1.options());
  if (p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))) {
    const at::Tensor dist = nb == 1 ? at::_euclidean_dist(x1, x2)
                                    : at::_euclidean_dist(x1.expand(e1), x2.expand(e2));
    return dist.view(shape);
  }
  check_dist_dtype(x1, op);
  const at::Tensor a = x1.expand(e1).reshape({nb, r1, c1}).contiguous();
  const at::Tensor b = x2.expand(e2).reshape({nb, r2, c1}).contiguous();
  at::Tensor out = at::empty(shape, x1.options());
  const loom_tensor t[3] = {describe(out.view({nb, r1, r2}), op), describe(a, op),
                            describe(b, op)};
  const loom_scalar s[2] = {scalar_i(LOOM_DIST_CDIST), scalar_f(p)};
  launch(op, LOOM_KERNEL("distance.pairs"), t, s, nb * r1, grain_for(r2 * c1),
         x1.device().index());
  return out;
}

at::Tensor pdist_forward(const at::Tensor& self, double p) {
  static const char* op = "_pdist_forward";
  TORCH_CHECK(self.is_contiguous(), "_pdist_forward requires contiguous input");
  TORCH_CHECK(self.dim() == 2, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "pdist only supports floating-point dtypes");
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  const int64_t n = self.size(0), m = self.size(1);
  at::Tensor out = at::empty({n > 1 ? n * (n - 1) / 2 : 0}, self.options());
  if (n <= 1) return out;
  if (m == 0) return out.fill_(0);
  check_dist_dtype(self, op);
  const loom_tensor t[2] = {describe(out, op), describe(self, op)};
  const loom_scalar s[2] = {scalar_i(LOOM_DIST_PDIST), scalar_f(p)};
  launch(op, LOOM_KERNEL("distance.pairs"), t, s, n, grain_for(n * m), self.device().index());
  return out;
}

at::Tensor cdist_backward(const at::Tensor& grad, const at::Tensor& x1_, const at::Tensor& x2_,
                          double p, const at::Tensor& dist) {
  static const char* op = "_cdist_backward";
  const int64_t c1 = x1_.size(-1), r1 = x1_.size(-2), r2 = x2_.size(-2);
  const auto batch = at::infer_size(x1_.sizes().slice(0, x1_.dim() - 2),
                                    x2_.sizes().slice(0, x2_.dim() - 2));
  const int64_t nb = c10::multiply_integers(batch);
  std::vector<int64_t> e1(batch), e2(batch);
  e1.insert(e1.end(), {r1, c1});
  e2.insert(e2.end(), {r2, c1});
  if (r1 == 0 || r2 == 0 || c1 == 0 || nb == 0) return at::zeros_like(x1_);
  check_dist_dtype(x1_, op);
  check_loom(x2_, x1_, op, "x2");
  check_loom(grad, x1_, op, "grad");
  check_loom(dist, x1_, op, "cdist");
  TORCH_CHECK(x2_.scalar_type() == x1_.scalar_type() && grad.scalar_type() == x1_.scalar_type() &&
                  dist.scalar_type() == x1_.scalar_type(),
              op, ": expected every tensor of dtype ", x1_.scalar_type());
  const at::Tensor x1 = x1_.expand(e1).contiguous(), x2 = x2_.expand(e2).contiguous();
  const at::Tensor g = grad.contiguous(), d = dist.contiguous();
  TORCH_CHECK(g.numel() == nb * r1 * r2 && d.numel() == nb * r1 * r2, op,
              ": grad and cdist must have ", nb * r1 * r2, " elements");
  at::Tensor out = at::empty({nb, r1, c1}, x1.options());
  const loom_tensor t[5] = {describe(out, op), describe(g.view({nb, r1, r2}), op),
                            describe(x1.view({nb, r1, c1}), op),
                            describe(x2.view({nb, r2, c1}), op),
                            describe(d.view({nb, r1, r2}), op)};
  const loom_scalar s[2] = {scalar_i(LOOM_DIST_CDIST), scalar_f(p)};
  launch(op, LOOM_KERNEL("distance.backward"), t, s, nb * r1, grain_for(r2 * c1),
         x1.device().index());
  return out.view(x1.sizes());
}

at::Tensor pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p,
                          const at::Tensor& pdist) {
  static const char* op = "_pdist_backward";
  TORCH_CHECK(self.is_contiguous(), "_pdist_backward requires self to be contiguous");
  TORCH_CHECK(pdist.is_contiguous(), "_pdist_backward requires pdist to be contiguous");
  check_loom(grad, self, op, "grad");
  check_loom(pdist, self, op, "pdist");
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  const int64_t n = self.size(0), m = self.size(1);
  if (n <= 1 || m == 0) return out.zero_();
  check_dist_dtype(self, op);
  TORCH_CHECK(grad.scalar_type() == self.scalar_type() &&
                  pdist.scalar_type() == self.scalar_type(),
              op, ": expected every tensor of dtype ", self.scalar_type());
  const at::Tensor g = grad.contiguous();
  TORCH_CHECK(g.numel() == n * (n - 1) / 2 && pdist.numel() == g.numel(), op,
              ": grad and pdist must have ", n * (n - 1) / 2, " elements");
  const loom_tensor t[4] = {describe(out, op), describe(g, op), describe(self, op),
                            describe(pdist, op)};
  const loom_scalar s[2] = {scalar_i(LOOM_DIST_PDIST), scalar_f(p)};
  launch(op, LOOM_KERNEL("distance.backward"), t, s, m, grain_for(n * n), self.device().index());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_cdist_forward", cdist_forward);
  LOOM_IMPL(m, "_pdist_forward", pdist_forward);
  LOOM_IMPL(m, "_cdist_backward", cdist_backward);
  LOOM_IMPL(m, "_pdist_backward", pdist_backward);
}

}  // namespace torch_loom::nn
