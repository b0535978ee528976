// Complex elementwise ops on loom: add/sub/mul/div, neg, abs, angle, exp,
// log, sqrt, rsqrt, reciprocal, sin, cos, tan, sinh, cosh, tanh, asin, acos,
// atan, asinh, acosh, atanh, sigmoid, sgn and pow of complex tensors, where
// of complex operands and the tanh and sigmoid backward (reached from the
// elementwise table), conj_physical (which materialises a conjugate view),
// polar and complex. One launch of "complex.apply" each; operands are first converted to the
// common complex dtype and broadcast, as TensorIterator would promote them.
#include "ops/pointwise/complex.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstring>

#include "common.h"
#include "loom/kernels/complex.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::pw {
namespace {

using at::Tensor;

bool on_loom(const Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

// A CPU scalar operand (a Python number): its value rides as a constant.
bool is_number(const Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() == 0;
}

// out = op(a, b) over out's shape; b undefined: the constant c.
void apply(const char* name, int op, const Tensor& out, const Tensor& a, const Tensor& b,
           c10::complex<double> c = {}, c10::complex<double> alpha = {1.0, 0.0}) {
  if (out.numel() == 0) return;
  loom_tensor t[3] = {describe(out, name), describe(a, name), loom_tensor{}};
  if (b.defined()) t[2] = describe(b, name);
  const loom_scalar s[5] = {scalar_i(op), scalar_f(c.real()), scalar_f(c.imag()),
                            scalar_f(alpha.real()), scalar_f(alpha.imag())};
  launch(name, LOOM_KERNEL("complex.apply"), t, s, out.numel(), LOOM_COMPLEX_GRAIN,
         out.device().index());
}

// Operands without conjugate or negative bits, in `type`.
Tensor plain(const Tensor& t, at::ScalarType type) {
  return t.to(type).resolve_conj().resolve_neg();
}

// The result: into `out` (in place or out=) when given, checked as the CPU
// checks it; computed in `type` of `shape`.
// A new result is laid out as TensorIterator lays out the `operands`' (as
// on the CPU: channels-last operands give a channels-last result).
template <class Fn>
Tensor with_out(const char* name, const Tensor& out, bool inplace, at::ScalarType type,
                c10::IntArrayRef shape, at::TensorList operands, Fn compute) {
  if (!out.defined()) {
    Tensor r = empty_elementwise(operands, type);
    compute(r);
    return r;
  }
  TORCH_CHECK(at::canCast(type, out.scalar_type()), "result type ", type,
              " can't be cast to the desired output type ", out.scalar_type());
  if (inplace) {
    TORCH_CHECK(out.sizes().equals(shape), "output with shape ", out.sizes(),
                " doesn't match the broadcast shape ", shape);
  } else if (at::native::resize_output(out, shape)) {
    const Tensor layout = empty_elementwise(operands, type);
    out.unsafeGetTensorImpl()->set_sizes_and_strides(layout.sizes(), layout.strides());
  }
  if (out.scalar_type() == type && !out.is_conj() && !out.is_neg() &&
      (inplace || out.is_non_overlapping_and_dense())) {
    compute(out);
  } else {
    Tensor r = empty_elementwise(operands, type);
    compute(r);
    out.copy_(r);
  }
  return out;
}

bool run_binary(int op, const char* name, const Args& a, torch::jit::Stack* stack,
                const char* other_name = "other") {
  const Tensor self = a.tensor("self"), other = a.tensor(other_name);
  if (!on_loom(self) || !(on_loom(other) || is_number(other))) return false;
  if (a.has("rounding_mode")) return false;
  const at::ScalarType type = at::result_type(self, other);
  // complex32 has no kernels here: the CPU's (or its error), counted
  if (!at::isComplexType(type) || type == at::kComplexHalf) return false;
  const auto alpha = a.opt_scalar("alpha");
  if (alpha) at::native::alpha_check(type, *alpha);
  const c10::complex<double> al = alpha ? alpha->toComplexDouble() : c10::complex<double>(1, 0);
  const bool number = !on_loom(other);
  const std::vector<int64_t> shape =
      number ? self.sizes().vec() : at::infer_size(self.sizes(), other.sizes());
  const Tensor x = plain(self, type).expand(shape);
  const Tensor y = number ? Tensor() : plain(other, type).expand(shape);
  const c10::complex<double> c = number ? other.item().toComplexDouble() : 0.0;
  const Tensor r = with_out(name, a.inplace() ? self : a.out(), a.inplace(), type, shape, {x, y},
                            [&](const Tensor& o) { apply(name, op, o, x, y, c, al); });
  finish(stack, a, r);
  return true;
}

// eq / ne of complex operands (functional form): both parts compared, by
// the real comparison over the parts' views and a reduction of each pair.
bool run_compare(bool eq, const Args& a, torch::jit::Stack* stack) {
  const Tensor self = a.tensor("self"), other = a.tensor("other");
  if (!on_loom(self) || !(on_loom(other) || is_number(other)) || a.inplace() ||
      a.out().defined())
    return false;
  const at::ScalarType type = at::result_type(self, other);
  if (!at::isComplexType(type)) return false;
  // a number is a 0-d constant on the device
  const Tensor y = at::view_as_real(plain(on_loom(other) ? other : other.to(self.device()), type));
  const Tensor x = at::view_as_real(plain(self, type));
  const Tensor parts = eq ? at::eq(x, y) : at::ne(x, y);
  finish(stack, a, eq ? parts.all(-1) : parts.any(-1));
  return true;
}

// where(condition, a, b) of complex operands: the real select over the
// pairs' views, the condition broadcast over each pair.
bool run_where(const Args& a, torch::jit::Stack* stack) {
  const Tensor self = a.tensor("self"), other = a.tensor("other");
  Tensor cond = a.tensor("condition");
  if (!(on_loom(self) || is_number(self)) || !(on_loom(other) || is_number(other)) ||
      !(on_loom(cond) || cond.dim() == 0) || a.inplace())
    return false;
  const at::ScalarType type = at::result_type(self, other);
  if (!at::isComplexType(type) || type == at::kComplexHalf) return false;
  const c10::Device device = on_loom(self) ? self.device() : on_loom(other) ? other.device()
                                                                            : cond.device();
  if (!on_loom(cond)) cond = cond.to(device);
  if (cond.scalar_type() == at::kByte) cond = cond.to(at::kBool);
  TORCH_CHECK(cond.scalar_type() == at::kBool, "where expected condition to be a boolean "
              "tensor, but got a tensor with dtype ", cond.scalar_type());
  const Tensor x = plain(on_loom(self) ? self : self.to(device), type);
  const Tensor y = plain(on_loom(other) ? other : other.to(device), type);
  const std::vector<int64_t> shape =
      at::infer_size(at::infer_size(x.sizes(), y.sizes()), cond.sizes());
  const Tensor c = cond.unsqueeze(-1);
  const Tensor r = with_out("where", a.out(), false, type, shape, {cond, x, y}, [&](const Tensor& o) {
    Tensor parts = at::view_as_real(o);
    at::where_out(parts, c, at::view_as_real(x), at::view_as_real(y));
  });
  finish(stack, a, r);
  return true;
}

// pow of a complex tensor and a number, with the CPU's special cases: 0 and
// 1 fill and copy, 0.5, -0.5 and -1 are sqrt, rsqrt and reciprocal, 2, 3
// and -2 products (x x, (x x) x, 1 / (x x)); other exponents cpow.
bool run_pow_scalar(const Args& a, const at::Scalar& e, torch::jit::Stack* stack) {
  const Tensor self = a.tensor("self");
  if (!on_loom(self)) return false;
  const at::ScalarType type = at::result_type(self, e);
  if (!at::isComplexType(type) || type == at::kComplexHalf) return false;
  const c10::complex<double> ce = e.toComplexDouble();
  const Tensor x = plain(self, type);
  auto is = [&](double v) { return ce == c10::complex<double>(v, 0); };
  const Tensor r = with_out("pow", a.inplace() ? self : a.out(), a.inplace(), type, self.sizes(),
                            {x}, [&](const Tensor& o) {
    if (is(0)) {
      o.fill_(1);
    } else if (is(1)) {
      if (!o.is_same(x)) o.copy_(x);
    } else if (is(0.5) || is(-0.5) || is(-1)) {
      apply("pow", is(0.5) ? LOOM_COMPLEX_SQRT : is(-1) ? LOOM_COMPLEX_RECIPROCAL
                                                        : LOOM_COMPLEX_RSQRT, o, x, Tensor());
    } else if (is(2) || is(3) || is(-2)) {
      const Tensor sq = is(2) ? o : at::empty_like(x);
      apply("pow", LOOM_COMPLEX_MUL, sq, x, x);
      if (is(3)) apply("pow", LOOM_COMPLEX_MUL, o, sq, x);
      if (is(-2)) apply("pow", LOOM_COMPLEX_RECIPROCAL, o, sq, Tensor());
    } else {
      apply("pow", LOOM_COMPLEX_POW, o, x, Tensor(), ce);
    }
  });
  finish(stack, a, r);
  return true;
}

// tanh_backward and sigmoid_backward of complex operands, as the CPU
// computes them: g * conj(1 - y y) and g * conj((1 - y) y).
bool run_activation_backward(const char* name, const Args& a, torch::jit::Stack* stack) {
  const Tensor g = a.tensor("grad_output"), y = a.tensor("output");
  if (!on_loom(g) || !on_loom(y) || a.inplace()) return false;
  const at::ScalarType type = at::result_type(g, y);
  if (!at::isComplexType(type) || type == at::kComplexHalf) return false;
  const Tensor gp = plain(g, type), yp = plain(y, type);
  const std::vector<int64_t> shape = at::infer_size(gp.sizes(), yp.sizes());
  const Tensor d = name[0] == 't' ? at::mul(yp, yp).neg_().add_(1)
                                  : at::mul(yp.neg().add_(1), yp);
  const Tensor dc = at::conj_physical(d).expand(shape), ge = gp.expand(shape);
  const Tensor r = with_out(name, a.out(), false, type, shape, {ge, dc}, [&](const Tensor& o) {
    apply(name, LOOM_COMPLEX_MUL, o, ge, dc);
  });
  finish(stack, a, r);
  return true;
}

bool run_unary(int op, const char* name, const Args& a, torch::jit::Stack* stack) {
  const Tensor self = a.tensor("self");
  if (!on_loom(self) || !self.is_complex() || self.scalar_type() == at::kComplexHalf) return false;
  const bool to_real = op == LOOM_COMPLEX_ABS || op == LOOM_COMPLEX_ANGLE;
  if (to_real && a.inplace()) return false;  // the CPU refuses these in place
  const at::ScalarType type =
      to_real ? c10::toRealValueType(self.scalar_type()) : self.scalar_type();
  const Tensor x = plain(self, self.scalar_type());
  const Tensor r = with_out(name, a.inplace() ? self : a.out(), a.inplace(), type, self.sizes(),
                            {x}, [&](const Tensor& o) { apply(name, op, o, x, Tensor()); });
  finish(stack, a, r);
  return true;
}

// conj_physical: a copy with the imaginary parts negated (a copy for reals).
Tensor& conj_physical_out(const Tensor& self, Tensor& out) {
  if (!self.is_complex()) {
    at::native::resize_output(out, self.sizes());
    return out.copy_(self);
  }
  check_out_dtype(out, self, "conj_physical");
  const Tensor x = self.resolve_neg();
  // The conjugate of a conjugate view is the data under it.
  if (x.is_conj()) {
    at::native::resize_output(out, self.sizes());
    return out.copy_(x.conj());
  }
  with_out("conj_physical", out, false, self.scalar_type(), self.sizes(), {x},
           [&](const Tensor& o) { apply("conj_physical", LOOM_COMPLEX_CONJ, o, x, Tensor()); });
  return out;
}

Tensor conj_physical(const Tensor& self) {
  Tensor out = at::empty({0}, self.options());
  return conj_physical_out(self, out);
}

Tensor& conj_physical_(Tensor& self) {
  if (!self.is_complex()) return self;
  TORCH_CHECK(!self.is_conj() && !self.is_neg(), "conj_physical_: a plain tensor is expected");
  apply("conj_physical_", LOOM_COMPLEX_CONJ, self, self, Tensor());
  return self;
}

// polar / complex: out = f(a, b) of two real tensors of one dtype.
Tensor& compose_out(const char* name, int op, const Tensor& a, const Tensor& b, Tensor& out) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "Expected object of scalar type ",
              a.scalar_type(), " but got scalar type ", b.scalar_type(),
              " for second argument");
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble,
              "Expected both inputs to be Half, Float or Double tensors but got ",
              a.scalar_type(), " and ", b.scalar_type());
  const at::ScalarType type = c10::toComplexType(a.scalar_type());
  TORCH_CHECK(out.scalar_type() == type, name, ": Expected object of scalar type ", type,
              " but got scalar type ", out.scalar_type(), " for argument 'out'");
  const std::vector<int64_t> shape = at::infer_size(a.sizes(), b.sizes());
  const Tensor x = a.expand(shape), y = b.expand(shape);
  with_out(name, out, false, type, shape, {x, y},
           [&](const Tensor& o) { apply(name, op, o, x, y); });
  return out;
}

// Half parts make complex32 (chalf), which loom has no kernels for yet: the
// CPU runs those, counted as a fallback (and raising where the CPU does).
bool half_parts(const Tensor& a, const Tensor& b) {
  return a.scalar_type() == at::kHalf || b.scalar_type() == at::kHalf;
}

Tensor& polar_out(const Tensor& abs, const Tensor& angle, Tensor& out) {
  if (half_parts(abs, angle))
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(polar, out)>::call(
        abs, angle, out);
  return compose_out("polar", LOOM_COMPLEX_POLAR, abs, angle, out);
}

Tensor& complex_out(const Tensor& real, const Tensor& imag, Tensor& out) {
  if (half_parts(real, imag))
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(complex, out)>::call(
        real, imag, out);
  return compose_out("complex", LOOM_COMPLEX_MAKE, real, imag, out);
}

}  // namespace

bool run_complex(const char* name, const Args& a, torch::jit::Stack* stack) {
  struct Row { const char* name; int op; bool binary; };
  static const Row rows[] = {
      {"add", LOOM_COMPLEX_ADD, true},  {"sub", LOOM_COMPLEX_SUB, true},
      {"mul", LOOM_COMPLEX_MUL, true},  {"div", LOOM_COMPLEX_DIV, true},
      {"neg", LOOM_COMPLEX_NEG, false}, {"abs", LOOM_COMPLEX_ABS, false},
      {"angle", LOOM_COMPLEX_ANGLE, false},
      {"exp", LOOM_COMPLEX_EXP, false}, {"log", LOOM_COMPLEX_LOG, false},
      {"sqrt", LOOM_COMPLEX_SQRT, false}, {"reciprocal", LOOM_COMPLEX_RECIPROCAL, false},
      {"sin", LOOM_COMPLEX_SIN, false}, {"cos", LOOM_COMPLEX_COS, false},
      {"tanh", LOOM_COMPLEX_TANH, false}, {"sigmoid", LOOM_COMPLEX_SIGMOID, false},
      {"sgn", LOOM_COMPLEX_SGN, false},
      {"sinh", LOOM_COMPLEX_SINH, false}, {"cosh", LOOM_COMPLEX_COSH, false},
      {"tan", LOOM_COMPLEX_TAN, false}, {"asin", LOOM_COMPLEX_ASIN, false},
      {"acos", LOOM_COMPLEX_ACOS, false}, {"atan", LOOM_COMPLEX_ATAN, false},
      {"asinh", LOOM_COMPLEX_ASINH, false}, {"acosh", LOOM_COMPLEX_ACOSH, false},
      {"atanh", LOOM_COMPLEX_ATANH, false}, {"rsqrt", LOOM_COMPLEX_RSQRT, false},
  };
  for (const Row& r : rows)
    if (std::strcmp(r.name, name) == 0)
      return r.binary ? run_binary(r.op, name, a, stack) : run_unary(r.op, name, a, stack);
  if (std::strcmp(name, "where") == 0) return run_where(a, stack);
  if (std::strcmp(name, "tanh_backward") == 0 || std::strcmp(name, "sigmoid_backward") == 0)
    return run_activation_backward(name, a, stack);
  if (std::strcmp(name, "eq") == 0 || std::strcmp(name, "ne") == 0)
    return run_compare(name[0] == 'e', a, stack);
  // pow of two tensors (the CPU's std::pow of each pair) or of a tensor and
  // a number exponent (the CPU's special cases); a number base (pow.Scalar)
  // takes its own path on the CPU
  if (std::strcmp(name, "pow") == 0) {
    const c10::IValue* self = a.find("self");
    const c10::IValue* exponent = a.find("exponent");
    if (self && self->isTensor() && exponent && exponent->isTensor())
      return run_binary(LOOM_COMPLEX_POW, name, a, stack, "exponent");
    if (self && self->isTensor() && exponent && exponent->isScalar())
      return run_pow_scalar(a, exponent->toScalar(), stack);
  }
  return false;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // conj_physical itself stays composite (its autograd lives there); it
  // calls _conj_physical.
  LOOM_IMPL(m, "_conj_physical", conj_physical);
  LOOM_IMPL(m, "conj_physical.out", conj_physical_out);
  LOOM_IMPL(m, "conj_physical_", conj_physical_);
  LOOM_IMPL(m, "polar.out", polar_out);
  LOOM_IMPL(m, "complex.out", complex_out);
}

}  // namespace torch_loom::pw
