// Unboxed add / sub / mul / div (Tensor overloads, functional and in
// place): the ops of every training step and of most small-tensor code.
//
// They are registered unboxed because a boxed call copies its tensor
// arguments onto a stack, and copying a tensor that Python holds takes the
// GIL (the interpreter is asked to keep the PyObject alive), which for a
// small tensor costs more than the op. A fast path covers floating operands
// of one dtype, shape and device, contiguous (or a Python number as the
// second operand): there the result is contiguous with self's dtype and
// shape, exactly what TensorIterator would compute, so it is built directly.
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

// alpha as add/sub accept it for a floating result (alpha_check).
bool fast_alpha(const at::Scalar& alpha) {
  return !alpha.isComplex() && !alpha.isBoolean();
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

// out = self <op> other (alpha: p0 of add/sub) over flat operands.
void launch_flat(const char* name, int op, const at::Tensor& out, const at::Tensor& self,
                 const at::Tensor& other, Second second, double number, double alpha) {
  const int64_t n = self.numel();
  const loom_pw_kind kind = self.scalar_type() == at::kDouble ? LOOM_PW_F64 : LOOM_PW_F32;
  loom_tensor t[3] = {flat(out.mutable_data_ptr(), out, n, name),
                      flat(self.const_data_ptr(), self, n, name), {}};
  loom_scalar s[LOOM_PW_CONST + 2] = {};
  s[0] = scalar_i(op);
  s[1] = scalar_i(kind);
  s[LOOM_PW_PARAM] = scalar_f(alpha);
  if (second == Second::kTensor) {
    t[2] = flat(other.const_data_ptr(), other, n, name);
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

  static const c10::OperatorHandle& handle(bool inplace) {
    static const c10::OperatorHandle functional =
        c10::Dispatcher::singleton().findSchemaOrThrow(
            (std::string("aten::") + name()).c_str(), "Tensor");
    static const c10::OperatorHandle in_place =
        c10::Dispatcher::singleton().findSchemaOrThrow(
            (std::string("aten::") + name() + "_").c_str(), "Tensor");
    return inplace ? in_place : functional;
  }

  static const TableKernel& table() {
    static const TableKernel kernel(name(), "Tensor");
    return kernel;
  }

  // sub refuses a bool operand (sub_check, in the table kernel)
  static bool refused(const at::Tensor& other) {
    return Op == LOOM_PW_SUB && other.scalar_type() == at::kBool;
  }

  static at::Tensor run(const at::Tensor& self, const at::Tensor& other, double alpha) {
    double number = 0.0;
    const Second second =
        fast_self(self) && !refused(other) ? classify(self, other, &number) : Second::kNone;
    if (second == Second::kNone) return at::Tensor();
    at::Tensor out = at::detail::empty_generic(self.sizes(), device_allocator(), kLoomKeys,
                                               self.scalar_type(), std::nullopt);
    launch_flat(name(), Op, out, self, other, second, number, alpha);
    return out;
  }

  static bool run_(const at::Tensor& self, const at::Tensor& other, double alpha) {
    double number = 0.0;
    const Second second =
        fast_self(self) && !refused(other) ? classify(self, other, &number) : Second::kNone;
    if (second == Second::kNone) return false;
    // Elementwise in place is safe on the same elements, not on shifted ones.
    if (second == Second::kTensor && !other.is_same(self) &&
        other.storage().is_alias_of(self.storage()) &&
        other.const_data_ptr() != self.const_data_ptr())
      return false;
    launch_flat(name(), Op, self, self, other, second, number, alpha);
    return true;
  }

  static at::Tensor with_alpha(const at::Tensor& self, const at::Tensor& other,
                               const at::Scalar& alpha) {
    if (fast_alpha(alpha)) {
      at::Tensor r = run(self, other, alpha.toDouble());
      if (r.defined()) return r;
    }
    return generic(table(), handle(false), {self, other, alpha});
  }

  static at::Tensor& with_alpha_(at::Tensor& self, const at::Tensor& other,
                                 const at::Scalar& alpha) {
    if (!(fast_alpha(alpha) && run_(self, other, alpha.toDouble())))
      generic(table(), handle(true), {self, other, alpha});
    return self;
  }

  static at::Tensor plain(const at::Tensor& self, const at::Tensor& other) {
    at::Tensor r = run(self, other, 1.0);
    return r.defined() ? r : generic(table(), handle(false), {self, other});
  }

  static at::Tensor& plain_(at::Tensor& self, const at::Tensor& other) {
    if (!run_(self, other, 1.0)) generic(table(), handle(true), {self, other});
    return self;
  }
};

using Add = Binary<LOOM_PW_ADD>;
using Sub = Binary<LOOM_PW_SUB>;
using Mul = Binary<LOOM_PW_MUL>;
using Div = Binary<LOOM_PW_DIV>;

}  // namespace

bool has_fast_kernel(const std::string& full) {
  for (const char* n : {"add.Tensor", "add_.Tensor", "sub.Tensor", "sub_.Tensor",
                        "mul.Tensor", "mul_.Tensor", "div.Tensor", "div_.Tensor"})
    if (full == n) return true;
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
}

}  // namespace torch_loom::pw
