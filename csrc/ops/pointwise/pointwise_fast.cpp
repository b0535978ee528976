// Unboxed add / sub / mul / div (Tensor and Scalar overloads, functional
// and in place): the ops of every training step and of most small-tensor
// code (the optimizers' foreach loops call the Scalar forms per parameter).
//
// They are registered unboxed because a boxed call copies its tensor
// arguments onto a stack, and copying a tensor that Python holds takes the
// GIL (the interpreter is asked to keep the PyObject alive), which for a
// small tensor costs more than the op. A fast path covers floating operands
// of one dtype, shape and device, contiguous (or a number as the second
// operand: a Python number wrapped as a CPU tensor, or a Scalar argument,
// which then is never wrapped): there the result is contiguous with self's
// dtype and shape, exactly what TensorIterator would compute, so it is built
// directly.
// Every other call takes the table kernel of pointwise.cpp.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "runtime/allocator.h"
#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::pw {
namespace {

constexpr c10::DispatchKeySet kLoomKeys(c10::DispatchKey::PrivateUse1);

bool fast_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

bool fast_self(const at::Tensor& self) {
  return self.device().is_privateuseone() && fast_dtype(self.scalar_type()) &&
         self.is_contiguous() && self.numel() > 0;
}

// The second operand on the fast path: a loom tensor like self, or a Python
// number (a CPU wrapped number, which never changes a floating result type).
enum class Second { kNone, kTensor, kNumber };

Second classify(const at::Tensor& self, const at::Tensor& other, double* number) {
  if (other.device() == self.device()) {
    const bool like = other.scalar_type() == self.scalar_type() &&
                      other.sizes().equals(self.sizes()) && other.is_contiguous();
    return like ? Second::kTensor : Second::kNone;
  }
  if (!other.unsafeGetTensorImpl()->is_wrapped_number() || !other.device().is_cpu())
    return Second::kNone;
  switch (other.scalar_type()) {
    case at::kDouble: *number = *other.const_data_ptr<double>(); return Second::kNumber;
    case at::kLong: *number = static_cast<double>(*other.const_data_ptr<int64_t>()); return Second::kNumber;
    case at::kBool: *number = *other.const_data_ptr<bool>() ? 1.0 : 0.0; return Second::kNumber;
    default: return Second::kNone;
  }
}

// A Scalar argument as the number its wrapped-number tensor would hold
// (double, int64 and bool Scalars; the others take the table kernel).
bool scalar_number(const at::Scalar& s, double* number) {
  if (s.isSymbolic()) return false;
  switch (s.type()) {
    case at::kDouble: *number = s.toDouble(); return true;
    case at::kLong: *number = static_cast<double>(s.toLong()); return true;
    case at::kBool: *number = s.toBool() ? 1.0 : 0.0; return true;
    default: return false;
  }
}

// alpha as add/sub accept it for a floating result (alpha_check).
bool fast_alpha(const at::Scalar& alpha) {
  return !alpha.isComplex() && !alpha.isBoolean();
}

// alpha as the number the kernel takes on the fast path (self's dtype is the
// result's); raises where it overflows that dtype, as on the CPU.
double alpha_of(const at::Tensor& self, const at::Scalar& alpha) {
  if (self.scalar_type() != at::kDouble) check_fits(self.scalar_type(), alpha);
  return alpha.toDouble();
}

loom_tensor flat(const void* data, const at::Tensor& like, int64_t numel, const char* name) {
  loom_tensor d;
  d.data = const_cast<void*>(data);
  d.dtype = to_loom_dtype(like.scalar_type(), name);
  d.rank = 1;
  d.sizes[0] = numel;
  d.strides[0] = 1;
  return d;
}

// out = self <op> other (alpha: p0 of add/sub) over flat operands; other is
// `number` where it is null. The number travels by value in the launch.
void launch_flat(const char* name, int op, const at::Tensor& out, const at::Tensor& self,
                 const at::Tensor* other, double number, double alpha) {
  const int64_t n = self.numel();
  const loom_pw_kind kind = self.scalar_type() == at::kDouble ? LOOM_PW_F64 : LOOM_PW_F32;
  loom_tensor t[3] = {flat(out.mutable_data_ptr(), out, n, name),
                      flat(self.const_data_ptr(), self, n, name), {}};
  loom_scalar s[LOOM_PW_CONST + 2] = {};
  s[0] = scalar_i(op);
  s[1] = scalar_i(kind);
  // float16 / bfloat16: add and sub take alpha and a number in the dtype
  // (the CPU casts both), mul and div the number as float.
  const bool additive = op == LOOM_PW_ADD || op == LOOM_PW_SUB;
  if (additive) {
    alpha = narrow_scalar(alpha, self.scalar_type());
    number = narrow_scalar(number, self.scalar_type());
  }
  s[LOOM_PW_PARAM] = scalar_f(alpha);
  if (other) {
    t[2] = flat(other->const_data_ptr(), *other, n, name);
  } else {
    t[2].data = nullptr;
    t[2].dtype = t[1].dtype;
    t[2].rank = 0;
    s[LOOM_PW_CONST + 1] = scalar_f(number);
  }
  launch(name, LOOM_KERNEL("pointwise.apply"), c10::ArrayRef<loom_tensor>(t, 3),
         c10::ArrayRef<loom_scalar>(s, LOOM_PW_CONST + 2), n, LOOM_PW_GRAIN,
         self.device().index());
}

// Runs the table kernel of aten::<name>.Tensor (or <name>_.Tensor) boxed.
at::Tensor generic(const TableKernel& kernel, const c10::OperatorHandle& op,
                   torch::jit::Stack stack) {
  kernel.run(op, &stack);
  return stack.back().toTensor();
}

// One op: its aten name, loom op, and whether it takes alpha.
template <int Op>
struct Binary {
  static const char* name() {
    switch (Op) {
      case LOOM_PW_ADD: return "add";
      case LOOM_PW_SUB: return "sub";
      case LOOM_PW_MUL: return "mul";
      default: return "div";
    }
  }

  static c10::OperatorHandle find(const char* suffix, const char* overload) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(
        (std::string("aten::") + name() + suffix).c_str(), overload);
  }

  // aten::<name>[_].Tensor, or .Scalar
  static const c10::OperatorHandle& handle(bool inplace, bool scalar = false) {
    static const c10::OperatorHandle ops[4] = {find("", "Tensor"), find("_", "Tensor"),
                                               find("", "Scalar"), find("_", "Scalar")};
    return ops[(scalar ? 2 : 0) + (inplace ? 1 : 0)];
  }

  static const TableKernel& table() {
    static const TableKernel kernel(name(), "Tensor");
    return kernel;
  }

  // sub refuses a bool operand (sub_check, in the table kernel)
  static bool refused(const at::Tensor& other) {
    return Op == LOOM_PW_SUB && other.scalar_type() == at::kBool;
  }

  // The fast path's number for a Scalar second operand.
  static bool number_of(const at::Tensor& self, const at::Scalar& other, double* number) {
    return fast_self(self) && !(Op == LOOM_PW_SUB && other.isBoolean()) &&
           scalar_number(other, number);
  }

  static at::Tensor fresh(const at::Tensor& self, const at::Tensor* other, double number,
                          double alpha) {
    at::Tensor out = at::detail::empty_generic(self.sizes(), device_allocator(), kLoomKeys,
                                               self.scalar_type(), std::nullopt);
    launch_flat(name(), Op, out, self, other, number, alpha);
    return out;
  }

  // alpha: null for 1.
  static at::Tensor run(const at::Tensor& self, const at::Tensor& other,
                        const at::Scalar* alpha) {
    double number = 0.0;
    const Second second =
        fast_self(self) && !refused(other) ? classify(self, other, &number) : Second::kNone;
    if (second == Second::kNone) return at::Tensor();
    return fresh(self, second == Second::kTensor ? &other : nullptr, number,
                 alpha ? alpha_of(self, *alpha) : 1.0);
  }

  static bool run_(const at::Tensor& self, const at::Tensor& other, const at::Scalar* alpha) {
    double number = 0.0;
    const Second second =
        fast_self(self) && !refused(other) ? classify(self, other, &number) : Second::kNone;
    if (second == Second::kNone) return false;
    // Elementwise in place is safe on the same elements, not on shifted ones.
    if (second == Second::kTensor && !other.is_same(self) &&
        other.storage().is_alias_of(self.storage()) &&
        other.const_data_ptr() != self.const_data_ptr())
      return false;
    launch_flat(name(), Op, self, self, second == Second::kTensor ? &other : nullptr, number,
                alpha ? alpha_of(self, *alpha) : 1.0);
    return true;
  }

  static at::Tensor with_alpha(const at::Tensor& self, const at::Tensor& other,
                               const at::Scalar& alpha) {
    if (fast_alpha(alpha)) {
      at::Tensor r = run(self, other, &alpha);
      if (r.defined()) return r;
    }
    return generic(table(), handle(false), {self, other, alpha});
  }

  static at::Tensor& with_alpha_(at::Tensor& self, const at::Tensor& other,
                                 const at::Scalar& alpha) {
    if (!(fast_alpha(alpha) && run_(self, other, &alpha)))
      generic(table(), handle(true), {self, other, alpha});
    return self;
  }

  static at::Tensor plain(const at::Tensor& self, const at::Tensor& other) {
    at::Tensor r = run(self, other, nullptr);
    return r.defined() ? r : generic(table(), handle(false), {self, other});
  }

  static at::Tensor& plain_(at::Tensor& self, const at::Tensor& other) {
    if (!run_(self, other, nullptr)) generic(table(), handle(true), {self, other});
    return self;
  }

  // The Scalar overloads (the table row is the Tensor overloads' row).
  static at::Tensor scalar_alpha(const at::Tensor& self, const at::Scalar& other,
                                 const at::Scalar& alpha) {
    double number = 0.0;
    if (fast_alpha(alpha) && number_of(self, other, &number))
      return fresh(self, nullptr, number, alpha_of(self, alpha));
    return generic(table(), handle(false, true), {self, other, alpha});
  }

  static at::Tensor& scalar_alpha_(at::Tensor& self, const at::Scalar& other,
                                   const at::Scalar& alpha) {
    double number = 0.0;
    if (fast_alpha(alpha) && number_of(self, other, &number))
      launch_flat(name(), Op, self, self, nullptr, number, alpha_of(self, alpha));
    else
      generic(table(), handle(true, true), {self, other, alpha});
    return self;
  }

  static at::Tensor scalar_plain(const at::Tensor& self, const at::Scalar& other) {
    double number = 0.0;
    if (number_of(self, other, &number)) return fresh(self, nullptr, number, 1.0);
    return generic(table(), handle(false, true), {self, other});
  }

  static at::Tensor& scalar_plain_(at::Tensor& self, const at::Scalar& other) {
    double number = 0.0;
    if (number_of(self, other, &number)) {
      // mul_ multiplies the number in as the first operand, which the CPU
      // casts to self's dtype (mul_out(self, number, self))
      if (Op == LOOM_PW_MUL) number = narrow_scalar(number, self.scalar_type());
      launch_flat(name(), Op, self, self, nullptr, number, 1.0);
    } else {
      generic(table(), handle(true, true), {self, other});
    }
    return self;
  }
};

using Add = Binary<LOOM_PW_ADD>;
using Sub = Binary<LOOM_PW_SUB>;
using Mul = Binary<LOOM_PW_MUL>;
using Div = Binary<LOOM_PW_DIV>;

}  // namespace

bool has_fast_kernel(const std::string& full) {
  for (const char* op : {"add", "sub", "mul", "div"})
    for (const char* form : {".Tensor", "_.Tensor", ".Scalar", "_.Scalar"})
      if (full == std::string(op) + form) return true;
  return false;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "add.Tensor", Add::with_alpha);
  LOOM_IMPL(m, "add_.Tensor", Add::with_alpha_);
  LOOM_IMPL(m, "sub.Tensor", Sub::with_alpha);
  LOOM_IMPL(m, "sub_.Tensor", Sub::with_alpha_);
  LOOM_IMPL(m, "mul.Tensor", Mul::plain);
  LOOM_IMPL(m, "mul_.Tensor", Mul::plain_);
  LOOM_IMPL(m, "div.Tensor", Div::plain);
  LOOM_IMPL(m, "div_.Tensor", Div::plain_);
  LOOM_IMPL(m, "add.Scalar", Add::scalar_alpha);
  LOOM_IMPL(m, "add_.Scalar", Add::scalar_alpha_);
  LOOM_IMPL(m, "sub.Scalar", Sub::scalar_alpha);
  LOOM_IMPL(m, "sub_.Scalar", Sub::scalar_alpha_);
  LOOM_IMPL(m, "mul.Scalar", Mul::scalar_plain);
  LOOM_IMPL(m, "mul_.Scalar", Mul::scalar_plain_);
  LOOM_IMPL(m, "div.Scalar", Div::scalar_plain);
  LOOM_IMPL(m, "div_.Scalar", Div::scalar_plain_);
}

}  // namespace torch_loom::pw
