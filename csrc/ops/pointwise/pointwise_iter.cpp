// Boxed-argument access and the launch of the elementwise kernel over an
// at::TensorIterator (which did the broadcasting, type promotion, output
// allocation and dimension coalescing with PyTorch's own rules).
#include "ops/pointwise/pointwise_iter.h"

#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <c10/util/Exception.h>

#include <cstring>

namespace torch_loom::pw {

const c10::IValue* Args::find(const char* name) const {
  const auto& args = schema_.arguments();
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name() == name) return &(*stack_)[base_ + i];
  return nullptr;
}

at::Tensor Args::tensor(const char* name) const {
  const c10::IValue* v = find(name);
  TORCH_INTERNAL_ASSERT(v, "missing argument ", name);
  if (v->isTensor()) return v->toTensor();
  return at::native::wrapped_scalar_tensor(v->toScalar());
}

at::Scalar Args::scalar(const char* name, const at::Scalar& fallback) const {
  const c10::IValue* v = find(name);
  return v && !v->isNone() ? v->toScalar() : fallback;
}

std::optional<at::Scalar> Args::opt_scalar(const char* name) const {
  const c10::IValue* v = find(name);
  if (!v || v->isNone()) return std::nullopt;
  return v->toScalar();
}

std::optional<at::Tensor> Args::opt_tensor(const char* name) const {
  const c10::IValue* v = find(name);
  if (!v || v->isNone()) return std::nullopt;
  return v->toTensor();
}

std::string Args::str(const char* name, const char* fallback) const {
  const c10::IValue* v = find(name);
  return v && !v->isNone() ? v->toStringRef() : std::string(fallback);
}

bool Args::flag(const char* name) const {
  const c10::IValue* v = find(name);
  return v && !v->isNone() && v->toBool();
}

at::Tensor Args::out() const {
  const auto& args = schema_.arguments();
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_out()) return (*stack_)[base_ + i].toTensor();
  return at::Tensor();
}

bool Args::inplace() const {
  const std::string& n = schema_.name();
  return !n.empty() && n.back() == '_' && n.compare(n.size() - 2, 2, "__") != 0;
}

void finish(torch::jit::Stack* stack, const Args& args, const at::Tensor& r) {
  torch::jit::drop(*stack, args.size());
  torch::jit::push(*stack, r);
}

loom_pw_kind kind_of(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16: return LOOM_PW_F32;
    case at::kDouble: return LOOM_PW_F64;
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong: return LOOM_PW_I64;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", op, "\" not implemented for '",
                                  type, "' on loom");
  }
}

void check_fits(at::ScalarType type, const at::Scalar& value) {
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, type, "check_fits",
                             [&] { (void)value.to<scalar_t>(); });
}

double narrow_scalar(double value, at::ScalarType type) {
  const float f = static_cast<float>(value);
  if (type == at::kHalf) return static_cast<float>(c10::Half(f));
  if (type == at::kBFloat16) return static_cast<float>(c10::BFloat16(f));
  return value;
}

void launch_iter_kernel(const char* name, const loom_kernel_t* kernel,
                        at::TensorIteratorBase& iter, int op, loom_pw_kind kind,
                        const loom_scalar* params, at::ScalarType narrow, int keep) {
  const bool reduced = narrow == at::kHalf || narrow == at::kBFloat16;
  const int64_t numel = iter.numel();
  if (numel == 0) return;
  const int ntensors = iter.ntensors();
  const int ndim = iter.ndim();
  TORCH_CHECK(ntensors <= 1 + LOOM_PW_MAX_INPUTS, name, ": too many operands");
  TORCH_CHECK(ndim <= LOOM_MAX_DIMS, name, ": tensors of more than ",
              LOOM_MAX_DIMS, " dimensions are not supported on loom");
  loom_tensor t[1 + LOOM_PW_MAX_INPUTS];
  loom_scalar s[LOOM_PW_CONST + LOOM_PW_MAX_INPUTS];
  std::memset(s, 0, sizeof s);
  s[0] = scalar_i(op);
  s[1] = scalar_i(kind);
  for (int k = 0; k < 4; ++k) s[LOOM_PW_PARAM + k] = params[k];
  // A float16 / bfloat16 result into an out= of a wider floating dtype: the
  // CPU rounds it to the common dtype before the cast, so the kernel writes
  // a temporary of that dtype (the out='s element strides), copied out after.
  at::Tensor staged;
  if (reduced && iter.noutputs() == 1 && iter.dtype(0) != narrow &&
      at::isFloatingType(iter.dtype(0))) {
    const at::Tensor& out = iter.output(0);
    staged = at::empty_strided(out.sizes(), out.strides(), out.options().dtype(narrow));
  }
  const auto shape = iter.shape();
  for (int i = 0; i < ntensors; ++i) {
    loom_tensor& d = t[i];
    std::memset(&d, 0, offsetof(loom_tensor, sizes));
    d.dtype = to_loom_dtype(iter.dtype(i), name);
    if (i > 0 && iter.is_cpu_scalar(i)) {
      d.data = nullptr;
      d.rank = 0;
      if (kind == LOOM_PW_I64) {
        s[LOOM_PW_CONST + i - 1] = scalar_i(iter.scalar_value<int64_t>(i));
      } else if (reduced && i != keep) {
        // int64 -> float directly, as the CPU's cast does
        const float f = at::isIntegralType(iter.dtype(i), true)
                            ? static_cast<float>(iter.scalar_value<int64_t>(i))
                            : static_cast<float>(iter.scalar_value<double>(i));
        s[LOOM_PW_CONST + i - 1] = scalar_f(narrow_scalar(f, narrow));
      } else {
        s[LOOM_PW_CONST + i - 1] = scalar_f(iter.scalar_value<double>(i));
      }
      continue;
    }
    d.data = iter.data_ptr(i);
    d.rank = ndim;
    const auto strides = iter.strides(i);
    const int64_t esize = loom_dtype_size(d.dtype);
    if (i == 0 && staged.defined()) {
      d.dtype = to_loom_dtype(narrow, name);
      d.data = staged.data_ptr();
    }
    // TensorIterator keeps the fastest dim first; descriptors are row-major.
    for (int k = 0; k < ndim; ++k) {
      d.sizes[ndim - 1 - k] = shape[k];
      d.strides[ndim - 1 - k] = strides[k] / esize;
    }
  }
  launch(name, kernel, c10::ArrayRef<loom_tensor>(t, ntensors),
         c10::ArrayRef<loom_scalar>(s, LOOM_PW_CONST + ntensors - 1), numel,
         LOOM_PW_GRAIN, iter.device(0).index());
  if (staged.defined()) iter.output(0).copy_(staged);
}

void launch_iter(const char* name, at::TensorIteratorBase& iter, int op,
                 loom_pw_kind kind, const loom_scalar* params, at::ScalarType narrow,
                 int keep) {
  launch_iter_kernel(name, LOOM_KERNEL("pointwise.apply"), iter, op, kind, params, narrow,
                     keep);
}

void check_division(const char* name, const at::TensorIteratorBase& iter) {
  if (iter.numel() == 0) return;
  const loom_status st =
      loom_stream_synchronize(current_stream(iter.device(0).index()));
  TORCH_CHECK(st != LOOM_ERROR_INVALID_ARGUMENT, "ZeroDivisionError");
  check(st, name);
}

void for_each_overload(const std::string& base, const char* overloads,
                       const std::function<void(const std::string&)>& fn) {
  const std::string list = overloads;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(' ', pos);
    if (end == std::string::npos) end = list.size();
    std::string ovl = list.substr(pos, end - pos);
    pos = end + 1;
    if (ovl == "-") ovl.clear();
    if (!c10::Dispatcher::singleton().findSchema({"aten::" + base, ovl})) continue;
    fn(ovl.empty() ? base : base + "." + ovl);
  }
}

}  // namespace torch_loom::pw
