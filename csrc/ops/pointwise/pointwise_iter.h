// Glue shared by the elementwise adapters: boxed-argument access by name and
// the launch of the "pointwise.apply" kernel over an at::TensorIterator.
#pragma once

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>

#include "common.h"
#include "loom/kernels/pointwise.h"

namespace torch_loom::pw {

// The arguments of a boxed call, looked up by their schema names.
class Args {
 public:
  Args(const c10::FunctionSchema& schema, torch::jit::Stack* stack)
      : schema_(schema),
        stack_(stack),
        base_(stack->size() - schema.arguments().size()) {}

  const c10::IValue* find(const char* name) const;
  bool has(const char* name) const {
    const c10::IValue* v = find(name);
    return v && !v->isNone();
  }
  // A tensor argument; a Scalar becomes a wrapped-number CPU tensor, which
  // TensorIterator treats as a constant.
  at::Tensor tensor(const char* name) const;
  at::Scalar scalar(const char* name, const at::Scalar& fallback = 0) const;
  std::optional<at::Scalar> opt_scalar(const char* name) const;
  std::optional<at::Tensor> opt_tensor(const char* name) const;
  std::string str(const char* name, const char* fallback) const;
  bool flag(const char* name) const;
  // The out= argument, or undefined.
  at::Tensor out() const;
  bool inplace() const;
  size_t size() const { return schema_.arguments().size(); }

 private:
  const c10::FunctionSchema& schema_;
  torch::jit::Stack* stack_;
  size_t base_;
};

// Replaces a boxed call's arguments by its one result.
void finish(torch::jit::Stack* stack, const Args& args, const at::Tensor& r);

// Compute kind for a common dtype; throws NotImplementedError naming `op`
// for dtypes the kernels do not carry (complex).
loom_pw_kind kind_of(at::ScalarType type, const char* op);

// A parameter in the member the kind reads.
inline loom_scalar param(const at::Scalar& s, loom_pw_kind kind) {
  return kind == LOOM_PW_I64 ? scalar_i(s.toLong()) : scalar_f(s.toDouble());
}

// Raises, as the CPU does, where a Scalar the CPU casts to the compute dtype
// `type` overflows it (add/sub's alpha, pow's exponent: 1e5 for float16).
void check_fits(at::ScalarType type, const at::Scalar& value);

// A number as the CPU computes with it in dtype `type`: its iterator casts
// a CPU scalar operand (and add/sub cast alpha) to the common dtype first, so
// for float16 / bfloat16 the number is rounded to that dtype (through float,
// as c10 converts); other dtypes keep it (kernels round to their type).
double narrow_scalar(double value, at::ScalarType type);

// Launches `kernel`, which takes "pointwise.apply"'s arguments (op, kind,
// 4 params, a constant per input; loom/kernels/pointwise.h), over a built
// iterator (outputs first). CPU scalar operands travel as constants.
// `narrow`: the common dtype CPU scalar operands are cast to first
// (narrow_scalar), except input `keep` (1-based; -1: none), which the CPU's
// kernel reads in its original precision (mul and div of a float16 /
// bfloat16 tensor by a number); Undefined: no cast.
void launch_iter_kernel(const char* name, const loom_kernel_t* kernel,
                        at::TensorIteratorBase& iter, int op, loom_pw_kind kind,
                        const loom_scalar* params,
                        at::ScalarType narrow = at::ScalarType::Undefined, int keep = -1);

// launch_iter_kernel of "pointwise.apply". params: 4 values.
void launch_iter(const char* name, at::TensorIteratorBase& iter, int op,
                 loom_pw_kind kind, const loom_scalar* params,
                 at::ScalarType narrow = at::ScalarType::Undefined, int keep = -1);

// Waits for the launch and turns an integer division by zero into the
// RuntimeError the CPU backend raises.
void check_division(const char* name, const at::TensorIteratorBase& iter);

// The table kernel of pointwise.cpp for aten::<name>.<overload> (either the
// functional or the in-place form), for the unboxed kernels of
// pointwise_fast.cpp when their fast path does not apply.
class TableKernel {
 public:
  TableKernel(const char* name, const char* overload);
  // Runs on a boxed call of `op`, leaving its result on `stack`.
  void run(const c10::OperatorHandle& op, torch::jit::Stack* stack) const;

 private:
  const void* entry_;
};

// Whether "name.overload" has an unboxed kernel of its own in
// pointwise_fast.cpp (the table then does not register it).
bool has_fast_kernel(const std::string& full);

// Calls fn("name.overload") for each overload in the space-separated list
// ("-": the default overload) that aten::<base> has.
void for_each_overload(const std::string& base, const char* overloads,
                       const std::function<void(const std::string&)>& fn);

}  // namespace torch_loom::pw
