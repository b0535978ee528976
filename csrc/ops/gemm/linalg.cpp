// Matrix products on loom: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot,
// vdot, addr (and their out/in-place forms), and linalg.cross. matmul, linear and einsum are
// composite in ATen and arrive here as these. Every product is one GEMM
// launch pair over strided views, so transposed operands (autograd's
// backward) cost no copy. float64 and the integer dtypes (bool for addr)
// run unplanned kernels of their own (gemm.f64, gemm.int); complex64 and
// complex128 are four real products of their parts (complex_gemm.h);
// complex32 runs on the CPU, counted, and comes back.
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"
#include "ops/gemm/complex_gemm.h"
#include "ops/gemm/linalg_gemm.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom {
namespace {

using at::Tensor;

void check_same_dtype(const Tensor& a, const Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), what, a.scalar_type(),
              " != ", b.scalar_type());
}

// Bool products are the CPU's for addr only (the others refuse it there).
bool native(const Tensor& t, const c10::Scalar& alpha = 1,
            const c10::Scalar& beta = 0, bool allow_bool = false) {
  const at::ScalarType st = t.scalar_type();
  return (gemm_native_dtype(st) || st == at::kDouble ||
          (gemm_int_dtype(st) && (st != at::kBool || allow_bool))) &&
         !alpha.isComplex() && !beta.isComplex();
}

// A 1-d tensor as a column (k x 1) of a rank-4 GEMM operand.
loom_tensor column(const Tensor& v, const char* op) {
  return gemm_transpose(gemm_view(v, op));
}

// C = beta * self + alpha * A @ B into `out` (already sized), with self
// broadcast to out's shape by expand (so a bad self raises as on CPU).
// Matrix products (`matrix`) follow float32_matmul_precision; matrix-vector
// and outer products stay in float32, as on the CPU and CUDA.
void product_into(const char* op, Tensor& out, loom_tensor a, loom_tensor b,
                  const Tensor& self, const c10::Scalar& beta,
                  const c10::Scalar& alpha, bool out_is_matrix_of_vectors, bool matrix) {
  loom_tensor c = gemm_view(out, op);
  if (out_is_matrix_of_vectors) c = gemm_transpose(c);
  const at::ScalarType st = out.scalar_type();
  if (gemm_int_dtype(st)) {  // alpha and beta in the dtype, as the CPU takes them
    const int64_t alpha_i = gemm_int_scalar(alpha, st);
    const int64_t beta_i = self.defined() ? gemm_int_scalar(beta, st) : 0;
    if (beta_i == 0) {
      gemm_run_int(op, out, c, a, b, nullptr, alpha_i, 0);
      return;
    }
    Tensor expanded = self.expand(out.sizes());
    loom_tensor cin = gemm_view(expanded, op);
    if (out_is_matrix_of_vectors) cin = gemm_transpose(cin);
    gemm_run_int(op, out, c, a, b, &cin, alpha_i, beta_i);
    return;
  }
  double beta_d = beta.toDouble(), alpha_d = alpha.toDouble();
  const GemmMath math = matrix ? matmul_math(out.scalar_type()) : GemmMath::exact;
  if (!self.defined() || beta_d == 0.0) {
    gemm_run(op, out, c, a, b, nullptr, alpha_d, 0.0, math);
    return;
  }
  Tensor expanded = self.expand(out.sizes());
  loom_tensor cin = gemm_view(expanded, op);
  if (out_is_matrix_of_vectors) cin = gemm_transpose(cin);
  gemm_run(op, out, c, a, b, &cin, alpha_d, beta_d, math);
}

// ---- mm / addmm --------------------------------------------------------------

void check_mm(const Tensor& self, const Tensor& mat2) {
  TORCH_CHECK(self.dim() == 2, "self must be a matrix");
  TORCH_CHECK(mat2.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(self.size(1) == mat2.size(0),
              "mat1 and mat2 shapes cannot be multiplied (", self.size(0), "x",
              self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype(self, mat2, "expected m1 and m2 to have the same dtype, but got: ");
}

Tensor& addmm_out(const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                  const c10::Scalar& beta, const c10::Scalar& alpha,
                  Tensor& out) {
  check_mm(mat1, mat2);
  if (self.defined())
    check_same_dtype(self, mat2, "self and mat2 must have the same dtype, but got ");
  check_out_dtype(out, mat1, "addmm");
  c10::DeviceGuard guard(mat1.device());
  at::native::resize_output(out, {mat1.size(0), mat2.size(1)});
  if (!native(mat1, alpha, beta) && complex_gemm_dtype(mat1)) {
    const Tensor p = complex_product([](const Tensor& x, const Tensor& y) { return at::mm(x, y); },
                                     mat1, mat2);
    out.copy_(complex_combine(p, self, beta, alpha));
    return out;
  }
  if (!native(mat1, alpha, beta)) {
    note_cpu_fallback(self.defined() ? "aten::addmm" : "aten::mm");
    Tensor r = self.defined()
                   ? at::addmm(self.cpu(), mat1.cpu(), mat2.cpu(), beta, alpha)
                   : at::mm(mat1.cpu(), mat2.cpu());
    out.copy_(r);
    return out;
  }
  product_into("addmm", out, gemm_view(mat1, "addmm"), gemm_view(mat2, "addmm"),
               self, beta, alpha, false, true);
  return out;
}

Tensor& mm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  return addmm_out(Tensor(), self, mat2, 0, 1, out);
}

Tensor mm(const Tensor& self, const Tensor& mat2) {
  check_mm(self, mat2);
  Tensor out = at::empty({0}, self.options());
  return mm_out(self, mat2, out);
}

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2,
             const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_mm(mat1, mat2);
  Tensor out = at::empty({0}, mat1.options());
  return addmm_out(self, mat1, mat2, beta, alpha, out);
}

Tensor& addmm_(Tensor& self, const Tensor& mat1, const Tensor& mat2,
               const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_mm(mat1, mat2);
  TORCH_CHECK(self.dim() == 2 && self.size(0) == mat1.size(0) &&
                  self.size(1) == mat2.size(1),
              "The input tensor must be a matrix of size ", mat1.size(0), "x",
              mat2.size(1), ", but got a ", self.dim(), "-D tensor of size ",
              self.sizes());
  return addmm_out(self, mat1, mat2, beta, alpha, self);
}

// ---- bmm / baddbmm -------------------------------------------------------------

void check_bmm(const Tensor& b1, const Tensor& b2) {
  TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(b2.size(0) == b1.size(0) && b2.size(1) == b1.size(2),
              "Expected size for first two dimensions of batch2 tensor to be: [",
              b1.size(0), ", ", b1.size(2), "] but got: [", b2.size(0), ", ",
              b2.size(1), "].");
  check_same_dtype(b1, b2, "expected batch1 and batch2 to have the same dtype, but got: ");
}

Tensor& baddbmm_out(const Tensor& self, const Tensor& batch1,
                    const Tensor& batch2, const c10::Scalar& beta,
                    const c10::Scalar& alpha, Tensor& out) {
  check_bmm(batch1, batch2);
  if (self.defined())
    check_same_dtype(self, batch1, "Input dtypes must be the same, got: input ");
  check_out_dtype(out, batch1, "baddbmm");
  c10::DeviceGuard guard(batch1.device());
  at::native::resize_output(out, {batch1.size(0), batch1.size(1), batch2.size(2)});
  if (!native(batch1, alpha, beta) && complex_gemm_dtype(batch1)) {
    const Tensor p = complex_product([](const Tensor& x, const Tensor& y) { return at::bmm(x, y); },
                                     batch1, batch2);
    out.copy_(complex_combine(p, self, beta, alpha));
    return out;
  }
  if (!native(batch1, alpha, beta)) {
    note_cpu_fallback(self.defined() ? "aten::baddbmm" : "aten::bmm");
    Tensor r = self.defined() ? at::baddbmm(self.cpu(), batch1.cpu(),
                                            batch2.cpu(), beta, alpha)
                              : at::bmm(batch1.cpu(), batch2.cpu());
    out.copy_(r);
    return out;
  }
  product_into("baddbmm", out, gemm_view(batch1, "baddbmm"),
               gemm_view(batch2, "baddbmm"), self, beta, alpha, false, true);
  return out;
}

Tensor& bmm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  return baddbmm_out(Tensor(), self, mat2, 0, 1, out);
}

Tensor bmm(const Tensor& self, const Tensor& mat2) {
  check_bmm(self, mat2);
  Tensor out = at::empty({0}, self.options());
  return bmm_out(self, mat2, out);
}

// addbmm: beta * self + alpha * sum_b batch1[b] @ batch2[b], one GEMM over
// k = (b, m): batch1 laid out as (n, b*m) against batch2 as (b*m, p).
Tensor& addbmm_out(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                   const c10::Scalar& beta, const c10::Scalar& alpha, Tensor& out) {
  check_bmm(batch1, batch2);
  const int64_t b = batch1.size(0), n = batch1.size(1), m = batch1.size(2);
  Tensor a = batch1.permute({1, 0, 2}).reshape({n, b * m});
  return addmm_out(self, a, batch2.reshape({b * m, batch2.size(2)}), beta, alpha, out);
}

Tensor addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
              const c10::Scalar& beta, const c10::Scalar& alpha) {
  Tensor out = at::empty({0}, batch1.options());
  return addbmm_out(self, batch1, batch2, beta, alpha, out);
}

Tensor& addbmm_(Tensor& self, const Tensor& batch1, const Tensor& batch2,
                const c10::Scalar& beta, const c10::Scalar& alpha) {
  return addbmm_out(self, batch1, batch2, beta, alpha, self);
}

// linalg.cross: the three components along dim from products of the
// (broadcast) inputs; the meta call checks the arguments.
Tensor& linalg_cross_out(const Tensor& self, const Tensor& other, int64_t dim, Tensor& out) {
  Tensor m = at::linalg_cross(at::empty(self.sizes(), self.options().device(c10::kMeta)),
                              at::empty(other.sizes(), other.options().device(c10::kMeta)), dim);
  check_out_dtype(out, m, "linalg.cross");
  dim = at::maybe_wrap_dim(dim, m.dim());
  at::native::resize_output(out, m.sizes());
  if (out.numel() == 0) return out;
  Tensor a = self.expand(m.sizes()), b = other.expand(m.sizes());
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t i = (k + 1) % 3, j = (k + 2) % 3;
    out.select(dim, k).copy_(a.select(dim, i) * b.select(dim, j) -
                             a.select(dim, j) * b.select(dim, i));
  }
  return out;
}

Tensor linalg_cross(const Tensor& self, const Tensor& other, int64_t dim) {
  Tensor out = at::empty({0}, self.options());
  return linalg_cross_out(self, other, dim, out);
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
               const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_bmm(batch1, batch2);
  Tensor out = at::empty({0}, batch1.options());
  return baddbmm_out(self, batch1, batch2, beta, alpha, out);
}

Tensor& baddbmm_(Tensor& self, const Tensor& batch1, const Tensor& batch2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_bmm(batch1, batch2);
  TORCH_CHECK(self.dim() == 3 && self.size(0) == batch1.size(0) &&
                  self.size(1) == batch1.size(1) && self.size(2) == batch2.size(2),
              "Expected self to be of size [", batch1.size(0), ", ",
              batch1.size(1), ", ", batch2.size(2), "] but got ", self.sizes());
  return baddbmm_out(self, batch1, batch2, beta, alpha, self);
}

// ---- mv / addmv ------------------------------------------------------------------

void check_mv(const Tensor& self, const Tensor& mat, const Tensor& vec) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1 && (!self.defined() || self.dim() <= 1),
              "vector + matrix @ vector expected, got ",
              self.defined() ? self.dim() : 1, ", ", mat.dim(), ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0) &&
                  (!self.defined() || self.numel() == 1 || self.size(0) == mat.size(0)),
              "size mismatch, got input (", self.defined() ? self.size(0) : mat.size(0),
              "), mat (", mat.size(0), "x", mat.size(1), "), vec (", vec.size(0), ")");
  check_same_dtype(mat, vec, "expected mat and vec to have the same dtype, but got: ");
}

Tensor& addmv_out(const Tensor& self, const Tensor& mat, const Tensor& vec,
                  const c10::Scalar& beta, const c10::Scalar& alpha,
                  Tensor& out) {
  check_mv(self, mat, vec);
  if (self.defined())
    check_same_dtype(self, mat, "expected self and mat to have the same dtype, but got: ");
  check_out_dtype(out, mat, "addmv");
  c10::DeviceGuard guard(mat.device());
  at::native::resize_output(out, {mat.size(0)});
  if (!native(mat, alpha, beta) && complex_gemm_dtype(mat)) {
    const Tensor p = complex_product([](const Tensor& x, const Tensor& y) { return at::mv(x, y); },
                                     mat, vec);
    out.copy_(complex_combine(p, self, beta, alpha));
    return out;
  }
  if (!native(mat, alpha, beta)) {
    note_cpu_fallback(self.defined() ? "aten::addmv" : "aten::mv");
    Tensor r = self.defined()
                   ? at::addmv(self.cpu(), mat.cpu(), vec.cpu(), beta, alpha)
                   : at::mv(mat.cpu(), vec.cpu());
    out.copy_(r);
    return out;
  }
  product_into("addmv", out, gemm_view(mat, "addmv"), column(vec, "addmv"),
               self, beta, alpha, true, false);
  return out;
}

Tensor& mv_out(const Tensor& self, const Tensor& vec, Tensor& out) {
  return addmv_out(Tensor(), self, vec, 0, 1, out);
}

Tensor mv(const Tensor& self, const Tensor& vec) {
  check_mv(Tensor(), self, vec);
  Tensor out = at::empty({0}, self.options());
  return mv_out(self, vec, out);
}

Tensor addmv(const Tensor& self, const Tensor& mat, const Tensor& vec,
             const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_mv(self, mat, vec);
  Tensor out = at::empty({0}, mat.options());
  return addmv_out(self, mat, vec, beta, alpha, out);
}

Tensor& addmv_(Tensor& self, const Tensor& mat, const Tensor& vec,
               const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_mv(self, mat, vec);
  TORCH_CHECK(self.dim() == 1 && self.size(0) == mat.size(0),
              "size mismatch, got input (", self.sizes(), "), mat (",
              mat.size(0), "x", mat.size(1), "), vec (", vec.size(0), ")");
  return addmv_out(self, mat, vec, beta, alpha, self);
}

// ---- dot / vdot ------------------------------------------------------------------

void check_dot(const Tensor& a, const Tensor& b, const char* op) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ",
              a.dim(), "D and ", b.dim(), "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op,
              " : expected both vectors to have same dtype, but found ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel(),
              "inconsistent tensor size, expected tensor [", a.numel(),
              "] and src [", b.numel(),
              "] to have the same number of elements, but got ", a.numel(),
              " and ", b.numel(), " elements respectively");
}

Tensor dot_loom(const Tensor& self, const Tensor& other) {
  check_dot(self, other, "dot");
  c10::DeviceGuard guard(self.device());
  if (complex_gemm_dtype(self))
    return complex_product([](const Tensor& x, const Tensor& y) { return at::dot(x, y); }, self,
                           other);
  if (!native(self)) {
    note_cpu_fallback("aten::dot");
    return at::dot(self.cpu(), other.cpu()).to(self.device());
  }
  Tensor out = at::empty({}, self.options());
  if (gemm_int_dtype(self.scalar_type()))
    gemm_run_int("dot", out, gemm_view(out, "dot"), gemm_view(self, "dot"),
                 column(other, "dot"), nullptr, 1, 0);
  else
    gemm_run("dot", out, gemm_view(out, "dot"), gemm_view(self, "dot"),
             column(other, "dot"), nullptr, 1.0, 0.0);
  return out;
}

Tensor vdot(const Tensor& self, const Tensor& other) {
  check_dot(self, other, "vdot");
  if (complex_gemm_dtype(self)) {
    c10::DeviceGuard guard(self.device());
    return complex_product([](const Tensor& x, const Tensor& y) { return at::dot(x, y); },
                           self.conj(), other);
  }
  if (self.is_complex()) {
    note_cpu_fallback("aten::vdot");
    c10::DeviceGuard guard(self.device());
    return at::vdot(self.cpu(), other.cpu()).to(self.device());
  }
  return dot_loom(self, other);
}

// ---- addr --------------------------------------------------------------------------

void check_addr(const Tensor& vec1, const Tensor& vec2) {
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ",
              vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ",
              vec2.dim(), "-D");
}

// The CPU's addr refuses floating alpha/beta for integer and bool results,
// and boolean ones for any other.
void check_addr_scalars(at::ScalarType t, const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (at::isIntegralType(t, /*includeBool=*/true)) {
    TORCH_CHECK(!beta.isFloatingPoint(),
                "For integral input tensors, argument beta must not be a floating point number.");
    TORCH_CHECK(!alpha.isFloatingPoint(),
                "For integral input tensors, argument alpha must not be a floating point number.");
  }
  if (t != at::kBool) {
    TORCH_CHECK(!beta.isBoolean(), "Boolean beta only supported for Boolean results.");
    TORCH_CHECK(!alpha.isBoolean(), "Boolean alpha only supported for Boolean results.");
  }
}

Tensor& addr_out(const Tensor& self, const Tensor& vec1, const Tensor& vec2,
                 const c10::Scalar& beta, const c10::Scalar& alpha,
                 Tensor& out) {
  check_addr(vec1, vec2);
  c10::DeviceGuard guard(vec1.device());
  bool same = self.scalar_type() == vec1.scalar_type() &&
              vec1.scalar_type() == vec2.scalar_type();
  if (same) check_addr_scalars(vec1.scalar_type(), beta, alpha);
  if (same && complex_gemm_dtype(vec1)) {
    check_out_dtype(out, vec1, "addr");
    const Tensor p = complex_product(
        [](const Tensor& x, const Tensor& y) { return at::outer(x, y); }, vec1, vec2);
    const Tensor r = complex_combine(p, self, beta, alpha);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
  }
  if (!same || !native(vec1, alpha, beta, /*allow_bool=*/true)) {
    note_cpu_fallback("aten::addr");
    Tensor r = at::addr(self.cpu(), vec1.cpu(), vec2.cpu(), beta, alpha);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
  }
  check_out_dtype(out, vec1, "addr");
  at::native::resize_output(out, {vec1.size(0), vec2.size(0)});
  product_into("addr", out, column(vec1, "addr"), gemm_view(vec2, "addr"),
               self, beta, alpha, false, false);
  return out;
}

Tensor addr(const Tensor& self, const Tensor& vec1, const Tensor& vec2,
            const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_addr(vec1, vec2);
  if (self.scalar_type() != vec1.scalar_type() ||
      vec1.scalar_type() != vec2.scalar_type()) {
    c10::DeviceGuard guard(vec1.device());
    note_cpu_fallback("aten::addr");
    return at::addr(self.cpu(), vec1.cpu(), vec2.cpu(), beta, alpha)
        .to(vec1.device());
  }
  Tensor out = at::empty({0}, vec1.options());
  return addr_out(self, vec1, vec2, beta, alpha, out);
}

Tensor& addr_(Tensor& self, const Tensor& vec1, const Tensor& vec2,
              const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_addr(vec1, vec2);
  TORCH_CHECK(self.dim() == 2 && self.size(0) == vec1.size(0) &&
                  self.size(1) == vec2.size(0),
              "The expanded size of the tensor must match: self ", self.sizes(),
              " for vec1 (", vec1.size(0), ") and vec2 (", vec2.size(0), ")");
  return addr_out(self, vec1, vec2, beta, alpha, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "mm", mm);
  LOOM_IMPL(m, "mm.out", mm_out);
  LOOM_IMPL(m, "addmm", addmm);
  LOOM_IMPL(m, "addmm.out", addmm_out);
  LOOM_IMPL(m, "addmm_", addmm_);
  LOOM_IMPL(m, "bmm", bmm);
  LOOM_IMPL(m, "bmm.out", bmm_out);
  LOOM_IMPL(m, "baddbmm", baddbmm);
  LOOM_IMPL(m, "baddbmm.out", baddbmm_out);
  LOOM_IMPL(m, "baddbmm_", baddbmm_);
  LOOM_IMPL(m, "addbmm", addbmm);
  LOOM_IMPL(m, "addbmm.out", addbmm_out);
  LOOM_IMPL(m, "addbmm_", addbmm_);
  LOOM_IMPL(m, "linalg_cross", linalg_cross);
  LOOM_IMPL(m, "linalg_cross.out", linalg_cross_out);
  LOOM_IMPL(m, "mv", mv);
  LOOM_IMPL(m, "mv.out", mv_out);
  LOOM_IMPL(m, "addmv", addmv);
  LOOM_IMPL(m, "addmv.out", addmv_out);
  LOOM_IMPL(m, "addmv_", addmv_);
  LOOM_IMPL(m, "dot", dot_loom);
  LOOM_IMPL(m, "vdot", vdot);
  LOOM_IMPL(m, "addr", addr);
  LOOM_IMPL(m, "addr.out", addr_out);
  LOOM_IMPL(m, "addr_", addr_);
}

}  // namespace torch_loom
