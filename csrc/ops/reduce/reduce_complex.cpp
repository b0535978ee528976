// Reductions of complex tensors on loom. prod and all/any run
// "reduce.complex" (each output's elements in row-major order, the product
// accumulating in complex double), cumsum/cumprod "scan.complex_rows" (the
// CPU's complex-double accumulator, so complex64 prefixes are the CPU's
// bits). The others are composed of native ops as the CPU composes them:
// var/std as the variances of the real and imaginary parts added (the mean
// of var_mean/std_mean made of the parts' means), the vector norms as the
// real norm of |x|, logsumexp with the reference point the largest real
// part. complex32 (chalf) inputs run on the CPU, counted.
#include "ops/reduce/reduce_complex.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include <bitset>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "common.h"
#include "loom/kernels/reduce_complex.h"
#include "ops/pointwise/pointwise_iter.h"
#include "runtime/fallback.h"

namespace torch_loom::reduce {
namespace {

using at::Tensor;
using pw::Args;
using DimMask = std::bitset<64>;

bool is(const char* name, const char* want) { return std::strcmp(name, want) == 0; }

// The reduced dims as given: an int, a list, or absent (none: all dims).
std::optional<std::vector<int64_t>> dim_arg(const Args& a) {
  const c10::IValue* v = a.find("dim");
  if (!v || v->isNone()) return std::nullopt;
  if (v->isInt()) return std::vector<int64_t>{v->toInt()};
  const auto list = v->toDimVector();
  return std::vector<int64_t>(list.begin(), list.end());
}

DimMask mask_of(const std::optional<std::vector<int64_t>>& dims, int64_t ndim) {
  DimMask mask;
  if (!dims || dims->empty()) {
    mask.set();
    return mask;
  }
  return at::dim_list_to_bitset(*dims, ndim);
}

// The result into out= (its dtype checked as the CPU checks it) or itself.
Tensor to_out(const Args& a, const Tensor& r, const char* name) {
  Tensor out = a.out();
  if (!out.defined()) return r;
  TORCH_CHECK(out.scalar_type() == r.scalar_type(), name, ": Expected out tensor to have dtype ",
              r.scalar_type(), ", but got ", out.scalar_type(), " instead");
  return copy_to_out(out, r, name);
}

// prod / all / any over the masked dims of a complex src: one launch of
// "reduce.complex" into a new tensor of `type`, kept dims only, then
// reshaped for keepdim.
Tensor reduce_launch(const char* name, int op, const Tensor& src, const DimMask& mask,
                     bool keepdim, at::ScalarType type) {
  std::vector<int64_t> order, kept, keep_shape;
  for (int64_t d = 0; d < src.dim(); ++d)
    if (!mask[d]) {
      order.push_back(d);
      kept.push_back(src.size(d));
    }
  const int64_t r = src.dim() - static_cast<int64_t>(order.size());
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (mask[d]) order.push_back(d);
    keep_shape.push_back(mask[d] ? 1 : src.size(d));
  }
  Tensor result = at::empty(kept, src.options().dtype(type));
  if (result.numel() > 0) {
    const Tensor in = src.permute(order);
    loom_tensor t[2] = {describe(result, name), describe(in, name)};
    if (in.numel() == 0) t[1].data = nullptr;
    const loom_scalar s[2] = {scalar_i(op), scalar_i(r)};
    int64_t count = 1;
    for (int64_t d = static_cast<int64_t>(kept.size()); d < in.dim(); ++d) count *= in.size(d);
    launch(name, LOOM_KERNEL("reduce.complex"), t, s, result.numel(),
           std::max<int64_t>(1, 16384 / std::max<int64_t>(1, count)), src.device().index());
  }
  return keepdim && src.dim() > 0 ? result.view(keep_shape) : result;
}

std::vector<Tensor> prod(const Args& a, const Tensor& self, at::ScalarType type) {
  const Tensor src = self.to(type).resolve_conj().resolve_neg();
  const Tensor r = reduce_launch("prod", LOOM_REDUCE_COMPLEX_PROD, src,
                                 mask_of(dim_arg(a), self.dim()), a.flag("keepdim"), type);
  return {to_out(a, r, "prod")};
}

std::vector<Tensor> all_any(const char* name, const Args& a, const Tensor& self) {
  const Tensor src = self.resolve_conj().resolve_neg();
  const int op = is(name, "all") ? LOOM_REDUCE_COMPLEX_ALL : LOOM_REDUCE_COMPLEX_ANY;
  const Tensor r = reduce_launch(name, op, src, mask_of(dim_arg(a), self.dim()),
                                 a.flag("keepdim"), at::kBool);
  Tensor out = a.out();
  if (!out.defined()) return {r};
  TORCH_CHECK(out.scalar_type() == at::kBool || out.scalar_type() == at::kByte, name,
              "(): Expected out tensor to have dtype Bool or Byte, but got ", out.scalar_type());
  resize_output_as(out, r);
  return {out.copy_(r)};
}

// var(x) = var(re x) + var(im x); the mean of var_mean / std_mean is
// complex(mean(re x), mean(im x)); std the square root of the sum.
std::vector<Tensor> var_std(const char* name, const Args& a, const Tensor& self) {
  const bool with_mean = is(name, "var_mean") || is(name, "std_mean");
  const bool sqrt = name[0] == 's';
  const auto dims = dim_arg(a);
  const at::OptionalIntArrayRef dim =
      dims ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef();
  const c10::IValue* cv = a.find("correction");
  const std::optional<at::Scalar> correction =
      cv && !cv->isNone() ? std::optional<at::Scalar>(cv->toScalar()) : std::nullopt;
  const bool keepdim = a.flag("keepdim");
  const Tensor src = self.resolve_conj().resolve_neg();
  const Tensor re = at::real(src), im = at::imag(src);
  if (!with_mean) {
    Tensor v = at::var(re, dim, correction, keepdim).add_(at::var(im, dim, correction, keepdim));
    if (sqrt) v.sqrt_();
    return {to_out(a, v, name)};
  }
  auto [vr, mr] = at::var_mean(re, dim, correction, keepdim);
  auto [vi, mi] = at::var_mean(im, dim, correction, keepdim);
  Tensor v = vr.add_(vi);
  if (sqrt) v.sqrt_();
  Tensor m = at::complex(mr, mi);
  const c10::IValue* o0 = a.find("out0");
  const c10::IValue* o1 = a.find("out1");
  if (o0 && o0->isTensor() && o1 && o1->isTensor()) {
    Tensor out0 = o0->toTensor(), out1 = o1->toTensor();
    return {copy_to_out(out0, v, name), copy_to_out(out1, m, name)};
  }
  return {v, m};
}

// The vector norm of a complex x is the real norm of |x|; dtype= (complex)
// converts x first, and the result is of its real type.
std::vector<Tensor> norm(const char* name, const Args& a, const Tensor& self) {
  const c10::IValue* dt = a.find("dtype");
  Tensor src = self;
  if (dt && !dt->isNone()) {
    const at::ScalarType type = dt->toScalarType();
    TORCH_CHECK(at::isComplexType(type), "linalg.vector_norm: dtype should be complex for "
                "complex inputs, but got ", type);
    src = self.to(type);
  }
  const at::Scalar ord = a.scalar(a.find("ord") ? "ord" : "p", 2);
  const auto dims = dim_arg(a);
  const at::OptionalIntArrayRef dim =
      dims ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef();
  const Tensor r = at::linalg_vector_norm(at::abs(src), ord, dim, a.flag("keepdim"));
  return {to_out(a, r, name)};
}

// log(sum(exp(x - m))) + m, m the largest real part (0 where infinite).
std::vector<Tensor> logsumexp(const Args& a, const Tensor& self) {
  const auto dims = dim_arg(a);
  const std::vector<int64_t> d = dims ? *dims : std::vector<int64_t>{};
  const bool keepdim = a.flag("keepdim");
  Tensor r;
  if (self.numel() != 0) {
    const Tensor maxes = at::amax(at::real(self), d, true);
    Tensor squeezed = keepdim ? maxes : maxes.squeeze(d);
    squeezed.masked_fill_(squeezed.abs() == INFINITY, 0);
    r = at::sum((self - maxes).exp_(), d, keepdim);
    r.log_().add_(squeezed);
  } else {
    r = at::sum(at::exp(self), d, keepdim).log_();
  }
  return {to_out(a, r, "logsumexp")};
}

// The result type of prod: dtype=, else out='s, else self's.
at::ScalarType prod_type(const Args& a, const Tensor& self) {
  const c10::IValue* v = a.find("dtype");
  if (v && !v->isNone()) return v->toScalarType();
  if (a.out().defined()) return a.out().scalar_type();
  return self.scalar_type();
}

}  // namespace

bool run_complex(const char* name, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Args a(op.schema(), stack);
  const c10::IValue* sv = a.find("self");
  if (!sv || !sv->isTensor() || !sv->toTensor().defined() || !sv->toTensor().is_complex())
    return false;
  const Tensor self = sv->toTensor();
  if (self.scalar_type() == at::kComplexHalf) {
    loom_cpu_fallback(op, stack);
    return true;
  }
  std::vector<Tensor> results;
  if (is(name, "prod")) {
    const at::ScalarType type = prod_type(a, self);
    if (!at::isComplexType(type)) {
      // a real result: the real product of the converted input, as the CPU
      Tensor& slot = const_cast<c10::IValue*>(sv)->toTensor();
      slot = self.to(type);
      op.callBoxed(stack);
      return true;
    }
    results = prod(a, self, type);
  } else if (is(name, "all") || is(name, "any")) {
    results = all_any(name, a, self);
  } else if (is(name, "var") || is(name, "std") || is(name, "var_mean") ||
             is(name, "std_mean")) {
    results = var_std(name, a, self);
  } else if (is(name, "norm") || is(name, "linalg_vector_norm")) {
    results = norm(name, a, self);
  } else if (is(name, "logsumexp")) {
    results = logsumexp(a, self);
  } else {
    return false;
  }
  torch::jit::drop(*stack, a.size());
  for (auto& r : results) torch::jit::push(*stack, std::move(r));
  return true;
}

at::Tensor& cum_complex_out(bool prod, const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const char* name = prod ? "cumprod" : "cumsum";
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!at::isComplexType(out.scalar_type())) {
    // a real result: the real scan of the converted input, as the CPU
    return prod ? at::cumprod_out(out, self.to(out.scalar_type()), dim)
                : at::cumsum_out(out, self.to(out.scalar_type()), dim);
  }
  if (out.scalar_type() == at::kComplexHalf || self.scalar_type() == at::kComplexHalf) {
    note_cpu_fallback(prod ? "aten::cumprod.out" : "aten::cumsum.out");
    const Tensor r = prod ? at::cumprod(self.cpu(), dim, out.scalar_type())
                          : at::cumsum(self.cpu(), dim, out.scalar_type());
    at::native::resize_output(out, r.sizes());
    return out.copy_(r);
  }
  at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) return out;
  const Tensor src = self.to(out.scalar_type()).resolve_conj().resolve_neg();
  // a conjugate or negative out is written through a plain result
  const bool direct = !out.is_conj() && !out.is_neg();
  Tensor dst = direct ? out : at::empty(out.sizes(), out.options().dtype(out.scalar_type()));
  if (direct && at::get_overlap_status(out, src) != at::MemOverlapStatus::No &&
      !out.is_same(src))
    dst = at::empty(out.sizes(), out.options());
  const loom_tensor t[2] = {describe(dst, name), describe(src, name)};
  const loom_scalar s[2] = {
      scalar_i(prod ? LOOM_REDUCE_COMPLEX_CUMPROD : LOOM_REDUCE_COMPLEX_CUMSUM), scalar_i(dim)};
  const int64_t n = self.dim() ? self.size(dim) : 1;
  launch(name, LOOM_KERNEL("scan.complex_rows"), t, s, self.numel() / n,
         std::max<int64_t>(1, 16384 / n), self.device().index());
  if (!dst.is_same(out)) out.copy_(dst);
  return out;
}

}  // namespace torch_loom::reduce
