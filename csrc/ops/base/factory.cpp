// Factories and index-formula ops on loom: arange, linspace, logspace, eye,
// tril/triu, and the cumulative ops (cumsum, cumprod, cummax, cummin,
// logcumsumexp).
// full, zeros, ones, stack and repeat are composites over fill_/copy_/cat.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "common.h"
#include "loom/kernels/factory.h"
#include "loom/kernels/scan.h"
#include "ops/reduce/reduce_complex.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::factory {
namespace {

// The CPU has no bool ranges or bool scans: neither has loom, with the
// CPU's exception, naming loom's kernel (`kernel`_loom).
void refuse_bool(const char* kernel, const at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool, "\"", kernel,
                              "_loom\" not implemented for 'Bool'");
}

void launch_factory(const char* name, const at::Tensor& out, const loom_scalar (&s)[4],
                    const at::Tensor& in = at::Tensor()) {
  if (out.numel() == 0) return;
  loom_tensor t[2] = {describe(out, name), in.defined() ? describe(in, name) : loom_tensor{}};
  launch(name, LOOM_KERNEL("factory.generate"), c10::ArrayRef<loom_tensor>(t, in.defined() ? 2 : 1), s,
         out.numel(), LOOM_FACTORY_GRAIN, out.device().index());
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  // The kernel writes real values: complex ranges run on the CPU, counted.
  if (out.is_complex())
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(arange, start_out)>::call(
        start, end, step, out);
  refuse_bool("arange", out);
  const bool integral = at::isIntegralType(out.scalar_type(), true);
  const int64_t size = integral ? at::native::compute_arange_size<int64_t>(start, end, step)
                                : at::native::compute_arange_size<double>(start, end, step);
  if (out.numel() != size) out.resize_({size});
  loom_scalar s[4] = {scalar_i(LOOM_FACTORY_ARANGE)};
  if (integral) { s[1] = scalar_i(start.toLong()); s[2] = scalar_i(step.toLong()); }
  else { s[1] = scalar_f(start.toDouble()); s[2] = scalar_f(step.toDouble()); }
  launch_factory("arange", out, s);
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         at::Tensor& out) {
  if (out.is_complex())
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(linspace, out)>::call(
        start, end, steps, out);
  refuse_bool("linspace", out);
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  const loom_scalar s[4] = {scalar_i(LOOM_FACTORY_LINSPACE), scalar_f(start.toDouble()),
                            scalar_f(end.toDouble()), scalar_f(0)};
  launch_factory("linspace", out, s);
  return out;
}

at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         double base, at::Tensor& out) {
  if (out.is_complex())
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(logspace, out)>::call(
        start, end, steps, base, out);
  refuse_bool("logspace", out);
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  const loom_scalar s[4] = {scalar_i(LOOM_FACTORY_LOGSPACE), scalar_f(start.toDouble()),
                            scalar_f(end.toDouble()), scalar_f(base)};
  launch_factory("logspace", out, s);
  return out;
}

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  const loom_scalar s[4] = {scalar_i(LOOM_FACTORY_EYE)};
  launch_factory("eye", out, s);
  return out;
}
at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

at::Tensor& tri_out(const char* name, int op, const at::Tensor& self, int64_t diagonal,
                    at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, name, ": input tensor must have at least 2 dimensions");
  if (!out.is_same(self)) at::native::resize_output(out, self.sizes());
  const loom_scalar s[4] = {scalar_i(op), scalar_i(diagonal)};
  launch_factory(name, out, s, self);
  return out;
}
at::Tensor& tril_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  return tri_out("tril", LOOM_FACTORY_TRIL, self, diagonal, out);
}
at::Tensor& triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  return tri_out("triu", LOOM_FACTORY_TRIU, self, diagonal, out);
}
at::Tensor tril(const at::Tensor& self, int64_t diagonal) {
  at::Tensor out = at::empty({0}, self.options());
  return tril_out(self, diagonal, out);
}
at::Tensor triu(const at::Tensor& self, int64_t diagonal) {
  at::Tensor out = at::empty({0}, self.options());
  return triu_out(self, diagonal, out);
}
at::Tensor& tril_(at::Tensor& self, int64_t diagonal) { return tril_out(self, diagonal, self); }
at::Tensor& triu_(at::Tensor& self, int64_t diagonal) { return triu_out(self, diagonal, self); }

// ---- cumulative ops -----------------------------------------------------------

void launch_scan(const char* name, int op, const at::Tensor& self, int64_t dim,
                 const at::Tensor& out, const at::Tensor& indices) {
  if (self.numel() == 0) return;
  const loom_tensor t[3] = {describe(out, name), describe(self, name),
                            indices.defined() ? describe(indices, name) : loom_tensor{}};
  const loom_scalar s[2] = {scalar_i(op), scalar_i(dim)};
  const int64_t n = self.dim() ? self.size(dim) : 1;
  const int64_t rows = self.numel() / n;
  launch(name, LOOM_KERNEL("scan.rows"), t, s, rows, std::max<int64_t>(1, 16384 / n),
         self.device().index());
}

at::Tensor& cum_out(const char* name, int op, const at::Tensor& self, int64_t dim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  refuse_bool((std::string(name) + "_out").c_str(), out);
  if (dtype) TORCH_CHECK(out.scalar_type() == *dtype, name, "(): expected out dtype ", *dtype,
                         " but got ", out.scalar_type());
  if (self.is_complex() || out.is_complex())
    return reduce::cum_complex_out(op == LOOM_SCAN_CUMPROD, self, dim, out);
  at::native::resize_output(out, self.sizes());
  at::Tensor src = self;
  if (at::isFloatingType(out.scalar_type()) && !at::isFloatingType(self.scalar_type()))
    src = self.to(out.scalar_type());
  launch_scan(name, op, src, dim, out, at::Tensor());
  return out;
}

at::ScalarType cum_type(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                       at::Tensor& out) {
  return cum_out("cumsum", LOOM_SCAN_CUMSUM, self, dim, dtype, out);
}
at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = at::empty({0}, self.options().dtype(cum_type(self, dtype)));
  return cumsum_out(self, dim, dtype, out);
}
at::Tensor& cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                        at::Tensor& out) {
  return cum_out("cumprod", LOOM_SCAN_CUMPROD, self, dim, dtype, out);
}
at::Tensor cumprod(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = at::empty({0}, self.options().dtype(cum_type(self, dtype)));
  return cumprod_out(self, dim, dtype, out);
}

// logcumsumexp (its composite calls these): a double log-add-exp scan per
// row, as the CPU's. Complex inputs run on the CPU, counted.
at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  if (self.is_complex())
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(_logcumsumexp, out)>::call(
        self, dim, out);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "\"logcumsumexp_out_loom\" not implemented for '",
                              self.scalar_type(), "'");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "logcumsumexp: expected out dtype ",
              self.scalar_type(), " but got ", out.scalar_type());
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  launch_scan("logcumsumexp", LOOM_SCAN_LOGCUMSUMEXP, self, dim, out, at::Tensor());
  return out;
}
at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return logcumsumexp_out(self, dim, out);
}

void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  launch_scan("cummax", LOOM_SCAN_CUMMAX, self, at::maybe_wrap_dim(dim, self.dim()), values, indices);
}
void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  launch_scan("cummin", LOOM_SCAN_CUMMIN, self, at::maybe_wrap_dim(dim, self.dim()), values, indices);
}

// Autograd's zero gradients (sgn's, for one): plain zeros on loom, which
// has no storage-free zero tensors.
at::Tensor efficient_zero_tensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout,
                                 std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  return at::zeros_symint(size, at::TensorOptions().dtype(dtype).layout(layout).device(device)
                                    .pinned_memory(pin_memory));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_efficientzerotensor", efficient_zero_tensor);
  LOOM_IMPL(m, "arange.start_out", arange_out);
  LOOM_IMPL(m, "linspace.out", linspace_out);
  LOOM_IMPL(m, "logspace.out", logspace_out);
  LOOM_IMPL(m, "eye.out", eye_out);
  LOOM_IMPL(m, "eye.m_out", eye_m_out);
  LOOM_IMPL(m, "tril", tril);
  LOOM_IMPL(m, "tril.out", tril_out);
  LOOM_IMPL(m, "tril_", tril_);
  LOOM_IMPL(m, "triu", triu);
  LOOM_IMPL(m, "triu.out", triu_out);
  LOOM_IMPL(m, "triu_", triu_);
  LOOM_IMPL(m, "cumsum", cumsum);
  LOOM_IMPL(m, "cumsum.out", cumsum_out);
  LOOM_IMPL(m, "cumprod", cumprod);
  LOOM_IMPL(m, "cumprod.out", cumprod_out);
  LOOM_IMPL(m, "_logcumsumexp", logcumsumexp);
  LOOM_IMPL(m, "_logcumsumexp.out", logcumsumexp_out);
  LOOM_IMPL(m, "_cummax_helper", cummax_helper);
  LOOM_IMPL(m, "_cummin_helper", cummin_helper);
}

}  // namespace
}  // namespace torch_loom::factory
